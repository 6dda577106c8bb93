"""The Kubernetes resource types the adapter reads and writes, and how their REST paths are built.

A `ResourceType` names a collection (group, version, plural); the client builds every path from it, so a
new kind is one constant here, not new client code. Optional types (CRDs that may be absent from a
cluster) are marked so the inventory can skip them instead of failing.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from adapter.config import va


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One REST collection. `group` is "" for the core API (`/api/v1`)."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    optional: bool = False
    """A CRD that may not be installed: a 404 on list means "not served", not an error."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_path(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def path(self, *, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """`/apis/g/v[/namespaces/ns]/plural[/name[/sub]]`; a namespaced type without a namespace lists across all."""
        parts = [self.group_path]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{quote(namespace, safe='')}")
        parts.append(self.plural)
        if name is not None:
            parts.append(quote(name, safe=""))
            if subresource:
                parts.append(subresource)
        return "/".join(parts)

    def __str__(self) -> str:
        return f"{self.plural}.{self.group or 'core'}/{self.version}"


VARIANT_AUTOSCALINGS = ResourceType(va.GROUP, va.VERSION, va.PLURAL, va.KIND)
DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment")
STATEFULSETS = ResourceType("apps", "v1", "statefulsets", "StatefulSet")
REPLICASETS = ResourceType("apps", "v1", "replicasets", "ReplicaSet")
LEADERWORKERSETS = ResourceType("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet", optional=True)
PODS = ResourceType("", "v1", "pods", "Pod")
SERVICES = ResourceType("", "v1", "services", "Service")
CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap")
NODES = ResourceType("", "v1", "nodes", "Node", namespaced=False)
INFERENCE_POOLS_V1 = ResourceType("inference.networking.k8s.io", "v1", "inferencepools", "InferencePool", optional=True)
INFERENCE_POOLS_V1ALPHA2 = ResourceType(
    "inference.networking.x-k8s.io", "v1alpha2", "inferencepools", "InferencePool", optional=True
)
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease")
SUBJECT_ACCESS_REVIEWS = ResourceType(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False
)
TOKEN_REVIEWS = ResourceType("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False)
EVENTS = ResourceType("events.k8s.io", "v1", "events", "Event")
