"""Builders of API objects (as the API server returns them) for the k8s tests."""

from __future__ import annotations

from typing import Any

from adapter.k8s import resources as r

NS = "llm"
WVA_LABEL = {"app.kubernetes.io/name": "workload-variant-autoscaler"}


def va(
    name: str,
    *,
    target: str | None = None,
    kind: str = "Deployment",
    namespace: str = NS,
    model: str = "meta/llama-3.1-8b",
    min_replicas: int = 1,
    max_replicas: int = 4,
    cost: str = "10.0",
    labels: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
    **spec_extra: Any,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "llmd.ai/v1alpha1",
        "kind": "VariantAutoscaling",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "scaleTargetRef": {"kind": kind, "name": target or name},
            "modelID": model,
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "variantCost": cost,
            **spec_extra,
        },
    }
    if status is not None:
        obj["status"] = status
    return obj


def template(
    *,
    labels: dict[str, str] | None = None,
    gpus: int = 1,
    args: list[str] | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "vllm", "image": "vllm/vllm-openai", "args": args or []}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {"containers": [container]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"metadata": {"labels": labels or {"app": "vllm"}}, "spec": spec}


def deployment(
    name: str,
    *,
    namespace: str = NS,
    replicas: int | None = 2,
    status_replicas: int = 2,
    ready: int = 2,
    tmpl: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": name}},
        "template": tmpl or template(labels={"app": name}),
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"replicas": status_replicas, "readyReplicas": ready},
    }


def statefulset(name: str, *, namespace: str = NS, replicas: int = 1, ready: int = 1) -> dict[str, Any]:
    obj = deployment(name, namespace=namespace, replicas=replicas, status_replicas=replicas, ready=ready)
    obj["kind"] = "StatefulSet"
    return obj


def leaderworkerset(
    name: str, *, namespace: str = NS, replicas: int = 2, size: int = 4, leader_gpus: int = 8, worker_gpus: int = 8
) -> dict[str, Any]:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": size,
                "leaderTemplate": template(
                    gpus=leader_gpus,
                    labels={"app": name, "role": "leader"},
                    args=["--tensor-parallel-size", "8", "--max-num-seqs", "128"],
                    node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                ),
                "workerTemplate": template(gpus=worker_gpus, labels={"app": name, "role": "worker"}),
            },
        },
        "status": {"replicas": replicas, "readyReplicas": replicas - 1},
    }


def replicaset(name: str, *, deployment_name: str, namespace: str = NS) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment_name, "controller": True}
            ],
        },
        "spec": {
            "selector": {"matchLabels": {"app": deployment_name}},
            "template": template(labels={"app": deployment_name}),
        },
    }


def pod(
    name: str,
    *,
    owner_kind: str = "ReplicaSet",
    owner: str = "",
    namespace: str = NS,
    ready: bool = True,
    phase: str = "Running",
    ip: str = "10.0.0.1",
    labels: dict[str, str] | None = None,
    ports: dict[str, int] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner_kind, "name": owner, "controller": True}]
    container: dict[str, Any] = {"name": "c", "image": "x"}
    if ports:
        container["ports"] = [{"name": n, "containerPort": p} for n, p in ports.items()]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [container]},
        "status": {
            "phase": phase,
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def configmap(
    name: str, *, namespace: str, data: dict[str, str], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": WVA_LABEL if labels is None else labels},
        "data": data,
    }


def service(name: str, *, namespace: str = NS, selector: dict[str, str], ports: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": selector, "ports": ports},
    }


def pool_v1(name: str, *, namespace: str = NS, selector: dict[str, str], epp: str) -> dict[str, Any]:
    return {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": selector},
            "targetPorts": [{"number": 8000}],
            "endpointPickerRef": {"name": epp, "port": {"number": 9002}},
        },
    }


def pool_v1alpha2(name: str, *, namespace: str = NS, selector: dict[str, str], epp: str) -> dict[str, Any]:
    return {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha2",
        "kind": "InferencePool",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": selector, "targetPortNumber": 8000, "extensionRef": {"name": epp}},
    }


def node(name: str, *, labels: dict[str, str], allocatable: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": "64", **allocatable}},
    }


def lease(name: str, *, namespace: str, holder: str, duration_s: int = 60, transitions: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration_s,
            "acquireTime": "2026-01-01T00:00:00.000000Z",
            "renewTime": "2026-01-01T00:00:00.000000Z",
            "leaseTransitions": transitions,
        },
    }


ALL_TYPES = (
    r.VARIANT_AUTOSCALINGS,
    r.DEPLOYMENTS,
    r.STATEFULSETS,
    r.REPLICASETS,
    r.LEADERWORKERSETS,
    r.PODS,
    r.SERVICES,
    r.CONFIGMAPS,
    r.NODES,
    r.INFERENCE_POOLS_V1,
    r.INFERENCE_POOLS_V1ALPHA2,
    r.LEASES,
    r.SUBJECT_ACCESS_REVIEWS,
)
