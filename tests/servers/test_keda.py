"""The KEDA external scaler, driven over a real grpc.aio server on 127.0.0.1 by a client generated from our proto."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import grpc.aio
import pytest

from adapter.domain import errors
from adapter.domain.ids import VariantKey
from adapter.servers._keda_pb import externalscaler_pb2 as pb2
from adapter.servers._keda_pb import externalscaler_pb2_grpc as pb2_grpc
from adapter.servers.keda import (
    KedaServer,
    KedaTls,
    grpc_status_for,
    resolve_target,
    start_keda_server,
)
from adapter.servers.served import ServedMetric
from adapter.store.decisions import DecisionStore

from ._keda_support import NS, T0_S, CountingReader, Pki, decision, make_pki

PUSH_TIMEOUT_S = 2.0
"""Upper bound for a push to arrive; the design target is 'immediately' (no polling), measured below."""
QUIET_S = 0.3
"""How long we listen to assert that nothing was pushed."""


@pytest.fixture
def keda_store() -> DecisionStore:
    store = DecisionStore()
    store.publish(
        {
            d.key: d
            for d in (
                decision("llama-h100", desired=3, current=2),
                decision("llama-l4", desired=0, current=0, accelerator="L4"),
                decision("llama-a100", desired=3, current=4, accelerator="A100"),
            )
        },
        now_s=T0_S,
    )
    return store


@pytest.fixture
def keda_reader(keda_store: DecisionStore) -> CountingReader:
    return CountingReader(keda_store)


@pytest.fixture
async def keda_server(keda_reader: CountingReader) -> AsyncIterator[KedaServer]:
    server = await start_keda_server(keda_reader, address="127.0.0.1:0")
    try:
        yield server
    finally:
        await server.stop(None)


@pytest.fixture
async def keda_stub(keda_server: KedaServer) -> AsyncIterator[Any]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{keda_server.port}") as channel:
        yield pb2_grpc.ExternalScalerStub(channel)


def ref(name: str = "llama-h100", namespace: str = NS, metadata: dict[str, str] | None = None) -> Any:
    return pb2.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=metadata or {})


async def _rpc_error(awaitable: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await awaitable
    return info.value


# ---------------------------------------------------------------- the contract itself


@pytest.mark.parametrize(
    ("message", "fields"),
    [
        ("ScaledObjectRef", {"name": 1, "namespace": 2, "scalerMetadata": 3}),
        ("IsActiveResponse", {"result": 1}),
        ("GetMetricSpecResponse", {"metricSpecs": 1}),
        ("MetricSpec", {"metricName": 1, "targetSize": 2, "targetSizeFloat": 3}),
        ("GetMetricsRequest", {"scaledObjectRef": 1, "metricName": 2}),
        ("GetMetricsResponse", {"metricValues": 1}),
        ("MetricValue", {"metricName": 1, "metricValue": 2, "metricValueFloat": 3}),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_proto_messages_match_keda_field_numbers(message: str, fields: dict[str, int]) -> None:
    descriptor = pb2.DESCRIPTOR.message_types_by_name[message]
    assert descriptor.full_name == f"externalscaler.{message}"
    assert {f.name: f.number for f in descriptor.fields} == fields


def test_proto_service_is_keda_external_scaler() -> None:
    service = pb2.DESCRIPTOR.services_by_name["ExternalScaler"]
    assert service.full_name == "externalscaler.ExternalScaler"
    methods = {m.name: (m.input_type.name, m.output_type.name, m.server_streaming) for m in service.methods}
    assert methods == {
        "IsActive": ("ScaledObjectRef", "IsActiveResponse", False),
        "StreamIsActive": ("ScaledObjectRef", "IsActiveResponse", True),
        "GetMetricSpec": ("ScaledObjectRef", "GetMetricSpecResponse", False),
        "GetMetrics": ("GetMetricsRequest", "GetMetricsResponse", False),
        "StreamMetricSpec": ("ScaledObjectRef", "GetMetricSpecResponse", True),
    }
    spec = pb2.DESCRIPTOR.message_types_by_name["MetricSpec"].fields_by_name
    assert spec["targetSize"].type == spec["targetSize"].TYPE_INT64
    assert spec["targetSizeFloat"].type == spec["targetSizeFloat"].TYPE_DOUBLE


# ---------------------------------------------------------------- unary calls


@pytest.mark.parametrize(
    ("metadata", "metric_name"),
    [
        ({}, "wva_desired_replicas"),
        ({"metricName": "wva_current_replicas"}, "wva_current_replicas"),
        ({"metricName": "wva_desired_ratio"}, "wva_desired_ratio"),
    ],
    ids=["default", "current", "ratio"],
)
async def test_get_metric_spec_targets_one(keda_stub: Any, metadata: dict[str, str], metric_name: str) -> None:
    reply = await keda_stub.GetMetricSpec(ref(metadata=metadata), timeout=5)
    assert [(s.metricName, s.targetSize, s.targetSizeFloat) for s in reply.metricSpecs] == [(metric_name, 1, 1.0)]


async def test_get_metric_spec_does_not_need_the_va(keda_stub: Any) -> None:
    """KEDA builds the HPA from GetMetricSpec; failing it for a VA not decided yet breaks the HPA (#5787)."""
    reply = await keda_stub.GetMetricSpec(ref("not-decided-yet"), timeout=5)
    assert len(reply.metricSpecs) == 1


@pytest.mark.parametrize(
    ("metadata", "request_metric", "int_value", "float_value"),
    [
        ({}, "", 3, 3.0),
        ({}, "wva_desired_replicas", 3, 3.0),
        ({"metricName": "wva_current_replicas"}, "", 2, 2.0),
        ({"metricName": "wva_desired_ratio"}, "", 2, 1.5),
        ({}, "wva_current_replicas", 2, 2.0),
        ({}, "s0-wva_desired_ratio", 2, 1.5),
    ],
    ids=["default", "explicit", "current-by-metadata", "ratio", "request-name-wins", "old-keda-prefix"],
)
async def test_get_metrics_values(
    keda_stub: Any, metadata: dict[str, str], request_metric: str, int_value: int, float_value: float
) -> None:
    reply = await keda_stub.GetMetrics(
        pb2.GetMetricsRequest(scaledObjectRef=ref(metadata=metadata), metricName=request_metric), timeout=5
    )
    [value] = reply.metricValues
    assert (value.metricValue, value.metricValueFloat) == (int_value, pytest.approx(float_value))
    assert value.metricName == (request_metric or metadata.get("metricName", "wva_desired_replicas"))


@pytest.mark.parametrize(
    ("name", "active"), [("llama-h100", True), ("llama-l4", False)], ids=["desired-3", "desired-0"]
)
async def test_is_active_means_desired_above_zero(keda_stub: Any, name: str, active: bool) -> None:
    assert (await keda_stub.IsActive(ref(name), timeout=5)).result is active


@pytest.mark.parametrize(
    ("ref_name", "ref_namespace", "metadata", "expected"),
    [
        ("llama-h100", NS, {}, VariantKey(NS, "llama-h100")),
        ("so-name", NS, {"variantAutoscaling": "llama-h100"}, VariantKey(NS, "llama-h100")),
        ("llama-h100", "keda", {"namespace": NS}, VariantKey(NS, "llama-h100")),
        ("so", "keda", {"variantAutoscaling": "llama-l4", "namespace": NS}, VariantKey(NS, "llama-l4")),
    ],
    ids=["all-defaults", "va-from-metadata", "namespace-from-metadata", "both-from-metadata"],
)
async def test_default_metadata_resolution(
    keda_stub: Any, ref_name: str, ref_namespace: str, metadata: dict[str, str], expected: VariantKey
) -> None:
    assert resolve_target(name=ref_name, namespace=ref_namespace, metadata=metadata).key == expected
    # And the server answers for that VA (the store holds it in NS only).
    reply = await keda_stub.GetMetrics(
        pb2.GetMetricsRequest(scaledObjectRef=ref(ref_name, ref_namespace, metadata)), timeout=5
    )
    assert reply.metricValues[0].metricValue == (3 if expected.name == "llama-h100" else 0)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("rpc", ["IsActive", "GetMetrics"])
async def test_unknown_va_is_not_found(keda_stub: Any, rpc: str) -> None:
    request = ref("no-such-va")
    call = (
        keda_stub.IsActive(request, timeout=5)
        if rpc == "IsActive"
        else keda_stub.GetMetrics(pb2.GetMetricsRequest(scaledObjectRef=request), timeout=5)
    )
    error = await _rpc_error(call)
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert f"{NS}/no-such-va" in (error.details() or "")


@pytest.mark.parametrize(
    ("ref_name", "metadata", "key_in_message"),
    [
        ("llama-h100", {"variantAutoscaling": ""}, "variantAutoscaling"),
        ("", {}, "variantAutoscaling"),
        ("llama-h100", {"variantAutoscaling": "Llama_H100"}, "variantAutoscaling"),
        ("llama-h100", {"namespace": ""}, "namespace"),
        ("llama-h100", {"namespace": "not/a/namespace"}, "namespace"),
        ("llama-h100", {"metricName": "vllm:kv_cache_usage_perc"}, "metricName"),
        ("llama-h100", {"metricName": ""}, "metricName"),
    ],
    ids=[
        "empty-va",
        "no-va-and-empty-ref-name",
        "va-not-a-k8s-name",
        "empty-namespace",
        "bad-namespace",
        "unknown-metric",
        "empty-metric",
    ],
)
@pytest.mark.parametrize("rpc", ["IsActive", "GetMetricSpec", "GetMetrics", "StreamIsActive"])
async def test_bad_metadata_is_invalid_argument(
    keda_stub: Any, rpc: str, ref_name: str, metadata: dict[str, str], key_in_message: str
) -> None:
    request = ref(ref_name, metadata=metadata)
    if rpc == "GetMetrics":
        error = await _rpc_error(keda_stub.GetMetrics(pb2.GetMetricsRequest(scaledObjectRef=request), timeout=5))
    elif rpc == "StreamIsActive":
        error = await _rpc_error(keda_stub.StreamIsActive(request, timeout=5).read())
    else:
        error = await _rpc_error(getattr(keda_stub, rpc)(request, timeout=5))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert key_in_message in (error.details() or "")


async def test_unknown_request_metric_name_is_invalid_argument(keda_stub: Any) -> None:
    error = await _rpc_error(
        keda_stub.GetMetrics(pb2.GetMetricsRequest(scaledObjectRef=ref(), metricName="cpu"), timeout=5)
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "metricName" in (error.details() or "")
    assert "'cpu'" in (error.details() or "")


@pytest.mark.parametrize(
    ("metadata", "key"),
    [({"variantAutoscaling": 7}, "variantAutoscaling"), ({"namespace": None}, "namespace")],
    ids=["int-va", "none-namespace"],
)
def test_non_string_metadata_is_bad_request(metadata: dict[str, object], key: str) -> None:
    """The proto map only carries strings; the resolver still refuses anything else by key."""
    with pytest.raises(errors.BadRequest, match=f"scalerMetadata.{key} must be a string"):
        resolve_target(name="x", namespace=NS, metadata=metadata)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.BadRequest("x"), grpc.StatusCode.INVALID_ARGUMENT),
        (errors.NotFound("x"), grpc.StatusCode.NOT_FOUND),
        (errors.Unauthorized("x"), grpc.StatusCode.UNAUTHENTICATED),
        (errors.Forbidden("x"), grpc.StatusCode.PERMISSION_DENIED),
        (errors.PrometheusUnavailable("x"), grpc.StatusCode.UNAVAILABLE),
        (errors.KubeConflict("x"), grpc.StatusCode.UNAVAILABLE),
        (errors.ConfigError("x"), grpc.StatusCode.FAILED_PRECONDITION),
        (errors.ServeError("x"), grpc.StatusCode.INTERNAL),
        (errors.ModelError("x"), grpc.StatusCode.INTERNAL),
        (RuntimeError("x"), grpc.StatusCode.INTERNAL),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else v.name,
)
def test_domain_errors_map_to_grpc_codes(error: Exception, code: grpc.StatusCode) -> None:
    assert grpc_status_for(error) is code


async def test_unexpected_failure_is_internal_and_server_keeps_serving(
    keda_stub: Any, keda_reader: CountingReader
) -> None:
    keda_reader.fail_reads = True
    error = await _rpc_error(keda_stub.IsActive(ref(), timeout=5))
    assert error.code() == grpc.StatusCode.INTERNAL
    assert "IsActive" in (error.details() or "")
    stream_error = await _rpc_error(keda_stub.StreamIsActive(ref(), timeout=5).read())
    assert stream_error.code() == grpc.StatusCode.INTERNAL
    keda_reader.fail_reads = False
    assert (await keda_stub.IsActive(ref(), timeout=5)).result is True
    assert keda_reader.active_subscriptions == 0


async def test_stream_metric_spec_is_unimplemented(keda_stub: Any) -> None:
    """KEDA treats UNIMPLEMENTED as 'fall back to polling GetMetricSpec', which is what we want."""
    error = await _rpc_error(keda_stub.StreamMetricSpec(ref(), timeout=5).read())
    assert error.code() == grpc.StatusCode.UNIMPLEMENTED


# ---------------------------------------------------------------- StreamIsActive


@asynccontextmanager
async def _stream(stub: Any, request: Any) -> AsyncIterator[asyncio.Queue[Any]]:
    """Open StreamIsActive and pump its messages into a queue (waiting on a queue is cancellation-safe;
    cancelling a pending `call.read()` is not)."""
    call = stub.StreamIsActive(request)
    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def pump() -> None:
        async for message in call:
            await queue.put(message)

    task = asyncio.create_task(pump())
    try:
        yield queue
    finally:
        call.cancel()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _next(queue: asyncio.Queue[Any]) -> tuple[bool, float]:
    """The next pushed activity and how long it took to arrive (bounded)."""
    start = time.monotonic()
    message = await asyncio.wait_for(queue.get(), PUSH_TIMEOUT_S)
    return message.result, time.monotonic() - start


async def _assert_quiet(queue: asyncio.Queue[Any]) -> None:
    await asyncio.sleep(QUIET_S)
    assert queue.empty(), f"unexpected push: {queue.get_nowait()}"


async def _wait_for(condition: Any, timeout_s: float = PUSH_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_stream_sends_current_activity_then_pushes_only_flips(
    keda_stub: Any, keda_store: DecisionStore, keda_reader: CountingReader
) -> None:
    async with _stream(keda_stub, ref("llama-l4")) as queue:
        assert (await _next(queue))[0] is False
        await _wait_for(lambda: keda_reader.active_subscriptions == 1)

        keda_store.upsert([decision("llama-l4", desired=2, current=0)], now_s=T0_S + 30)  # 0 -> 2: flip
        active, latency_s = await _next(queue)
        assert active is True
        assert latency_s < 0.5, f"push took {latency_s:.3f}s; it must not wait for a poll"

        keda_store.upsert([decision("llama-l4", desired=5, current=2)], now_s=T0_S + 60)  # 2 -> 5: no flip
        keda_store.upsert([decision("llama-h100", desired=0, current=3)], now_s=T0_S + 60)  # another VA
        await _assert_quiet(queue)

        keda_store.upsert([decision("llama-l4", desired=0, current=5)], now_s=T0_S + 90)  # 5 -> 0: flip
        assert (await _next(queue))[0] is False
    await _wait_for(lambda: keda_reader.active_subscriptions == 0)


async def test_stream_push_from_another_thread(keda_stub: Any, keda_store: DecisionStore) -> None:
    """The reconciler may publish from a worker thread; the listener bridges with call_soon_threadsafe."""
    async with _stream(keda_stub, ref("llama-l4")) as queue:
        assert (await _next(queue))[0] is False
        await asyncio.to_thread(keda_store.upsert, [decision("llama-l4", desired=1, current=0)], now_s=T0_S)
        assert (await _next(queue))[0] is True


async def test_stream_for_undecided_va_waits_then_pushes(keda_stub: Any, keda_store: DecisionStore) -> None:
    async with _stream(keda_stub, ref("new-va")) as queue:
        await _assert_quiet(queue)
        keda_store.upsert([decision("new-va", desired=1, current=0)], now_s=T0_S)
        assert (await _next(queue))[0] is True
        keda_store.remove(VariantKey(NS, "new-va"))
        await _assert_quiet(queue)


async def test_publish_removing_va_then_readding_same_activity_is_quiet(
    keda_stub: Any, keda_store: DecisionStore
) -> None:
    async with _stream(keda_stub, ref("llama-h100")) as queue:
        assert (await _next(queue))[0] is True
        keda_store.publish({}, now_s=T0_S + 30)
        keda_store.upsert([decision("llama-h100", desired=4, current=3)], now_s=T0_S + 60)
        await _assert_quiet(queue)


async def test_server_stop_ends_streams_and_unsubscribes(keda_store: DecisionStore) -> None:
    reader = CountingReader(keda_store)
    server = await start_keda_server(reader, address="127.0.0.1:0")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            call = pb2_grpc.ExternalScalerStub(channel).StreamIsActive(ref())
            assert (await asyncio.wait_for(call.read(), PUSH_TIMEOUT_S)).result is True
            assert reader.active_subscriptions == 1
            await server.stop(0)
            await _wait_for(lambda: reader.active_subscriptions == 0)
            with pytest.raises(grpc.aio.AioRpcError):
                await asyncio.wait_for(call.read(), PUSH_TIMEOUT_S)
    finally:
        await server.stop(None)


# ---------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def keda_pki() -> Pki:
    return make_pki()


@asynccontextmanager
async def _tls_server(store: DecisionStore, tls: KedaTls) -> AsyncIterator[KedaServer]:
    server = await start_keda_server(store, address="127.0.0.1:0", tls=tls)
    try:
        yield server
    finally:
        await server.stop(None)


def _client_credentials(pki: Pki, *, client_cert: bool = False, rogue: bool = False) -> grpc.ChannelCredentials:
    if rogue:
        return grpc.ssl_channel_credentials(pki.ca_pem, pki.rogue_client_key_pem, pki.rogue_client_cert_pem)
    if client_cert:
        return grpc.ssl_channel_credentials(pki.ca_pem, pki.client_key_pem, pki.client_cert_pem)
    return grpc.ssl_channel_credentials(pki.ca_pem)


@pytest.mark.parametrize(
    ("mtls", "client", "ok"),
    [
        (False, "none", True),
        (True, "signed", True),
        (True, "none", False),
        (True, "rogue", False),
    ],
    ids=["tls", "mtls-signed-client", "mtls-no-client-cert", "mtls-foreign-client-cert"],
)
async def test_tls_and_mtls(keda_store: DecisionStore, keda_pki: Pki, mtls: bool, client: str, ok: bool) -> None:
    tls = KedaTls(
        cert_chain_pem=keda_pki.server_cert_pem,
        private_key_pem=keda_pki.server_key_pem,
        client_ca_pem=keda_pki.client_ca_pem if mtls else None,
    )
    credentials = _client_credentials(keda_pki, client_cert=client == "signed", rogue=client == "rogue")
    async with (
        _tls_server(keda_store, tls) as server,
        grpc.aio.secure_channel(f"127.0.0.1:{server.port}", credentials) as channel,
    ):
        stub = pb2_grpc.ExternalScalerStub(channel)
        if ok:
            assert (await stub.IsActive(ref(), timeout=5)).result is True
        else:
            error = await _rpc_error(stub.IsActive(ref(), timeout=5))
            assert error.code() == grpc.StatusCode.UNAVAILABLE


async def test_tls_server_refuses_plaintext(keda_store: DecisionStore, keda_pki: Pki) -> None:
    tls = KedaTls(cert_chain_pem=keda_pki.server_cert_pem, private_key_pem=keda_pki.server_key_pem)
    async with (
        _tls_server(keda_store, tls) as server,
        grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
    ):
        error = await _rpc_error(pb2_grpc.ExternalScalerStub(channel).IsActive(ref(), timeout=5))
        assert error.code() == grpc.StatusCode.UNAVAILABLE


async def test_bind_failure_names_the_address(keda_server: KedaServer) -> None:
    with pytest.raises(errors.ConfigError, match="keda-grpc-address"):
        await start_keda_server(DecisionStore(), address=f"127.0.0.1:{keda_server.port}")


def test_metric_values_follow_the_decision(keda_store: DecisionStore) -> None:
    stored = keda_store.get(VariantKey(NS, "llama-a100"))
    assert stored is not None
    values = {m: m.value_of(stored.decision) for m in ServedMetric}
    assert values == {
        ServedMetric.DESIRED_REPLICAS: 3.0,
        ServedMetric.CURRENT_REPLICAS: 4.0,
        ServedMetric.DESIRED_RATIO: 0.75,
        ServedMetric.RECOMMENDED_REPLICAS: None,  # no recommendation yet: not a value
    }


# ---------------------------------------------------------------- hostile metadata (issue 19)


@pytest.mark.parametrize(
    ("metadata", "key"),
    [
        pytest.param({"variantAutoscaling": "a" * 10_000}, "variantAutoscaling", id="10kB-name"),
        pytest.param({"variantAutoscaling": "a" * 17_000}, "variantAutoscaling", id="17kB-name"),
        pytest.param({"variantAutoscaling": "x\x1b[31m\n\u202e" * 2_000}, "variantAutoscaling", id="escapes"),
        pytest.param({"namespace": "N" * 50_000}, "namespace", id="50kB-namespace"),
        pytest.param({"metricName": "m" * 100_000}, "metricName", id="100kB-metric"),
    ],
)
async def test_oversized_or_hostile_metadata_is_a_short_invalid_argument(
    keda_stub: Any, metadata: dict[str, str], key: str
) -> None:
    """The message quotes a short escaped excerpt: at 17 kB a message repeating the value used to exceed gRPC's
    trailer limit and arrive as RESOURCE_EXHAUSTED instead of our INVALID_ARGUMENT."""
    error = await _rpc_error(keda_stub.GetMetricSpec(ref(metadata=metadata), timeout=5))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = error.details() or ""
    assert key in details
    assert len(details) < 300
    assert details.isprintable()
