"""Latency histograms of a model, and the fraction of requests within a target read from their buckets.

What the collector hands the engine (research/predictive-scaling.md §3, §4): for each model, vLLM's
cumulative bucket counters turned into rates over a window and summed over the model's pods,

    sum by (namespace, model_name, le) (rate(vllm:time_to_first_token_seconds_bucket{…}[W]))

so a histogram here is a list of (upper bound `le` in seconds, requests per second at or below it), ending
with `le = +inf`, whose rate is every request's (the `_count`). Rates, not counts: the window is carried
beside them (`ModelLatency.window_s`), and rate × window is the number of observations.

The fraction of requests within a bound
---------------------------------------
Exact where the bound is a bucket edge: the cumulative rate at that edge over the total. Between two edges
the requests of that bucket are taken to be spread uniformly (linear interpolation), which is what
Prometheus' `histogram_fraction(0, bound, …)` does with classic buckets (promql/quantile.go
`BucketFraction`; Prometheus 3.x): the first bucket starts at 0 (its upper bound is positive), and a bound
above the highest finite edge reads the rate at that edge (the +Inf bucket has no width to interpolate over).

Worked example (vLLM's default TTFT buckets have edges 1.0 and 2.5 s, none at 2 s): cumulative rates
1.0 s → 6 req/s, 2.5 s → 9 req/s, +Inf → 10 req/s. Within 1.0 s: 6/10 = 0.6 (exact). Within 2.0 s:
6 + (9 − 6)·(2.0 − 1.0)/(2.5 − 1.0) = 6 + 3·2/3 = 8 req/s, so 8/10 = 0.8 — an estimate: the truth lies
anywhere in the bracket [0.6, 0.9] the two edges give (`bracket`). Moving the edge onto the target with
vLLM's `--custom-histogram-buckets` makes it exact.

Joint attainment
----------------
An SLO request meets TTFT *and* TPOT targets; the two histograms give the two marginals only, never the
joint fraction (a slow first token and slow decoding may hit the same requests or different ones). The
Fréchet lower bound holds whatever their dependence: P(A ∩ B) ≥ 1 − P(not A) − P(not B). Example: 3 % miss
TTFT, 2 % miss TPOT ⇒ at least 95 % meet both (exactly 95 % when no request misses both, 97 % when every
TPOT miss is also a TTFT miss). See `joint_attainment_lower_bound`.

Stdlib only (domain package): the buckets are a few dozen pairs, arrays would not pay.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from operator import itemgetter

from adapter.domain.frozen import fast_init

_bound = itemgetter(0)
"""A bucket's upper bound (`le`, seconds)."""

INF = math.inf

VLLM_TTFT_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
"""vLLM's default `time_to_first_token` bucket family (research/predictive-scaling.md §3.1): no 2 s edge."""
VLLM_ITL_BUCKETS_S: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
"""vLLM's default `inter_token_latency` family, shared by `vllm:inter_token_latency_seconds` and the per-request
`vllm:request_time_per_output_token_seconds` (§3.1)."""


@dataclass(frozen=True, slots=True)
class LatencyHistogram:
    """Cumulative bucket rates of one latency over a window, summed over a model's pods.

    `buckets` is canonical: (upper bound in seconds, requests per second at or below it), bounds strictly
    increasing, the last one +inf; rates finite, >= 0 and non-decreasing, so the +inf rate is the total.
    Build one from raw (collected, recorded) pairs with `from_pairs`, which sorts and repairs them; the
    constructor only checks.
    """

    buckets: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        if not self.buckets or self.buckets[-1][0] != INF:
            raise ValueError("a latency histogram needs its +Inf bucket (the total rate) last")
        previous_le, previous_rate = -INF, 0.0
        for le, rate in self.buckets:  # comparisons with NaN are false: each `not (…)` also refuses NaN
            if not (le > previous_le and le >= 0):
                raise ValueError(
                    f"bucket bounds must be strictly increasing numbers >= 0, got {le!r} after {previous_le!r}"
                )
            if not (previous_rate <= rate < INF):
                if not 0 <= rate < INF:
                    raise ValueError(f"bucket le={le!r}: the rate must be a finite number >= 0, got {rate!r}")
                raise ValueError(f"bucket le={le!r}: cumulative rate {rate!r} below the previous {previous_rate!r}")
            previous_le, previous_rate = le, rate

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[float, float]]) -> LatencyHistogram:
        """The canonical histogram of raw (le, rate) pairs, in any order.

        Repairs, each as Prometheus does it: pairs with the same bound are summed (`coalesceBuckets`: "1" and
        "1.0" from two client libraries are one edge); a finite bucket's rate above the +inf rate is cut to it
        (`BucketFraction` caps ranks at the count), and a rate below the one of a lower bucket is raised to it
        (`histogram_quantile`'s monotonicity fix). Non-monotone rates do occur: `rate()` extrapolates each
        bucket series on its own, and its zero-point clamp differs between buckets. Raises ValueError without
        a +inf pair, or on a NaN bound, a negative bound or a rate that is not a finite number >= 0.

        Example: [(inf, 10), (1.0, 6), (2.5, 9), (1.0, 0.5)] ⇒ ((1.0, 6.5), (2.5, 9.0), (inf, 10.0)).
        """
        summed: dict[float, float] = {}
        prior_of = summed.get
        for raw_le, raw_rate in pairs:  # ~20 pairs a model, two histograms a model, 3,334 models at 10,000 VAs
            le, rate = float(raw_le), float(raw_rate)
            if not (le >= 0 and 0 <= rate < INF):  # NaN too
                if not le >= 0:
                    raise ValueError(f"a bucket bound must be a number >= 0 (seconds), got {le!r}")
                raise ValueError(f"bucket le={le!r}: the rate must be a finite number >= 0, got {rate!r}")
            prior = prior_of(le)
            summed[le] = rate if prior is None else prior + rate
        total = prior_of(INF)
        if total is None:
            raise ValueError("a latency histogram needs its +Inf bucket (the total rate)")
        out: list[tuple[float, float]] = []
        running = 0.0
        for le in sorted(summed):
            rate = summed[le]
            if rate > total:  # noqa: PLR1730 (min/max calls: a third of the loop's time)
                rate = total
            if rate > running:  # noqa: PLR1730
                running = rate
            out.append((le, running))
        return cls._canonical(tuple(out))

    @classmethod
    def _canonical(cls, buckets: tuple[tuple[float, float], ...]) -> LatencyHistogram:
        """A histogram of buckets canonical by construction (`from_pairs` sorted, capped and raised them), without
        the constructor's check of what was just established."""
        histogram = object.__new__(cls)
        object.__setattr__(histogram, "buckets", buckets)
        return histogram

    @property
    def total_rps(self) -> float:
        """Observations per second over the window (the +Inf bucket, = `_count`'s rate)."""
        return self.buckets[-1][1]

    @property
    def edges_s(self) -> tuple[float, ...]:
        """The finite bucket bounds, ascending."""
        return tuple(le for le, _ in self.buckets[:-1])

    def is_edge(self, bound_s: float) -> bool:
        """True when `bound_s` is a finite bucket bound: `fraction_within(bound_s)` is then exact. Searched in the
        buckets by their bound, without the tuple of bounds `edges_s` builds (asked for two targets a model a
        cycle: ~1 % of a decide)."""
        finite = len(self.buckets) - 1
        i = bisect_left(self.buckets, bound_s, 0, finite, key=_bound)
        return i < finite and self.buckets[i][0] == bound_s

    def rate_within(self, bound_s: float) -> float:
        """Requests per second at or below `bound_s`, interpolated linearly inside a bucket (module docstring).

        0 for a bound <= 0; the rate at the highest finite edge for a bound above it.
        """
        if math.isnan(bound_s):
            raise ValueError("the bound must be a number, got NaN")
        if bound_s <= 0:
            return 0.0
        lower_le, lower_rate = 0.0, 0.0
        for le, rate in self.buckets:
            if bound_s <= le:
                if bound_s == le:
                    return rate
                if le == INF:
                    return lower_rate
                return lower_rate + (rate - lower_rate) * (bound_s - lower_le) / (le - lower_le)
            lower_le, lower_rate = le, rate
        return lower_rate  # pragma: no cover - the +inf bucket always ends the loop

    def fraction_within(self, bound_s: float) -> float | None:
        """Fraction of observations at or below `bound_s`, in [0, 1]; None when there is no evidence (no
        observation in the window: the total rate is 0, where PromQL would answer 0/0 = NaN).

        Exact at a bucket edge, interpolated inside a bucket as `histogram_fraction(0, bound_s, …)` does.
        Example (module docstring): edges 1.0 → 6, 2.5 → 9, +Inf → 10 req/s: within 1.0 s 0.6, within 2.0 s 0.8.
        """
        total = self.total_rps
        if total <= 0:
            return None
        return min(1.0, self.rate_within(bound_s) / total)

    def bracket(self, bound_s: float) -> tuple[float, float] | None:
        """(lower, upper) bounds of the true fraction within `bound_s`: the fractions at the edges at or below
        and at or above it (equal at an edge). None without evidence. Example: edges 1.0 → 6, 2.5 → 9,
        +Inf → 10, bound 2.0 ⇒ (0.6, 0.9); above the last finite edge the upper side is 1."""
        total = self.total_rps
        if total <= 0:
            return None
        if math.isnan(bound_s):
            raise ValueError("the bound must be a number, got NaN")
        below, above = 0.0, total
        for le, rate in self.buckets:
            if le <= bound_s:
                below = rate
            if le >= bound_s:
                above = rate
                break
        return below / total, above / total


def joint_attainment_lower_bound(within_a: float | None, within_b: float | None) -> float | None:
    """Lower bound of the fraction of requests meeting two targets, from the fraction meeting each:
    max(0, 1 − (1 − a) − (1 − b)) (Fréchet; module docstring). None when either is None (no evidence).

    Example: a = 0.97 (TTFT), b = 0.98 (TPOT) ⇒ 1 − 0.03 − 0.02 = 0.95. It is tight when the misses never
    coincide; the true joint fraction is at most min(a, b) = 0.97.

    Caveat: the two marginals come from different populations over one window (TTFT is observed at a request's
    first token, TPOT when it finishes), so under a changing load they describe slightly different requests.
    """
    if within_a is None or within_b is None:
        return None
    for value in (within_a, within_b):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"a fraction must be within [0, 1], got {value!r}")
    return max(0.0, within_a + within_b - 1.0)


@fast_init
@dataclass(frozen=True, slots=True)
class ModelLatency:
    """A model's latency histograms over one window (`ModelTraffic.latency`).

    `ttft`: time to first token, `vllm:time_to_first_token_seconds` (from arrival at the vLLM frontend, so
    queueing inside the pod is included; a request still waiting for its first token is not counted yet).
    `tpot`: per-request time per output token, `vllm:request_time_per_output_token_seconds` = (last token −
    first token) / (output tokens − 1), one observation per finished request, 0 for a request of <= 1 output
    token; on pods older than vLLM 0.11 the collector falls back to `vllm:time_per_output_token_seconds`, which
    is per *token* (see adapter.metrics.queries). Either is None when the model had no such series (or its
    query failed): no evidence, never "0 % within".
    """

    window_s: float
    """The range of the `rate()` that made the histograms, seconds."""
    ttft: LatencyHistogram | None = None
    tpot: LatencyHistogram | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise ValueError(f"ModelLatency.window_s must be a positive number of seconds, got {self.window_s!r}")

    def ttft_within(self, target_s: float) -> float | None:
        return self.ttft.fraction_within(target_s) if self.ttft is not None else None

    def tpot_within(self, target_s: float) -> float | None:
        return self.tpot.fraction_within(target_s) if self.tpot is not None else None

    def attainment_lower_bound(self, *, ttft_target_s: float, tpot_target_s: float) -> float | None:
        """Lower bound of the fraction meeting both targets (`joint_attainment_lower_bound`); None unless both
        histograms have evidence."""
        return joint_attainment_lower_bound(self.ttft_within(ttft_target_s), self.tpot_within(tpot_target_s))

    def attainment_bracket(self, *, ttft_target_s: float, tpot_target_s: float) -> tuple[float, float] | None:
        """The range `attainment_lower_bound` can take wherever a bucket's requests lie inside it: the lower bound
        from the fractions at the edges at or below each target, and from those at or above (equal when both
        targets are edges). None unless both histograms have evidence. Example: TTFT within 1.0 s exact at 1.0,
        TPOT target 45 ms between the 25- and 50-ms edges with 0 % and 100 % there ⇒ (0.0, 1.0)."""
        if self.ttft is None or self.tpot is None:
            return None
        ttft, tpot = self.ttft.bracket(ttft_target_s), self.tpot.bracket(tpot_target_s)
        if ttft is None or tpot is None:
            return None
        return max(0.0, ttft[0] + tpot[0] - 1.0), max(0.0, ttft[1] + tpot[1] - 1.0)
