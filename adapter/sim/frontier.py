"""The achievable frontier of a workload: the cheapest fleets whose *measured* SLO attainment reaches a target.

The oracle bound (`oracle_cost`, adapter.sim.oracle) is what no causal policy can undercut, but nothing can reach
it either: its capacity meets the targets only on average over 30-s bins, and its replicas start exactly a
median startup ahead. This module measures instead. Every candidate is played in the same closed loop as the
policies (adapter.sim.simulate: the same requests, fleet, startups, draining and accounting), and its attainment
is counted per request:

* **schedules**: the oracle's program solved for the demand × headroom h (h ≥ 1), actuated with each replica
  requested its p90 startup ahead (`--policy oracle`), and the replicas running at the start kept until their
  replacements can be ready (`oracle._make_first`: the bound may swap the fleet at t = 0, which the loop cannot).
  h is searched upwards from 1 by a factor `GROW` until a schedule reaches the target, then bisected
  `BISECT_STEPS` times between the last miss and the first hit.
* **static fleets**: each variant alone scaled (the others at their minimum), by bisection on its count; then
  coordinate descent from the maximum fleet (each variant in turn cut by bisection to the fewest replicas that
  still pass; one order per variant first); then, beside the cheapest found, up to `NEIGHBOURS` replicas of each
  other variant added while the largest is bisected down again. The search assumes that more replicas never
  lower attainment (true of the simulated fleet up to routing noise) and is a search, not an enumeration:
  `static99` is the cheapest static fleet *found*, an upper bound of the cheapest that exists.
* **the maximum fleet** (every variant at max_replicas, held): the most any schedule can buy. When even it misses
  the target the workload's target is unreachable; its attainment is reported as the highest reachable.

`oracle99` is the cheapest candidate of all (schedules and static fleets) whose measured attainment meets the
target: the clairvoyant, achievable cost a policy is judged against (`cost_ratio_vs_oracle99`). By construction
`oracle99.cost ≤ static99.cost`; and `oracle_cost ≤` the accounting cost of every schedule with h ≥ 1 (a bigger
demand never makes the program cheaper), checked in tests/sim/test_frontier.py.

A run that has already missed more than (1 − target) of the workload's requests cannot reach the target and is
stopped there (`RunOptions.max_misses`): failing candidates cost a fraction of a full run. Worked example: an
hour of 14,000 requests at target 0.99 allows 140 misses; a schedule that has missed 141 by minute 9 stops at
minute 9.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from adapter.sim.oracle import OraclePlan, OracleVariant, capacities, plan
from adapter.sim.scenario import Scenario
from adapter.sim.simulate import (
    DEFAULT_LEAD_QUANTILE,
    START_S,
    RunOptions,
    Simulation,
    oracle_demand,
    oracle_variants,
    startup_quantile_s,
)

TARGET = 0.99
GROW = 1.5
"""Headroom grows by this factor until a schedule reaches the target."""
MAX_HEADROOM = 16.0
BISECT_STEPS = 4
"""Bisections of h between the last miss and the first hit: the bracket shrinks to (1.5)^(1/16) ≈ 2.6 %."""
NEIGHBOURS = 2
"""Static search: at most this many replicas of each other variant are tried beside the cheapest single-variant
fleet."""

Kind = Literal["schedule", "static", "max-fleet"]
Runner = Callable[[str, RunOptions], Simulation]
"""(policy, options) → a finished run of the scenario and seed being searched (injected: tests fake it)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One measured run of the search."""

    kind: Kind
    cost: float
    """Measured: replicas paid over the run, exactly as a policy's cost."""
    attainment: float | None
    """Measured; None when the run was stopped once it could no longer reach the target."""
    passed: bool
    headroom: float | None = None
    fleet: Mapping[str, int] | None = None
    schedule_cost: float | None = None
    """Schedules: the oracle program's own accounting of the schedule (comparable with `oracle_cost`)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "cost": round(self.cost, 6),
            "attainment": None if self.attainment is None else round(self.attainment, 6),
            "headroom": None if self.headroom is None else round(self.headroom, 4),
            "fleet": None if self.fleet is None else dict(self.fleet),
        }


@dataclass(frozen=True, slots=True)
class Frontier:
    target: float
    max_fleet: Candidate
    oracle99: Candidate | None
    """The cheapest candidate meeting the target (None: unreachable)."""
    static99: Candidate | None
    """The cheapest static fleet found meeting the target (None: none found, or not searched)."""
    candidates: tuple[Candidate, ...] = field(default_factory=tuple)

    @property
    def reachable(self) -> bool:
        return self.max_fleet.passed

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "reachable": self.reachable,
            "max_fleet_attainment": self.max_fleet.attainment,
            "oracle99": None if self.oracle99 is None else self.oracle99.as_dict(),
            "static99": None if self.static99 is None else self.static99.as_dict(),
            "runs": len(self.candidates),
        }


@dataclass(frozen=True, slots=True)
class Hint:
    """Where a previous search (another seed of the same workload) ended: probing there first saves runs."""

    headroom: float | None = None
    fleet: Mapping[str, int] | None = None

    @classmethod
    def of(cls, frontier: Frontier | None) -> Hint | None:
        if frontier is None or not frontier.reachable:
            return None
        schedules = [c for c in frontier.candidates if c.kind == "schedule" and c.passed]
        headroom = min(schedules, key=lambda c: c.cost).headroom if schedules else None
        fleet = frontier.static99.fleet if frontier.static99 is not None else None
        return cls(headroom, fleet)


def miss_budget(scenario: Scenario, seed: int, target: float) -> int:
    """Misses a run may have and still reach `target`: ⌊(1 − target) · requests⌋ (requests arriving in the run)."""
    table = scenario.requests(run_seed=seed)
    arrivals = int(np.count_nonzero(table.arrival_s < scenario.effective_duration_s()))
    return math.floor((1.0 - target) * arrivals + 1e-9)


def search(
    scenario: Scenario,
    seed: int,
    *,
    runner: Runner,
    bound: OraclePlan,
    target: float = TARGET,
    static: bool = True,
    hint: Hint | None = None,
) -> Frontier:
    """The frontier of one (scenario, seed); see the module docstring."""
    if not 0.0 < target <= 1.0:
        raise ValueError(f"target must be in (0, 1], got {target}")
    variants = oracle_variants(scenario)
    search = _Search(scenario, seed, runner=runner, bound=bound, target=target, variants=variants)
    biggest = search.static({v.name: v.max_replicas for v in variants}, kind="max-fleet", stop_early=False)
    if not biggest.passed:
        return Frontier(target, biggest, None, None, tuple(search.runs))
    search.schedules(hint.headroom if hint is not None else None)
    static99 = search.static_fleets(hint.fleet if hint is not None else None) if static else None
    passed = [c for c in search.runs if c.passed]
    best = min(passed, key=lambda c: (c.cost, c.kind != "schedule"))
    return Frontier(target, biggest, best, static99, tuple(search.runs))


class _Search:
    def __init__(
        self,
        scenario: Scenario,
        seed: int,
        *,
        runner: Runner,
        bound: OraclePlan,
        target: float,
        variants: Sequence[OracleVariant],
    ) -> None:
        self.scenario = scenario
        self.runner = runner
        self.bound = bound
        self.target = target
        self.variants = variants
        self.budget = miss_budget(scenario, seed, target)
        self.demand = oracle_demand(scenario, seed)
        self.capacity = capacities(variants, self.demand, ttft_ms=scenario.slo.ttft_ms, itl_ms=scenario.slo.itl_ms)
        fleet = {v.name: v for v in scenario.fleet_config(start_s=START_S).variants}
        self.ready_after_s = [startup_quantile_s(fleet[v.name].startup, DEFAULT_LEAD_QUANTILE) for v in variants]
        """When a replica requested at the start is ready in the loop (its p90 startup: the schedule's lead)."""
        self.runs: list[Candidate] = []
        self._static: dict[tuple[int, ...], Candidate] = {}

    # ------------------------------------------------------------------------------------ one measured run

    def _measure(self, sim: Simulation) -> tuple[float, float | None, bool]:
        if sim.stopped_early:
            return float(sim.summary["cost"]), None, False
        attainment = float(sim.summary["slo_attainment"])
        return float(sim.summary["cost"]), attainment, attainment >= self.target

    def schedule(self, headroom: float) -> Candidate:
        demand = self.demand.scaled(headroom) if headroom != 1.0 else self.demand
        program = plan(self.variants, demand, self.capacity, ready_after_s=self.ready_after_s)
        sim = self.runner("oracle", RunOptions(bound=self.bound, schedule=program, max_misses=self.budget))
        cost, attainment, passed = self._measure(sim)
        candidate = Candidate("schedule", cost, attainment, passed, headroom=headroom, schedule_cost=program.cost)
        self.runs.append(candidate)
        return candidate

    def static(self, fleet: Mapping[str, int], *, kind: Kind = "static", stop_early: bool = True) -> Candidate:
        key = tuple(fleet[v.name] for v in self.variants)
        known = self._static.get(key)
        if known is not None:
            return known
        options = RunOptions(bound=self.bound, fleet=dict(fleet), max_misses=self.budget if stop_early else None)
        cost, attainment, passed = self._measure(self.runner("static", options))
        candidate = Candidate(kind, cost, attainment, passed, fleet=dict(fleet))
        self._static[key] = candidate
        self.runs.append(candidate)
        return candidate

    # ------------------------------------------------------------------------------------ schedules

    def schedules(self, start: float | None) -> None:
        """Grow h from `start` (else 1) until a schedule passes (going down first when `start` passes), then
        bisect between the last miss and the first hit."""
        bracket = self._bracket(max(1.0, start or 1.0), GROW if start is None else math.sqrt(GROW))
        if bracket is None:
            return
        miss, hit = bracket
        for _ in range(BISECT_STEPS):
            mid = math.sqrt(miss * hit)
            if self.schedule(mid).passed:
                hit = mid
            else:
                miss = mid

    def _bracket(self, h: float, step: float) -> tuple[float, float] | None:
        """(a headroom that misses, a bigger one that hits), or None when there is nothing to bisect: h = 1
        hits already, or nothing up to `MAX_HEADROOM` does (static fleets may still)."""
        if self.schedule(h).passed:
            while h > 1.0:
                lower = max(1.0, h / step)
                if not self.schedule(lower).passed:
                    return lower, h
                h = lower
            return None
        while h * step <= MAX_HEADROOM:
            if self.schedule(h * step).passed:
                return h, h * step
            h *= step
        return None

    # ------------------------------------------------------------------------------------ static fleets

    def static_fleets(self, hint: Mapping[str, int] | None) -> Candidate | None:
        """With a hint, a local search around it (`_local`); without, single-variant fleets (the others at their
        minimum), then coordinate descent from the maximum fleet (each variant in turn cut to the fewest replicas
        that still pass, one order per variant first), then neighbours of the cheapest: up to `NEIGHBOURS` more
        of another variant while the largest is cut again."""
        if hint is not None:
            return self._local(hint)
        found: list[Candidate] = []
        lows = {v.name: v.min_replicas for v in self.variants}
        for v in self.variants:
            best = self._least(v, lows, upper=v.max_replicas)
            if best is not None:
                found.append(best)
        for first in range(len(self.variants)):
            fleet = {v.name: v.max_replicas for v in self.variants}
            for v in (*self.variants[first:], *self.variants[:first]):
                cut = self._least(v, fleet, upper=fleet[v.name])
                if cut is None or cut.fleet is None:
                    break
                fleet = dict(cut.fleet)
                found.append(cut)
        if not found:
            return None
        base = dict(min(found, key=lambda c: c.cost).fleet or {})
        grown = max(self.variants, key=lambda v: base[v.name] - v.min_replicas)
        for other in self.variants:
            if other is grown:
                continue
            for extra in range(1, NEIGHBOURS + 1):
                fleet = {**base, other.name: min(base[other.name] + extra, other.max_replicas)}
                if fleet == base:
                    break
                better = self._least(grown, fleet, upper=base[grown.name])
                if better is not None:
                    found.append(better)
        return min(found, key=lambda c: c.cost)

    def _local(self, start: Mapping[str, int]) -> Candidate | None:
        """From `start` (another seed's static99): add replicas of the cheapest capacity until it passes, then
        remove single replicas, the dearest first, while it still passes. A few runs instead of a search."""
        fleet = {
            v.name: min(max(start.get(v.name, v.min_replicas), v.min_replicas), v.max_replicas) for v in self.variants
        }
        per_dollar = {
            v.name: float(np.mean(self.capacity[i][self.capacity[i] > 0])) / v.cost_per_hour
            if v.cost_per_hour > 0 and np.any(self.capacity[i] > 0)
            else 0.0
            for i, v in enumerate(self.variants)
        }
        current = self.static(fleet)
        while not current.passed:
            room = [v for v in self.variants if fleet[v.name] < v.max_replicas]
            if not room:
                return None
            cheapest = max(room, key=lambda v: per_dollar[v.name])
            fleet[cheapest.name] += 1
            current = self.static(fleet)
        improved = True
        while improved:
            improved = False
            for v in sorted(self.variants, key=lambda v: -v.cost_per_hour):
                if fleet[v.name] > v.min_replicas:
                    probe = self.static({**fleet, v.name: fleet[v.name] - 1})
                    if probe.passed:
                        fleet, current, improved = dict(probe.fleet or fleet), probe, True
                        break
        return current

    def _least(self, variant: OracleVariant, others: Mapping[str, int], *, upper: int) -> Candidate | None:
        """The fewest replicas of `variant` in [min, upper] that pass with the others as given (bisection)."""
        lo, hi = variant.min_replicas, upper
        top = self.static({**others, variant.name: hi})
        if not top.passed:
            return None
        best = top
        while lo < hi:
            mid = (lo + hi) // 2
            probe = self.static({**others, variant.name: mid})
            if probe.passed:
                hi, best = mid, probe
            else:
                lo = mid + 1
        return best
