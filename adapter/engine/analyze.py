"""Stage 1, per model: resolve the configuration, choose the analyzer, measure.

The result is a `ModelPlan`: either a capacity signal for the allocation step, or the reason there is none
(metrics unavailable, no pod reporting, nothing measurable), in which case the fallback hierarchy decides.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from adapter.analyzers import saturation as v1
from adapter.analyzers import tokens as v2
from adapter.analyzers.queueing import analyzer as qm
from adapter.analyzers.queueing import ekf
from adapter.config.configmaps import SaturationConfig, ScaleToZeroConfig
from adapter.config.engine import EngineConfig
from adapter.domain.accelerators import normalize_accelerator
from adapter.domain.capacity import CapacitySignal, CapacityUnit, NoSignal, Role, VariantSupply
from adapter.domain.decision import AnalyzerName
from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.snapshot import DesiredAlloc, PodMetrics, Snapshot, VariantView
from adapter.enforcer import fallback
from adapter.enforcer.scale_to_zero import VariantBounds
from adapter.engine.state import EngineState

LEARNED_SECTION = "queueingModel"
"""The `status.learned` section holding a variant's queueing-model filter state."""


@dataclass(frozen=True, slots=True)
class V1Plan:
    """The percentage-based analyzer's extras: its ±1 rule's result and the states it decided from."""

    analysis: v1.SaturationAnalysis
    result: v1.TargetResult
    states: Mapping[str, v1.VariantReplicaState]


@dataclass(frozen=True, slots=True)
class ModelPlan:
    model: ModelKey
    views: tuple[VariantView, ...]
    sat_cfg: SaturationConfig
    s2z_cfg: ScaleToZeroConfig
    config_warnings: tuple[str, ...]
    fallback_variants: tuple[fallback.FallbackVariant, ...]
    analyzer: AnalyzerName
    signal: CapacitySignal | None
    """None: no solution this cycle; the fallback hierarchy decides."""
    metrics_reason: str
    """MetricsFound | MetricsMissing | PrometheusError (the MetricsAvailable condition)."""
    analysis: Mapping[str, object] = field(default_factory=dict)
    no_signal_reason: str = ""
    notes: tuple[str, ...] = ()
    v1_plan: V1Plan | None = None
    not_reporting: Mapping[str, v1.NotReportingSince] = field(default_factory=dict)
    learned: Mapping[str, ekf.FilterState] = field(default_factory=dict)
    """Queueing model: every variant's filter state after this cycle (to remember and to persist)."""


def previous_alloc(view: VariantView, state: EngineState) -> tuple[DesiredAlloc | None, bool]:
    """The newer of this process's memory and the VA status; True when memory is the source."""
    remembered = state.allocations.get(view.key)
    persisted = view.status.desired
    if remembered is not None and (persisted is None or remembered.last_run_time_s >= persisted.last_run_time_s):
        return remembered, True
    return persisted, remembered is not None


def bounds(view: VariantView) -> VariantBounds:
    spec = view.spec
    return VariantBounds(spec.key.name, spec.cost, spec.min_replicas, spec.max_replicas)


def fallback_variants(views: Sequence[VariantView], state: EngineState) -> tuple[fallback.FallbackVariant, ...]:
    out = []
    for view in views:
        previous, remembered = previous_alloc(view, state)
        out.append(
            fallback.FallbackVariant(
                bounds=bounds(view),
                current_replicas=view.target.replicas if view.target else 0,
                target_resolved=view.target is not None,
                previous=previous,
                remembered=remembered,
            )
        )
    return tuple(out)


def choose_analyzer(config: EngineConfig, model: ModelKey, sat_cfg: SaturationConfig) -> tuple[AnalyzerName, list[str]]:
    """A `default` entry in wva-queueing-model-config selects the queueing model (seed 001), over
    `analyzerName` in the saturation ConfigMap."""
    if config.configmaps.has_queueing_default(model.namespace):
        return AnalyzerName.QUEUEING_MODEL, []
    if sat_cfg.token_based:
        return AnalyzerName.SATURATION_TOKEN, []
    return AnalyzerName.SATURATION_PERCENTAGE, []


def measure_model(
    model: ModelKey,
    views: Sequence[VariantView],
    *,
    snapshot: Snapshot,
    pods_by_variant: Mapping[VariantKey, list[PodMetrics]],
    state: EngineState,
    config: EngineConfig,
    now_s: float,
) -> tuple[ModelPlan, v2.TokenMemory]:
    """The model's plan, and its update to the token-based analyzer's memory (empty for other analyzers)."""
    tokens = v2.TokenMemory()
    sat_cfg, sat_warn = config.configmaps.saturation(model)
    s2z_cfg, s2z_warn = config.configmaps.scale_to_zero(model)
    analyzer, selection_warnings = choose_analyzer(config, model, sat_cfg)
    if analyzer is AnalyzerName.QUEUEING_MODEL:
        sat_warn = []  # the saturation ConfigMap does not decide this model; its problems are not this VA's
    config_warnings = tuple(dict.fromkeys(sat_warn + s2z_warn + selection_warnings))
    fb = fallback_variants(views, state)
    base = ModelPlan(
        model=model,
        views=tuple(views),
        sat_cfg=sat_cfg,
        s2z_cfg=s2z_cfg,
        config_warnings=config_warnings,
        fallback_variants=fb,
        analyzer=AnalyzerName.NONE,
        signal=None,
        metrics_reason="MetricsFound",
    )
    pods, notes, hold_reasons = valid_samples(views, pods_by_variant)
    if not snapshot.metrics_ok(model) or not pods:
        reason = "PrometheusError" if not snapshot.metrics_ok(model) else "MetricsMissing"
        why = "metrics unavailable" if reason == "PrometheusError" else "no pod reports metrics"
        return _replace(base, metrics_reason=reason, analysis={"reason": why}, notes=tuple(notes)), tokens

    if analyzer is AnalyzerName.QUEUEING_MODEL:
        return _measure_queueing(base, views, pods_by_variant, config=config, state=state, now_s=now_s), tokens
    if analyzer is AnalyzerName.SATURATION_TOKEN:
        roles = {v.key.name: Role(v.target.role) if v.target and v.target.role else Role.BOTH for v in views}
        outcome, tokens = v2.analyze(
            model,
            views,
            {v.key.name: [p for p in pods_by_variant.get(v.key, []) if _usable(p)] for v in views},
            cfg=sat_cfg,
            traffic=snapshot.models.get(model),
            roles=roles,
            memory=state.tokens,
            now_s=now_s,
        )
        if isinstance(outcome, NoSignal):
            return (
                _replace(
                    base,
                    analyzer=AnalyzerName.NONE,
                    analysis={"reason": outcome.reason},
                    no_signal_reason=outcome.reason,
                    notes=(*notes, outcome.reason),
                ),
                tokens,
            )
        return (
            _replace(
                base, analyzer=analyzer, signal=outcome, analysis=outcome.analysis, notes=(*notes, *outcome.notes)
            ),
            tokens,
        )
    return _measure_v1(base, views, pods, notes, hold_reasons=hold_reasons, state=state, now_s=now_s), tokens


def _measure_queueing(
    base: ModelPlan,
    views: Sequence[VariantView],
    pods_by_variant: Mapping[VariantKey, list[PodMetrics]],
    *,
    config: EngineConfig,
    state: EngineState,
    now_s: float,
) -> ModelPlan:
    qm_cfg, qm_warnings = config.configmaps.queueing(base.model)
    learned: dict[str, ekf.FilterState] = {}
    notes: list[str] = []
    for view in views:
        remembered = state.queueing.get(view.key)
        if remembered is None and LEARNED_SECTION in view.status.learned:
            try:  # a new leader (restart or fail-over) resumes from what the previous one persisted
                remembered = ekf.FilterState.from_json(view.status.learned[LEARNED_SECTION])
            except ValueError as exc:
                notes.append(f"{view.key.name}: persisted filter state unreadable ({exc}); learning afresh")
        if remembered is not None:
            learned[view.key.name] = remembered
    outcome, states = qm.analyze(
        base.model,
        views,
        {v.key.name: [p for p in pods_by_variant.get(v.key, []) if _usable(p)] for v in views},
        cfg=qm_cfg,
        learned=learned,
        now_s=now_s,
    )
    warnings = tuple(dict.fromkeys((*base.config_warnings, *qm_warnings)))
    if isinstance(outcome, NoSignal):
        return _replace(
            base,
            config_warnings=warnings,
            analysis={"reason": outcome.reason, **outcome.analysis},
            no_signal_reason=outcome.reason,
            notes=(*notes, outcome.reason),
            learned=states,
        )
    return _replace(
        base,
        config_warnings=warnings,
        analyzer=AnalyzerName.QUEUEING_MODEL,
        signal=outcome,
        analysis=outcome.analysis,
        notes=(*notes, *outcome.notes),
        learned=states,
    )


def _measure_v1(
    base: ModelPlan,
    views: Sequence[VariantView],
    pods: Sequence[PodMetrics],
    notes: list[str],
    *,
    hold_reasons: Sequence[str],
    state: EngineState,
    now_s: float,
) -> ModelPlan:
    costs = {v.key.name: v.spec.cost for v in views}
    analysis = v1.analyze(pods, cfg=base.sat_cfg, costs=costs)
    states: dict[str, v1.VariantReplicaState] = {}
    for view, fb in zip(views, base.fallback_variants, strict=True):
        target = view.target
        states[view.key.name] = v1.VariantReplicaState(
            name=view.key.name,
            cost=view.spec.cost,
            current_replicas=target.replicas if target else 0,
            desired_replicas=fb.previous.num_replicas if fb.previous else 0,
            pending_replicas=target.pending_replicas if target else 0,
            min_replicas=view.spec.min_replicas,
            max_replicas=view.spec.max_replicas,
            desired_since_s=fb.previous.last_update_s if fb.previous else None,
        )
    remembered = {k.name: seen for k, seen in state.not_reporting.items() if k.namespace == base.model.namespace}
    result = v1.calculate_targets(
        analysis,
        list(states.values()),
        now_s=now_s,
        transition_timeout_s=base.sat_cfg.transition_timeout_s,
        not_reporting=remembered,
        hold_reasons=hold_reasons,
    )
    proposal: dict[str, int] = dict(result.targets)
    for name, s in states.items():
        if name not in proposal:
            prev = next(fb.previous for fb in base.fallback_variants if fb.name == name)
            proposal[name] = prev.num_replicas if prev is not None and prev.num_replicas > 0 else s.current_replicas
    signal = CapacitySignal(
        model=base.model,
        analyzer=AnalyzerName.SATURATION_PERCENTAGE,
        unit=CapacityUnit.REPLICAS,
        required=float(analysis.should_scale_up),
        spare=float(analysis.scale_down_safe),
        variants=tuple(
            supply_of(view, per_replica_capacity=1.0, demand=_replica_load(pods, view.key.name, base.sat_cfg))
            for view in views
        ),
        priority=base.sat_cfg.priority,
        proposal=proposal,
        analysis=analysis.as_dict(),
    )
    return _replace(
        base,
        analyzer=AnalyzerName.SATURATION_PERCENTAGE,
        signal=signal,
        analysis=analysis.as_dict(),
        notes=(*notes, *result.notes),
        v1_plan=V1Plan(analysis, result, states),
        not_reporting=result.not_reporting,
    )


def _replica_load(pods: Sequence[PodMetrics], variant: str, cfg: SaturationConfig) -> float:
    """The percentage-based analyzer's demand in replicas' worth: each pod counts
    max(kv_cache_usage / kvCacheThreshold, queue_length / queueLengthThreshold), so a pod exactly at its
    saturation threshold is one replica of demand. Example (0.80 / 5): kv 0.4, queue 5 → max(0.5, 1.0) = 1.0."""
    load = 0.0
    for pod in pods:
        if pod.variant != variant:
            continue
        kv = (pod.kv_cache_usage or 0.0) / cfg.kv_cache_threshold if cfg.kv_cache_threshold > 0 else 0.0
        queue = (pod.queue_length or 0.0) / cfg.queue_length_threshold if cfg.queue_length_threshold > 0 else 0.0
        load += max(kv, queue)
    return load


def supply_of(view: VariantView, *, per_replica_capacity: float, demand: float = 0.0) -> VariantSupply:
    target = view.target
    current = target.replicas if target else 0
    pending = target.pending_replicas if target else 0
    return VariantSupply(
        name=view.key.name,
        cost=view.spec.cost,
        per_replica_capacity=per_replica_capacity,
        current_replicas=current,
        min_replicas=view.spec.min_replicas,
        max_replicas=view.spec.max_replicas,
        ready_replicas=max(0, current - pending),
        pending_replicas=pending,
        gpus_per_replica=max(1, target.gpus_per_replica) if target else 1,
        accelerator=normalize_accelerator(view.accelerator),
        demand=demand,
    )


def valid_samples(
    views: Sequence[VariantView], pods_by_variant: Mapping[VariantKey, list[PodMetrics]]
) -> tuple[list[PodMetrics], list[str], list[str]]:
    """The model's usable pod samples, a note per dropped one, and a hold reason per variant left with none."""
    pods: list[PodMetrics] = []
    notes: list[str] = []
    hold_reasons: list[str] = []
    for view in views:
        valid = invalid = 0
        for pod in pods_by_variant.get(view.key, []):
            if _usable(pod):
                pods.append(pod)
                valid += 1
            elif pod.has_saturation_metrics:
                invalid += 1
                notes.append(
                    f"pod {pod.pod}: dropped invalid sample (kv_cache_usage={pod.kv_cache_usage}, "
                    f"queue_length={pod.queue_length})"
                )
        if invalid and not valid:
            hold_reasons.append(f"{view.key.name}: all {invalid} pod samples invalid")
    return pods, notes, hold_reasons


def _usable(pod: PodMetrics) -> bool:
    return (
        all(value is None or (math.isfinite(value) and value >= 0) for value in (pod.kv_cache_usage, pod.queue_length))
        and pod.has_saturation_metrics
    )


def _replace(plan: ModelPlan, **changes: object) -> ModelPlan:
    return replace(plan, **changes)  # type: ignore[arg-type]
