"""The attainment controller (adapter/analyzers/predictive/attainment.py) on a virtual clock: worked steps,
convergence against a plant, bounds, no windup while capacity is in flight or at the maximum."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.analyzers.predictive.attainment import H_MAX, H_MIN, MAX_STEP_UP, Controller

WINDOW_S = 120.0


def step(c: Controller, measured: float | None, *, now_s: float, **kw: object) -> Controller:
    args: dict[str, object] = {
        "target": 0.99,
        "measured": measured,
        "completions": 500.0,
        "window_s": WINDOW_S,
        "in_flight": False,
        "at_max": False,
        "capacity_changed": False,
        "now_s": now_s,
    }
    args.update(kw)
    return c.update(**args)  # type: ignore[arg-type]


def settled(headroom: float = 1.0) -> Controller:
    return Controller(headroom=headroom, settled_since_s=0.0)


@pytest.mark.parametrize(
    ("measured", "factor"),
    [
        pytest.param(0.90, math.exp(0.36), id="shortfall-up-fast"),
        pytest.param(0.50, math.exp(MAX_STEP_UP), id="big-shortfall-capped"),
        pytest.param(0.995, math.exp(-0.005), id="surplus-down-slowly"),
        pytest.param(0.99, 1.0, id="on-target-holds"),
        pytest.param(0.0, math.exp(MAX_STEP_UP), id="nothing-served"),
    ],
)
def test_worked_steps(measured: float, factor: float) -> None:
    after = step(settled(2.0), measured, now_s=1000.0)
    assert after.headroom == pytest.approx(2.0 * factor)
    assert after.hold == ""


@pytest.mark.parametrize(
    ("kwargs", "hold"),
    [
        pytest.param({"measured": None}, "no evidence", id="no-histogram"),
        pytest.param({"measured": math.nan}, "no evidence", id="nan"),
        pytest.param({"completions": 10.0}, "no evidence", id="too-few-requests"),
        pytest.param({"in_flight": True}, "in flight", id="replica-starting"),
        pytest.param({"at_max": True}, "maximum", id="at-max-no-windup"),
        pytest.param({"capacity_changed": True}, "half a window", id="capacity-just-changed"),
    ],
)
def test_holds(kwargs: dict[str, object], hold: str) -> None:
    measured = kwargs.pop("measured", 0.8)
    after = step(settled(2.0), measured, now_s=1000.0, **kwargs)  # type: ignore[arg-type]
    assert after.headroom == 2.0
    assert hold in after.hold


def test_at_max_still_comes_down_when_over_target() -> None:
    after = step(settled(2.0), 1.0, now_s=1000.0, at_max=True)
    assert after.headroom < 2.0


def test_half_a_window_after_a_change_it_acts_again() -> None:
    c = step(settled(1.0), 0.9, now_s=1000.0, capacity_changed=True)
    assert c.headroom == 1.0
    c = step(c, 0.9, now_s=1000.0 + WINDOW_S / 2 - 1)
    assert c.headroom == 1.0
    c = step(c, 0.9, now_s=1000.0 + WINDOW_S / 2)
    assert c.headroom > 1.0


def plant(headroom: float, needed: float) -> float:
    """Attainment of a fleet sized with `headroom` when the workload's tail needs `needed`: 0.99 at exactly
    `needed`, falling off below it, saturating above."""
    return min(0.999, 0.99 * min(1.0, headroom / needed) ** 4 + (0.009 if headroom >= needed else 0.0))


@pytest.mark.parametrize("needed", [0.8, 1.0, 2.5, 6.0], ids=lambda n: f"needs-{n}")
def test_converges_on_a_virtual_clock(needed: float) -> None:
    c = settled(1.0)
    now = 0.0
    for _ in range(200):  # 100 minutes of 30-s cycles; capacity settles every cycle in this plant
        now += 30.0
        c = step(c, plant(c.headroom, needed), now_s=now)
    assert needed * 0.9 <= c.headroom <= needed * 1.35, c
    assert plant(c.headroom, needed) >= 0.985


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 1.0), st.booleans(), st.booleans()), min_size=1, max_size=200))
def test_headroom_stays_within_bounds(events: list[tuple[float, bool, bool]]) -> None:
    c = settled(1.0)
    now = 0.0
    for measured, in_flight, changed in events:
        now += 30.0
        c = step(c, measured, now_s=now, in_flight=in_flight, capacity_changed=changed)
        assert H_MIN <= c.headroom <= H_MAX


def test_no_windup_while_at_maximum() -> None:
    """An hour below target at max replicas leaves the headroom where it was: when load falls, it is not
    sitting at H_MAX buying capacity nobody needs."""
    c = settled(1.5)
    for i in range(120):
        c = step(c, 0.5, now_s=30.0 * (i + 1), at_max=True)
    assert c.headroom == 1.5


def test_json_round_trip_and_refusals() -> None:
    c = step(settled(2.0), 0.9, now_s=500.0)
    again = Controller.from_json(c.to_json())
    assert again.headroom == pytest.approx(c.headroom)
    assert again.settled_since_s == c.settled_since_s
    for bad in ({"headroom": 100.0}, {"headroom": True}, {"headroom": 1.0, "lastMeasured": "x"}, []):
        with pytest.raises(ValueError, match="controller"):
            Controller.from_json(bad)  # type: ignore[arg-type]
