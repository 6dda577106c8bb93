"""How decide grows with the fleet, measured paired: 1,000, 10,000 and 20,000 VAs (10 pods each) decided in turn,
round after round, in one process.

The cycle benchmark (`tests.bench_collect`) measures each fleet size in its own run, minutes apart; on a shared
2-core machine the speed of the same code drifts by ±10 % between such runs, which is as large as the
difference the ratio row asks about (≤ 10.5× against 10×). Here the sizes alternate within each round, so a
slow minute slows every size alike, and the ratio is the median of the per-round ratios. The snapshots are the
cycle benchmark's (the fake Prometheus, all metrics), decided as the reconciler decides (`decide_cycle`: the
cyclic GC paused), each with its own engine state carried from a first cycle.

The child process holds all three fleets (~1 GB); `main` runs it apart so that the benchmarks after it keep
their own peak RSS. Figures only, never an assertion on time.
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
    small = sizes[0]
    return {
        "rounds": rounds,
        "sizes": {
            str(n): {
                "median_cpu_ms": statistics.median(cpu_s[n]) * 1e3,
                "cpu_us_per_va": statistics.median(cpu_s[n]) / n * 1e6,
                f"ratio_vs_{small}": statistics.median(b / a for a, b in zip(cpu_s[small], cpu_s[n], strict=True)),
            }
            for n in sizes
        },
        "pairs": {
            f"{a}->{b}": statistics.median(y / x for x, y in zip(cpu_s[a], cpu_s[b], strict=True))
            for a, b in itertools.pairwise(sizes)
        },
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = tuple(int(x) for x in args.sizes.split(","))
    if args.child:
        benchchild.report(child(sizes, args.rounds))
        return {}
    figures: dict[str, Any] = benchchild.run(
        "tests.bench_decide_scale", "--sizes", args.sizes, "--rounds", str(args.rounds)
    )
    small = sizes[0]
    print(f"decide CPU, {figures['rounds']} rounds, sizes alternating within each round (medians):")
    for n, row in figures["sizes"].items():
        print(
            f"  {int(n):>6,} VAs: {row['median_cpu_ms']:8.1f} ms, {row['cpu_us_per_va']:5.1f} us a VA, "
            f"{row[f'ratio_vs_{small}']:6.2f}x the {small:,}-VA cycle (paired)"
        )
    for pair, ratio in figures["pairs"].items():
        print(f"  {pair}: {ratio:.2f}x")
    return figures


if __name__ == "__main__":
    main()
