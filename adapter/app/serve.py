"""`wva-adapter serve`: the in-cluster service. Composition only; every part lives in its own package.

    settings ─► KubeClient ─► Inventory (watches) ─┐
                                 StatusWriter ──────┤
                LeaderElector (--leader-elect) ─────┼─► Reconciler ─► DecisionStore ─► HTTPS External Metrics
         PrometheusCollector, EppScraper ───────────┘                              ├─► KEDA gRPC
                                                                                   └─► /metrics, /healthz, /readyz

Each long-running part is a named task; the first one to fail stops the rest and the process exits non-zero,
so Kubernetes restarts it. SIGTERM drains: servers stop, the Lease is released for an immediate hand-over.

Kept current without a restart (`adapter.app.access`, `adapter.app.live`): the front-proxy client CA and allowed
names (`kube-system/extension-apiserver-authentication`), the serving certificate files, and the live settings
of `wva-variantautoscaling-config` (the others are reported as needing a restart). VA status writes go through
`DecisionEvents`, which records Kubernetes Events when a decision changes.

Shutdown is bounded whatever the apiserver, Prometheus or clients do (issue 19: against an apiserver that
accepted connections and never answered, `serve` used to exit 57 s after SIGTERM, its REST timeout, beyond
the Deployment's 30 s grace period):

- a SIGTERM during start-up (waiting on the apiserver for a ConfigMap, say) cancels the start at once;
- once running, the drain has `SHUTDOWN_BUDGET_S`: the Lease release gets `RELEASE_BUDGET_S` of it (one
  read and one write; an apiserver that does not answer by then keeps the Lease until it expires, as after a
  crash), the servers `DRAIN_S` for requests in flight, the watches and the client what is left; whatever
  is still running at the end of the budget is cancelled;
- `run` (the process entry) then exits without waiting for worker threads (a Prometheus query blocked in
  a socket read would otherwise hold the interpreter's exit), and a watchdog ends the process at
  `HARD_DEADLINE_S` after the signal if the event loop itself is stuck.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from adapter.app.access import Access, build_access, export_access_metrics, follow_certificate, follow_requestheader
from adapter.app.live import (
    ConfigReporter,
    LiveSettings,
    SwitchableMetrics,
    export_config_metrics,
    follow_main_configmap,
)
from adapter.app.memory import tune_malloc
from adapter.app.signals import stop_on_signals
from adapter.config.files import MAX_KUBECONFIG_BYTES, MAX_PEM_BYTES, MAX_TOKEN_BYTES, check_file, read_bounded
from adapter.config.settings import MAIN_CONFIGMAP, Settings
from adapter.domain.errors import AdapterError, ConfigError, KubeNotFound
from adapter.k8s.client import KubeClient
from adapter.k8s.events import DecisionEvents, EventRecorder, KubeEventSink
from adapter.k8s.inventory import Inventory, InventoryOptions
from adapter.k8s.leader import LeaderElectionOptions, LeaderElector
from adapter.k8s.resources import CONFIGMAPS
from adapter.k8s.status import StatusWriter
from adapter.metrics.collector import PrometheusCollector
from adapter.metrics.epp import EppScraper
from adapter.metrics.queries import ALL_QUERIES, QueryWindows
from adapter.reconciler.loop import Reconciler, ReconcilerOptions
from adapter.reconciler.ports import AlwaysLeader, Leadership, MetricsSource
from adapter.replay.recorder import FlightRecorder
from adapter.servers.external_metrics import build_external_metrics_app, start_https_server
from adapter.servers.keda import start_keda_server
from adapter.servers.telemetry import Telemetry, build_telemetry_app, start_http_server
from adapter.servers.tls import ServingTLS, serving_tls
from adapter.store import DecisionStore

log = logging.getLogger("wva-adapter")
SERVICE_NAME = "wva-adapter"
SHUTDOWN_BUDGET_S = 4.0
"""From the stop signal to `run_serve` returning (Kubernetes waits terminationGracePeriodSeconds, 30 s)."""
RELEASE_BUDGET_S = 1.5
DRAIN_S = 1.0
"""Requests in flight on the HTTPS, gRPC and telemetry servers get this long to finish."""
HARD_DEADLINE_S = 4.8
"""`run` ends the process this long after the signal even if the event loop never returns."""


def split_address(address: str, *, what: str) -> tuple[str, int]:
    """ ":8080" → ("0.0.0.0", 8080); "127.0.0.1:0" → ("127.0.0.1", 0). Errors name the flag."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"{what}: {address!r} must be [host]:port, e.g. ':8080'")
    return host.strip("[]") or "0.0.0.0", int(port)


def check_files(settings: Settings) -> None:
    """Files that libraries open by path (kubernetes, ssl, requests), checked like every file we read ourselves
    (adapter.config.files): a regular file within its limit, or a ConfigError naming the flag and the file."""
    pem_files = {
        "--tls-cert-file": settings.tls_cert_file,
        "--tls-private-key-file": settings.tls_private_key_file,
        "--prometheus-ca-file": settings.prometheus_ca_file,
        "--prometheus-client-cert": settings.prometheus_client_cert,
        "--prometheus-client-key": settings.prometheus_client_key,
    }
    if settings.kubeconfig is not None:
        check_file(settings.kubeconfig, what="--kubeconfig", max_bytes=MAX_KUBECONFIG_BYTES)
    for flag, path in pem_files.items():
        if path is not None:
            check_file(path, what=flag, max_bytes=MAX_PEM_BYTES)


def _token(settings: Settings) -> str | None:
    if settings.prometheus_bearer_token:
        return settings.prometheus_bearer_token
    if settings.prometheus_token_path is not None:
        data = read_bounded(settings.prometheus_token_path, what="--prometheus-token-path", max_bytes=MAX_TOKEN_BYTES)
        try:
            return data.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise ConfigError(f"--prometheus-token-path {settings.prometheus_token_path}: not UTF-8") from None
    return None


@dataclass(frozen=True, slots=True)
class ServeEndpoints:
    """Where a started `serve` listens (bound ports, so port 0 works) and its store, for tests and logs."""

    https_port: int
    grpc_port: int
    metrics_port: int
    health_port: int
    store: DecisionStore
    reconciler: Reconciler


async def run_serve(
    settings: Settings,
    *,
    stop: asyncio.Event | None = None,
    reload: Callable[[Mapping[str, str]], Settings] | None = None,
    on_started: Callable[[ServeEndpoints], None] | None = None,
    on_stopping: Callable[[], None] | None = None,
    shutdown_budget_s: float = SHUTDOWN_BUDGET_S,
) -> int:
    """Run until `stop` (or SIGINT/SIGTERM). `reload(data)` re-resolves the settings with the
    `wva-variantautoscaling-config` ConfigMap as the layer below the config file (flags and env still win).

    Returns within `shutdown_budget_s` of `stop` (module docstring); `on_stopping()` is called when the stop
    is seen (the process entry arms its watchdog there)."""
    stop = stop or asyncio.Event()
    restore_signals = stop_on_signals(stop)
    running = asyncio.Event()
    serving = asyncio.create_task(
        _serve(settings, stop=stop, reload=reload, on_started=on_started, running=running), name="serve"
    )
    stopping = asyncio.create_task(stop.wait(), name="serve:stop")
    try:
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if serving.done():
            return serving.result()
        if on_stopping is not None:
            on_stopping()
        if not running.is_set():  # still starting (e.g. waiting on the apiserver): nothing to drain
            log.info("stop requested during start-up; cancelling it")
            serving.cancel()
        done, _ = await asyncio.wait({serving}, timeout=shutdown_budget_s)
        if not done:
            log.error("shutdown did not finish within %g s; cancelling what is left", shutdown_budget_s)
            serving.cancel()
            await asyncio.wait({serving}, timeout=0.5)
            return 1
        if serving.cancelled():
            return 0
        return serving.result()
    finally:
        stopping.cancel()
        restore_signals()


async def _serve(
    settings: Settings,
    *,
    stop: asyncio.Event,
    reload: Callable[[Mapping[str, str]], Settings] | None,
    on_started: Callable[[ServeEndpoints], None] | None,
    running: asyncio.Event,
) -> int:
    check_files(settings)
    _token(settings)  # refused (not a regular file, too large) before anything waits on the network
    client = await KubeClient.connect(
        kubeconfig=str(settings.kubeconfig) if settings.kubeconfig else None,
        request_timeout_s=settings.rest_client_timeout_s,
    )
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(client.close)
        main_data: dict[str, str] = {}
        if reload is not None:
            main_data = await _main_configmap(client, settings.controller_namespace)
            settings = reload(main_data)
        if settings.prometheus_url is None:
            raise ConfigError("--prometheus-url (env PROMETHEUS_BASE_URL) is required by serve")
        inventory = Inventory(
            client,
            InventoryOptions(
                controller_namespace=settings.controller_namespace,
                watch_namespace=settings.watch_namespace or None,
            ),
        )
        await inventory.start()
        stack.push_async_callback(inventory.stop, timeout_s=0.5)
        elector = _elector(client, settings)
        leadership: Leadership = elector if elector is not None else AlwaysLeader()
        collector = SwitchableMetrics(_collector(settings), close=_close_collector)
        stack.callback(collector.close)
        epp = EppScraper(bearer_token=settings.epp_bearer_token)
        stack.push_async_callback(epp.close)
        store = DecisionStore()
        telemetry = Telemetry(store)
        events = EventRecorder(KubeEventSink(client), instance=f"{SERVICE_NAME}-{socket.gethostname()}")
        _export_event_metrics(telemetry, events)
        reconciler = Reconciler(
            cluster=inventory,
            metrics=collector,
            epp=epp,
            status=DecisionEvents(
                StatusWriter(client, lookup=inventory.stored_status), events, uid_of=inventory.va_uid
            ),
            leadership=leadership,
            store=store,
            options=_reconciler_options(settings),
            observer=telemetry,
            recorder=_recorder(settings, telemetry),
        )
        live = LiveSettings(
            settings,
            reload or (lambda _data: settings),
            apply_prometheus=lambda new: collector.switch(_collector(new)),
            apply_reconciler=lambda new: reconciler.update_options(_reconciler_options(new)),
            report=(reporter := ConfigReporter(events)),
            data=main_data,
        )
        export_config_metrics(telemetry, live)
        access = await build_access(settings, client)
        tls = serving_tls(
            cert_file=settings.tls_cert_file,
            key_file=settings.tls_private_key_file,
            service=SERVICE_NAME,
            namespace=settings.controller_namespace,
            client_ca_pem=access.client_ca_pem,
            directory=None,  # a fresh temp dir per process (/tmp is an emptyDir in the manifests)
        )
        export_access_metrics(telemetry, access, tls.dynamic)
        servers: list[Callable[[], Awaitable[None]]] = []
        stack.push_async_callback(_stop_all, servers)
        endpoints = await _start_servers(
            settings, servers, store=store, telemetry=telemetry, reconciler=reconciler, access=access, tls=tls
        )
        log.info(
            "serving: external metrics https://%s:%d, KEDA :%d, metrics :%d, probes :%d; leader election %s",
            settings.bind_address, endpoints.https_port, endpoints.grpc_port, endpoints.metrics_port,
            endpoints.health_port, "on" if elector else "off",
        )  # fmt: skip
        if on_started is not None:
            on_started(endpoints)
        tasks: list[Coroutine[Any, Any, None]] = [
            reconciler.run(stop),
            _follow_status(inventory, reconciler, stop),
            _wait(stop),
            events.run(),
            follow_requestheader(client, access, tls.dynamic),
        ]
        if not tls.generated:
            tasks.append(follow_certificate(tls.dynamic))
        if reload is not None:
            tasks.append(follow_main_configmap(client, settings.controller_namespace, live, reporter))
        if elector is not None:
            tasks.append(elector.run())
        running.set()
        return await _supervise(tasks, stop)
    return 0


async def _start_servers(
    settings: Settings,
    servers: list[Callable[[], Awaitable[None]]],
    *,
    store: DecisionStore,
    telemetry: Telemetry,
    reconciler: Reconciler,
    access: Access,
    tls: ServingTLS,
) -> ServeEndpoints:
    """The HTTPS, gRPC, metrics and probe servers; each one's stop is appended to `servers` as soon as it runs
    (the caller stops them all at once, each draining at most DRAIN_S)."""
    https = await start_https_server(
        build_external_metrics_app(store, authenticator=access.authenticator, authorizer=access.authorizer),
        host=settings.bind_address,
        port=settings.secure_port,
        ssl_context=tls.context,
        shutdown_timeout_s=DRAIN_S,
    )
    servers.append(https.close)
    grpc_host, grpc_port = split_address(settings.keda_grpc_address, what="--keda-grpc-address")
    keda = await start_keda_server(store, address=f"{grpc_host}:{grpc_port}")
    servers.append(lambda: keda.stop(DRAIN_S))
    ports = []
    for address, flag, kind in (
        (settings.metrics_bind_address, "--metrics-bind-address", "metrics"),
        (settings.health_probe_bind_address, "--health-probe-bind-address", "health"),
    ):
        host, port = split_address(address, what=flag)
        app = build_telemetry_app(
            telemetry.registry,
            ready=lambda: reconciler.ready,
            serve_health=kind == "health",
            serve_metrics=kind == "metrics",
        )
        server = await start_http_server(app, host=host, port=port, shutdown_timeout_s=DRAIN_S)
        servers.append(server.stop)
        ports.append(server.port)
    return ServeEndpoints(https.port, keda.port, ports[0], ports[1], store, reconciler)


async def _stop_all(servers: list[Callable[[], Awaitable[None]]]) -> None:
    """Stop every server at once, so their drains (each at most DRAIN_S) overlap instead of adding up."""
    results = await asyncio.gather(*(stop() for stop in servers), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            log.error("a server did not stop cleanly: %r", result)


def _elector(client: KubeClient, settings: Settings) -> LeaderElector | None:
    """The Lease candidate with `--leader-elect`; None without (this replica always leads)."""
    if not settings.leader_elect:
        return None
    return LeaderElector(
        client,
        LeaderElectionOptions(
            namespace=settings.controller_namespace,
            name=settings.leader_election_id,
            lease_duration_s=settings.leader_election_lease_duration_s,
            renew_deadline_s=settings.leader_election_renew_deadline_s,
            retry_period_s=settings.leader_election_retry_period_s,
            release_timeout_s=RELEASE_BUDGET_S,
        ),
    )


async def _main_configmap(client: KubeClient, namespace: str) -> dict[str, str]:
    """The data of `wva-variantautoscaling-config` (env-style keys), or {} when it does not exist."""
    try:
        obj = await client.get(CONFIGMAPS, MAIN_CONFIGMAP, namespace=namespace)
    except KubeNotFound:
        return {}
    data = obj.get("data") or {}
    return {str(k): str(v) for k, v in data.items()}


def _collector(settings: Settings) -> PrometheusCollector:
    """The Prometheus collector for `settings` (at start, and again when the live settings change it)."""
    if settings.prometheus_url is None:
        raise ConfigError("--prometheus-url (env PROMETHEUS_BASE_URL) is required by serve")
    return PrometheusCollector(
        settings.prometheus_url,
        timeout_s=settings.prometheus_timeout_s,
        bearer_token=_token(settings),
        ca_file=str(settings.prometheus_ca_file) if settings.prometheus_ca_file else None,
        insecure_skip_verify=settings.prometheus_insecure_skip_verify,
        client_cert=_client_cert(settings),
        compression=settings.prometheus_compression,
        # Every query may be asked: each cycle asks for what its models' decisions read (`engine.reads`, the
        # configured analyzers' fields and the engine's; `queries.reading`), so the ConfigMaps choose the queries.
        metrics=ALL_QUERIES,
        windows=QueryWindows(saturation_s=settings.saturation_window_s),
    )


def _close_collector(source: MetricsSource) -> None:
    if isinstance(source, PrometheusCollector):
        source.close()


def _reconciler_options(settings: Settings) -> ReconcilerOptions:
    return ReconcilerOptions(
        controller_namespace=settings.controller_namespace,
        interval_s=settings.engine_interval_s,
        wake_interval_s=settings.scale_from_zero_interval_s,
        scale_to_zero_env="true" if settings.scale_to_zero else None,
    )


def _export_event_metrics(telemetry: Telemetry, events: EventRecorder) -> None:
    stats = events.stats
    telemetry.add_family(
        "wva_events",
        "Kubernetes Events about decisions, by outcome: created, series (a series' count written), aggregated "
        "(counted into a series without a write), rate_limited, queue_full, failed.",
        kind="counter",
        labelnames=("outcome",),
        read=lambda: {
            ("created",): stats.created,
            ("series",): stats.series_patches,
            ("aggregated",): stats.aggregated,
            ("rate_limited",): stats.rate_limited,
            ("queue_full",): stats.queue_full,
            ("failed",): stats.failed,
        },
    )


def _client_cert(settings: Settings) -> tuple[str, str] | None:
    if settings.prometheus_client_cert is None:
        return None
    if settings.prometheus_client_key is None:
        raise ConfigError("--prometheus-client-cert needs --prometheus-client-key")
    return str(settings.prometheus_client_cert), str(settings.prometheus_client_key)


async def _follow_status(inventory: Inventory, reconciler: Reconciler, stop: asyncio.Event) -> None:
    """Followers re-publish as soon as a watched VA status changes, not only every engine interval."""
    since = inventory.variants_version
    while not stop.is_set():
        changed = await inventory.wait_for_change(1.0, since=since)
        since = inventory.variants_version
        if changed:
            await reconciler.publish_follower()


async def _wait(stop: asyncio.Event) -> None:
    await stop.wait()


async def _supervise(coroutines: list[Coroutine[Any, Any, None]], stop: asyncio.Event) -> int:
    tasks = [asyncio.create_task(c) for c in coroutines]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    stop.set()
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    failures = [t.exception() for t in done if not t.cancelled() and t.exception() is not None]
    for failure in failures:
        log.error("a root task failed: %r", failure)
    return 1 if failures else 0


def run(settings: Settings, *, reload: Callable[[Mapping[str, str]], Settings] | None = None) -> int:
    """The process entry of `serve`: run, then exit without waiting for worker threads (module docstring)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if (why := tune_malloc()) is not None:
        log.info("malloc left as it is: %s", why)
    watchdog = _Watchdog(HARD_DEADLINE_S)
    try:
        code = asyncio.run(run_serve(settings, reload=reload, on_stopping=watchdog.arm))
    except AdapterError as exc:
        log.error("%s", exc)
        code = 2
    watchdog.disarm()
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        # e.g. a Prometheus query blocked in a socket read: the interpreter would join that thread at exit
        log.info("exiting without waiting for %d worker thread(s)", threading.active_count() - 1)
        _exit_now(code)
    return code


def _exit_now(code: int) -> None:
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


class _Watchdog:
    """Ends the process `deadline_s` after `arm()` unless `disarm()` came first: the last resort when the
    event loop itself cannot finish (a callback that never returns, an executor that never drains)."""

    def __init__(self, deadline_s: float) -> None:
        self.deadline_s = deadline_s
        self._timer: threading.Timer | None = None

    def arm(self) -> None:
        if self._timer is None:
            self._timer = threading.Timer(self.deadline_s, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _fire(self) -> None:
        log.error("shutdown did not finish within %g s of the stop signal; exiting now", self.deadline_s)
        _exit_now(1)


def _recorder(settings: Settings, telemetry: Telemetry) -> FlightRecorder | None:
    """The flight recorder when `--record-dir` is set (the leader records; followers decide nothing)."""
    if settings.record_dir is None:
        return None
    return FlightRecorder(
        settings.record_dir,
        max_bytes=settings.record_max_bytes,
        controller_namespace=settings.controller_namespace,
        scale_to_zero_env="true" if settings.scale_to_zero else None,
        on_error=telemetry.record_recorder_error,
        on_written=telemetry.record_recorder_written,
    )
