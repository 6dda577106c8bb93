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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from adapter.app.access import build_access, export_access_metrics, follow_certificate, follow_requestheader
from adapter.app.live import (
    ConfigReporter,
    LiveSettings,
    SwitchableMetrics,
    export_config_metrics,
    follow_main_configmap,
)
from adapter.app.signals import stop_on_signals
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
from adapter.servers.tls import serving_tls
from adapter.store import DecisionStore

log = logging.getLogger("wva-adapter")
SERVICE_NAME = "wva-adapter"


def split_address(address: str, *, what: str) -> tuple[str, int]:
    """ ":8080" → ("0.0.0.0", 8080); "127.0.0.1:0" → ("127.0.0.1", 0). Errors name the flag."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"{what}: {address!r} must be [host]:port, e.g. ':8080'")
    return host.strip("[]") or "0.0.0.0", int(port)


def _token(settings: Settings) -> str | None:
    if settings.prometheus_bearer_token:
        return settings.prometheus_bearer_token
    if settings.prometheus_token_path is not None:
        try:
            return settings.prometheus_token_path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"--prometheus-token-path: cannot read {settings.prometheus_token_path}: {exc}") from None
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
) -> int:
    """Run until `stop` (or SIGINT/SIGTERM). `reload(data)` re-resolves the settings with the
    `wva-variantautoscaling-config` ConfigMap as the layer below the config file (flags and env still win)."""
    stop = stop or asyncio.Event()
    restore_signals = stop_on_signals(stop)
    try:
        return await _serve(settings, stop=stop, reload=reload, on_started=on_started)
    finally:
        restore_signals()


async def _serve(
    settings: Settings,
    *,
    stop: asyncio.Event,
    reload: Callable[[Mapping[str, str]], Settings] | None,
    on_started: Callable[[ServeEndpoints], None] | None,
) -> int:
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
        stack.push_async_callback(inventory.stop)
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
        https = await start_https_server(
            build_external_metrics_app(store, authenticator=access.authenticator, authorizer=access.authorizer),
            host=settings.bind_address,
            port=settings.secure_port,
            ssl_context=tls.context,
        )
        stack.push_async_callback(https.close)
        grpc_host, grpc_port = split_address(settings.keda_grpc_address, what="--keda-grpc-address")
        keda = await start_keda_server(store, address=f"{grpc_host}:{grpc_port}")
        stack.push_async_callback(keda.stop)
        metrics_host, metrics_port = split_address(settings.metrics_bind_address, what="--metrics-bind-address")
        metrics = await start_http_server(
            build_telemetry_app(telemetry.registry, ready=lambda: reconciler.ready, serve_health=False),
            host=metrics_host,
            port=metrics_port,
        )
        stack.push_async_callback(metrics.stop)
        health_host, health_port = split_address(settings.health_probe_bind_address, what="--health-probe-bind-address")
        health = await start_http_server(
            build_telemetry_app(telemetry.registry, ready=lambda: reconciler.ready, serve_metrics=False),
            host=health_host,
            port=health_port,
        )
        stack.push_async_callback(health.stop)
        log.info(
            "serving: external metrics https://%s:%d, KEDA %s:%d, metrics :%d, probes :%d; leader election %s",
            settings.bind_address, https.port, grpc_host, keda.port, metrics.port, health.port,
            "on" if elector else "off",
        )  # fmt: skip
        if on_started is not None:
            on_started(ServeEndpoints(https.port, keda.port, metrics.port, health.port, store, reconciler))
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
        return await _supervise(tasks, stop)
    return 0


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
        # Every query: the token-based analyzer reads KV geometry and token lengths, the queueing model arrival
        # rates and latencies. V1-only collection (kv, queue, EPP, request count) costs half at 1,000 VAs
        # (tests/bench_collect.py) but would starve the other analyzers.
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
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return asyncio.run(run_serve(settings, reload=reload))
    except AdapterError as exc:
        log.error("%s", exc)
        return 2


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
