"""Projections: API objects (JSON dicts) → the small frozen records the inventory keeps.

Each `project_*` is pure and total: it never raises on a malformed object (it returns None to skip it,
or records the problem), because one bad object in a watch must not stop the inventory. Records compare
by value, so the reflector can tell a change that matters (replicas, readiness, labels) from one that
does not (a status heartbeat).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from adapter.config import podtemplate
from adapter.config.va import parse_va
from adapter.domain.accelerators import normalize_accelerator
from adapter.domain.errors import ManifestError
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import NodeGpus, ScaleTarget, VariantSpec, VariantStatus, VllmArgs
from adapter.domain.timefmt import parse_rfc3339_s

log = logging.getLogger(__name__)

LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
POD_TEMPLATE_HASH_LABEL = "pod-template-hash"
GPU_VENDORS = ("nvidia.com", "amd.com", "intel.com")
EPP_METRICS_PORT_NAMES = ("http-metrics", "metrics")
DEFAULT_EPP_METRICS_PORT = 9090


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: Any, default: int = 0) -> int:
    """An int field; strings of digits are accepted (quantities such as allocatable GPUs are strings)."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return default
    return default


def _labels(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in _dict(value).items()}


def _meta(obj: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    metadata = _dict(obj.get("metadata"))
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or ""), metadata


def _controller(metadata: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, name) of the controlling ownerReference, or ("", "")."""
    for ref in _list(metadata.get("ownerReferences")):
        if isinstance(ref, dict) and ref.get("controller"):
            return str(ref.get("kind") or ""), str(ref.get("name") or "")
    return "", ""


# ---- VariantAutoscaling -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VaRecord:
    """A VA as watched: validated spec (None when invalid, with `error`), parsed and raw status."""

    key: VariantKey
    resource_version: str
    spec: VariantSpec | None
    status: VariantStatus = field(default_factory=VariantStatus)
    raw_status: Mapping[str, Any] = field(default_factory=dict)
    error: str = ""
    uid: str = ""
    """`metadata.uid`: what an Event's `regarding` names so `kubectl describe va` finds it."""


def project_va(obj: dict[str, Any]) -> VaRecord | None:
    """Validate with `adapter.config.va.parse_va`. A VA being deleted is skipped (upstream untracks it)."""
    namespace, name, metadata = _meta(obj)
    if metadata.get("deletionTimestamp"):
        return None
    key = VariantKey(namespace or "default", name)
    resource_version = str(metadata.get("resourceVersion") or "")
    uid = str(metadata.get("uid") or "")
    raw_status = _dict(obj.get("status"))
    try:
        parsed = parse_va(obj, source=f"VariantAutoscaling {namespace}/{name}")
    except ManifestError as exc:
        message = str(exc) if f"{namespace}/{name}" in str(exc) else f"{key}: {exc}"
        return VaRecord(key, resource_version, None, raw_status=raw_status, error=message, uid=uid)
    try:
        status = parsed.to_status()
    except (ValueError, TypeError) as exc:
        # Status is ours to write; a malformed one (another tool, an old version) is treated as empty and
        # overwritten by the leader's next write, rather than making the VA undecidable.
        log.warning("VariantAutoscaling %s: ignoring malformed status: %s", key, exc)
        status = VariantStatus()
    return VaRecord(key, resource_version, parsed.to_spec(), status, raw_status, uid=uid)


# ---- scale targets ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Workload:
    """A Deployment, StatefulSet or LeaderWorkerSet reduced to what a ScaleTarget and pool matching need."""

    kind: str
    namespace: str
    name: str
    spec_replicas: int | None
    status_replicas: int
    ready_replicas: int
    gpus_per_replica: int
    accelerator: str
    vllm: VllmArgs
    pod_labels: Mapping[str, str]
    """Labels the pods get (template labels, plus the LWS name label): matched against pool selectors."""

    def scale_target(self) -> ScaleTarget:
        """Current replicas: `status.replicas`, else `spec.replicas` (unset counts as 1, as Kubernetes defaults)."""
        spec = 1 if self.spec_replicas is None else self.spec_replicas
        return ScaleTarget(
            kind=self.kind,
            namespace=self.namespace,
            name=self.name,
            replicas=self.status_replicas or spec,
            ready_replicas=self.ready_replicas,
            spec_replicas=self.spec_replicas,
            gpus_per_replica=self.gpus_per_replica,
            accelerator=self.accelerator,
            vllm=self.vllm,
            role=podtemplate.role_of(self.pod_labels),
        )


def _spec_replicas(spec: Mapping[str, Any]) -> int | None:
    value = spec.get("replicas")
    return _int(value) if value is not None else None


def _template_labels(template: Mapping[str, Any]) -> dict[str, str]:
    return _labels(_dict(template.get("metadata")).get("labels"))


def _workload(kind: str, obj: dict[str, Any], template: dict[str, Any], gpus: int) -> Workload | None:
    namespace, name, _ = _meta(obj)
    if not name:
        return None
    spec, status = _dict(obj.get("spec")), _dict(obj.get("status"))
    labels = _template_labels(template)
    if kind == "LeaderWorkerSet":
        labels[LWS_NAME_LABEL] = name
    return Workload(
        kind=kind,
        namespace=namespace,
        name=name,
        spec_replicas=_spec_replicas(spec),
        status_replicas=_int(status.get("replicas")),
        ready_replicas=_int(status.get("readyReplicas")),
        gpus_per_replica=gpus,
        accelerator=podtemplate.accelerator(template),
        vllm=podtemplate.vllm_args(template),
        pod_labels=labels,
    )


def project_deployment(obj: dict[str, Any]) -> Workload | None:
    template = _dict(_dict(obj.get("spec")).get("template"))
    return _workload("Deployment", obj, template, podtemplate.gpus_per_replica(template))


def project_statefulset(obj: dict[str, Any]) -> Workload | None:
    template = _dict(_dict(obj.get("spec")).get("template"))
    return _workload("StatefulSet", obj, template, podtemplate.gpus_per_replica(template))


def _has_gpu_request(template: Mapping[str, Any]) -> bool:
    for container in _list(_dict(template.get("spec")).get("containers")):
        resources = _dict(_dict(container).get("resources"))
        declared = {**_dict(resources.get("limits")), **_dict(resources.get("requests"))}
        if any(name in declared for name in podtemplate.GPU_RESOURCES):
            return True
    return False


def _template_gpus(template: Mapping[str, Any]) -> int:
    """GPUs of one pod, 0 when it requests none (podtemplate maps 0 to 1, which is right for a replica
    but would count a GPU-less LWS leader as one GPU)."""
    return podtemplate.gpus_per_replica(template) if _has_gpu_request(template) else 0


def project_leaderworkerset(obj: dict[str, Any]) -> Workload | None:
    """A replica is a group of `size` pods: one leader (leaderTemplate, or workerTemplate when absent) and
    size-1 workers. GPUs per replica count the whole group (research §6.3); the leader template supplies
    the accelerator and the vLLM arguments."""
    lwt = _dict(_dict(obj.get("spec")).get("leaderWorkerTemplate"))
    worker = _dict(lwt.get("workerTemplate"))
    leader = _dict(lwt.get("leaderTemplate")) or worker
    size = max(1, _int(lwt.get("size"), 1))
    gpus = _template_gpus(leader) + (size - 1) * _template_gpus(worker)
    return _workload("LeaderWorkerSet", obj, leader, gpus or 1)


# ---- pods and their owners --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodRecord:
    namespace: str
    name: str
    labels: Mapping[str, str]
    owner_kind: str
    owner_name: str
    ready: bool
    ip: str
    ports: Mapping[str, int]
    """Named container ports (resolves a Service's named targetPort)."""
    created_s: float | None = None
    """`metadata.creationTimestamp` (epoch seconds); None when absent or not a timestamp."""
    ready_since_s: float | None = None
    """`lastTransitionTime` of the `Ready=True` condition; None when not ready or the time is absent."""


def _timestamp(value: Any) -> float | None:
    """An RFC 3339 timestamp as the API server writes it, else None (a malformed time is not worth a pod)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_rfc3339_s(value)
    except ValueError:
        return None


def project_pod(obj: dict[str, Any]) -> PodRecord | None:
    """Running and pending pods; finished ones (Succeeded / Failed) are skipped. A terminating pod is kept
    but never counted ready: it is leaving and its metrics would mislead. The creation time and the time the
    pod last became Ready give its startup duration (`PodInfo.startup_s`)."""
    namespace, name, metadata = _meta(obj)
    status = _dict(obj.get("status"))
    if not name or status.get("phase") in ("Succeeded", "Failed"):
        return None
    ready_condition = next(
        (
            c
            for c in _list(status.get("conditions"))
            if isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
        ),
        None,
    )
    ready = ready_condition is not None and not metadata.get("deletionTimestamp")
    ports: dict[str, int] = {}
    for container in _list(_dict(obj.get("spec")).get("containers")):
        for raw_port in _list(_dict(container).get("ports")):
            port = _dict(raw_port)
            if port.get("name") and _int(port.get("containerPort")) > 0:
                ports.setdefault(str(port["name"]), _int(port["containerPort"]))
    owner_kind, owner_name = _controller(metadata)
    return PodRecord(
        namespace=namespace,
        name=name,
        labels=_labels(metadata.get("labels")),
        owner_kind=owner_kind,
        owner_name=owner_name,
        ready=ready,
        ip=str(status.get("podIP") or ""),
        ports=ports,
        created_s=_timestamp(metadata.get("creationTimestamp")),
        ready_since_s=_timestamp(ready_condition.get("lastTransitionTime")) if ready and ready_condition else None,
    )


@dataclass(frozen=True, slots=True)
class ReplicaSetRecord:
    namespace: str
    name: str
    deployment: str
    """The controlling Deployment's name, "" for a bare ReplicaSet."""


def project_replicaset(obj: dict[str, Any]) -> ReplicaSetRecord | None:
    namespace, name, metadata = _meta(obj)
    kind, owner = _controller(metadata)
    return ReplicaSetRecord(namespace, name, owner if kind == "Deployment" else "")


def pod_workload(pod: PodRecord, replicasets: Mapping[tuple[str, str], ReplicaSetRecord]) -> tuple[str, str] | None:
    """(kind, name) of the workload that owns `pod`: pod → ReplicaSet → Deployment, StatefulSet, or the
    LWS named by the pod's `leaderworkerset.sigs.k8s.io/name` label (LWS pods belong to StatefulSets the
    LWS owns). When the ReplicaSet is not (yet) in the cache, the Deployment name is derived from the
    ReplicaSet name and the pod's `pod-template-hash` label, which is how the Deployment controller names it.
    """
    lws = pod.labels.get(LWS_NAME_LABEL)
    if lws:
        return "LeaderWorkerSet", lws
    if pod.owner_kind == "ReplicaSet":
        rs = replicasets.get((pod.namespace, pod.owner_name))
        if rs is not None:
            return ("Deployment", rs.deployment) if rs.deployment else None
        suffix = "-" + pod.labels.get(POD_TEMPLATE_HASH_LABEL, "\0")
        if pod.owner_name.endswith(suffix):
            return "Deployment", pod.owner_name[: -len(suffix)]
        return None
    if pod.owner_kind == "StatefulSet":
        return "StatefulSet", pod.owner_name
    return None


# ---- ConfigMaps, Services, InferencePools -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigMapRecord:
    namespace: str
    name: str
    data: Mapping[str, str]
    uid: str = ""


def project_configmap(obj: dict[str, Any]) -> ConfigMapRecord | None:
    namespace, name, metadata = _meta(obj)
    data = {str(k): v if isinstance(v, str) else str(v) for k, v in _dict(obj.get("data")).items()}
    return ConfigMapRecord(namespace, name, data, str(metadata.get("uid") or ""))


@dataclass(frozen=True, slots=True)
class ServicePort:
    name: str
    port: int
    target_port: int | str


@dataclass(frozen=True, slots=True)
class ServiceRecord:
    namespace: str
    name: str
    selector: Mapping[str, str]
    ports: tuple[ServicePort, ...]

    def metrics_port(self, pod: PodRecord | None) -> int:
        """The EPP's metrics port on its pods: the target port of the Service port named `http-metrics` or
        `metrics` (a named target port is resolved on `pod`), else 9090 (the EPP's default)."""
        for wanted in EPP_METRICS_PORT_NAMES:
            for port in self.ports:
                if port.name != wanted:
                    continue
                if isinstance(port.target_port, int) and port.target_port > 0:
                    return port.target_port
                if isinstance(port.target_port, str) and pod is not None and port.target_port in pod.ports:
                    return pod.ports[port.target_port]
                return port.port
        return DEFAULT_EPP_METRICS_PORT


def project_service(obj: dict[str, Any]) -> ServiceRecord | None:
    namespace, name, _ = _meta(obj)
    spec = _dict(obj.get("spec"))
    ports = []
    for item in _list(spec.get("ports")):
        raw = _dict(item)
        number = _int(raw.get("port"))
        target = raw.get("targetPort")
        target_port: int | str = target if isinstance(target, int | str) and not isinstance(target, bool) else 0
        if isinstance(target_port, str) and target_port.isdigit():
            target_port = int(target_port)
        ports.append(ServicePort(str(raw.get("name") or ""), number, target_port or number))
    return ServiceRecord(namespace, name, _labels(spec.get("selector")), tuple(ports))


@dataclass(frozen=True, slots=True)
class PoolRecord:
    namespace: str
    name: str
    api_version: str
    selector: Mapping[str, str]
    epp_service: str
    """The Service in front of the pool's endpoint picker ("" when the reference is not a Service)."""


def project_pool_v1(obj: dict[str, Any]) -> PoolRecord | None:
    """`inference.networking.k8s.io/v1`: `spec.selector.matchLabels`, `spec.endpointPickerRef{kind, name}`."""
    namespace, name, _ = _meta(obj)
    spec = _dict(obj.get("spec"))
    ref = _dict(spec.get("endpointPickerRef"))
    service = str(ref.get("name") or "") if ref.get("kind", "Service") in ("Service", "") else ""
    selector = _labels(_dict(spec.get("selector")).get("matchLabels"))
    return PoolRecord(namespace, name, "inference.networking.k8s.io/v1", selector, service)


def project_pool_v1alpha2(obj: dict[str, Any]) -> PoolRecord | None:
    """`inference.networking.x-k8s.io/v1alpha2`: `spec.selector` (a plain label map), `spec.extensionRef`."""
    namespace, name, _ = _meta(obj)
    spec = _dict(obj.get("spec"))
    ref = _dict(spec.get("extensionRef"))
    service = str(ref.get("name") or "") if ref.get("kind", "Service") in ("Service", "") else ""
    return PoolRecord(namespace, name, "inference.networking.x-k8s.io/v1alpha2", _labels(spec.get("selector")), service)


# ---- nodes ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeRecord:
    name: str
    gpus: tuple[NodeGpus, ...]


def project_node(obj: dict[str, Any]) -> NodeRecord | None:
    """GPUs a node offers, per vendor: label `<vendor>/gpu.product` (AMD also `amd.com/gpu.product-name`) and
    allocatable `<vendor>/gpu`. Nodes without GPUs are skipped."""
    _, name, metadata = _meta(obj)
    labels = _labels(metadata.get("labels"))
    allocatable = _dict(_dict(obj.get("status")).get("allocatable"))
    gpus = []
    for vendor in GPU_VENDORS:
        product = labels.get(f"{vendor}/gpu.product") or labels.get(f"{vendor}/gpu.product-name", "")
        count = _int(allocatable.get(f"{vendor}/gpu"))
        if product and count > 0:
            gpus.append(NodeGpus(name=name, accelerator=normalize_accelerator(product), allocatable_gpus=count))
    return NodeRecord(name, tuple(gpus)) if gpus else None
