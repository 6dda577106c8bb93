"""Command line: `wva-adapter <verb>`. Parsing only; each verb calls into the package that does the work."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from adapter import __version__
from adapter.config.settings import Settings, add_flags
from adapter.domain.errors import AdapterError, ConfigError, FixtureError
from adapter.domain.text import excerpt, plain, quote

_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)
_ASCII_SPACE = " \t\n\r\f\v"
"""What may surround a number on the command line. Not `str.strip()`'s whitespace, which also takes U+001C–U+001F
and Unicode spaces: "0\x1f" passed the check stripped that way and then made `float` raise (the fuzzer, seed 407)."""
MAX_SEED = 2**32 - 1
"""numpy's SeedSequence takes any non-negative int; we keep seeds to 32 bits, as the scenario schema does."""
MAX_DEMO_SPEED = 1_000_000.0
MAX_DEMO_DURATION_S = 365 * 86400.0


def number(
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    above: bool = False,
    integer: bool = False,
    what: str = "",
) -> Callable[[str], Any]:
    """An argparse `type`: a finite number (an integer when `integer`) within [minimum, maximum] (or above
    `minimum` when `above`), ASCII digits only. argparse names the flag and exits 2:
    `argument --speed: must be a finite number > 0 and <= 1e+06, got 'nan'`."""
    low = "" if minimum is None else (f"> {minimum:g}" if above else f">= {minimum:g}")
    high = "" if maximum is None else f"<= {maximum:g}"
    bounds = " and ".join(part for part in (low, high) if part)
    kind = what or ("an integer" if integer else "a finite number")
    rule = f"must be {kind}{' ' + bounds if bounds else ''}"

    def parse(text: str) -> Any:
        pattern = _INTEGER if integer else _DECIMAL
        digits = text.strip(_ASCII_SPACE)
        if not pattern.fullmatch(digits):
            raise argparse.ArgumentTypeError(f"{rule}, got {quote(text, 40)}")
        value: float | int = int(digits) if integer else float(digits)
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{rule}, got {quote(text, 40)}")
        if minimum is not None and (value < minimum or (above and value == minimum)):
            raise argparse.ArgumentTypeError(f"{rule}, got {quote(text, 40)}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"{rule}, got {quote(text, 40)}")
        return value

    parse.__name__ = "integer" if integer else "number"  # argparse's fallback message names the type
    return parse


PORT = number(integer=True, minimum=0, maximum=65535, what="a port number (0: any free port)")
SEED = number(integer=True, minimum=0, maximum=MAX_SEED)
FINITE = number()


def _replay(args: argparse.Namespace) -> int:
    """Every fixture is validated before anything is printed (exit 2 on an invalid one); the result document (a
    list of them for several fixtures) is then written cycle by cycle, exactly as `json.dumps(document,
    indent=2)` would write it, so memory holds one cycle's result at a time."""
    from adapter.replay import runner

    loaded = [_load_fixture(path) for path in args.fixtures]
    if any(item is None for item in loaded):
        return 2
    several = len(args.fixtures) > 1
    pad = "  " if several else ""
    out = sys.stdout
    if several:
        out.write("[\n")
    passed_all = True
    for index, (path, item) in enumerate(zip(args.fixtures, loaded, strict=True)):
        assert item is not None
        fx, vas = item
        out.write(f'{pad}{{\n{pad}  "schema": {json.dumps(runner.RESULT_SCHEMA)},\n')
        out.write(f'{pad}  "name": {json.dumps(fx.name)},\n{pad}  "cycles": [\n')
        mismatches: list[str] = []
        count = 0
        for c, cycle in enumerate(runner.cycles(fx, vas, scale_to_zero_env=os.environ.get("WVA_SCALE_TO_ZERO"))):
            text = json.dumps(cycle, indent=2)
            out.write((",\n" if c else "") + "\n".join(f"{pad}    {line}" for line in text.splitlines()))
            count += 1
            mismatches += [
                f"  cycle {c} {m['variant']}: {m['field']} expected {excerpt(m['expected'], 200)}, "
                f"got {excerpt(m['actual'], 200)}"
                for m in cycle["mismatches"]
            ]
        passed = not mismatches
        passed_all = passed_all and passed
        out.write(f'\n{pad}  ],\n{pad}  "passed": {json.dumps(passed)},\n')
        out.write(f'{pad}  "fixture": {json.dumps(str(path))}\n{pad}}}')
        out.write(",\n" if several and index < len(args.fixtures) - 1 else "\n")
        name = plain(fx.name, 120) if fx.name else "(unnamed)"
        print(f"{'PASS' if passed else 'FAIL'} {plain(path)}: {name} — {count} cycle(s)", file=sys.stderr)
        for line in mismatches:
            print(line, file=sys.stderr)
    if several:
        out.write("]\n")
    out.flush()
    return 0 if passed_all else 1


def _load_fixture(path: str) -> tuple[Any, Any] | None:
    """A fixture and its VAs, or None after saying why on stderr (exit 2). ConfigMap problems are warnings, as
    `serve` treats them: the invalid entry is dropped and the replay goes on."""
    from adapter.replay import fixture, runner

    try:
        loaded = fixture.load(Path(path))
        runner.initial_state(loaded[0])  # its errors too, before any output
    except FixtureError as exc:
        print(f"{plain(path)}: invalid fixture: {exc}", file=sys.stderr)
        return None
    for problem in fixture.configmap_problems(loaded[0]):
        print(f"warning {plain(path)}: {problem}", file=sys.stderr)
    return loaded


def _explain(args: argparse.Namespace) -> int:
    from adapter.domain.ids import VariantKey
    from adapter.replay import explain

    try:
        only = VariantKey.parse(args.va) if args.va else None
    except ValueError as exc:
        print(f"explain: --va: {exc}", file=sys.stderr)
        return 2
    loaded = _load_fixture(args.fixture)
    if loaded is None:
        return 2
    fx, vas = loaded
    if only is not None and only not in {va.key for va in vas}:
        print(f"explain: {plain(str(only))} is not a VariantAutoscaling of {plain(args.fixture)}", file=sys.stderr)
        return 2
    for line in explain.explain_lines(fx, vas, only=only):
        print(line)
    return 0


def _recommend(args: argparse.Namespace) -> int:
    """Rows of (namespace/name, model, lower, target, upper, desired) from a cluster or from fixtures."""
    rows: list[tuple[str, str, str, str, str, str]] = []
    if args.fixtures:
        from adapter.replay import runner

        for path in args.fixtures:
            loaded = _load_fixture(path)
            if loaded is None:
                return 2
            fx, vas = loaded
            models = {str(va.key): va.to_spec().model_id for va in vas}
            final: dict[str, Any] = {}
            for final in runner.cycles(fx, vas):  # noqa: B007 - only the last cycle is shown
                pass
            last = final["decisions"]
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

    out = Path(args.out) if args.out else None
    return simulate_main(
        Path(args.scenario),
        policy=args.policy,
        out_dir=out,
        seed=args.seed,
        frontier=not args.no_frontier,
        max_requests=args.max_requests,
    )


def _add_simulate(verbs: Any) -> None:
    simulate = verbs.add_parser("simulate", help="a scenario in closed loop on a virtual clock, against an oracle")
    simulate.add_argument("--scenario", required=True, metavar="FILE", help="simulation scenario YAML (DESIGN §3.3)")
    simulate.add_argument(
        "--policy",
        help="wva-v1 | wva-v2 | wva-slo | hpa-kv | keda-queue | static | oracle (default: the scenario's)",
    )
    simulate.add_argument("--out", metavar="DIR", help="write a PNG plot here (load, replicas, p99 TTFT/ITL vs SLO)")
    simulate.add_argument("--seed", type=SEED, metavar="N", help="run seed (default: the scenario's `seed`, else 0)")
    simulate.add_argument(
        "--no-frontier",
        action="store_true",
        help="skip the search for oracle@99 (oracle99_cost: null); the search plays 5-15 extra runs of the scenario",
    )
    simulate.add_argument(
        "--max-requests",
        type=number(integer=True, minimum=1, maximum=1_000_000_000),  # adapter.sim.scenario.MAX_REQUESTS_OVERRIDE
        metavar="N",
        help="refuse scenarios expected to generate more requests than this per run "
        "(default: adapter.sim.scenario.MAX_REQUESTS, 2,000,000)",
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
    demo.add_argument(
        "--duration",
        type=number(minimum=0, maximum=MAX_DEMO_DURATION_S),
        default=0.0,
        metavar="S",
        help="real seconds to run (0: until Ctrl-C)",
    )
    demo.add_argument(
        "--speed",
        type=number(minimum=0, above=True, maximum=MAX_DEMO_SPEED),
        default=20.0,
        metavar="X",
        help="virtual seconds per real second (at most; the world runs as fast as the machine allows)",
    )
    demo.add_argument("--scenario", metavar="FILE", help="a simulation scenario (YAML) instead of the built-in one")
    demo.add_argument("--examples", default="manifests/examples", metavar="DIR", help="where the va-*.yaml files are")
    demo.add_argument("--out", default="out/demo", metavar="DIR", help="where the kubeconfig and TLS files go")
    demo.add_argument("--secure-port", type=PORT, default=6443, help="0: any free port")
    demo.add_argument("--grpc-port", type=PORT, default=50051, help="0: any free port")
    demo.add_argument("--metrics-port", type=PORT, default=8080, help="0: any free port")
    demo.add_argument("--health-port", type=PORT, default=8081, help="0: any free port")
    demo.add_argument("--seed", type=SEED, default=0)
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
    capacity.add_argument("--alpha-ms", type=FINITE, required=True, metavar="A", help="ms per iteration (> 0)")
    capacity.add_argument("--beta-ms", type=FINITE, required=True, metavar="B", help="ms per token of compute (>= 0)")
    capacity.add_argument(
        "--gamma-ms", type=FINITE, required=True, metavar="G", help="ms per token of KV access (>= 0)"
    )
    capacity.add_argument("--input-tokens", type=FINITE, required=True, metavar="I", help="average input tokens (>= 0)")
    capacity.add_argument(
        "--output-tokens", type=FINITE, required=True, metavar="O", help="average output tokens (>= 1)"
    )
    capacity.add_argument(
        "--max-batch", type=number(integer=True), default=256, metavar="N", help="max concurrent requests (default 256)"
    )
    capacity.add_argument(
        "--max-queue", type=number(integer=True), default=100, metavar="Q", help="queue capacity (default 100)"
    )
    capacity.add_argument("--ttft-ms", type=FINITE, metavar="T", help="TTFT target, ms (0 = unconstrained)")
    capacity.add_argument("--itl-ms", type=FINITE, metavar="L", help="ITL target, ms (0 = unconstrained)")
    capacity.add_argument("--rate", type=FINITE, metavar="RPS", help="arrival rate, req/s (instead of the targets)")
    capacity.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    capacity.set_defaults(func=_capacity)
    return parser


class Terminated(BaseException):
    """SIGTERM, turned into an exception so that a blocking verb (replay, simulate, …) ends like Ctrl-C does:
    unwinding, with a message and exit 143, instead of dying mid-write."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    del signum, frame
    raise Terminated


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C raises KeyboardInterrupt where the program is, like Python's default handler. Installing it
    ourselves keeps asyncio.run from swapping in its own, which only cancels the main task: a simulation that
    never yields to the loop would not notice until it finished."""
    del signum, frame
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Exit codes: 0 success, 1 findings/mismatches (check-config, replay), 2 unusable input or settings (also a
    bad flag value, which argparse names), 130 interrupted (SIGINT), 143 stopped by SIGTERM.
    Our own errors (AdapterError: bad files, settings, fixtures, scenarios) end as one line on stderr, never a
    traceback; anything else is a bug and keeps its traceback. `demo` and `serve` handle SIGINT/SIGTERM
    themselves (a graceful stop, exit 0) and replace the handler installed here."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # a bad flag (argparse printed why) or --help / --version
        return exc.code if isinstance(exc.code, int) else 2
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        signal.signal(signal.SIGTERM, _terminate)
        signal.signal(signal.SIGINT, _interrupt)
    except ValueError:  # not the main thread (a test calling main): keep the defaults
        previous = {}
    try:
        code: int = args.func(args)
    except AdapterError as exc:
        print(f"wva-adapter {args.verb}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"wva-adapter {args.verb}: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print(f"wva-adapter {args.verb}: stopped by SIGTERM", file=sys.stderr)
        return 143
    finally:
        for sig, handler in previous.items():
            if handler is not None:
                signal.signal(sig, handler)
    return code
