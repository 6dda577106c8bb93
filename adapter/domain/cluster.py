"""What the edges hand the reconciler: the cluster as the k8s inventory sees it, and one metrics collection.

Both are frozen values. The reconciler joins them into a `Snapshot` (the engine's only input), so the k8s/
and metrics/ packages never meet, and tests can build either side by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.snapshot import ModelTraffic, NodeGpus, PodMetrics, VariantView


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A pod behind a VA's scale target (pod → ReplicaSet → Deployment, or the StatefulSet/LWS owner)."""

    namespace: str
    name: str
    variant: str
    """The VA whose scale target owns the pod."""
    ready: bool
    ip: str = ""
    created_s: float | None = None
    """`metadata.creationTimestamp`, epoch seconds (whole seconds: RFC 3339 as the API server writes it)."""
    ready_since_s: float | None = None
    """`lastTransitionTime` of the pod's `Ready=True` condition, epoch seconds; None when not ready or unknown."""

    @property
    def startup_s(self) -> float | None:
        """Creation → Ready, seconds: scheduling, image pull, model load and readiness probe, as the user waits
        for them. None unless the pod is ready with both timestamps known. It is the *last* transition to
        Ready: a pod that went unready and back reports creation → that return (an over-estimate of its
        startup). Clocks of the API server and the kubelet may disagree by a little: never below 0.
        Example: created 12:00:00, Ready since 12:02:07 ⇒ 127.0."""
        if not self.ready or self.created_s is None or self.ready_since_s is None:
            return None
        return max(0.0, self.ready_since_s - self.created_s)


@dataclass(frozen=True, slots=True)
class EppEndpoint:
    """One EPP (endpoint picker) pod of an InferencePool, scraped directly for flow-control metrics."""

    namespace: str
    pod: str
    address: str
    """host:port of its metrics endpoint."""


@dataclass(frozen=True, slots=True)
class InferencePoolInfo:
    namespace: str
    name: str
    selector: Mapping[str, str]
    """Pod labels the pool selects; a VA belongs to the pool when its pod template carries them."""
    epp_service: str = ""
    epp_metrics_port: int = 9090
    endpoints: tuple[EppEndpoint, ...] = ()
    variants: tuple[VariantKey, ...] = ()
    """The VAs whose scale target's pod template matches `selector`."""


@dataclass(frozen=True, slots=True)
class ClusterView:
    """The inventory at one instant."""

    variants: tuple[VariantView, ...] = ()
    pods: tuple[PodInfo, ...] = ()
    configmaps: tuple[tuple[str, str, Mapping[str, str]], ...] = ()
    """(namespace, name, data) of every WVA ConfigMap (label app.kubernetes.io/name=workload-variant-autoscaler)."""
    inference_pools: tuple[InferencePoolInfo, ...] = ()
    nodes: tuple[NodeGpus, ...] = ()
    invalid: tuple[str, ...] = ()
    """One message per VA object that failed validation (it is not decided; the message names the field)."""
    invalid_keys: Mapping[VariantKey, str] = field(default_factory=dict)
    """The same, by VA: the leader writes the message into the VA's OptimizationReady condition."""
    synced: bool = False
    """True once every watch has completed its initial list."""

    def pod_variants(self) -> dict[tuple[str, str], str]:
        return {(p.namespace, p.name): p.variant for p in self.pods}

    def models(self) -> list[ModelKey]:
        return sorted({v.spec.model for v in self.variants})


@dataclass(frozen=True, slots=True)
class ModelQuery:
    """What to collect for one model: the retention window of its request count (scale-to-zero), and the
    `PodMetrics` and `ModelTraffic` fields its decision reads (`adapter.engine.reads`: its analyzer's and the
    engine's own); None reads every field. A collector asks for the fields some model of the cycle reads."""

    key: ModelKey
    retention_s: float = 600.0
    reads: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class Collection:
    """One cycle's metrics: per-pod samples already joined to their VA, and per-model traffic."""

    pods: tuple[PodMetrics, ...] = ()
    models: Mapping[ModelKey, ModelTraffic] = field(default_factory=dict)
    available: bool = True
    """False when the source could not be reached at all this cycle."""
    unavailable_models: frozenset[ModelKey] = frozenset()
    """Models whose collection failed or was partial (the fallback hierarchy decides for them)."""
    dropped_samples: Mapping[str, int] = field(default_factory=dict)
    """Samples dropped, by reason ("nan", "inf", "negative", "unknown-pod")."""
    errors: tuple[str, ...] = ()
    duration_s: float = 0.0
