"""Scale-from-zero through the engine (issue 20): `engine.wake` decides a wake like any decision (typed path,
allocation remembered and persisted), only for idle models nothing has asked to run yet."""

from __future__ import annotations

from dataclasses import replace

import pytest

from adapter import engine
from adapter.domain.decision import AnalyzerName, CycleKind
from adapter.domain.snapshot import (
    Condition,
    ConditionType,
    DecisionPath,
    ModelTraffic,
    Snapshot,
    VariantStatus,
    VariantView,
)
from adapter.enforcer.scale_from_zero import WAKE_REASON

from .builders import MODEL_KEY, T0, alloc, key, spec, target


def idle(*, cheap_status: VariantStatus | None = None, dear_replicas: int = 0) -> tuple[VariantView, ...]:
    return (
        VariantView(spec("cheap", cost=1, min_replicas=0), cheap_status or VariantStatus(), target("cheap", 0)),
        VariantView(spec("dear", cost=5, min_replicas=0), VariantStatus(), target("dear", dear_replicas)),
    )


def snapshot(views: tuple[VariantView, ...], queue: float | None) -> Snapshot:
    return Snapshot(T0, views, models={MODEL_KEY: ModelTraffic(MODEL_KEY, epp_queue_size=queue)})


def test_a_queued_request_wakes_the_cheapest_variant_as_an_engine_decision() -> None:
    state = engine.EngineState()
    result, after = engine.wake(snapshot(idle(), 3.0), state, T0)
    assert result.kind is CycleKind.SCALE_FROM_ZERO
    assert list(result.decisions) == [key("cheap")]
    decision = result.decisions[key("cheap")]
    assert (decision.desired_replicas, decision.current_replicas) == (1, 0)
    assert decision.path is DecisionPath.SCALE_FROM_ZERO
    assert decision.analyzer is AnalyzerName.NONE
    assert decision.reason == f"{WAKE_REASON} (EPP queue holds 3 requests)"
    woken = result.allocations[key("cheap")]
    assert (woken.num_replicas, woken.last_update_s, woken.path) == (1, T0, DecisionPath.SCALE_FROM_ZERO)
    assert after.allocations == {key("cheap"): woken}, "remembered, so the next cycle keeps it while it starts"
    assert engine.idle_models(idle(), after) == [], "asked to run: not woken again"


@pytest.mark.parametrize(
    ("views", "queue"),
    [
        pytest.param(idle(), 0.0, id="empty-queue"),
        pytest.param(idle(), None, id="epp-did-not-answer"),
        pytest.param(idle(dear_replicas=1), 3.0, id="a-running-variant-serves-the-queue"),
        pytest.param(
            idle(cheap_status=VariantStatus(desired=alloc(1, updated=T0 - 5))), 3.0, id="already-asked-to-run"
        ),
    ],
)
def test_nothing_wakes(views: tuple[VariantView, ...], queue: float | None) -> None:
    result, after = engine.wake(snapshot(views, queue), engine.EngineState(), T0)
    assert result.decisions == {}
    assert after == engine.EngineState()


def test_idle_models_are_the_ones_worth_scraping() -> None:
    other = VariantView(replace(spec("x", min_replicas=0), model_id="other"), VariantStatus(), target("x", 2))
    assert engine.idle_models((*idle(), other), engine.EngineState()) == [MODEL_KEY]


def test_a_wake_leaves_the_vas_conditions_and_learned_state_as_they_are() -> None:
    kept = (Condition(ConditionType.METRICS_AVAILABLE, False, "MetricsMissing", "no pods", T0 - 60),)
    status = VariantStatus(desired=alloc(0, updated=T0 - 600), conditions=kept, learned={"queueingModel": {"a": 1}})
    views = idle(cheap_status=status)
    snap = snapshot(views, 2.0)
    result, _ = engine.wake(snap, engine.EngineState(), T0)
    written = engine.statuses(result, snap)[key("cheap")]
    assert written.desired == result.allocations[key("cheap")]
    assert written.applied is False
    assert written.conditions == kept
    assert written.learned == {"queueingModel": {"a": 1}}
