"""Command line: `wva-adapter <verb>`. Parsing only; each verb calls into the package that does the work."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from adapter import __version__
from adapter.domain.errors import FixtureError


def _replay(args: argparse.Namespace) -> int:
    from adapter.replay import fixture, runner

    results = []
    for path in args.fixtures:
        try:
            fx, vas = fixture.load(Path(path))
        except FixtureError as exc:
            print(f"{path}: invalid fixture: {exc}", file=sys.stderr)
            return 2
        result = runner.run(fx, vas, scale_to_zero_env=os.environ.get("WVA_SCALE_TO_ZERO"))
        result["fixture"] = str(path)
        results.append(result)
        verdict = "PASS" if result["passed"] else "FAIL"
        print(f"{verdict} {path}: {result['name'] or '(unnamed)'} — {len(result['cycles'])} cycle(s)", file=sys.stderr)
        for c, cycle in enumerate(result["cycles"]):
            for m in cycle["mismatches"]:
                print(
                    f"  cycle {c} {m['variant']}: {m['field']} expected {m['expected']!r}, got {m['actual']!r}",
                    file=sys.stderr,
                )
    out = results[0] if len(results) == 1 else results
    print(json.dumps(out, indent=2))
    return 0 if all(r["passed"] for r in results) else 1


def _check_config(args: argparse.Namespace) -> int:
    from adapter.checkconfig import check_files

    report = check_files([Path(p) for p in args.files])
    for line in report.ok:
        print(f"ok    {line}")
    for line in report.skipped:
        print(f"skip  {line}")
    for line in report.errors:
        print(f"error {line}", file=sys.stderr)
    return 1 if report.errors else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wva-adapter",
        description="Workload Variant Autoscaler for LLM inference: decides replicas, serves them to HPA and KEDA.",
    )
    parser.add_argument("--version", action="version", version=f"wva-adapter {__version__}")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    replay = verbs.add_parser("replay", help="run the decision engine over recorded snapshots (wva-replay/v1)")
    replay.add_argument("fixtures", nargs="+", metavar="FIXTURE.json")
    replay.set_defaults(func=_replay)

    check = verbs.add_parser("check-config", help="validate VariantAutoscaling manifests and WVA ConfigMaps")
    check.add_argument("files", nargs="+", metavar="FILE")
    check.set_defaults(func=_check_config)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code
