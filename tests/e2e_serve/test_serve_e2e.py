"""The whole `serve` pipeline end to end, with a real Prometheus.

    emulated vLLM pods ──scrape 1 s──► Prometheus (Debian's binary) ──PromQL──► run_serve (in-process)
    kube-apiserver + etcd (VAs, Deployments, ReplicaSets, Pods, ConfigMaps) ◄──watch / PATCH status──┘
                                                    └─► HTTPS External Metrics API, KEDA gRPC, /metrics, /readyz

Two variants of one model: `l4` (cost 1) and `a100` (cost 5), min 1, max 5, one pod each. The load goes up on
every pod, so the saturation analyzer asks for one more replica on the cheapest variant; the test plays the
HPA (Deployment replicas follow, the new pod appears); then Prometheus is killed (fallback, values held,
still ready) and restarted (metrics found again from every pod, then the next decision is taken); finally the
load falls, a live ConfigMap edit shortens `transitionTimeout`, the never-applied desired stops blocking, and
the safe scale-down is decided and served.

`serve` runs with `--saturation-window 2s` so a fall in load shows within two scrapes. The pod `l4-1`
is scraped from the start (a static scrape config cannot gain targets) but belongs to no VA until its Pod
object appears; until then the collector drops its samples as an unknown pod. Most of the run time is
Prometheus' own: its scrape manager applies new targets every 5 s, at start and again after the restart.

Run with `-s` to see the transcript.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from adapter.k8s import resources as r
from adapter.replay import fixture, runner
from tests.e2e_prometheus.prom import PrometheusProcess, Target
from tests.k8s import builders as b
from tests.metrics.emulators import MetricsServer, VllmPod

from .support import (
    CHEAP,
    CONTROLLER_NS,
    DEAR,
    MODEL,
    NS,
    SATURATION_CM,
    SATURATION_DEFAULT,
    VARIANTS,
    Check,
    Cluster,
    RealApiServer,
    Serve,
    Tls,
    all_of,
    check_of,
    expect_values,
    serve_settings,
    served_everywhere,
    until,
)

pytestmark = pytest.mark.e2e_k8s  # a real kube-apiserver per test (tests/e2e_k8s/realapi.py)

SCRAPED = ("l4-0", "l4-1", "a100-0")
LOW = {"kv_cache_usage": 0.2, "waiting": 0, "running": 4, "success_rps": 1}
HIGH = {"kv_cache_usage": 0.9, "waiting": 2, "running": 30, "success_rps": 4}
MODERATE = {"kv_cache_usage": 0.3, "waiting": 0, "running": 6, "success_rps": 1}
HIGHER = {"kv_cache_usage": 0.95, "waiting": 3, "running": 32, "success_rps": 4}
IDLE = {"kv_cache_usage": 0.0, "waiting": 0, "running": 0, "success_rps": 0}
QUIET = {"kv_cache_usage": 0.05, "waiting": 0, "running": 1, "success_rps": 1}


class Transcript:
    def __init__(self) -> None:
        self.started = time.monotonic()

    def say(self, line: str) -> None:
        print(f"[{time.monotonic() - self.started:5.1f}s] {line}")


class Fleet:
    """The emulated vLLM pods, each behind its own /metrics server."""

    def __init__(self) -> None:
        self.pods = {name: VllmPod(MODEL) for name in SCRAPED}
        self.servers: dict[str, MetricsServer] = {}

    async def start(self) -> None:
        for name, pod in self.pods.items():
            self.servers[name] = await MetricsServer(pod.render).start()

    async def stop(self) -> None:
        for server in self.servers.values():
            await server.stop()

    def load(self, **steps: dict[str, float]) -> None:
        """`load(l4_0=HIGH)`: keyword names are pod names with '_' for '-'."""
        for name, values in steps.items():
            self.pods[name.replace("_", "-")].set_load(**values)


@pytest.fixture
async def fleet() -> AsyncIterator[Fleet]:
    emulated = Fleet()
    try:
        await emulated.start()
        yield emulated
    finally:
        await emulated.stop()


@pytest.fixture
def prometheus(fleet: Fleet, tmp_path: Path) -> Iterator[PrometheusProcess]:
    targets = [Target(server.address, NS, name) for name, server in fleet.servers.items()]
    prom = PrometheusProcess(tmp_path / "prometheus", {"vllm": targets})
    try:
        yield prom
    finally:
        prom.stop()


async def test_load_to_served_replicas_through_real_prometheus_with_an_outage(
    api: RealApiServer, cluster: Cluster, tls: Tls, fleet: Fleet, prometheus: PrometheusProcess, tmp_path: Path
) -> None:
    out = Transcript()
    fleet.load(l4_0=LOW, a100_0=LOW, l4_1=IDLE)
    prometheus.start()
    out.say(f"prometheus {prometheus.url} ready in {await prometheus.wait_ready():.1f}s, scraping {', '.join(SCRAPED)}")
    settings = serve_settings(
        kubeconfig=api.write_kubeconfig(tmp_path / "kubeconfig"),
        prometheus_url=prometheus.url,
        tls=tls,
        saturation_window_s=2.0,  # --saturation-window: a drop in load shows within two scrapes
        record_dir=tmp_path / "record",  # the flight recorder: every cycle must replay to the same decisions
    )
    serve = await Serve.start("serve", settings, tls.ca_pem)
    ep = serve.endpoints
    out.say(
        f"serve: https :{ep.https_port}, KEDA :{ep.grpc_port}, metrics :{ep.metrics_port}, probes :{ep.health_port}"
    )
    try:
        await _scenario(serve, cluster, prometheus, fleet, out)
        assert await serve.stop() == 0, "serve exited non-zero after a clean stop"
        out.say("serve stopped cleanly (exit 0)")
        recorded = sorted((tmp_path / "record").glob("cycle-*.json"))
        replayed = [runner.run(*fixture.load(path)) for path in recorded]
        unavailable = sum(
            1 for r, p in zip(replayed, recorded, strict=True) if '"prometheus": "unavailable"' in p.read_text()
        )
        out.say(f"flight recorder: {len(recorded)} cycles recorded ({unavailable} during the outage)")
        assert len(recorded) >= 5
        assert unavailable >= 1
        assert [r["name"] for r in replayed if not r["passed"]] == []
    finally:
        if not serve.task.done():
            await serve.stop()


async def _served(serve: Serve, variant: str, want: int) -> str | None:
    """None when the External Metrics API, KEDA and /metrics all serve `want` for `variant`."""
    https, keda, scraped = await served_everywhere(serve, variant)
    problem = expect_values({"https": https, "keda": keda, "metrics": scraped}, want)
    return None if problem is None else f"{variant}: {problem}"


async def _report(serve: Serve, cluster: Cluster, out: Transcript, step: str) -> None:
    for variant in VARIANTS:
        https, keda, scraped = await served_everywhere(serve, variant)
        served = f"https={_g(https)} keda={keda:g} /metrics={_g(scraped)}"
        out.say(f"  {step} served {variant}: {served} | {cluster.status_line(variant)}")


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _scraped_since(prometheus: PrometheusProcess, since_s: float) -> Check:
    """None once Prometheus holds a KV-cache sample newer than `since_s` for every scraped pod."""

    async def check() -> str | None:
        url = f"{prometheus.url}/api/v1/query"
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, params={"query": "timestamp(vllm:kv_cache_usage_perc)"}) as response,
        ):
            body = await response.json()
        fresh = {e["metric"].get("pod") for e in body["data"]["result"] if float(e["value"][1]) > since_s}
        missing = sorted(set(SCRAPED) - fresh)
        return f"no sample since the restart from {missing}" if missing else None

    return check


def _status_is(cluster: Cluster, variant: str, replicas: int, *, metrics: str, reason: str) -> Check:
    """The VA status in the API: `replicas`, a reason starting with `reason`, MetricsAvailable's reason `metrics`."""

    def check() -> str | None:
        alloc, cond = cluster.alloc(variant), cluster.condition(variant, "MetricsAvailable")
        ok = (
            alloc.get("numReplicas") == replicas
            and str(alloc.get("reason", "")).startswith(reason)
            and cond.get("reason") == metrics
            and cond.get("status") == ("True" if metrics == "MetricsFound" else "False")
        )
        return None if ok else cluster.status_line(variant)

    return check_of(check)


async def _expect(check: Check) -> None:
    problem = await check()
    assert problem is None, problem


async def _scenario(
    serve: Serve, cluster: Cluster, prometheus: PrometheusProcess, fleet: Fleet, out: Transcript
) -> None:
    reconciler = serve.endpoints.reconciler

    # ---- A: low load → one replica each, steady -------------------------------------------------------------
    took = await until(
        "MetricsFound and 1 replica on each variant at low load",
        all_of(*(_status_is(cluster, v, 1, metrics="MetricsFound", reason="saturation-only mode") for v in VARIANTS)),
        timeout_s=20,
    )
    out.say(f"A low load (kv 0.2, queue 0 on l4-0 and a100-0): decided in {took:.1f}s")
    first = reconciler.cycles

    def steady() -> str | None:
        got = tuple(getattr(serve.stored(v), "desired_replicas", None) for v in VARIANTS)
        assert got == (1, 1), f"the decision moved at steady low load: (l4, a100) = {got}"
        return None if reconciler.cycles >= first + 3 else f"{reconciler.cycles - first} of 3 cycles"

    await until("three more cycles at low load", check_of(steady), timeout_s=10)
    dropped = await serve.sample("wva_metrics_samples_dropped_total", reason="unknown-pod")
    assert dropped > 0, "l4-1 is scraped but has no Pod object yet: its samples must be dropped as unknown-pod"
    for variant in VARIANTS:
        await _expect(check_of(_served, serve, variant, 1))
    await _report(serve, cluster, out, "A")

    # ---- B: high KV on every pod → the cheapest variant gets one more replica --------------------------------
    fleet.load(l4_0=HIGH, a100_0=HIGH)

    async def https_l4_is_2() -> str | None:
        got = await serve.external_metric(CHEAP)
        return None if got == 2 else f"https l4={got}"

    took = await until("l4 desired 2 over HTTPS", https_l4_is_2, timeout_s=15)
    out.say(f"B high load (kv 0.9, queue 2 on l4-0 and a100-0): HTTPS serves l4=2 after {took:.1f}s")
    await until(
        "the l4 VA status to record the scale-up",
        _status_is(cluster, CHEAP, 2, metrics="MetricsFound", reason="saturation-only mode: scale-up"),
        timeout_s=5,
    )
    assert cluster.va(CHEAP)["status"]["actuation"] == {"applied": False}, "Deployment l4 is still at 1"
    assert cluster.condition(CHEAP, "OptimizationReady")["status"] == "True"
    await _expect(_status_is(cluster, DEAR, 1, metrics="MetricsFound", reason="saturation-only mode"))
    await _expect(check_of(_served, serve, CHEAP, 2))
    await _expect(check_of(_served, serve, DEAR, 1))
    await _report(serve, cluster, out, "B")

    # ---- C: the HPA follows: pod l4-1 appears (moderate load), Deployment l4 → 2 -----------------------------
    fleet.load(l4_1=MODERATE)
    cluster.add_pod(CHEAP, 1)
    cluster.scale(CHEAP, 2)

    async def applied() -> str | None:
        stored = serve.stored(CHEAP)
        actuation = (cluster.va(CHEAP).get("status") or {}).get("actuation")
        if stored is None or stored.decision.current_replicas != 2 or actuation != {"applied": True}:
            return f"stored={stored and stored.decision} actuation={actuation}"
        return await _status_is(cluster, CHEAP, 2, metrics="MetricsFound", reason="saturation-only mode: no-change")()

    took = await until("the decision to see 2 current l4 replicas and hold 2", applied, timeout_s=15)
    out.say(f"C HPA followed (Deployment l4 = 2, pod l4-1 at kv 0.3): applied, holding 2, after {took:.1f}s")
    await _expect(check_of(_served, serve, CHEAP, 2))
    await _expect(check_of(_served, serve, DEAR, 1))
    await _report(serve, cluster, out, "C")

    # ---- D: Prometheus crashes → fallback; the served values hold; still ready -------------------------------
    prometheus.kill()
    # The world moves on while nobody scrapes it: the l4 pods saturate. a100-0 turns quiet for now: after the
    # restart Prometheus scrapes each target at its own offset in the second, and a cycle that saw a saturated
    # a100-0 before any l4 pod would rightly give the model's +1 to a100, the only variant it can see.
    fleet.load(l4_0=HIGHER, l4_1=HIGHER, a100_0=QUIET)
    took = await until(
        "a fallback reason and MetricsAvailable=False/PrometheusError after Prometheus was killed",
        all_of(
            _status_is(cluster, CHEAP, 2, metrics="PrometheusError", reason="Fallback:"),
            _status_is(cluster, DEAR, 1, metrics="PrometheusError", reason="Fallback:"),
        ),
        timeout_s=10,
    )
    out.say(f"D Prometheus killed (SIGKILL): fallback in the VA status after {took:.1f}s")
    # The cycle that wrote the fallback status may not have counted itself yet: wait for it to, so the loop
    # below sees two more whole cycles without metrics (nothing moves, nothing crashes).
    first = reconciler.cycles
    await until(
        "the fallback cycle to finish", check_of(lambda: None if reconciler.cycles > first else "same"), timeout_s=5
    )
    for _ in range(2):
        cycle = reconciler.cycles
        await until("the next cycle", check_of(lambda c=cycle: None if reconciler.cycles > c else "same"), timeout_s=5)
        serve.assert_running()
        await _expect(check_of(_served, serve, CHEAP, 2))
        await _expect(check_of(_served, serve, DEAR, 1))
    assert await serve.probe("/readyz") == 200
    assert await serve.probe("/healthz") == 200
    stored = serve.stored(CHEAP)
    assert stored is not None
    assert (stored.decision.path.value, stored.decision.metrics_available) == ("fallback", False)
    failed = await serve.sample("wva_metrics_collection_duration_seconds_count", source="prometheus", outcome="error")
    assert failed >= 3, f"{failed} failed collections in /metrics"
    out.say(f"  D /readyz 200, /healthz 200; /metrics counts {failed:g} failed Prometheus collections")
    await _report(serve, cluster, out, "D")

    # ---- E: Prometheus restarts → metrics found again, and the next decision is taken ------------------------
    prometheus.start()
    restarted_s = time.time()
    out.say(f"E Prometheus restarted (same port and TSDB), ready in {await prometheus.wait_ready():.1f}s")
    took = await until("every pod scraped again", _scraped_since(prometheus, restarted_s), timeout_s=20)
    fleet.load(a100_0=HIGHER)  # every pod in view: whichever is seen saturated first, the +1 goes to l4
    out.say(f"E every pod scraped again after {took:.1f}s; a100-0 saturates too")
    took = await until(
        "MetricsFound again and l4 scaled to 3 (every pod saturated)",
        _status_is(cluster, CHEAP, 3, metrics="MetricsFound", reason="saturation-only mode: scale-up"),
        timeout_s=20,
    )
    out.say(f"E kv 0.95 on all three pods: l4 -> 3 after {took:.1f}s")
    await until("l4 = 3 on every interface", check_of(_served, serve, CHEAP, 3), timeout_s=5)
    await _expect(_status_is(cluster, DEAR, 1, metrics="MetricsFound", reason="saturation-only mode"))
    await _expect(check_of(_served, serve, DEAR, 1))
    ok = await serve.sample("wva_metrics_collection_duration_seconds_count", source="prometheus", outcome="success")
    out.say(f"  E /metrics: {ok:g} successful and {failed:g}+ failed Prometheus collections so far")
    await _report(serve, cluster, out, "E")

    # ---- F: load falls; the HPA never applied l4=3. A ConfigMap edit (live, no restart) shortens the
    # transition timeout, so the stale desired stops blocking and the safe scale-down is decided and served.
    fleet.load(l4_0=QUIET, l4_1=QUIET, a100_0=QUIET)
    cluster.api.put(
        r.CONFIGMAPS,
        b.configmap(
            SATURATION_CM, namespace=CONTROLLER_NS, data={"default": SATURATION_DEFAULT + "transitionTimeout: 1s\n"}
        ),
    )
    # kv 0.05 on three non-saturated replicas: removing one leaves 0.8 - 0.05·3/2 = 0.725 spare ≥ 0.10 → safe;
    # the most expensive variant above one replica is l4 (a100 is at minReplicas 1): 2 → 1.
    took = await until(
        "l4 scaled down to 1 after the load fell (stale desired 3 timed out)",
        _status_is(cluster, CHEAP, 1, metrics="MetricsFound", reason="saturation-only mode: scale-down"),
        timeout_s=20,
    )
    out.say(f"F load down (kv 0.05 everywhere) + transitionTimeout 1s via ConfigMap: l4 3 -> 1 after {took:.1f}s")
    await until("l4 = 1 on every interface", check_of(_served, serve, CHEAP, 1), timeout_s=5)
    await _expect(check_of(_served, serve, DEAR, 1))
    await _report(serve, cluster, out, "F")
