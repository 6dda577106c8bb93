"""Command line: `wva-adapter <verb>`. Parsing only; each verb calls into the package that does the work."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from adapter import __version__
from adapter.config.settings import Settings, add_flags
from adapter.domain.errors import AdapterError, ConfigError, FixtureError


def _replay(args: argparse.Namespace) -> int:
    """Replay each fixture; the result JSON is written cycle by cycle as it is decided (the same text as
    `json.dumps(result, indent=2)`), so memory holds one cycle's result, however many cycles there are."""
    from adapter.replay import fixture, runner

    loaded = []
    for path in args.fixtures:  # all validated first: an invalid one stops the run before any output
        try:
            loaded.append((path, *fixture.load(Path(path))))
        except FixtureError as exc:
            print(f"{path}: invalid fixture: {exc}", file=sys.stderr)
            return 2
    several = len(loaded) > 1
    out = sys.stdout
    if several:
        out.write("[\n")
    all_passed = True
    for n, (path, fx, vas) in enumerate(loaded):
        level = 1 if several else 0
        passed, count = True, 0
        head = {"schema": runner.RESULT_SCHEMA, "name": fx.name}
        out.write(_indent("{", level) + "\n")
        for key, value in head.items():
            out.write(_indent(f"  {json.dumps(key)}: {json.dumps(value)},", level) + "\n")
        out.write(_indent('  "cycles": [', level))
        cycles = runner.play(fx, vas, scale_to_zero_env=os.environ.get("WVA_SCALE_TO_ZERO"))
        for c, cycle in enumerate(cycles):
            out.write(("," if c else "") + "\n" + _indent(json.dumps(cycle, indent=2), level + 2))
            passed = passed and not cycle["mismatches"]
            count += 1
            for m in cycle["mismatches"]:
                print(
                    f"  cycle {c} {m['variant']}: {m['field']} expected {m['expected']!r}, got {m['actual']!r}",
                    file=sys.stderr,
                )
        out.write(("\n" + _indent("  ]", level) if count else "]") + ",\n")
        out.write(_indent(f'  "passed": {json.dumps(passed)},', level) + "\n")
        out.write(_indent(f'  "fixture": {json.dumps(str(path))}', level) + "\n")
        out.write(_indent("}", level) + ("," if several and n < len(loaded) - 1 else "") + "\n")
        all_passed = all_passed and passed
        verdict = "PASS" if passed else "FAIL"
        print(f"{verdict} {path}: {fx.name or '(unnamed)'} — {count} cycle(s)", file=sys.stderr)
    if several:
        out.write("]\n")
    return 0 if all_passed else 1


def _indent(text: str, levels: int) -> str:
    """Every line of `text` indented by `levels` steps of two spaces (json.dumps' indent=2 nesting)."""
    pad = "  " * levels
    return "\n".join(pad + line for line in text.split("\n")) if pad else text


def _explain(args: argparse.Namespace) -> int:
    from adapter.domain.ids import VariantKey
    from adapter.replay import explain, fixture

    try:
        only = VariantKey.parse(args.va) if args.va else None
    except ValueError as exc:
        print(f"explain: --va: {exc}", file=sys.stderr)
        return 2
    try:
        fx, vas = fixture.load(Path(args.fixture))
    except FixtureError as exc:
        print(f"{args.fixture}: invalid fixture: {exc}", file=sys.stderr)
        return 2
    if only is not None and only not in {va.key for va in vas}:
        print(f"explain: {only} is not a VariantAutoscaling of {args.fixture}", file=sys.stderr)
        return 2
    print(explain.explain(fx, vas, only=only), end="")
    return 0


def _recommend(args: argparse.Namespace) -> int:
    """Rows of (namespace/name, model, lower, target, upper, desired) from a cluster or from fixtures."""
    rows: list[tuple[str, str, str, str, str, str]] = []
    if args.fixtures:
        from adapter.replay import fixture, runner

        for path in args.fixtures:
            try:
                fx, vas = fixture.load(Path(path))
            except FixtureError as exc:
                print(f"{path}: invalid fixture: {exc}", file=sys.stderr)
                return 2
            models = {str(va.key): va.to_spec().model_id for va in vas}
            last = runner.run(fx, vas)["cycles"][-1]["decisions"]
            for key, d in sorted(last.items()):
                rec = d.get("recommendation") or {}
                rows.append(
                    (
                        key,
                        models.get(key, "?"),
                        *(str(rec.get(k, "-")) for k in ("lower_bound", "target", "upper_bound")),
                        str(d["desired_replicas"]),
                    )
                )
    else:
        import asyncio

        from adapter.k8s.status_reader import read_recommendations

        try:
            found = asyncio.run(read_recommendations(kubeconfig=args.kubeconfig, namespace=args.namespace))
        except AdapterError as exc:
            print(f"recommend: {exc}", file=sys.stderr)
            return 2
        for key, model, rec, desired in found:
            cells = ("-", "-", "-") if rec is None else (str(rec.lower_bound), str(rec.target), str(rec.upper_bound))
            rows.append((key, model, *cells, "-" if desired is None else str(desired)))
    header = ("VARIANT", "MODEL", "LOWER", "TARGET", "UPPER", "DESIRED")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0


def _simulate(args: argparse.Namespace) -> int:
    """Summary JSON on stdout, plot into --out; an invalid scenario or policy exits 2 (ConfigError, via main)."""
    from adapter.app.simulate import main as simulate_main

    if args.seed is not None and args.seed < 0:
        print(f"simulate: --seed must be >= 0, got {args.seed}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else None
    return simulate_main(
        Path(args.scenario), policy=args.policy, out_dir=out, seed=args.seed, frontier=not args.no_frontier
    )


def _add_simulate(verbs: Any) -> None:
    simulate = verbs.add_parser("simulate", help="a scenario in closed loop on a virtual clock, against an oracle")
    simulate.add_argument("--scenario", required=True, metavar="FILE", help="simulation scenario YAML (DESIGN §3.3)")
    simulate.add_argument(
        "--policy",
        help="wva-v1 | wva-v2 | wva-slo | hpa-kv | keda-queue | static | oracle (default: the scenario's)",
    )
    simulate.add_argument("--out", metavar="DIR", help="write a PNG plot here (load, replicas, p99 TTFT/ITL vs SLO)")
    simulate.add_argument("--seed", type=int, metavar="N", help="run seed (default: the scenario's `seed`, else 0)")
    simulate.add_argument(
        "--no-frontier",
        action="store_true",
        help="skip the search for oracle@99 (oracle99_cost: null); the search plays 5-15 extra runs of the scenario",
    )
    simulate.set_defaults(func=_simulate)


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


_CAPACITY_FLAGS = {
    "alpha_ms": "--alpha-ms",
    "beta_ms": "--beta-ms",
    "gamma_ms": "--gamma-ms",
    "input_tokens": "--input-tokens",
    "output_tokens": "--output-tokens",
    "max_batch": "--max-batch",
    "max_queue": "--max-queue",
    "ttft_ms": "--ttft-ms",
    "itl_ms": "--itl-ms",
    "targets": "--ttft-ms/--itl-ms",
    "rate_rps": "--rate",
}


def _capacity(args: argparse.Namespace) -> int:
    from adapter.analyzers.queueing import BeyondModel, InvalidInput, QueueModel, RequestSize, ServiceParams

    def fail(message: str) -> int:
        print(f"capacity: {message}", file=sys.stderr)
        return 2

    has_targets = args.ttft_ms is not None or args.itl_ms is not None
    if args.rate is not None and has_targets:
        return fail("--rate cannot be combined with --ttft-ms/--itl-ms: give either both targets or a rate")
    if args.rate is None and not has_targets:
        return fail("give --ttft-ms and --itl-ms (targets, 0 = unconstrained) or --rate (req/s)")
    if has_targets and (args.ttft_ms is None or args.itl_ms is None):
        missing = "--itl-ms" if args.itl_ms is None else "--ttft-ms"
        return fail(f"{missing} is required with the other target (use 0 for unconstrained)")
    try:
        model = QueueModel(
            ServiceParams(args.alpha_ms, args.beta_ms, args.gamma_ms),
            RequestSize(args.input_tokens, args.output_tokens),
            max_batch=args.max_batch,
            max_queue=args.max_queue,
        )
        if args.rate is not None:
            metrics = model.analyze(args.rate)
            max_rps = model.rate_range_rps.max_rps
        else:
            metrics = model.max_rate(args.ttft_ms, args.itl_ms)
            max_rps = metrics.rate_rps
    except (InvalidInput, BeyondModel) as exc:
        return fail(f"{_CAPACITY_FLAGS.get(exc.param, exc.param)}: {exc.param} {exc.reason}")
    except AdapterError as exc:
        return fail(str(exc))
    result = {
        "max_rps": max_rps,
        "ttft_ms": metrics.ttft_ms,
        "itl_ms": metrics.itl_ms,
        "rho": metrics.rho,
        "throughput_rps": metrics.throughput_rps,
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:<15} {value:.6g}")
    return 0


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

    explain_verb = verbs.add_parser("explain", help="a person-readable account of one recorded cycle")
    explain_verb.add_argument(
        "fixture", metavar="FIXTURE", help="a wva-replay/v1 fixture (e.g. from serve --record-dir)"
    )
    explain_verb.add_argument("--va", metavar="NS/NAME", help="only this VariantAutoscaling")
    explain_verb.set_defaults(func=_explain)

    _add_simulate(verbs)

    rec = verbs.add_parser("recommend", help="the recommender's lower / target / upper replicas per variant")
    rec.add_argument("--fixture", dest="fixtures", action="append", metavar="FILE", help="from a replay fixture")
    rec.add_argument("--kubeconfig", help="from a cluster: read the VAs' status.recommendation")
    rec.add_argument("--namespace", help="only this namespace (cluster mode)")
    rec.set_defaults(func=_recommend)

    check = verbs.add_parser("check-config", help="validate VariantAutoscaling manifests and WVA ConfigMaps")
    check.add_argument("files", nargs="+", metavar="FILE")
    check.set_defaults(func=_check_config)

    capacity = verbs.add_parser(
        "capacity", help="queueing-model calculator: λ* at TTFT/ITL targets, or metrics at a rate"
    )
    capacity.add_argument("--alpha-ms", type=float, required=True, metavar="A", help="ms per iteration (> 0)")
    capacity.add_argument("--beta-ms", type=float, required=True, metavar="B", help="ms per token of compute (>= 0)")
    capacity.add_argument("--gamma-ms", type=float, required=True, metavar="G", help="ms per token of KV access (>= 0)")
    capacity.add_argument("--input-tokens", type=float, required=True, metavar="I", help="average input tokens (>= 0)")
    capacity.add_argument(
        "--output-tokens", type=float, required=True, metavar="O", help="average output tokens (>= 1)"
    )
    capacity.add_argument(
        "--max-batch", type=int, default=256, metavar="N", help="max concurrent requests (default 256)"
    )
    capacity.add_argument("--max-queue", type=int, default=100, metavar="Q", help="queue capacity (default 100)")
    capacity.add_argument("--ttft-ms", type=float, metavar="T", help="TTFT target, ms (0 = unconstrained)")
    capacity.add_argument("--itl-ms", type=float, metavar="L", help="ITL target, ms (0 = unconstrained)")
    capacity.add_argument("--rate", type=float, metavar="RPS", help="arrival rate, req/s (instead of the targets)")
    capacity.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    capacity.set_defaults(func=_capacity)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Exit codes: 0 success, 1 findings/mismatches (check-config, replay), 2 unusable input or settings.
    Our own errors (AdapterError: bad files, settings, fixtures, scenarios) end as one line on stderr, never a
    traceback; anything else is a bug and keeps its traceback."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except AdapterError as exc:
        print(f"wva-adapter {args.verb}: {exc}", file=sys.stderr)
        return 2
    return code
