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
from adapter.sim.scenario import peak_rate_rps
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
    max_step_s: float = 30.0
    """Virtual seconds the world advances in one step at most (one engine interval): a step is then a few
    milliseconds of work, so the loop can look at the clock, the deadline and the signals between steps."""
    max_step_requests: float = 5_000.0
    """Requests one step may simulate at the workload's peak rate: a scenario at 100,000 req/s is stepped
    0.05 virtual seconds at a time, a few tens of milliseconds of work each."""
    busy_fraction: float = 0.8
    """Share of each tick the world may spend stepping; the rest is left to the servers and the signals. When
    the machine cannot keep up with `speed`, the world falls behind the requested pace instead of taking
    ever longer steps (issue 19: at --speed 100000 a single step used to outlast --duration and SIGTERM)."""


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
    store = DecisionStore()
    world = (
        world_from_scenario(scenario, store=store, start_s=wall_start_s, seed=options.seed)
        if scenario
        else DemoWorld(vas, store=store, start_s=wall_start_s, seed=options.seed)
    )
    # The demo records every cycle, like `serve --record-dir`: `wva-adapter explain out/demo/record/cycle-….json`.
    world.recorder = FlightRecorder(options.out_dir / "record", max_bytes=DEMO_RECORD_MAX_BYTES)
    step_s = options.max_step_s
    if scenario is not None:
        step_s = min(step_s, max(0.001, options.max_step_requests / max(peak_rate_rps(scenario), 1e-9)))
    pace = _Pace(world, options, out, start_s=wall_start_s, step_s=step_s)
    telemetry = Telemetry(store, clock=pace.clock)
    pace.telemetry = telemetry
    tls = serving_tls(
        cert_file=None,
        key_file=None,
        service="wva-adapter",
        namespace="workload-variant-autoscaler-system",
        directory=options.out_dir / "tls",
    )
    assert tls.ca_pem is not None
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
            build_telemetry_app(telemetry.registry, ready=lambda: pace.ready, serve_health=False),
            host=LOOPBACK,
            port=options.metrics_port,
        )
        stack.push_async_callback(metrics.stop)
        health = await start_http_server(
            build_telemetry_app(telemetry.registry, ready=lambda: pace.ready, serve_metrics=False),
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

        def running() -> bool:
            return not stop.is_set() and (deadline is None or time.monotonic() < deadline)

        while running():
            await pace.tick(running)
            if not running():
                break
            remaining_s = options.tick_s if deadline is None else min(options.tick_s, deadline - time.monotonic())
            with contextlib.suppress(TimeoutError):  # asyncio.timeout: wait_for can swallow a cancel
                async with asyncio.timeout(max(0.0, remaining_s)):
                    await stop.wait()
        pace.report()
        print("demo: shutting down", file=out, flush=True)
    return 0


class _Pace:
    """Wall time mapped onto the world's virtual clock at `speed`, the world stepped towards it at most
    `max_step_s` at a time and for at most `busy_fraction` of a tick (DemoOptions): when the machine cannot keep
    up, the world falls behind the requested pace instead of taking ever longer steps."""

    def __init__(self, world: DemoWorld, options: DemoOptions, out: TextIO, *, start_s: float, step_s: float) -> None:
        self.world = world
        self.step_s = step_s
        self.options = options
        self.out = out
        self.start_s = start_s
        self.world_now_s = start_s
        """Where the world is: at most `virtual_now()`, behind it when the machine cannot keep up."""
        self.mono_start_s = time.monotonic()
        self.telemetry: Telemetry | None = None
        self.previous: dict[VariantKey, VariantDecision] = {}
        self.ready = False

    def clock(self) -> float:
        return self.world_now_s

    def virtual_now(self) -> float:
        return self.start_s + (time.monotonic() - self.mono_start_s) * self.options.speed

    async def tick(self, running: Callable[[], bool]) -> None:
        options = self.options
        tick_end = time.monotonic() + options.tick_s * options.busy_fraction
        target = self.virtual_now()
        while self.world_now_s < target and running() and time.monotonic() < tick_end:
            self.world_now_s = min(target, self.world_now_s + self.step_s)
            started = time.perf_counter()
            result = self.world.step_to(self.world_now_s)
            if result is not None:
                if self.telemetry is not None:
                    self.telemetry.record_cycle(
                        duration_s=time.perf_counter() - started, decisions=result.decisions, previous=self.previous
                    )
                self.previous = dict(result.decisions)
                self.ready = True
                rows = self.world.rows()
                print(render_table(rows, virtual_elapsed_s=self.world_now_s - self.start_s), file=self.out)
                print(file=self.out, flush=True)
            await asyncio.sleep(0)  # the signal handlers and the servers run between steps

    def report(self) -> None:
        if self.virtual_now() - self.world_now_s > max(self.step_s, 1.0):
            achieved = (self.world_now_s - self.start_s) / max(time.monotonic() - self.mono_start_s, 1e-9)
            print(
                f"demo: the world ran at {achieved:,.0f}x (asked {self.options.speed:g}x): this machine's pace",
                file=self.out,
            )


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
