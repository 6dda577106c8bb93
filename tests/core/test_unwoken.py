"""A variant asked to leave zero replicas that nothing wakes (adapter/engine/unwoken.py): the transitions one by one,
then through the engine on a virtual clock — a strong variant at zero behind a plain HPA, which never scales a
target from zero, while the cheap variant's HPA follows every decision."""

from __future__ import annotations

from dataclasses import replace

import pytest

from adapter.config.configmaps import QUEUEING_CM
from adapter.config.engine import EngineConfig
from adapter.domain.capacity import CapacitySignal, CapacityUnit, VariantSupply
from adapter.domain.decision import AnalyzerName, VariantDecision
from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.snapshot import DecisionPath, VariantView
from adapter.engine import unwoken
from adapter.engine.unwoken import RETRY_S, WAKE_TIMEOUT_S, Unwoken
from tests.core.builders import CONTROLLER_NS, T0, condition, configset, spec, target
from tests.predictive.test_analyzer import A100, H100, MODEL, STEP_S, PredictiveFleet, busy_pods

KEY = VariantKey("llm", "h100")


def view(replicas: int, *, spec_replicas: int | None = None) -> VariantView:
    t = replace(target("h100", replicas), spec_replicas=replicas if spec_replicas is None else spec_replicas)
    return VariantView(spec=spec("h100", accelerator="H100", min_replicas=0), target=t)


def decided(n: int) -> dict[VariantKey, VariantDecision]:
    decision = VariantDecision(KEY, "m", n, 0, "r", DecisionPath.OPTIMIZER, AnalyzerName.PREDICTIVE)
    return {KEY: decision}


NOW = 1000.0


@pytest.mark.parametrize(
    ("before", "at", "asked", "after"),
    [
        pytest.param(None, view(0), 2, Unwoken(NOW), id="first-ask-starts-the-clock"),
        pytest.param(Unwoken(NOW - 60), view(0), 2, Unwoken(NOW - 60), id="asked-within-the-timeout"),
        pytest.param(
            Unwoken(NOW - WAKE_TIMEOUT_S), view(0), 1, Unwoken(NOW - WAKE_TIMEOUT_S, NOW + RETRY_S), id="not-woken"
        ),
        pytest.param(Unwoken(NOW - 60), view(0), 0, None, id="no-longer-asked-forgotten"),
        pytest.param(Unwoken(NOW - 60), view(1), 2, None, id="woken-forgotten"),
        pytest.param(Unwoken(NOW - 60), view(0, spec_replicas=1), 2, None, id="spec-moved-forgotten"),
        pytest.param(Unwoken(NOW - 300, NOW + 1), view(0), 0, Unwoken(NOW - 300, NOW + 1), id="blocked-stays"),
        pytest.param(Unwoken(NOW - 900, NOW), view(0), 3, None, id="block-ran-out-offered-again"),
        pytest.param(Unwoken(NOW - 300, NOW + 1), view(2), 0, None, id="blocked-but-woken-forgotten"),
    ],
)
def test_advance(before: Unwoken | None, at: VariantView, asked: int, after: Unwoken | None) -> None:
    state = {} if before is None else {KEY: before}
    out = unwoken.advance(state, [at], decided(asked), NOW)
    assert out.get(KEY) == after


def test_a_view_without_target_or_decision_is_never_asked() -> None:
    no_target = VariantView(spec=spec("h100", min_replicas=0), target=None)
    assert unwoken.advance({}, [no_target], decided(3), NOW) == {}
    assert unwoken.advance({}, [view(0)], {}, NOW) == {}


def test_restrict_bounds_only_the_named_variants_and_their_proposal() -> None:
    free = VariantSupply("l4", 0.8, 2.0, 1, min_replicas=1, max_replicas=12)
    shut = VariantSupply("h100", 4.0, 9.0, 0, min_replicas=1, max_replicas=4)
    signal = CapacitySignal(
        ModelKey("llm", "m"),
        AnalyzerName.PREDICTIVE,
        CapacityUnit.REQUESTS_PER_S,
        5.0,
        0.0,
        (free, shut),
        proposal={"l4": 2, "h100": 1},
    )
    out = unwoken.restrict(signal, {"h100": Unwoken(0.0, 1.0)})
    assert out.variants == (free, replace(shut, min_replicas=0, max_replicas=0))
    assert out.proposal == {"l4": 2, "h100": 0}
    assert unwoken.restrict(signal, {}) is signal


# ---- through the engine --------------------------------------------------------------------------------------------


def hpa_fleet(allocation: str = "") -> PredictiveFleet:
    """An A100 serving 20 req/s alone and an H100 at zero, the cheaper capacity per request by their profiles, so
    the analyzer's choice is to start it; nothing here wakes it (a plain HPA), while the A100's follows.
    `allocation`: extra lines of the saturation ConfigMap (the exact program, the GPU limiter)."""
    queueing = "targetTTFT: 2000\ntargetITL: 100\nstartupTime: 5m\nacceleratorProfiles:\n"
    queueing += f"  A100: {{{A100}}}\n  H100: {{{H100}}}\n"
    config = EngineConfig(
        configmaps=configset(
            saturation=f"analyzerName: predictive\n{allocation}",
            extra=[(CONTROLLER_NS, QUEUEING_CM, {"default": queueing})],
        )
    )
    return PredictiveFleet(
        specs=[
            spec("a100", accelerator="A100", cost=2.5, min_replicas=1, max_replicas=12),
            spec("h100", accelerator="H100", cost=4.0, min_replicas=0, max_replicas=4),
        ],
        config=config,
        replicas={"a100": 1, "h100": 0},
    )


def run(fleet: PredictiveFleet, cycles: range, rate_rps: float = 20.0) -> list[dict[str, int]]:
    """Each cycle's allocation; the A100's HPA reaches each decision at once, the H100 stays at zero."""
    out = []
    for i in cycles:
        fleet.cycle(T0 + STEP_S * i, busy_pods("a100", fleet.replicas["a100"], rate_rps))
        fleet.replicas["a100"] = fleet.ready["a100"] = fleet.desired()["a100"]
        assert fleet.last is not None
        out.append(dict(fleet.last.analyses[MODEL].analysis["allocation"]["targets"]))
    return out


@pytest.mark.parametrize(
    ("allocation", "rate_rps", "asked", "left_out"),
    [
        pytest.param("", 20.0, {"a100": 1, "h100": 1}, {"a100": 2, "h100": 0}, id="cost-aware"),
        # the exact program prices the whole fleet: at 20 req/s two A100s are cheaper than A100 + H100
        pytest.param("optimizer: exact\n", 40.0, {"a100": 2, "h100": 1}, {"a100": 4, "h100": 0}, id="exact"),
    ],
)
def test_a_variant_nothing_wakes_hands_its_share_to_the_others_then_is_offered_again(
    allocation: str, rate_rps: float, asked: dict[str, int], left_out: dict[str, int]
) -> None:
    fleet = hpa_fleet(allocation)
    timeout = int(WAKE_TIMEOUT_S / STEP_S)  # asked from cycle 0: not woken at the end of this cycle
    waiting = run(fleet, range(timeout + 1), rate_rps)
    assert all(a == asked for a in waiting)  # the analyzer's choice, while a wake may come

    blocked = run(fleet, range(timeout + 1, timeout + 3), rate_rps)
    assert all(a == left_out for a in blocked)  # the H100's share on the A100 (~10 req/s a replica)
    assert fleet.desired()["a100"] == left_out["a100"]
    ready = condition(fleet.decision("a100"), "OptimizationReady")
    assert (ready.status, ready.reason) == (True, "NotWokenFromZero")
    for texts in (fleet.decision("h100").notes, (ready.message,)):
        assert any("h100: asked for replicas since" in t and "nothing scales it from zero" in t for t in texts)
    assert fleet.state.unwoken[VariantKey("llm", "h100")].blocked_until_s == T0 + STEP_S * timeout + RETRY_S

    retry = int((WAKE_TIMEOUT_S + RETRY_S) / STEP_S)  # the first cycle at which the block has run out
    assert all(a["h100"] == 0 for a in run(fleet, range(timeout + 3, retry), rate_rps))
    # offered again once more capacity is needed (the load doubles: H100s are the cheaper way again)
    assert run(fleet, range(retry, retry + 1), 2 * rate_rps)[0]["h100"] >= 1
    fleet.replicas["h100"] = fleet.ready["h100"] = 1
    run(fleet, range(retry + 1, retry + 2), 2 * rate_rps)
    assert fleet.state.unwoken == {}


def test_a_variant_woken_within_the_timeout_is_never_left_out() -> None:
    fleet = hpa_fleet()
    run(fleet, range(2))
    fleet.replicas["h100"] = fleet.ready["h100"] = 1  # KEDA woke it
    allocations = run(fleet, range(2, 30))
    assert fleet.state.unwoken == {}
    assert all(a["h100"] >= 1 for a in allocations)
    assert all("nothing scales it from zero" not in n for n in fleet.decision("h100").notes)
    assert condition(fleet.decision("a100"), "OptimizationReady").reason != "NotWokenFromZero"
