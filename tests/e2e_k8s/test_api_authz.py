"""SubjectAccessReview authorization and the requestheader ConfigMap against the real kube-apiserver.

Real here: SubjectAccessReviews decided by the real RBAC authorizer with the manifests as shipped (the HPA's
ServiceAccount may read our metrics through `wva-adapter-external-metrics-reader`, anyone else may not), asked
by the adapter's own ServiceAccount through its `system:auth-delegator` binding; a real 403 for a client
without that binding and a refused connection (a closed port) as the failures to decide; the
`kube-system/extension-apiserver-authentication` ConfigMap that kube-apiserver publishes from its own
`--requestheader-*` flags (controlplane.py), read, deleted (kube-apiserver republishes it at once) and left
without its CA (restored afterwards: the session shares it), and watched through a bad edit and a real
front-proxy CA rotation. What the
client sent is read back from the apiserver's audit log (apiworld.py).

Still on the fake server (tests/k8s/test_authz.py), because the real one cannot be made to do it on demand:
a review answered without `status`, and the ConfigMap absent (kube-apiserver republishes it at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapter.domain.errors import ConfigError, KubeNotFound
from adapter.k8s import resources as r
from adapter.k8s.authz import (
    REQUESTHEADER_CONFIGMAP,
    SubjectAccessReviewAuthorizer,
    load_requestheader_config,
    watch_requestheader_config,
)
from adapter.k8s.client import KubeAuthError, KubeClient, KubeUnavailable
from adapter.servers.auth import (
    Authorizer,
    CachingAuthorizer,
    RequestHeaderConfig,
    UserInfo,
    requestheader_config_from_configmap,
)
from adapter.servers.tls import CertificateAuthority
from tests.k8s import builders as b
from tests.k8s.conftest import FAST, eventually
from tests.k8s.test_authz import DISCOVERY, HPA, METRIC
from tests.ports import free_port

from .apiworld import ApiWorld, read_audit
from .cluster import Kube
from .controlplane import ADAPTER_SA, ADAPTER_USER, AUDITED_GROUP, CONTROLLER_NS, write_token_kubeconfig

pytestmark = pytest.mark.e2e_k8s

SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
ALICE = UserInfo(name="alice", groups=("system:authenticated",))
NAMESPACE, NAME = REQUESTHEADER_CONFIGMAP


def _adapter_kubeconfig(kube: Kube, path: Path) -> Path:
    token = kube.service_account_token(CONTROLLER_NS, ADAPTER_SA)
    return write_token_kubeconfig(path, server=kube.plane.url, ca=kube.plane.pki.ca, token=token, user=ADAPTER_SA)


@pytest.mark.parametrize(
    ("user", "attributes", "allowed"),
    [(HPA, METRIC, True), (ALICE, METRIC, False), (ALICE, DISCOVERY, True)],
    ids=["hpa-reads-a-metric", "alice-reads-a-metric", "alice-discovers"],
)
async def test_authorize_posts_a_review(
    api_world: ApiWorld, client: KubeClient, user: UserInfo, attributes: object, allowed: bool
) -> None:
    """The real RBAC decides: the shipped ClusterRoleBinding lets the HPA's ServiceAccount list our metric and
    nobody else; discovery is open to every authenticated user (system:discovery)."""
    authorizer: Authorizer = SubjectAccessReviewAuthorizer(client)  # satisfies the servers' Protocol
    api_world.mark()
    assert await authorizer.authorize(user, attributes) is allowed  # type: ignore[arg-type]
    [review] = api_world.requests()
    assert (review.method, review.path, review.code) == ("POST", SAR_PATH, 201)
    assert review.body["spec"]["user"] == user.name
    if attributes is METRIC:
        assert review.body["spec"]["resourceAttributes"]["resource"] == "wva_desired_replicas"
    else:
        assert review.body["spec"]["nonResourceAttributes"]["path"] == "/apis/external.metrics.k8s.io/v1beta1"


async def test_the_adapter_service_account_may_ask(api_world: ApiWorld, kube: Kube, tmp_path: Path) -> None:
    """Production's identity: the adapter's ServiceAccount token, allowed to create reviews by the shipped
    `system:auth-delegator` binding."""
    assert api_world.audit_log is not None
    since = api_world.audit_log.stat().st_size
    async with await KubeClient.connect(kubeconfig=str(_adapter_kubeconfig(kube, tmp_path / "sa"))) as adapter:
        authorizer = SubjectAccessReviewAuthorizer(adapter)
        assert await authorizer.authorize(HPA, METRIC)
        assert not await authorizer.authorize(ALICE, METRIC)
    api_world.requests()  # returns once the audit log stopped growing
    reviews = [e for e in read_audit(api_world.audit_log, user=ADAPTER_USER, since_bytes=since) if e.path == SAR_PATH]
    assert [(e.code, e.body["spec"]["user"]) for e in reviews] == [(201, HPA.name), (201, ALICE.name)]


async def test_caching_authorizer_wraps_it(api_world: ApiWorld, client: KubeClient) -> None:
    inner = SubjectAccessReviewAuthorizer(client)
    cached = CachingAuthorizer(inner, clock=lambda: 0.0)
    api_world.mark()
    for _ in range(5):
        assert await cached.authorize(HPA, METRIC)
    assert inner.reviews == 1
    assert [(e.method, e.path) for e in api_world.requests()] == [("POST", SAR_PATH)]


@pytest.mark.parametrize("how", ["forbidden", "refused"])
async def test_failure_to_decide_raises(api_world: ApiWorld, kube: Kube, tmp_path: Path, how: str) -> None:
    """Never a guess: a client without `system:auth-delegator` (a real 403 from RBAC), or no API server at all."""
    if how == "forbidden":
        path = kube.plane.kubeconfig_for(f"{api_world.user}-nobody", AUDITED_GROUP)
    else:
        server = f"https://127.0.0.1:{free_port()}"
        path = write_token_kubeconfig(tmp_path / "closed", server=server, ca=kube.plane.pki.ca, token="x", user="x")
    async with await KubeClient.connect(kubeconfig=str(path), request_timeout_s=5) as client:
        authorizer = SubjectAccessReviewAuthorizer(client)
        if how == "forbidden":
            with pytest.raises(KubeAuthError, match='cannot create resource "subjectaccessreviews"') as info:
                await authorizer.authorize(HPA, METRIC)
            assert info.value.status == 403
        else:
            with pytest.raises(KubeUnavailable) as refused:
                await authorizer.authorize(HPA, METRIC)
            assert refused.value.status == 0
    assert authorizer.reviews == 1


async def test_load_requestheader_config(api_world: ApiWorld, kube: Kube, client: KubeClient) -> None:
    """What kube-apiserver published from its flags (controlplane.py: the front-proxy CA, allowed name
    front-proxy-client, X-Remote-User / X-Remote-Group / X-Remote-Extra-)."""
    api_world.mark()
    config = await load_requestheader_config(client, requestheader_config_from_configmap)
    assert config.client_ca_pem.strip() == kube.plane.pki.front_proxy_ca.read_text().strip()
    assert config.allowed_names == ("front-proxy-client",)
    assert config.username_headers == ("X-Remote-User",)
    assert config.group_headers == ("X-Remote-Group",)
    assert config.extra_headers_prefixes == ("X-Remote-Extra-",)
    [read] = api_world.requests()
    assert (read.verb, read.path) == (
        "get",
        "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication",
    )


async def test_the_adapter_service_account_may_read_it_and_nobody_else(
    api_world: ApiWorld, kube: Kube, tmp_path: Path
) -> None:
    """The shipped RoleBinding to `extension-apiserver-authentication-reader` lets the adapter read it; a user
    without it gets a real 403."""
    async with await KubeClient.connect(kubeconfig=str(_adapter_kubeconfig(kube, tmp_path / "sa"))) as adapter:
        config = await load_requestheader_config(adapter, requestheader_config_from_configmap)
    assert config.allowed_names == ("front-proxy-client",)
    nobody = kube.plane.kubeconfig_for(f"{api_world.user}-nobody", AUDITED_GROUP)
    async with await KubeClient.connect(kubeconfig=str(nobody)) as client:
        with pytest.raises(KubeAuthError, match="forbidden") as info:
            await load_requestheader_config(client, requestheader_config_from_configmap)
    assert info.value.status == 403


@pytest.fixture
def restore_configmap(api_world: ApiWorld) -> Iterator[dict[str, str]]:
    """The published data, written back after the test (cluster-wide state the whole session shares), also when
    the test deleted the ConfigMap."""
    original = dict(api_world.get(r.CONFIGMAPS, NAME, namespace=NAMESPACE)["data"])
    try:
        yield original
    finally:
        found = api_world.kube.http.get(api_world.objects.url(r.CONFIGMAPS, namespace=NAMESPACE, name=NAME), timeout=10)
        if found.status_code == 404:
            api_world.put(r.CONFIGMAPS, b.configmap(NAME, namespace=NAMESPACE, data=original, labels={}))
        else:
            nulls = {key: None for key in found.json().get("data") or {} if key not in original}
            api_world.patch(r.CONFIGMAPS, NAME, {"data": {**nulls, **original}}, namespace=NAMESPACE)


async def test_requestheader_config_deleted_and_without_ca(
    api_world: ApiWorld, client: KubeClient, restore_configmap: dict[str, str]
) -> None:
    """An admin's mistakes, made for real. Deleted, the ConfigMap is back at once: kube-apiserver republishes it
    (so the 404 of a cluster without an aggregation layer stays on the fake). Its CA removed, it stays so, and
    loading it is a ConfigError naming the key."""
    ca_key = "requestheader-client-ca-file"
    api_world.delete(r.CONFIGMAPS, NAME, namespace=NAMESPACE)
    republished: list[RequestHeaderConfig] = []

    async def load() -> None:
        with contextlib.suppress(KubeNotFound):
            republished.append(await load_requestheader_config(client, requestheader_config_from_configmap))

    deadline = asyncio.get_running_loop().time() + 10
    while not republished:
        assert asyncio.get_running_loop().time() < deadline, "kube-apiserver did not republish the ConfigMap"
        await load()
    assert republished[0].client_ca_pem == restore_configmap[ca_key]
    api_world.patch(r.CONFIGMAPS, NAME, {"data": {ca_key: None}}, namespace=NAMESPACE)
    with pytest.raises(ConfigError, match=ca_key):
        await load_requestheader_config(client, requestheader_config_from_configmap)


async def test_watch_follows_ca_rotation_and_skips_bad_edits(
    api_world: ApiWorld, client: KubeClient, restore_configmap: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A bad edit (the CA emptied) is skipped, then a rotation (a second front-proxy CA added, as an operator
    does before switching) is followed."""
    original = restore_configmap
    ca_key = "requestheader-client-ca-file"
    seen: list[RequestHeaderConfig] = []
    caplog.set_level(logging.ERROR, logger="adapter.k8s.authz")
    api_world.mark()
    task = asyncio.create_task(
        watch_requestheader_config(client, requestheader_config_from_configmap, seen.append, options=FAST)
    )
    try:
        await eventually(lambda: len(seen) == 1, what="the initial configuration", timeout_s=10)
        assert seen[0].client_ca_pem == original[ca_key]
        api_world.patch(r.CONFIGMAPS, NAME, {"data": {ca_key: ""}}, namespace=NAMESPACE)
        new_ca = CertificateAuthority.create("rotated-front-proxy-ca").cert_pem.decode()
        rotated = original[ca_key].rstrip("\n") + "\n" + new_ca
        api_world.patch(r.CONFIGMAPS, NAME, {"data": {ca_key: rotated}}, namespace=NAMESPACE)
        await eventually(lambda: any(new_ca in c.client_ca_pem for c in seen), what="the rotated CA", timeout_s=10)
        assert all(c.client_ca_pem.strip() for c in seen)  # the bad edit never reached us
        skipped = [m for m in caplog.messages if "keeping the previous requestheader configuration" in m]
        assert skipped, "the bad edit was not seen (and skipped) by the watch"
        assert seen[1].client_ca_pem == rotated
        assert seen[1].allowed_names == ("front-proxy-client",)
        watches = [e for e in api_world.requests() if e.watch]
        assert watches, "no watch request"
        assert all(e.path == "/api/v1/namespaces/kube-system/configmaps" for e in watches)
        assert all("fieldSelector=metadata.name%3Dextension-apiserver-authentication" in e.uri for e in watches)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
