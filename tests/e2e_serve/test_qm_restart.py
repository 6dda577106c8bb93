"""The queueing-model analyzer's learned state survives a `serve` restart (issue 11), end to end: a real
Prometheus scrapes an emulated vLLM pod (TTFT, ITL and token histograms) and an emulated EPP (scheduler
dispatch rate); `serve` learns (α, β, γ), persists them in VA status (`learned.queueingModel`), is stopped,
and a new `serve` process-worth of state (a fresh engine, as after a restart or fail-over) resumes from the
status: its filter continues from the persisted state (counts go on, α moves by one update) instead of
bootstrapping afresh. (With one steady pod the three parameters are not all identifiable, so λ* keeps drifting
slowly along the curve that fits the single operating point; λ* within 1 % across a restart under varied load is
`tests/queueing/test_analyzer.py::test_engine_learns_persists_and_a_restart_resumes_with_the_same_capacity`.)

The API server is a real kube-apiserver with our CRD installed (`tests/e2e_k8s/realapi.py`), so the learned state
makes the round trip through the CRD's structural schema (`status.learned` keeps unknown fields) and etcd.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from adapter.k8s import resources as r
from tests.e2e_prometheus.prom import PrometheusProcess, Target
from tests.k8s import builders as b
from tests.metrics.emulators import EppPod, MetricsServer, VllmPod

from .support import CHEAP, CONTROLLER_NS, MODEL, NS, Cluster, RealApiServer, Serve, Tls, serve_settings, until

pytestmark = pytest.mark.e2e_k8s  # a real kube-apiserver per test (tests/e2e_k8s/realapi.py)

QM_CM = "wva-queueing-model-config"
LAMBDA = "wva_queueing_model_max_rps_per_replica"


@pytest.fixture
async def emulated() -> AsyncIterator[tuple[VllmPod, EppPod, list[MetricsServer]]]:
    pod, epp = VllmPod(MODEL), EppPod(pool="pool")
    pod.set_load(
        kv_cache_usage=0.3,
        waiting=0,
        running=6,
        success_rps=0.5,
        input_tokens=512,
        output_tokens=128,
        ttft_s=0.35,
        itl_s=0.045,
    )
    epp.set_dispatch_rate(namespace=NS, pod=f"{CHEAP}-0", model=MODEL, rps=0.5)
    servers = [await MetricsServer(pod.render).start(), await MetricsServer(epp.render).start()]
    try:
        yield pod, epp, servers
    finally:
        for server in servers:
            await server.stop()


@pytest.fixture
def prometheus(emulated: tuple[VllmPod, EppPod, list[MetricsServer]], tmp_path: Path) -> Iterator[PrometheusProcess]:
    vllm, epp = emulated[2]
    targets = [Target(vllm.address, NS, f"{CHEAP}-0"), Target(epp.address, NS, "epp-0")]
    prom = PrometheusProcess(tmp_path / "prometheus", {"vllm": targets})
    try:
        yield prom
    finally:
        prom.stop()


async def _lambda_star(serve: Serve) -> float:
    return await serve.sample(LAMBDA, variant_name=CHEAP)


async def test_learned_parameters_survive_a_restart(
    api: RealApiServer, cluster: Cluster, tls: Tls, prometheus: PrometheusProcess, tmp_path: Path
) -> None:
    api.put(
        r.CONFIGMAPS,
        b.configmap(
            QM_CM, namespace=CONTROLLER_NS, data={"default": "targetTTFT: 2000\ntargetITL: 100\ntuningEnabled: true\n"}
        ),
    )
    prometheus.start()
    await prometheus.wait_ready()
    settings = serve_settings(
        kubeconfig=api.write_kubeconfig(tmp_path / "kubeconfig"),
        prometheus_url=prometheus.url,
        tls=tls,
        engine_interval_s=1.0,
        saturation_window_s=2.0,
    )

    def persisted() -> str | None:
        learned = (cluster.va(CHEAP).get("status") or {}).get("learned") or {}
        return None if "queueingModel" in learned else "no learned.queueingModel in status yet"

    first = await Serve.start("serve-1", settings, tls.ca_pem)
    try:
        await until("λ* learned and served on /metrics", _positive(first), timeout_s=40)
        await until("the filter state persisted in VA status", _sync(persisted), timeout_s=10)
        before = await _lambda_star(first)
        state = cluster.va(CHEAP)["status"]["learned"]["queueingModel"]
        alpha = state["alpha_ms"]
        print("serve-1 state:", {k: state.get(k) for k in ("accepted", "rejected", "lost_cycles", "last_nis")})
        assert await first.stop() == 0
    finally:
        if not first.task.done():
            await first.stop()
    print(f"serve-1: λ* = {before:.4f} req/s per replica, α = {alpha:.3f} ms, persisted in VA status")

    second = await Serve.start("serve-2", settings, tls.ca_pem)
    try:
        await until("the new process serves λ*", _positive(second), timeout_s=40)
        after = await _lambda_star(second)
        resumed = cluster.va(CHEAP)["status"]["learned"]["queueingModel"]
        print(
            f"serve-2 (fresh engine, same VA status): λ* = {after:.4f}, α = {resumed['alpha_ms']:.3f} ms, "
            f"accepted {resumed['accepted']} (serve-1 stopped at {state['accepted']})"
        )
        # The new process continued the persisted filter (its counts go on) instead of bootstrapping afresh
        # (which starts at 0 accepted), and one more update moved α by a step, not to a new fit.
        assert resumed["accepted"] + resumed["rejected"] > state["accepted"] + state["rejected"]
        assert resumed["alpha_ms"] == pytest.approx(state["alpha_ms"], rel=0.05)
        assert after == pytest.approx(before, rel=0.05)
        assert await second.stop() == 0
    finally:
        if not second.task.done():
            await second.stop()


def _positive(serve: Serve):  # type: ignore[no-untyped-def]
    async def check() -> str | None:
        value = await _lambda_star(serve)
        return None if value > 0 else "λ* not on /metrics yet"

    return check


def _sync(fn):  # type: ignore[no-untyped-def]
    async def check() -> str | None:
        return fn()  # type: ignore[no-any-return]

    return check
