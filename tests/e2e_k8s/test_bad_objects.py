"""Bad objects on the real API server: the CRD's CEL rule rejects min > max; a VA whose scale target does not exist
gets TargetResolved=False and serves nothing; deleting a VA removes its series (External Metrics API and /metrics)."""

from __future__ import annotations

import copy
import json
import urllib.parse

import pytest
import yaml

from .cluster import CHEAP, DEAR, EM_GROUP, EM_VERSION, EXAMPLES, until
from .conftest import Env

pytestmark = pytest.mark.e2e_k8s


def _example_va(name: str, **spec: object) -> dict[str, object]:
    va = yaml.safe_load((EXAMPLES / "va-llama-8b-l4.yaml").read_text())
    va = copy.deepcopy(va)
    va["metadata"]["name"] = name
    va["spec"].update(spec)
    return dict(va)


def _served_variants(env: Env) -> dict[str, str]:
    path = f"/apis/{EM_GROUP}/{EM_VERSION}/namespaces/{env.namespace}/wva_desired_replicas"
    result = env.kube.raw(path)
    assert result.returncode == 0, result.stderr
    return {i["metricLabels"]["variant_name"]: i["value"] for i in json.loads(result.stdout)["items"]}


def _raw_one(env: Env, variant: str) -> list[object]:
    selector = urllib.parse.quote(f"variant_name={variant}", safe="")
    path = f"/apis/{EM_GROUP}/{EM_VERSION}/namespaces/{env.namespace}/wva_desired_replicas?labelSelector={selector}"
    result = env.kube.raw(path)
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout)["items"])


def test_min_above_max_is_rejected_by_the_crd_schema(env: Env) -> None:
    env.create_namespace(hpa=False)
    bad = _example_va("upside-down", minReplicas=5, maxReplicas=2)
    bad["metadata"]["namespace"] = env.namespace  # type: ignore[index]
    result = env.kube.kubectl("apply", "-f", "-", stdin=json.dumps(bad), check=False)
    print(
        f"[bad] kubectl apply of a VA with minReplicas 5 > maxReplicas 2 -> exit {result.returncode}: {result.stderr}"
    )
    assert result.returncode != 0
    assert "minReplicas must be less than or equal to maxReplicas" in result.stderr
    listed = env.kube.kubectl("get", "va", "-n", env.namespace, "-o", "name").stdout.split()
    assert "variantautoscaling.llmd.ai/upside-down" not in listed, listed


def test_missing_target_is_reported_and_serves_nothing_and_deleting_a_va_removes_its_series(env: Env) -> None:
    env.create_namespace(hpa=False)
    env.set_demand(0.4)
    env.wait_scraped(2)
    ghost = _example_va("ghost", scaleTargetRef={"apiVersion": "apps/v1", "kind": "Deployment", "name": "ghost"})
    ghost["metadata"]["namespace"] = env.namespace  # type: ignore[index]
    env.kube.kubectl("apply", "-f", "-", stdin=json.dumps(ghost))
    adapter = env.start_adapter("solo")
    env.route_to(adapter)
    env.wait_decided({CHEAP: 1, DEAR: 1}, hold_s=0)

    def ghost_unresolved() -> str | None:
        condition = env.kube.condition(env.kube.va(env.namespace, "ghost"), "TargetResolved")
        return None if condition.get("status") == "False" else f"TargetResolved={condition}"

    until("TargetResolved=False on the VA whose Deployment does not exist", ghost_unresolved, timeout_s=30)
    ghost_status = env.kube.va(env.namespace, "ghost")["status"]
    condition = env.kube.condition(env.kube.va(env.namespace, "ghost"), "TargetResolved")
    print(f"[bad] ghost VA: TargetResolved={condition['status']}/{condition['reason']}: {condition.get('message')}")
    print(f"[bad] ghost VA status: {ghost_status.get('desiredOptimizedAlloc')}")
    assert _raw_one(env, "ghost") == [], "a VA without a scale target must serve no value"
    served = _served_variants(env)
    print(f"[bad] served with no selector: {served}")
    assert served == {CHEAP: "1", DEAR: "1"}, served
    table = env.kube.kubectl("get", "va", "-n", env.namespace).stdout
    print(f"[bad] kubectl get va:\n{table}")

    def exported(variant: str) -> bool:
        samples = adapter.metrics().get("wva_desired_replicas", [])
        return any(
            labels.get("variant_name") == variant and labels.get("namespace") == env.namespace for labels, _ in samples
        )

    assert exported(DEAR)
    assert not exported("ghost")
    env.kube.kubectl("delete", "va", DEAR, "-n", env.namespace)

    def gone() -> str | None:
        left = _raw_one(env, DEAR)
        if left or exported(DEAR):
            return f"still served: External Metrics {left}, /metrics {exported(DEAR)}"
        return None

    took = until(f"the series of deleted VA {DEAR} to disappear", gone, timeout_s=20)
    print(f"[bad] VA {DEAR} deleted: its series left the External Metrics API and /metrics after {took:.1f}s")
    assert _served_variants(env) == {CHEAP: "1"}
    adapter.assert_running()
