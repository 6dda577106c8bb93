"""KubeClient configuration (no server), and the faults of the fake API server the real one cannot produce on demand.

Everything the real kube-apiserver can serve moved to tests/e2e_k8s/test_api_client.py (authentication, every
verb, pagination, selectors, watch streams, 400/401/403/404/409/415/422, a refused connection). What stays here
needs an injected fault, named in each test's docstring.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from adapter.domain.errors import ConfigError, KubeError, KubeGone
from adapter.k8s import resources as r
from adapter.k8s.client import KubeClient, KubeUnavailable, WatchEvent
from tests.k8s.builders import NS, pod
from tests.k8s.conftest import eventually
from tests.k8s.fake_apiserver import FakeApiServer


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (410, KubeGone),
        (429, KubeUnavailable),
        (500, KubeUnavailable),
        (503, KubeUnavailable),
    ],
    ids=lambda v: str(v) if isinstance(v, int) else v.__name__,
)
async def test_http_status_maps_to_our_error(
    fake_api: FakeApiServer, kube: KubeClient, status: int, expected: type[KubeError]
) -> None:
    """Fault: an HTTP 410 / 429 / 500 / 503 answer to a plain GET (the real server's 400/401/403/404/409/415/422
    are in tests/e2e_k8s/test_api_client.py)."""
    fake_api.fail(method="GET", status=status)
    with pytest.raises(expected) as info:
        await kube.get(r.CONFIGMAPS, "anything", namespace=NS)
    assert isinstance(info.value, KubeError)
    assert f"HTTP {status}" in str(info.value)
    assert "injected fault" in str(info.value)  # the Status message travels with the error
    assert info.value.__cause__ is not None  # raised `from` the library's ApiException


async def test_dropped_connection_is_unavailable(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """Fault: the TCP connection dropped after the request arrived (the real refused connection is in
    tests/e2e_k8s/test_api_client.py)."""
    fake_api.fail(drop=True, times=None)  # aiohttp retries an idempotent request once by itself
    with pytest.raises(KubeUnavailable) as info:
        await kube.list(r.PODS)
    assert info.value.status == 0
    assert fake_api.count() == 2


async def test_list_with_an_expired_continue_token_is_gone(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """Fault: a continue token expired between two pages (the real v1.35 server serves a continue token from its
    watch-cache snapshot even after an etcd compaction)."""
    for i in range(3):
        fake_api.put(r.PODS, pod(f"p{i}"))
    fake_api.compacted[(r.PODS.group, r.PODS.version, r.PODS.plural)] = fake_api.rv + 1
    with pytest.raises(KubeGone):
        await kube.list(r.PODS, page_size=2)


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


async def test_watch_passes_bookmarks_on(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """Fault: BOOKMARK events on demand (the real server sends them about once a minute; ADDED / MODIFIED /
    DELETED from the real server are in tests/e2e_k8s/test_api_client.py)."""
    rv = str(fake_api.rv)
    fake_api.put(r.PODS, pod("a"))
    events = []
    async with asyncio.timeout(5), contextlib.aclosing(kube.watch(r.PODS, resource_version=rv, namespace=NS)) as stream:
        async for event in stream:
            events.append(event)
            if len(events) == 1:
                fake_api.bookmark(r.PODS)  # only an open watch gets it
            if len(events) == 2:
                break
    assert [e.type for e in events] == ["ADDED", "BOOKMARK"]
    assert events[-1].resource_version == str(fake_api.rv)
    assert events[-1].object["metadata"] == {"resourceVersion": str(fake_api.rv)}
    query = next(e for e in reversed(fake_api.log) if e.watch).query
    assert query["allowWatchBookmarks"] == "true"
    await eventually(lambda: fake_api.watch_count(r.PODS) == 0, what="the server to see the watch closed")


async def test_watch_error_event_410_raises_gone(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """Fault: a too-old resourceVersion (the real server's watch cache holds every event since it started: it
    serves a watch from resourceVersion 1)."""
    before = str(fake_api.rv)
    fake_api.put(r.PODS, pod("a"))
    fake_api.expire(r.PODS)
    with pytest.raises(KubeGone, match="too old resource version"):
        await _collect(kube, before, n=1)


async def test_watch_error_event_mid_stream(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """Fault: an ERROR 410 event in the middle of an open watch stream."""
    task = asyncio.create_task(_collect(kube, str(fake_api.rv), n=10))
    await eventually(lambda: fake_api.watch_count(r.PODS) == 1, what="watch registered")
    fake_api.put(r.PODS, pod("a"))
    fake_api.expire(r.PODS)
    with pytest.raises(KubeGone):
        await task


async def test_dropped_watch_connection_is_unavailable(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """Fault: the TCP connection dropped in the middle of a watch stream."""
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
    """Fault: a watch line that is not JSON, of an unknown type, or an ERROR 500 event."""
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
