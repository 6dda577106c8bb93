"""Projections of API objects (pure functions), and the reflector's backoff schedule."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.k8s import objects as o
from adapter.k8s.reflector import ReflectorOptions
from tests.k8s import builders as b


@pytest.mark.parametrize(
    ("product", "expected"),
    [
        ("A100", "A100"),
        ("NVIDIA-A100-SXM4-80GB", "A100"),
        ("nvidia-H100-80GB-HBM3", "H100"),
        ("AMD-MI300X-OAM", "MI300X"),
        ("INTEL-Max-1550-VGA", "Max-1550"),
        ("INTEL-Gaudi", "Gaudi"),
        ("Tesla-T4", "T4"),
        ("NVIDIA-", "NVIDIA-"),
    ],
    ids=["plain", "nvidia", "nvidia-lowercase", "amd", "intel-3-parts", "intel-2-parts", "other-vendor", "empty-part"],
)
def test_normalize_accelerator(product: str, expected: str) -> None:
    assert o.normalize_accelerator(product) == expected


def _pod(**kwargs: Any) -> o.PodRecord:
    record = o.project_pod(b.pod("p", **kwargs))
    assert record is not None
    return record


RS = {
    ("llm", "web-abc"): o.ReplicaSetRecord("llm", "web-abc", "web"),
    ("llm", "bare"): o.ReplicaSetRecord("llm", "bare", ""),
}


@pytest.mark.parametrize(
    ("pod", "owner"),
    [
        (_pod(owner="web-abc"), ("Deployment", "web")),
        (_pod(owner="bare"), None),
        (_pod(owner="gone-7f", labels={"pod-template-hash": "7f"}), ("Deployment", "gone")),
        (_pod(owner="gone-7f", labels={"pod-template-hash": "other"}), None),
        (_pod(owner="db", owner_kind="StatefulSet"), ("StatefulSet", "db")),
        (
            _pod(owner="big-1", owner_kind="StatefulSet", labels={"leaderworkerset.sigs.k8s.io/name": "big"}),
            ("LeaderWorkerSet", "big"),
        ),
        (_pod(owner="job-1", owner_kind="Job"), None),
        (_pod(), None),
    ],
    ids=["rs-known", "bare-rs", "rs-unknown-hash", "rs-unknown-no-match", "statefulset", "lws", "job", "no-owner"],
)
def test_pod_workload(pod: o.PodRecord, owner: tuple[str, str] | None) -> None:
    assert o.pod_workload(pod, RS) == owner


@pytest.mark.parametrize(
    ("phase", "ready", "terminating", "expected"),
    [
        ("Running", True, False, True),
        ("Running", False, False, False),
        ("Pending", False, False, False),
        ("Running", True, True, False),
        ("Succeeded", True, False, None),
        ("Failed", False, False, None),
    ],
    ids=["ready", "not-ready", "pending", "terminating", "succeeded", "failed"],
)
def test_pod_readiness(phase: str, ready: bool, terminating: bool, expected: bool | None) -> None:
    obj = b.pod("p", phase=phase, ready=ready)
    if terminating:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    record = o.project_pod(obj)
    assert (record.ready if record is not None else None) == expected


@pytest.mark.parametrize(
    ("spec_replicas", "status_replicas", "expected"),
    [(3, 2, 2), (3, 0, 3), (0, 0, 0), (None, 0, 1)],
    ids=["status-wins", "status-zero-uses-spec", "scaled-to-zero", "unset-spec-is-one"],
)
def test_scale_target_replicas(spec_replicas: int | None, status_replicas: int, expected: int) -> None:
    workload = o.project_deployment(b.deployment("d", replicas=spec_replicas, status_replicas=status_replicas))
    assert workload is not None
    target = workload.scale_target()
    assert target.replicas == expected
    assert target.spec_replicas == spec_replicas


@pytest.mark.parametrize(
    ("leader_gpus", "worker_gpus", "size", "with_leader", "expected"),
    [(8, 8, 4, True, 32), (0, 4, 3, True, 8), (2, 2, 1, True, 2), (0, 4, 2, False, 8), (0, 0, 2, True, 1)],
    ids=["uniform", "gpu-less-leader", "size-one", "no-leader-template", "no-gpus-counts-one"],
)
def test_leaderworkerset_gpus_count_the_group(
    leader_gpus: int, worker_gpus: int, size: int, with_leader: bool, expected: int
) -> None:
    obj = b.leaderworkerset("g", size=size, leader_gpus=leader_gpus, worker_gpus=worker_gpus)
    if not with_leader:
        del obj["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    workload = o.project_leaderworkerset(obj)
    assert workload is not None
    assert workload.gpus_per_replica == expected
    assert workload.pod_labels["leaderworkerset.sigs.k8s.io/name"] == "g"


@pytest.mark.parametrize(
    ("ports", "pod_ports", "expected"),
    [
        ([{"name": "http-metrics", "port": 9090, "targetPort": 19090}], {}, 19090),
        ([{"name": "metrics", "port": 9091}], {}, 9091),
        ([{"name": "http-metrics", "port": 9090, "targetPort": "m"}], {"m": 9100}, 9100),
        ([{"name": "http-metrics", "port": 9090, "targetPort": "m"}], {}, 9090),
        ([{"name": "grpc", "port": 9002}], {}, 9090),
        ([{"name": "http-metrics", "port": 9090, "targetPort": "9191"}], {}, 9191),
    ],
    ids=["numeric-target", "no-target", "named-target", "named-target-unresolved", "no-metrics-port", "digit-string"],
)
def test_epp_metrics_port(ports: list[dict[str, Any]], pod_ports: dict[str, int], expected: int) -> None:
    service = o.project_service(b.service("epp", selector={"app": "epp"}, ports=ports))
    assert service is not None
    pod = _pod(ports=pod_ports) if pod_ports else None
    assert service.metrics_port(pod) == expected


def test_projections_survive_malformed_objects() -> None:
    junk: dict[str, Any] = {"metadata": {"name": "x", "namespace": "n"}, "spec": "oops", "status": ["no"]}
    assert o.project_deployment(junk) is not None
    assert o.project_leaderworkerset(junk) is not None
    assert o.project_pod(junk) is not None
    assert o.project_service(junk) is not None
    assert o.project_pool_v1(junk) is not None
    assert o.project_node(junk) is None
    assert o.project_configmap({"metadata": {"name": "c"}, "data": {"n": 5}}) == o.ConfigMapRecord("", "c", {"n": "5"})
    va = o.project_va({"metadata": {"name": "v", "namespace": "n"}, "spec": []})
    assert va is not None
    assert va.spec is None
    assert "n/v" in va.error


def test_va_being_deleted_is_skipped() -> None:
    obj = b.va("a")
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert o.project_va(obj) is None


@pytest.mark.parametrize(
    ("ref", "service"),
    [
        ({"name": "epp"}, "epp"),
        ({"name": "epp", "kind": "Service"}, "epp"),
        ({"name": "x", "kind": "EndpointPicker"}, ""),
    ],
    ids=["default-kind", "service", "other-kind"],
)
def test_pool_epp_reference(ref: dict[str, str], service: str) -> None:
    v1 = b.pool_v1("p", selector={"a": "b"}, epp="ignored")
    v1["spec"]["endpointPickerRef"] = ref
    v1a2 = b.pool_v1alpha2("p", selector={"a": "b"}, epp="ignored")
    v1a2["spec"]["extensionRef"] = ref
    assert o.project_pool_v1(v1) == o.PoolRecord("llm", "p", "inference.networking.k8s.io/v1", {"a": "b"}, service)
    record = o.project_pool_v1alpha2(v1a2)
    assert record is not None
    assert (record.selector, record.epp_service) == ({"a": "b"}, service)


@pytest.mark.parametrize(
    ("failures", "expected_s"),
    [(1, 0.8), (2, 1.6), (3, 3.2), (6, 25.6), (7, 30.0), (500, 30.0)],
    ids=["first", "second", "third", "sixth", "capped", "huge"],
)
def test_backoff_schedule(failures: int, expected_s: float) -> None:
    options = ReflectorOptions()
    assert options.backoff_s(failures, 0.0) == pytest.approx(expected_s)
    assert options.backoff_s(failures, 1.0) == pytest.approx(expected_s * 1.2)
