"""The queueing model's learned state across an HA fail-over (issue 11): two `serve` replicas with leader
election on a real kube-apiserver's Lease, a real Prometheus scraping an emulated vLLM pod and EPP. The leader learns
(α, β, γ) and persists them in VA status; the follower never writes; after the leader stops, the new leader
continues the persisted filter (its accepted-observation count goes on from the old leader's) instead of
bootstrapping afresh, and serves the same λ* within 5 %. The recommender's checkpoint makes the same trip.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from adapter.k8s import resources as r
from adapter.k8s.leader import DEFAULT_LEASE_NAME
from adapter.recommender.recommender import VariantHistory
from tests.e2e_prometheus.prom import PrometheusProcess
from tests.k8s import builders as b

from .support import CHEAP, CONTROLLER_NS, Cluster, RealApiServer, Serve, Tls, check_of, serve_settings, until
from .test_qm_restart import LAMBDA, QM_CM, emulated, prometheus  # noqa: F401 — the fixtures

pytestmark = pytest.mark.e2e_k8s  # a real kube-apiserver per test (tests/e2e_k8s/realapi.py)

HA = {
    "leader_elect": True,
    "leader_election_lease_duration_s": 2.0,
    "leader_election_renew_deadline_s": 1.5,
    "leader_election_retry_period_s": 0.2,
    "engine_interval_s": 1.0,
    "saturation_window_s": 2.0,
}


def _learned(cluster: Cluster) -> dict[str, Any]:
    return dict(((cluster.va(CHEAP).get("status") or {}).get("learned") or {}).get("queueingModel") or {})


def _holder(api: RealApiServer) -> str:
    try:
        return str(api.get(r.LEASES, CONTROLLER_NS, DEFAULT_LEASE_NAME)["spec"].get("holderIdentity") or "")
    except KeyError:
        return ""


async def test_new_leader_continues_the_learned_filter(
    api: RealApiServer,
    cluster: Cluster,
    tls: Tls,
    prometheus: PrometheusProcess,  # noqa: F811 — the fixture imported from test_qm_restart
    tmp_path: Path,
) -> None:
    api.put(
        r.CONFIGMAPS,
        b.configmap(QM_CM, namespace=CONTROLLER_NS, data={"default": "targetTTFT: 2000\ntargetITL: 100\n"}),
    )
    prometheus.start()
    await prometheus.wait_ready()
    serves: dict[str, Serve] = {}

    async def start(name: str) -> None:
        await api.add_client(name)
        kubeconfig = api.kubeconfig_for(name, tmp_path / f"kubeconfig-{name}")
        settings = serve_settings(kubeconfig=kubeconfig, prometheus_url=prometheus.url, tls=tls, **HA)
        serves[name] = await Serve.start(name, settings, tls.ca_pem)

    try:
        await asyncio.gather(start("a"), start("b"))
        await until(
            "a leader learned and persisted the filter",
            check_of(lambda: None if _learned(cluster).get("accepted", -1) >= 1 else f"learned: {_learned(cluster)}"),
            timeout_s=40,
        )
        leader = next(n for n in serves if api.by(n, method="PATCH", path_contains="/variantautoscalings/"))
        follower = next(n for n in serves if n != leader)
        assert api.by(follower, method="PATCH", path_contains="/variantautoscalings/") == []
        before = _learned(cluster)
        lam_before = await serves[leader].sample(LAMBDA, variant_name=CHEAP)
        old_holder = _holder(api)
        assert await serves[leader].stop() == 0
        await until(
            "the follower holds the Lease",
            check_of(lambda: None if _holder(api) not in ("", old_holder) else f"holder {_holder(api)!r}"),
            timeout_s=10,
        )
        await until(
            "the new leader updated the filter",
            check_of(
                lambda: (
                    None
                    if api.by(follower, method="PATCH", path_contains="/variantautoscalings/")
                    and _learned(cluster).get("updated_s", 0) > before["updated_s"]
                    else "not yet"
                )
            ),
            timeout_s=20,
        )
        after = _learned(cluster)
        lam_after = await serves[follower].sample(LAMBDA, variant_name=CHEAP)
        print(
            f"\nold leader {leader}: accepted {before['accepted']}, α {before['alpha_ms']:.3f}, λ* {lam_before:.4f}; "
            f"new leader {follower}: accepted {after['accepted']}, α {after['alpha_ms']:.3f}, λ* {lam_after:.4f}"
        )
        assert after["accepted"] + after["rejected"] > before["accepted"] + before["rejected"]  # continued, not re-fit
        assert after["alpha_ms"] == pytest.approx(before["alpha_ms"], rel=0.05)
        assert lam_after == pytest.approx(lam_before, rel=0.05)
        # The recommender's checkpoint, written by the old leader through the API, is what the new leader's watch
        # holds: it restores to a history (tests/recommender shows a restored history giving the same bounds),
        # and the new leader serves a bounded recommendation.
        status = cluster.va(CHEAP)["status"]
        restored = VariantHistory.restore(status["learned"]["recommender"], now_s=0.0)
        assert restored.samples >= 1
        served = status["recommendation"]
        print(f"recommender checkpoint: {restored.samples} sample(s); served after the fail-over: {served}")
        assert status["recommendation"]["upperBound"] < 2**31 - 1
    finally:
        for serve in serves.values():
            if not serve.task.done():
                await serve.stop()
