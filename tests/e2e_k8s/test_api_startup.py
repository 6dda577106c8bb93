"""Startup times on the real kube-apiserver: the inventory's `ScaleTarget.startup_s` is each Ready pod's
creationTimestamp → Ready lastTransitionTime, as the API server stores them (issue 18: "learn the startup time
from the inventory").

Real here: the Deployment and ReplicaSet controllers create the pods (the API server stamps their
`creationTimestamp`), and the session's emulated kubelet (node.py) marks each Ready through the status
subresource once its variant's startup time has passed, writing `lastTransitionTime` as a kubelet does. The
expected durations are read back from the API server, never computed from the test's own clock.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import pytest

from adapter.domain.snapshot import ScaleTarget
from adapter.domain.timefmt import parse_rfc3339_s
from adapter.k8s import resources as r
from adapter.k8s.client import KubeClient
from adapter.k8s.inventory import Inventory, InventoryOptions
from tests.k8s import builders as b
from tests.k8s.conftest import FAST, eventually

from .apiworld import ApiWorld
from .node import VARIANT_LABEL, LoopThread, Node

pytestmark = pytest.mark.e2e_k8s

T = TypeVar("T")
STARTUP_S = {"l4": 3.0, "a100": 1.0}


async def on_node(loop: LoopThread, coro: Coroutine[Any, Any, T]) -> T:
    """Run a Node method on the session loop without blocking this test's loop (the inventory runs on it)."""
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop.loop))


@pytest.fixture
async def inventory(api_world: ApiWorld, client: KubeClient) -> AsyncIterator[Inventory]:
    ns = api_world.namespace
    started = Inventory(client, InventoryOptions(watch_namespace=ns, controller_namespace=ns, reflector=FAST))
    await started.start()
    assert await started.wait_synced(10.0), [h for h in started.health() if not h.synced]
    yield started
    await started.stop()


def _deployment(name: str, namespace: str, replicas: int) -> dict[str, Any]:
    tmpl = b.template(labels={"app": name, VARIANT_LABEL: name}, args=["--served-model-name", "meta/llama-3.1-8b"])
    obj = b.deployment(name, namespace=namespace, replicas=replicas, tmpl=tmpl)
    obj.pop("status")  # the Deployment controller writes it
    return obj


def _durations_from_the_apiserver(world: ApiWorld, variant: str) -> list[float]:
    """Ready pods of `variant`: Ready lastTransitionTime − creationTimestamp, as stored."""
    url = world.kube.plane.url + r.PODS.path(namespace=world.namespace)
    answer = world.kube.http.get(url, params={"labelSelector": f"{VARIANT_LABEL}={variant}"}, timeout=10)
    assert answer.status_code == 200, answer.text[:300]
    out = []
    for pod in answer.json()["items"]:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if condition["type"] == "Ready" and condition["status"] == "True":
                ready = parse_rfc3339_s(condition["lastTransitionTime"])
                out.append(ready - parse_rfc3339_s(pod["metadata"]["creationTimestamp"]))
    return sorted(out)


def _stamps(world: ApiWorld, variant: str) -> list[tuple[str, str, list[object]]]:
    """For a failure message: each pod's name, creationTimestamp and conditions, as stored."""
    url = world.kube.plane.url + r.PODS.path(namespace=world.namespace)
    answer = world.kube.http.get(url, params={"labelSelector": f"{VARIANT_LABEL}={variant}"}, timeout=10)
    return [
        (p["metadata"]["name"], p["metadata"]["creationTimestamp"], (p.get("status") or {}).get("conditions") or [])
        for p in answer.json()["items"]
    ]


def _target(inventory: Inventory, variant: str) -> ScaleTarget | None:
    view = next((v for v in inventory.view().variants if v.key.name == variant), None)
    return view.target if view is not None else None


async def test_startup_times_are_creation_to_ready_of_the_ready_pods(
    api_world: ApiWorld, inventory: Inventory, node: Node, loop: LoopThread
) -> None:
    ns = api_world.namespace
    await on_node(loop, node.adopt(ns))
    try:
        for variant, seconds in STARTUP_S.items():
            await on_node(loop, node.set_startup(ns, variant, seconds))
            api_world.put(r.VARIANT_AUTOSCALINGS, b.va(variant, namespace=ns))
        api_world.put(r.DEPLOYMENTS, _deployment("l4", ns, replicas=2))
        api_world.put(r.DEPLOYMENTS, _deployment("a100", ns, replicas=1))

        async def settled(variant: str, count: int) -> list[float]:
            """Until the inventory reports `count` durations for `variant`, equal to what the API server holds."""
            seen: list[object] = []

            def matches() -> bool:
                target = _target(inventory, variant)
                got = list(target.startup_s) if target is not None else None
                want = _durations_from_the_apiserver(api_world, variant)
                seen[:] = [got, want]
                return got is not None and len(got) == count and got == want

            await eventually(matches, timeout_s=30, what=f"{count} startup times of {variant}; last {seen}")
            return list(seen[0])  # type: ignore[arg-type]

        l4 = await settled("l4", 2)
        a100 = await settled("a100", 1)
        print(f"[startup] l4 {l4} s (startup {STARTUP_S['l4']} s), a100 {a100} s (startup {STARTUP_S['a100']} s)")
        # whole-second timestamps: at least the startup, at most a second (rounding) plus the node's poll later
        assert all(STARTUP_S["l4"] <= d <= STARTUP_S["l4"] + 3 for d in l4), (l4, _stamps(api_world, "l4"))
        assert all(STARTUP_S["a100"] <= d <= STARTUP_S["a100"] + 3 for d in a100), (a100, _stamps(api_world, "a100"))

        # a third l4 pod: reported once Ready (the durations of the other two unchanged), not while it starts
        api_world.patch(r.DEPLOYMENTS, "l4", {"spec": {"replicas": 3}})
        l4_three = await settled("l4", 3)
        assert Counter(l4) <= Counter(l4_three)

        # Ready → not Ready → Ready again (the kubelet marks it Ready at once: its startup time has passed): the
        # last transition counts, so that pod now reports creation → its return, longer than its startup
        victim = next(
            p["metadata"]["name"]
            for p in api_world.kube.http.get(
                api_world.kube.plane.url + r.PODS.path(namespace=ns),
                params={"labelSelector": f"{VARIANT_LABEL}=a100"},
                timeout=10,
            ).json()["items"]
        )
        await asyncio.sleep(1.5)  # so the new transition lands on a later second than the first one
        api_world.patch_status(
            r.PODS, victim, {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
        )
        flapped = await settled("a100", 1)
        assert flapped[0] > a100[0], (a100, flapped)
    finally:
        await on_node(loop, node.release(ns))
