"""How decide grows with the fleet, measured paired: 1,000, 10,000 and 20,000 VAs (10 pods each) decided in turn,
round after round, in one process.

The cycle benchmark (`tests.bench_collect`) measures each fleet size in its own run, minutes apart; on a shared
2-core machine the speed of the same code drifts by ±10 % between such runs, which is as large as the
difference the ratio row asks about (≤ 10.5× against 10×). Here the sizes alternate within each round, so a
slow minute slows every size alike, and the ratio is the median of the per-round ratios. The snapshots are the
cycle benchmark's (the fake Prometheus, all metrics), decided as the reconciler decides (`decide_cycle`: the
cyclic GC paused), each with its own engine state carried from a first cycle.

The ratio also moves from one process to the next, by more than from one round to the next: the same code
read 9.9× to 10.8× (1,000 → 10,000 VAs) in some twenty processes on one afternoon (docs/benchmarks/scale.md,
item 34), the place of every object in memory being each process's own. So `main` measures in `--processes`
child processes (3 by default) and pools their rounds: each figure is the median over every round of every
process, and each process's own ratio is printed beside it.

Each child holds all three fleets (~1 GB); `main` runs them one after another, apart from itself, so that the
benchmarks after it keep their own peak RSS. Figures only, never an assertion on time.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from typing import Any

from tests import benchchild

SIZES = (1000, 10000, 20000)


def child(sizes: tuple[int, ...], rounds: int) -> dict[str, Any]:
    from adapter import engine
    from adapter.config.engine import EngineConfig
    from tests.bench_collect import NOW_S
    from tests.bench_default import fleet_snapshot
    from tests.profile_cycle import decide_fn

    decide = decide_fn()
    setups = {}
    for n in sizes:
        snapshot = fleet_snapshot(n)
        _, state = decide(snapshot, engine.EngineState(), EngineConfig(), NOW_S - 30)
        setups[n] = (snapshot, state)
    cpu_s: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(rounds):
        for n in sizes:
            snapshot, state = setups[n]
            started = time.process_time()
            decide(snapshot, state, EngineConfig(), NOW_S)
            cpu_s[n].append(time.process_time() - started)
    return {"cpu_s": {str(n): cpu_s[n] for n in sizes}}


def pooled(sizes: tuple[int, ...], processes: list[dict[str, list[float]]]) -> dict[str, Any]:
    """The figures of every process's rounds taken together: per size its median CPU and the median of its
    per-round ratio to the smallest size, per pair of consecutive sizes the median per-round ratio, and each
    process's own pair ratios. A round's ratio is of two sizes decided in that round, in that process.

    Example: two processes of two rounds each at sizes (1, 10), CPU {1: [1, 1], 10: [10, 11]} and {1: [2, 2],
    10: [20, 22]}: the rounds' ratios are 10, 11, 10, 11 -> the pooled ratio is their median, 10.5; the
    processes' own are 10.5 and 10.5."""
    small = sizes[0]

    def ratios(a: int, b: int, runs: list[dict[str, list[float]]]) -> list[float]:
        return [y / x for run in runs for x, y in zip(run[str(a)], run[str(b)], strict=True)]

    every = {n: [s for run in processes for s in run[str(n)]] for n in sizes}
    return {
        "rounds": sum(len(run[str(small)]) for run in processes),
        "processes": len(processes),
        "sizes": {
            str(n): {
                "median_cpu_ms": statistics.median(every[n]) * 1e3,
                "cpu_us_per_va": statistics.median(every[n]) / n * 1e6,
                f"ratio_vs_{small}": statistics.median(ratios(small, n, processes)),
            }
            for n in sizes
        },
        "pairs": {f"{a}->{b}": statistics.median(ratios(a, b, processes)) for a, b in itertools.pairwise(sizes)},
        "pairs_by_process": {
            f"{a}->{b}": [statistics.median(ratios(a, b, [run])) for run in processes]
            for a, b in itertools.pairwise(sizes)
        },
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--rounds", type=int, default=9, help="rounds in each process")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = tuple(int(x) for x in args.sizes.split(","))
    if args.child:
        benchchild.report(child(sizes, args.rounds))
        return {}
    runs = [
        benchchild.run("tests.bench_decide_scale", "--sizes", args.sizes, "--rounds", str(args.rounds))["cpu_s"]
        for _ in range(args.processes)
    ]
    figures = pooled(sizes, runs)
    small = sizes[0]
    print(
        f"decide CPU, {args.rounds} rounds in each of {figures['processes']} processes, sizes alternating within "
        "each round (medians over every round):"
    )
    for n, row in figures["sizes"].items():
        print(
            f"  {int(n):>6,} VAs: {row['median_cpu_ms']:8.1f} ms, {row['cpu_us_per_va']:5.1f} us a VA, "
            f"{row[f'ratio_vs_{small}']:6.2f}x the {small:,}-VA cycle (paired)"
        )
    for pair, ratio in figures["pairs"].items():
        each = ", ".join(f"{r:.2f}x" for r in figures["pairs_by_process"][pair])
        print(f"  {pair}: {ratio:.2f}x (each process: {each})")
    return figures


if __name__ == "__main__":
    main()
