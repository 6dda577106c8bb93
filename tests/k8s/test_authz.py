"""SubjectAccessReview authorization and the requestheader ConfigMap, against the fake API server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from adapter.domain.errors import ConfigError, KubeNotFound
from adapter.k8s import resources as r
from adapter.k8s.authz import (
    SubjectAccessReviewAuthorizer,
    load_requestheader_config,
    subject_access_review,
    watch_requestheader_config,
)
from adapter.k8s.client import KubeClient, KubeUnavailable
from adapter.servers.auth import (
    Authorizer,
    CachingAuthorizer,
    RequestAttributes,
    RequestHeaderConfig,
    UserInfo,
    requestheader_config_from_configmap,
)
from tests.k8s import builders as b
from tests.k8s.conftest import FAST, eventually
from tests.k8s.fake_apiserver import FakeApiServer

HPA = UserInfo(
    name="system:serviceaccount:kube-system:horizontal-pod-autoscaler",
    uid="42",
    groups=("system:serviceaccounts", "system:authenticated"),
    extra=(("authentication.kubernetes.io/pod-name", ("hpa-0",)),),
)
METRIC = RequestAttributes(
    verb="list",
    path="/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/wva_desired_replicas",
    resource_request=True,
    namespace="llm",
    api_group="external.metrics.k8s.io",
    api_version="v1beta1",
    resource="wva_desired_replicas",
)
DISCOVERY = RequestAttributes(verb="get", path="/apis/external.metrics.k8s.io/v1beta1")


@pytest.mark.parametrize(
    ("user", "attributes", "spec"),
    [
        (
            HPA,
            METRIC,
            {
                "user": HPA.name,
                "uid": "42",
                "groups": ["system:serviceaccounts", "system:authenticated"],
                "extra": {"authentication.kubernetes.io/pod-name": ["hpa-0"]},
                "resourceAttributes": {
                    "namespace": "llm",
                    "verb": "list",
                    "group": "external.metrics.k8s.io",
                    "version": "v1beta1",
                    "resource": "wva_desired_replicas",
                },
            },
        ),
        (
            UserInfo(name="alice", groups=("system:authenticated",)),
            DISCOVERY,
            {
                "user": "alice",
                "groups": ["system:authenticated"],
                "nonResourceAttributes": {"path": "/apis/external.metrics.k8s.io/v1beta1", "verb": "get"},
            },
        ),
    ],
    ids=["metric", "discovery"],
)
def test_review_body(user: UserInfo, attributes: RequestAttributes, spec: dict[str, Any]) -> None:
    assert subject_access_review(user, attributes) == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": spec,
    }


@pytest.mark.parametrize("allowed", [True, False], ids=["allowed", "denied"])
async def test_authorize_posts_a_review(fake_api: FakeApiServer, kube: KubeClient, allowed: bool) -> None:
    reviews: list[dict[str, Any]] = []

    def decide(body: dict[str, Any]) -> dict[str, Any]:
        reviews.append(body)
        return {"allowed": allowed, "reason": "RBAC"} if allowed else {"allowed": False, "denied": True}

    fake_api.sar_handler = decide
    authorizer: Authorizer = SubjectAccessReviewAuthorizer(kube)  # satisfies the servers' Protocol
    assert await authorizer.authorize(HPA, METRIC) is allowed
    [review] = reviews
    assert review["spec"]["resourceAttributes"]["resource"] == "wva_desired_replicas"
    assert fake_api.log[-1].path == "/apis/authorization.k8s.io/v1/subjectaccessreviews"
    assert fake_api.log[-1].method == "POST"


async def test_caching_authorizer_wraps_it(fake_api: FakeApiServer, kube: KubeClient) -> None:
    inner = SubjectAccessReviewAuthorizer(kube)
    cached = CachingAuthorizer(inner, clock=lambda: 0.0)
    for _ in range(5):
        assert await cached.authorize(HPA, METRIC)
    assert inner.reviews == 1
    assert fake_api.count(method="POST") == 1


async def test_failure_to_decide_raises(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.fail(method="POST", status=503, times=None)
    with pytest.raises(KubeUnavailable):
        await SubjectAccessReviewAuthorizer(kube).authorize(HPA, METRIC)


async def test_a_review_without_status_is_a_denial(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fake_api.sar_handler = lambda _body: {}
    assert not await SubjectAccessReviewAuthorizer(kube).authorize(HPA, METRIC)


CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


async def test_load_requestheader_config(fake_api: FakeApiServer, kube: KubeClient) -> None:
    data = {
        "requestheader-client-ca-file": CA,
        "requestheader-allowed-names": json.dumps(["front-proxy-client"]),
        "requestheader-username-headers": json.dumps(["X-Remote-User"]),
        "requestheader-group-headers": json.dumps(["X-Remote-Group"]),
        "requestheader-extra-headers-prefix": json.dumps(["X-Remote-Extra-"]),
        "client-ca-file": CA,
    }
    fake_api.put(
        r.CONFIGMAPS, b.configmap("extension-apiserver-authentication", namespace="kube-system", data=data, labels={})
    )
    config = await load_requestheader_config(kube, requestheader_config_from_configmap)
    assert config.client_ca_pem == CA
    assert config.allowed_names == ("front-proxy-client",)
    assert fake_api.log[-1].path == "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"


async def test_requestheader_config_errors(fake_api: FakeApiServer, kube: KubeClient) -> None:
    with pytest.raises(KubeNotFound):
        await load_requestheader_config(kube, requestheader_config_from_configmap)
    fake_api.put(
        r.CONFIGMAPS, b.configmap("extension-apiserver-authentication", namespace="kube-system", data={}, labels={})
    )
    with pytest.raises(ConfigError, match="requestheader-client-ca-file"):
        await load_requestheader_config(kube, requestheader_config_from_configmap)


async def test_watch_follows_ca_rotation_and_skips_bad_edits(fake_api: FakeApiServer, kube: KubeClient) -> None:
    name = "extension-apiserver-authentication"
    seen: list[RequestHeaderConfig] = []
    fake_api.put(
        r.CONFIGMAPS, b.configmap(name, namespace="kube-system", data={"requestheader-client-ca-file": CA}, labels={})
    )
    fake_api.put(r.CONFIGMAPS, b.configmap("unrelated", namespace="kube-system", data={}, labels={}))
    task = asyncio.create_task(
        watch_requestheader_config(kube, requestheader_config_from_configmap, seen.append, options=FAST)
    )
    try:
        await eventually(lambda: len(seen) == 1, what="the initial configuration")
        rotated = CA + CA.replace("MIIB", "MIIC")
        fake_api.put(
            r.CONFIGMAPS,
            b.configmap(name, namespace="kube-system", data={"requestheader-client-ca-file": ""}, labels={}),
        )
        fake_api.put(
            r.CONFIGMAPS,
            b.configmap(name, namespace="kube-system", data={"requestheader-client-ca-file": rotated}, labels={}),
        )
        await eventually(lambda: len(seen) == 2, what="the rotated CA")
        assert seen[1].client_ca_pem == rotated  # the bad edit in between was skipped
        watch = next(e for e in reversed(fake_api.log) if e.watch)
        assert watch.query["fieldSelector"] == f"metadata.name={name}"
        assert watch.path == "/api/v1/namespaces/kube-system/configmaps"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
