"""The queueing-model SLO analyzer (seed 003; research §3.5–3.8): latency targets → requests/s per replica.

Per model, each cycle:

1. **Workload**, over busy pods (arrival rate > 0): arrival-rate-weighted mean input and output tokens,
   TTFT and ITL, e.g. I = Σ λ_i·I_i / Σ λ_i.
2. **Learning** (when `tuningEnabled`): each variant's filter (adapter.analyzers.queueing.ekf) is updated with
   one observation per busy pod of that variant; a cold variant is bootstrapped from its pods; a filter lost for
   3 cycles is re-fitted.
3. **SLO** (`resolve_slo`): explicit targets → inferred from the learned parameters → observed × 1.5, capped.
4. **Capacity**: per variant λ* = the largest rate one replica sustains within the SLO
   (`QueueModel.max_rate`), the throughput at λ*, in requests/s. A variant without parameters has capacity 0
   (unknown: never chosen, never free).
5. **Signal** in requests/s:

       supply = Σ ready_v · λ*_v        anticipated = Σ (ready_v + pending_v) · λ*_v      demand = Σ λ_i
       required = max(0, demand − anticipated)          spare = max(0, supply − demand)

   so that one variant ends at ceil(demand / λ*) replicas: the fault upstream had (capacity computed from the
   desired count, which made `required` structurally 0) cannot occur. Worked example: λ* = 2.5 req/s, 2 ready
   replicas, demand 7 req/s: required = 7 − 5 = 2 → ceil(2 / 2.5) = 1 more → 3 = ceil(7 / 2.5).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from adapter.analyzers.queueing import ekf
from adapter.analyzers.queueing.model import QueueModel, RequestSize
from adapter.config.configmaps import QueueingConfig
from adapter.domain.accelerators import normalize_accelerator
from adapter.domain.capacity import CapacitySignal, CapacityUnit, NoSignal, VariantSupply
from adapter.domain.decision import AnalyzerName
from adapter.domain.errors import ModelError
from adapter.domain.ids import ModelKey
from adapter.domain.snapshot import PodMetrics, VariantView

DEFAULT_MAX_BATCH = 256
FALLBACK_HEADROOM = 1.5
MAX_FALLBACK_TTFT_MS = 10_000.0
MAX_FALLBACK_ITL_MS = 500.0


@dataclass(frozen=True, slots=True)
class Workload:
    """Arrival-rate-weighted means over busy pods (zeros when none is busy)."""

    total_arrival_rps: float = 0.0
    busy_pods: int = 0
    input_tokens: float = 0.0
    output_tokens: float = 0.0
    ttft_ms: float = 0.0
    itl_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class Slo:
    target_ttft_ms: float
    target_itl_ms: float
    source: str
    """explicit | inferred | observed"""


def _ok(value: float | None) -> float:
    return value if value is not None and math.isfinite(value) and value > 0 else 0.0


def _busy(pods: Sequence[PodMetrics]) -> list[PodMetrics]:
    return [p for p in pods if _ok(p.arrival_rate_rps) > 0]


def workload(pods: Sequence[PodMetrics]) -> Workload:
    busy = _busy(pods)
    total = sum(_ok(p.arrival_rate_rps) for p in busy)
    if total <= 0:
        return Workload()

    def weighted(get: str) -> float:
        return sum(_ok(p.arrival_rate_rps) * _ok(getattr(p, get)) for p in busy) / total

    return Workload(
        total_arrival_rps=total,
        busy_pods=len(busy),
        input_tokens=weighted("avg_input_tokens"),
        output_tokens=weighted("avg_output_tokens"),
        ttft_ms=weighted("avg_ttft_s") * 1000.0,
        itl_ms=weighted("avg_itl_s") * 1000.0,
    )


def resolve_slo(cfg: QueueingConfig, learned: Sequence[ekf.FilterState], load: Workload) -> Slo | None:
    """Explicit targets; else inferred: TTFT* = k·α + (β+γ)·I and ITL* = k·α + β + γ·(I + (O+1)/2), the
    element-wise max over variants with parameters (k = sloMultiplier, default 3: ρ ≈ 1 − 1/k); else observed
    × 1.5 capped at 10 s / 500 ms. Example (k 3; α 20, β 0.08, γ 0.0002; I 512, O 128): TTFT* = 60 + 0.0802·512
    = 101.06 ms; ITL* = 60 + 0.08 + 0.0002·576.5 = 60.195 ms."""
    if cfg.explicit_slo:
        return Slo(cfg.target_ttft_ms, cfg.target_itl_ms, "explicit")
    k = cfg.slo_multiplier if cfg.slo_multiplier > 1 else 3.0
    i, o = load.input_tokens, load.output_tokens
    inferred = [
        (k * s.alpha_ms + (s.beta_ms + s.gamma_ms) * i, k * s.alpha_ms + s.beta_ms + s.gamma_ms * (i + (o + 1) / 2))
        for s in learned
    ]
    if inferred and i > 0 and o > 0:
        return Slo(max(t for t, _ in inferred), max(t for _, t in inferred), "inferred")
    if load.ttft_ms > 0 and load.itl_ms > 0:
        return Slo(
            min(load.ttft_ms * FALLBACK_HEADROOM, MAX_FALLBACK_TTFT_MS),
            min(load.itl_ms * FALLBACK_HEADROOM, MAX_FALLBACK_ITL_MS),
            "observed",
        )
    return None


def environments(pods: Sequence[PodMetrics], max_batch: int) -> list[ekf.Environment]:
    return [
        ekf.Environment(
            arrival_rps=_ok(p.arrival_rate_rps),
            input_tokens=_ok(p.avg_input_tokens),
            output_tokens=_ok(p.avg_output_tokens),
            max_batch=max_batch,
            ttft_ms=_ok(p.avg_ttft_s) * 1000.0,
            itl_ms=_ok(p.avg_itl_s) * 1000.0,
        )
        for p in _busy(pods)
    ]


def _max_batch(view: VariantView, pods: Sequence[PodMetrics]) -> int:
    reported = next((p.max_batch_size for p in pods if p.max_batch_size and p.max_batch_size > 0), None)
    if reported:
        return int(reported)
    if view.target is not None and view.target.vllm.max_num_seqs > 0:
        return view.target.vllm.max_num_seqs
    return DEFAULT_MAX_BATCH


def learn(
    view: VariantView,
    pods: Sequence[PodMetrics],
    previous: ekf.FilterState | None,
    *,
    cfg: QueueingConfig,
    now_s: float,
) -> tuple[ekf.FilterState | None, str]:
    """The variant's filter after this cycle's observations, and a note ("" when nothing to say)."""
    envs = environments(pods, _max_batch(view, pods))
    if not cfg.tuning_enabled:
        return previous, ""
    if not any(e.valid for e in envs):
        return previous, ""
    if previous is None or previous.lost_cycles >= ekf.LOST_AFTER_CYCLES:
        note = "" if previous is None else f"{view.key.name}: filter lost for {previous.lost_cycles} cycles; re-fitted"
        return ekf.initial_state(envs, now_s=now_s), note
    outcome = ekf.update(previous, envs, now_s=now_s)
    note = (
        f"{view.key.name}: {outcome.rejected} observation(s) rejected ({outcome.reasons[0]})"
        if outcome.rejected
        else ""
    )
    return outcome.state, note


def analyze(
    model: ModelKey,
    views: Sequence[VariantView],
    pods_by_variant: Mapping[str, Sequence[PodMetrics]],
    *,
    cfg: QueueingConfig,
    learned: Mapping[str, ekf.FilterState],
    now_s: float,
) -> tuple[CapacitySignal | NoSignal, dict[str, ekf.FilterState]]:
    """The model's signal in requests/s and every variant's filter state after this cycle."""
    all_pods = [p for v in views for p in pods_by_variant.get(v.key.name, ())]
    load = workload(all_pods)
    states: dict[str, ekf.FilterState] = {}
    notes: list[str] = []
    for view in views:
        state, note = learn(
            view, pods_by_variant.get(view.key.name, ()), learned.get(view.key.name), cfg=cfg, now_s=now_s
        )
        if state is not None:
            states[view.key.name] = state
        if note:
            notes.append(note)
    slo = resolve_slo(cfg, [states[v.key.name] for v in views if v.key.name in states], load)
    if slo is None:
        reason = "no SLO targets: none configured, no learned parameters and no observed TTFT/ITL"
        return NoSignal(model, AnalyzerName.QUEUEING_MODEL, reason, {"busy_pods": load.busy_pods}), states
    if load.input_tokens <= 0 and load.output_tokens < 1:
        reason = "no busy pod reports request sizes (avg input/output tokens)"
        return NoSignal(model, AnalyzerName.QUEUEING_MODEL, reason), states

    variants: list[VariantSupply] = []
    per_variant: dict[str, dict[str, object]] = {}
    for view in views:
        pods = pods_by_variant.get(view.key.name, ())
        state = states.get(view.key.name)
        rate, why = _max_rate(state, load, slo, _max_batch(view, pods))
        if why:
            notes.append(f"{view.key.name}: {why}")
        demand = sum(_ok(p.arrival_rate_rps) for p in _busy(pods))
        target = view.target
        current = target.replicas if target else 0
        pending = target.pending_replicas if target else 0
        variants.append(
            VariantSupply(
                name=view.key.name,
                cost=view.spec.cost,
                per_replica_capacity=rate,
                current_replicas=current,
                min_replicas=view.spec.min_replicas,
                max_replicas=view.spec.max_replicas,
                ready_replicas=max(0, current - pending),
                pending_replicas=pending,
                gpus_per_replica=max(1, target.gpus_per_replica) if target else 1,
                accelerator=normalize_accelerator(view.accelerator),
                demand=demand,
            )
        )
        per_variant[view.key.name] = {
            "alpha": round(state.alpha_ms, 6) if state else None,
            "beta": round(state.beta_ms, 8) if state else None,
            "gamma": round(state.gamma_ms, 10) if state else None,
            "max_rps_per_replica": round(rate, 6),
            "total_arrival_rps": round(load.total_arrival_rps, 6),
            "required_replicas": math.ceil(load.total_arrival_rps / rate - 1e-9) if rate > 0 else None,
        }
    if not any(v.per_replica_capacity > 0 for v in variants):
        reason = "no variant's capacity at the SLO is known: " + "; ".join(notes[:3])
        return NoSignal(model, AnalyzerName.QUEUEING_MODEL, reason[:400], {"slo": _slo_json(slo)}), states

    supply = sum(v.ready_replicas * v.per_replica_capacity for v in variants)
    anticipated = sum((v.ready_replicas + v.pending_replicas) * v.per_replica_capacity for v in variants)
    demand = load.total_arrival_rps
    analysis = {
        "slo": _slo_json(slo),
        "variants": per_variant,
        "total_arrival_rps": round(demand, 6),
        "total_supply_rps": round(supply, 6),
        "required_capacity": round(max(0.0, demand - anticipated), 6),
        "spare_capacity": round(max(0.0, supply - demand), 6),
    }
    signal = CapacitySignal(
        model=model,
        analyzer=AnalyzerName.QUEUEING_MODEL,
        unit=CapacityUnit.REQUESTS_PER_S,
        required=max(0.0, demand - anticipated),
        spare=max(0.0, supply - demand),
        variants=tuple(variants),
        analysis=analysis,
        notes=tuple(notes),
    )
    return signal, states


def _slo_json(slo: Slo) -> dict[str, object]:
    return {
        "target_ttft_ms": round(slo.target_ttft_ms, 3),
        "target_itl_ms": round(slo.target_itl_ms, 3),
        "source": slo.source,
    }


def _max_rate(state: ekf.FilterState | None, load: Workload, slo: Slo, max_batch: int) -> tuple[float, str]:
    """λ* (throughput at the largest SLO-meeting rate), req/s per replica; 0 with a reason when unknown."""
    if state is None:
        return 0.0, "no learned parameters yet (capacity unknown)"
    try:
        model = QueueModel(
            state.params(),
            RequestSize(max(load.input_tokens, 0.0), max(load.output_tokens, 1.0)),
            max_batch=max_batch,
            max_queue=ekf.QUEUE_TO_BATCH * max_batch,
        )
        return model.max_rate(slo.target_ttft_ms, slo.target_itl_ms).throughput_rps, ""
    except (ModelError, ValueError, ArithmeticError) as exc:
        return 0.0, f"the SLO is out of this variant's reach ({str(exc)[:160]})"
