"""SubjectAccessReview bodies (pure), and the faults of the fake API server the real one cannot produce on demand.

Everything the real kube-apiserver can serve moved to tests/e2e_k8s/test_api_authz.py: reviews decided by the
real RBAC, the cache in front of them, a real 403 and a refused connection as failures to decide, and the real
`kube-system/extension-apiserver-authentication` ConfigMap (read, RBAC, without its CA, a CA rotation and a bad
edit under a watch). What stays here needs a fault, named in each test's docstring.
"""

from __future__ import annotations

from typing import Any

import pytest

from adapter.domain.errors import KubeNotFound
from adapter.k8s.authz import SubjectAccessReviewAuthorizer, load_requestheader_config, subject_access_review
from adapter.k8s.client import KubeClient
from adapter.servers.auth import RequestAttributes, UserInfo, requestheader_config_from_configmap
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


async def test_a_review_without_status_is_a_denial(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """Fault: a SubjectAccessReview answered without `status` (the real server always decides)."""
    fake_api.sar_handler = lambda _body: {}
    assert not await SubjectAccessReviewAuthorizer(kube).authorize(HPA, METRIC)


async def test_requestheader_configmap_absent(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """Fault: the ConfigMap absent, as in a cluster without an aggregation layer (the real kube-apiserver
    republishes a deleted one at once; its CA removed is in tests/e2e_k8s/test_api_authz.py)."""
    with pytest.raises(KubeNotFound, match="extension-apiserver-authentication"):
        await load_requestheader_config(kube, requestheader_config_from_configmap)
    assert fake_api.log[-1].path == "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
