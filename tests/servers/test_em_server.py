"""The External Metrics API over real HTTPS: discovery, values, selectors, errors, caching."""

from __future__ import annotations

import logging
import urllib.parse
from dataclasses import dataclass
from typing import Any

import pytest

from adapter.domain.ids import VariantKey
from adapter.servers.external_metrics import build_external_metrics_app
from adapter.store.decisions import DecisionStore
from tests.servers._em_support import EM_BASE, EM_NS, EM_T0_S, EmFailingReader, em_decision, em_request
from tests.servers.conftest import EmServe, EmServer

METRICS = ["wva_desired_replicas", "wva_current_replicas", "wva_desired_ratio", "wva_recommended_replicas"]


def metric_path(metric: str, selector: str | None = None, namespace: str = EM_NS) -> str:
    path = f"{EM_BASE}/namespaces/{namespace}/{metric}"
    if selector is not None:
        path += "?" + urllib.parse.urlencode({"labelSelector": selector})
    return path


async def get_json(server: EmServer, path: str, *, expect: int = 200, method: str = "GET") -> Any:
    response = await em_request(server.port, path, ca_pem=server.ca_pem, method=method)
    assert response.status == expect, response.text
    return response.json()


def assert_status(document: Any, *, code: int, reason: str, message_part: str = "") -> None:
    assert document["kind"] == "Status"
    assert document["apiVersion"] == "v1"
    assert document["status"] == "Failure"
    assert document["code"] == code
    assert document["reason"] == reason
    assert document["metadata"] == {}
    assert message_part in document["message"]


# --- discovery ---------------------------------------------------------------------------------------------


async def test_api_group_list(em_server: EmServer) -> None:
    version = {"groupVersion": "external.metrics.k8s.io/v1beta1", "version": "v1beta1"}
    assert await get_json(em_server, "/apis") == {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [{"name": "external.metrics.k8s.io", "versions": [version], "preferredVersion": version}],
    }
    assert await get_json(em_server, "/apis/external.metrics.k8s.io") == {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": "external.metrics.k8s.io",
        "versions": [version],
        "preferredVersion": version,
    }


async def test_aggregated_discovery_request_gets_the_legacy_document(em_server: EmServer) -> None:
    """kube-aggregator first asks for apidiscovery v2; a plain APIGroupList with application/json makes it
    fall back to legacy discovery, which is what we support."""
    accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
    response = await em_request(em_server.port, "/apis", ca_pem=em_server.ca_pem, headers=[("Accept", accept)])
    assert response.status == 200
    assert response.content_type == "application/json"
    assert response.json()["kind"] == "APIGroupList"


async def test_api_resource_list_names_every_metric(em_server: EmServer) -> None:
    document = await get_json(em_server, EM_BASE)
    assert document["kind"] == "APIResourceList"
    assert document["apiVersion"] == "v1"
    assert document["groupVersion"] == "external.metrics.k8s.io/v1beta1"
    assert document["resources"] == [
        {"name": m, "singularName": "", "namespaced": True, "kind": "ExternalMetricValueList", "verbs": ["get"]}
        for m in METRICS
    ]


async def test_resource_list_is_never_empty_even_without_decisions(em_serve: EmServe) -> None:
    server = await em_serve(DecisionStore())
    assert len((await get_json(server, EM_BASE))["resources"]) == len(METRICS)


@pytest.mark.parametrize("path", ["/healthz", "/livez", "/readyz"])
async def test_health_endpoints(em_server: EmServer, path: str) -> None:
    response = await em_request(em_server.port, path, ca_pem=em_server.ca_pem)
    assert (response.status, response.text, response.content_type) == (200, "ok", "text/plain")


@pytest.mark.parametrize("path", ["/openapi/v2", "/openapi/v3"])
async def test_openapi_is_404_so_the_aggregator_skips_it(em_server: EmServer, path: str) -> None:
    assert_status(await get_json(em_server, path, expect=404), code=404, reason="NotFound", message_part=path)


# --- values ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ValueCase:
    metric: str
    variant: str
    value: str


VALUE_CASES = [
    ValueCase("wva_desired_replicas", "llama-h100", "3"),
    ValueCase("wva_current_replicas", "llama-h100", "2"),
    ValueCase("wva_desired_ratio", "llama-h100", "1500m"),
    ValueCase("wva_desired_ratio", "llama-a100", "667m"),  # 2/3 rounded up to the milli
    ValueCase("wva_desired_replicas", "llama-l4", "0"),
    ValueCase("wva_desired_ratio", "llama-l4", "0"),
    ValueCase("wva_desired_ratio", "qwen-any", "1"),  # current 0: the ratio is the desired count
    ValueCase("wva_desired_ratio", "qwen-h100", "1"),
]


@pytest.mark.parametrize("case", VALUE_CASES, ids=[f"{c.metric}-{c.variant}" for c in VALUE_CASES])
async def test_value_list(em_server: EmServer, case: ValueCase) -> None:
    document = await get_json(em_server, metric_path(case.metric, f"variant_name={case.variant}"))
    assert document["kind"] == "ExternalMetricValueList"
    assert document["apiVersion"] == "external.metrics.k8s.io/v1beta1"
    assert document["metadata"] == {}
    (item,) = document["items"]
    model = "qwen2-7b" if case.variant.startswith("qwen") else "meta/llama-3.1-8b"
    accelerator = {"llama-h100": "H100", "llama-a100": "A100", "llama-l4": "L4", "qwen-h100": "H100"}
    assert item == {
        "metricName": case.metric,
        "metricLabels": {
            "variant_name": case.variant,
            "model_id": model,
            "accelerator_type": accelerator.get(case.variant, ""),
        },
        "timestamp": "2026-01-01T00:00:00Z",
        "value": case.value,
    }


async def test_hpa_protobuf_accept_header_gets_json(em_server: EmServer) -> None:
    """kube-controller-manager asks for protobuf but accepts `*/*`; client-go decodes by Content-Type."""
    response = await em_request(
        em_server.port,
        metric_path("wva_desired_replicas", "variant_name=llama-h100"),
        ca_pem=em_server.ca_pem,
        headers=[("Accept", "application/vnd.kubernetes.protobuf, */*")],
    )
    assert response.status == 200
    assert response.content_type == "application/json"
    assert [i["value"] for i in response.json()["items"]] == ["3"]


async def test_namespace_scopes_the_answer(em_server: EmServer) -> None:
    other = await get_json(em_server, metric_path("wva_desired_replicas", "variant_name=llama-h100", "other"))
    assert [i["value"] for i in other["items"]] == ["7"]
    mine = await get_json(em_server, metric_path("wva_desired_replicas", "variant_name=llama-h100"))
    assert [i["value"] for i in mine["items"]] == ["3"]


async def test_no_match_is_an_empty_list_not_an_error(em_server: EmServer) -> None:
    """Pinned decision: a known metric with nothing matching answers 200 with `items: []`, like the
    custom-metrics-apiserver reference provider and prometheus-adapter (the HPA reports "no metrics
    returned" either way). Same for a namespace with no VAs at all."""
    for path in (
        metric_path("wva_desired_replicas", "variant_name=does-not-exist"),
        metric_path("wva_desired_replicas", namespace="empty-namespace"),
        metric_path("wva_desired_replicas", "variant_name in (a,b),variant_name=c"),
    ):
        document = await get_json(em_server, path)
        assert document == {
            "kind": "ExternalMetricValueList",
            "apiVersion": "external.metrics.k8s.io/v1beta1",
            "metadata": {},
            "items": [],
        }


@dataclass(frozen=True)
class SelectorCase:
    id: str
    selector: str | None
    variants: list[str]


SELECTOR_CASES = [
    SelectorCase("absent", None, ["llama-a100", "llama-h100", "llama-l4", "qwen-any", "qwen-h100"]),
    SelectorCase("empty", "", ["llama-a100", "llama-h100", "llama-l4", "qwen-any", "qwen-h100"]),
    SelectorCase("equals", "variant_name=llama-a100", ["llama-a100"]),
    SelectorCase("double-equals", "variant_name==llama-a100", ["llama-a100"]),
    SelectorCase("not-equals", "accelerator_type!=H100", ["llama-a100", "llama-l4", "qwen-any"]),
    SelectorCase("in", "variant_name in (qwen-h100,llama-l4,nope)", ["llama-l4", "qwen-h100"]),
    SelectorCase("notin", "accelerator_type notin (H100,A100)", ["llama-l4", "qwen-any"]),
    SelectorCase("exists", "accelerator_type", ["llama-a100", "llama-h100", "llama-l4", "qwen-any", "qwen-h100"]),
    SelectorCase("not-exists", "!tier", ["llama-a100", "llama-h100", "llama-l4", "qwen-any", "qwen-h100"]),
    SelectorCase("not-exists-present", "!model_id", []),
    SelectorCase("model", "model_id=qwen2-7b", ["qwen-any", "qwen-h100"]),
    SelectorCase("empty-accelerator", "accelerator_type=", ["qwen-any"]),
    SelectorCase("and", "model_id=qwen2-7b,accelerator_type=H100", ["qwen-h100"]),
    SelectorCase("pinned-and-filtered", "variant_name in (llama-h100,qwen-h100),model_id=qwen2-7b", ["qwen-h100"]),
    SelectorCase("spaces", " variant_name = llama-h100 ", ["llama-h100"]),
    SelectorCase(
        "keyword-value", "model_id notin (in,notin)", ["llama-a100", "llama-h100", "llama-l4", "qwen-any", "qwen-h100"]
    ),
]


@pytest.mark.parametrize("case", SELECTOR_CASES, ids=[c.id for c in SELECTOR_CASES])
async def test_label_selector_over_http(em_server: EmServer, case: SelectorCase) -> None:
    document = await get_json(em_server, metric_path("wva_desired_replicas", case.selector))
    assert [item["metricLabels"]["variant_name"] for item in document["items"]] == case.variants


INVALID_SELECTORS = [
    ("double-value", "variant_name=a=b", "found '='"),
    ("unclosed-set", "variant_name in (a", "expected: ',' or ')'"),
    ("bad-value", "variant_name=bad$", "value 'bad$'"),
    ("slash-in-value", "model_id=meta/llama-3.1-8b", "value 'meta/llama-3.1-8b'"),
    ("bad-key", "bad key=a", "found 'key' after key 'bad'"),
    ("trailing-comma", "variant_name=a,", "identifier after ','"),
    ("gt-not-int", "variant_name>x", "must be an integer"),
]


@pytest.mark.parametrize(
    ("selector", "message_part"), [c[1:] for c in INVALID_SELECTORS], ids=[c[0] for c in INVALID_SELECTORS]
)
async def test_invalid_selector_is_a_400_status(em_server: EmServer, selector: str, message_part: str) -> None:
    document = await get_json(em_server, metric_path("wva_desired_replicas", selector), expect=400)
    assert_status(document, code=400, reason="BadRequest", message_part=message_part)
    assert selector in document["message"]


# --- errors ------------------------------------------------------------------------------------------------


async def test_unknown_metric_is_a_404_status(em_server: EmServer) -> None:
    document = await get_json(em_server, metric_path("wva_nope", "variant_name=llama-h100"), expect=404)
    assert_status(
        document,
        code=404,
        reason="NotFound",
        message_part="the server could not find the metric wva_nope for external.metrics.k8s.io",
    )


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/api",
        "/apis/other.group/v1",
        f"{EM_BASE}/wva_desired_replicas",  # external metrics are namespaced only
        f"{EM_BASE}/namespaces/{EM_NS}/wva_desired_replicas/llama-h100",
    ],
)
async def test_unknown_paths_are_404_status(em_server: EmServer, path: str) -> None:
    assert_status(
        await get_json(em_server, path, expect=404),
        code=404,
        reason="NotFound",
        message_part="the server could not find the requested resource",
    )


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
@pytest.mark.parametrize("path", ["/apis", EM_BASE, metric_path("wva_desired_replicas")])
async def test_other_verbs_are_405_status(em_server: EmServer, method: str, path: str) -> None:
    response = await em_request(em_server.port, path, ca_pem=em_server.ca_pem, method=method)
    assert response.status == 405
    assert_status(response.json(), code=405, reason="MethodNotAllowed", message_part="does not allow this method")
    assert set(response.headers["Allow"].split(",")) == {"GET", "HEAD"}


async def test_head_is_allowed(em_server: EmServer) -> None:
    response = await em_request(
        em_server.port,
        metric_path("wva_desired_replicas", "variant_name=llama-h100"),
        ca_pem=em_server.ca_pem,
        method="HEAD",
    )
    assert (response.status, response.text) == (200, "")


async def test_unexpected_failure_is_a_500_status_and_logged(
    em_serve: EmServe, caplog: pytest.LogCaptureFixture
) -> None:
    server = await em_serve(EmFailingReader())
    with caplog.at_level(logging.ERROR, logger="adapter.servers.external_metrics"):
        document = await get_json(server, metric_path("wva_desired_replicas", "variant_name=x"), expect=500)
        listing = await get_json(server, metric_path("wva_desired_replicas"), expect=500)
    assert_status(document, code=500, reason="InternalError", message_part="Internal error occurred")
    assert_status(listing, code=500, reason="InternalError")
    assert "injected failure" not in document["message"]  # details go to the log, not to the client
    assert any("injected failure" in (r.exc_text or "") for r in caplog.records)
    # Discovery does not read the store and still works.
    assert (await get_json(server, EM_BASE))["kind"] == "APIResourceList"


# --- freshness of the rendered-body cache ------------------------------------------------------------------


async def test_answers_follow_the_store(em_serve: EmServe) -> None:
    store = DecisionStore()
    store.publish({VariantKey(EM_NS, "a"): em_decision("a", desired=2, current=2)}, now_s=EM_T0_S)
    server = await em_serve(store)
    path = metric_path("wva_desired_replicas", "variant_name=a")
    listing_path = metric_path("wva_desired_replicas")

    async def values(p: str) -> list[tuple[str, str, str]]:
        items = (await get_json(server, p))["items"]
        return [(i["metricLabels"]["variant_name"], i["value"], i["timestamp"]) for i in items]

    assert await values(path) == [("a", "2", "2026-01-01T00:00:00Z")]
    assert await values(path) == [("a", "2", "2026-01-01T00:00:00Z")]  # served from the cache
    # Same value, later decision: the timestamp moves (the store replaced the entry).
    store.publish({VariantKey(EM_NS, "a"): em_decision("a", desired=2, current=2)}, now_s=EM_T0_S + 30)
    assert await values(path) == [("a", "2", "2026-01-01T00:00:30Z")]
    store.publish({VariantKey(EM_NS, "a"): em_decision("a", desired=5, current=2)}, now_s=EM_T0_S + 60)
    assert await values(path) == [("a", "5", "2026-01-01T00:01:00Z")]
    assert await values(listing_path) == [("a", "5", "2026-01-01T00:01:00Z")]
    store.upsert([em_decision("b", desired=1, current=1)], now_s=EM_T0_S + 90)
    assert [v[0] for v in await values(listing_path)] == ["a", "b"]
    store.remove(VariantKey(EM_NS, "a"))
    assert await values(path) == []
    assert [v[0] for v in await values(listing_path)] == ["b"]


class CountingStore(DecisionStore):
    def __init__(self) -> None:
        super().__init__()
        self.lists = 0
        self.gets = 0

    def list(self, namespace: str | None = None) -> list[Any]:
        self.lists += 1
        return super().list(namespace)

    def get(self, key: VariantKey) -> Any:
        self.gets += 1
        return super().get(key)


async def test_body_is_encoded_once_per_write(em_serve: EmServe) -> None:
    """Between two writes of the store a repeated request reads nothing from it: the body encoded at the first
    request is sent as it is; any write (a publish that only refreshes the time included) re-encodes it."""
    store = CountingStore()
    store.publish({VariantKey(EM_NS, "a"): em_decision("a", desired=2, current=2)}, now_s=EM_T0_S)
    server = await em_serve(store)
    path = metric_path("wva_desired_replicas", "variant_name=a")
    for _ in range(5):
        assert (await get_json(server, path))["items"][0]["value"] == "2"
    assert store.gets == 1
    store.publish({VariantKey(EM_NS, "a"): em_decision("a", desired=2, current=2)}, now_s=EM_T0_S + 30)
    for _ in range(3):
        assert (await get_json(server, path))["items"][0]["timestamp"] == "2026-01-01T00:00:30Z"
    assert store.gets == 2


async def test_variant_name_selector_avoids_listing_the_namespace(em_serve: EmServe) -> None:
    """The HPA's `variant_name=<VA>` is answered by key lookups, never by listing every VA."""
    store = CountingStore()
    store.publish({VariantKey(EM_NS, "a"): em_decision("a")}, now_s=EM_T0_S)
    server = await em_serve(store)
    for _ in range(3):
        await get_json(server, metric_path("wva_desired_replicas", "variant_name=a"))
        await get_json(server, metric_path("wva_desired_ratio", "variant_name in (a,b)"))
    assert store.lists == 0
    await get_json(server, metric_path("wva_desired_replicas", "model_id=x"))
    assert store.lists == 1


def test_cache_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="cache_entries"):
        build_external_metrics_app(DecisionStore(), cache_entries=0)


async def test_cache_eviction_keeps_answers_correct(em_serve: EmServe) -> None:
    """With room for one entry, alternating requests evict each other and must still be right."""
    store = DecisionStore()
    store.publish({VariantKey(EM_NS, n): em_decision(n, desired=d) for n, d in (("a", 4), ("b", 6))}, now_s=EM_T0_S)
    server = await em_serve(store, cache_entries=1)
    for index in range(6):
        for name, value in (("a", "4"), ("b", "6")):
            document = await get_json(server, metric_path("wva_desired_replicas", f"variant_name={name},t!=x{index}"))
            assert [i["value"] for i in document["items"]] == [value]


# --- request observer --------------------------------------------------------------------------------------


class StepClock:
    """Each reading is 0.25 s after the previous one, so every observed duration is exactly 0.25 s."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        self.now_s += 0.25
        return self.now_s


async def test_observer_sees_every_request(em_serve: EmServe, em_decisions: DecisionStore) -> None:
    seen: list[tuple[str, int, float]] = []
    server = await em_serve(em_decisions, observer=lambda *event: seen.append(event), clock=StepClock())
    for path, method in (
        (metric_path("wva_desired_replicas", "variant_name=llama-h100"), "GET"),
        (metric_path("wva_nope"), "GET"),
        (metric_path("wva_desired_replicas", "a=b=c"), "GET"),
        (EM_BASE, "GET"),
        ("/apis", "POST"),
        ("/readyz", "GET"),
        ("/openapi/v3", "GET"),
        ("/nowhere", "GET"),
    ):
        await em_request(server.port, path, ca_pem=server.ca_pem, method=method)
    assert seen == [
        ("metric", 200, 0.25),
        ("metric", 404, 0.25),
        ("metric", 400, 0.25),
        ("discovery", 200, 0.25),
        ("other", 405, 0.25),
        ("health", 200, 0.25),
        ("openapi", 404, 0.25),
        ("other", 404, 0.25),
    ]


async def test_a_failing_observer_does_not_fail_requests(
    em_serve: EmServe, em_decisions: DecisionStore, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(endpoint: str, status: int, duration_s: float) -> None:
        raise RuntimeError("observer bug")

    server = await em_serve(em_decisions, observer=broken)
    with caplog.at_level(logging.ERROR, logger="adapter.servers.external_metrics"):
        document = await get_json(server, metric_path("wva_desired_replicas", "variant_name=llama-h100"))
    assert [i["value"] for i in document["items"]] == ["3"]
    assert any("observer failed" in r.getMessage() for r in caplog.records)
