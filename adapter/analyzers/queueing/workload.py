"""What the queueing-model analyzer observes of a model this cycle (stage 1 of `analyzer.measure`). Pure.

Only busy pods (arrival rate > 0) say anything about latency at load. Over the busy pods of all variants
together, the model's workload is Σλ and arrival-rate-weighted means, e.g. ``I = Σ λ_i·I_i / Σ λ_i``:

    pods (λ 3, I 100, TTFT 100 ms) and (λ 1, I 500, TTFT 500 ms) → Σλ = 4, I = 200, TTFT = 200 ms

Per variant: its busy pods (the filter's observations), its batch limit N (`max_batch_size` the pods report,
else the pod template's `--max-num-seqs`, else 256) and the arrival rate its own pods carry.

A metric counts when it is finite and > 0 (`usable`); missing, NaN and negative values count as absent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from adapter.analyzers.queueing.model import DEFAULT_MAX_BATCH
from adapter.domain.frozen import fast_init
from adapter.domain.snapshot import PodMetrics, VariantView

WORKLOAD_READS = frozenset(
    {"arrival_rate_rps", "avg_input_tokens", "avg_output_tokens", "avg_ttft_s", "avg_itl_s", "max_batch_size"}
)
"""The `PodMetrics` fields `observe` and the filter's observations read."""


@fast_init
@dataclass(frozen=True, slots=True)
class Workload:
    """Arrival-rate-weighted means over busy pods (zeros when none is busy); latencies in ms."""

    total_arrival_rps: float = 0.0
    busy_pods: int = 0
    input_tokens: float = 0.0
    output_tokens: float = 0.0
    ttft_ms: float = 0.0
    itl_ms: float = 0.0


@fast_init
@dataclass(frozen=True, slots=True)
class VariantLoad:
    """One variant's share of the observation."""

    name: str
    busy: tuple[PodMetrics, ...]
    """Its pods with traffic: one filter observation each."""
    max_batch: int
    arrival_rps: float
    """Σλ of its own busy pods."""


@fast_init
@dataclass(frozen=True, slots=True)
class Observed:
    model: Workload
    variants: Mapping[str, VariantLoad]
    """Every variant of the model, by name."""


def observe(views: Sequence[VariantView], pods_by_variant: Mapping[str, Sequence[PodMetrics]]) -> Observed:
    """The model's workload and every variant's load (module docstring). One pass over the pods: each pod's rate
    is read once, for its variant's Σλ, the model's Σλ and the weights of the model's means."""
    variants = {}
    everyone: list[PodMetrics] = []
    rates: list[float] = []
    for view in views:
        pods = pods_by_variant.get(view.key.name, ())
        active, own = _busy_with_rates(pods)
        variants[view.key.name] = VariantLoad(view.key.name, tuple(active), max_batch(view, pods), sum(own))
        everyone += active
        rates += own
    return Observed(_weighted_means(everyone, rates), variants)


def usable(value: float | None) -> float:
    """A metric as a number: its value when finite and > 0, else 0 (missing, NaN, negative)."""
    return value if value is not None and math.isfinite(value) and value > 0 else 0.0


def busy(pods: Sequence[PodMetrics]) -> list[PodMetrics]:
    """Pods with traffic (arrival rate > 0): the only ones that say anything about latency at load."""
    return _busy_with_rates(pods)[0]


def workload(pods: Sequence[PodMetrics]) -> Workload:
    """Σλ and the arrival-rate-weighted means over the busy pods among `pods` (module docstring)."""
    return _weighted_means(*_busy_with_rates(pods))


def _busy_with_rates(pods: Sequence[PodMetrics]) -> tuple[list[PodMetrics], list[float]]:
    """The busy pods, in order, and each one's arrival rate (`usable`, > 0)."""
    active: list[PodMetrics] = []
    rates: list[float] = []
    for pod in pods:
        rate = usable(pod.arrival_rate_rps)
        if rate > 0:
            active.append(pod)
            rates.append(rate)
    return active, rates


def _weighted_means(active: Sequence[PodMetrics], rates: Sequence[float]) -> Workload:
    """`workload` of busy pods whose rates are known: the same sums, term by term in the pods' order.

    One pass over the pods for the four means, each term `usable` written out (Σ λ_i·usable(x_i) / Σλ): four
    passes with a call of `usable` a term took ~40 calls a VA a cycle (~2 % of a decide). Summed from 0.0 in
    the pods' order, as `sum` adds floats, so every mean is the same to the bit."""
    total = sum(rates)
    if total <= 0:
        return Workload()
    isfinite = math.isfinite
    input_sum = output_sum = ttft_sum = itl_sum = 0.0
    for rate, pod in zip(rates, active, strict=True):
        x = pod.avg_input_tokens
        input_sum += rate * (x if x is not None and isfinite(x) and x > 0 else 0.0)
        x = pod.avg_output_tokens
        output_sum += rate * (x if x is not None and isfinite(x) and x > 0 else 0.0)
        x = pod.avg_ttft_s
        ttft_sum += rate * (x if x is not None and isfinite(x) and x > 0 else 0.0)
        x = pod.avg_itl_s
        itl_sum += rate * (x if x is not None and isfinite(x) and x > 0 else 0.0)
    return Workload(
        total_arrival_rps=total,
        busy_pods=len(active),
        input_tokens=input_sum / total,
        output_tokens=output_sum / total,
        ttft_ms=ttft_sum / total * 1000.0,
        itl_ms=itl_sum / total * 1000.0,
    )


def max_batch(view: VariantView, pods: Sequence[PodMetrics]) -> int:
    """N: what the pods report, else the pod template's `--max-num-seqs`, else vLLM's default 256."""
    reported = next((p.max_batch_size for p in pods if p.max_batch_size and p.max_batch_size > 0), None)
    if reported:
        return int(reported)
    if view.target is not None and view.target.vllm.max_num_seqs > 0:
        return view.target.vllm.max_num_seqs
    return DEFAULT_MAX_BATCH
