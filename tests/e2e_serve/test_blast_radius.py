"""Blast radius end to end (issue 10): `serve`, a real Prometheus scraping emulated vLLM pods in two namespaces,
and a real kube-apiserver. Tenant `team-a` poisons what it may write — a namespace-local ConfigMap (6 kB of
nested brackets, plus a YAML alias bomb), then a broken VA (refused by our CRD's schema; let through by a
looser, upstream-like CRD, and then marked InvalidSpec by us), then pods with garbage metrics — while tenant
`team-b` must keep being decided and served every cycle. Removing the poison restores `team-a`.

Run with `-s` to see the transcript.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from adapter.k8s import resources as r
from tests.e2e_prometheus.prom import PrometheusProcess, Target
from tests.k8s import builders as b
from tests.metrics.emulators import MetricsServer, VllmPod

from .support import (
    CONTROLLER_NS,
    SATURATION_CM,
    SATURATION_DEFAULT,
    RealApiServer,
    Serve,
    Tls,
    check_of,
    serve_settings,
    until,
)

pytestmark = pytest.mark.e2e_k8s  # a real kube-apiserver per test (tests/e2e_k8s/realapi.py)

TENANTS = ("team-a", "team-b")
MODEL = "meta/llama-3.1-8b"
LOAD = {"kv_cache_usage": 0.3, "waiting": 0, "running": 4, "success_rps": 1}
BRACKETS = "a: " + "[" * 3000 + "]" * 3000
ALIAS_BOMB = "\n".join(
    ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    + ["kvCacheThreshold: *a8"]
)


def _pod(ns: str) -> str:
    return f"{ns}-vllm-0"


@pytest.fixture
async def pods() -> AsyncIterator[dict[str, tuple[VllmPod, MetricsServer]]]:
    started: dict[str, tuple[VllmPod, MetricsServer]] = {}
    try:
        for ns in TENANTS:
            pod = VllmPod(MODEL)
            pod.set_load(**LOAD)
            started[ns] = (pod, await MetricsServer(pod.render).start())
        yield started
    finally:
        for _, server in started.values():
            await server.stop()


@pytest.fixture
def prometheus(pods: dict[str, tuple[VllmPod, MetricsServer]], tmp_path: Path) -> Iterator[PrometheusProcess]:
    targets = [Target(server.address, ns, _pod(ns)) for ns, (_, server) in pods.items()]
    prom = PrometheusProcess(tmp_path / "prometheus", {"vllm": targets})
    try:
        yield prom
    finally:
        prom.stop()


def _install(api: RealApiServer) -> None:
    api.put(r.CONFIGMAPS, b.configmap(SATURATION_CM, namespace=CONTROLLER_NS, data={"default": SATURATION_DEFAULT}))
    for ns in TENANTS:
        api.put(
            r.VARIANT_AUTOSCALINGS,
            b.va(
                "vllm",
                namespace=ns,
                model=MODEL,
                cost="1",
                min_replicas=1,
                max_replicas=4,
                labels={"inference.optimization/acceleratorName": "L4"},
            ),
        )
        template = b.template(labels={"app": "vllm"}, node_selector={"nvidia.com/gpu.product": "NVIDIA-L4"})
        api.put(
            r.DEPLOYMENTS, b.deployment("vllm", namespace=ns, replicas=1, status_replicas=1, ready=1, tmpl=template)
        )
        api.put(r.REPLICASETS, b.replicaset("vllm-rs", deployment_name="vllm", namespace=ns))
        api.put(r.PODS, b.pod(_pod(ns), owner="vllm-rs", namespace=ns, ip=f"10.1.{TENANTS.index(ns)}.1"))


CRD_SPEC = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties"


def _accepted(api: RealApiServer, va: dict[str, Any]) -> str | None:
    """None once the apiserver stores `va` (a CRD schema change takes a moment to be served)."""
    try:
        api.put(r.VARIANT_AUTOSCALINGS, va)
    except AssertionError as refused:
        return str(refused)[:200]
    return None


def _status(api: RealApiServer, ns: str, name: str = "vllm") -> dict[str, Any]:
    return dict(api.get(r.VARIANT_AUTOSCALINGS, ns, name).get("status") or {})


def _condition(api: RealApiServer, ns: str, kind: str, name: str = "vllm") -> dict[str, Any]:
    return next((dict(c) for c in _status(api, ns, name).get("conditions") or [] if c.get("type") == kind), {})


def _is(api: RealApiServer, ns: str, kind: str, field: str, want: str, name: str = "vllm") -> str | None:
    got = _condition(api, ns, kind, name).get(field)
    return None if got == want else f"{ns}/{name} {kind}.{field} = {got!r}, want {want!r}"


def _mentions(api: RealApiServer, ns: str, text: str) -> str | None:
    message = _condition(api, ns, "OptimizationReady").get("message", "")
    return None if text in message else f"{ns} OptimizationReady says {message[:160]!r}"


def _last_run(api: RealApiServer, ns: str) -> str:
    return str((_status(api, ns).get("desiredOptimizedAlloc") or {}).get("lastRunTime", ""))


async def _still_decided(api: RealApiServer, ns: str, *, cycles: int = 2, timeout_s: float = 15.0) -> float:
    """Wait until `ns`'s VA has been decided `cycles` more times (lastRunTime moved on each)."""
    seen = {_last_run(api, ns)}

    def moved() -> str | None:
        seen.add(_last_run(api, ns))
        return None if len(seen) > cycles else f"{ns} decided {len(seen) - 1} more times, want {cycles}"

    return await until(f"{ns} keeps being decided", check_of(moved), timeout_s=timeout_s)


async def test_a_poisoned_tenant_never_stops_the_other(
    api: RealApiServer,
    tls: Tls,
    prometheus: PrometheusProcess,
    pods: dict[str, tuple[VllmPod, MetricsServer]],
    tmp_path: Path,
) -> None:
    started = time.monotonic()

    def say(line: str) -> None:
        print(f"[{time.monotonic() - started:5.1f}s] {line}")

    _install(api)
    prometheus.start()
    await prometheus.wait_ready()
    settings = serve_settings(
        kubeconfig=api.write_kubeconfig(tmp_path / "kubeconfig"),
        prometheus_url=prometheus.url,
        tls=tls,
        engine_interval_s=1.0,
        saturation_window_s=2.0,
    )
    serve = await Serve.start("serve", settings, tls.ca_pem)
    try:
        for ns in TENANTS:
            await until(
                f"{ns} decided with metrics", check_of(_is, api, ns, "MetricsAvailable", "status", "True"), timeout_s=30
            )
        say("both tenants decided with metrics")

        # 1. a poisoned namespace-local ConfigMap in team-a
        api.put(
            r.CONFIGMAPS, b.configmap(SATURATION_CM, namespace="team-a", data={"default": BRACKETS, "bomb": ALIAS_BOMB})
        )
        await _still_decided(api, "team-b", cycles=3)
        await until(
            "team-a carries the reason",
            check_of(_mentions, api, "team-a", "ConfigMap team-a/wva-saturation-scaling-config"),
            timeout_s=10,
        )
        opt_a = _condition(api, "team-a", "OptimizationReady")
        assert opt_a["reason"] == "InvalidConfiguration"
        assert len(opt_a["message"]) < 4000  # bounded, whatever the poison
        assert _condition(api, "team-b", "OptimizationReady")["reason"] == "SaturationOnlyMode"
        await _still_decided(api, "team-a", cycles=2)  # the global default still decides the poisoned tenant
        rejected = await serve.sample("wva_inputs_rejected_total", kind="ConfigMap", reason="alias-bomb")
        assert rejected == 1.0  # counted once, not once per cycle
        chars = len(opt_a["message"])
        say(f"poisoned ConfigMap: team-b decided every cycle; team-a InvalidConfiguration ({chars} chars)")

        api.delete(r.CONFIGMAPS, "team-a", SATURATION_CM)
        await until(
            "team-a restored",
            check_of(_is, api, "team-a", "OptimizationReady", "reason", "SaturationOnlyMode"),
            timeout_s=10,
        )
        say("poison removed: team-a back to SaturationOnlyMode")

        # 2. a broken VA in team-a. The real apiserver refuses a malformed one at the door (our CRD's schema) ...
        broken = b.va("broken", namespace="team-a", model=MODEL, cost="1", min_replicas=1, max_replicas=4)
        broken["spec"]["minReplicas"] = "lots"
        with pytest.raises(AssertionError, match=r"-> 422: .*spec\.minReplicas in body must be of type integer"):
            api.put(r.VARIANT_AUTOSCALINGS, broken)
        # ... but a cluster migrating from upstream WVA still has upstream's CRD, whose variantCost has no pattern
        # (upstream reads an unparsable cost as 10.0). Loosen ours the same way: such a VA reaches the adapter.
        loosen = [{"op": "remove", "path": f"{CRD_SPEC}/variantCost/pattern"}]
        api.kube.kubectl("patch", "crd", "variantautoscalings.llmd.ai", "--type=json", "-p", json.dumps(loosen))
        broken["spec"]["minReplicas"] = 1
        broken["spec"]["variantCost"] = "cheap"
        await until("the loosened CRD served", check_of(_accepted, api, broken), timeout_s=10)
        await until(
            "the broken VA says why",
            check_of(_is, api, "team-a", "OptimizationReady", "reason", "InvalidSpec", "broken"),
            timeout_s=10,
        )
        await _still_decided(api, "team-b", cycles=2)
        await _still_decided(api, "team-a", cycles=2)  # its healthy VA too
        say("broken VA: refused by our CRD (422); through a looser CRD: InvalidSpec on it; both healthy VAs decided")

        # 3. garbage metrics from team-a's pod
        pods["team-a"][0].set_load(kv_cache_usage=float("nan"), waiting=-3)
        await until(
            "team-a held without usable samples",
            check_of(_is, api, "team-a", "MetricsAvailable", "status", "False"),
            timeout_s=20,
        )
        await _still_decided(api, "team-b", cycles=3, timeout_s=20)
        assert _condition(api, "team-b", "MetricsAvailable")["status"] == "True"
        dropped = await serve.sample("wva_metrics_samples_dropped_total", reason="nan")
        assert dropped >= 1
        say("garbage metrics on team-a: team-b decided with metrics every cycle")
        pods["team-a"][0].set_load(**LOAD)
        await until(
            "team-a metrics back", check_of(_is, api, "team-a", "MetricsAvailable", "status", "True"), timeout_s=20
        )
        assert await serve.stop() == 0
    finally:
        if not serve.task.done():
            await serve.stop()
