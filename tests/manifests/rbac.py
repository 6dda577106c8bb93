"""What the adapter's roles grant, exactly: the expectation both the rendered manifests (tests/manifests) and the
RBAC of an installed Helm release on the real API server (tests/e2e_k8s/test_helm_install.py) are held to.

Least privilege: read the fleet; write only VariantAutoscaling status, Events and the Lease; nothing else.
`create tokenreviews` and `create subjectaccessreviews` come from the built-in `system:auth-delegator`.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

from adapter.servers.served import ServedMetric

READ = frozenset({"get", "list", "watch"})
SERVED_METRICS = tuple(m.value for m in ServedMetric)

EXPECTED_ADAPTER_RULES: dict[tuple[str, str], Set[str]] = {
    ("llmd.ai", "variantautoscalings"): READ,
    ("llmd.ai", "variantautoscalings/status"): {"get", "patch", "update"},
    ("apps", "deployments"): READ,
    ("apps", "statefulsets"): READ,
    ("apps", "replicasets"): READ,
    ("leaderworkerset.x-k8s.io", "leaderworkersets"): READ,
    ("", "pods"): READ,
    ("", "configmaps"): READ,
    ("", "nodes"): READ,
    ("", "services"): READ,
    ("inference.networking.k8s.io", "inferencepools"): READ,
    ("inference.networking.x-k8s.io", "inferencepools"): READ,
    ("events.k8s.io", "events"): {"create", "patch"},
}
EXPECTED_LEASE_RULES: dict[tuple[str, str], Set[str]] = {
    ("coordination.k8s.io", "leases"): {"get", "list", "watch", "create", "update", "patch"}
}
EXPECTED_HPA_READER_RULES: dict[tuple[str, str], Set[str]] = {
    ("external.metrics.k8s.io", m): READ for m in SERVED_METRICS
}
EXPECTED_AUTH_DELEGATOR_RULES: dict[tuple[str, str], Set[str]] = {
    ("authentication.k8s.io", "tokenreviews"): {"create"},
    ("authorization.k8s.io", "subjectaccessreviews"): {"create"},
}
"""What the built-in `system:auth-delegator` grants (read from the real API server in the e2e test)."""


def grants(role: Mapping[str, Any]) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of every resource rule of a Role or ClusterRole."""
    return {
        (group, resource, verb)
        for rule in role.get("rules") or []
        for group in rule.get("apiGroups") or []
        for resource in rule.get("resources") or []
        for verb in rule.get("verbs") or []
    }


def expand(expected: Mapping[tuple[str, str], Set[str]]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for (g, r), verbs in expected.items() for v in verbs}
