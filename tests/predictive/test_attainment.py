"""The attainment controller (adapter/analyzers/predictive/attainment.py) on a virtual clock: worked steps,
convergence against a plant, bounds, the anti-windup holds."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.analyzers.predictive.attainment import (
    BACKLOG_S,
    H_MAX,
    H_MIN,
    MAX_STEP_UP,
    MIN_LOAD,
    OVERLOAD,
    Controller,
)

WINDOW_S = 300.0


def step(c: Controller, measured: float | None, *, now_s: float, **kw: object) -> Controller:
    args: dict[str, object] = {
        "target": 0.99,
        "measured": measured,
        "completions": 500.0,
        "window_s": WINDOW_S,
        "in_flight": False,
        "at_max": False,
        "capacity_change": 0,
        "load": 0.9,
        "backlog": 0.0,
        "arrival_rps": 10.0,
        "now_s": now_s,
    }
    args.update(kw)
    return c.update(**args)  # type: ignore[arg-type]


def settled(headroom: float = 2.0) -> Controller:
    return Controller(headroom=headroom, settled_since_s=0.0)


@pytest.mark.parametrize(
    ("measured", "factor"),
    [
        pytest.param(0.90, math.exp(0.36), id="shortfall-up-fast"),
        pytest.param(0.50, math.exp(MAX_STEP_UP), id="big-shortfall-capped"),
        pytest.param(0.995, math.exp(-0.01), id="surplus-down-slowly"),
        pytest.param(0.99, 1.0, id="on-target-holds"),
        pytest.param(0.0, math.exp(MAX_STEP_UP), id="nothing-served"),
    ],
)
def test_worked_steps(measured: float, factor: float) -> None:
    after = step(settled(2.0), measured, now_s=1000.0)
    assert after.headroom == pytest.approx(2.0 * factor)
    assert after.hold == ""


@pytest.mark.parametrize(
    ("measured", "kwargs", "hold"),
    [
        pytest.param(None, {}, "no evidence", id="no-histogram"),
        pytest.param(math.nan, {}, "no evidence", id="nan"),
        pytest.param(0.8, {"completions": 10.0}, "no evidence", id="too-few-requests"),
        pytest.param(0.8, {"in_flight": True}, "in flight", id="short-replica-starting"),
        pytest.param(0.8, {"at_max": True}, "maximum", id="short-at-max-no-windup"),
        pytest.param(0.8, {"capacity_change": 1}, "grew", id="short-capacity-just-grew"),
        pytest.param(1.0, {"capacity_change": -1}, "shrank", id="over-capacity-just-shrank"),
        pytest.param(1.0, {"load": MIN_LOAD - 0.01}, "not loaded", id="over-fleet-not-loaded"),
        pytest.param(0.8, {"load": OVERLOAD + 0.01}, "outran", id="short-arrivals-outran-the-fleet"),
    ],
)
def test_holds(measured: float | None, kwargs: dict[str, object], hold: str) -> None:
    after = step(settled(2.0), measured, now_s=1000.0, **kwargs)
    assert after.headroom == 2.0
    assert hold in after.hold


@pytest.mark.parametrize(
    ("measured", "kwargs"),
    [
        pytest.param(1.0, {"in_flight": True}, id="over-while-capacity-comes-goes-down"),
        pytest.param(1.0, {"capacity_change": 1}, id="over-after-growth-goes-down"),
        pytest.param(1.0, {"at_max": True}, id="over-at-max-goes-down"),
        pytest.param(0.8, {"capacity_change": -1}, id="short-after-shrinking-goes-up"),
        pytest.param(0.8, {"load": 0.2}, id="short-on-a-light-fleet-goes-up"),
    ],
)
def test_the_move_the_stale_window_cannot_mislead_is_made(measured: float, kwargs: dict[str, object]) -> None:
    after = step(settled(2.0), measured, now_s=1000.0, **kwargs)
    assert after.hold == ""
    assert (after.headroom > 2.0) == (measured < 0.99)


def test_a_window_after_growth_it_goes_up_again() -> None:
    c = step(settled(1.0), 0.9, now_s=1000.0, capacity_change=1)
    assert c.headroom == 1.0
    c = step(c, 0.9, now_s=1000.0 + WINDOW_S - 1)
    assert c.headroom == 1.0
    c = step(c, 0.9, now_s=1000.0 + WINDOW_S)
    assert c.headroom > 1.0


@pytest.mark.parametrize(
    ("elapsed_s", "measured", "factor"),
    [
        pytest.param(30.0, 0.90, math.exp(0.36), id="the-30-s-cycle-the-gains-are-per"),
        pytest.param(15.0, 0.90, math.exp(0.18), id="15-s-half-the-step"),
        pytest.param(60.0, 0.90, math.exp(0.72), id="60-s-twice"),
        pytest.param(600.0, 0.90, math.exp(0.72), id="a-gap-counts-as-two-cycles"),
        pytest.param(0.0, 0.90, 1.0, id="no-time-no-move"),
        pytest.param(15.0, 0.50, math.exp(MAX_STEP_UP / 2), id="the-cap-is-per-30-s-too"),
        pytest.param(15.0, 0.995, math.exp(-0.005), id="down-per-time-as-well"),
    ],
)
def test_the_integral_is_over_time_not_cycles(elapsed_s: float, measured: float, factor: float) -> None:
    after = step(settled(2.0), measured, now_s=1000.0, elapsed_s=elapsed_s)
    assert after.headroom == pytest.approx(2.0 * factor)


@pytest.mark.parametrize("cycle_s", [10.0, 15.0], ids=lambda c: f"{c:.0f}-s-cycles")
def test_the_engine_interval_does_not_change_how_fast_the_headroom_moves(cycle_s: float) -> None:
    """A tail that needs H = 3 (the plant below): after 4 minutes the headroom is where 30-s cycles take it, within
    the discretisation (counted per cycle, 15-s cycles moved it ×2.05 per 30 s where 30-s cycles move it ×1.43).
    Longer cycles take steps too big for this plant, which overshoots: the worked steps above check them."""

    def run(interval_s: float) -> float:
        c, now = settled(1.0), 0.0
        while now < 240.0:
            now += interval_s
            c = step(c, plant(c.headroom, 3.0), now_s=now, elapsed_s=interval_s)
        return c.headroom

    assert run(cycle_s) == pytest.approx(run(30.0), rel=0.1)


def plant(headroom: float, needed: float) -> float:
    """Attainment of a fleet sized with `headroom` when the workload's tail needs `needed`: 0.99 at exactly
    `needed`, falling off below it, saturating above."""
    return min(0.999, 0.99 * min(1.0, headroom / needed) ** 4 + (0.009 if headroom >= needed else 0.0))


@pytest.mark.parametrize("needed", [1.0, 1.3, 2.5, 6.0], ids=lambda n: f"needs-{n}")
def test_converges_on_a_virtual_clock(needed: float) -> None:
    c = settled(1.0)
    now = 0.0
    for _ in range(240):  # two hours of 30-s cycles; capacity settles every cycle in this plant
        now += 30.0
        c = step(c, plant(c.headroom, needed), now_s=now)
    assert needed * 0.95 <= c.headroom <= needed * 1.4, c
    assert plant(c.headroom, needed) >= 0.985


def test_never_below_the_model() -> None:
    c = settled(1.0)
    for i in range(100):
        c = step(c, 1.0, now_s=30.0 * (i + 1))
    assert c.headroom == H_MIN == 1.0


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.0, 1.0), st.booleans(), st.integers(-1, 1), st.floats(0.0, 2.0)),
        min_size=1,
        max_size=200,
    )
)
def test_headroom_stays_within_bounds(events: list[tuple[float, bool, int, float]]) -> None:
    c = settled(1.0)
    now = 0.0
    for measured, in_flight, change, load in events:
        now += 30.0
        c = step(c, measured, now_s=now, in_flight=in_flight, capacity_change=change, load=load)
        assert H_MIN <= c.headroom <= H_MAX


def test_no_windup_while_at_maximum() -> None:
    """An hour below target at max replicas leaves the headroom where it was: when load falls, it is not
    sitting at H_MAX buying capacity nobody needs."""
    c = settled(1.5)
    for i in range(120):
        c = step(c, 0.5, now_s=30.0 * (i + 1), at_max=True)
    assert c.headroom == 1.5


def test_no_slide_while_the_fleet_idles_at_its_minimum() -> None:
    """A night at the minimum fleet meets any target; the headroom learned at the last peak is kept for the
    next one."""
    c = settled(3.0)
    for i in range(240):
        c = step(c, 1.0, now_s=30.0 * (i + 1), load=0.1)
    assert c.headroom == 3.0


def test_raises_that_buy_no_attainment_stop() -> None:
    """An unreachable target: each raise leaves attainment at ~60 %. After three raises the controller holds
    instead of walking to H_MAX; a later surplus clears the record."""
    c = settled(1.0)
    heads = []
    for i in range(12):
        c = step(c, 0.60 + 0.001 * i, now_s=30.0 * (i + 1))
        heads.append(c.headroom)
    assert heads[3] == heads[-1] < H_MAX
    assert "not what is missing" in c.hold
    c = step(c, 1.0, now_s=1000.0)
    assert c.raises == ()


def test_raises_that_help_go_on() -> None:
    c = settled(1.0)
    for i in range(6):
        c = step(c, 0.5 + 0.05 * i, now_s=30.0 * (i + 1))
    assert c.hold == ""
    assert c.headroom == pytest.approx(math.exp(6 * MAX_STEP_UP))


def test_a_burst_the_fleet_was_not_sized_for_does_not_raise_the_headroom() -> None:
    """A burst outruns the fleet (load 3), its backlog drains for two cycles after arrivals fall back, and the
    window measures misses until a window after the backlog is gone: the headroom holds throughout, then moves
    on a miss measured without an overload in its window."""
    c = settled(1.0)
    timeline = [  # (now, load, backlog, measured)
        (1000.0, 3.0, 500.0, 0.3),
        (1030.0, 3.0, 900.0, 0.0),
        (1060.0, 0.4, 400.0, 0.0),  # arrivals back to normal, the backlog still draining: still overloaded
        (1090.0, 0.4, 50.0, 0.0),
        (1120.0, 0.4, 0.0, 0.1),  # drained
        (1380.0, 0.4, 0.0, 0.8),  # 290 s after the last overloaded cycle: the window still holds its misses
    ]
    for now_s, load, backlog, measured in timeline:
        c = step(c, measured, now_s=now_s, load=load, backlog=backlog)
        assert c.headroom == 1.0, (now_s, c.hold)
        assert "outran" in c.hold
    assert c.overloaded_at_s == 1090.0
    c = step(c, 0.8, now_s=1400.0, load=0.9, backlog=0.0)  # 310 s after: a miss of the headroom's own
    assert c.hold == ""
    assert c.headroom > 1.0


def test_a_backlog_alone_is_not_an_overload() -> None:
    c = step(settled(1.0), 0.8, now_s=1000.0, load=0.9, backlog=40.0)  # 4 s of arrivals queued: the tail's
    assert c.overloaded_at_s is None
    assert c.headroom > 1.0


@pytest.mark.parametrize(
    ("before", "now", "overloaded"),
    [
        pytest.param(0.0, BACKLOG_S * 10.0 - 1.0, False, id="growing-but-under-ten-seconds-of-arrivals"),
        pytest.param(0.0, BACKLOG_S * 10.0, True, id="growing-to-ten-seconds-of-arrivals"),
        pytest.param(31.0, 119.0, True, id="the-size-shift-probe"),
        pytest.param(150.0, 150.0, False, id="long-but-not-growing"),
        pytest.param(300.0, 150.0, False, id="long-and-draining"),
    ],
)
def test_a_backlog_growing_past_seconds_of_arrivals_is_an_overload(before: float, now: float, overloaded: bool) -> None:
    """Requests grown longer than the capacity model has seen: the model still prices a replica at its old rate
    (load 0.5), but the queue grows; a shortfall measured then is not the headroom's to answer."""
    c = step(replace(settled(1.0), backlog=before), 0.83, now_s=1000.0, load=0.5, backlog=now)
    assert c.overloaded is overloaded
    assert (c.headroom == 1.0) is overloaded
    assert ("outran" in c.hold) is overloaded


def test_json_round_trip_and_refusals() -> None:
    c = step(settled(2.0), 0.9, now_s=500.0, capacity_change=-1, load=1.5, backlog=10.0)
    again = Controller.from_json(c.to_json())
    assert again.overloaded_at_s == c.overloaded_at_s == 500.0
    assert again.overloaded is c.overloaded is True
    assert again.headroom == pytest.approx(c.headroom)
    assert again.settled_since_s == c.settled_since_s
    assert again.change == c.change == -1
    assert again.raises == c.raises
    assert again.backlog == c.backlog == 10.0
    assert Controller.from_json({"headroom": 1.0}).backlog == 0.0  # state saved before the field: none waiting
    for bad in (
        {"headroom": 100.0},
        {"headroom": True},
        {"headroom": 1.0, "lastMeasured": "x"},
        {"headroom": 1.0, "change": 2},
        {"headroom": 1.0, "raises": [2.0]},
        {"headroom": 1.0, "overloadedAtS": "x"},
        {"headroom": 1.0, "overloaded": 1},
        {"headroom": 1.0, "backlog": -1.0},
        {"headroom": 1.0, "backlog": "x"},
        [],
    ):
        with pytest.raises(ValueError, match="controller"):
            Controller.from_json(bad)  # type: ignore[arg-type]
