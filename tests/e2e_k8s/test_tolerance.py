"""The HPA tolerance pitfall on the real HPA controller (docs/deployment.md "The HPA tolerance pitfall";
docs/deviations.md row 4).

kube-controller-manager runs with the default `--horizontal-pod-autoscaler-tolerance=0.1`, and this test's L4
HPA drops the shipped `tolerance: "0"` (as on a cluster without HPAConfigurableTolerance, or an HPA written
without it). L4 runs 20 replicas, every pod saturated: the adapter asks for 21, and 21/20 = 1.05 is inside the
10 % band, so the HPA never applies it. Upstream WVA would now freeze the model: its desired (21) never equals
current (20), and that blocks every later decision. Ours stops waiting after `transitionTimeout` (10 s here,
set in a namespace-local `wva-saturation-scaling-config`, layered over the global one): when the load falls,
the scale-down is decided. Finally `tolerance: "0"` on the HPA (beta and on by default in 1.35) makes the HPA
apply what it swallowed.
"""

from __future__ import annotations

import calendar
import json
import time

import pytest

from .cluster import CHEAP, DEAR
from .conftest import Env
from .timeline import Timeline

pytestmark = pytest.mark.e2e_k8s

START_REPLICAS = 20
TRANSITION_TIMEOUT_S = 10
HOT = 19.0  # pods' worth of KV cache over 21 pods: 0.905 each, every pod saturated (threshold 0.80)
COOL = 2.1  # 0.1 each: scale-down is safe


def _json_patch(kind: str, name: str, *ops: dict[str, object]) -> dict[str, object]:
    return {"target": {"kind": kind, "name": name}, "patch": json.dumps(list(ops))}


PATCHES = [
    _json_patch("Deployment", CHEAP, {"op": "add", "path": "/spec/replicas", "value": START_REPLICAS}),
    _json_patch("VariantAutoscaling", CHEAP, {"op": "replace", "path": "/spec/maxReplicas", "value": 30}),
    _json_patch(
        "HorizontalPodAutoscaler",
        CHEAP,
        {"op": "replace", "path": "/spec/maxReplicas", "value": 30},
        {"op": "remove", "path": "/spec/behavior/scaleUp/tolerance"},
        {"op": "remove", "path": "/spec/behavior/scaleDown/tolerance"},
        {"op": "replace", "path": "/spec/behavior/scaleDown/stabilizationWindowSeconds", "value": 0},
    ),
]


def _namespace_config(env: Env) -> None:
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "wva-saturation-scaling-config",
            "namespace": env.namespace,
            "labels": {"app.kubernetes.io/name": "workload-variant-autoscaler"},
        },
        "data": {"default": f"transitionTimeout: {TRANSITION_TIMEOUT_S}s\n"},
    }
    env.kube.kubectl("apply", "-f", "-", stdin=json.dumps(configmap))


def _hpa_line(env: Env) -> str:
    hpa = env.kube.hpa(env.namespace, CHEAP)
    status = hpa["status"]
    current = [m.get("external", {}).get("current") for m in status.get("currentMetrics") or []]
    tolerance = {k: (hpa["spec"].get("behavior") or {}).get(k, {}).get("tolerance") for k in ("scaleUp", "scaleDown")}
    return (
        f"HPA {CHEAP}: currentReplicas={status.get('currentReplicas')} desiredReplicas={status.get('desiredReplicas')} "
        f"currentMetrics={current} behavior tolerance={tolerance}"
    )


@pytest.mark.timeout(300)
def test_tolerance_swallows_20_to_21_and_the_transition_timeout_keeps_the_model_deciding(env: Env) -> None:
    env.create_namespace(patches=PATCHES)
    _namespace_config(env)
    env.set_demand(HOT)
    env.wait_pods(CHEAP, START_REPLICAS, timeout_s=60)
    env.wait_pods(DEAR, 1)
    took = env.wait_scraped(START_REPLICAS + 1)
    print(f"[tolerance] 20 L4 + 1 A100 pods scraped by Prometheus after {took:.1f}s more")
    adapter = env.start_adapter("solo")
    env.route_to(adapter)
    line = Timeline(env.kube, env.namespace, CHEAP)

    # ---- 20 -> 21 decided and served; the HPA swallows it (|21/20 - 1| = 0.05 <= 0.1) --------------------------
    line.watch_until(START_REPLICAS + 1, START_REPLICAS, timeout_s=60, describe=env.describe)
    alloc = env.kube.va(env.namespace, CHEAP)["status"]["desiredOptimizedAlloc"]
    assert (alloc["numReplicas"], alloc["reason"].split(" (")[0]) == (21, "saturation-only mode: scale-up"), alloc
    # lastUpdate: when the desired was set, which transitionTimeout counts from (1 s resolution).
    decided_s = calendar.timegm(time.strptime(alloc["lastUpdate"], "%Y-%m-%dT%H:%M:%SZ")) - line.started_wall_s
    print(f"[tolerance] L4 21 decided at {decided_s:.2f}s (VA lastUpdate {alloc['lastUpdate']}): {alloc['reason']}")
    syncs_s = 6.0
    deadline = time.monotonic() + syncs_s
    while time.monotonic() < deadline:
        _, replicas = line.sample()
        assert replicas == START_REPLICAS, f"the HPA applied a step inside its tolerance\n{line.render()}"
        time.sleep(0.2)
    hpa = env.kube.hpa(env.namespace, CHEAP)
    print(f"[tolerance] after {syncs_s:g}s of 1s HPA syncs: {_hpa_line(env)}")
    assert hpa["status"]["desiredReplicas"] == START_REPLICAS, _hpa_line(env)
    assert hpa["status"]["currentMetrics"][0]["external"]["current"]["averageValue"] == "1050m", _hpa_line(env)

    # ---- the load falls; the unapplied 21 blocks the model until transitionTimeout, then 20 -> 19 is decided -----
    fell_s = line.now()
    env.set_demand(COOL)
    line.watch_until(START_REPLICAS - 1, START_REPLICAS, timeout_s=TRANSITION_TIMEOUT_S + 40, describe=env.describe)
    moved_s = line.first_served(START_REPLICAS - 1, fell_s)
    assert moved_s is not None
    held_s = moved_s - decided_s
    print(
        f"[tolerance] load fell at {fell_s:.2f}s; the swallowed 21 held the model until {moved_s:.2f}s "
        f"({held_s:.1f}s after it was decided, transitionTimeout {TRANSITION_TIMEOUT_S}s); now serving 19, which "
        f"the HPA swallows too (19/20 = 0.95): {_hpa_line(env)}"
    )
    assert held_s >= TRANSITION_TIMEOUT_S - 1.5, (
        f"the model moved before transitionTimeout\n{line.render(everything=True)}"
    )

    # ---- the remedy: tolerance 0 on the HPA; it applies the step it swallowed --------------------------------------
    zero = {"spec": {"behavior": {"scaleUp": {"tolerance": "0"}, "scaleDown": {"tolerance": "0"}}}}
    env.kube.kubectl("patch", "hpa", CHEAP, "-n", env.namespace, "--type=merge", "-p", json.dumps(zero))
    remedied_s = line.now()

    def applied() -> bool:
        _, replicas = line.sample()
        return replicas < START_REPLICAS

    deadline = time.monotonic() + 30
    while not applied():
        assert time.monotonic() < deadline, (
            f"tolerance 0 did not make the HPA scale down\n{line.render(everything=True)}"
        )
        time.sleep(0.1)
    print(f"[tolerance] HPA patched to tolerance 0 at {remedied_s:.2f}s: {_hpa_line(env)}")
    print(f"[tolerance] timeline:\n{line.render()}")
    print("[tolerance] HPA events:")
    rescales = []
    for event in env.kube.events(env.namespace, kind="HorizontalPodAutoscaler", name=CHEAP):
        print(f"  {event['type']} {event['reason']}: {event['message']}")
        if event["reason"] == "SuccessfulRescale":
            rescales.append(str(event["message"]))
    assert not any("New size: 21" in m for m in rescales), rescales
    assert any("New size: 19" in m for m in rescales), rescales
    adapter.assert_running()
