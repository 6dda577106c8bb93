"""Instructions a decide of the shipped default executes, counted by valgrind: the same count on a busy machine.

    .venv/bin/python -m tests.count_instructions [--vas 300] [--config profiles] [--cycles 3]

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
"""

from __future__ import annotations

import argparse
import hashlib
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.count_instructions", description=__doc__.splitlines()[0])
    parser.add_argument("--vas", type=int, default=300)
    parser.add_argument("--config", choices=("profiles", "learning", "v1"), default="profiles")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument(CHILD_FLAG, action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.counted_child:
        child(args.vas, args.config, args.cycles)
        return 0
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind (with callgrind_control) is not installed: nothing counted", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "callgrind.out"
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-m",
            "tests.count_instructions",
            f"--vas={args.vas}",
            f"--config={args.config}",
            f"--cycles={args.cycles}",
            CHILD_FLAG,
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(done.stdout + done.stderr, file=sys.stderr)
            return done.returncode
        instructions = _total(out.read_text(errors="replace"))
    digest = next((line.split()[1] for line in done.stdout.splitlines() if line.startswith("digest ")), "?")
    per_va = instructions / args.cycles / args.vas
    print(
        f"decide, {args.config}, {args.vas:,} VAs, full forecast histories: {per_va:,.0f} instructions a VA a cycle "
        f"({instructions:,} in {args.cycles} cycles; digest {digest})"
    )
    return 0


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
    raise SystemExit(main())
