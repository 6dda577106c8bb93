"""The probes of issue 19, measured with the corpus harness, for a before/after table.

    .venv/bin/python -m tests.hostile.probes [--code DIR] [--only NAME...] [--json OUT]

`--code DIR` runs the probes against another checkout's `adapter` package (e.g. a worktree of main: PYTHONPATH
points at it; run `make proto` there, or generate `adapter/servers/_keda_pb` once). Every command runs under the
same harness the corpus tests use (tests/hostile/harness.py): a 4 GiB address-space limit and a 90 s deadline,
so a probe that would take the machine's memory ends in a MemoryError or a kill instead, and the table says which.
Prints a Markdown table (peak RSS, wall time, exit, the first line of the message) and, with --json, the raw data.
Not collected by pytest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.hostile import inputs
from tests.hostile.harness import REPO, Outcome, kubeconfig_for, run_bounded

MEMORY_MB = 4096
TIMEOUT_S = 90.0


@dataclass
class Row:
    probe: str
    outcome: str
    message: str
    peak_rss_mb: float | None = None
    wall_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _first_line(text: str, limit: int = 110) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    errors = [line for line in lines if ": error: " in line]  # argparse: the usage line, then the reason
    # a traceback: its last line says what it was
    traceback = any(line.startswith("Traceback") for line in lines)
    line = errors[0] if errors else (lines[-1] if traceback else lines[0])
    line = line.encode("unicode_escape").decode("ascii")
    return line if len(line) <= limit else line[:limit] + "…"


def _how(outcome: Outcome) -> str:
    if outcome.timed_out:
        return f"killed at {TIMEOUT_S:.0f} s"
    if "Traceback" in outcome.stderr:
        return f"rc {outcome.returncode}, traceback"
    return f"rc {outcome.returncode}"


class Prober:
    def __init__(self, code: Path, work: Path) -> None:
        self.code = code
        self.work = work
        self.env = {**os.environ, "PYTHONPATH": str(code)}
        self.rows: list[Row] = []

    def cli(
        self, name: str, *args: str, signal_at: tuple[int, bytes | None, float] | None = None, **kw: Any
    ) -> Outcome:
        send, when, after = signal_at if signal_at else (None, None, 0.0)
        outcome = run_bounded(
            [sys.executable, "-m", "adapter", *args],
            timeout_s=kw.pop("timeout_s", TIMEOUT_S),
            memory_mb=kw.pop("memory_mb", MEMORY_MB),
            cwd=self.work,
            env=self.env,
            send_signal=send,
            signal_when=when,
            signal_after_s=after,
            **kw,
        )
        message = _first_line(outcome.stderr) or _first_line(outcome.stdout)
        extra: dict[str, Any] = {}
        if outcome.after_signal_s is not None:
            extra["exit_after_signal_s"] = round(outcome.after_signal_s, 2)
            message = f"[exit {outcome.after_signal_s:.1f} s after the signal] {message}"
        self.rows.append(Row(name, _how(outcome), message, round(outcome.peak_rss_mb), round(outcome.wall_s, 1), extra))
        return outcome

    def file(self, name: str, text: str | bytes) -> Path:
        path = self.work / name
        path.write_bytes(text.encode() if isinstance(text, str) else text)
        return path


# ---- CLI probes ---------------------------------------------------------------------------------------------


def file_probes(p: Prober) -> None:
    for verb in (["check-config"], ["replay"], ["explain"], ["recommend", "--fixture"], ["simulate", "--scenario"]):
        p.cli(f"{' '.join(verb)} /dev/zero", *verb, "/dev/zero")
    p.cli("serve --config-file /dev/zero", "serve", "--config-file", "/dev/zero", "--prometheus-url", "http://x")
    sparse = inputs.sparse_file(p.work / "sparse-1g.yaml", 1 << 30)
    p.cli("check-config 1 GB sparse file", "check-config", str(sparse))
    p.cli("check-config 1,500 VA documents", "check-config", str(p.file("many.yaml", inputs.many_va_documents(1500))))


def fixture_probes(p: Prober) -> None:
    shapes = (
        ("2,000 VAs of one model", 2_000, 1, 1),
        ("20,000 VAs of one model", 20_000, 1, 1),
        ("500 VAs of one model, 100 cycles", 500, 1, 100),
        ("100 VAs of one model, 100 cycles", 100, 1, 100),
        ("5,000 VAs in 1,000 models, 10 cycles", 5_000, 1_000, 10),
    )
    for name, n, models, cycles in shapes:
        path = inputs.write_json(p.work / f"fx-{n}-{cycles}.json", inputs.fixture(n, models=models, cycles=cycles))
        p.cli(f"replay: {name} ({path.stat().st_size / 2**20:.1f} MB)", "replay", str(path))


def simulate_probes(p: Prober) -> None:
    path = p.file("flood.yaml", inputs.poisson_scenario(100_000, 30))
    p.cli("simulate Poisson 100,000 req/s for 30 s", "simulate", "--scenario", str(path))


def demo_probes(p: Prober) -> None:
    ports = ("--secure-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--health-port", "0")
    out = ("--out", str(p.work / "demo"), "--examples", str(REPO / "manifests" / "examples"))
    banner = b"stops it"
    p.cli("demo --speed 100000 --duration 5", "demo", "--speed", "100000", "--duration", "5", *ports, *out)
    p.cli("demo --speed inf --duration 5", "demo", "--speed", "inf", "--duration", "5", *ports, *out)
    p.cli(
        "demo --speed 100000, SIGTERM",
        "demo", "--speed", "100000", *ports, *out,
        signal_at=(signal.SIGTERM, banner, 10.0),
    )  # fmt: skip
    p.cli(
        "demo --speed 100000, SIGINT",
        "demo", "--speed", "100000", *ports, *out,
        signal_at=(signal.SIGINT, banner, 10.0),
    )  # fmt: skip
    for flag, value in (
        ("--speed", "nan"),
        ("--seed", "-1"),
        ("--secure-port", "99999"),
        ("--grpc-port", "99999"),
        ("--duration", "nan"),
    ):
        rest = [a for a in ports if a != flag]
        if flag in ports:
            index = ports.index(flag)
            rest = list(ports[:index] + ports[index + 2 :])
        p.cli(
            f"demo {flag} {value}",
            "demo", flag, value, "--duration", "2" if flag != "--duration" else value, *rest, *out,
            timeout_s=30,
        )  # fmt: skip


def value_probes(p: Prober) -> None:
    cases: dict[str, dict[str, Any]] = {
        "name Llama_8B": inputs.va("Llama_8B"),
        "namespace 'LLM NS'": inputs.va("a", namespace="LLM NS"),
        "name of 300 characters": inputs.va("a" * 300),
        "name with U+202E and a newline": inputs.va("a\u202eb\nc"),
        "scaleTargetRef.name Bad/Target": inputs.va("a", target="Bad/Target"),
        "maxReplicas 4294967296": inputs.va("a", maxReplicas=4294967296),
        "NUL in modelID": inputs.va("a", model="m\x00x"),
        "variantCost 1e53": inputs.va("a", variantCost="1" + "0" * 53),
    }
    for name, obj in cases.items():
        path = p.file(f"value-{len(p.rows)}.yaml", inputs.va_yaml(obj))
        p.cli(f"check-config: {name}", "check-config", str(path))
    fx_cases: dict[str, dict[str, Any]] = {
        "replicas: true": inputs.fixture(target={"replicas": True}),
        "replicas: 10**30": inputs.fixture(target={"replicas": 10**30}),
        "ready_replicas 50 > replicas 2": inputs.fixture(target={"ready_replicas": 50}),
        "two ConfigMaps with one name": inputs.fixture(
            configmaps=[
                inputs.configmap("wva-saturation-scaling-config", "kvCacheThreshold: 0.5"),
                inputs.configmap("wva-saturation-scaling-config", "kvCacheThreshold: 0.9"),
            ]
        ),
        "an invalid ConfigMap": inputs.fixture(
            configmaps=[inputs.configmap("wva-saturation-scaling-config", "kvCacheThreshold: 7")]
        ),
    }
    for name, document in fx_cases.items():
        path = inputs.write_json(p.work / f"fx-value-{len(p.rows)}.json", document)
        p.cli(f"replay: {name}", "replay", str(path))
    p.cli(
        "capacity --beta-ms 0 --gamma-ms 0 --itl-ms 1000",
        "capacity", "--alpha-ms", "20", "--beta-ms", "0", "--gamma-ms", "0", "--input-tokens", "100",
        "--output-tokens", "100", "--ttft-ms", "0", "--itl-ms", "1000",
    )  # fmt: skip


# ---- server probes: a demo process of the code under test ------------------------------------------------


class DemoServer:
    def __init__(self, p: Prober) -> None:
        self.p = p
        self.proc: subprocess.Popen[bytes] | None = None
        self.https_port = self.grpc_port = 0

    def __enter__(self) -> DemoServer:
        log = (self.p.work / "demo-server.log").open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "adapter", "demo", "--speed", "1",
                "--secure-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--health-port", "0",
                "--out", str(self.p.work / "demo-server"), "--examples", str(REPO / "manifests" / "examples"),
            ],
            cwd=self.p.work, env=self.p.env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = (self.p.work / "demo-server.log").read_text(errors="replace")
            https = re.search(r"https://127\.0\.0\.1:(\d+)", text)
            grpc_ = re.search(r"KEDA external scaler\s+127\.0\.0\.1:(\d+)", text)
            if https and grpc_:
                self.https_port, self.grpc_port = int(https.group(1)), int(grpc_.group(1))
                return self
            time.sleep(0.2)
        raise RuntimeError(f"demo did not start:\n{text[-2000:]}")

    def rss_mb(self) -> float:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
        return float("nan")

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _tls_client() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def _http_get(port: int, target: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=_tls_client())
    writer.write(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode("utf-8", "replace")


def server_probes(p: Prober) -> None:
    import grpc

    sys.path.insert(0, str(p.code))
    from adapter.servers._keda_pb import externalscaler_pb2 as pb
    from adapter.servers._keda_pb import externalscaler_pb2_grpc as pb_grpc

    with DemoServer(p) as demo:
        base = "/apis/external.metrics.k8s.io/v1beta1/namespaces"
        selector = "labelSelector=a%01%1b[31m%0a=b"
        for name, target in (
            ("External Metrics: namespace %00", f"{base}/%00/wva_desired_replicas"),
            ("External Metrics: selector with control characters", f"{base}/llm/wva_desired_replicas?{selector}"),
            ("External Metrics: metric name with an escape sequence", f"{base}/llm/wva%1b[31mred"),
        ):  # fmt: skip
            status, body = asyncio.run(_http_get(demo.https_port, target))
            try:
                message = (
                    json.loads(body).get("message", "") if status != 200 else f"items: {json.loads(body)['items']}"
                )
            except ValueError:
                message = body[:80]
            p.rows.append(Row(name, f"HTTP {status}", _first_line(message)))
        with grpc.insecure_channel(f"127.0.0.1:{demo.grpc_port}") as channel:
            stub = pb_grpc.ExternalScalerStub(channel)
            for size in (10_000, 17_000):
                ref = pb.ScaledObjectRef(name="x", namespace="llm", scalerMetadata={"variantAutoscaling": "a" * size})
                try:
                    stub.GetMetricSpec(ref, timeout=10)
                    p.rows.append(Row(f"KEDA: {size // 1000} kB variantAutoscaling", "OK", ""))
                except grpc.RpcError as exc:
                    detail = exc.details() or ""
                    p.rows.append(
                        Row(
                            f"KEDA: {size // 1000} kB variantAutoscaling",
                            str(exc.code().name),
                            f"({len(detail):,} chars) {_first_line(detail, 70)}",
                        )
                    )
        slowloris(p, demo)


async def _slow_connection(port: int, hold: asyncio.Event, opened: list[int], every_s: float) -> None:
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=_tls_client()), timeout=30
        )
    except (OSError, TimeoutError, ssl.SSLError):
        return
    opened[0] += 1
    try:
        writer.write(b"GET /apis HTTP/1.1\r\n")
        i = 0
        while not hold.is_set():
            with_timeout = asyncio.create_task(hold.wait())
            await asyncio.wait({with_timeout}, timeout=every_s)
            with_timeout.cancel()
            if reader.at_eof():
                break
            writer.write(f"X-Slow-{i}: {'v' * 32}\r\n".encode())
            i += 1
            await writer.drain()
    except (OSError, ssl.SSLError):
        pass
    finally:
        writer.transport.abort()


def slowloris(
    p: Prober, demo: DemoServer, *, connections: int = 3000, hold_s: float = 40.0, every_s: float = 10.0
) -> None:
    async def run() -> dict[str, Any]:
        before = demo.rss_mb()
        hold = asyncio.Event()
        opened = [0]
        peak = {"rss": before, "open": 0}

        async def sample() -> None:
            while not hold.is_set():
                peak["rss"] = max(peak["rss"], demo.rss_mb())
                peak["open"] = max(peak["open"], len(_established(demo.https_port)))
                await asyncio.sleep(0.5)

        sampler = asyncio.create_task(sample())
        tasks = []
        for _ in range(connections):
            tasks.append(asyncio.create_task(_slow_connection(demo.https_port, hold, opened, every_s)))
            await asyncio.sleep(0.002)
        await asyncio.sleep(hold_s)
        open_at_end = len(_established(demo.https_port))
        hold.set()
        await sampler
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(10)
        after = demo.rss_mb()
        return {
            "before": before, "peak": peak["rss"], "after": after, "opened": opened[0],
            "peak_open": peak["open"], "open_at_end": open_at_end,
        }  # fmt: skip

    figures = asyncio.run(run())
    p.rows.append(
        Row(
            f"{connections:,} slow TLS connections (a header line every {every_s:g} s) held {hold_s:g} s",
            f"{figures['opened']:,} handshakes; at most {figures['peak_open']:,} open at once, "
            f"{figures['open_at_end']:,} at {hold_s:g} s",
            f"server RSS {figures['before']:.0f} MB before, peak {figures['peak']:.0f} MB, "
            f"{figures['after']:.0f} MB 10 s after they closed",
            round(figures["peak"]),
            None,
            figures,
        )
    )


def _established(port: int) -> list[str]:
    """Server-side ESTABLISHED sockets on `port` (from /proc/net/tcp)."""
    hexport = f"{port:04X}"
    rows = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{hexport}") and fields[3] == "01":
            rows.append(fields[2])
    return rows


# ---- serve against an apiserver that accepts and never answers --------------------------------------------


def serve_hanging_probe(p: Prober) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    kubeconfig = kubeconfig_for(p.work / "hang.kubeconfig", f"http://127.0.0.1:{port}")
    try:
        p.cli(
            "serve, apiserver accepts and never answers, SIGTERM at 3 s",
            "serve", f"--kubeconfig={kubeconfig}", "--prometheus-url=http://127.0.0.1:9", "--secure-port=0",
            "--keda-grpc-address=127.0.0.1:0", "--metrics-bind-address=127.0.0.1:0",
            "--health-probe-bind-address=127.0.0.1:0", "--leader-elect",
            signal_at=(signal.SIGTERM, None, 3.0),
        )  # fmt: skip
    finally:
        listener.close()


GROUPS: dict[str, Callable[[Prober], None]] = {
    "files": file_probes,
    "fixtures": fixture_probes,
    "simulate": simulate_probes,
    "demo": demo_probes,
    "values": value_probes,
    "serve": serve_hanging_probe,
    "servers": server_probes,  # last: holding 3,000 TLS connections grows this process (see harness.py)
}


def table(rows: list[Row]) -> str:
    lines = ["| probe | outcome | message | peak RSS MB | wall s |", "|---|---|---|---|---|"]
    for row in rows:
        message = row.message.replace("|", "\\|")
        rss = "" if row.peak_rss_mb is None else f"{row.peak_rss_mb:,.0f}"
        wall = "" if row.wall_s is None else f"{row.wall_s:.1f}"
        lines.append(f"| {row.probe} | {row.outcome} | {message} | {rss} | {wall} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", type=Path, default=REPO, help="the checkout whose adapter package is probed")
    parser.add_argument("--only", nargs="*", choices=sorted(GROUPS), help="probe groups to run (default: all)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="wva-probes-") as directory:
        prober = Prober(options.code.resolve(), Path(directory))
        for name in options.only or list(GROUPS):
            print(f"[probes] {name} …", file=sys.stderr, flush=True)
            GROUPS[name](prober)
    print(table(prober.rows))
    if options.json:
        options.json.write_text(json.dumps([row.__dict__ for row in prober.rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
