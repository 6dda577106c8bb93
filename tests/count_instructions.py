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
        counted = {n: _total(outs[n].read_text(errors="replace")) for n in sizes}
    figures = counted_figures(args.config, args.cycles, counted)
    for n in sizes:
        row = figures["sizes"][str(n)]
        digest = next((line.split()[1] for line in done[n][0].splitlines() if line.startswith("digest ")), "?")
        print(
            f"decide, {args.config}, {n:,} VAs, full forecast histories: {row['per_va']:,.0f} instructions a VA a "
            f"cycle ({row['instructions']:,} in {args.cycles} cycles; digest {digest})"
        )
    for pair, ratio in figures["pairs"].items():
        print(f"  {pair}: {ratio:.4f}x the instructions")
    return figures


def counted_figures(config: str, cycles: int, counted: dict[int, int]) -> dict[str, Any]:
    """Per size its instructions and instructions a VA a cycle; per pair of consecutive sizes the ratio of counts.

    Example: {1000: 470_326_445, 10000: 4_703_807_108} over one cycle -> 470,326 and 470,381 instructions a VA,
    1000->10000 10.0012x (linear: 10x the VAs, 10x the work)."""
    ordered = sorted(counted)
    return {
        "config": config,
        "cycles": cycles,
        "sizes": {str(n): {"instructions": counted[n], "per_va": counted[n] / cycles / n} for n in ordered},
        "pairs": {f"{a}->{b}": counted[b] / counted[a] for a, b in itertools.pairwise(ordered)},
    }


def _total(callgrind_out: str) -> int:
    """The instructions counted, from a callgrind output file: its `totals:` line, else its `summary:` line. With
    counting off at the start (`--instr-atstart=no`) callgrind writes `summary: 0` in the header and the real count
    in `totals:` at the end."""
    summary = None
    for line in callgrind_out.splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
        if line.startswith("summary:"):
            summary = int(line.split()[1])
    if summary is None:
        raise ValueError("no totals or summary line in the callgrind output")
    return summary


if __name__ == "__main__":
    outcome = main()
    raise SystemExit(0 if isinstance(outcome, dict) else outcome)
