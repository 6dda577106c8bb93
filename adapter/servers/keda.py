"""KEDA external scaler (`externalscaler.ExternalScaler`, gRPC) answering from the DecisionStore.

Why a scaler of our own: KEDA handles 0↔1 (which the HPA cannot), and reading our decisions directly
removes the Prometheus → prometheus-adapter hop (and its scrape lag) from the scaling path.

Contract (DESIGN §3.5, research k8s-metrics-keda-hpa §3):
- `scalerMetadata` (the trigger's `metadata`, verbatim):
  `variantAutoscaling` — the VA's name (default: the ScaledObject's name);
  `namespace` — the VA's namespace (default: the ScaledObject's namespace);
  `metricName` — `wva_desired_replicas` (default), `wva_current_replicas` or `wva_desired_ratio`.
- `GetMetricSpec` → one MetricSpec, target 1 (int and float), so with KEDA's default `AverageValue` the HPA's
  desired count is the served value. It validates the metadata but does NOT need the VA to exist: a failing
  GetMetricSpec makes KEDA create an HPA without the external metric (kedacore/keda#5787).
- `GetMetrics` → the metric's value (int field rounded, float field exact). `IsActive` → desired > 0.
- `StreamIsActive` → the current activity at once, then one message per change of activity, pushed from
  the store's change notification (no polling). For a VA not (yet) in the store the stream stays open and
  sends as soon as the VA appears, so a ScaledObject created with its VA gets its first push immediately.
- Errors: bad metadata → INVALID_ARGUMENT naming the key; unknown VA → NOT_FOUND naming `namespace/name`;
  `adapter.domain.errors` map by `grpc_status_for`; anything unexpected → INTERNAL (logged), never a crash.
- `StreamMetricSpec` (unreleased in KEDA) → UNIMPLEMENTED: our target never changes, so KEDA's pull path
  (its documented fallback) is exactly right.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
import grpc.aio

from adapter.domain.errors import (
    AdapterError,
    BadRequest,
    ConfigError,
    Forbidden,
    KubeError,
    NotFound,
    ServeError,
    SourceError,
    Unauthorized,
)
from adapter.domain.ids import VariantKey
from adapter.domain.text import quote
from adapter.servers._keda_pb import externalscaler_pb2 as pb2
from adapter.servers._keda_pb import externalscaler_pb2_grpc as pb2_grpc
from adapter.servers.served import DEFAULT_METRIC, ServedMetric
from adapter.store.decisions import DecisionReader, StoredDecision

_log = logging.getLogger(__name__)

# The generated stubs are excluded from mypy (they are generated, not ours), so protobuf messages are `Any`
# here; the tests drive every message through a real client generated from the same proto.
_Message = Any
_Context = grpc.aio.ServicerContext[Any, Any]

META_VARIANT = "variantAutoscaling"
META_NAMESPACE = "namespace"
META_METRIC = "metricName"

TARGET_SIZE = 1
"""The MetricSpec target: with `AverageValue` the HPA's desired count = ceil(served value / 1)."""

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_KEDA_TRIGGER_PREFIX = re.compile(r"s\d+-")
"""KEDA names the HPA metric `s<trigger index>-<metricName>`; it strips the prefix since #2640, older
releases did not, so we strip it too."""


@dataclass(frozen=True, slots=True)
class ScalerTarget:
    """What one ScaledObjectRef asks about: which VA, which value."""

    key: VariantKey
    metric: ServedMetric


def resolve_target(*, name: str, namespace: str, metadata: Mapping[str, object]) -> ScalerTarget:
    """Resolve a ScaledObjectRef to a VA and metric, applying the documented defaults.

    Raises BadRequest naming the offending key (and the value) when a name is empty or not a Kubernetes
    name, a value is not a string, or `metricName` is not one we serve.
    """
    va_name = _metadata_str(metadata, META_VARIANT, default=name, default_from="the ScaledObject's name")
    va_namespace = _metadata_str(
        metadata, META_NAMESPACE, default=namespace, default_from="the ScaledObject's namespace"
    )
    if len(va_name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(va_name):
        raise BadRequest(
            f"scalerMetadata.{META_VARIANT}: {quote(va_name)} is not a VariantAutoscaling name "
            "(lower-case DNS-1123 subdomain, at most 253 characters)"
        )
    if len(va_namespace) > 63 or not _DNS1123_LABEL.fullmatch(va_namespace):
        raise BadRequest(
            f"scalerMetadata.{META_NAMESPACE}: {quote(va_namespace)} is not a namespace name "
            "(lower-case DNS-1123 label, at most 63 characters)"
        )
    metric_text = _metadata_str(metadata, META_METRIC, default=DEFAULT_METRIC.value, default_from="")
    return ScalerTarget(VariantKey(va_namespace, va_name), parse_metric(metric_text, key=META_METRIC))


def parse_metric(text: str, *, key: str) -> ServedMetric:
    """A metric name (optionally with KEDA's `s<N>-` prefix) to a ServedMetric; BadRequest naming `key`."""
    bare = _KEDA_TRIGGER_PREFIX.sub("", text, count=1) if _KEDA_TRIGGER_PREFIX.match(text) else text
    try:
        return ServedMetric(bare)
    except ValueError:
        allowed = ", ".join(m.value for m in ServedMetric)
        raise BadRequest(f"{key}: {quote(text)} is not a metric this scaler serves (one of: {allowed})") from None


def _metadata_str(metadata: Mapping[str, object], key: str, *, default: str, default_from: str) -> str:
    if key not in metadata:
        if not default:
            raise BadRequest(f"scalerMetadata.{key} is not set and {default_from} is empty; set scalerMetadata.{key}")
        return default
    value = metadata[key]
    if not isinstance(value, str):
        raise BadRequest(f"scalerMetadata.{key} must be a string, got {type(value).__name__}")
    if not value:
        raise BadRequest(f"scalerMetadata.{key} is empty; remove it to use the default or set a value")
    return value


_SERVE_CODES: tuple[tuple[type[AdapterError], grpc.StatusCode], ...] = (
    (BadRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (Unauthorized, grpc.StatusCode.UNAUTHENTICATED),
    (Forbidden, grpc.StatusCode.PERMISSION_DENIED),
    (SourceError, grpc.StatusCode.UNAVAILABLE),
    (KubeError, grpc.StatusCode.UNAVAILABLE),
    (ConfigError, grpc.StatusCode.FAILED_PRECONDITION),
    (ServeError, grpc.StatusCode.INTERNAL),
)


def grpc_status_for(error: BaseException) -> grpc.StatusCode:
    """The gRPC status for an error: the request's fault (INVALID_ARGUMENT, NOT_FOUND, UNAUTHENTICATED,
    PERMISSION_DENIED), temporary (UNAVAILABLE, so KEDA retries) or ours (INTERNAL)."""
    for kind, code in _SERVE_CODES:
        if isinstance(error, kind):
            return code
    return grpc.StatusCode.INTERNAL


MAX_DETAILS_CHARS = 1024
"""gRPC sends the status message in a trailer, and trailers are limited (8 KB by default, then the call fails
with RESOURCE_EXHAUSTED instead of our status): our messages quote outside input only as short excerpts, and
this bound holds even if one forgot to."""


async def _abort(context: _Context, error: Exception, *, rpc: str) -> NoReturn:
    code = grpc_status_for(error)
    if isinstance(error, AdapterError):
        details = str(error)
        if len(details) > MAX_DETAILS_CHARS:
            details = details[:MAX_DETAILS_CHARS] + "…"
        _log.debug("KEDA %s: %s: %s", rpc, code.name, details)
    else:
        details = f"internal error in {rpc}: {type(error).__name__}"
        _log.exception("KEDA %s failed", rpc)
    await context.abort(code, details)


class ExternalScalerServicer:
    """The servicer. It reads the store and nothing else; every answer is a dictionary lookup."""

    def __init__(self, reader: DecisionReader) -> None:
        self._reader = reader

    def _lookup(self, target: ScalerTarget) -> StoredDecision:
        stored = self._reader.get(target.key)
        if stored is None:
            raise NotFound(
                f"VariantAutoscaling {target.key} has no decision (unknown VA, or not decided yet); "
                f"check scalerMetadata.{META_VARIANT} and scalerMetadata.{META_NAMESPACE}"
            )
        return stored

    @staticmethod
    def _target(ref: _Message) -> ScalerTarget:
        return resolve_target(name=ref.name, namespace=ref.namespace, metadata=dict(ref.scalerMetadata))

    async def IsActive(self, request: _Message, context: _Context) -> _Message:
        try:
            stored = self._lookup(self._target(request))
            return pb2.IsActiveResponse(result=stored.desired_replicas > 0)
        except Exception as exc:
            await _abort(context, exc, rpc="IsActive")

    async def GetMetricSpec(self, request: _Message, context: _Context) -> _Message:
        try:
            target = self._target(request)
            spec = pb2.MetricSpec(
                metricName=target.metric.value, targetSize=TARGET_SIZE, targetSizeFloat=float(TARGET_SIZE)
            )
            return pb2.GetMetricSpecResponse(metricSpecs=[spec])
        except Exception as exc:
            await _abort(context, exc, rpc="GetMetricSpec")

    async def GetMetrics(self, request: _Message, context: _Context) -> _Message:
        """The request's `metricName` (what GetMetricSpec told KEDA) wins over the metadata's when set."""
        try:
            target = self._target(request.scaledObjectRef)
            requested = request.metricName
            metric = parse_metric(requested, key=META_METRIC) if requested else target.metric
            value = metric.value_of(self._lookup(target).decision)
            if value is None:
                raise NotFound(f"VariantAutoscaling {target.key} has no {metric.value} yet (no recommendation)")
            reply = pb2.MetricValue(
                metricName=requested or metric.value,
                metricValue=round(value),
                metricValueFloat=value,
            )
            return pb2.GetMetricsResponse(metricValues=[reply])
        except Exception as exc:
            await _abort(context, exc, rpc="GetMetrics")

    async def StreamIsActive(self, request: _Message, context: _Context) -> AsyncIterator[_Message]:
        """Level-triggered push: wake on the store's change notification, send only when activity differs
        from what this stream last sent. Several changes between wake-ups coalesce into the latest state."""
        try:
            target = self._target(request)
        except Exception as exc:
            await _abort(context, exc, rpc="StreamIsActive")
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def on_change(keys: frozenset[VariantKey]) -> None:
            # Called on the writer's thread (or on this loop); must not block and must not raise.
            if target.key not in keys:
                return
            # RuntimeError: the loop is closed, so this stream is gone and `finally` unsubscribes.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(wake.set)

        unsubscribe = self._reader.subscribe(on_change)
        last_sent: bool | None = None
        try:
            while True:
                stored = self._reader.get(target.key)
                if stored is not None and (active := stored.desired_replicas > 0) != last_sent:
                    yield pb2.IsActiveResponse(result=active)
                    last_sent = active
                await wake.wait()
                wake.clear()
        except Exception as exc:
            await _abort(context, exc, rpc="StreamIsActive")
        finally:
            unsubscribe()

    async def StreamMetricSpec(self, _request: _Message, context: _Context) -> _Message:
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            "StreamMetricSpec is not implemented: the metric target is always 1; use GetMetricSpec",
        )


@dataclass(frozen=True, slots=True)
class KedaTls:
    """PEM material for the scaler's TLS (the config layer reads the files; servers never do).

    With `client_ca_pem`, clients must present a certificate signed by it (mTLS: KEDA's `tlsClientCert`
    and `tlsClientKey` TriggerAuthentication parameters).
    """

    cert_chain_pem: bytes
    private_key_pem: bytes
    client_ca_pem: bytes | None = None

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.private_key_pem, self.cert_chain_pem)],
            root_certificates=self.client_ca_pem,
            require_client_auth=self.client_ca_pem is not None,
        )


@dataclass(frozen=True, slots=True)
class KedaServer:
    """A started scaler: the grpc.aio server and the port it bound (useful with port 0)."""

    server: grpc.aio.Server
    port: int

    async def stop(self, grace_s: float | None = 5.0) -> None:
        """Stop accepting calls, let unary calls finish for `grace_s`, cancel open streams."""
        await self.server.stop(grace_s)


_SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    # A second process on the same port must fail loudly, not share it (gRPC's Linux default is 1).
    ("grpc.so_reuseport", 0),
    # KEDA keeps one long-lived connection and its streams are idle between flips: ping so a dead peer is
    # noticed and its stream (and store subscription) released.
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    # KEDA's messages are a few hundred bytes and it keeps one stream per ScaledObject: bound what one
    # connection may send and hold (gRPC's defaults: 4 MB messages, no stream limit).
    ("grpc.max_receive_message_length", 1024 * 1024),
    ("grpc.max_concurrent_streams", 1000),
)


async def start_keda_server(reader: DecisionReader, *, address: str, tls: KedaTls | None = None) -> KedaServer:
    """Bind `address` ("host:port"; port 0 picks a free one), start serving, return the handle.

    Raises ConfigError naming the address when it cannot be bound.
    """
    server = grpc.aio.server(options=_SERVER_OPTIONS)
    pb2_grpc.add_ExternalScalerServicer_to_server(ExternalScalerServicer(reader), server)
    try:
        port = (
            server.add_secure_port(address, tls.credentials()) if tls is not None else server.add_insecure_port(address)
        )
    except RuntimeError as exc:
        raise ConfigError(f"keda-grpc-address: cannot bind {address!r}: {exc}") from exc
    if port == 0:
        raise ConfigError(f"keda-grpc-address: cannot bind {address!r}")
    await server.start()
    _log.info("KEDA external scaler listening on %s (port %d, tls=%s)", address, port, tls is not None)
    return KedaServer(server, port)
