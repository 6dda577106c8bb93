"""The shipped default at scale: decide with the ConfigMaps `serve` ships (the predictive analyzer), against V1, and
how long the event loop stalls while a cycle decides.

    .venv/bin/python -m tests.bench_default [--sizes 1000,10000] [--cycles 3]

Every row of `make bench`'s cycle benchmark decides with V1 (no ConfigMap). What users run decides with the
predictive analyzer, whose cost per VA is the queueing model: the EKF learning α, β, γ from every busy pod (the
shipped ConfigMaps, no `acceleratorProfiles`), or, with a profile for every accelerator, λ* at the tail-tightened
targets only. Measured on the cycle benchmark's fleets and fake Prometheus (all metrics, 10 pods a VA), decided
as the reconciler decides (`decide_cycle`), in a child process:

* decide CPU, median of `--cycles` cycles with the engine state carried, per configuration and size; learning is
  measured at the first size only (its first cycle fits every variant from scratch: minutes at 10,000 VAs);
* the first cycle of the learning configuration (every variant's cold-start fit);
* the event loop while a learning cycle of the first size decides in the reconciler's decide thread
  (`adapter.reconciler.loop._DECIDER`): the longest gap between the wake-ups of a 5-ms ticker, against the
  decide's own length (how long the loop stood still when decide ran on it).

Figures only, never an assertion on time.
"""

from __future__ import annotations

import argparse
import asyncio
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


def configs() -> dict[str, Any]:
    from adapter.config.configmaps import ConfigSet
    from adapter.config.engine import EngineConfig
    from tests.bench_sim import shipped_configmaps

    def build(extra: str) -> EngineConfig:
        entries = shipped_configmaps()
        for entry in entries:
            if entry["name"] == "wva-queueing-model-config" and extra:
                entry["data"] = {**entry["data"], "default": entry["data"]["default"] + extra}
        raw = [(e["namespace"], e["name"], e["data"]) for e in entries]
        return EngineConfig(configmaps=ConfigSet.from_raw(raw, controller_namespace=entries[0]["namespace"]))

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


def child(sizes: tuple[int, ...], cycles: int) -> dict[str, Any]:
    from adapter import engine
    from adapter.domain.snapshot import Snapshot
    from adapter.metrics.collector import PrometheusCollector
    from tests.bench_collect import NOW_S, make_fleet, start_fake
    from tests.profile_cycle import collect_serially, decide_fn

    decide = decide_fn()
    figures: dict[str, Any] = {"cycles": cycles, "rows": []}
    for size_index, n in enumerate(sizes):
        fleet = make_fleet(n)
        proc, url = start_fake(n)
        try:
            collection = collect_serially(PrometheusCollector(url, timeout_s=120), fleet)
        finally:
            proc.kill()
        snapshot = Snapshot(NOW_S, fleet.views, collection.pods, collection.models)
        for name, config in configs().items():
            if name == "learning" and size_index > 0:
                continue
            started = time.process_time()
            _, state = decide(snapshot, engine.EngineState(), config, NOW_S - 30)
            first_s = time.process_time() - started
            cpu_s = []
            for cycle in range(cycles):
                started = time.process_time()
                _, state = decide(snapshot, state, config, NOW_S + 30 * cycle)
                cpu_s.append(time.process_time() - started)
            row = {
                "config": name,
                "vas": n,
                "first_cycle_cpu_s": first_s,
                "median_cpu_ms": statistics.median(cpu_s) * 1e3,
                "cpu_us_per_va": statistics.median(cpu_s) / n * 1e6,
            }
            if name == "learning":
                args = (snapshot, state, config, NOW_S + 30 * cycles)
                row["loop_stall_ms"], row["decide_wall_ms"] = (x * 1e3 for x in asyncio.run(_stall(decide, args)))
            figures["rows"].append(row)
    return figures


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
            f"  {row['config']:9s} {row['vas']:>6,} VAs: {row['median_cpu_ms']:8.1f} ms, "
            f"{row['cpu_us_per_va']:7.1f} us a VA; first cycle {row['first_cycle_cpu_s']:7.2f} s"
        )
        if "loop_stall_ms" in row:
            print(
                f"            event loop while it decides in the reconciler's thread: longest stall "
                f"{row['loop_stall_ms']:.1f} ms during a {row['decide_wall_ms']:.0f}-ms decide"
            )
    return figures


if __name__ == "__main__":
    main()
