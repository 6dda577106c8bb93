"""KubeClient against the real kube-apiserver: bearer-token and x509 authentication, every verb, pagination,
selectors, watch streams (ADDED / MODIFIED / DELETED, the stream the server closes at `timeoutSeconds`, the end
of a stream the client closed, as the server saw it), and the error mapping for
every status the real server answers on demand: 400 (a selector it cannot parse), 401 (a token it does not
know), 403 (RBAC), 404, 409 (AlreadyExists and a stale resourceVersion), 415 (a strategic merge patch on a
custom resource), 422 (an invalid object), and a refused connection (a closed port). What the client sent is
read back from the apiserver's audit log (apiworld.py).

Still on the fake server (tests/k8s/test_client.py), because the real one cannot be made to do it on demand:
the 410 / 429 / 500 / 503 HTTP answers to a plain GET, a TCP connection dropped after the request (and mid
watch stream), a too-old resourceVersion (an expired continue token, a 410 ERROR event at the start or in the
middle of a watch), BOOKMARK events, and malformed watch lines. Measured on this v1.35 server: its watch cache
holds every event since it started, so it serves a watch from resourceVersion 1, and a continue token even after
an etcd compaction (from its cache snapshot); it sent no BOOKMARK within a 5 s watch (they come about once a
minute).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import pytest

from adapter.domain.errors import KubeConflict, KubeError, KubeNotFound
from adapter.k8s import resources as r
from adapter.k8s.client import JSON_PATCH, KubeAuthError, KubeClient, KubeInvalid, KubeUnavailable, WatchEvent
from adapter.k8s.resources import ResourceType
from tests.k8s import builders as b
from tests.k8s.conftest import eventually
from tests.ports import free_port

from .apiworld import ApiWorld, read_audit
from .cluster import Kube
from .controlplane import ADAPTER_SA, ADAPTER_USER, AUDITED_GROUP, CONTROLLER_NS, write_token_kubeconfig

pytestmark = pytest.mark.e2e_k8s

UNSERVED = ResourceType("unserved.wva-e2e.example", "v1", "widgets", "Widget")
"""A group no CRD serves (an optional CRD that is not installed)."""


def _token_kubeconfig(kube: Kube, path: Path, token: str, *, server: str | None = None) -> Path:
    return write_token_kubeconfig(
        path, server=server or kube.plane.url, ca=kube.plane.pki.ca, token=token, user="token-user"
    )


def _audit_size(world: ApiWorld) -> int:
    assert world.audit_log is not None, "the audit log is written by the local control plane only"
    return world.audit_log.stat().st_size


async def test_connect_from_kubeconfig_sends_the_bearer_token(api_world: ApiWorld, kube: Kube, tmp_path: Path) -> None:
    """A ServiceAccount token from the TokenRequest API (the adapter's own, as a pod would mount it): the server
    authenticates the request as that ServiceAccount, which the audit log records."""
    api_world.put(r.CONFIGMAPS, b.configmap("a", namespace=api_world.namespace, data={"k": "v"}))
    path = _token_kubeconfig(kube, tmp_path / "sa", kube.service_account_token(CONTROLLER_NS, ADAPTER_SA))
    since = _audit_size(api_world)
    async with await KubeClient.connect(kubeconfig=str(path), request_timeout_s=10) as client:
        assert client.host == kube.plane.url
        got = await client.get(r.CONFIGMAPS, "a", namespace=api_world.namespace)
    assert got["data"] == {"k": "v"}
    api_world.requests()  # returns once the audit log stopped growing
    assert api_world.audit_log is not None
    sent = [
        e
        for e in read_audit(api_world.audit_log, user=ADAPTER_USER, since_bytes=since)
        if api_world.namespace in e.path
    ]
    assert [(e.verb, e.path, e.code) for e in sent] == [
        ("get", f"/api/v1/namespaces/{api_world.namespace}/configmaps/a", 200)
    ]


async def test_wrong_token_is_an_auth_error(kube: Kube, tmp_path: Path) -> None:
    path = _token_kubeconfig(kube, tmp_path / "bad", "wrong")
    async with await KubeClient.connect(kubeconfig=str(path)) as client:
        with pytest.raises(KubeAuthError) as info:
            await client.list(r.PODS)
    assert info.value.status == 401
    assert "HTTP 401: Unauthorized" in str(info.value)


async def _bad_selector(world: ApiWorld, client: KubeClient) -> None:
    await client.list(r.CONFIGMAPS, namespace=world.namespace, label_selector="a b c")


async def _unauthenticated(world: ApiWorld, client: KubeClient) -> None:
    path = _token_kubeconfig(world.kube, world.kubeconfig.with_suffix(".wrong-token"), "wrong")
    async with await KubeClient.connect(kubeconfig=str(path)) as stranger:
        await stranger.get(r.CONFIGMAPS, "anything", namespace=world.namespace)


async def _forbidden(world: ApiWorld, client: KubeClient) -> None:
    """An authenticated x509 user no RBAC rule grants anything."""
    path = world.kube.plane.kubeconfig_for(f"{world.user}-nobody", AUDITED_GROUP)
    async with await KubeClient.connect(kubeconfig=str(path)) as nobody:
        await nobody.get(r.CONFIGMAPS, "anything", namespace=world.namespace)


async def _missing(world: ApiWorld, client: KubeClient) -> None:
    await client.get(r.CONFIGMAPS, "anything", namespace=world.namespace)


async def _exists(world: ApiWorld, client: KubeClient) -> None:
    world.put(r.CONFIGMAPS, b.configmap("anything", namespace=world.namespace, data={}))
    await client.create(
        r.CONFIGMAPS, b.configmap("anything", namespace=world.namespace, data={}), namespace=world.namespace
    )


async def _invalid(world: ApiWorld, client: KubeClient) -> None:
    invalid = b.configmap("Not_A_DNS_Name", namespace=world.namespace, data={})
    await client.create(r.CONFIGMAPS, invalid, namespace=world.namespace)


async def _strategic_patch_on_a_crd(world: ApiWorld, client: KubeClient) -> None:
    world.put(r.VARIANT_AUTOSCALINGS, b.va("anything", namespace=world.namespace))
    await client.patch(
        r.VARIANT_AUTOSCALINGS,
        "anything",
        {"spec": {"minReplicas": 2}},
        namespace=world.namespace,
        content_type="application/strategic-merge-patch+json",
    )


REAL_ERRORS = {
    "400-bad-selector": (_bad_selector, 400, KubeInvalid, "unable to parse requirement"),
    "401-unknown-token": (_unauthenticated, 401, KubeAuthError, "Unauthorized"),
    "403-rbac": (_forbidden, 403, KubeAuthError, 'cannot get resource "configmaps"'),
    "404-not-found": (_missing, 404, KubeNotFound, 'configmaps "anything" not found'),
    "409-already-exists": (_exists, 409, KubeConflict, 'configmaps "anything" already exists'),
    "415-strategic-merge-on-crd": (_strategic_patch_on_a_crd, 415, KubeUnavailable, "the body of the request"),
    "422-invalid-name": (_invalid, 422, KubeInvalid, 'ConfigMap "Not_A_DNS_Name" is invalid'),
}


@pytest.mark.parametrize("case", list(REAL_ERRORS), ids=list(REAL_ERRORS))
async def test_http_status_maps_to_our_error(api_world: ApiWorld, client: KubeClient, case: str) -> None:
    """Each status as the real server answers it, with the real Status message travelling in our error."""
    provoke, status, expected, message = REAL_ERRORS[case]
    with pytest.raises(expected) as info:
        await provoke(api_world, client)
    assert isinstance(info.value, KubeError)
    assert f"HTTP {status}" in str(info.value)
    assert message in str(info.value)
    assert info.value.__cause__ is not None  # raised `from` the library's ApiException
    if isinstance(info.value, (KubeAuthError, KubeInvalid, KubeUnavailable)):
        assert info.value.status == status


async def test_not_found_object_and_unserved_collection(api_world: ApiWorld, client: KubeClient) -> None:
    with pytest.raises(KubeNotFound, match='configmaps "missing" not found'):
        await client.get(r.CONFIGMAPS, "missing", namespace=api_world.namespace)
    with pytest.raises(KubeNotFound, match="404 page not found"):  # no such group: not even a Status body
        await client.list(UNSERVED)
    with pytest.raises(KubeNotFound, match="the server could not find the requested resource"):
        await client.list(ResourceType("apps", "v1", "widgets", "Widget"))  # a served group without that plural


async def test_refused_connection_is_unavailable(kube: Kube, tmp_path: Path) -> None:
    """A port nobody listens on: the kernel refuses the connection, there is no HTTP answer at all."""
    path = _token_kubeconfig(kube, tmp_path / "closed", "unused", server=f"https://127.0.0.1:{free_port()}")
    async with await KubeClient.connect(kubeconfig=str(path), request_timeout_s=5) as client:
        with pytest.raises(KubeUnavailable) as info:
            await client.list(r.PODS)
    assert info.value.status == 0
    assert "Connect" in str(info.value)


async def test_list_follows_continue_tokens(api_world: ApiWorld, client: KubeClient) -> None:
    ns = api_world.namespace
    stored = [api_world.put(r.PODS, b.pod(f"p{i}", namespace=ns)) for i in range(5)]
    api_world.mark()
    listed = await client.list(r.PODS, namespace=ns, page_size=2)
    assert [p["metadata"]["name"] for p in listed.items] == [f"p{i}" for i in range(5)]
    # the real server's list items carry no apiVersion/kind: the client fills them in
    assert all(item["kind"] == "Pod" and item["apiVersion"] == "v1" for item in listed.items)
    newest = max(int(p["metadata"]["resourceVersion"]) for p in stored)
    assert int(listed.resource_version) >= newest  # the snapshot the pages were served from
    pages = [e for e in api_world.requests() if e.verb == "list"]
    assert len(pages) == 3
    assert all("limit=2" in e.uri for e in pages)
    assert ["continue=" in e.uri for e in pages] == [False, True, True]


async def test_label_selector_reaches_the_server_encoded(api_world: ApiWorld, client: KubeClient) -> None:
    ns = api_world.namespace
    api_world.put(r.CONFIGMAPS, b.configmap("yes", namespace=ns, data={}))
    api_world.put(r.CONFIGMAPS, b.configmap("no", namespace=ns, data={}, labels={}))
    api_world.mark()
    listed = await client.list(
        r.CONFIGMAPS, namespace=ns, label_selector="app.kubernetes.io/name=workload-variant-autoscaler"
    )
    assert [c["metadata"]["name"] for c in listed.items] == ["yes"]
    [request] = api_world.requests()
    # as the server received it: "=" percent-encoded, "/" left as it is (a legal query character)
    assert "labelSelector=app.kubernetes.io/name%3Dworkload-variant-autoscaler" in request.uri


async def test_create_replace_patch_and_conflicts(api_world: ApiWorld, client: KubeClient) -> None:
    ns = api_world.namespace
    created = await client.create(r.CONFIGMAPS, b.configmap("c", namespace=ns, data={"a": "1"}), namespace=ns)
    with pytest.raises(KubeConflict, match="already exists"):
        await client.create(r.CONFIGMAPS, b.configmap("c", namespace=ns, data={}), namespace=ns)
    stale_rv = created["metadata"]["resourceVersion"]
    updated = await client.replace(r.CONFIGMAPS, "c", {**created, "data": {"a": "2"}}, namespace=ns)
    assert updated["metadata"]["resourceVersion"] != stale_rv
    with pytest.raises(KubeConflict, match="has been modified"):
        await client.replace(r.CONFIGMAPS, "c", {**created, "data": {"a": "3"}}, namespace=ns)
    api_world.mark()
    patched = await client.patch(r.CONFIGMAPS, "c", {"data": {"b": "x", "a": None}}, namespace=ns)
    assert patched["data"] == {"b": "x"}  # merge-patch semantics: null deletes
    ops = [{"op": "add", "path": "/data/z", "value": "1"}]
    patched = await client.patch(r.CONFIGMAPS, "c", ops, namespace=ns, content_type=JSON_PATCH)
    assert patched["data"] == {"b": "x", "z": "1"}  # the server took the list as a JSON patch
    sent = [(e.verb, e.code, e.body) for e in api_world.requests()]
    assert sent == [("patch", 200, {"data": {"b": "x", "a": None}}), ("patch", 200, ops)]
    # a merge patch on a custom resource, which accepts no strategic merge patch: the content type was right
    api_world.put(r.VARIANT_AUTOSCALINGS, b.va("v", namespace=ns))
    va = await client.patch(r.VARIANT_AUTOSCALINGS, "v", {"spec": {"minReplicas": 2}}, namespace=ns)
    assert va["spec"]["minReplicas"] == 2
    assert api_world.get(r.CONFIGMAPS, "c")["data"] == {"b": "x", "z": "1"}


async def _collect(
    client: KubeClient, namespace: str, rv: str, *, n: int, timeout_s: float = 10.0, watch_timeout_s: float = 300
) -> list[WatchEvent]:
    """Up to `n` events of a ConfigMap watch from `rv`; stops early when the server ends the stream."""
    events: list[WatchEvent] = []
    async with asyncio.timeout(timeout_s):
        stream = client.watch(r.CONFIGMAPS, resource_version=rv, namespace=namespace, timeout_s=watch_timeout_s)
        async with contextlib.aclosing(stream) as events_stream:
            async for event in events_stream:
                events.append(event)
                if len(events) == n:
                    break
    return events


def _watch_ended(world: ApiWorld) -> bool:
    """The audit log holds the end (ResponseComplete) of this user's watch: the server saw the stream close."""
    assert world.audit_log is not None
    with world.audit_log.open("rb") as log:
        log.seek(world._mark)
        for line in log:
            if not line.endswith(b"\n"):
                break
            event = json.loads(line)
            if (
                event.get("user", {}).get("username") == world.user
                and event.get("verb") == "watch"
                and event.get("stage") == "ResponseComplete"
            ):
                return True
    return False


async def test_watch_streams_every_event_type(api_world: ApiWorld, client: KubeClient) -> None:
    """ADDED, MODIFIED and DELETED as etcd recorded them after `rv`; with an early break the client closes the
    connection and the server sees the watch end (its ResponseComplete audit event)."""
    ns = api_world.namespace
    rv = api_world.put(r.CONFIGMAPS, b.configmap("a", namespace=ns, data={"v": "1"}))["metadata"]["resourceVersion"]
    api_world.put(r.CONFIGMAPS, b.configmap("b", namespace=ns, data={}))
    api_world.put(r.CONFIGMAPS, b.configmap("a", namespace=ns, data={"v": "2"}))
    api_world.delete(r.CONFIGMAPS, "b")
    api_world.mark()
    events = [e for e in await _collect(client, ns, rv, n=3) if e.type != "BOOKMARK"]
    assert [e.type for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert [e.object["metadata"].get("name") for e in events] == ["b", "a", "b"]
    assert events[1].object["data"] == {"v": "2"}
    rvs = [int(e.resource_version) for e in events]
    assert rvs == sorted(rvs)
    assert rvs[0] > int(rv)
    [watch] = [e for e in api_world.requests() if e.watch]
    assert f"resourceVersion={rv}" in watch.uri
    assert "allowWatchBookmarks=true" in watch.uri
    assert "timeoutSeconds=300" in watch.uri
    await eventually(lambda: _watch_ended(api_world), timeout_s=10, what="the server to see the watch closed")


async def test_watch_ends_when_the_server_closes_the_stream(api_world: ApiWorld, client: KubeClient) -> None:
    """The server ends the stream after `timeoutSeconds`: the generator returns normally (no error)."""
    ns = api_world.namespace
    rv = (await client.list(r.CONFIGMAPS, namespace=ns)).resource_version
    api_world.put(r.CONFIGMAPS, b.configmap("a", namespace=ns, data={}))
    started = asyncio.get_running_loop().time()
    events = await _collect(client, ns, rv, n=10, watch_timeout_s=2)
    took_s = asyncio.get_running_loop().time() - started
    assert [e.type for e in events if e.type != "BOOKMARK"] == ["ADDED"]
    assert events[0].object["metadata"]["name"] == "a"
    assert 1.5 <= took_s <= 6, took_s
