"""adapter/sim/misses.py: which requests no causal policy could have been ready for, on worked series and
generated ones; the split adds up to the run's attainment."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.app.simulate import run_scenario
from adapter.sim import scenario as scenario_module
from adapter.sim.fleet import RequestOutcomes
from adapter.sim.misses import RISE, of_run, of_simulation, split_misses, unforeseen_windows

REPO = Path(__file__).resolve().parents[2]


def per_minute(rates_rps: list[float]) -> np.ndarray:
    """Evenly spaced arrivals at each minute's rate (seconds from the start)."""
    out = [m * 60.0 + (i + 0.5) * 60.0 / (rate * 60) for m, rate in enumerate(rates_rps) for i in range(int(rate * 60))]
    return np.asarray(out, dtype=float)


@pytest.mark.parametrize(
    ("rates", "lead_s", "expected"),
    [
        pytest.param(
            [4] * 15 + [24] * 15 + [10] * 15, 300, ((0, 360), (900, 1260)), id="steps-first-load-and-the-step"
        ),
        pytest.param([4] * 10 + [30] * 2 + [4] * 10 + [30] * 2, 300, ((0, 360), (600, 960)), id="a-burst-seen-once"),
        pytest.param([4, 4, 4.9, 4, 6.2], 0, ((0, 60), (240, 300)), id="rise-just-above-a-quarter-not-below"),
        pytest.param([0, 0, 2, 2], 120, ((120, 300),), id="the-first-minute-with-load"),
        pytest.param([1, 2, 3, 4], 120, ((0, 360),), id="overlapping-windows-merge"),
        pytest.param([], 300, (), id="no-requests"),
    ],
)
def test_unforeseen_windows_worked(rates: list[float], lead_s: float, expected: tuple[tuple[int, int], ...]) -> None:
    assert unforeseen_windows(per_minute(rates), lead_s=lead_s) == tuple((float(a), float(b)) for a, b in expected)


def test_split_worked_example() -> None:
    got = split_misses(np.array([0.0, 10.0, 400.0]), np.array([False, True, True]), lead_s=300)
    assert (got.unforeseen, got.unforeseen_met, got.foreseeable, got.foreseeable_met) == (2, 1, 1, 1)
    assert got.windows_s == ((0.0, 360.0),)
    assert got.misses_unforeseen_share == 1.0
    assert got.foreseeable_attainment == 1.0
    assert got.unforeseen_share == pytest.approx(2 / 3)


def test_invalid_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="differ in shape"):
        split_misses(np.array([1.0]), np.array([True, False]), lead_s=1)
    with pytest.raises(ValueError, match="lead_s"):
        unforeseen_windows(np.array([1.0]), lead_s=float("nan"))


ARRIVALS = st.lists(st.floats(min_value=0, max_value=3_600, allow_nan=False), max_size=200)


@given(ARRIVALS, st.data(), st.floats(min_value=0, max_value=900))
def test_the_parts_add_up_and_windows_start_at_rises(arrivals: list[float], data: st.DataObject, lead_s: float) -> None:
    met = data.draw(st.lists(st.booleans(), min_size=len(arrivals), max_size=len(arrivals)))
    times, hits = np.asarray(arrivals, dtype=float), np.asarray(met, dtype=bool)
    got = split_misses(times, hits, lead_s=lead_s)
    assert got.unforeseen + got.foreseeable == len(arrivals)
    assert got.unforeseen_met + got.foreseeable_met == int(hits.sum())
    counts = np.bincount((times // 60).astype(int)) if len(arrivals) else np.zeros(0, dtype=int)
    for start, end in got.windows_s:  # each window starts at a minute whose load rose above RISE × all before
        minute = int(start // 60)
        assert counts[minute] > RISE * (counts[:minute].max() if minute else 0)
        assert end >= start + 60 + lead_s - 1e-9
    if len(arrivals):
        first = int(times.min() // 60)
        assert got.windows_s
        assert got.windows_s[0][0] == first * 60.0  # the first load is always unforeseen


def test_of_run_counts_as_slo_attainment_does() -> None:
    outcomes = RequestOutcomes(
        arrival_s=np.array([100.0, 110.0, 700.0, 720.0]),
        ttft_s=np.array([0.5, 3.0, 0.5, 0.4]),
        itl_s=np.array([0.05, 0.05, np.nan, 0.2]),
        e2e_s=np.ones(4),
        input_tokens=np.ones(4, dtype=np.int64),
        output_tokens=np.ones(4, dtype=np.int64),
        variant=np.zeros(4, dtype=np.int64),
        dropped_arrival_s=np.array([130.0]),
        dropped_reason=("drain",),
        in_flight=0,
    )
    got = of_run(outcomes, start_s=100.0, ttft_s=2.0, itl_s=0.1, lead_s=60.0)
    # minute 0 (arrivals 0, 10, 30 s from the start) is the first load: [0, 120 s) unforeseen, one of three met;
    # minute 10 holds two requests, not more than 1.25 × 3: foreseeable, one of two met (NaN ITL counts as met)
    assert (got.unforeseen, got.unforeseen_met, got.foreseeable, got.foreseeable_met) == (3, 1, 2, 1)
    met = (got.unforeseen_met + got.foreseeable_met) / 5
    assert met == outcomes.slo_attainment(ttft_s=2.0, itl_s=0.1)


def test_a_simulated_step_splits_as_its_attainment() -> None:
    scenario = scenario_module.load(REPO / "examples/scenarios/bench/steps.yaml")
    sim = run_scenario(scenario, policy="hpa-kv")
    got = of_simulation(sim)
    total = got.unforeseen + got.foreseeable
    assert (got.unforeseen_met + got.foreseeable_met) / total == pytest.approx(sim.summary["slo_attainment"], abs=1e-6)
    assert got.windows_s == ((0.0, 360.0), (900.0, 1260.0))  # the first load and the step to 24 req/s
