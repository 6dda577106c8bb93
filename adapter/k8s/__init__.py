"""The Kubernetes edge: the only package that imports `kubernetes`.

- `client.KubeClient`: configuration (kubeconfig / in-cluster), REST verbs, watch streams, error mapping;
- `inventory.Inventory`: list+watch of VAs, scale targets, pods, ConfigMaps, InferencePools, nodes → `ClusterView`;
- `status.StatusWriter`: VA status writes (merge patch guarded by resourceVersion, nothing sent when unchanged);
- `leader.LeaderElector`: Lease-based leader election (client-go semantics);
- `authz.SubjectAccessReviewAuthorizer`, `authz.load_requestheader_config`: delegated authorization.

Only `client` touches the library (lazily, so importing this package stays cheap).
"""

from adapter.k8s.authz import SubjectAccessReviewAuthorizer, load_requestheader_config
from adapter.k8s.client import KubeAuthError, KubeClient, KubeInvalid, KubeUnavailable
from adapter.k8s.inventory import Inventory, InventoryOptions
from adapter.k8s.leader import LeaderElectionOptions, LeaderElector
from adapter.k8s.reflector import ReflectorOptions
from adapter.k8s.status import StatusWriter, status_to_dict

__all__ = [
    "Inventory",
    "InventoryOptions",
    "KubeAuthError",
    "KubeClient",
    "KubeInvalid",
    "KubeUnavailable",
    "LeaderElectionOptions",
    "LeaderElector",
    "ReflectorOptions",
    "StatusWriter",
    "SubjectAccessReviewAuthorizer",
    "load_requestheader_config",
    "status_to_dict",
]
