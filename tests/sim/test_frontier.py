"""The measuring stick (issue 17): the oracle played in the loop, and the achievable frontier.

* `ScheduleActuator`: the spec.replicas it sets at any moment is the clairvoyant schedule shifted by the lead,
  spec_v(t) = max{n_vb : bin b overlaps [t, t + L_v]} — checked against that formula written out independently,
  on random schedules (hypothesis) and in a real closed-loop run.
* `frontier.search` with a fake runner (hypothesis): oracle_cost ≤ the accounting cost of oracle@99's schedule,
  oracle@99 ≤ the cheapest static fleet found, every "passed" candidate meets the target, an unreachable target
  is reported with the maximum fleet's attainment.
* The same search on a real, short scenario, and the summary fields it adds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter.app.simulate import find_frontier, run_scenario
from adapter.domain.snapshot import ScaleTarget
from adapter.sim import scenario as scenario_module
from adapter.sim.actuators import ScheduleActuator
from adapter.sim.frontier import Frontier, Hint, miss_budget, search
from adapter.sim.oracle import OraclePlan, capacities, schedule_cost
from adapter.sim.simulate import START_S, RunOptions, Simulation, oracle_bound, oracle_demand, oracle_variants

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------ the actuator


def reference_spec(row: list[int], t_s: float, *, start_s: float, interval_s: float, lead_s: float) -> int:
    """The schedule shifted by the lead, written out directly: the largest count met anywhere in [t, t + L] —
    at t, at t + L and at every bin start in between (bins past the end hold the last count, before the start
    the first)."""

    def count_at(x: float) -> int:
        return row[min(max(int((x - start_s) // interval_s), 0), len(row) - 1)]

    starts = [start_s + k * interval_s for k in range(-1, len(row) + 1)]
    points = [t_s, t_s + lead_s, *(x for x in starts if t_s < x <= t_s + lead_s)]
    return max(count_at(x) for x in points)


def target(spec: int) -> ScaleTarget:
    return ScaleTarget(
        kind="Deployment", namespace="ns", name="d", replicas=spec, ready_replicas=spec, spec_replicas=spec
    )


def drive(actuator: ScheduleActuator, names: list[str], until_s: float) -> list[tuple[float, dict[str, int]]]:
    """Step the actuator at every event it asks for; the specs in force after each step."""
    specs = dict.fromkeys(names, 0)
    history = []
    t = actuator.next_event_s()
    while t <= until_s:
        changes = actuator.step(t, desired={}, targets={n: target(s) for n, s in specs.items()})
        specs.update(changes)
        history.append((t, dict(specs)))
        nxt = actuator.next_event_s()
        assert nxt > t, "the actuator must move forward"
        t = nxt
    return history


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=25), min_size=1, max_size=3),
    interval_s=st.sampled_from([10.0, 15.0, 30.0, 60.0]),
    leads=st.lists(st.sampled_from([0.0, 7.5, 30.0, 45.0, 120.0, 300.0]), min_size=3, max_size=3),
)
def test_the_actuated_spec_is_the_schedule_shifted_by_the_lead(
    rows: list[list[int]], interval_s: float, leads: list[float]
) -> None:
    names = [f"v{i}" for i in range(len(rows))]
    start = 1000.0
    actuator = ScheduleActuator(
        dict(zip(names, rows, strict=True)),
        interval_s=interval_s,
        leads_s=dict(zip(names, leads, strict=False)),
        start_s=start,
    )
    end = start + (max(len(r) for r in rows) + 2) * interval_s
    history = drive(actuator, names, end)
    for t in np.arange(start + 0.25, end, 0.5):  # between change points the spec must already be right
        in_force = [specs for when, specs in history if when <= t][-1]
        for name, row, lead in zip(names, rows, leads, strict=False):
            expected = reference_spec(row, float(t), start_s=start, interval_s=interval_s, lead_s=lead)
            assert in_force[name] == expected, (name, t, row, lead)


@pytest.mark.parametrize(
    ("row", "lead", "at", "spec"),
    [
        pytest.param([1] * 10 + [3] * 4 + [1] * 6, 300.0, 0.0, 3, id="requested-a-lead-ahead"),
        pytest.param([1] * 10 + [3] * 4 + [1] * 6, 300.0, 419.0, 3, id="kept-through-its-last-bin"),
        pytest.param([1] * 10 + [3] * 4 + [1] * 6, 300.0, 420.0, 1, id="released-when-it-ends"),
        pytest.param([2, 0, 0, 0, 5], 0.0, 35.0, 0, id="no-lead-follows-the-bins"),
        pytest.param([2, 0, 0, 0, 5], 0.0, 500.0, 5, id="past-the-end-holds-the-last"),
    ],
)
def test_worked_examples_of_the_shift(row: list[int], lead: float, at: float, spec: int) -> None:
    actuator = ScheduleActuator({"v": row}, interval_s=30.0, leads_s={"v": lead}, start_s=0.0)
    assert actuator.spec_at("v", at) == spec


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"schedule": {"v": []}}, "empty", id="empty-row"),
        pytest.param({"leads_s": {"v": -1.0}}, "lead", id="negative-lead"),
        pytest.param({"interval_s": 0.0}, "interval_s", id="zero-interval"),
    ],
)
def test_actuator_refuses_bad_input(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"schedule": {"v": [1]}, "interval_s": 30.0, "leads_s": {"v": 0.0}} | kwargs
    with pytest.raises(ValueError, match=message):
        ScheduleActuator(args.pop("schedule"), **args)


def burst_scenario(**overrides: Any) -> scenario_module.Scenario:
    """20 minutes: 3 req/s with a 2-minute burst of 24 req/s at 8 minutes; two variants, startups 60–150 s."""
    raw: dict[str, Any] = {
        "name": "short-burst",
        "model_id": "meta/llama-3.1-8b",
        "namespace": "llm",
        "duration_s": 1200,
        "slo": {"ttft_ms": 2000, "itl_ms": 100},
        "workload": {"kind": "burst", "base_rps": 3, "burst_rps": 24, "burst_start_s": 480, "burst_duration_s": 120,
                     "input_tokens": 800, "output_tokens": 150, "seed": 9},
        "variants": [
            {"name": "big", "accelerator": "A100", "cost": 2.5, "min_replicas": 1, "max_replicas": 6,
             "startup_s": {"median": 60, "p90": 150},
             "perf": {"alpha_ms": 9.5, "beta_ms": 0.066, "gamma_ms": 0.00008, "kv_cache_tokens": 440000}},
            {"name": "small", "accelerator": "L40S", "cost": 1.5, "min_replicas": 1, "max_replicas": 8,
             "startup_s": {"median": 60, "p90": 150},
             "perf": {"alpha_ms": 20, "beta_ms": 0.09, "gamma_ms": 0.00017, "kv_cache_tokens": 184000}},
        ],
        "engine": {"interval_s": 30},
    }  # fmt: skip
    raw.update(overrides)
    return scenario_module.parse(raw, base_dir=REPO)


@pytest.fixture(scope="module")
def oracle_run() -> Simulation:
    return run_scenario(burst_scenario(), policy="oracle")


def test_oracle_in_the_loop_sets_exactly_the_shifted_schedule(oracle_run: Simulation) -> None:
    schedule = oracle_run.schedule
    assert schedule is not None
    assert schedule.leads_s == pytest.approx({"big": 150.0, "small": 150.0})  # the p90 startup
    for i, name in enumerate(("big", "small")):
        assert list(schedule.schedule[name]) == oracle_run.oracle.replicas[i].tolist()
    events = oracle_run.fleet.scale_events
    assert events, "the burst needs more replicas than the base load"
    for event in events:
        assert event.to_replicas == schedule.spec_at(event.variant, event.t_s), event
    for point in oracle_run.fleet.timeline:  # and in between: a scrape sees the spec set just before it
        for i, name in enumerate(("big", "small")):
            assert point.spec[i] == schedule.spec_at(name, point.t_s - 1e-6), (point.t_s, name)


def test_oracle_replicas_are_paid_and_drained_like_any_other(oracle_run: Simulation) -> None:
    summary = oracle_run.summary
    assert summary["policy"] == "oracle"
    assert summary["cold_starts"] > 0
    assert summary["cost"] > 0
    assert summary["engine_cycles"] == 0  # no engine: the schedule decides


# ------------------------------------------------------------------------------------------ the search, faked


@dataclass
class FakeSim:
    summary: dict[str, Any]
    stopped_early: bool


class FakeWorld:
    """Attainment from capacity: a run meets the target when, in every bin, the capacity it holds is at least
    `need` × the demand; cost is the oracle's own accounting (so orderings are exact)."""

    def __init__(self, scenario: scenario_module.Scenario, seed: int, need: float) -> None:
        self.variants = oracle_variants(scenario)
        self.demand = oracle_demand(scenario, seed)
        self.capacity = capacities(self.variants, self.demand, ttft_ms=scenario.slo.ttft_ms, itl_ms=scenario.slo.itl_ms)
        self.need = need
        self.calls: list[tuple[str, RunOptions]] = []

    def ratio(self, replicas: np.ndarray) -> float:
        supplied = (self.capacity * replicas).sum(axis=0)
        busy = self.demand.rate_rps > 1e-6
        return float(np.min(supplied[busy] / self.demand.rate_rps[busy])) if busy.any() else math.inf

    def __call__(self, policy: str, options: RunOptions) -> Simulation:
        self.calls.append((policy, options))
        if policy == "oracle":
            assert options.schedule is not None
            replicas = options.schedule.replicas
        else:
            assert policy == "static"
            assert options.fleet is not None
            counts = np.array([options.fleet[v.name] for v in self.variants])
            replicas = np.repeat(counts[:, None], self.demand.bins, axis=1)
        cost = schedule_cost(replicas, self.variants, interval_s=self.demand.interval_s)
        ratio = self.ratio(replicas)
        attainment = 1.0 if ratio >= self.need else max(0.0, 0.99 * ratio / self.need)
        stopped = options.max_misses is not None and attainment < 0.99
        return cast(Simulation, FakeSim({"cost": cost, "slo_attainment": attainment}, stopped))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.floats(1.0, 6.0),
    burst=st.floats(6.0, 40.0),
    need=st.floats(1.0, 3.0),
    big_cost=st.sampled_from([2.5, 4.0]),
)
def test_search_orders_bound_frontier_and_static(base: float, burst: float, need: float, big_cost: float) -> None:
    scenario = burst_scenario(
        duration_s=600,
        workload={"kind": "burst", "base_rps": base, "burst_rps": burst, "burst_start_s": 240,
                  "burst_duration_s": 90, "input_tokens": 800, "output_tokens": 150, "seed": 3},
    )  # fmt: skip
    raw_variants = scenario.raw["variants"]
    scenario = burst_scenario(
        duration_s=600,
        workload=scenario.raw["workload"],
        variants=[{**raw_variants[0], "cost": big_cost}, raw_variants[1]],
    )
    world = FakeWorld(scenario, 0, need)
    bound = oracle_bound(scenario, 0)
    frontier = search(scenario, 0, runner=world, bound=bound)
    if not frontier.reachable:
        assert frontier.oracle99 is None
        assert frontier.max_fleet.attainment is not None
        assert frontier.max_fleet.attainment < 0.99
        return
    best = frontier.oracle99
    assert best is not None
    assert best.passed
    assert all(c.attainment is not None and c.attainment >= 0.99 for c in frontier.candidates if c.passed)
    assert bound.cost <= best.cost * (1 + 1e-9)  # the bound is below every schedule that meets the target
    if frontier.static99 is not None:
        assert best.cost <= frontier.static99.cost
    for c in frontier.candidates:
        if c.kind == "schedule":
            assert c.schedule_cost is not None
            assert c.schedule_cost >= bound.cost * (1 - 1e-9), c
        if c.passed:
            assert best.cost <= c.cost


def test_unreachable_target_reports_the_largest_fleet() -> None:
    scenario = burst_scenario(duration_s=600)
    world = FakeWorld(scenario, 0, need=1e9)
    frontier = search(scenario, 0, runner=world, bound=oracle_bound(scenario, 0))
    assert not frontier.reachable
    assert frontier.oracle99 is None
    assert frontier.static99 is None
    assert len(world.calls) == 1
    assert world.calls[0][1].fleet == {"big": 6, "small": 8}
    assert world.calls[0][1].max_misses is None  # its attainment is reported: it runs to the end
    assert frontier.as_dict()["reachable"] is False


def test_a_hint_starts_where_the_previous_seed_ended() -> None:
    scenario = burst_scenario(duration_s=600)
    first = search(scenario, 0, runner=FakeWorld(scenario, 0, 1.4), bound=oracle_bound(scenario, 0))
    hint = Hint.of(first)
    assert hint is not None
    assert hint.headroom is not None
    world = FakeWorld(scenario, 0, 1.4)
    again = search(scenario, 0, runner=world, bound=oracle_bound(scenario, 0), hint=hint)
    assert again.oracle99 is not None
    assert first.oracle99 is not None
    assert again.oracle99.cost <= first.oracle99.cost * 1.05
    assert world.calls[1][0] == "oracle"
    assert world.calls[1][1].schedule is not None
    assert len(world.calls) <= len(first.candidates)


def test_miss_budget_is_the_target_share_of_the_requests() -> None:
    scenario = burst_scenario(duration_s=600)
    requests = len(scenario.requests(run_seed=0))
    assert miss_budget(scenario, 0, 0.99) == math.floor(0.01 * requests)
    assert miss_budget(scenario, 0, 1.0) == 0


# ------------------------------------------------------------------------------------------ the search, real


@pytest.fixture(scope="module")
def real_frontier() -> Frontier:
    return find_frontier(burst_scenario(), 0)


def test_real_search_measures_every_candidate(real_frontier: Frontier) -> None:
    assert real_frontier.reachable
    assert real_frontier.max_fleet.attainment is not None
    assert real_frontier.max_fleet.attainment >= 0.99
    best = real_frontier.oracle99
    assert best is not None
    assert best.attainment is not None
    assert best.attainment >= 0.99
    bound = oracle_bound(burst_scenario(), 0)
    assert bound.cost <= best.cost
    static = real_frontier.static99
    assert static is not None
    assert best.cost <= static.cost
    assert any(c.kind == "schedule" for c in real_frontier.candidates)
    assert any(c.attainment is None for c in real_frontier.candidates), "failing runs stop early"


def test_summary_carries_the_frontier(real_frontier: Frontier) -> None:
    sim = run_scenario(burst_scenario(), policy="static", options=RunOptions(frontier=real_frontier))
    summary = sim.summary
    assert real_frontier.oracle99 is not None
    assert summary["oracle99_cost"] == pytest.approx(real_frontier.oracle99.cost, rel=1e-6)
    assert summary["cost_ratio_vs_oracle99"] == pytest.approx(summary["cost"] / summary["oracle99_cost"], rel=1e-3)
    assert summary["frontier"]["reachable"] is True
    assert summary["frontier"]["runs"] == len(real_frontier.candidates)


def test_a_run_stops_once_the_target_is_out_of_reach() -> None:
    scenario = burst_scenario(workload={"kind": "poisson", "rate_rps": 40, "input_tokens": 800,
                                        "output_tokens": 150, "seed": 1})  # fmt: skip
    sim = run_scenario(scenario, policy="static", options=RunOptions(fleet={"big": 1, "small": 1}, max_misses=50))
    assert sim.stopped_early
    assert sim.fleet.misses > 50
    assert sim.fleet.now_s < START_S + 1200


def test_plan_type_is_what_the_summary_reads(oracle_run: Simulation) -> None:
    assert isinstance(oracle_run.oracle, OraclePlan)
    assert oracle_run.summary["oracle99_cost"] is None  # no frontier asked for
    assert oracle_run.summary["cost_ratio_vs_oracle99"] is None


def test_a_schedule_that_swaps_variants_keeps_the_running_one_until_the_other_serves() -> None:
    """The A100 runs at the start and the cheaper L40S is at zero (both minReplicas 0); 0.3 req/s for 20 minutes.
    The bound swaps them at t = 0; played as such nothing served until the L40S had started, every schedule
    failed, and oracle@99 was the maximum fleet ($9.00 here; $54.00 for an hour of a probe, where one replica
    meets the SLO for $1.71). Kept until the L40S can serve, the schedule at h = 1 reaches the target."""
    raw_variants = burst_scenario().raw["variants"]
    scenario = burst_scenario(
        workload={"kind": "poisson", "rate_rps": 0.3, "input_tokens": 800, "output_tokens": 150, "seed": 5},
        variants=[
            {**raw_variants[0], "min_replicas": 0, "initial_replicas": 1},
            {**raw_variants[1], "min_replicas": 0, "initial_replicas": 0},
        ],
    )
    frontier = find_frontier(scenario, 0, static=False)
    best = frontier.oracle99
    assert best is not None
    assert (best.kind, best.headroom) == ("schedule", 1.0)
    assert best.attainment is not None
    assert best.attainment >= 0.99
    assert best.cost < 1.0
