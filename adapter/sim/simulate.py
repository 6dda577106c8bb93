"""`wva-adapter simulate`: a scenario played in closed loop on a virtual clock, scored against a clairvoyant
oracle (DESIGN §3.3).

    workload ─► SimulatedFleet (vLLM replicas, EPP router, startup times, metrics as PromQL would see them)
                   │ snapshot every engine interval                ▲ spec.replicas
                   ▼                                               │
          policy: wva-v1 | wva-v2 | wva-slo (the real engine)   actuator (HPA / KEDA emulation, as configured)
                  hpa-kv | keda-queue (the metric a user would pick) │
                  static                                            │
                   └──────────────── desired value per variant ─────┘

Policies. `wva-*` run `engine.decide` on what the collector would see, with the scenario's ConfigMaps plus the
policy's analyzer selection (wva-v2: `analyzerName: saturation`; wva-slo: a queueing-model `default` with the
scenario's SLO as explicit targets); the served `wva_desired_replicas` goes to the actuator. Baselines feed the
same actuator with the metric a user would configure: `hpa-kv` ready replicas × mean KV usage / 0.7 (HPA on
KV utilisation, target 0.7), `keda-queue` waiting requests / 5 (target 5 per replica); `static` keeps the
initial replicas. A policy whose analyzer the engine does not implement is an error, never a silent V1.

Oracle (`oracle_cost`): for every engine-interval bin of the workload, the cheapest mix of variants whose
capacity at the SLO (λ* from the queueing model with each variant's α, β, γ, at the bin's mean request size)
covers the bin's arrival rate (cheapest per unit first, spilling at max_replicas), each replica paid from its
median startup time before it is needed. A lower bound a real policy approaches only by predicting load.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from adapter import engine
from adapter.analyzers.queueing.model import QueueModel, RequestSize, ServiceParams
from adapter.config.configmaps import QUEUEING_CM, SATURATION_CM, ConfigSet
from adapter.config.engine import EngineConfig
from adapter.domain.decision import AnalyzerName
from adapter.domain.errors import ConfigError
from adapter.domain.snapshot import VariantStatus
from adapter.sim.actuators import actuator_from_spec
from adapter.sim.fleet import SimulatedFleet, VariantConfig
from adapter.sim.scenario import Scenario

POLICIES = ("wva-v1", "wva-v2", "wva-slo", "hpa-kv", "keda-queue", "static")
POLICY_ANALYZER = {
    "wva-v1": AnalyzerName.SATURATION_PERCENTAGE,
    "wva-v2": AnalyzerName.SATURATION_TOKEN,
    "wva-slo": AnalyzerName.QUEUEING_MODEL,
}
HPA_KV_TARGET = 0.7
KEDA_QUEUE_TARGET = 5.0
STEP_S = 5.0
"""How often actuators and baselines look (HPA syncs every 15 s by default; the fleet runs in finer ticks)."""
START_S = 1_767_225_600.0


@dataclass
class Simulation:
    summary: dict[str, Any]
    fleet: SimulatedFleet
    oracle_timeline: list[tuple[float, dict[str, int]]] = field(default_factory=list)


def policy_configmaps(scenario: Scenario, policy: str) -> ConfigSet:
    """The scenario's ConfigMaps with the policy's analyzer selected in the controller namespace."""
    if policy not in POLICIES:
        raise ConfigError(f"policy {policy!r}: expected one of {', '.join(POLICIES)}")
    analyzer = POLICY_ANALYZER.get(policy)
    if analyzer is not None and analyzer not in engine.IMPLEMENTED_ANALYZERS:
        raise ConfigError(f"policy {policy!r} needs the {analyzer} analyzer, which this engine does not implement")
    base = scenario.configmaps
    raw = [(ns, name, dict(data)) for ns, name, data in base.sources]
    ns = base.controller_namespace
    sat = next((d for n, name, d in raw if n == ns and name == SATURATION_CM), None)
    if sat is None:
        sat = {}
        raw.append((ns, SATURATION_CM, sat))
    default = str(sat.get("default", ""))
    lines = [ln for ln in default.splitlines() if not ln.strip().startswith("analyzerName")]
    if policy == "wva-v2":
        lines.append("analyzerName: saturation")
    sat["default"] = "\n".join(lines) + ("\n" if lines else "")
    raw = [(n, name, d) for n, name, d in raw if name != QUEUEING_CM]
    if policy == "wva-slo":
        slo = scenario.slo
        raw.append((ns, QUEUEING_CM, {"default": f"targetTTFT: {slo.ttft_ms:g}\ntargetITL: {slo.itl_ms:g}\n"}))
    return ConfigSet.from_raw(raw, controller_namespace=ns, scale_to_zero_env=base.scale_to_zero_env)


def simulate(
    scenario: Scenario, *, policy: str, seed: int = 0, progress: Callable[[float], None] | None = None
) -> Simulation:
    started = time.perf_counter()
    configmaps = policy_configmaps(scenario, policy)
    fleet = SimulatedFleet(scenario.fleet_config(start_s=START_S, seed=seed), scenario.workload())
    duration = scenario.effective_duration_s()
    bounds = {va.key.name: (va.spec.min_replicas, va.spec.max_replicas) for va in scenario.vas}
    actuator = actuator_from_spec(scenario.actuation, bounds=bounds, start_s=START_S)
    config = EngineConfig(configmaps=configmaps, interval_s=scenario.engine_interval_s)
    state = engine.EngineState()
    statuses: dict[str, VariantStatus] = {}
    served: dict[str, float | None] = {}
    next_engine = START_S
    now = START_S
    end = START_S + duration
    while now < end:
        now = min(now + STEP_S, end)
        fleet.advance(now)
        if policy.startswith("wva-") and now >= next_engine:
            snapshot = fleet.snapshot(now, statuses)
            result, state = engine.decide(snapshot, state, config, now)
            statuses = {k.name: s for k, s in engine.statuses(result, snapshot).items()}
            served = {k.name: float(d.desired_replicas) for k, d in result.decisions.items()}
            next_engine = now + scenario.engine_interval_s
        elif policy in ("hpa-kv", "keda-queue"):
            served = _baseline(policy, fleet, now)
        if policy != "static":
            targets = {va.key.name: fleet.scale_target(va.key.name) for va in scenario.vas}
            for variant, replicas in actuator.step(now, desired=served, targets=targets).items():
                fleet.set_replicas(variant, replicas, now)
        if progress is not None:
            progress((now - START_S) / duration)
    oracle_cost, oracle_timeline = oracle(scenario, duration)
    summary = _summary(scenario, fleet, policy, oracle_cost, wall_s=time.perf_counter() - started)
    return Simulation(summary, fleet, oracle_timeline)


def _baseline(policy: str, fleet: SimulatedFleet, now: float) -> dict[str, float | None]:
    """The value a user's HPA/KEDA metric would have: desired replicas at target AverageValue 1."""
    snapshot = fleet.snapshot(now, {})
    out: dict[str, float | None] = {}
    for view in snapshot.variants:
        pods = [p for p in snapshot.pods if p.variant == view.key.name]
        if policy == "hpa-kv":
            if not pods:
                out[view.key.name] = None  # no metric: the HPA holds
                continue
            mean_kv = sum(p.kv_cache_usage or 0.0 for p in pods) / len(pods)
            out[view.key.name] = len(pods) * mean_kv / HPA_KV_TARGET
        else:
            waiting = sum(p.queue_length or 0.0 for p in pods) + (fleet.epp_queue_size if not pods else 0)
            out[view.key.name] = waiting / KEDA_QUEUE_TARGET
    return out


def oracle(scenario: Scenario, duration_s: float) -> tuple[float, list[tuple[float, dict[str, int]]]]:
    """The clairvoyant cost (module docstring) and its replicas per bin."""
    interval = scenario.engine_interval_s
    bins = max(1, math.ceil(duration_s / interval))
    count = np.zeros(bins)
    tokens_in = np.zeros(bins)
    tokens_out = np.zeros(bins)
    for request in scenario.workload():
        offset = request.arrival_s
        if offset >= duration_s:
            break
        b = int(offset // interval)
        count[b] += 1
        tokens_in[b] += request.input_tokens
        tokens_out[b] += request.output_tokens
    variants = scenario.fleet_config(start_s=0.0).variants
    slo = scenario.slo
    plan: list[tuple[float, dict[str, int]]] = []
    cost = 0.0
    previous = {v.name: 0 for v in variants}
    capacity_cache: dict[tuple[str, int, int], float] = {}
    for b in range(bins):
        rate = count[b] / interval
        size_in = tokens_in[b] / count[b] if count[b] else 512.0
        size_out = max(1.0, tokens_out[b] / count[b]) if count[b] else 128.0
        caps = {v.name: _capacity(v, (size_in, size_out), (slo.ttft_ms, slo.itl_ms), capacity_cache) for v in variants}
        replicas = {v.name: v.min_replicas for v in variants}
        remaining = rate - sum(replicas[v.name] * caps[v.name] for v in variants)
        for v in sorted((v for v in variants if caps[v.name] > 0), key=lambda v: (v.cost / caps[v.name], v.name)):
            if remaining <= 0:
                break
            add = min(math.ceil(remaining / caps[v.name] - 1e-9), v.max_replicas - replicas[v.name])
            if add > 0:
                replicas[v.name] += add
                remaining -= add * caps[v.name]
        for v in variants:
            cost += replicas[v.name] * v.cost * interval / 3600.0
            started = max(0, replicas[v.name] - previous[v.name])
            cost += started * v.cost * v.startup.median_s / 3600.0  # paid from its start, a median startup earlier
        previous = replicas
        plan.append((b * interval, dict(replicas)))
    return cost, plan


def _capacity(
    v: VariantConfig, size: tuple[float, float], slo: tuple[float, float], cache: dict[tuple[str, int, int], float]
) -> float:
    size_in, size_out = size
    ttft_ms, itl_ms = slo
    key = (v.name, round(size_in), round(size_out))
    if key not in cache:
        p = v.perf
        try:
            model = QueueModel(
                ServiceParams(p.alpha_ms, p.beta_ms, p.gamma_ms),
                RequestSize(size_in, size_out),
                max_batch=p.max_num_seqs,
                max_queue=10 * p.max_num_seqs,
            )
            cache[key] = model.max_rate(ttft_ms, itl_ms).throughput_rps
        except (ValueError, ArithmeticError, ConfigError, Exception):
            cache[key] = 0.0
    return cache[key]


def _summary(
    scenario: Scenario, fleet: SimulatedFleet, policy: str, oracle_cost: float, *, wall_s: float
) -> dict[str, Any]:
    outcomes = fleet.outcomes()
    usage = fleet.usage()
    slo = scenario.slo
    names = [v.name for v in fleet.variants]
    replicas_max = dict.fromkeys(names, 0)
    for point in fleet.timeline:
        for name, spec in zip(names, point.spec, strict=True):
            replicas_max[name] = max(replicas_max[name], spec)
    cost = usage.cost
    return {
        "schema": "wva-sim-summary/v1",
        "scenario": scenario.name,
        "policy": policy,
        "requests": outcomes.completed + outcomes.dropped + outcomes.in_flight,
        "completed": outcomes.completed,
        "dropped": outcomes.dropped,
        "slo_attainment": round(outcomes.slo_attainment(ttft_s=slo.ttft_ms / 1000, itl_s=slo.itl_ms / 1000), 6),
        "ttft_p50_ms": _round(outcomes.percentile_ms("ttft", 50)),
        "ttft_p99_ms": _round(outcomes.percentile_ms("ttft", 99)),
        "itl_p50_ms": _round(outcomes.percentile_ms("itl", 50)),
        "itl_p99_ms": _round(outcomes.percentile_ms("itl", 99)),
        "gpu_hours": round(usage.gpu_hours, 4),
        "cost": round(cost, 4),
        "oracle_cost": round(oracle_cost, 4),
        "cost_ratio_vs_oracle": round(cost / oracle_cost, 4) if oracle_cost > 0 else None,
        "scale_events": len(fleet.scale_events),
        "replicas_max": replicas_max,
        "wall_s": round(wall_s, 3),
    }


def _round(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 2)


def progress_bar(stream: Any = sys.stderr) -> Callable[[float], None] | None:
    """A one-line progress bar when `stream` is a terminal, else None."""
    if not getattr(stream, "isatty", lambda: False)():
        return None
    last = [-1]

    def show(fraction: float) -> None:
        percent = int(fraction * 100)
        if percent != last[0]:
            last[0] = percent
            bar = "#" * (percent // 4)
            stream.write(f"\rsimulating [{bar:<25}] {percent:3d}%")
            if percent >= 100:
                stream.write("\n")
            stream.flush()

    return show


def plot(sim: Simulation, scenario: Scenario, path: Path) -> Path:
    """Load, replicas per variant, p99 TTFT and ITL against the SLO over time, as one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fleet = sim.fleet
    points = fleet.timeline
    t = np.array([(p.t_s - START_S) / 60 for p in points])
    arrived = np.array([p.arrived for p in points], dtype=float)
    outcomes = fleet.outcomes()
    fig, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    if len(t) > 1:
        rate = np.diff(arrived) / np.maximum(np.diff(t) * 60, 1e-9)
        axes[0].plot(t[1:], rate, lw=0.8)
    axes[0].set_ylabel("arrivals (req/s)")
    for i, v in enumerate(fleet.variants):
        axes[1].step(t, [p.spec[i] for p in points], where="post", label=f"{v.name} (spec)")
        axes[1].plot(t, [p.ready[i] for p in points], lw=0.6, ls="--", label=f"{v.name} (ready)")
    oracle_t = [(s / 60, sum(r.values())) for s, r in sim.oracle_timeline]
    if oracle_t:
        axes[1].step(
            [x for x, _ in oracle_t],
            [y for _, y in oracle_t],
            where="post",
            color="k",
            lw=0.6,
            label="oracle (all variants)",
        )
    axes[1].set_ylabel("replicas")
    axes[1].legend(fontsize=7, loc="upper left")
    bins = np.arange(0, max(float(t[-1]) if len(t) else 1.0, 1.0) + 1, 1.0)
    minutes = (outcomes.arrival_s - START_S) / 60
    p99_ttft, p99_itl = [], []
    for lo, hi in itertools.pairwise(bins):
        sel = (minutes >= lo) & (minutes < hi)
        p99_ttft.append(np.percentile(outcomes.ttft_s[sel], 99) * 1000 if sel.any() else np.nan)
        itl = outcomes.itl_s[sel]
        itl = itl[~np.isnan(itl)]
        p99_itl.append(np.percentile(itl, 99) * 1000 if itl.size else np.nan)
    axes[2].plot(bins[:-1], p99_ttft, label="p99 TTFT (ms)")
    axes[2].plot(bins[:-1], p99_itl, label="p99 ITL (ms)")
    axes[2].axhline(scenario.slo.ttft_ms, color="C0", ls=":", lw=0.8, label="TTFT SLO")
    axes[2].axhline(scenario.slo.itl_ms, color="C1", ls=":", lw=0.8, label="ITL SLO")
    axes[2].set_yscale("log")
    axes[2].set_xlabel("minutes")
    axes[2].legend(fontsize=7, loc="upper left")
    s = sim.summary
    fig.suptitle(
        f"{scenario.name} — {s['policy']}: SLO {s['slo_attainment']:.1%}, cost {s['cost']:.2f} "
        f"(oracle {s['oracle_cost']:.2f})",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
