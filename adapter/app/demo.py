"""`wva-adapter demo`: a simulated fleet, the real pipeline and the real servers, all on 127.0.0.1.

Wall time maps onto the world's virtual clock at `speed` (20 virtual seconds per real second by default,
so one 30 s engine cycle every 1.5 s). The servers read the same DecisionStore the world publishes to, so
`kubectl get --raw`, a KEDA gRPC client or a Prometheus scrape see exactly what an HPA would.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import yaml

from adapter.app.signals import stop_on_signals
from adapter.app.world import DemoWorld, Row, load_vas, world_from_scenario
from adapter.domain.decision import VariantDecision
from adapter.domain.ids import VariantKey
from adapter.replay.recorder import FlightRecorder
from adapter.servers.auth import AllowAll
from adapter.servers.external_metrics import build_external_metrics_app, start_https_server
from adapter.servers.keda import start_keda_server
from adapter.servers.telemetry import Telemetry, build_telemetry_app, start_http_server
from adapter.servers.tls import serving_tls
from adapter.sim.scenario import load as load_scenario
from adapter.store import DecisionStore

LOOPBACK = "127.0.0.1"

DEMO_RECORD_MAX_BYTES = 64 * 1024 * 1024
"""The demo's flight-recorder ring (oldest cycles deleted first)."""


@dataclass(frozen=True, slots=True)
class DemoOptions:
    examples_dir: Path
    out_dir: Path
    scenario: Path | None = None
    """A simulation scenario (DESIGN §3.3) to play instead of the built-in one."""
    duration_s: float = 0.0
    """Real seconds to run; 0 = until Ctrl-C."""
    speed: float = 20.0
    secure_port: int = 6443
    grpc_port: int = 50051
    metrics_port: int = 8080
    health_port: int = 8081
    seed: int = 0
    tick_s: float = 0.25
    """Real seconds between world steps."""


@dataclass(frozen=True, slots=True)
class DemoEndpoints:
    """Where a started demo listens (ports are the bound ones, so port 0 works)."""

    https_port: int
    grpc_port: int
    metrics_port: int
    health_port: int
    kubeconfig: Path
    store: DecisionStore


def write_kubeconfig(path: Path, *, port: int, ca_pem: bytes) -> None:
    """A kubeconfig that makes `kubectl get --raw` work against the demo (TLS verified, no credentials)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "wva-demo",
                "cluster": {
                    "server": f"https://{LOOPBACK}:{port}",
                    "certificate-authority-data": base64.b64encode(ca_pem).decode("ascii"),
                },
            }
        ],
        # Authentication is off in the demo; a token keeps kubectl from prompting for a username.
        "users": [{"name": "wva-demo", "user": {"token": "wva-demo-authentication-is-off"}}],
        "contexts": [{"name": "wva-demo", "context": {"cluster": "wva-demo", "user": "wva-demo"}}],
        "current-context": "wva-demo",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")


def render_table(rows: list[Row], *, virtual_elapsed_s: float) -> str:
    minutes, seconds = divmod(int(virtual_elapsed_s), 60)
    header = f"t=+{minutes:3d}m{seconds:02d}s  {'variant':<16}{'accel':<6}{'cost':>6}{'load rps':>10}{'kv':>6}"
    header += f"{'current':>9}{'ready':>7}{'desired':>9}  reason"
    lines = [header]
    for r in rows:
        lines.append(
            f"{'':13}{r.variant:<16}{r.accelerator:<6}{r.cost:>6.2f}{r.arrival_rps:>10.1f}{r.kv_usage:>6.2f}"
            f"{r.current:>9}{r.ready:>7}{r.desired:>9}  {r.reason}"
        )
    return "\n".join(lines)


async def run_demo(
    options: DemoOptions,
    *,
    out: TextIO = sys.stdout,
    stop: asyncio.Event | None = None,
    on_started: Callable[[DemoEndpoints], None] | None = None,
) -> int:
    scenario = load_scenario(options.scenario) if options.scenario else None
    vas = list(scenario.vas) if scenario else load_vas(options.examples_dir)
    namespace = vas[0].key.namespace
    wall_start_s = time.time()
    mono_start_s = time.monotonic()

    def virtual_now() -> float:
        return wall_start_s + (time.monotonic() - mono_start_s) * options.speed

    store = DecisionStore()
    world = (
        world_from_scenario(scenario, store=store, start_s=wall_start_s, seed=options.seed)
        if scenario
        else DemoWorld(vas, store=store, start_s=wall_start_s, seed=options.seed)
    )
    # The demo records every cycle, like `serve --record-dir`: `wva-adapter explain out/demo/record/cycle-….json`.
    world.recorder = FlightRecorder(options.out_dir / "record", max_bytes=DEMO_RECORD_MAX_BYTES)
    telemetry = Telemetry(store, clock=virtual_now)
    tls = serving_tls(
        cert_file=None,
        key_file=None,
        service="wva-adapter",
        namespace="workload-variant-autoscaler-system",
        directory=options.out_dir / "tls",
    )
    assert tls.ca_pem is not None
    ready = False
    stop = stop or asyncio.Event()
    async with contextlib.AsyncExitStack() as stack:
        https = await start_https_server(
            build_external_metrics_app(store, authenticator=None, authorizer=AllowAll()),
            host=LOOPBACK,
            port=options.secure_port,
            ssl_context=tls.context,
        )
        stack.push_async_callback(https.close)
        keda = await start_keda_server(store, address=f"{LOOPBACK}:{options.grpc_port}")
        stack.push_async_callback(keda.stop)
        metrics = await start_http_server(
            build_telemetry_app(telemetry.registry, ready=lambda: ready, serve_health=False),
            host=LOOPBACK,
            port=options.metrics_port,
        )
        stack.push_async_callback(metrics.stop)
        health = await start_http_server(
            build_telemetry_app(telemetry.registry, ready=lambda: ready, serve_metrics=False),
            host=LOOPBACK,
            port=options.health_port,
        )
        stack.push_async_callback(health.stop)
        kubeconfig = options.out_dir / "kubeconfig"
        write_kubeconfig(kubeconfig, port=https.port, ca_pem=tls.ca_pem)
        _print_banner(
            out,
            options,
            vas_names=[va.key.name for va in vas],
            namespace=namespace,
            ports=(https.port, keda.port, metrics.port, health.port),
            kubeconfig=kubeconfig,
        )
        remove_handlers = stop_on_signals(stop)
        stack.callback(remove_handlers)
        if on_started is not None:
            on_started(DemoEndpoints(https.port, keda.port, metrics.port, health.port, kubeconfig, store))
        deadline = None if options.duration_s <= 0 else time.monotonic() + options.duration_s
        previous: dict[VariantKey, VariantDecision] = {}
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            started = time.perf_counter()
            result = world.step_to(virtual_now())
            if result is not None:
                telemetry.record_cycle(
                    duration_s=time.perf_counter() - started, decisions=result.decisions, previous=previous
                )
                previous = dict(result.decisions)
                ready = True
                print(render_table(world.rows(), virtual_elapsed_s=virtual_now() - wall_start_s), file=out)
                print(file=out, flush=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=options.tick_s)
        print("demo: shutting down", file=out, flush=True)
    return 0


def _print_banner(
    out: TextIO,
    options: DemoOptions,
    *,
    vas_names: list[str],
    namespace: str,
    ports: tuple[int, int, int, int],
    kubeconfig: Path,
) -> None:
    https_port, grpc_port, metrics_port, health_port = ports
    selector = f"variant_name%3D{vas_names[0]}"
    path = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/wva_desired_replicas?labelSelector={selector}"
    print(
        f"wva-adapter demo: simulated fleet of {', '.join(vas_names)} at {options.speed:g}x real time\n"
        f"  External Metrics API  https://{LOOPBACK}:{https_port}   (kubeconfig: {kubeconfig})\n"
        f"  KEDA external scaler  {LOOPBACK}:{grpc_port} (gRPC, externalscaler.ExternalScaler)\n"
        f"  own metrics           http://{LOOPBACK}:{metrics_port}/metrics\n"
        f"  health                http://{LOOPBACK}:{health_port}/healthz  /readyz\n"
        f"Try:\n"
        f"  kubectl --kubeconfig {kubeconfig} get --raw '/apis/external.metrics.k8s.io/v1beta1'\n"
        f"  kubectl --kubeconfig {kubeconfig} get --raw '{path}'\n"
        f"  curl -s http://{LOOPBACK}:{metrics_port}/metrics | grep ^wva_desired\n"
        f"  wva-adapter explain $(ls {kubeconfig.parent}/record/cycle-*.json | tail -1)\n"
        f"Ctrl-C stops it{'' if options.duration_s <= 0 else f' (or after {options.duration_s:g} s)'}.\n",
        file=out,
        flush=True,
    )
