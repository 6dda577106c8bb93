"""The simulated Prometheus: a time-series store of the fleet's scrapes, answering the collector's queries.

The engine must see only what the real collector would see. So the fleet is *scraped* (every
`scrape_interval_s`, into `SeriesStore`, under vLLM's and the EPP's metric names), and each query of a cycle
(`adapter.metrics.queries.build_queries`) is answered from the stored samples the way Prometheus evaluates it.
The answers have the shape of `data.result` of an instant query, `[{"metric": {labels}, "value": [t, "0.5"]}]`,
and go through the collector's own `assemble` (digest → join) into the `Collection` the reconciler turns into
the engine's `Snapshot` (`adapter.app.simulate` wires it; this package may not import `adapter.metrics`).

What is answered, by query name (the values of `QueryName`), at evaluation time t over a window w:

| query                      | series (per pod unless said)                       | evaluation                         |
|----------------------------|----------------------------------------------------|------------------------------------|
| kv_cache_usage             | vllm:kv_cache_usage_perc                           | max_over_time[w]                   |
| queue_length               | vllm:num_requests_waiting                          | max_over_time[w]                   |
| num_requests_running       | vllm:num_requests_running                          | instant (latest sample)            |
| cache_config_info          | vllm:cache_config_info{num_gpu_blocks,block_size}  | instant, value 1                   |
| avg_input/output_tokens    | vllm:request_{prompt,generation}_tokens_sum/_count | rate(sum[w]) / rate(count[w])      |
| prefix_cache_hit_rate      | vllm:prefix_cache_{hits,queries}_total             | rate / rate (no cache: 0)          |
| avg_ttft, avg_itl          | vllm:time_to_first_token_seconds, inter_token_…    | rate(sum[w]) / rate(count[w])      |
| scheduler_dispatch_rate    | llm_d_epp_scheduler_attempts_total{pod_name}       | rate[w]                            |
| scheduler_queue_size/bytes | llm_d_epp_flow_control_queue_{size,bytes} (model)  | instant                            |
| model_request_count        | vllm:request_success_total, summed per model       | increase[retention] (gone pods too)|
| ttft_histogram             | vllm:time_to_first_token_seconds_bucket{le}        | rate[w], summed by le (gone pods)  |
| tpot_histogram             | vllm:request_time_per_output_token_seconds_bucket  | rate[w], summed by le (gone pods)  |

The two histogram answers are model-level, one element per bucket edge (`le` written as prometheus_client
writes it: `0.05`, `1.0`, `+Inf`): each pod's bucket series is a rate over the window, extrapolated on its
own (`extrapolated_deltas`, the same rule column by column), then summed per edge over the pods with at least
two samples in the window, pods that are gone included, as with a real Prometheus.

Prometheus semantics kept: a range selects samples in (t − w, t] (Prometheus 3's left-open ranges);
`rate`/`increase` need two samples and extrapolate as Prometheus' `extrapolatedRate` does (below); a ratio
whose denominator did not move is NaN (0/0) or +Inf, which the collector drops and counts, exactly as it
does with a real Prometheus; an instant selector reads the newest sample within the 5-minute look-back of a
series whose target is still scraped (a pod that is gone is stale at once, as with Prometheus' staleness
markers), while range functions still see a gone pod's samples inside their window.

`extrapolatedRate` (Prometheus promql/functions.go), for samples (t₁, v₁) … (tₙ, vₙ) in the range [s, e]:

    Δ = vₙ − v₁ (+ counter resets)      sampled = tₙ − t₁       avg = sampled / (n − 1)
    to_start = t₁ − s  (for a counter, at most sampled·v₁/Δ: it cannot extrapolate below zero)
    to_end   = e − tₙ
    each side extends the interval by its distance when that is < 1.1·avg, else by avg / 2
    increase = Δ · extended / sampled          rate = increase / (e − s)

Worked example: scrapes every 15 s at t = 15, 30, 45, 60 with a counter 0, 30, 60, 90, evaluated at t = 60
over 1m: samples in (0, 60] are all four; Δ = 90, sampled = 45, avg = 15; to_start = 15 but the zero bound
gives 45·0/90 = 0, so + 0; to_end = 0 < 16.5, so + 0 ⇒ increase = 90, rate = 90/60 = 1.5 per second.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from adapter.sim.fleet import PodScrape
from adapter.sim.replica import TPOT_BUCKETS_S, TTFT_BUCKETS_S, ScrapeSample

LOOKBACK_S = 300.0
"""Prometheus' default look-back delta for instant selectors."""
EPP_MODEL_LABEL = "wva_model_id"
"""The synthetic label the collector's EPP queries put the effective model into (adapter.metrics.queries)."""

Vector = list[dict[str, Any]]
"""An instant vector as `data.result` of Prometheus' HTTP API carries it."""


@dataclass(slots=True)
class _Series:
    """One pod's scraped samples, oldest first."""

    variant: str
    num_gpu_blocks: int
    block_size: int
    samples: deque[tuple[float, ScrapeSample]]
    bucket_reset: bool = False
    """True once a histogram bucket of this pod went down between two scrapes (a counter reset): its bucket
    rates then take the general path that adds the reset values (`extrapolated_deltas`)."""


def _fmt(value: float) -> str:
    """A sample value as Prometheus' JSON writes it: `"0.5"`, `"NaN"`, `"+Inf"`."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def extrapolated_delta(points: Sequence[tuple[float, float]], *, start_s: float, end_s: float, counter: bool) -> float:
    """Prometheus' `increase` over [start_s, end_s] from ≥ 2 samples (see the module docstring).

    Example: [(15, 0), (30, 30), (45, 60), (60, 90)] over [0, 60] ⇒ 90.0.
    """
    if len(points) < 2:
        raise ValueError("extrapolation needs at least two samples")
    first_t, first_v = points[0]
    last_t, last_v = points[-1]
    delta = last_v - first_v
    if counter:
        previous = first_v
        for _, value in points[1:]:
            if value < previous:  # a reset: the counter restarted from zero
                delta += previous
            previous = value
    sampled = last_t - first_t
    if sampled <= 0:
        raise ValueError("extrapolation needs samples at two different times")
    average = sampled / (len(points) - 1)
    to_start = first_t - start_s
    to_end = end_s - last_t
    if counter and delta > 0 and first_v >= 0:
        to_start = min(to_start, sampled * (first_v / delta))
    threshold = average * 1.1
    extended = sampled
    extended += to_start if to_start < threshold else average / 2
    extended += to_end if to_end < threshold else average / 2
    return delta * extended / sampled


def extrapolated_deltas(
    times_s: Sequence[float], values: npt.NDArray[np.float64], *, start_s: float, end_s: float
) -> npt.NDArray[np.float64]:
    """`extrapolated_delta(counter=True)` of several counters scraped at the same instants, one per column of
    `values` (rows = the samples at `times_s`, oldest first): the buckets of one histogram series.

    Example: times [15, 30, 45, 60], columns (0, 30, 60, 90) and (0, 15, 30, 45) over [0, 60] ⇒ [90, 45].
    """
    n = len(times_s)
    if n < 2 or values.shape[0] != n:
        raise ValueError("extrapolation needs at least two samples, one row per sample time")
    sampled = times_s[-1] - times_s[0]
    if sampled <= 0:
        raise ValueError("extrapolation needs samples at two different times")
    first = values[0]
    delta = values[-1] - first
    steps = np.diff(values, axis=0)
    if (steps < 0).any():  # a reset: the counter restarted from zero (adds the value it had before)
        delta = delta + np.where(steps < 0, values[:-1], 0.0).sum(axis=0)
    average = sampled / (n - 1)
    threshold = average * 1.1
    to_start = np.full(first.shape, times_s[0] - start_s)
    clamp = (delta > 0) & (first >= 0)
    if clamp.any():  # a counter cannot extrapolate below zero
        zero_at = sampled * (first / np.where(clamp, delta, 1.0))  # as the scalar rule: a tie at the threshold
        to_start = np.where(clamp, np.minimum(to_start, zero_at), to_start)
    to_end = end_s - times_s[-1]
    extended = sampled + np.where(to_start < threshold, to_start, average / 2)
    extended += to_end if to_end < threshold else average / 2
    result: npt.NDArray[np.float64] = delta * extended / sampled
    return result


def monotone_increases(
    first: tuple[float, Sequence[float]],
    last: tuple[float, Sequence[float]],
    n: int,
    *,
    start_s: float,
    end_s: float,
) -> list[float]:
    """`extrapolated_deltas` of counters that did not reset inside the range: only the first and the last of
    the `n` samples matter then (Δ = last − first). The simulated Prometheus' fast path: a simulated pod's
    counters never restart. Example: (15, [0, 0]), (60, [90, 45]), n = 4 over [0, 60] ⇒ [90, 45]."""
    (t0, v0), (t1, v1) = first, last
    sampled = t1 - t0
    if n < 2 or sampled <= 0:
        raise ValueError("extrapolation needs at least two samples at two different times")
    average = sampled / (n - 1)
    threshold = average * 1.1
    to_end = end_s - t1
    end_part = to_end if to_end < threshold else average / 2
    to_start_0 = t0 - start_s
    out = []
    for a, b in zip(v0, v1, strict=True):
        delta = b - a
        to_start = to_start_0
        if delta > 0 and a >= 0:
            to_start = min(to_start, sampled * (a / delta))
        extended = sampled + (to_start if to_start < threshold else average / 2) + end_part
        out.append(delta * extended / sampled)
    return out


def _went_down(before: ScrapeSample, after: ScrapeSample) -> bool:
    return any(b < a for a, b in zip(before.ttft_buckets, after.ttft_buckets, strict=True)) or any(
        b < a for a, b in zip(before.tpot_buckets, after.tpot_buckets, strict=True)
    )


def _le(bound_s: float) -> str:
    """A bucket bound as prometheus_client writes it: `0.05`, `1.0`, `2560.0`, `+Inf`."""
    return "+Inf" if math.isinf(bound_s) else repr(float(bound_s))


_TTFT_LE = tuple(_le(b) for b in (*TTFT_BUCKETS_S, math.inf))
_TPOT_LE = tuple(_le(b) for b in (*TPOT_BUCKETS_S, math.inf))


def _ratio(numerator: float, denominator: float) -> float:
    """Float division as PromQL does it: x/0 is ±Inf, 0/0 NaN."""
    if denominator == 0:
        if numerator == 0:
            return math.nan
        return math.inf if numerator > 0 else -math.inf
    return numerator / denominator


_GAUGE: Mapping[str, Callable[[ScrapeSample], float]] = {
    "kv_cache_usage": lambda s: s.kv_cache_usage,
    "queue_length": lambda s: float(s.queue_length),
}
_HISTOGRAM_MEAN: Mapping[str, tuple[Callable[[ScrapeSample], float], Callable[[ScrapeSample], float]]] = {
    # vLLM observes prompt and generation lengths once per finished request
    "avg_input_tokens": (lambda s: float(s.prompt_tokens), lambda s: float(s.successes)),
    "avg_output_tokens": (lambda s: float(s.generation_tokens), lambda s: float(s.successes)),
    "avg_ttft": (lambda s: s.ttft_sum_s, lambda s: float(s.ttft_count)),
    "avg_itl": (lambda s: s.itl_sum_s, lambda s: float(s.itl_count)),
    # no prefix caching in the simulated replica: hits stay 0 while queried prompt tokens grow
    "prefix_cache_hit_rate": (lambda _: 0.0, lambda s: float(s.prompt_tokens)),
}
_BUCKETS: Mapping[str, tuple[Callable[[ScrapeSample], tuple[int, ...]], tuple[str, ...]]] = {
    "ttft_histogram": (lambda s: s.ttft_buckets, _TTFT_LE),
    "tpot_histogram": (lambda s: s.tpot_buckets, _TPOT_LE),
}
ANSWERED_QUERIES = frozenset(
    {
        *_GAUGE,
        *_HISTOGRAM_MEAN,
        *_BUCKETS,
        "num_requests_running",
        "cache_config_info",
        "scheduler_dispatch_rate",
        "scheduler_queue_size",
        "scheduler_queue_bytes",
        "model_request_count",
    }
)
"""Every query name `SeriesStore.answer` evaluates (tests check it covers every `QueryName`)."""


class SeriesStore:
    """Prometheus' TSDB for one simulated model: scraped by the fleet (`ScrapeSink`), queried by name.

    `keep_s` bounds memory: samples older than the longest window any query uses are dropped (the default,
    15 minutes, covers the 10-minute scale-to-zero retention window of `model_request_count`).
    """

    def __init__(self, *, namespace: str, model_id: str, keep_s: float = 900.0) -> None:
        if keep_s <= 0:
            raise ValueError(f"keep_s must be > 0, got {keep_s}")
        self.namespace = namespace
        self.model_id = model_id
        self.keep_s = keep_s
        self._series: dict[str, _Series] = {}
        self._epp: deque[tuple[float, int, int]] = deque()
        self._last_round_s = -math.inf
        self._present: frozenset[str] = frozenset()
        self.rounds = 0

    # ---------------------------------------------------------------- ingestion (the scrape)

    def scrape(self, t_s: float, pods: Sequence[PodScrape], *, epp_queue_size: int, epp_queue_bytes: int) -> None:
        for pod in pods:
            series = self._series.get(pod.pod)
            if series is None:
                series = _Series(pod.variant, pod.num_gpu_blocks, pod.block_size, deque())
                self._series[pod.pod] = series
            elif not series.bucket_reset:
                series.bucket_reset = _went_down(series.samples[-1][1], pod.sample)
            series.samples.append((t_s, pod.sample))
        self._epp.append((t_s, epp_queue_size, epp_queue_bytes))
        self._present = frozenset(p.pod for p in pods)
        self._last_round_s = t_s
        self.rounds += 1
        self._expire(t_s - self.keep_s)

    def _expire(self, cutoff_s: float) -> None:
        gone = []
        for name, series in self._series.items():
            samples = series.samples
            while samples and samples[0][0] <= cutoff_s:
                samples.popleft()
            if not samples:
                gone.append(name)
        for name in gone:
            del self._series[name]
        while len(self._epp) > 1 and self._epp[0][0] <= cutoff_s:
            self._epp.popleft()

    # ---------------------------------------------------------------- selectors

    def _window(self, series: _Series, now_s: float, window_s: float) -> list[tuple[float, ScrapeSample]]:
        start = now_s - window_s
        return [(t, s) for t, s in series.samples if start < t <= now_s]

    def _instant(self, name: str, series: _Series, now_s: float) -> ScrapeSample | None:
        if name not in self._present or now_s < self._last_round_s:
            return None
        for t, sample in reversed(series.samples):
            if t <= now_s:
                return sample if now_s - t <= LOOKBACK_S else None
        return None

    def latest(self, field: str, now_s: float) -> dict[str, tuple[str, float]]:
        """`{pod: (variant, value)}` of an instant gauge selector (`kv_cache_usage` or `queue_length`) over
        the pods scraped now: what a Prometheus-adapter or KEDA Prometheus trigger reads for the baselines."""
        read = _GAUGE[field]
        out: dict[str, tuple[str, float]] = {}
        for name, series in self._series.items():
            sample = self._instant(name, series, now_s)
            if sample is not None:
                out[name] = (series.variant, read(sample))
        return out

    # ---------------------------------------------------------------- query evaluation

    def _pod_labels(self, pod: str) -> dict[str, str]:
        return {"namespace": self.namespace, "model_name": self.model_id, "pod": pod}

    def _element(self, labels: dict[str, str], value: float, now_s: float) -> dict[str, Any]:
        return {"metric": labels, "value": [now_s, _fmt(value)]}

    def answer(self, query: str, *, now_s: float, window_s: float = 60.0) -> Vector:
        """The instant vector query `query` (a `QueryName` value) evaluates to at `now_s`; `window_s` is its
        range (for `model_request_count`, the retention window). Unknown names raise KeyError."""
        if query not in ANSWERED_QUERIES:
            raise KeyError(f"the simulated Prometheus does not answer {query!r}; it answers {sorted(ANSWERED_QUERIES)}")
        if query in _GAUGE:
            return self._max_over_time(_GAUGE[query], now_s, window_s)
        if query in _HISTOGRAM_MEAN:
            numerator, denominator = _HISTOGRAM_MEAN[query]
            return self._rate_ratio(numerator, denominator, now_s, window_s)
        if query == "num_requests_running":
            return self._instant_vector(lambda s: float(s.running), now_s)
        if query == "cache_config_info":
            return self._cache_config(now_s)
        if query == "scheduler_dispatch_rate":
            return self._dispatch_rate(now_s, window_s)
        if query in ("scheduler_queue_size", "scheduler_queue_bytes"):
            return self._epp_queue(query == "scheduler_queue_size", now_s)
        if query in _BUCKETS:
            read_buckets, le_labels = _BUCKETS[query]
            return self._bucket_rates(read_buckets, le_labels, now_s, window_s)
        return self._request_count(now_s, window_s)

    def _max_over_time(self, read: Callable[[ScrapeSample], float], now_s: float, window_s: float) -> Vector:
        out = []
        for name, series in sorted(self._series.items()):
            points = self._window(series, now_s, window_s)
            if points:
                out.append(self._element(self._pod_labels(name), max(read(s) for _, s in points), now_s))
        return out

    def _instant_vector(self, read: Callable[[ScrapeSample], float], now_s: float) -> Vector:
        out = []
        for name, series in sorted(self._series.items()):
            sample = self._instant(name, series, now_s)
            if sample is not None:
                out.append(self._element(self._pod_labels(name), read(sample), now_s))
        return out

    def _cache_config(self, now_s: float) -> Vector:
        out = []
        for name, series in sorted(self._series.items()):
            if self._instant(name, series, now_s) is not None:
                labels = self._pod_labels(name)
                labels["num_gpu_blocks"] = str(series.num_gpu_blocks)
                labels["block_size"] = str(series.block_size)
                out.append(self._element(labels, 1.0, now_s))
        return out

    def _increase(
        self,
        points: Sequence[tuple[float, ScrapeSample]],
        read: Callable[[ScrapeSample], float],
        now_s: float,
        w: float,
    ) -> float:
        return extrapolated_delta([(t, read(s)) for t, s in points], start_s=now_s - w, end_s=now_s, counter=True)

    def _rate_ratio(
        self,
        numerator: Callable[[ScrapeSample], float],
        denominator: Callable[[ScrapeSample], float],
        now_s: float,
        window_s: float,
    ) -> Vector:
        out = []
        for name, series in sorted(self._series.items()):
            points = self._window(series, now_s, window_s)
            if len(points) < 2:
                continue
            num = self._increase(points, numerator, now_s, window_s) / window_s
            den = self._increase(points, denominator, now_s, window_s) / window_s
            out.append(self._element(self._pod_labels(name), _ratio(num, den), now_s))
        return out

    def _dispatch_rate(self, now_s: float, window_s: float) -> Vector:
        out = []
        for name, series in sorted(self._series.items()):
            points = self._window(series, now_s, window_s)
            if len(points) < 2:
                continue
            rate = self._increase(points, lambda s: float(s.arrivals), now_s, window_s) / window_s
            labels = {"namespace": self.namespace, "pod_name": name, EPP_MODEL_LABEL: self.model_id}
            out.append(self._element(labels, rate, now_s))
        return out

    def _epp_queue(self, size: bool, now_s: float) -> Vector:
        for t, queue_size, queue_bytes in reversed(self._epp):
            if t <= now_s:
                if now_s - t > LOOKBACK_S:
                    return []
                labels = {"namespace": self.namespace, EPP_MODEL_LABEL: self.model_id}
                return [self._element(labels, float(queue_size if size else queue_bytes), now_s)]
        return []

    def _request_count(self, now_s: float, window_s: float) -> Vector:
        total = 0.0
        found = False
        for series in self._series.values():
            points = self._window(series, now_s, window_s)
            if len(points) >= 2:
                total += self._increase(points, lambda s: float(s.successes), now_s, window_s)
                found = True
        if not found:
            return []
        labels = {"namespace": self.namespace, "model_name": self.model_id}
        return [self._element(labels, total, now_s)]

    def _bucket_rates(
        self,
        read: Callable[[ScrapeSample], tuple[int, ...]],
        le_labels: tuple[str, ...],
        now_s: float,
        window_s: float,
    ) -> Vector:
        """`sum by (namespace, model_name, le) (rate(<histogram>_bucket[w]))` over every pod series."""
        total: list[float] | None = None
        start_s = now_s - window_s
        for series in self._series.values():
            if series.bucket_reset:
                points = self._window(series, now_s, window_s)
                if len(points) < 2:
                    continue
                rows = np.array([read(s) for _, s in points], dtype=np.float64)
                times = [t for t, _ in points]
                increase = list(extrapolated_deltas(times, rows, start_s=start_s, end_s=now_s))
            else:  # only the first and last samples in the window and their count: scan from the newest
                n, last, first = 0, None, None
                for point in reversed(series.samples):
                    if point[0] <= start_s:
                        break
                    if point[0] <= now_s:
                        n += 1
                        first = point
                        last = last or point
                if n < 2 or first is None or last is None:
                    continue
                increase = monotone_increases(
                    (first[0], read(first[1])), (last[0], read(last[1])), n, start_s=start_s, end_s=now_s
                )
            total = increase if total is None else [a + b for a, b in zip(total, increase, strict=True)]
        if total is None:
            return []
        labels = {"namespace": self.namespace, "model_name": self.model_id}
        return [
            self._element({**labels, "le": le}, value / window_s, now_s)
            for le, value in zip(le_labels, total, strict=True)
        ]
