"""The hostile corpus (issue 19): every case is a `wva-adapter` child process run by the harness under a memory
limit (RLIMIT_AS) and a deadline, and must end with the right exit code and a clear message inside both.

A case that reads a file whole, loops without bound or ignores a signal does not fail by being slow: it
fails by hitting the harness's limits (a MemoryError traceback, or a kill at the deadline, which the
assertions report). Cases that send a signal also bound the time from the signal to the exit
(`exit_within_s`: the issue's 2 s for demo/simulate, 5 s for serve, plus a second of scheduling margin on a
shared machine). The before/after figures of the closing note come from tests/hostile/probes.py, which uses
the same harness.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.hostile import inputs
from tests.hostile.harness import REPO, Outcome, kubeconfig_for, run_bounded, wva

MEMORY_MB = 1024
"""Address space of every child: the program with all its libraries maps about 450 MB; a file read whole, or
work without bound, fails against this."""
TIMEOUT_S = 60.0
EXAMPLES = REPO / "manifests" / "examples"
PORTS = ("--secure-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--health-port", "0")


@dataclass(frozen=True)
class Case:
    argv: Callable[[Path], list[str]]
    """The command line, given a scratch directory where the case writes its inputs."""
    rc: int
    says: str
    """A regular expression the program's stderr (or stdout) must match."""
    timeout_s: float = TIMEOUT_S
    memory_mb: int = MEMORY_MB
    signal_sent: int | None = None
    signal_when: bytes | None = None
    signal_after_s: float = 0.0
    exit_within_s: float | None = None
    stdin: bytes | None = None
    env: dict[str, str] = field(default_factory=dict)


def _file(name: str, content: str | bytes) -> Callable[[Path], Path]:
    def write(directory: Path) -> Path:
        path = directory / name
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        return path

    return write


def _fixture(document: dict[str, object]) -> Callable[[Path], Path]:
    return lambda directory: inputs.write_json(directory / "fixture.json", document)


def _sparse(name: str, size: int) -> Callable[[Path], Path]:
    return lambda directory: inputs.sparse_file(directory / name, size)


def _fifo(directory: Path) -> Path:
    return inputs.fifo(directory / "pipe.yaml")


def _symlink(name: str, target: str) -> Callable[[Path], Path]:
    def make(directory: Path) -> Path:
        path = directory / name
        path.symlink_to(target)
        return path

    return make


def _examples_to_dev_zero(directory: Path) -> Path:
    examples = directory / "examples"
    examples.mkdir()
    (examples / "va-zero.yaml").symlink_to("/dev/zero")
    return examples


def _trace_scenario(directory: Path) -> Path:
    (directory / "zero.csv").symlink_to("/dev/zero")
    text = inputs.poisson_scenario(1, 60).replace("{kind: poisson, rate_rps: 1, input_tokens: 100, output_tokens: 20}",
                                                  "{trace: zero.csv}")  # fmt: skip
    return _file("trace.yaml", text)(directory)


def _gzip_trace_scenario(rows: int) -> Callable[[Path], Path]:
    """A plain-CSV trace of `rows` requests, gzipped (a few hundred KB), and a scenario replaying it."""

    def make(directory: Path) -> Path:
        body = b"timestamp_s,input_tokens,output_tokens\n" + b"0.001,100,20\n" * rows
        (directory / "many.csv.gz").write_bytes(gzip.compress(body, compresslevel=1))
        text = inputs.poisson_scenario(1, 60).replace(
            "{kind: poisson, rate_rps: 1, input_tokens: 100, output_tokens: 20}", "{trace: many.csv.gz}"
        )
        return _file("gz.yaml", text)(directory)

    return make


def _alias_stream(documents: int) -> str:
    """Many documents, each a small alias bomb within the per-document budget (9 × 9 × 9 × 9 = 6,561 values)."""
    one = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    one += "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    return "".join(f"---\n{one}" for _ in range(documents))


def _va_file(obj: dict[str, object]) -> Callable[[Path], Path]:
    return _file("va.yaml", inputs.va_yaml(obj))


def check_config(make: Callable[[Path], Path]) -> Callable[[Path], list[str]]:
    return lambda directory: wva("check-config", str(make(directory)))


def verb(
    *head: str, make: Callable[[Path], Path] | None = None, tail: tuple[str, ...] = ()
) -> Callable[[Path], list[str]]:
    return lambda directory: wva(*head, *([str(make(directory))] if make else []), *tail)


def demo(*args: str) -> Callable[[Path], list[str]]:
    return lambda directory: wva("demo", *args, *PORTS, "--out", str(directory / "demo"), "--examples", str(EXAMPLES))


def demo_flag(flag: str, value: str) -> Callable[[Path], list[str]]:
    ports = list(PORTS)
    if flag in ports:
        index = ports.index(flag)
        del ports[index : index + 2]
    return lambda directory: wva(
        "demo", flag, value, "--duration", "1", *ports, "--out", str(directory / "demo"), "--examples", str(EXAMPLES)
    )


def capacity(*args: str, json_output: bool = False) -> Callable[[Path], list[str]]:
    base = {
        "--alpha-ms": "20", "--beta-ms": "0.08", "--gamma-ms": "0.0002",
        "--input-tokens": "512", "--output-tokens": "128", "--ttft-ms": "2000", "--itl-ms": "100",
    }  # fmt: skip
    given = dict(zip(args[::2], args[1::2], strict=True))
    merged = [item for key, value in {**base, **given}.items() for item in (key, value)]
    return lambda directory: wva("capacity", *merged, *(["--json"] if json_output else []))


def simulate_flood(*extra: str) -> Callable[[Path], list[str]]:
    return verb("simulate", "--scenario", make=_file("flood.yaml", inputs.poisson_scenario(100_000, 30)), tail=extra)


def simulate_long(directory: Path) -> list[str]:
    """A run of about 30 s on this machine: long enough to be signalled in the middle."""
    path = _file("long.yaml", inputs.poisson_scenario(60_000, 30))(directory)
    return wva("simulate", "--scenario", str(path), "--max-requests", "1900000")


def serve(*args: str) -> Callable[[Path], list[str]]:
    return lambda directory: wva("serve", "--prometheus-url", "http://127.0.0.1:9", *args)


@pytest.fixture
def hanging_apiserver(tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig whose server accepts TCP connections and never answers (the kernel completes the handshake
    from the listen backlog; nobody reads)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    port = listener.getsockname()[1]
    kubeconfig = kubeconfig_for(tmp_path / "hang.kubeconfig", f"http://127.0.0.1:{port}")
    try:
        yield kubeconfig
    finally:
        listener.close()


def _with_pod_name(name: str) -> dict[str, object]:
    document = inputs.fixture()
    cycles = document["cycles"]
    assert isinstance(cycles, list)
    cycles[0]["pods"][0]["name"] = name
    return document


CHARACTER_DEVICE = r"/dev/zero is a character device, not a regular file"
LIMIT_16MB = r"; the limit is 16\.0 MB"

CASES: dict[str, Case] = {
    # ---- 1. one bounded reader: non-regular and oversize files are refused before reading ----
    "check-config-dev-zero": Case(verb("check-config", "/dev/zero"), 1, CHARACTER_DEVICE),
    "replay-dev-zero": Case(verb("replay", "/dev/zero"), 2, CHARACTER_DEVICE),
    "explain-dev-zero": Case(verb("explain", "/dev/zero"), 2, CHARACTER_DEVICE),
    "recommend-dev-zero": Case(verb("recommend", "--fixture", "/dev/zero"), 2, CHARACTER_DEVICE),
    "simulate-dev-zero": Case(verb("simulate", "--scenario", "/dev/zero"), 2, CHARACTER_DEVICE),
    "serve-config-file-dev-zero": Case(serve("--config-file", "/dev/zero"), 2, r"config file " + CHARACTER_DEVICE),
    "serve-kubeconfig-dev-zero": Case(serve("--kubeconfig", "/dev/zero"), 2, r"--kubeconfig " + CHARACTER_DEVICE),
    "serve-tls-cert-dev-zero": Case(
        serve("--tls-cert-file", "/dev/zero", "--tls-private-key-file", "/dev/zero"),
        2,
        r"--tls-cert-file " + CHARACTER_DEVICE,
    ),
    "serve-token-file-dev-zero": Case(
        serve("--prometheus-token-path", "/dev/zero"), 2, r"--prometheus-token-path " + CHARACTER_DEVICE
    ),
    "check-config-fifo": Case(check_config(_fifo), 1, r"pipe\.yaml is a FIFO \(named pipe\), not a regular file"),
    "check-config-directory": Case(verb("check-config", "/tmp"), 1, r"/tmp is a directory, not a regular file"),
    "check-config-missing": Case(verb("check-config", "/nonexistent.yaml"), 1, r"cannot read: No such file"),
    "check-config-1GB-sparse": Case(check_config(_sparse("big.yaml", 1 << 30)), 1, r"is 1\.0 GB" + LIMIT_16MB),
    "replay-17MB-sparse": Case(verb("replay", make=_sparse("big.json", 17 << 20)), 2, r"is 17\.0 MB" + LIMIT_16MB),
    "simulate-2MB-scenario": Case(
        verb("simulate", "--scenario", make=_sparse("big.yaml", 2 << 20)), 2, r"is 2\.0 MB; the limit is 1\.0 MB"
    ),
    "serve-300KB-config-file": Case(
        lambda d: serve("--config-file", str(_sparse("settings.yaml", 300 << 10)(d)))(d),
        2,
        r"is 300 KB; the limit is 256 KB",
    ),
    "demo-examples-symlink-to-dev-zero": Case(
        lambda d: wva(
            "demo", "--examples", str(_examples_to_dev_zero(d)), "--duration", "1", *PORTS, "--out", str(d / "demo")
        ),
        2,
        r"va-zero\.yaml is a character device",
    ),
    "simulate-trace-symlink-to-dev-zero": Case(
        lambda d: wva("simulate", "--scenario", str(_trace_scenario(d))),
        2,
        r"scenario\.workload\.trace: .*zero\.csv is a character device",
    ),
    "simulate-gzip-trace-over-the-request-limit": Case(
        lambda d: wva("simulate", "--scenario", str(_gzip_trace_scenario(2_500_000)(d))),
        2,
        r"about 2,500,001 requests \(2,500,001 trace rows × rate_scale 1\); the limit is 2,000,000",
    ),
    "check-config-not-utf8": Case(check_config(_file("bad.yaml", b"a: \xff\xfe")), 1, r"not UTF-8 \(byte 0xff"),
    # ---- the alias budget is per document; a stream has a total ----
    "check-config-1500-ordinary-documents": Case(
        check_config(_file("many.yaml", inputs.many_va_documents(1500))), 0, r"ok +\S+many\.yaml#1500: "
    ),
    "check-config-alias-bomb-document": Case(
        check_config(
            _file(
                "bomb.yaml", _alias_stream(1).replace("d: [*c", "d: &d [*c") + "e: [" + ", ".join(["*d"] * 20) + "]\n"
            )
        ),
        1,
        r"expands to more than 100,000 values \(YAML aliases\)",
    ),
    "check-config-stream-of-small-alias-bombs": Case(
        check_config(_file("bombs.yaml", _alias_stream(400))),
        1,
        r"holds more than 2,000,000 values \(all documents, aliases expanded\)",
    ),
    # ---- 2. work bounded by what the input asks, checked before it starts ----
    "simulate-100k-rps-30s-refused": Case(
        simulate_flood(), 2, r"about 3,000,000 requests \(Poisson at 100,000 req/s × 30 s\); the limit is 2,000,000"
    ),
    "simulate-max-requests-lower": Case(
        verb(
            "simulate",
            "--scenario",
            make=_file("s.yaml", inputs.poisson_scenario(10, 200)),
            tail=("--max-requests", "1000"),
        ),
        2,
        r"about 2,000 requests .* the limit is 1,000",
    ),
    "replay-101-variants-of-one-model": Case(
        verb("replay", make=_fixture(inputs.fixture(101))),
        2,
        r"101 VariantAutoscalings of model 'model-0' in llm; the limit is 100 per model",
    ),
    "replay-5001-variant-autoscalings": Case(
        verb("replay", make=_fixture(inputs.fixture(5001, models=60))),
        2,
        r"\$\.variant_autoscalings: <list of 5001 items> — List should have at most 5000 items",
    ),
    "replay-too-many-decisions": Case(
        verb("replay", make=_fixture(inputs.fixture(100, models=20, cycles=501, pods_every_cycle=False))),
        2,
        r"100 VariantAutoscalings × 501 cycles = 50,100 decisions; the limit is 50,000",
    ),
    "replay-too-many-variant-pairs": Case(
        verb("replay", make=_fixture(inputs.fixture(100, cycles=101, pods_every_cycle=False))),
        2,
        r"\$\.cycles: 101 cycles × Σ \(variants per model\)² 10,000 = 1,010,000; the limit is 1,000,000",
    ),
    "replay-at-the-limits-runs": Case(
        verb("replay", make=_fixture(inputs.fixture(5000, models=50, cycles=2))),
        0,
        r"PASS .*fixture\.json: 5000 VAs — 2 cycle\(s\)",
        timeout_s=120,
    ),
    # ---- 4. shutdown: demo and simulate at any speed, serve whatever the apiserver does ----
    "demo-speed-100000-duration-3": Case(
        demo("--speed", "100000", "--duration", "3"), 0, r"demo: shutting down", timeout_s=40
    ),
    "demo-scenario-100k-rps-sigterm": Case(
        lambda d: wva(
            "demo",
            "--scenario",
            str(_file("flood.yaml", inputs.poisson_scenario(100_000, 3600))(d)),
            "--speed",
            "1000",
            *PORTS,
            "--out",
            str(d / "demo"),
        ),
        0,
        r"demo: shutting down",
        signal_sent=signal.SIGTERM,
        signal_when=b"stops it",
        signal_after_s=3.0,
        exit_within_s=3.0,
    ),
    "demo-speed-1000000-sigterm": Case(
        demo("--speed", "1000000"),
        0,
        r"demo: shutting down",
        signal_sent=signal.SIGTERM,
        signal_when=b"stops it",
        signal_after_s=5.0,
        exit_within_s=3.0,
    ),
    "demo-speed-100000-sigint": Case(
        demo("--speed", "100000"),
        0,
        r"demo: shutting down",
        signal_sent=signal.SIGINT,
        signal_when=b"stops it",
        signal_after_s=5.0,
        exit_within_s=3.0,
    ),
    "simulate-sigterm": Case(
        simulate_long,
        143,
        r"wva-adapter simulate: stopped by SIGTERM",
        signal_sent=signal.SIGTERM,
        signal_after_s=4.0,
        exit_within_s=3.0,
    ),
    "simulate-sigint": Case(
        simulate_long,
        130,
        r"wva-adapter simulate: interrupted",
        signal_sent=signal.SIGINT,
        signal_after_s=4.0,
        exit_within_s=3.0,
    ),
    # ---- 5. values: every CLI number finite and ranged, ports 1-65535, named in the message ----
    "demo-speed-nan": Case(demo_flag("--speed", "nan"), 2, r"argument --speed: must be a finite number > 0 .*'nan'"),
    "demo-speed-inf": Case(demo_flag("--speed", "inf"), 2, r"argument --speed: must be a finite number"),
    "demo-speed-zero": Case(demo_flag("--speed", "0"), 2, r"argument --speed: must be a finite number > 0"),
    "demo-seed-negative": Case(demo_flag("--seed", "-1"), 2, r"argument --seed: must be an integer >= 0"),
    "demo-seed-2-to-the-32": Case(demo_flag("--seed", "4294967296"), 2, r"argument --seed: .*<= 4\.29497e\+09"),
    "demo-secure-port-99999": Case(demo_flag("--secure-port", "99999"), 2, r"argument --secure-port: must be a port"),
    "demo-grpc-port-99999": Case(demo_flag("--grpc-port", "99999"), 2, r"argument --grpc-port: must be a port"),
    "demo-metrics-port-negative": Case(demo_flag("--metrics-port", "-1"), 2, r"argument --metrics-port: must be a p"),
    "demo-duration-nan": Case(demo_flag("--duration", "nan"), 2, r"argument --duration: must be a finite number"),
    "demo-duration-arabic-digits": Case(demo_flag("--duration", "٣"), 2, r"argument --duration: .*'٣'"),
    "simulate-seed-negative": Case(
        verb("simulate", "--scenario", "x.yaml", "--seed", "-1"), 2, r"argument --seed: must be an integer >= 0"
    ),
    "capacity-alpha-nan": Case(capacity("--alpha-ms", "nan"), 2, r"argument --alpha-ms: must be a finite number"),
    "capacity-rate-inf": Case(
        lambda d: wva(
            "capacity",
            "--alpha-ms",
            "20",
            "--beta-ms",
            "0",
            "--gamma-ms",
            "0",
            "--input-tokens",
            "1",
            "--output-tokens",
            "1",
            "--rate",
            "inf",
        ),
        2,
        r"argument --rate: must be a finite number",
    ),
    "capacity-flat-itl-target-above-it": Case(
        capacity("--beta-ms", "0", "--gamma-ms", "0", "--itl-ms", "1000", "--ttft-ms", "0", json_output=True),
        0,
        r'"itl_ms": 20\.0,',  # β = γ = 0: every request is in service exactly α·(O + 1) ms, ITL = α exactly
    ),
    "capacity-flat-itl-target-below-it": Case(
        capacity("--beta-ms", "0", "--gamma-ms", "0", "--itl-ms", "10", "--ttft-ms", "0"),
        2,
        r"capacity: --itl-ms: itl_ms target 10 ms is below the bounded region: the minimum achievable ITL is 20 ms",
    ),
    "serve-secure-port-99999": Case(serve("--secure-port", "99999"), 2, r"flag --secure-port: 99999 — Input should be"),
    "serve-rest-timeout-huge": Case(
        serve("--rest-client-timeout", "99999h"), 2, r"flag --rest-client-timeout: 359996400\.0 — .*less than or equal"
    ),
    "serve-duration-overflow": Case(
        serve("--engine-interval", "9" * 400 + "h"), 2, r"flag --engine-interval: .*longer than a Go duration"
    ),
    "serve-watch-namespace-not-a-label": Case(
        serve("--watch-namespace", "LLM NS"), 2, r"flag --watch-namespace: 'LLM NS' — must be a lowercase RFC 1123"
    ),
    # check-config says ok only to what the apiserver would accept
    "check-config-name-Llama_8B": Case(
        check_config(_va_file(inputs.va("Llama_8B"))), 1, r"metadata\.name: 'Llama_8B' — must be a lowercase RFC 1123"
    ),
    "check-config-namespace-with-space": Case(
        check_config(_va_file(inputs.va("a", namespace="LLM NS"))),
        1,
        r"metadata\.namespace: 'LLM NS' — must be a lowercase RFC 1123 label",
    ),
    "check-config-name-300-chars": Case(
        check_config(_va_file(inputs.va("a" * 300))), 1, r"\(300 chars\) — must be a lowercase RFC 1123 subdomain"
    ),
    "check-config-name-rlo-and-newline": Case(
        check_config(_va_file(inputs.va("a\u202eb\nc"))), 1, r"metadata\.name: 'a\\u202eb\\nc' — must be"
    ),
    "check-config-target-with-slash": Case(
        check_config(_va_file(inputs.va("a", target="Bad/Target"))),
        1,
        r"scaleTargetRef\.name: 'Bad/Target' — must be a lowercase RFC 1123 subdomain",
    ),
    "check-config-max-replicas-2-to-the-32": Case(
        check_config(_va_file(inputs.va("a", maxReplicas=4294967296))),
        1,
        r"maxReplicas: 4294967296 — input should be less than or equal to 2147483647",
    ),
    "check-config-max-replicas-bool": Case(
        check_config(_va_file(inputs.va("a", maxReplicas=True))), 1, r"maxReplicas: True — input should be a valid"
    ),
    "check-config-nul-in-model-id": Case(
        check_config(_va_file(inputs.va("a", model="m\x00x"))),
        1,
        r"modelID: 'm\\x00x' — must hold printable characters only .*, found '\\x00' at 1",
    ),
    "check-config-private-use-in-model-id": Case(
        check_config(_va_file(inputs.va("a", model="\ue000"))),
        1,
        r"modelID: '\\ue000' — must hold printable characters only .*, found '\\ue000' at 0",
    ),
    "check-config-cost-1e53": Case(
        check_config(_va_file(inputs.va("a", variantCost="1" + "0" * 53))), 1, r"variantCost: .* at most 32 characters"
    ),
    "check-config-cost-above-a-million": Case(
        check_config(_va_file(inputs.va("a", variantCost="1000001"))), 1, r"variantCost: .* at most 1,000,000"
    ),
    "check-config-label-key-with-newline": Case(
        check_config(
            _va_file({**inputs.va("a"), "metadata": {"name": "a", "namespace": "llm", "labels": {"x\ny": "v"}}})
        ),
        1,
        r"label key 'x\\ny' must be a qualified name",
    ),
    "check-config-unknown-kind-with-escapes": Case(
        check_config(_file("other.yaml", json.dumps({"kind": "Foo\x1b[31m", "metadata": {"name": "a\nb"}}))),
        0,
        r"skip +\S+other\.yaml#1: 'Foo\\x1b\[31m' 'a\\nb' is not a VA or WVA ConfigMap",
    ),
    "check-config-configmap-hostile-namespace": Case(
        check_config(
            _file(
                "cm.yaml",
                json.dumps(
                    {
                        "kind": "ConfigMap",
                        "metadata": {"name": "wva-saturation-scaling-config", "namespace": "ns\x1b[2J"},
                        "data": {"default": "kvCacheThreshold: 0.8"},
                    }
                ),
            )
        ),
        1,
        r"metadata\.namespace: 'ns\\x1b\[2J' — must be a lowercase RFC 1123 label",
    ),
    "check-config-configmap-hostile-key": Case(
        check_config(
            _file(
                "cm.yaml",
                json.dumps(
                    {
                        "kind": "ConfigMap",
                        "metadata": {"name": "wva-saturation-scaling-config", "namespace": "llm"},
                        "data": {"default\u202e": "kvCacheThreshold: 0.8"},
                    }
                ),
            )
        ),
        1,
        r"\.data: key 'default\\u202e' is not a ConfigMap key",
    ),
    "check-config-valid-va": Case(check_config(_va_file(inputs.va("llama-8b"))), 0, r"ok +\S+va\.yaml#1: "),
    # the replay fixture: strict types, ready <= replicas, one ConfigMap per name, invalid ConfigMaps reported
    "replay-replicas-true": Case(
        verb("replay", make=_fixture(inputs.fixture(target={"replicas": True}))),
        2,
        r"\$\.cycles\[0\]\.scale_targets\[0\]\.replicas: True — Input should be a valid integer",
    ),
    "replay-replicas-10-to-the-30": Case(
        verb("replay", make=_fixture(inputs.fixture(target={"replicas": 10**30}))),
        2,
        r"replicas: 1000000000000000000000000000000 — Input should be less than or equal to 2147483647",
    ),
    "replay-replicas-as-text": Case(
        verb("replay", make=_fixture(inputs.fixture(target={"replicas": "2"}))),
        2,
        r"replicas: '2' — Input should be a valid integer",
    ),
    "replay-ready-above-replicas": Case(
        verb("replay", make=_fixture(inputs.fixture(target={"ready_replicas": 50}))),
        2,
        r"scale_targets\[0\]: ready_replicas \(50\) must be less than or equal to replicas \(2\)",
    ),
    "replay-two-configmaps-one-name": Case(
        verb(
            "replay",
            make=_fixture(
                inputs.fixture(
                    configmaps=[
                        inputs.configmap("wva-saturation-scaling-config", "kvCacheThreshold: 0.5"),
                        inputs.configmap("wva-saturation-scaling-config", "kvCacheThreshold: 0.9"),
                    ]
                )
            ),
        ),
        2,
        r"\$\.configmaps\[1\]: ConfigMap 'workload-variant-autoscaler-system/wva-saturation-scaling-config' is also "
        r"configmaps\[0\]",
    ),
    "replay-invalid-configmap-reported": Case(
        verb(
            "replay",
            make=_fixture(
                inputs.fixture(
                    configmaps=[
                        inputs.configmap("wva-saturation-scaling-config", "kvCacheThreshold: 7"),
                    ]
                )
            ),
        ),
        0,
        r"warning \S+fixture\.json: ConfigMap workload-variant-autoscaler-system/wva-saturation-scaling-config"
        r"\[default\]\.kvCacheThreshold: 7 — input should be less than or equal to 1",
    ),
    "explain-invalid-configmap-reported": Case(
        verb(
            "explain",
            make=_fixture(
                inputs.fixture(
                    configmaps=[
                        inputs.configmap("wva-saturation-scaling-config", "kvCacheThreshold: 7"),
                    ]
                )
            ),
        ),
        0,
        r"Configuration problems .*\n  ! ConfigMap workload-variant-autoscaler-system/wva-saturation-scaling-config",
    ),
    "replay-pod-name-with-escape": Case(
        verb("replay", make=_fixture(_with_pod_name("v0-\x1b[31m"))),
        2,
        r"\$\.cycles\[0\]\.pods\[0\]\.name: 'v0-\\x1b\[31m' — must be a lowercase RFC 1123 subdomain",
    ),
}


def run_case(case: Case, directory: Path) -> Outcome:
    argv = case.argv(directory)
    env = {**os.environ, **case.env}
    env.pop("KUBECONFIG", None)
    return run_bounded(
        argv,
        timeout_s=case.timeout_s,
        memory_mb=case.memory_mb,
        cwd=directory,
        env=env,
        stdin=case.stdin,
        send_signal=case.signal_sent,
        signal_when=case.signal_when,
        signal_after_s=case.signal_after_s,
        exit_within_s=case.exit_within_s,
    )


def check(outcome: Outcome, case: Case) -> None:
    assert not outcome.timed_out, f"not finished within its time bound: {outcome.describe()}"
    assert "Traceback" not in outcome.stderr, outcome.describe()
    assert "MemoryError" not in outcome.stderr, outcome.describe()
    assert outcome.returncode == case.rc, outcome.describe()
    text = outcome.stderr + "\n" + outcome.stdout
    assert re.search(case.says, text), f"expected /{case.says}/ in:\n{text[-3000:]}"
    for line in outcome.stderr.splitlines():  # clear: short lines, nothing raw from the input
        assert line.isprintable(), f"unprintable characters in {line!r}"
        assert len(line) < 2_000, f"a message of {len(line)} characters"
    for line in outcome.stdout.splitlines():
        assert line.isprintable(), f"unprintable characters in {line!r}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_case(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    check(run_case(case, tmp_path), case)


def test_serve_stops_within_5s_of_sigterm_while_the_apiserver_does_not_answer(
    hanging_apiserver: Path, tmp_path: Path
) -> None:
    """A TCP listener that accepts and never answers stands in for the apiserver here; tests/e2e_k8s/
    test_shutdown.py stops a real kube-apiserver (SIGSTOP) under a running, leading `serve`."""
    case = Case(
        serve(
            f"--kubeconfig={hanging_apiserver}", "--secure-port=0", "--keda-grpc-address=127.0.0.1:0",
            "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0", "--leader-elect",
        ),
        0,
        r"stop requested during start-up",
        signal_sent=signal.SIGTERM, signal_after_s=3.0, exit_within_s=6.0,
    )  # fmt: skip
    outcome = run_case(case, tmp_path)
    check(outcome, case)
    assert outcome.after_signal_s is not None


def test_the_harness_catches_a_program_that_reads_a_file_whole(tmp_path: Path) -> None:
    """The bound is real: reading /dev/zero whole under the same limit ends in MemoryError, not a pass."""
    outcome = run_bounded(
        [sys.executable, "-c", "open('/dev/zero', 'rb').read()"], timeout_s=30, memory_mb=MEMORY_MB, cwd=tmp_path
    )
    assert outcome.returncode == 1, outcome.describe()
    assert "MemoryError" in outcome.stderr, outcome.describe()


def test_the_harness_catches_a_program_that_ignores_sigterm(tmp_path: Path) -> None:
    outcome = run_bounded(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"],
        timeout_s=30,
        memory_mb=MEMORY_MB,
        cwd=tmp_path,
        send_signal=signal.SIGTERM,
        signal_after_s=0.5,
        exit_within_s=1.0,
    )
    assert outcome.timed_out, outcome.describe()
    assert outcome.after_signal_s is not None
