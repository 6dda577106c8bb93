"""The pure decision pipeline: `decide(snapshot, state, config, now_s) -> (CycleResult, EngineState)`.

Per model (all VAs sharing `modelID` in a namespace), in a fixed order so results never depend on the
order of variants or pods:

    resolve config ─► metrics usable? ──no──► fallback hierarchy (fallback allocation / last resort)
                            │yes
                            ▼
                 analyzer (V1 saturation) ─► targets ─► enforcer (scale-to-zero / minimum one)
                            ─► retention protection of zeros ─► bounds ─► decision + status

The engine reads no clock, file, environment or network: `now_s` and everything else come in as values, and
the next `EngineState` goes out as a value. A cycle's status output is exactly what the leader writes to
the VA (and what `replay` carries into the next cycle).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from adapter.analyzers import saturation as v1
from adapter.config.configmaps import SaturationConfig, ScaleToZeroConfig
from adapter.config.engine import EngineConfig
from adapter.domain.decision import (
    Action,
    AnalyzerName,
    CycleResult,
    DecisionPath,
    ModelAnalysis,
    VariantDecision,
    reason_family,
)
from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.snapshot import (
    Condition,
    ConditionType,
    DesiredAlloc,
    PodMetrics,
    Snapshot,
    VariantStatus,
    VariantView,
)
from adapter.enforcer import fallback
from adapter.enforcer.scale_to_zero import VariantBounds, enforce

IMPLEMENTED_ANALYZERS: frozenset[AnalyzerName] = frozenset({AnalyzerName.SATURATION_PERCENTAGE})
"""Analyzers this engine decides with; a configuration selecting another is reported, never silently replaced.
Callers that choose an analyzer up front (`simulate --policy`) refuse the ones missing here."""

METRICS_FOUND_MESSAGE = "Saturation metrics data is available for scaling decisions"
METRICS_MISSING_MESSAGE = "No saturation metrics available - pods may not be ready or metrics not yet scraped"


@dataclass(frozen=True, slots=True)
class EngineState:
    """What the engine remembers between cycles beyond VA status. Empty after a restart or fail-over."""

    allocations: Mapping[VariantKey, DesiredAlloc] = field(default_factory=dict)
    """This process's last allocation per VA: its presence makes a 'fallback allocation'."""
    not_reporting: Mapping[VariantKey, v1.NotReportingSince] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _ModelOutcome:
    held: dict[str, fallback.Held]
    analyzer: AnalyzerName
    analysis: Mapping[str, object]
    metrics_reason: str
    notes: tuple[str, ...] = ()
    block_reasons: tuple[str, ...] = ()
    not_reporting: Mapping[str, v1.NotReportingSince] = field(default_factory=dict)


def decide(
    snapshot: Snapshot, state: EngineState, config: EngineConfig, now_s: float
) -> tuple[CycleResult, EngineState]:
    decisions: dict[VariantKey, VariantDecision] = {}
    analyses: dict[ModelKey, ModelAnalysis] = {}
    allocations: dict[VariantKey, DesiredAlloc] = {}
    not_reporting: dict[VariantKey, v1.NotReportingSince] = {}
    warnings: list[str] = []
    pods_by_variant = snapshot.pods_by_variant()

    for model, views in sorted(snapshot.variants_by_model().items()):
        sat_cfg, sat_warn = config.configmaps.saturation(model)
        s2z_cfg, s2z_warn = config.configmaps.scale_to_zero(model)
        unsupported = []
        if config.configmaps.has_queueing_default(model.namespace):
            unsupported.append(
                "wva-queueing-model-config selects the queueing-model analyzer, which this version does not "
                "implement; deciding with the percentage-based saturation analyzer"
            )
        elif sat_cfg.token_based:
            unsupported.append(
                f"analyzerName {sat_cfg.analyzer_name!r} selects the token-based analyzer, which this version "
                "does not implement; deciding with the percentage-based saturation analyzer"
            )
        config_warnings = tuple(dict.fromkeys(sat_warn + s2z_warn + unsupported))
        warnings.extend(config_warnings)
        outcome = _decide_model(
            model,
            views=views,
            pods_by_variant=pods_by_variant,
            snapshot=snapshot,
            state=state,
            sat_cfg=sat_cfg,
            s2z_cfg=s2z_cfg,
            now_s=now_s,
        )
        analyses[model] = ModelAnalysis(model, outcome.analyzer, outcome.analysis)
        for view in views:
            held = outcome.held[view.key.name]
            decision, alloc = _finish(
                view, held, outcome=outcome, config_warnings=config_warnings, state=state, now_s=now_s
            )
            decisions[view.key] = decision
            allocations[view.key] = alloc
            if (seen := outcome.not_reporting.get(view.key.name)) is not None:
                not_reporting[view.key] = seen

    result = CycleResult(now_s, decisions, analyses, tuple(dict.fromkeys(warnings)))
    return result, EngineState(allocations, not_reporting)


def statuses(result: CycleResult, snapshot: Snapshot) -> dict[VariantKey, VariantStatus]:
    """The VA statuses a cycle implies (what the leader writes), keyed by VA."""
    previous = {v.key: v.status for v in snapshot.variants}
    out: dict[VariantKey, VariantStatus] = {}
    for key, decision in result.decisions.items():
        prev = previous.get(key, VariantStatus())
        out[key] = VariantStatus(
            desired=_alloc_for(decision, prev.desired, result.now_s),
            applied=decision.current_replicas == decision.desired_replicas,
            conditions=_merge_conditions(prev.conditions, decision.conditions, result.now_s),
        )
    return out


# ---- per model --------------------------------------------------------------------------------------------


def _previous(view: VariantView, state: EngineState) -> tuple[DesiredAlloc | None, bool]:
    """The newer of this process's memory and the VA status; True when memory is the source."""
    remembered = state.allocations.get(view.key)
    persisted = view.status.desired
    if remembered is not None and (persisted is None or remembered.last_run_time_s >= persisted.last_run_time_s):
        return remembered, True
    return persisted, remembered is not None


def _bounds(view: VariantView) -> VariantBounds:
    spec = view.spec
    return VariantBounds(spec.key.name, spec.cost, spec.min_replicas, spec.max_replicas)


def _fallback_variants(views: Sequence[VariantView], state: EngineState) -> list[fallback.FallbackVariant]:
    out = []
    for view in views:
        previous, remembered = _previous(view, state)
        out.append(
            fallback.FallbackVariant(
                bounds=_bounds(view),
                current_replicas=view.target.replicas if view.target else 0,
                target_resolved=view.target is not None,
                previous=previous,
                remembered=remembered,
            )
        )
    return out


def _valid_samples(
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


def _decide_model(
    model: ModelKey,
    *,
    views: Sequence[VariantView],
    pods_by_variant: Mapping[VariantKey, list[PodMetrics]],
    snapshot: Snapshot,
    state: EngineState,
    sat_cfg: SaturationConfig,
    s2z_cfg: ScaleToZeroConfig,
    now_s: float,
) -> _ModelOutcome:
    fb_variants = _fallback_variants(views, state)
    pods, notes, hold_reasons = _valid_samples(views, pods_by_variant)

    if not snapshot.metrics_ok(model) or not pods:
        reason = "PrometheusError" if not snapshot.metrics_ok(model) else "MetricsMissing"
        held = fallback.decide_without_solution(fb_variants, now_s=now_s, cfg=s2z_cfg)
        why = {"reason": "metrics unavailable" if reason == "PrometheusError" else "no pod reports metrics"}
        return _ModelOutcome(held, AnalyzerName.NONE, dict(why), reason, tuple(notes))

    costs = {v.key.name: v.spec.cost for v in views}
    analysis = v1.analyze(pods, cfg=sat_cfg, costs=costs)
    states = []
    previous_of: dict[str, DesiredAlloc | None] = {}
    for view, fb in zip(views, fb_variants, strict=True):
        previous_of[view.key.name] = fb.previous
        target = view.target
        states.append(
            v1.VariantReplicaState(
                name=view.key.name,
                cost=view.spec.cost,
                current_replicas=target.replicas if target else 0,
                desired_replicas=fb.previous.num_replicas if fb.previous else 0,
                pending_replicas=target.pending_replicas if target else 0,
                min_replicas=view.spec.min_replicas,
                max_replicas=view.spec.max_replicas,
                desired_since_s=fb.previous.last_update_s if fb.previous else None,
            )
        )
    remembered = {k.name: seen for k, seen in state.not_reporting.items() if k.namespace == model.namespace}
    result = v1.calculate_targets(
        analysis,
        states,
        now_s=now_s,
        transition_timeout_s=sat_cfg.transition_timeout_s,
        not_reporting=remembered,
        hold_reasons=hold_reasons,
    )
    notes.extend(result.notes)

    targets: dict[str, int] = dict(result.targets)
    reasons: dict[str, str] = {}
    state_of = {s.name: s for s in states}
    for s in states:
        if s.name in targets:
            action = Action.of(target=targets[s.name], current=s.current_replicas)
            prev = previous_of[s.name]
            if result.blocked and prev is not None and targets[s.name] == prev.num_replicas and prev.reason:
                reasons[s.name] = prev.reason  # a held transition keeps its reason (and its lastUpdate)
            elif result.blocked:
                reasons[s.name] = f"saturation-only mode: {action} (model in transition)"
            elif s.name == result.scaled and action is Action.SCALE_UP:
                reasons[s.name] = f"saturation-only mode: {action} ({analysis.scale_up_reason})"
            else:
                reasons[s.name] = f"saturation-only mode: {action}"
        else:
            prev = previous_of[s.name]
            hold = prev.num_replicas if prev is not None and prev.num_replicas > 0 else s.current_replicas
            targets[s.name] = hold
            reasons[s.name] = f"saturation-only mode: holding {hold} (no metrics from this variant's pods)"

    traffic = snapshot.models.get(model)
    enforced = enforce(
        targets,
        variants=[_bounds(v) for v in views],
        request_count=traffic.request_count if traffic else None,
        cfg=s2z_cfg,
    )
    if enforced.applied:
        for name, enforced_target in enforced.targets.items():
            if enforced_target != targets[name]:
                action = Action.of(target=enforced_target, current=state_of[name].current_replicas)
                reasons[name] = f"saturation-only mode: {action} (enforced: {enforced.applied})"
        notes.append(enforced.applied)
    held = fallback.protect_zero(enforced.targets, variants=fb_variants, now_s=now_s, cfg=s2z_cfg, reasons=reasons)
    return _ModelOutcome(
        held=held,
        analyzer=AnalyzerName.SATURATION_PERCENTAGE,
        analysis=analysis.as_dict(),
        metrics_reason="MetricsFound",
        notes=tuple(notes),
        block_reasons=result.block_reasons,
        not_reporting=result.not_reporting,
    )


# ---- decision and status ----------------------------------------------------------------------------------


def _finish(
    view: VariantView,
    held: fallback.Held,
    *,
    outcome: _ModelOutcome,
    config_warnings: tuple[str, ...],
    state: EngineState,
    now_s: float,
) -> tuple[VariantDecision, DesiredAlloc]:
    bounds = _bounds(view)
    desired = fallback.clamp(held.desired_replicas, bounds)
    if held.desired_replicas == 0 and desired == 0:
        desired = 0
    current = view.target.replicas if view.target else 0
    target_kind = view.spec.target_kind
    conditions = [
        Condition(
            ConditionType.TARGET_RESOLVED,
            view.target is not None,
            "TargetFound" if view.target is not None else "TargetNotFound",
            f"Scale target {target_kind} {view.spec.target_name} {'found' if view.target else 'not found'}",
        ),
        Condition(
            ConditionType.METRICS_AVAILABLE,
            outcome.metrics_reason == "MetricsFound",
            outcome.metrics_reason,
            METRICS_FOUND_MESSAGE if outcome.metrics_reason == "MetricsFound" else METRICS_MISSING_MESSAGE,
        ),
    ]
    message = f"{held.reason} (target: {desired} replicas)"
    if outcome.block_reasons:
        message += "; blocked: " + "; ".join(outcome.block_reasons)
    if config_warnings:
        opt = Condition(
            ConditionType.OPTIMIZATION_READY,
            True,
            "InvalidConfiguration",
            message + "; config: " + "; ".join(config_warnings),
        )
    elif held.path is DecisionPath.OPTIMIZER:
        opt = Condition(
            ConditionType.OPTIMIZATION_READY,
            True,
            "SaturationOnlyMode",
            f"saturation-only decision: {message}",
        )
    else:
        opt = Condition(ConditionType.OPTIMIZATION_READY, False, "MetricsUnavailable", message)
    conditions.append(opt)
    decision = VariantDecision(
        key=view.key,
        model_id=view.spec.model_id,
        desired_replicas=desired,
        current_replicas=current,
        reason=held.reason,
        path=held.path,
        analyzer=outcome.analyzer if held.path is DecisionPath.OPTIMIZER else AnalyzerName.NONE,
        accelerator=view.accelerator,
        cost=view.spec.cost,
        metrics_available=outcome.metrics_reason == "MetricsFound",
        conditions=tuple(conditions),
        notes=outcome.notes + tuple(config_warnings),
    )
    previous, _ = _previous(view, state)
    return decision, _alloc_for(decision, previous, now_s)


def _alloc_for(decision: VariantDecision, previous: DesiredAlloc | None, now_s: float) -> DesiredAlloc:
    """lastUpdate moves only when the replica count or the reason's template changes."""
    unchanged = (
        previous is not None
        and previous.num_replicas == decision.desired_replicas
        and reason_family(previous.reason) == reason_family(decision.reason)
    )
    last_update = previous.last_update_s if unchanged and previous is not None else now_s
    return DesiredAlloc(
        num_replicas=decision.desired_replicas,
        reason=decision.reason,
        last_run_time_s=now_s,
        last_update_s=last_update,
        accelerator=decision.accelerator,
    )


def _merge_conditions(old: Sequence[Condition], new: Sequence[Condition], now_s: float) -> tuple[Condition, ...]:
    """metav1 semantics: lastTransitionTime changes only when a condition's status flips."""
    old_by_type = {c.type: c for c in old}
    merged = []
    for cond in new:
        prev = old_by_type.get(cond.type)
        since = prev.last_transition_s if prev is not None and prev.status == cond.status else now_s
        merged.append(replace(cond, last_transition_s=since))
    return tuple(merged)
