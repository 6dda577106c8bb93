"""The HPA actuates from our external metric: kube-controller-manager's HPA controller (sync period 1 s) reads
`wva_desired_replicas` through the aggregator and scales the Deployment, whose ReplicaSet controller creates the
pods the emulated kubelet runs and Prometheus then scrapes.

The namespace is manifests/examples + manifests/examples/hpa, with one change to the shipped HPAs: a scale-down
stabilization window of 5 s instead of 120 s (so the test does not wait two minutes). Load is one model-wide
demand spread over every pod (`Node.set_demand`): 2.7 pods' worth of KV cache settles at 3 L4 + 1 A100
replicas; 0.4 goes back to 1 + 1 (worked numbers in node.py).

Measured and printed (run with `-s`): for every step, the time from the decision being served through the
aggregator to the Deployment's `spec.replicas` changing, and the HPA's events. Our own Events on the VA
(`kubectl describe va`): one per change of the decision, none in a steady cycle, counted in the audit log.
"""

from __future__ import annotations

import json
import time

import pytest

from .apiworld import read_audit
from .cluster import CHEAP, DEAR, until
from .conftest import Env
from .controlplane import ADAPTER_USER
from .timeline import Timeline

pytestmark = pytest.mark.e2e_k8s

SCALE_DOWN_WINDOW_S = 5
SHORT_SCALE_DOWN = {
    "target": {"kind": "HorizontalPodAutoscaler"},
    "patch": json.dumps(
        [{"op": "replace", "path": "/spec/behavior/scaleDown/stabilizationWindowSeconds", "value": SCALE_DOWN_WINDOW_S}]
    ),
}
LOW_DEMAND, HIGH_DEMAND = 0.4, 2.7
STEADY_S = 6.0
"""A steady stretch of six engine cycles (1 s) in which no Event may be written."""


def _event_writes(env: Env, since_bytes: int) -> list[tuple[str, str]]:
    """(verb, reason) of the adapter's Event writes in this test's namespace since `since_bytes` of the audit log."""
    log = env.plane.audit_log
    assert log is not None
    prefix = f"/apis/events.k8s.io/v1/namespaces/{env.namespace}/events"
    return [
        (r.verb, str((r.body or {}).get("reason") or "series"))
        for r in read_audit(log, user=ADAPTER_USER, since_bytes=since_bytes)
        if r.path.startswith(prefix)
    ]


def _audit_size(env: Env) -> int:
    assert env.plane.audit_log is not None
    return env.plane.audit_log.stat().st_size


def _hpa_reading(env: Env, name: str) -> str | None:
    """None once the HPA has read our metric (ScalingActive=True/ValidMetricFound)."""
    hpa = env.kube.hpa(env.namespace, name)
    conditions = {c["type"]: c for c in (hpa.get("status") or {}).get("conditions") or []}
    active = conditions.get("ScalingActive", {})
    if active.get("status") == "True" and active.get("reason") == "ValidMetricFound":
        return None
    return f"{name}: ScalingActive={active.get('status')}/{active.get('reason')}: {active.get('message')}"


def _print_events(env: Env, kind: str, name: str) -> list[dict[str, object]]:
    events = env.kube.events(env.namespace, kind=kind, name=name)
    for event in events:
        print(f"  {kind}/{name} {event['type']} {event['reason']}: {event['message']}")
    return events


@pytest.mark.timeout(240)
def test_hpa_scales_the_deployment_up_and_down_from_the_served_metric(env: Env) -> None:
    env.create_namespace(patches=[SHORT_SCALE_DOWN])
    env.set_demand(LOW_DEMAND)
    env.wait_scraped(2)
    adapter = env.start_adapter("solo")
    env.route_to(adapter)
    took = until(
        "both HPAs reading wva_desired_replicas",
        lambda: _hpa_reading(env, CHEAP) or _hpa_reading(env, DEAR),
        timeout_s=60,
    )
    print(f"[hpa] both HPAs read the metric (ScalingActive=True/ValidMetricFound) {took:.1f}s after routing")
    env.wait_decided({CHEAP: 1, DEAR: 1})
    line = Timeline(env.kube, env.namespace, CHEAP)
    line.watch_until(1, 1, timeout_s=30)

    # ---- load up: 1 -> 2 -> 3 L4 replicas, one step at a time, each applied by the HPA --------------------------
    t_up = line.now()
    env.set_demand(HIGH_DEMAND)
    took = line.watch_until(3, 3, timeout_s=90, hold_s=4, describe=env.describe)
    env.wait_pods(CHEAP, 3)
    print(f"[hpa] demand 0.4 -> 2.7: L4 served 3 and Deployment at 3 replicas after {took:.1f}s")
    latencies_up = []
    for step in (2, 3):
        served_s, spec_s = line.first_served(step, t_up), line.first_spec(step, t_up)
        assert served_s is not None, line.render()
        assert spec_s is not None, line.render()
        assert spec_s >= served_s - 0.2, f"the Deployment moved to {step} before {step} was served\n{line.render()}"
        latencies_up.append(spec_s - served_s)
        print(f"[hpa] scale-up to {step}: decision served at {served_s:.2f}s, spec.replicas={step} at {spec_s:.2f}s "
              f"-> decision->HPA latency {spec_s - served_s:.2f}s")  # fmt: skip
    env.wait_decided({CHEAP: 3, DEAR: 1}, timeout_s=30)
    print(f"[hpa] VA {CHEAP} status: {env.kube.va(env.namespace, CHEAP)['status']['desiredOptimizedAlloc']}")
    print("[hpa] HPA events of the scale-up:")
    events = _print_events(env, "HorizontalPodAutoscaler", CHEAP)
    rescales = [e["message"] for e in events if e["reason"] == "SuccessfulRescale"]
    assert any("New size: 2" in str(m) for m in rescales), rescales
    assert any("New size: 3" in str(m) for m in rescales), rescales
    _print_events(env, "Deployment", CHEAP)

    # ---- our Events: why the desired replicas changed, and silence while nothing changes ------------------------
    described = env.kube.kubectl("describe", "va", CHEAP, "-n", env.namespace).stdout
    events_part = described[described.index("Events:") :]
    print(f"[events] kubectl describe va {CHEAP} (Events):\n{events_part}")
    assert "DesiredReplicasIncreased" in events_part
    assert "desired replicas 1 → 2" in events_part
    assert "desired replicas 2 → 3" in events_part
    mark = _audit_size(env)
    time.sleep(STEADY_S)
    env.wait_decided({CHEAP: 3, DEAR: 1}, timeout_s=5, hold_s=0.5)  # still steady: the stretch really was
    steady = _event_writes(env, mark)
    assert steady == [], f"a steady cycle wrote Events: {steady}"
    up_writes = _event_writes(env, 0)
    print(f"[events] FIGURES Event writes in this namespace so far: {len(up_writes)} ({up_writes}); "
          f"in {STEADY_S:.0f} steady seconds (~{STEADY_S:.0f} cycles): {len(steady)}")  # fmt: skip

    # ---- load down: 3 -> 2 -> 1, each after the HPA's 5 s scale-down stabilization window -----------------------
    t_down = line.now()
    env.set_demand(LOW_DEMAND)
    took = line.watch_until(1, 1, timeout_s=90, hold_s=2, describe=env.describe)
    print(f"[hpa] demand 2.7 -> 0.4: L4 served 1 and Deployment at 1 replica after {took:.1f}s")
    latencies_down = []
    for step in (2, 1):
        served_s, spec_s = line.first_served(step, t_down), line.first_spec(step, t_down)
        assert served_s is not None, line.render()
        assert spec_s is not None, line.render()
        latencies_down.append(spec_s - served_s)
        print(f"[hpa] scale-down to {step}: decision served at {served_s:.2f}s, spec.replicas={step} at {spec_s:.2f}s "
              f"-> decision->HPA latency {spec_s - served_s:.2f}s (stabilization {SCALE_DOWN_WINDOW_S}s)")  # fmt: skip
    print(f"[hpa] timeline:\n{line.render()}")
    print("[hpa] HPA events (whole run):")
    _print_events(env, "HorizontalPodAutoscaler", CHEAP)
    print(
        f"[hpa] FIGURES decision->spec.replicas latency: scale-up {', '.join(f'{x:.2f}s' for x in latencies_up)}; "
        f"scale-down {', '.join(f'{x:.2f}s' for x in latencies_down)}"
    )
    writes = _event_writes(env, 0)
    reasons = [reason for verb, reason in writes if verb == "create"]
    assert reasons.count("DesiredReplicasDecreased") >= 2, writes  # 3 -> 2 -> 1
    print(f"[events] FIGURES Event writes for the whole run (up and down): {len(writes)}: {writes}")
    adapter.assert_running()
