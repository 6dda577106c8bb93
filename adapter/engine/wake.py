"""Scale-from-zero between cycles (seed 001), decided by the engine like any other decision.

The reconciler polls every `wake_interval_s` (100 ms): it asks `idle_models` which models are worth a look,
scrapes only their EPP queues, puts the sizes into a snapshot (`ModelTraffic.epp_queue_size`) and calls `wake`:

    a model whose every variant is at zero (spec and status replicas), that nothing has asked to run yet
    (no variant's previous allocation above zero), and whose EPP queue holds requests
        → its cheapest variant that may run a replica gets 1 (adapter.enforcer.scale_from_zero), the others stay

Each wake is a `VariantDecision` (path scale-from-zero) with its allocation computed as every allocation is
(`enforce.alloc_for`): the reconciler publishes it at once, writes it to VA status, and the flight recorder saves
the poll as a fixture cycle of kind `scale-from-zero` that `replay` plays back through this function. The next
full cycle sees the woken variant as "asked to run" and keeps it while it starts (fallback, last resort).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from adapter.domain.decision import AnalyzerName, CycleKind, CycleResult, VariantDecision
from adapter.domain.ids import MODEL_ORDER, ModelKey, VariantKey
from adapter.domain.snapshot import DecisionPath, DesiredAlloc, Snapshot, VariantView, variants_by_model
from adapter.enforcer import scale_from_zero
from adapter.engine.analyze import previous_alloc
from adapter.engine.enforce import alloc_for
from adapter.engine.state import EngineState


def idle_models(variants: Sequence[VariantView], state: EngineState) -> list[ModelKey]:
    """Models whose every variant is at zero and that nothing has asked to run: the ones a queued request
    would wake (their EPP queues are the only ones worth scraping)."""
    groups = variants_by_model(variants)
    return [model for model in sorted(groups, key=MODEL_ORDER) if _wakeable(groups[model], state)]


def wake(snapshot: Snapshot, state: EngineState, now_s: float) -> tuple[CycleResult, EngineState]:
    """The wakes the snapshot's EPP queues call for (module docstring); the result holds only woken VAs."""
    decisions: dict[VariantKey, VariantDecision] = {}
    allocations: dict[VariantKey, DesiredAlloc] = {}
    groups = snapshot.variants_by_model()
    for model in sorted(groups, key=MODEL_ORDER):
        views = groups[model]
        if not _wakeable(views, state):
            continue
        traffic = snapshot.models.get(model)
        pick = scale_from_zero.wake(views, queue_size=traffic.epp_queue_size if traffic else None)
        if pick is None:
            continue
        view = next(v for v in views if v.key.name == pick.variant)
        decision = VariantDecision(
            key=view.key,
            model_id=view.spec.model_id,
            desired_replicas=1,
            current_replicas=view.target.replicas if view.target else 0,
            reason=pick.reason,
            path=DecisionPath.SCALE_FROM_ZERO,
            analyzer=AnalyzerName.NONE,
            accelerator=view.accelerator,
            cost=view.spec.cost,
            metrics_available=False,
        )
        decisions[view.key] = decision
        allocations[view.key] = alloc_for(decision, previous_alloc(view, state)[0], now_s)
    result = CycleResult(now_s, decisions, {}, allocations=allocations, kind=CycleKind.SCALE_FROM_ZERO)
    return result, replace(state, allocations={**state.allocations, **allocations})


def _wakeable(views: Sequence[VariantView], state: EngineState) -> bool:
    """Idle, and no variant already asked to run (a wake in flight, or a decision the autoscaler has not
    applied yet): waking it again would only repeat that request."""
    if not scale_from_zero.is_idle(views):
        return False
    for view in views:
        previous, _ = previous_alloc(view, state)
        if previous is not None and previous.num_replicas > 0:
            return False
    return True
