"""KubeClient against the fake API server: configuration, verbs, pagination, watch streams, error mapping."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from adapter.domain.errors import ConfigError, KubeConflict, KubeError, KubeGone, KubeNotFound
from adapter.k8s import resources as r
from adapter.k8s.client import JSON_PATCH, KubeAuthError, KubeClient, KubeInvalid, KubeUnavailable, WatchEvent
from tests.k8s.builders import NS, configmap, pod
from tests.k8s.conftest import eventually
from tests.k8s.fake_apiserver import FakeApiServer


async def test_connect_from_kubeconfig_sends_the_bearer_token(fake_api: FakeApiServer, kube: KubeClient) -> None:
    assert kube.host == fake_api.url
    fake_api.put(r.CONFIGMAPS, configmap("a", namespace=NS, data={"k": "v"}))
    got = await kube.get(r.CONFIGMAPS, "a", namespace=NS)
    assert got["data"] == {"k": "v"}
    assert fake_api.log[-1].path == f"/api/v1/namespaces/{NS}/configmaps/a"


async def test_wrong_token_is_an_auth_error(fake_api: FakeApiServer, tmp_path: Path) -> None:
    path = fake_api.write_kubeconfig(tmp_path / "bad", token="wrong")
    async with await KubeClient.connect(kubeconfig=str(path)) as client:
        with pytest.raises(KubeAuthError) as info:
            await client.list(r.PODS)
    assert info.value.status == 401


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (400, KubeInvalid),
        (401, KubeAuthError),
        (403, KubeAuthError),
        (404, KubeNotFound),
        (409, KubeConflict),
        (410, KubeGone),
        (422, KubeInvalid),
        (429, KubeUnavailable),
        (500, KubeUnavailable),
        (503, KubeUnavailable),
    ],
    ids=lambda v: str(v) if isinstance(v, int) else v.__name__,
)
async def test_http_status_maps_to_our_error(
    fake_api: FakeApiServer, kube: KubeClient, status: int, expected: type[KubeError]
) -> None:
    fake_api.fail(method="GET", status=status)
    with pytest.raises(expected) as info:
        await kube.get(r.CONFIGMAPS, "anything", namespace=NS)
    assert isinstance(info.value, KubeError)
    assert f"HTTP {status}" in str(info.value)
    assert "injected fault" in str(info.value)  # the Status message travels with the error
    assert info.value.__cause__ is not None  # raised `from` the library's ApiException


async def test_not_found_object_and_unserved_collection(fake_api: FakeApiServer, kube: KubeClient) -> None:
    with pytest.raises(KubeNotFound, match='configmaps "missing" not found'):
        await kube.get(r.CONFIGMAPS, "missing", namespace=NS)
    fake_api.unserve(r.LEADERWORKERSETS)
    with pytest.raises(KubeNotFound):
        await kube.list(r.LEADERWORKERSETS)


@pytest.mark.parametrize("how", ["refused", "dropped"])
async def test_transport_failures_are_unavailable(fake_api: FakeApiServer, kube: KubeClient, how: str) -> None:
    if how == "refused":
        await fake_api.stop()
    else:
        fake_api.fail(drop=True, times=None)  # aiohttp retries an idempotent request once by itself
    with pytest.raises(KubeUnavailable) as info:
        await kube.list(r.PODS)
    assert info.value.status == 0
    if how == "dropped":
        assert fake_api.count() == 2


async def test_list_follows_continue_tokens(fake_api: FakeApiServer, kube: KubeClient) -> None:
    for i in range(5):
        fake_api.put(r.PODS, pod(f"p{i}"))
    since = len(fake_api.log)
    listed = await kube.list(r.PODS, page_size=2)
    assert [p["metadata"]["name"] for p in listed.items] == [f"p{i}" for i in range(5)]
    assert listed.resource_version == str(fake_api.rv)
    assert fake_api.count(path_contains="/pods", since=since) == 3
    assert all(item["kind"] == "Pod" and item["apiVersion"] == "v1" for item in listed.items)


async def test_list_with_an_expired_continue_token_is_gone(fake_api: FakeApiServer, kube: KubeClient) -> None:
    for i in range(3):
        fake_api.put(r.PODS, pod(f"p{i}"))
    fake_api.compacted[(r.PODS.group, r.PODS.version, r.PODS.plural)] = fake_api.rv + 1
    with pytest.raises(KubeGone):
        await kube.list(r.PODS, page_size=2)


async def test_label_selector_reaches_the_server_encoded(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.put(r.CONFIGMAPS, configmap("yes", namespace=NS, data={}))
    fake_api.put(r.CONFIGMAPS, configmap("no", namespace=NS, data={}, labels={}))
    listed = await kube.list(r.CONFIGMAPS, label_selector="app.kubernetes.io/name=workload-variant-autoscaler")
    assert [c["metadata"]["name"] for c in listed.items] == ["yes"]
    assert fake_api.log[-1].query["labelSelector"] == "app.kubernetes.io/name=workload-variant-autoscaler"


async def test_create_replace_patch_and_conflicts(fake_api: FakeApiServer, kube: KubeClient) -> None:
    created = await kube.create(r.CONFIGMAPS, configmap("c", namespace=NS, data={"a": "1"}), namespace=NS)
    with pytest.raises(KubeConflict, match="already exists"):
        await kube.create(r.CONFIGMAPS, configmap("c", namespace=NS, data={}), namespace=NS)
    stale_rv = created["metadata"]["resourceVersion"]
    updated = await kube.replace(r.CONFIGMAPS, "c", {**created, "data": {"a": "2"}}, namespace=NS)
    assert updated["metadata"]["resourceVersion"] != stale_rv
    with pytest.raises(KubeConflict, match="has been modified"):
        await kube.replace(r.CONFIGMAPS, "c", {**created, "data": {"a": "3"}}, namespace=NS)
    patched = await kube.patch(r.CONFIGMAPS, "c", {"data": {"b": "x", "a": None}}, namespace=NS)
    assert patched["data"] == {"b": "x"}
    assert fake_api.log[-1].content_type == "application/merge-patch+json"
    fake_api.fail(method="PATCH", status=415)
    with pytest.raises(KubeUnavailable):
        await kube.patch(
            r.CONFIGMAPS, "c", [{"op": "add", "path": "/data/z", "value": "1"}], namespace=NS, content_type=JSON_PATCH
        )
    assert fake_api.log[-1].content_type == JSON_PATCH
    assert fake_api.log[-1].body == [{"op": "add", "path": "/data/z", "value": "1"}]


async def _collect(kube: KubeClient, rv: str, *, n: int, timeout_s: float = 5.0) -> list[WatchEvent]:
    """Up to `n` events of a pods watch from `rv`; stops early when the server ends the stream."""
    events: list[WatchEvent] = []
    async with asyncio.timeout(timeout_s):
        async with contextlib.aclosing(kube.watch(r.PODS, resource_version=rv, namespace=NS)) as stream:
            async for event in stream:
                events.append(event)
                if len(events) == n:
                    break
    return events


async def test_watch_streams_every_event_type(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.put(r.PODS, pod("a"))
    rv = str(fake_api.rv)
    fake_api.put(r.PODS, pod("b"))
    fake_api.put(r.PODS, pod("a", ready=False))
    fake_api.delete(r.PODS, NS, "b")
    fake_api.bookmark(r.PODS)
    events = []
    async with contextlib.aclosing(kube.watch(r.PODS, resource_version=rv, namespace=NS)) as stream:
        async for event in stream:
            events.append(event)
            if len(events) == 3:
                fake_api.bookmark(r.PODS)
            if len(events) == 4:
                break
    assert [e.type for e in events] == ["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
    assert [e.object["metadata"].get("name") for e in events[:3]] == ["b", "a", "b"]
    assert events[-1].resource_version == str(fake_api.rv)
    query = next(e for e in reversed(fake_api.log) if e.watch).query
    assert query["resourceVersion"] == rv
    assert query["allowWatchBookmarks"] == "true"
    await eventually(lambda: fake_api.watch_count(r.PODS) == 0, what="the server to see the watch closed")


async def test_watch_error_event_410_raises_gone(fake_api: FakeApiServer, kube: KubeClient) -> None:
    before = str(fake_api.rv)
    fake_api.put(r.PODS, pod("a"))
    fake_api.expire(r.PODS)
    with pytest.raises(KubeGone, match="too old resource version"):
        await _collect(kube, before, n=1)


async def test_watch_error_event_mid_stream(fake_api: FakeApiServer, kube: KubeClient) -> None:
    task = asyncio.create_task(_collect(kube, str(fake_api.rv), n=10))
    await eventually(lambda: fake_api.watch_count(r.PODS) == 1, what="watch registered")
    fake_api.put(r.PODS, pod("a"))
    fake_api.expire(r.PODS)
    with pytest.raises(KubeGone):
        await task


async def test_watch_ends_when_the_server_closes_the_stream(fake_api: FakeApiServer, kube: KubeClient) -> None:
    task = asyncio.create_task(_collect(kube, str(fake_api.rv), n=10))
    await eventually(lambda: fake_api.watch_count(r.PODS) == 1, what="watch registered")
    fake_api.put(r.PODS, pod("a"))
    fake_api.close_watches(r.PODS)
    events = await task
    assert [e.type for e in events] == ["ADDED"]


async def test_dropped_watch_connection_is_unavailable(fake_api: FakeApiServer, kube: KubeClient) -> None:
    task = asyncio.create_task(_collect(kube, str(fake_api.rv), n=10))
    await eventually(lambda: fake_api.watch_count(r.PODS) == 1, what="watch registered")
    fake_api.put(r.PODS, pod("a"))
    await asyncio.sleep(0.05)
    fake_api.drop_watches(r.PODS)
    with pytest.raises(KubeUnavailable):
        await task


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (b"not json\n", "malformed watch event"),
        (b'{"type": "ODD", "object": {}}\n', "unknown watch event type"),
        (b'{"type": "ERROR", "object": {"code": 500, "message": "etcd down"}}\n', "etcd down"),
    ],
    ids=["not-json", "unknown-type", "error-500"],
)
async def test_malformed_watch_lines(fake_api: FakeApiServer, kube: KubeClient, line: bytes, error: str) -> None:
    fake_api.raw_watch_lines = [line]
    with pytest.raises(KubeUnavailable, match=error):
        await _collect(kube, str(fake_api.rv), n=1)


async def test_connect_errors_name_the_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="nope"):
        await KubeClient.connect(kubeconfig=str(tmp_path / "nope"))
    bad = tmp_path / "bad"
    bad.write_text("{not: [valid")
    with pytest.raises(ConfigError, match="bad"):
        await KubeClient.connect(kubeconfig=str(bad))
    import kubernetes.aio.config

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(kubernetes.aio.config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "absent"))
    with pytest.raises(ConfigError, match="not running in a cluster"):
        await KubeClient.connect()
    with pytest.raises(ConfigError, match="rest-client-timeout"):
        KubeClient(object(), request_timeout_s=0)


async def test_in_cluster_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import certifi
    from kubernetes.aio.config import incluster_config

    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("sa-token")
    ca.write_text(Path(certifi.where()).read_text())
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    client = await KubeClient.connect(request_timeout_s=3)
    try:
        assert client.host == "https://10.96.0.1:443"
    finally:
        await client.close()
