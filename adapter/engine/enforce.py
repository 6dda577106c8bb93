"""Stage 3, per model: reasons, enforcer (scale-to-zero / minimum one), retention protection, bounds, status.

Input is the model's plan (stage 1) and its allocation (stage 2); a plan without a signal goes down the
fallback hierarchy of seed 002 instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from adapter.domain.decision import Action, AnalyzerName, VariantDecision, reason_family
from adapter.domain.frozen import fast_init
from adapter.domain.snapshot import (
    Condition,
    ConditionType,
    DecisionPath,
    DesiredAlloc,
    ModelTraffic,
    Recommendation,
    VariantView,
)
from adapter.enforcer import fallback
from adapter.enforcer.scale_to_zero import enforce
from adapter.engine.analyze import ModelPlan, bounds, previous_alloc
from adapter.engine.state import EngineState
from adapter.optimizer.allocate import ModelAllocation

METRICS_FOUND_MESSAGE = "Saturation metrics data is available for scaling decisions"
METRICS_MISSING_MESSAGE = "No saturation metrics available - pods may not be ready or metrics not yet scraped"
NOT_WOKEN_REASON = "NotWokenFromZero"
"""OptimizationReady's reason while a variant of the model is left out because nothing wakes it from zero."""


@fast_init
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
    ready_reason: str = "OptimizationSucceeded"
    """OptimizationReady's reason on the optimizer path (the analyzer's wording)."""
    ready_prefix: str = ""


def outcome_of(
    plan: ModelPlan, allocation: ModelAllocation | None, traffic: ModelTraffic | None, *, now_s: float
) -> ModelOutcome:
    """The model's held targets with reasons, before bounds."""
    signal, result = plan.signal, plan.result
    if signal is None or result is None or result.wording is None or allocation is None:
        held = fallback.decide_without_solution(list(plan.fallback_variants), now_s=now_s, cfg=plan.scale_to_zero)
        return ModelOutcome(
            held,
            AnalyzerName.NONE,
            plan.analysis,
            plan.metrics_reason,
            plan.notes,
            unavailable_reason="AnalysisUnavailable" if plan.no_signal_reason else "MetricsUnavailable",
        )
    wording = result.wording
    targets = dict(allocation.targets)
    reasons = wording.reasons(targets, allocation.limited, allocation.optimizer)
    notes = list(plan.notes) + list(allocation.notes)
    enforced = enforce(
        targets,
        variants=[bounds(v) for v in plan.views],
        request_count=traffic.request_count if traffic else None,
        cfg=plan.scale_to_zero,
    )
    if enforced.applied:
        current = {v.key.name: v.target.replicas if v.target else 0 for v in plan.views}
        for name, enforced_target in enforced.targets.items():
            if enforced_target != targets[name]:
                action = Action.of(target=enforced_target, current=current[name])
                reasons[name] = wording.enforced(action, enforced.applied, allocation.optimizer)
        notes.append(enforced.applied)
    held = fallback.protect_zero(
        enforced.targets, variants=list(plan.fallback_variants), now_s=now_s, cfg=plan.scale_to_zero, reasons=reasons
    )
    analysis = dict(plan.analysis)
    if signal.proposal is None:  # a proposal's allocation is the proposal itself
        summary: dict[str, object] = {
            "optimizer": allocation.optimizer,
            "targets": dict(sorted(allocation.targets.items())),
        }
        if allocation.unmet > 0:
            summary["unmet_capacity"] = round(allocation.unmet, 3)
        analysis["allocation"] = summary
    return ModelOutcome(
        held=held,
        analyzer=plan.analyzer_name,
        analysis=analysis,
        metrics_reason="MetricsFound",
        notes=tuple(notes),
        block_reasons=result.held,
        limited=allocation.limited,
        ready_reason=wording.condition_reason,
        ready_prefix=wording.condition_prefix,
    )


def finish(
    view: VariantView,
    held: fallback.Held,
    *,
    outcome: ModelOutcome,
    config_warnings: tuple[str, ...],
    state: EngineState,
    now_s: float,
    recommendation: Recommendation | None = None,
    not_woken: tuple[str, ...] = (),
) -> tuple[VariantDecision, DesiredAlloc]:
    """Bounds, conditions and the persisted allocation of one VA (with the recommender's view of it, if any).
    `not_woken`: why variants of the model are left out of the allocation (adapter/engine/unwoken.py); the
    OptimizationReady condition says so (`NotWokenFromZero`) unless the configuration is invalid."""
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
    elif not_woken and held.path is DecisionPath.OPTIMIZER:
        opt = Condition(ConditionType.OPTIMIZATION_READY, True, NOT_WOKEN_REASON, message + "; " + "; ".join(not_woken))
    elif held.path is DecisionPath.OPTIMIZER and view.key.name in outcome.limited:
        opt = Condition(ConditionType.OPTIMIZATION_READY, True, "LimitedByGpus", message)
    elif held.path is DecisionPath.OPTIMIZER:
        opt = Condition(ConditionType.OPTIMIZATION_READY, True, outcome.ready_reason, outcome.ready_prefix + message)
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
        notes=outcome.notes + tuple(config_warnings) + not_woken,
        recommendation=recommendation,
    )
    previous, _ = previous_alloc(view, state)
    return decision, alloc_for(decision, previous, now_s)


def alloc_for(decision: VariantDecision, previous: DesiredAlloc | None, now_s: float) -> DesiredAlloc:
    """lastUpdate moves only when the replica count or the reason's template changes."""
    unchanged = (
        previous is not None
        and previous.num_replicas == decision.desired_replicas
        and (  # the same text is the same family: the regex only when the text moved (20,000 a cycle at 10k VAs)
            previous.reason == decision.reason or reason_family(previous.reason) == reason_family(decision.reason)
        )
    )
    last_update = previous.last_update_s if unchanged and previous is not None else now_s
    return DesiredAlloc(
        num_replicas=decision.desired_replicas,
        reason=decision.reason,
        last_run_time_s=now_s,
        last_update_s=last_update,
        accelerator=decision.accelerator,
        path=decision.path,
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
