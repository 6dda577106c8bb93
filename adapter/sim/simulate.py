"""`wva-adapter simulate`: a scenario played in closed loop on a virtual clock, scored against the clairvoyant
oracle (DESIGN §3.1, §3.3).

    workload ─► SimulatedFleet ──scrape every scrape_interval_s──► SeriesStore (simulated Prometheus)
                   ▲ spec.replicas                                      │
                   │                                                    ▼
            actuator (HPA/KEDA emulation) ◄── served value ◄── wva-*: the reconciler `serve` runs
                                                               (adapter.sim.pipeline; collector queries and
                                                               assembly injected by adapter.app.simulate)
                                                          ◄── hpa-kv / keda-queue: the baseline's metric
                                                          ◄── static: nothing

Events, all on the virtual clock: the engine cycle every `engine.interval_s` (the first at the start, as
`serve` runs its first cycle at once), the actuator's syncs (HPA `sync_period_s`, KEDA `polling_interval_s`),
and, while every variant is at zero, the scale-from-zero poll every 100 ms. Between events the fleet runs
(arrivals, routing, batching, startups, scrapes).

Scoring. Cost and GPU hours are counted over [0, duration). Arrivals stop at the end; the fleet then runs on,
unchanged, until every request has finished (at most `DRAIN_LIMIT_S`), so every arrived request is scored:
`slo_attainment` = requests meeting both TTFT and ITL targets / requests, where dropped and still unfinished
ones count as misses (`dropped` includes the unfinished; `dropped_by_reason` says which). Latency percentiles
are over completed requests (null when none completed). `oracle_cost` comes from `adapter.sim.oracle` over
the same workload. Extra fields beside DESIGN §3.3's: `schema`, `scenario`, `policy`, `seed`, `duration_s`,
`cold_starts`, `dropped_by_reason`, `engine_cycles`, `analyzer_cycles` (which analyzer decided how many
cycles), `oracle_infeasible_bins`, `preemptions`.

Seeds: `--seed N` (default: the scenario's `seed`, else 0) seeds the fleet (startup times) and is added to the
workload's own `seed`, so seed 0 replays the scenario file exactly.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from adapter.domain.decision import CycleResult
from adapter.reconciler.loop import Reconciler
from adapter.reconciler.ports import MetricsSource
from adapter.sim.actuators import Actuator, ScheduleActuator, actuator_from_spec
from adapter.sim.fleet import FleetConfig, SimulatedFleet, StartupTime
from adapter.sim.metricspath import SeriesStore
from adapter.sim.oracle import Demand, OraclePlan, OracleVariant, capacities, demand_bins, plan
from adapter.sim.pipeline import SimCluster, build_reconciler
from adapter.sim.policies import (
    POLICIES,
    Policy,
    baseline_actuator,
    baseline_metric,
    is_wva,
    parse_policy,
    policy_configmaps,
)
from adapter.sim.scenario import Scenario
from adapter.store import DecisionStore

if TYPE_CHECKING:
    from adapter.sim.frontier import Frontier

__all__ = ["POLICIES", "START_S", "Clock", "MetricsFactory", "Simulation", "progress_bar", "run", "simulate"]

SCHEMA = "wva-sim-summary/v1"
START_S = 1_767_225_600.0
"""2026-01-01T00:00:00Z: the virtual clock's origin (VA status timestamps are whole RFC 3339 seconds)."""
DRAIN_LIMIT_S = 900.0
"""After the end, requests in flight get this long to finish before they count as unfinished."""
WAKE_INTERVAL_S = 0.1
"""Scale-from-zero poll while every variant is at zero (upstream's 100 ms)."""
PROGRESS_STEP_S = 60.0
DEFAULT_LEAD_QUANTILE = 0.9
"""`oracle` policy: replicas are requested the p90 of their startup time ahead (issue 17: the scenario's p90)."""


class Clock:
    """The virtual clock the reconciler, the status writer and the simulated Prometheus read."""

    def __init__(self, now_s: float) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


MetricsFactory = Callable[[SeriesStore, Clock], MetricsSource]
"""Builds the reconciler's MetricsSource over the simulated Prometheus (adapter.app.simulate: the collector's
queries and assembly; this package may not import adapter.metrics)."""


@dataclass
class Simulation:
    summary: dict[str, Any]
    scenario: Scenario
    policy: Policy
    fleet: SimulatedFleet
    oracle: OraclePlan
    start_s: float
    end_s: float
    cycles: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    """(time, desired replicas per variant) of every engine cycle (wva-* policies)."""
    schedule: ScheduleActuator | None = None
    """The oracle policy's actuation (the clairvoyant schedule and its leads); None for other policies."""
    stopped_early: bool = False
    """True when the run stopped once more requests had missed than `RunOptions.max_misses` allows."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What the frontier search varies between runs of one scenario (adapter.sim.frontier); the defaults are
    a plain `simulate` run."""

    bound: OraclePlan | None = None
    """The oracle bound of this (scenario, seed) when the caller has it already (it is the same every run)."""
    schedule: OraclePlan | None = None
    """`oracle` policy: the schedule to actuate (default: the bound's, the demand at headroom 1)."""
    lead_quantile: float = DEFAULT_LEAD_QUANTILE
    """`oracle` policy: each replica is requested this quantile of its variant's startup time ahead."""
    fleet: Mapping[str, int] | None = None
    """`static` policy: the replicas to hold (default: each variant's initial replicas), within its bounds."""
    max_misses: int | None = None
    """Stop as soon as more requests than this have missed a target (a run that can no longer reach a goal)."""
    frontier: Frontier | None = None
    """Adds `oracle99_cost` and `cost_ratio_vs_oracle99` (and the frontier's details) to the summary."""


def simulate(
    scenario: Scenario,
    *,
    policy: str | None = None,
    seed: int | None = None,
    metrics: MetricsFactory | None = None,
    progress: Callable[[float], None] | None = None,
    options: RunOptions | None = None,
) -> Simulation:
    """Run one scenario with one policy (see `run`); blocking."""
    return asyncio.run(run(scenario, policy=policy, seed=seed, metrics=metrics, progress=progress, options=options))


async def run(
    scenario: Scenario,
    *,
    policy: str | None = None,
    seed: int | None = None,
    metrics: MetricsFactory | None = None,
    progress: Callable[[float], None] | None = None,
    options: RunOptions | None = None,
) -> Simulation:
    """The closed loop of the module docstring. `policy` defaults to the scenario's; a `wva-*` policy needs
    `metrics`. Raises PolicyError (a ConfigError) for a policy that cannot run."""
    started = time.perf_counter()
    options = options or RunOptions()
    chosen = parse_policy(policy or scenario.policy)
    run_seed = scenario.seed if seed is None else seed
    if is_wva(chosen) and metrics is None:
        raise ValueError(f"policy {chosen} needs a metrics factory (adapter.app.simulate provides it)")
    duration_s = scenario.effective_duration_s()
    bound = options.bound or oracle_bound(scenario, run_seed)
    loop = _Loop(scenario, chosen, run_seed, metrics, options=options, bound=bound)
    if options.max_misses is not None:
        slo = scenario.slo
        loop.fleet.watch_slo(ttft_s=slo.ttft_ms / 1000.0, itl_s=slo.itl_ms / 1000.0)
    stopped = await loop.play(START_S + duration_s, progress, max_misses=options.max_misses)
    usage = loop.fleet.usage()
    if not stopped:
        loop.drain(START_S + duration_s + DRAIN_LIMIT_S)
    if progress is not None:
        progress(1.0)
    sim = Simulation(
        {}, scenario, chosen, loop.fleet, bound, START_S, START_S + duration_s, loop.cycles, loop.schedule, stopped
    )
    wall_s = time.perf_counter() - started
    sim.summary = _summary(sim, usage, run_seed, duration_s, loop.analyzers, frontier=options.frontier, wall_s=wall_s)
    return sim


def oracle_variants(scenario: Scenario) -> list[OracleVariant]:
    """The scenario's variants as the oracle sees them (cost, bounds, median startup, replica model)."""
    config = scenario.fleet_config(start_s=START_S)
    return [
        OracleVariant(
            v.name,
            v.cost,
            v.min_replicas,
            v.max_replicas,
            v.startup.median_s,
            v.perf,
            initial_replicas=v.initial_replicas,
        )
        for v in config.variants
    ]


def oracle_demand(scenario: Scenario, seed: int) -> Demand:
    """The run's demand per engine interval, from the same requests the fleet is offered."""
    return demand_bins(
        scenario.requests(run_seed=seed),
        duration_s=scenario.effective_duration_s(),
        interval_s=scenario.engine_interval_s,
    )


def oracle_bound(scenario: Scenario, seed: int, *, headroom: float = 1.0) -> OraclePlan:
    """The clairvoyant schedule for the demand × `headroom` (DESIGN §3.3; `oracle_cost` at headroom 1)."""
    variants = oracle_variants(scenario)
    demand = oracle_demand(scenario, seed)
    capacity = capacities(variants, demand, ttft_ms=scenario.slo.ttft_ms, itl_ms=scenario.slo.itl_ms)
    return plan(variants, demand.scaled(headroom) if headroom != 1.0 else demand, capacity)


def profiles_of(config: FleetConfig) -> dict[str, dict[str, float]]:
    """Each accelerator's service parameters as a user would have measured them with a benchmark (the scenario's
    replica model; the first variant of an accelerator wins): the predictive policy's `acceleratorProfiles`."""
    out: dict[str, dict[str, float]] = {}
    for v in config.variants:
        out.setdefault(v.accelerator, {"alpha": v.perf.alpha_ms, "beta": v.perf.beta_ms, "gamma": v.perf.gamma_ms})
    return out


def startup_quantile_s(startup: StartupTime, quantile: float) -> float:
    """The `quantile` of a variant's lognormal startup time: median · exp(σ · z_q). Example: median 120 s,
    p90 300 s (σ 0.715): q 0.9 ⇒ 300 s; q 0.5 ⇒ 120 s; q 0.99 ⇒ 120 · e^(0.715 · 2.326) = 632 s."""
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"lead quantile must be in (0, 1), got {quantile}")
    return startup.median_s * math.exp(startup.sigma * NormalDist().inv_cdf(quantile))


class _Loop:
    """The fleet, the simulated Prometheus and the policy's controller, stepped from event to event."""

    def __init__(
        self,
        scenario: Scenario,
        policy: Policy,
        seed: int,
        metrics: MetricsFactory | None,
        *,
        options: RunOptions,
        bound: OraclePlan,
    ) -> None:
        config = scenario.fleet_config(start_s=START_S, seed=seed)
        if policy is Policy.STATIC and options.fleet is not None:
            held = options.fleet
            config = replace(
                config,
                variants=tuple(
                    replace(v, initial_replicas=min(max(held.get(v.name, v.initial_replicas), v.min_replicas),
                                                    v.max_replicas))
                    for v in config.variants
                ),
            )  # fmt: skip
        retention_s = max(scenario.configmaps.scale_to_zero(scenario.model)[0].retention_period_s, 600.0)
        self.series = SeriesStore(
            namespace=config.namespace, model_id=config.model_id, keep_s=retention_s + 4 * config.scrape_interval_s
        )
        self.fleet = SimulatedFleet(config, scenario.requests(run_seed=seed), scrape_sink=self.series)
        self.scenario = scenario
        self.policy = policy
        self.names = tuple(v.name for v in config.variants)
        self.clock = Clock(START_S)
        self.decisions = DecisionStore()
        self.reconciler: Reconciler | None = None
        self.actuator: Actuator | None = None
        self.schedule: ScheduleActuator | None = None
        self.analyzers: Counter[str] = Counter()
        self.cycles: list[tuple[float, dict[str, int]]] = []
        bounds = {v.name: (v.min_replicas, v.max_replicas) for v in config.variants}
        if is_wva(policy):
            assert metrics is not None
            slo = scenario.slo
            configmaps = policy_configmaps(
                scenario.configmaps,
                policy,
                model=scenario.model,
                slo_ttft_ms=slo.ttft_ms,
                slo_itl_ms=slo.itl_ms,
                profiles=profiles_of(config),
            )
            cluster = SimCluster(self.fleet, scenario.vas, configmaps, clock=self.clock)
            self.reconciler = build_reconciler(
                cluster,
                metrics(self.series, self.clock),
                store=self.decisions,
                controller_namespace=scenario.configmaps.controller_namespace,
                interval_s=scenario.engine_interval_s,
                clock=self.clock,
            )
            self.actuator = actuator_from_spec(scenario.actuation, bounds=bounds, start_s=START_S)
        elif policy is Policy.ORACLE:
            schedule = options.schedule or bound
            self.schedule = ScheduleActuator(
                {v.name: schedule.replicas[i].tolist() for i, v in enumerate(config.variants)},
                interval_s=scenario.engine_interval_s,
                leads_s={v.name: startup_quantile_s(v.startup, options.lead_quantile) for v in config.variants},
                start_s=START_S,
            )
            self.actuator = self.schedule
        elif policy is not Policy.STATIC:
            self.actuator = baseline_actuator(policy, scenario.actuation, bounds=bounds, start_s=START_S)

    async def play(
        self, end_s: float, progress: Callable[[float], None] | None, *, max_misses: int | None = None
    ) -> bool:
        """From the start to `end_s`: engine cycles, wake polls and actuator syncs as they fall due. Returns
        True when it stopped early because more than `max_misses` requests had missed a target."""
        next_engine_s = START_S if self.reconciler is not None else math.inf
        while self.clock.now_s < end_s:
            if max_misses is not None and self.fleet.misses > max_misses:
                return True
            now = self.clock.now_s
            wake_s = now + WAKE_INTERVAL_S if self.reconciler is not None and self._idle() else math.inf
            actuator_s = self.actuator.next_event_s() if self.actuator is not None else math.inf
            due = min(end_s, next_engine_s, actuator_s, wake_s)
            t = max(now, min(due, now + PROGRESS_STEP_S))
            self.fleet.advance(t)
            self.clock.now_s = t
            if t >= end_s:
                break
            if self.reconciler is not None and t >= next_engine_s:
                next_engine_s += self.scenario.engine_interval_s
                self._record(await self.reconciler.run_cycle())
            elif self.reconciler is not None and wake_s <= t:
                await self.reconciler.wake_cycle()
            self._actuate(t)
            if progress is not None:
                progress((t - START_S) / (end_s - START_S))
        return False

    def _record(self, result: CycleResult | None) -> None:
        if result is None:
            return
        for analysis in result.analyses.values():
            self.analyzers[str(analysis.analyzer)] += 1
        self.cycles.append((result.now_s, {k.name: d.desired_replicas for k, d in result.decisions.items()}))

    def _actuate(self, now_s: float) -> None:
        if self.actuator is None:
            return
        desired: dict[str, float | None]
        if self.reconciler is not None:  # the served wva_desired_replicas (HPA target AverageValue 1)
            desired = {e.key.name: float(e.desired_replicas) for e in self.decisions.list()}
        elif self.schedule is not None:
            desired = {}
        else:
            desired = baseline_metric(self.policy, self.series, self.names, now_s=now_s)
        targets = {name: self.fleet.scale_target(name) for name in self.names}
        for name, replicas in self.actuator.step(now_s, desired=desired, targets=targets).items():
            self.fleet.set_replicas(name, replicas, now_s)

    def _idle(self) -> bool:
        return all(self.fleet.spec_replicas(name) == 0 for name in self.names)

    def drain(self, until_s: float) -> None:
        """No more arrivals: let what is in flight finish (the fleet as it is, nothing scales)."""
        while self.fleet.usage().in_flight > 0 and self.clock.now_s < until_s:
            self.clock.now_s = min(until_s, self.clock.now_s + 30.0)
            self.fleet.advance(self.clock.now_s)


def _summary(
    sim: Simulation,
    usage: Any,
    seed: int,
    duration_s: float,
    analyzers: Counter[str],
    *,
    frontier: Frontier | None,
    wall_s: float,
) -> dict[str, Any]:
    outcomes = sim.fleet.outcomes()
    slo = sim.scenario.slo
    met = int(np.count_nonzero(outcomes.met(ttft_s=slo.ttft_ms / 1000.0, itl_s=slo.itl_ms / 1000.0)))
    unfinished = outcomes.in_flight
    requests = outcomes.completed + outcomes.dropped + unfinished
    reasons = Counter(outcomes.dropped_reason)
    if unfinished:
        reasons["unfinished"] = unfinished
    cost = float(usage.cost)
    oracle_cost = float(sim.oracle.cost)
    oracle99 = frontier.oracle99.cost if frontier is not None and frontier.oracle99 is not None else None
    return {
        "schema": SCHEMA,
        "scenario": sim.scenario.name,
        "policy": str(sim.policy),
        "seed": seed,
        "duration_s": duration_s,
        "requests": requests,
        "completed": outcomes.completed,
        "dropped": outcomes.dropped + unfinished,
        "slo_attainment": round(met / requests, 6) if requests else 1.0,
        "ttft_p50_ms": _ms(outcomes.percentile_ms("ttft", 50)),
        "ttft_p99_ms": _ms(outcomes.percentile_ms("ttft", 99)),
        "itl_p50_ms": _ms(outcomes.percentile_ms("itl", 50)),
        "itl_p99_ms": _ms(outcomes.percentile_ms("itl", 99)),
        "gpu_hours": round(float(usage.gpu_hours), 6),
        "cost": round(cost, 6),
        "oracle_cost": round(oracle_cost, 6),
        "cost_ratio_vs_oracle": round(cost / oracle_cost, 4) if oracle_cost > 0 else None,
        "oracle99_cost": None if oracle99 is None else round(oracle99, 6),
        "cost_ratio_vs_oracle99": round(cost / oracle99, 4) if oracle99 else None,
        "scale_events": sum(v.scale_events for v in usage.variants),
        "replicas_max": {v.name: int(v.max_replicas) for v in usage.variants},
        "wall_s": round(wall_s, 3),
        "cold_starts": int(usage.cold_starts),
        "dropped_by_reason": dict(sorted(reasons.items())),
        "engine_cycles": len(sim.cycles),
        "analyzer_cycles": dict(sorted(analyzers.items())),
        "oracle_infeasible_bins": sim.oracle.infeasible_bins,
        "preemptions": int(usage.preemptions),
        "frontier": None if frontier is None else frontier.as_dict(),
    }


def _ms(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 3)


def progress_bar(stream: TextIO) -> Callable[[float], None] | None:
    """A one-line progress bar on `stream` when it is a terminal, else None (no output at all)."""
    if not stream.isatty():
        return None
    last = [-1]

    def show(fraction: float) -> None:
        percent = max(0, min(100, int(fraction * 100)))
        if percent != last[0]:
            last[0] = percent
            stream.write(f"\rsimulating [{'#' * (percent // 4):<25}] {percent:3d}%")
            if percent >= 100:
                stream.write("\n")
            stream.flush()

    return show
