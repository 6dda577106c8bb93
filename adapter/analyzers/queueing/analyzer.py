"""The queueing-model SLO analyzer (seed 003; research §3.5–3.8): latency targets → requests/s per replica.

API (what the engine calls, once per model per cycle)::

    signal, learned = analyze(model, views, pods_by_variant, cfg=cfg, learned=learned, now_s=now_s)

- `views`: the model's variants (VA spec + scale target); `pods_by_variant`: variant name → its pods' metrics
  (`arrival_rate_rps`, `avg_ttft_s`, `avg_itl_s`, `avg_input_tokens`, `avg_output_tokens`, `max_batch_size`);
  `cfg`: the model's resolved `wva-queueing-model-config` entry; `learned`: variant name → the filter state the
  engine remembers or read back from VA status (`learned.queueingModel`, `FilterState.from_json`).
- returns a `CapacitySignal` in requests/s, or `NoSignal(model, analyzer, reason)` when the model cannot be
  sized this cycle, and every variant's filter state after this cycle (persist each with `to_json()`).

Per model, each cycle:

1. **Workload** (`slo.workload`), over busy pods (arrival rate > 0) of all variants: Σλ and arrival-weighted
   means of input and output tokens, TTFT and ITL.
2. **Learning** (when `tuningEnabled`): each variant's filter (`ekf.advance`) takes one observation per busy
   pod of that variant: a cold variant is bootstrapped from its pods, a lost filter is re-fitted.
3. **SLO** (`slo.resolve_slo`): explicit targets → inferred from the learned parameters → observed × 1.5, capped.
4. **Capacity**: per variant λ* = the throughput at the largest rate one replica sustains within the SLO
   (`QueueModel.max_rate`, upstream's `Size`), with the variant's learned parameters and the model's request
   size, in requests/s. A variant without learned parameters, or whose parameters cannot meet the SLO, is a
   zero-capacity placeholder (capacity unknown: never chosen, never free).
5. **Signal** in requests/s, with ready_v = current_v − pending_v:

       supply = Σ ready_v · λ*_v        anticipated = Σ current_v · λ*_v        demand = Σλ
       required = max(0, demand − anticipated)          spare = max(0, supply − demand)

   so that with one variant the allocation step ends at ceil(Σλ / λ*) replicas. Upstream computed each
   variant's capacity from its *desired* count, which made `required` structurally 0; capacity here comes
   only from replicas that exist. Worked example: λ* = 2.5 req/s, 2 replicas, demand 7 req/s:
   required = 7 − 5 = 2 → ceil(2 / 2.5) = 1 more → 3 = ceil(7 / 2.5).

`analysis` (DESIGN §3.2): `slo{target_ttft_ms, target_itl_ms, source}`; per variant `alpha, beta, gamma`
(ms; null when nothing is learned), `max_rps_per_replica` (λ*), `total_arrival_rps` (Σλ of the variant's own
busy pods) and `required_replicas` (ceil(total_arrival_rps / λ*): what it needs for the traffic it carries;
null when λ* is unknown); and the model's `total_arrival_rps`, `total_supply_rps`, `required_capacity`,
`spare_capacity`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from adapter.analyzers.queueing import ekf
from adapter.analyzers.queueing.model import QueueModel, RequestSize
from adapter.analyzers.queueing.slo import (
    FALLBACK_HEADROOM,
    MAX_FALLBACK_ITL_MS,
    MAX_FALLBACK_TTFT_MS,
    Slo,
    Workload,
    busy,
    resolve_slo,
    usable,
    workload,
)
from adapter.config.configmaps import QueueingConfig
from adapter.domain.accelerators import normalize_accelerator
from adapter.domain.capacity import CapacitySignal, CapacityUnit, NoSignal, VariantSupply
from adapter.domain.decision import AnalyzerName
from adapter.domain.errors import ModelError
from adapter.domain.ids import ModelKey
from adapter.domain.snapshot import PodMetrics, VariantView

__all__ = [
    "DEFAULT_MAX_BATCH",
    "FALLBACK_HEADROOM",
    "MAX_FALLBACK_ITL_MS",
    "MAX_FALLBACK_TTFT_MS",
    "Slo",
    "Workload",
    "analyze",
    "environments",
    "learn",
    "required_replicas",
    "resolve_slo",
    "workload",
]

DEFAULT_MAX_BATCH = 256
"""Batch limit N when neither the pods (`max_batch_size`) nor the pod template (`--max-num-seqs`) say."""


def required_replicas(arrival_rps: float, lambda_star_rps: float) -> int | None:
    """ceil(arrival / λ*), None when λ* is unknown (≤ 0). The 1e-9 keeps 6.0 / 2.0 at 3 despite rounding."""
    if lambda_star_rps <= 0:
        return None
    return max(0, math.ceil(arrival_rps / lambda_star_rps - 1e-9))


def environments(pods: Sequence[PodMetrics], max_batch: int) -> list[ekf.Environment]:
    """One filter observation per busy pod (latencies in ms); invalid ones are dropped by the filter."""
    return [
        ekf.Environment(
            arrival_rps=usable(p.arrival_rate_rps),
            input_tokens=usable(p.avg_input_tokens),
            output_tokens=usable(p.avg_output_tokens),
            max_batch=max_batch,
            ttft_ms=usable(p.avg_ttft_s) * 1000.0,
            itl_ms=usable(p.avg_itl_s) * 1000.0,
        )
        for p in busy(pods)
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
    if not cfg.tuning_enabled:
        return previous, ""
    outcome = ekf.advance(previous, environments(pods, _max_batch(view, pods)), now_s=now_s)
    if outcome is None:
        return None, ""
    name = view.key.name
    if outcome.started == "re-fitted" and previous is not None:
        return outcome.state, f"{name}: filter lost for {previous.lost_cycles} cycles; re-fitted"
    if outcome.rejected:
        return outcome.state, f"{name}: {outcome.rejected} observation(s) rejected ({outcome.reasons[0]})"
    return outcome.state, ""


def analyze(
    model: ModelKey,
    views: Sequence[VariantView],
    pods_by_variant: Mapping[str, Sequence[PodMetrics]],
    *,
    cfg: QueueingConfig,
    learned: Mapping[str, ekf.FilterState],
    now_s: float,
) -> tuple[CapacitySignal | NoSignal, dict[str, ekf.FilterState]]:
    """The model's signal in requests/s and every variant's filter state after this cycle (module docstring).
    Never raises on bad metrics: missing, NaN or negative values count as absent."""
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
    if load.busy_pods == 0:
        reason = "no busy pod (arrival rate 0 or unknown everywhere): no request size to size replicas for"
        return NoSignal(model, AnalyzerName.QUEUEING_MODEL, reason, {"slo": slo.to_json()}), states
    if load.output_tokens < 1:
        reason = "no busy pod reports request sizes (avg output tokens)"
        return NoSignal(model, AnalyzerName.QUEUEING_MODEL, reason, {"slo": slo.to_json()}), states

    variants: list[VariantSupply] = []
    per_variant: dict[str, dict[str, object]] = {}
    for view in views:
        pods = pods_by_variant.get(view.key.name, ())
        state = states.get(view.key.name)
        rate, why = _max_rate(state, load, slo, _max_batch(view, pods))
        if why:
            notes.append(f"{view.key.name}: {why}")
        own_arrival = sum(usable(p.arrival_rate_rps) for p in busy(pods))
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
                demand=own_arrival,
            )
        )
        per_variant[view.key.name] = {
            "alpha": round(state.alpha_ms, 6) if state else None,
            "beta": round(state.beta_ms, 8) if state else None,
            "gamma": round(state.gamma_ms, 10) if state else None,
            "max_rps_per_replica": round(rate, 6),
            "total_arrival_rps": round(own_arrival, 6),
            "required_replicas": required_replicas(own_arrival, rate),
        }
    if not any(v.per_replica_capacity > 0 for v in variants):
        reason = "no variant's capacity at the SLO is known: " + "; ".join(notes[:3])
        return NoSignal(model, AnalyzerName.QUEUEING_MODEL, reason[:400], {"slo": slo.to_json()}), states

    supply = sum(v.ready_replicas * v.per_replica_capacity for v in variants)
    anticipated = sum(v.current_replicas * v.per_replica_capacity for v in variants)
    demand = load.total_arrival_rps
    required, spare = max(0.0, demand - anticipated), max(0.0, supply - demand)
    analysis = {
        "slo": slo.to_json(),
        "variants": per_variant,
        "total_arrival_rps": round(demand, 6),
        "total_supply_rps": round(supply, 6),
        "required_capacity": round(required, 6),
        "spare_capacity": round(spare, 6),
    }
    signal = CapacitySignal(
        model=model,
        analyzer=AnalyzerName.QUEUEING_MODEL,
        unit=CapacityUnit.REQUESTS_PER_S,
        required=required,
        spare=spare,
        variants=tuple(variants),
        analysis=analysis,
        notes=tuple(notes),
    )
    return signal, states


def _max_rate(state: ekf.FilterState | None, load: Workload, slo: Slo, max_batch: int) -> tuple[float, str]:
    """λ* (throughput at the largest SLO-meeting rate), req/s per replica; 0 with a reason when unknown."""
    if state is None:
        return 0.0, "no learned parameters yet (capacity unknown)"
    try:
        model = QueueModel(
            state.params(),
            RequestSize(load.input_tokens, load.output_tokens),
            max_batch=max_batch,
            max_queue=ekf.QUEUE_TO_BATCH * max_batch,
        )
        return model.max_rate(slo.target_ttft_ms, slo.target_itl_ms).throughput_rps, ""
    except (ModelError, ValueError, ArithmeticError) as exc:
        return 0.0, f"the SLO is out of this variant's reach ({str(exc)[:160]})"
