"""The shipped default at scale: decide with the ConfigMaps `serve` ships (the predictive analyzer), against V1, and
how long the event loop stalls while a cycle decides.

    .venv/bin/python -m tests.bench_default [--sizes 1000,10000] [--cycles 3]

Every row of `make bench`'s cycle benchmark decides with V1 (no ConfigMap). What users run decides with the
predictive analyzer, whose cost per VA is the queueing model: the EKF learning α, β, γ from every busy pod (the
shipped ConfigMaps, no `acceleratorProfiles`), or, with a profile for every accelerator, λ* at the tail-tightened
targets only. Measured on the cycle benchmark's fleets and fake Prometheus (all metrics, 10 pods a VA), decided
as the reconciler decides (`decide_cycle`), in a child process:

* decide CPU, median of `--cycles` cycles with the engine state carried, per configuration and size (learning too
  at 10,000 VAs since its first cycle, every variant's fit in one lockstep, takes seconds rather than minutes);
* the same for the predictive configurations once every model's forecaster holds a full history (`full_histories`:
  `max_points` steps, 4 h at 30 s), the steady state of a `serve` that has run for hours — the first cycles' short
  histories hid a third of its cost (docs/benchmarks/scale.md, item 12);
* the first cycle of the learning configuration (every variant's cold-start fit), and, at the first size, the mean
  of its next `REFIT_CYCLES` cycles with the re-fits its filters make (every fourth cycle on this fleet, whose
  latencies no α, β, γ fit; the simulator's servers re-fit about as often: docs/benchmarks/scale.md, item 16);
* the event loop while a learning cycle of the first size decides in the reconciler's decide thread
  (`adapter.reconciler.loop._DECIDER`; `decide_cycle` hands the GIL over after 1 ms): the longest gap between the
  wake-ups of a 5-ms ticker, against the decide's own length (how long the loop stood still when decide ran on it).
  The longest gaps come from C calls that hold the GIL (the fit's linear algebra), which no switch interval
  shortens: three pairs at 1,000 VAs, 5 ms against 1 ms, read 46 / 56 / 122 against 39 / 48 / 129 ms.

Figures only, never an assertion on time.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import random
import statistics
import time
from typing import Any

from tests import benchchild

SIZES = (1000, 10000)
PROFILES = (
    "acceleratorProfiles:\n"
    "  H100: {alpha: 6.5, beta: 0.022, gamma: 0.00005}\n"
    "  A100: {alpha: 9.5, beta: 0.066, gamma: 0.00008}\n"
    "  L4: {alpha: 55, beta: 0.17, gamma: 0.0006}\n"
)
"""A profile for each accelerator of the benchmark fleet (docs/configuration.md, `acceleratorProfiles`)."""
REFIT_CYCLES = 8
"""Cycles of the learning fleet measured with its re-fits (two of them, every fourth cycle)."""


def configs() -> dict[str, Any]:
    from adapter.config.engine import EngineConfig
    from tests.shipped import configset_of, shipped_configmaps

    def build(extra: str) -> EngineConfig:
        entries = shipped_configmaps()
        for entry in entries:
            if entry["name"] == "wva-queueing-model-config" and extra:
                entry["data"] = {**entry["data"], "default": entry["data"]["default"] + extra}
        return EngineConfig(configmaps=configset_of(entries))

    return {"v1": EngineConfig(), "profiles": build(PROFILES), "learning": build("")}


async def _stall(decide: Any, args: tuple[Any, ...]) -> tuple[float, float]:
    """(longest gap of a 5-ms ticker, decide's wall time) while `decide(*args)` runs in the reconciler's thread."""
    from adapter.reconciler.loop import _DECIDER

    started = time.perf_counter()
    task = asyncio.get_running_loop().run_in_executor(_DECIDER, decide, *args)
    longest, last = 0.0, time.perf_counter()
    while not task.done():
        await asyncio.sleep(0.005)
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    await task
    return longest, time.perf_counter() - started


SEASON_STEPS = 60
"""The synthetic history's period (30 min at 30 s), ±30 % around the model's rate, with 5 % noise."""


def full_histories(state: Any, last_s: float) -> Any:
    """`state` with every model's forecaster (of any analyzer whose memory keeps `models` with one) holding a full
    history ending at `last_s`: `max_points` steps of a season (`SEASON_STEPS`) around the rate it last saw,
    `ERROR_WINDOW` one-step errors, and the models' period searches spread over `detect_every` cycles, as they are
    in a `serve` that has run for hours (each model's first cycle is when it was first seen)."""
    from adapter.analyzers.predictive.forecast import ERROR_WINDOW, Forecaster

    memories = {}
    for name, memory in state.analyzers.items():
        models = getattr(memory, "models", None)
        if not models:
            memories[name] = memory
            continue
        filled = {}
        for index, (key, model_state) in enumerate(models.items()):
            old, rng = model_state.forecaster, random.Random(index)
            cfg, rate = old.config, (old.values[-1] if old.values else 1.0) or 1.0
            values = [
                max(0.0, rate * (1.0 + 0.3 * math.sin(2 * math.pi * i / SEASON_STEPS) + rng.gauss(0.0, 0.05)))
                for i in range(cfg.max_points)
            ]
            doc = {
                "startS": last_s - (cfg.max_points - 1) * cfg.step_s,
                "stepS": cfg.step_s,
                "values": values,
                "level": values[-1],
                "slope": 0.0,
                "variance": (0.05 * rate) ** 2,
                "errors": [rng.gauss(0.0, 0.05 * rate) for _ in range(ERROR_WINDOW)],
                "periodSteps": None,
            }
            forecaster = dataclasses.replace(Forecaster.from_json(doc, cfg), since_detect=index % cfg.detect_every)
            filled[key] = dataclasses.replace(model_state, forecaster=forecaster)
        memories[name] = dataclasses.replace(memory, models=filled)
    return dataclasses.replace(state, analyzers=memories)


def fleet_snapshot(n_vas: int) -> Any:
    """The cycle benchmark's fleet of `n_vas` VAs as one snapshot: its recorded answers served by the fake
    Prometheus (a child process, stopped before returning) and collected in this thread."""
    from adapter.domain.snapshot import Snapshot
    from adapter.metrics.collector import PrometheusCollector
    from tests.bench_collect import NOW_S, fake_prometheus, make_fleet
    from tests.profile_cycle import collect_serially

    fleet = make_fleet(n_vas)
    with fake_prometheus(n_vas) as url:
        collection = collect_serially(PrometheusCollector(url, timeout_s=120), fleet)
    return Snapshot(NOW_S, fleet.views, collection.pods, collection.models)


def child(sizes: tuple[int, ...], cycles: int) -> dict[str, Any]:
    from adapter import engine
    from tests.bench_collect import NOW_S
    from tests.profile_cycle import decide_fn

    decide = decide_fn()
    figures: dict[str, Any] = {"cycles": cycles, "rows": []}
    for size_index, n in enumerate(sizes):
        snapshot = fleet_snapshot(n)
        for name, config in configs().items():
            started = time.process_time()
            _, cold = decide(snapshot, engine.EngineState(), config, NOW_S - 30)
            first_s = time.process_time() - started
            for history in ("first cycles",) if name == "v1" else ("first cycles", "full"):
                # the same cycles after the same first one, its forecasters' histories filled up to it or not (so
                # neither meets the learning fleet's re-fit, every 4th cycle: scale.md, "two properties")
                state = cold if history == "first cycles" else full_histories(cold, NOW_S - 30)
                cpu_s = []
                for cycle in range(cycles):
                    started = time.process_time()
                    _, state = decide(snapshot, state, config, NOW_S + 30 * cycle)
                    cpu_s.append(time.process_time() - started)
                row = {
                    "config": name,
                    "vas": n,
                    "history": history,
                    "first_cycle_cpu_s": first_s,
                    "median_cpu_ms": statistics.median(cpu_s) * 1e3,
                    "cpu_us_per_va": statistics.median(cpu_s) / n * 1e6,
                }
                if name == "learning" and history == "full" and size_index == 0:
                    args = (snapshot, state, config, NOW_S + 30 * cycles)
                    row["loop_stall_ms"], row["decide_wall_ms"] = (x * 1e3 for x in asyncio.run(_stall(decide, args)))
                figures["rows"].append(row)
            if name == "learning" and size_index == 0:
                figures["refits"] = _with_refits(decide, snapshot, cold, config, n)
    return figures


def _with_refits(decide: Any, snapshot: Any, cold: Any, config: Any, n: int) -> dict[str, Any]:
    """The learning fleet's cycles after its first, `REFIT_CYCLES` of them: the mean, which the re-fits make (this
    fleet's latencies fit no α, β, γ, so its filters are lost and re-fit every fourth cycle), and the longest."""
    from tests.bench_collect import NOW_S

    state, cpu_s = cold, []
    for cycle in range(REFIT_CYCLES):
        started = time.process_time()
        _, state = decide(snapshot, state, config, NOW_S + 30 * cycle)
        cpu_s.append(time.process_time() - started)
    return {"vas": n, "cycles": REFIT_CYCLES, "mean_cpu_s": statistics.mean(cpu_s), "max_cpu_s": max(cpu_s)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = tuple(int(x) for x in args.sizes.split(","))
    if args.child:
        benchchild.report(child(sizes, args.cycles))
        return {}
    figures: dict[str, Any] = benchchild.run("tests.bench_default", "--sizes", args.sizes, "--cycles", str(args.cycles))
    print(f"decide CPU, median of {figures['cycles']} cycles with the state carried:")
    for row in figures["rows"]:
        print(
            f"  {row['config']:9s} {row['vas']:>6,} VAs, {row['history']:12s}: {row['median_cpu_ms']:8.1f} ms, "
            f"{row['cpu_us_per_va']:7.1f} us a VA; first cycle {row['first_cycle_cpu_s']:7.2f} s"
        )
        if "loop_stall_ms" in row:
            print(
                f"            event loop while it decides in the reconciler's thread: longest stall "
                f"{row['loop_stall_ms']:.1f} ms during a {row['decide_wall_ms']:.0f}-ms decide"
            )
    refits = figures.get("refits")
    if refits:
        print(
            f"  learning  {refits['vas']:>6,} VAs, {refits['cycles']} cycles after the first, re-fits included: "
            f"mean {refits['mean_cpu_s'] * 1e3:.0f} ms ({refits['mean_cpu_s'] / refits['vas'] * 1e6:.0f} us a VA), "
            f"longest {refits['max_cpu_s']:.2f} s"
        )
    return figures


if __name__ == "__main__":
    main()
