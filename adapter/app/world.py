"""DemoWorld: the simulated fleet, the real engine and the decision store, stepped on one virtual clock.

Synchronous and deterministic for a given seed, so tests can play an hour in a second; the async demo
runner only maps wall time onto it and serves the store.

    every tick:  fleet.advance(now) ─► engine due? ─► snapshot ─► decide ─► store.publish ─► VA statuses
                 actuator (HPA emulation) reads the *served* desired replicas ─► fleet.set_replicas
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapter import engine
from adapter.config.configmaps import ConfigSet
from adapter.config.engine import EngineConfig
from adapter.config.files import MAX_MANIFEST_BYTES, read_bounded
from adapter.config.safeload import load_yaml_all
from adapter.config.va import VariantAutoscaling, parse_va
from adapter.domain.decision import CycleResult
from adapter.domain.errors import ConfigError
from adapter.domain.snapshot import PodMetrics, VariantStatus
from adapter.replay.recorder import FlightRecorder
from adapter.sim import (
    Actuator,
    DiurnalArrivals,
    FleetConfig,
    HpaConfig,
    HpaEmulator,
    PerfParams,
    SimulatedFleet,
    StartupTime,
    SyntheticWorkload,
    TokenLengths,
    VariantConfig,
    actuator_from_spec,
)
from adapter.sim.scenario import Scenario

# Per-accelerator replica models for the built-in demo (llm-autoscaling-anchors §5 orders of magnitude):
# an L4 replica of an 8B model is slower per iteration and holds fewer KV tokens than an A100 one.
DEMO_PERF: Mapping[str, PerfParams] = {
    "L4": PerfParams(alpha_ms=22.0, beta_ms=0.09, gamma_ms=0.0003, kv_cache_tokens=40_000, max_num_seqs=128),
    "A100": PerfParams(alpha_ms=9.0, beta_ms=0.035, gamma_ms=0.0001, kv_cache_tokens=160_000, max_num_seqs=256),
}
DEFAULT_PERF = PerfParams()


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the live table."""

    variant: str
    accelerator: str
    cost: float
    arrival_rps: float
    kv_usage: float
    current: int
    ready: int
    desired: int
    reason: str


def load_vas(directory: Path) -> list[VariantAutoscaling]:
    """Every VariantAutoscaling in `va-*.yaml` files of `directory` (bounded reads, adapter.config.files); errors
    name the file."""
    vas = []
    for path in sorted(directory.glob("va-*.yaml")):
        data = read_bounded(path, what="", max_bytes=MAX_MANIFEST_BYTES)
        for doc in load_yaml_all(data, what=str(path), max_bytes=MAX_MANIFEST_BYTES):
            if isinstance(doc, dict) and doc.get("kind") == "VariantAutoscaling":
                vas.append(parse_va(doc, source=str(path)))
    if not vas:
        raise ConfigError(f"no VariantAutoscaling found in {directory}/va-*.yaml")
    if len({va.spec.model_id for va in vas}) != 1 or len({va.key.namespace for va in vas}) != 1:
        raise ConfigError(f"the demo needs the VAs in {directory} to share one modelID and namespace")
    return vas


def fleet_config_for(vas: Sequence[VariantAutoscaling], *, start_s: float, seed: int) -> FleetConfig:
    variants = tuple(
        VariantConfig(
            name=va.key.name,
            accelerator=va.to_spec().accelerator or "L4",
            cost=va.to_spec().cost,
            perf=DEMO_PERF.get(va.to_spec().accelerator, DEFAULT_PERF),
            min_replicas=va.spec.min_replicas,
            max_replicas=va.spec.max_replicas,
            initial_replicas=max(2, va.spec.min_replicas),
            startup=StartupTime(median_s=60.0, p90_s=120.0),
            target_name=va.spec.scale_target_ref.name,
        )
        for va in sorted(vas, key=lambda va: va.key)
    )
    return FleetConfig(
        model_id=vas[0].spec.model_id, variants=variants, namespace=vas[0].key.namespace, start_s=start_s, seed=seed
    )


def demo_workload(*, seed: int) -> SyntheticWorkload:
    """A 30-minute day: 3 rps at night to 40 rps at noon, so both scale-up and scale-down show."""
    return SyntheticWorkload(
        DiurnalArrivals(base_rps=3.0, peak_rps=40.0, period_s=1800.0),
        tokens=TokenLengths(input_mean_tokens=600.0, output_mean_tokens=150.0),
        duration_s=None,
        seed=seed,
    )


class DemoWorld:
    """Fleet + engine + store, advanced with `step_to(now_s)`."""

    def __init__(
        self,
        vas: Sequence[VariantAutoscaling],
        *,
        store: Any,
        start_s: float,
        engine_interval_s: float = 30.0,
        seed: int = 0,
        configmaps: ConfigSet | None = None,
        fleet: SimulatedFleet | None = None,
        actuator: Actuator | None = None,
        recorder: FlightRecorder | None = None,
    ) -> None:
        self.vas = list(vas)
        self.store = store
        self.fleet = fleet or SimulatedFleet(
            fleet_config_for(vas, start_s=start_s, seed=seed), demo_workload(seed=seed)
        )
        self.config = EngineConfig(configmaps=configmaps or ConfigSet(), interval_s=engine_interval_s)
        self.state = engine.EngineState()
        self.statuses: dict[str, VariantStatus] = {}
        self.next_engine_s = start_s
        self.actuator: Actuator = actuator or HpaEmulator(
            {
                va.key.name: HpaConfig(min_replicas=va.spec.min_replicas, max_replicas=va.spec.max_replicas)
                for va in self.vas
            },
            start_s=start_s,
        )
        self.last: CycleResult | None = None
        self._load: dict[str, tuple[float, float]] = {}
        self.recorder = recorder

    def step_to(self, now_s: float) -> CycleResult | None:
        """Advance the world to `now_s`; returns the cycle result when the engine ran."""
        self.fleet.advance(now_s)
        ran: CycleResult | None = None
        if now_s >= self.next_engine_s:
            snapshot = self.fleet.snapshot(now_s, self.statuses)
            before = self.state
            ran, self.state = engine.decide(snapshot, self.state, self.config, now_s)
            if self.recorder is not None:
                self.recorder.record(snapshot, ran, state_before=before, configmaps=self.config.configmaps.sources)
            self.store.publish(ran.decisions, now_s=now_s)
            self.statuses = {k.name: s for k, s in engine.statuses(ran, snapshot).items()}
            self._load = {
                va.key.name: _load_of([p for p in snapshot.pods if p.variant == va.key.name]) for va in self.vas
            }
            self.last = ran
            self.next_engine_s = now_s + self.config.interval_s
        served = {e.key.name: float(e.desired_replicas) for e in self.store.list()}
        targets = {va.key.name: self.fleet.scale_target(va.key.name) for va in self.vas}
        for name, replicas in self.actuator.step(now_s, desired=served, targets=targets).items():
            self.fleet.set_replicas(name, replicas, now_s)
        return ran

    def rows(self) -> list[Row]:
        rows = []
        decisions = self.last.decisions if self.last else {}
        for va in sorted(self.vas, key=lambda v: v.key):
            target = self.fleet.scale_target(va.key.name)
            arrival_rps, kv_usage = self._load.get(va.key.name, (0.0, 0.0))
            decision = decisions.get(va.key)
            rows.append(
                Row(
                    variant=va.key.name,
                    accelerator=va.to_spec().accelerator,
                    cost=va.to_spec().cost,
                    arrival_rps=arrival_rps,
                    kv_usage=kv_usage,
                    current=target.replicas,
                    ready=target.ready_replicas,
                    desired=decision.desired_replicas if decision else target.replicas,
                    reason=decision.reason if decision else "waiting for the first cycle",
                )
            )
        return rows


def _load_of(pods: Sequence[PodMetrics]) -> tuple[float, float]:
    """(Σ arrival rate, mean KV-cache usage) over a variant's reporting pods."""
    if not pods:
        return 0.0, 0.0
    arrival = sum(p.arrival_rate_rps or 0.0 for p in pods)
    return arrival, sum(p.kv_cache_usage or 0.0 for p in pods) / len(pods)


def world_from_scenario(scenario: Scenario, *, store: Any, start_s: float, seed: int = 0) -> DemoWorld:
    """A DemoWorld built from a simulation scenario file instead of the examples."""
    fleet = SimulatedFleet(scenario.fleet_config(start_s=start_s, seed=seed), scenario.workload())
    bounds = {va.key.name: (va.spec.min_replicas, va.spec.max_replicas) for va in scenario.vas}
    actuator = actuator_from_spec(scenario.actuation, bounds=bounds, start_s=start_s)
    return DemoWorld(
        scenario.vas,
        store=store,
        start_s=start_s,
        engine_interval_s=scenario.engine_interval_s,
        seed=seed,
        configmaps=scenario.configmaps,
        fleet=fleet,
        actuator=actuator,
    )
