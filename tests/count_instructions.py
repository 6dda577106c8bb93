"""Instructions a decide of the shipped default executes, counted by valgrind: the same count on a busy machine.

    .venv/bin/python -m tests.count_instructions [--vas 300[,3000...]] [--config profiles] [--cycles 3]

On this 2-core machine, shared and noisy, two runs of the same decide differ by ±20 % in CPU time, so a change
worth 3–5 % cannot be seen in seconds (docs/benchmarks/scale.md, item 20). Valgrind's callgrind counts the
instructions executed instead, which do not depend on what else the machine is doing: the count is the same run
after run for the same code, inputs and `PYTHONHASHSEED`. This module re-runs itself under
`valgrind --tool=callgrind --instr-atstart=no` and switches counting on (`callgrind_control -i on`) around each
measured `decide_cycle` only, so the fleet's construction, the first cycles and the digest are not counted.

The fleet and ConfigMaps are `tests.bench_default`'s (the cycle benchmark's fleet, `profiles`, `learning` or `v1`),
with full forecast histories (`full_histories`), the engine state carried, after two warm cycles. Printed:
instructions a VA a cycle, and a digest of every decision, analysis, learned section and the engine state of each
measured cycle — two codes that print the same digest decided the same, so their counts compare like for like.
Under valgrind a cycle runs ~60× slower: 300 VAs and 3 cycles take ~5 minutes. Figures only, never an assertion.

With several sizes (`--vas 1000,10000`) each is counted in its own process and the ratio of their counts printed:
`make bench` counts V1's decide at 1,000 and 10,000 VAs (~1 minute), the issue-22 row "decide, 1k → 10k" without
the noise and the caches that move its CPU-time ratio (docs/benchmarks/scale.md, item 37).

`--simulate caches` or `--simulate pages` also runs callgrind's cache simulation over the same counted decides
(~4× slower), and prints data misses a VA a cycle at each level: `caches` with the development machine's caches (a
32-KiB L1 and the 32-MiB L3 as the last level), `pages` with a data TLB modelled as caches of 4-KiB lines (64
entries, then 2,048 16-way: each miss of the second level is a page walk). Like the count, the misses do not depend
on what else runs; they are the simulator's, not the hardware's (no prefetching, no huge pages). They say where a
CPU-time ratio above the count's comes from (docs/benchmarks/scale.md, item 38).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CHILD_FLAG = "--counted-child"

SIMULATIONS: dict[str, tuple[str, ...]] = {
    "caches": ("--I1=32768,8,64", "--D1=32768,8,64", "--LL=33554432,16,64"),
    "pages": ("--I1=32768,8,64", "--D1=262144,64,4096", "--LL=8388608,16,4096"),
}
"""callgrind's cache hierarchy for each `--simulate` (size, associativity, line size in bytes): the development
machine's L1 and L3 (AMD EPYC: 32 KiB 8-way, 32 MiB 16-way, 64-byte lines), or a data TLB whose lines are 4-KiB
pages (64 entries fully associative, then 2,048 16-way: 256 KiB and 8 MiB of reach)."""


def digest_of(result: Any, state: Any) -> bytes:
    """The cycle's decisions, analyses, learned sections, warnings, errors and next engine state, as bytes."""
    from adapter.engine.state import state_to_json

    parts = (
        sorted((str(k), repr(v)) for k, v in result.decisions.items()),
        sorted((str(k), repr(v)) for k, v in result.analyses.items()),
        sorted((str(k), repr(v)) for k, v in result.learned.items()),
        repr(result.warnings),
        sorted((str(k), v) for k, v in result.errors.items()),
    )
    return repr(parts).encode() + json.dumps(state_to_json(state), sort_keys=True, default=str).encode()


def child(vas: int, config_name: str, cycles: int) -> None:
    """Runs inside valgrind: the warm cycles uncounted, then `cycles` counted decides."""
    from adapter import engine
    from tests.bench_collect import NOW_S
    from tests.bench_default import configs, fleet_snapshot, full_histories
    from tests.profile_cycle import decide_fn

    def count(on: bool) -> None:
        subprocess.run(
            ["callgrind_control", "-i", "on" if on else "off", str(os.getpid())], check=True, capture_output=True
        )

    decide = decide_fn()
    snapshot = fleet_snapshot(vas)
    config = configs()[config_name]
    _, state = decide(snapshot, engine.EngineState(), config, NOW_S - 60)
    state = full_histories(state, NOW_S - 60)
    _, state = decide(snapshot, state, config, NOW_S - 30)
    digest = hashlib.sha256()
    for cycle in range(cycles):
        count(True)
        result, state = decide(snapshot, state, config, NOW_S + 30.0 * cycle)
        count(False)
        digest.update(digest_of(result, state))
    print(f"digest {digest.hexdigest()[:16]}")


def main(argv: list[str] | None = None) -> dict[str, Any] | int:
    """Counts each size of `--vas` (a comma-separated list) in its own valgrind process, all at once (the counts do
    not depend on what else runs), and prints instructions a VA a cycle per size and the ratio of each size's count
    to the previous one's: how the decide's work grows, without the machine's noise or its caches. Returns the
    figures (`make bench` reads them), or an exit code when nothing could be counted."""
    parser = argparse.ArgumentParser(prog="python -m tests.count_instructions", description=__doc__.splitlines()[0])
    parser.add_argument("--vas", default="300", help="VA counts, comma-separated (each counted on its own)")
    parser.add_argument("--config", choices=("profiles", "learning", "v1"), default="profiles")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--simulate", choices=sorted(SIMULATIONS), help="also simulate these caches' data misses")
    parser.add_argument(CHILD_FLAG, action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.vas.split(",")]
    if args.counted_child:
        child(sizes[0], args.config, args.cycles)
        return 0
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind (with callgrind_control) is not installed: nothing counted", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        outs = {n: Path(scratch) / f"callgrind.{n}.out" for n in sizes}
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        running = {
            n: subprocess.Popen(
                [
                    *("valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={outs[n]}"),
                    *(("--cache-sim=yes", *SIMULATIONS[args.simulate]) if args.simulate else ()),
                    *(sys.executable, "-m", "tests.count_instructions", f"--vas={n}", f"--config={args.config}"),
                    *(f"--cycles={args.cycles}", CHILD_FLAG),
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in sizes
        }
        done = {n: process.communicate() for n, process in running.items()}
        failed = [n for n, process in running.items() if process.returncode != 0]
        if failed:
            for n in failed:
                print("".join(done[n]), file=sys.stderr)
            return running[failed[0]].returncode
        totals = {n: _totals(outs[n].read_text(errors="replace")) for n in sizes}
    misses = {n: _data_misses(events) for n, events in totals.items()} if args.simulate else None
    figures = counted_figures(args.config, args.cycles, {n: events["Ir"] for n, events in totals.items()}, misses)
    for n in sizes:
        row = figures["sizes"][str(n)]
        digest = next((line.split()[1] for line in done[n][0].splitlines() if line.startswith("digest ")), "?")
        print(
            f"decide, {args.config}, {n:,} VAs, full forecast histories: {row['per_va']:,.0f} instructions a VA a "
            f"cycle ({row['instructions']:,} in {args.cycles} cycles; digest {digest})"
        )
        if args.simulate:
            print(
                f"  simulated {args.simulate}: {row['first_misses_per_va']:,.1f} first-level and "
                f"{row['last_misses_per_va']:,.1f} last-level data misses a VA a cycle"
            )
    for pair, ratio in figures["pairs"].items():
        print(f"  {pair}: {ratio:.4f}x the instructions")
    for pair, ratio in figures.get("last_miss_pairs", {}).items():
        print(f"  {pair}: {ratio:.4f}x the last-level data misses")
    return figures


def counted_figures(
    config: str, cycles: int, counted: dict[int, int], misses: dict[int, tuple[int, int]] | None = None
) -> dict[str, Any]:
    """Per size its instructions and instructions a VA a cycle; per pair of consecutive sizes the ratio of counts.
    With `misses` (per size, the simulated data misses at the first and the last level), also those a VA a cycle,
    and per pair the ratio of the last level's.

    Example: {1000: 470_326_445, 10000: 4_703_807_108} over one cycle -> 470,326 and 470,381 instructions a VA,
    1000->10000 10.0012x (linear: 10x the VAs, 10x the work). With misses {1000: (2_624_000, 9_400), 10000:
    (26_500_000, 236_000)}: 9.4 and 23.6 last-level misses a VA, 1000->10000 25.1x."""
    ordered = sorted(counted)
    sizes: dict[str, dict[str, float]] = {}
    for n in ordered:
        sizes[str(n)] = {"instructions": counted[n], "per_va": counted[n] / cycles / n}
        if misses is not None:
            first, last = misses[n]
            sizes[str(n)] |= {"first_misses_per_va": first / cycles / n, "last_misses_per_va": last / cycles / n}
    figures: dict[str, Any] = {
        "config": config,
        "cycles": cycles,
        "sizes": sizes,
        "pairs": {f"{a}->{b}": counted[b] / counted[a] for a, b in itertools.pairwise(ordered)},
    }
    if misses is not None:
        figures["last_miss_pairs"] = {f"{a}->{b}": misses[b][1] / misses[a][1] for a, b in itertools.pairwise(ordered)}
    return figures


def _totals(callgrind_out: str) -> dict[str, int]:
    """Each event's total, by the names of the `events:` line, from a callgrind output file: its `totals:` line,
    else its `summary:` line. With counting off at the start (`--instr-atstart=no`) callgrind writes `summary: 0` in
    the header and the real counts in `totals:` at the end. Events not in the line are 0 (the format's rule: a line
    with fewer counts than events leaves the rest at zero).

    Example: "events: Ir Dr" and "totals: 120 30" -> {"Ir": 120, "Dr": 30}."""
    names: list[str] = ["Ir"]
    values: list[int] | None = None
    for line in callgrind_out.splitlines():
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith("totals:"):
            values = [int(v) for v in line.split()[1:]]
            break
        elif line.startswith("summary:"):
            values = [int(v) for v in line.split()[1:]]
    if values is None:
        raise ValueError("no totals or summary line in the callgrind output")
    return {name: (values[k] if k < len(values) else 0) for k, name in enumerate(names)}


def _data_misses(events: dict[str, int]) -> tuple[int, int]:
    """The simulated data misses at the first level (reads and writes: D1mr + D1mw) and the last (DLmr + DLmw)."""
    missing = [name for name in ("D1mr", "D1mw", "DLmr", "DLmw") if name not in events]
    if missing:
        raise ValueError(f"callgrind output without the cache simulation's events {missing}")
    return events["D1mr"] + events["D1mw"], events["DLmr"] + events["DLmw"]


if __name__ == "__main__":
    outcome = main()
    raise SystemExit(0 if isinstance(outcome, dict) else outcome)
