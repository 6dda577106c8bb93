"""Stage 3, per model: reasons, enforcer (scale-to-zero / minimum one), retention protection, bounds, status.

Input is the model's plan (stage 1) and its allocation (stage 2); a plan without a signal goes down the
fallback hierarchy of seed 002 instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from adapter.domain.capacity import CapacitySignal
from adapter.domain.decision import Action, AnalyzerName, DecisionPath, VariantDecision, reason_family
from adapter.domain.snapshot import Condition, ConditionType, DesiredAlloc, ModelTraffic, VariantView
from adapter.enforcer import fallback
from adapter.enforcer.scale_to_zero import enforce
from adapter.engine.analyze import ModelPlan, bounds, previous_alloc
from adapter.engine.state import EngineState
from adapter.optimizer.allocate import ModelAllocation

METRICS_FOUND_MESSAGE = "Saturation metrics data is available for scaling decisions"
METRICS_MISSING_MESSAGE = "No saturation metrics available - pods may not be ready or metrics not yet scraped"

_LABEL = {
    AnalyzerName.SATURATION_PERCENTAGE: "saturation-only mode",
    AnalyzerName.SATURATION_TOKEN: "V2",
    AnalyzerName.QUEUEING_MODEL: "queueing-model",
}


@dataclass(frozen=True, slots=True)
class ModelOutcome:
    held: Mapping[str, fallback.Held]
    analyzer: AnalyzerName
    analysis: Mapping[str, object]
    metrics_reason: str
    notes: tuple[str, ...] = ()
    block_reasons: tuple[str, ...] = ()
    limited: Mapping[str, str] = field(default_factory=dict)
    unavailable_reason: str = "MetricsUnavailable"
    """OptimizationReady's reason when no analyzer solution was used."""


def outcome_of(
    plan: ModelPlan, allocation: ModelAllocation | None, traffic: ModelTraffic | None, *, now_s: float
) -> ModelOutcome:
    """The model's held targets with reasons, before bounds."""
    if plan.signal is None or allocation is None:
        held = fallback.decide_without_solution(list(plan.fallback_variants), now_s=now_s, cfg=plan.s2z_cfg)
        return ModelOutcome(
            held,
            AnalyzerName.NONE,
            plan.analysis,
            plan.metrics_reason,
            plan.notes,
            unavailable_reason="AnalysisUnavailable" if plan.no_signal_reason else "MetricsUnavailable",
        )
    targets = dict(allocation.targets)
    if plan.v1_plan is not None:
        reasons = _v1_reasons(plan, targets, allocation.limited)
    else:
        reasons = _capacity_reasons(plan.signal, plan.views, targets, allocation)
    notes = list(plan.notes) + list(allocation.notes)
    enforced = enforce(
        targets,
        variants=[bounds(v) for v in plan.views],
        request_count=traffic.request_count if traffic else None,
        cfg=plan.s2z_cfg,
    )
    if enforced.applied:
        current = {v.key.name: v.target.replicas if v.target else 0 for v in plan.views}
        for name, enforced_target in enforced.targets.items():
            if enforced_target != targets[name]:
                action = Action.of(target=enforced_target, current=current[name])
                reasons[name] = _enforced_reason(plan, action, allocation, enforced.applied)
        notes.append(enforced.applied)
    held = fallback.protect_zero(
        enforced.targets, variants=list(plan.fallback_variants), now_s=now_s, cfg=plan.s2z_cfg, reasons=reasons
    )
    analysis = dict(plan.analysis)
    if plan.v1_plan is None:
        summary: dict[str, object] = {
            "optimizer": allocation.optimizer,
            "targets": dict(sorted(allocation.targets.items())),
        }
        if allocation.unmet > 0:
            summary["unmet_capacity"] = round(allocation.unmet, 3)
        analysis["allocation"] = summary
    return ModelOutcome(
        held=held,
        analyzer=plan.analyzer,
        analysis=analysis,
        metrics_reason="MetricsFound",
        notes=tuple(notes),
        block_reasons=plan.v1_plan.result.block_reasons if plan.v1_plan else (),
        limited=allocation.limited,
    )


def _enforced_reason(plan: ModelPlan, action: Action, allocation: ModelAllocation, applied: str) -> str:
    label = _LABEL.get(plan.analyzer, str(plan.analyzer))
    if plan.v1_plan is not None:
        return f"{label}: {action} (enforced: {applied})"
    return f"{label} {action} (optimizer: {allocation.optimizer}, enforced: {applied})"


def _v1_reasons(plan: ModelPlan, targets: Mapping[str, int], limited: Mapping[str, str]) -> dict[str, str]:
    """Seed 000's reason strings for the percentage-based analyzer's ±1 decisions."""
    assert plan.v1_plan is not None
    result, states, analysis = plan.v1_plan.result, plan.v1_plan.states, plan.v1_plan.analysis
    previous_of = {fb.name: fb.previous for fb in plan.fallback_variants}
    reasons: dict[str, str] = {}
    for name, s in states.items():
        prev = previous_of[name]
        if name not in result.targets:
            reasons[name] = f"saturation-only mode: holding {targets[name]} (no metrics from this variant's pods)"
            continue
        action = Action.of(target=targets[name], current=s.current_replicas)
        if result.blocked and prev is not None and targets[name] == prev.num_replicas and prev.reason:
            reasons[name] = prev.reason  # a held transition keeps its reason (and its lastUpdate)
        elif result.blocked:
            reasons[name] = f"saturation-only mode: {action} (model in transition)"
        elif name == result.scaled and action is Action.SCALE_UP:
            reasons[name] = f"saturation-only mode: {action} ({analysis.scale_up_reason})"
        elif name == result.scaled and name in limited:
            reasons[name] = f"saturation-only mode: {action} ({analysis.scale_up_reason}; {limited[name]})"
        else:
            reasons[name] = f"saturation-only mode: {action}"
    return reasons


def _capacity_reasons(
    signal: CapacitySignal, views: Sequence[VariantView], targets: Mapping[str, int], allocation: ModelAllocation
) -> dict[str, str]:
    """Reasons for capacity-signal decisions, e.g. `V2 scale-up (optimizer: cost-aware, required: 1882 tokens)`."""
    label = _LABEL.get(signal.analyzer, str(signal.analyzer))
    reasons: dict[str, str] = {}
    for view in views:
        name = view.key.name
        current = view.target.replicas if view.target else 0
        action = Action.of(target=targets[name], current=current)
        if action is Action.SCALE_UP:
            reason = (
                f"{label} scale-up (optimizer: {allocation.optimizer}, required: {_num(signal.required)} {signal.unit})"
            )
        elif action is Action.SCALE_DOWN:
            reason = (
                f"{label} scale-down (optimizer: {allocation.optimizer}, spare: {_num(signal.spare)} {signal.unit})"
            )
        elif signal.required > 0:
            reason = f"{label} no-change (required: {_num(signal.required)} {signal.unit} placed elsewhere or unmet)"
        else:
            reason = f"{label} steady state"
        if name in allocation.limited:
            reason += f"; {allocation.limited[name]}"
        reasons[name] = reason
    return reasons


def _num(value: float) -> str:
    """Capacity in a reason: whole tokens, or three significant figures for small rates."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def finish(
    view: VariantView,
    held: fallback.Held,
    *,
    outcome: ModelOutcome,
    config_warnings: tuple[str, ...],
    state: EngineState,
    now_s: float,
) -> tuple[VariantDecision, DesiredAlloc]:
    """Bounds, conditions and the persisted allocation of one VA."""
    vb = bounds(view)
    desired = fallback.clamp(held.desired_replicas, vb)
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
    elif held.path is DecisionPath.OPTIMIZER and view.key.name in outcome.limited:
        opt = Condition(ConditionType.OPTIMIZATION_READY, True, "LimitedByGpus", message)
    elif held.path is DecisionPath.OPTIMIZER and outcome.analyzer is AnalyzerName.SATURATION_PERCENTAGE:
        opt = Condition(
            ConditionType.OPTIMIZATION_READY, True, "SaturationOnlyMode", f"saturation-only decision: {message}"
        )
    elif held.path is DecisionPath.OPTIMIZER:
        opt = Condition(ConditionType.OPTIMIZATION_READY, True, "OptimizationSucceeded", message)
    else:
        opt = Condition(ConditionType.OPTIMIZATION_READY, False, outcome.unavailable_reason, message)
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
    previous, _ = previous_alloc(view, state)
    return decision, alloc_for(decision, previous, now_s)


def alloc_for(decision: VariantDecision, previous: DesiredAlloc | None, now_s: float) -> DesiredAlloc:
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


def failsafe(views: Sequence[VariantView], state: EngineState, error: str) -> dict[str, fallback.Held]:
    """Hold a model whose decision raised (a bug): previous desired, else current replicas, within bounds."""
    out = {}
    for view in views:
        previous, _ = previous_alloc(view, state)
        hold = previous.num_replicas if previous is not None else (view.target.replicas if view.target else 0)
        out[view.key.name] = fallback.Held(
            hold,
            f"Fallback: holding {hold} after an internal error deciding this model ({error})",
            DecisionPath.FALLBACK,
        )
    return out
