"""Command line: `wva-adapter <verb>`. Parsing only; each verb calls into the package that does the work."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from adapter import __version__
from adapter.config.settings import Settings, add_flags
from adapter.domain.errors import AdapterError, ConfigError, FixtureError


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


def _demo(args: argparse.Namespace) -> int:
    import asyncio

    from adapter.app.demo import DemoOptions, run_demo

    if args.speed <= 0:
        print(f"--speed must be > 0, got {args.speed}", file=sys.stderr)
        return 2
    if args.duration < 0:
        print(f"--duration must be >= 0 (0 = until Ctrl-C), got {args.duration}", file=sys.stderr)
        return 2
    options = DemoOptions(
        examples_dir=Path(args.examples),
        out_dir=Path(args.out),
        scenario=Path(args.scenario) if args.scenario else None,
        duration_s=args.duration,
        speed=args.speed,
        secure_port=args.secure_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        health_port=args.health_port,
        seed=args.seed,
    )
    try:
        return asyncio.run(run_demo(options))
    except OSError as exc:
        print(f"demo: cannot start: {exc} (is another demo running? choose other ports with --*-port)", file=sys.stderr)
        return 1
    except AdapterError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2


def _serve(args: argparse.Namespace) -> int:
    from adapter.app.serve import run
    from adapter.config.settings import from_environ, load

    fields = {k: v for k, v in vars(args).items() if k not in ("verb", "func")}
    try:
        settings, origin = load(fields, env=from_environ())
    except ConfigError as exc:
        print(f"serve: invalid settings: {exc}", file=sys.stderr)
        return 2
    for name, source in sorted(origin.items()):
        print(f"serve: {name} from {source}", file=sys.stderr)
    env = from_environ()

    def reload(configmap: Mapping[str, str]) -> Settings:
        return load(fields, env=env, configmap=configmap)[0]

    return run(settings, reload=reload)


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

    serve = verbs.add_parser("serve", help="the in-cluster service (External Metrics API, KEDA scaler, leader)")
    add_flags(serve)
    serve.set_defaults(func=_serve)

    demo = verbs.add_parser("demo", help="simulated fleet + real pipeline + real servers on 127.0.0.1")
    demo.add_argument("--duration", type=float, default=0.0, metavar="S", help="real seconds to run (0: until Ctrl-C)")
    demo.add_argument("--speed", type=float, default=20.0, metavar="X", help="virtual seconds per real second")
    demo.add_argument("--scenario", metavar="FILE", help="a simulation scenario (YAML) instead of the built-in one")
    demo.add_argument("--examples", default="manifests/examples", metavar="DIR", help="where the va-*.yaml files are")
    demo.add_argument("--out", default="out/demo", metavar="DIR", help="where the kubeconfig and TLS files go")
    demo.add_argument("--secure-port", type=int, default=6443)
    demo.add_argument("--grpc-port", type=int, default=50051)
    demo.add_argument("--metrics-port", type=int, default=8080)
    demo.add_argument("--health-port", type=int, default=8081)
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=_demo)

    check = verbs.add_parser("check-config", help="validate VariantAutoscaling manifests and WVA ConfigMaps")
    check.add_argument("files", nargs="+", metavar="FILE")
    check.set_defaults(func=_check_config)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code
