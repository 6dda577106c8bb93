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
from operator import attrgetter

from adapter.analyzers.queueing.model import DEFAULT_MAX_BATCH
from adapter.domain.frozen import fast_init
from adapter.domain.snapshot import PodMetrics, VariantView


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
    """`workload` of busy pods whose rates are known: the same sums, term by term in the pods' order."""
    total = sum(rates)
    if total <= 0:
        return Workload()

    def weighted(get: str) -> float:  # Σ λ_i·usable(x_i) / Σλ
        return sum([rate * usable(x) for rate, x in zip(rates, map(attrgetter(get), active), strict=True)]) / total

    return Workload(
        total_arrival_rps=total,
        busy_pods=len(active),
        input_tokens=weighted("avg_input_tokens"),
        output_tokens=weighted("avg_output_tokens"),
        ttft_ms=weighted("avg_ttft_s") * 1000.0,
        itl_ms=weighted("avg_itl_s") * 1000.0,
    )


def max_batch(view: VariantView, pods: Sequence[PodMetrics]) -> int:
    """N: what the pods report, else the pod template's `--max-num-seqs`, else vLLM's default 256."""
    reported = next((p.max_batch_size for p in pods if p.max_batch_size and p.max_batch_size > 0), None)
    if reported:
        return int(reported)
    if view.target is not None and view.target.vllm.max_num_seqs > 0:
        return view.target.vllm.max_num_seqs
    return DEFAULT_MAX_BATCH
