"""The inventory (adapter/k8s/inventory.py, reflector.py, objects.py) against the real kube-apiserver.

Real here: the VA CRD as shipped, the upstream LeaderWorkerSet and InferencePool (v1, v1alpha2) CRDs vendored in
`crds/` (README there), the Deployment and ReplicaSet controllers of kube-controller-manager (a Deployment gets
real ReplicaSets and Pods; the test plays the kubelet and writes pod status through `/status`), the garbage
collector, RBAC (a user without replicasets/nodes gets real 403s), CRDs deleted and re-installed while the
inventory watches, watches the server closes after `timeoutSeconds` and that resume from a resourceVersion,
label-selector watches that send DELETED when the label goes, and nodes whose allocatable GPUs are written
through the status subresource. What the inventory sent is read back from the apiserver's audit log
(apiworld.py).

Still on the fake server (tests/k8s/test_inventory.py), because the real one cannot be made to do it on demand:
a 410 Gone in the middle of a watch, bursts of 5xx, dropped TCP connections, watches that end at once without
an event, a BOOKMARK on demand, a VA spec and a VA status our CRD's schema refuses (the real server answers 422).
The required VA CRD missing runs on a kube-apiserver of its own (realapi.RealApiServer without the CRD).

Cluster-scoped state is shared by the whole session: the optional CRDs are installed by a module fixture (and
removed again at its end if it installed them); a test that deletes one restores it in a `finally`; nodes get
names unique to the test, are deleted afterwards, and only the test's own nodes are asserted on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from adapter.domain.cluster import EppEndpoint, PodInfo
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import NodeGpus
from adapter.k8s import resources as r
from adapter.k8s.client import KubeClient
from adapter.k8s.inventory import Inventory, InventoryOptions
from adapter.k8s.reflector import Reflector, ReflectorOptions
from tests.k8s import builders as b
from tests.k8s.conftest import FAST, eventually

from .apiworld import ApiWorld, read_audit
from .cluster import Kube, until
from .controlplane import AUDITED_GROUP
from .realapi import CRD as VA_CRD
from .realapi import DEFAULT_CLIENT, RealApiServer

pytestmark = pytest.mark.e2e_k8s

CRDS = Path(__file__).parent / "crds"
OPTIONAL_CRDS = {
    r.LEADERWORKERSETS: CRDS / "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
    r.INFERENCE_POOLS_V1: CRDS / "inference.networking.k8s.io_inferencepools.yaml",
    r.INFERENCE_POOLS_V1ALPHA2: CRDS / "inference.networking.x-k8s.io_inferencepools.yaml",
}
CM_SELECTOR = "app.kubernetes.io/name=workload-variant-autoscaler"
SAT = "wva-saturation-scaling-config"
MakeInventory = Callable[..., Awaitable[Inventory]]


# ---- the optional CRDs ----------------------------------------------------------------------------------


def _crd_name(rt: r.ResourceType) -> str:
    return f"{rt.plural}.{rt.group}"


def _list_status(kube: Kube, rt: r.ResourceType) -> int:
    return int(kube.http.get(kube.plane.url + rt.path(), params={"limit": "1"}, timeout=10).status_code)


def install_crd(kube: Kube, rt: r.ResourceType) -> None:
    """`kubectl apply --server-side` (the LWS CRD is too big for the client-side annotation), then until served."""
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(OPTIONAL_CRDS[rt]))
    until(f"{rt} served", lambda: None if _list_status(kube, rt) == 200 else "not yet", timeout_s=30)


def remove_crd(kube: Kube, rt: r.ResourceType) -> None:
    kube.kubectl("delete", "crd", _crd_name(rt), "--ignore-not-found", "--wait=true", "--timeout=60s")
    until(f"{rt} gone", lambda: None if _list_status(kube, rt) == 404 else "still served", timeout_s=30)


@pytest.fixture(scope="module", autouse=True)
def optional_crds(kube: Kube) -> Iterator[None]:
    """The upstream CRDs, installed for this module; the ones it installed are removed again at its end."""
    installed = [rt for rt in OPTIONAL_CRDS if _list_status(kube, rt) != 200]
    for rt in installed:
        install_crd(kube, rt)
    yield
    for rt in installed:
        remove_crd(kube, rt)


# ---- inventory, helpers ---------------------------------------------------------------------------------


@pytest.fixture
async def make_inventory(api_world: ApiWorld, client: KubeClient) -> AsyncIterator[MakeInventory]:
    """An Inventory restricted to the test's namespace (which is also its controller namespace unless told),
    as the test's audited user unless `kube` names another client; stopped after the test."""
    started: list[Inventory] = []

    async def make(
        *, sync: bool = True, reflector: ReflectorOptions = FAST, kube: KubeClient | None = None, **options: Any
    ) -> Inventory:
        options.setdefault("watch_namespace", api_world.namespace)
        options.setdefault("controller_namespace", api_world.namespace)
        inventory = Inventory(kube or client, InventoryOptions(reflector=reflector, **options))
        started.append(inventory)
        await inventory.start()
        if sync:
            assert await inventory.wait_synced(10.0), [h for h in inventory.health() if not h.synced]
        return inventory

    yield make
    for inventory in started:
        await inventory.stop()


def _health(inventory: Inventory, prefix: str) -> Any:
    return next(h for h in inventory.health() if h.name.startswith(prefix))


def _collection(name: str) -> str:
    """A health name without its " in <namespace>" / selector suffix."""
    return name.split(" ", 1)[0]


def _query(uri: str) -> dict[str, str]:
    return {k: v[0] for k, v in urllib.parse.parse_qs(urllib.parse.urlsplit(uri).query).items()}


def _without_status(obj: dict[str, Any]) -> dict[str, Any]:
    """An object whose status its controller (the real one) writes, not the test."""
    obj = dict(obj)
    obj.pop("status", None)
    return obj


def _pods(world: ApiWorld, selector: str, namespace: str | None = None) -> list[dict[str, Any]]:
    ns = namespace or world.namespace
    url = world.kube.plane.url + r.PODS.path(namespace=ns)
    answer = world.kube.http.get(url, params={"labelSelector": selector}, timeout=10)
    assert answer.status_code == 200, answer.text[:300]
    return sorted(answer.json()["items"], key=lambda p: p["metadata"]["name"])


def _wait_pods(world: ApiWorld, selector: str, count: int, *, active: bool = True) -> list[dict[str, Any]]:
    """Until the ReplicaSet controller made `count` (active) pods matching `selector`."""
    found: list[dict[str, Any]] = []

    def check() -> str | None:
        pods = _pods(world, selector)
        if active:
            pods = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        found[:] = pods
        return None if len(pods) == count else f"{[p['metadata']['name'] for p in pods]}"

    until(f"{count} pods {selector}", check, timeout_s=20)
    return list(found)


def _kubelet(world: ApiWorld, pod: dict[str, Any], *, phase: str, ready: bool, ip: str = "") -> None:
    """What a kubelet reports for `pod`, through the status subresource."""
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if ip:
        status["podIP"] = ip
    world.patch_status(r.PODS, pod["metadata"]["name"], status)


def _deployment_status(world: ApiWorld, name: str) -> tuple[int, int]:
    status = world.get(r.DEPLOYMENTS, name).get("status") or {}
    return int(status.get("replicas") or 0), int(status.get("readyReplicas") or 0)


# ---- the view ---------------------------------------------------------------------------------------------


def _targets(world: ApiWorld) -> None:
    """VA l4 → Deployment l4 (3 replicas; template app=llama,variant=l4) and VA h100 → LeaderWorkerSet big."""
    ns = world.namespace
    world.put(r.VARIANT_AUTOSCALINGS, b.va("l4", namespace=ns, labels={"inference.optimization/acceleratorName": "L4"}))
    world.put(r.VARIANT_AUTOSCALINGS, b.va("h100", namespace=ns, target="big", kind="LeaderWorkerSet", cost="40.0"))
    tmpl = b.template(
        gpus=2,
        args=["--max-num-seqs", "64", "--max-num-batched-tokens=4096"],
        node_selector={"nvidia.com/gpu.product": "NVIDIA-L4"},
        labels={"app": "llama", "variant": "l4"},
    )
    deployment = _without_status(b.deployment("l4", namespace=ns, replicas=3, tmpl=tmpl))
    deployment["spec"]["selector"] = {"matchLabels": {"app": "llama", "variant": "l4"}}  # must select the template
    world.put(r.DEPLOYMENTS, deployment)
    world.put(r.LEADERWORKERSETS, b.leaderworkerset("big", namespace=ns))  # no LWS controller: status as written


def _statefulset(world: ApiWorld, name: str, *, owner_lws: str = "") -> None:
    """A StatefulSet (no StatefulSet controller runs: it makes no pods, so the test's own pods stay its only)."""
    sts = _without_status(b.statefulset(name, namespace=world.namespace))
    sts["spec"]["serviceName"] = name
    if owner_lws:
        sts["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "leaderworkerset.x-k8s.io/v1",
                "kind": "LeaderWorkerSet",
                "name": owner_lws,
                "controller": True,
            }
        ]
    world.put(r.STATEFULSETS, sts)


def _fleet(world: ApiWorld) -> dict[str, str]:
    """The fake's fleet, built the real way. Returns the l4 pods by role: ready-a, ready-b, pending, finished.

    Deployment l4's pods are the ReplicaSet controller's (l4-<hash>-<random>): two Running and ready (IPs as a
    kubelet reports them), one Pending, one Succeeded, which its ReplicaSet replaces with a new Pending pod. The
    LWS leader pod big-0 belongs to StatefulSet big (owned by the LWS), other-0 to a StatefulSet no VA targets.
    The fake's pod whose ReplicaSet does not exist is gone from here: the real garbage collector deletes a pod
    whose owner does not exist; the pod-template-hash fallback is exercised for real by
    test_forbidden_replicasets_fall_back_to_the_pod_template_hash.
    """
    ns = world.namespace
    _targets(world)
    world.put(r.VARIANT_AUTOSCALINGS, b.va("orphan", namespace=ns, target="nowhere"))
    _statefulset(world, "big", owner_lws="big")
    world.put(
        r.PODS,
        b.pod(
            "big-0",
            namespace=ns,
            owner_kind="StatefulSet",
            owner="big",
            labels={"leaderworkerset.sigs.k8s.io/name": "big"},
            ip="10.0.0.1",
        ),
    )
    _statefulset(world, "other")
    world.put(r.PODS, b.pod("other-0", namespace=ns, owner_kind="StatefulSet", owner="other"))
    a, bb, c = _wait_pods(world, "variant=l4", 3)
    _kubelet(world, a, phase="Running", ready=True, ip="10.0.0.1")
    _kubelet(world, bb, phase="Running", ready=True, ip="10.0.0.3")
    _kubelet(world, c, phase="Succeeded", ready=False)
    names = {p["metadata"]["name"] for p in (a, bb, c)}
    [replacement] = [p for p in _wait_pods(world, "variant=l4", 3) if p["metadata"]["name"] not in names]
    until(
        "Deployment l4 at 3 replicas, 2 ready",
        lambda: None if _deployment_status(world, "l4") == (3, 2) else str(_deployment_status(world, "l4")),
        timeout_s=20,
    )
    return {
        "ready-a": a["metadata"]["name"],
        "ready-b": bb["metadata"]["name"],
        "finished": c["metadata"]["name"],
        "pending": replacement["metadata"]["name"],
    }


def test_what_the_crd_refuses_never_reaches_the_inventory(api_world: ApiWorld) -> None:
    """The fake's fleet held a VA with minReplicas > maxReplicas, and a fake test a VA whose lastRunTime is
    "yesterday": the real server stores neither (our CRD's CEL rule, its date-time format), so the inventory's
    handling of them (`invalid`; a status ignored) is tested on the fake only."""
    ns, http = api_world.namespace, api_world.kube.http
    url = api_world.kube.plane.url + r.VARIANT_AUTOSCALINGS.path(namespace=ns)
    answer = http.post(url, json=b.va("broken", namespace=ns, min_replicas=5, max_replicas=2), timeout=10)
    assert answer.status_code == 422, answer.text[:300]
    assert "minReplicas must be less than or equal to maxReplicas" in answer.json()["message"]
    api_world.put(r.VARIANT_AUTOSCALINGS, b.va("a", namespace=ns))
    status = {"status": {"desiredOptimizedAlloc": {"numReplicas": 1, "lastRunTime": "yesterday"}}}
    answer = http.patch(
        f"{url}/a/status",
        data=json.dumps(status),
        headers={"Content-Type": "application/merge-patch+json"},
        timeout=10,
    )
    assert answer.status_code == 422, answer.text[:300]
    assert "lastRunTime in body must be of type date-time" in answer.json()["message"]


async def test_view_of_a_fleet(api_world: ApiWorld, make_inventory: MakeInventory) -> None:
    pods = _fleet(api_world)
    ns = api_world.namespace
    inventory = await make_inventory()
    view = inventory.view()
    assert view.synced
    by_name = {v.key.name: v for v in view.variants}
    assert sorted(by_name) == ["h100", "l4", "orphan"]
    l4 = by_name["l4"]
    assert l4.accelerator == "L4"  # the VA label wins over the nodeSelector
    assert l4.spec.cost == 10.0
    assert l4.spec.max_replicas == 4
    assert l4.target is not None
    # written by the real Deployment controller from its ReplicaSet's pods
    assert (l4.target.kind, l4.target.replicas, l4.target.ready_replicas, l4.target.spec_replicas) == (
        "Deployment",
        3,
        2,
        3,
    )
    assert l4.target.gpus_per_replica == 2
    assert l4.target.accelerator == "NVIDIA-L4"
    assert (l4.target.vllm.max_num_seqs, l4.target.vllm.max_num_batched_tokens) == (64, 4096)
    big = by_name["h100"].target
    assert big is not None
    assert (big.kind, big.replicas, big.ready_replicas) == ("LeaderWorkerSet", 2, 1)
    assert big.gpus_per_replica == 32  # a group of 4 pods with 8 GPUs each
    assert big.vllm.tensor_parallel_size == 8
    assert big.accelerator == "NVIDIA-H100-80GB-HBM3"
    assert by_name["orphan"].target is None  # TargetResolved=False is the engine's to report
    assert view.invalid == ()
    # pod → real ReplicaSet → Deployment; the finished pod is not listed; other-0's owner is targeted by no VA
    expected = [
        PodInfo(ns, "big-0", "h100", True, "10.0.0.1"),
        PodInfo(ns, pods["ready-a"], "l4", True, "10.0.0.1"),
        PodInfo(ns, pods["ready-b"], "l4", True, "10.0.0.3"),
        PodInfo(ns, pods["pending"], "l4", False, ""),
    ]
    # every pod has its real creationTimestamp; this fake kubelet writes Ready without a lastTransitionTime, so
    # no startup time is known (tests/e2e_k8s/test_api_startup.py has a kubelet that writes it)
    assert all(p.created_s is not None and p.ready_since_s is None for p in view.pods)
    untimed = tuple(replace(p, created_s=None) for p in view.pods)
    assert untimed == tuple(sorted(expected, key=lambda p: (p.namespace, p.name)))
    assert l4.target.startup_s == ()


async def test_view_follows_watch_events(api_world: ApiWorld, make_inventory: MakeInventory) -> None:
    _fleet(api_world)
    inventory = await make_inventory()
    first = inventory.view()
    assert inventory.view() is first  # nothing changed: the cached value
    api_world.patch(r.DEPLOYMENTS, "l4", {"spec": {"replicas": 4}})  # the controllers add a fourth pod
    api_world.delete(r.PODS, "big-0")  # no controller re-creates it
    api_world.put(r.VARIANT_AUTOSCALINGS, b.va("added", namespace=api_world.namespace))
    api_world.delete(r.VARIANT_AUTOSCALINGS, "orphan")

    def settled() -> bool:
        v = inventory.view()
        names = [x.key.name for x in v.variants]
        l4 = next(x for x in v.variants if x.key.name == "l4")
        return (
            names == ["added", "h100", "l4"]
            and l4.target is not None
            and l4.target.replicas == 4
            and l4.target.spec_replicas == 4
            and sorted(p.variant for p in v.pods) == ["l4"] * 4
        )

    await eventually(settled, what="the view to follow the watch events", timeout_s=15)
    assert inventory.view().invalid == ()


async def test_unchanged_projection_does_not_bump_versions(api_world: ApiWorld, make_inventory: MakeInventory) -> None:
    ns = api_world.namespace
    api_world.put(r.VARIANT_AUTOSCALINGS, b.va("s", namespace=ns, kind="StatefulSet"))
    _statefulset(api_world, "s")
    api_world.put(r.PODS, b.pod("s-0", namespace=ns, owner_kind="StatefulSet", owner="s"))
    inventory = await make_inventory(watch_nodes=False)
    version = inventory.version
    api_world.patch_status(r.PODS, "s-0", {"startTime": "2026-01-01T00:00:05Z"})  # irrelevant to the projection
    api_world.put(r.PODS, b.pod("s-1", namespace=ns, owner_kind="StatefulSet", owner="s"))
    await eventually(lambda: any(p.name == "s-1" for p in inventory.view().pods), what="marker pod", timeout_s=10)
    # s-1's creation and its status write are two events with two different projections; s-0's write was none
    await eventually(lambda: next(p for p in inventory.view().pods if p.name == "s-1").ready, what="s-1 ready")
    assert inventory.version == version + 2


async def test_configmaps_are_filtered_by_label(api_world: ApiWorld, make_inventory: MakeInventory) -> None:
    ns, controller_ns = api_world.namespace, f"{api_world.namespace}-ctl"
    api_world.objects.ensure_namespace(controller_ns)
    try:
        api_world.put(
            r.CONFIGMAPS, b.configmap(SAT, namespace=controller_ns, data={"default": "kvCacheThreshold: 0.7"})
        )
        api_world.put(r.CONFIGMAPS, b.configmap(SAT, namespace=ns, data={"default": "kvCacheThreshold: 0.9"}))
        api_world.put(r.CONFIGMAPS, b.configmap("unlabelled", namespace=ns, data={"ca.crt": "x"}, labels={}))
        api_world.mark()
        inventory = await make_inventory(controller_namespace=controller_ns)
        assert [(n, name) for n, name, _ in inventory.view().configmaps] == sorted([(ns, SAT), (controller_ns, SAT)])
        wanted = {
            (verb, f"/api/v1/namespaces/{n}/configmaps") for verb in ("list", "watch") for n in (ns, controller_ns)
        }
        seen = await asyncio.to_thread(
            api_world.wait_requests,
            "lists and watches of both namespaces",
            lambda s: {(e.verb, e.path) for e in s} >= wanted,
        )
        cm_requests = [e for e in seen if e.resource == "configmaps"]
        assert {(e.verb, e.path) for e in cm_requests} == wanted
        assert all(_query(e.uri).get("labelSelector") == CM_SELECTOR for e in cm_requests)
        # Removing the label makes the ConfigMap leave the watch (the API server sends DELETED).
        api_world.put(r.CONFIGMAPS, b.configmap(SAT, namespace=ns, data={"default": "x"}, labels={}))
        await eventually(lambda: len(inventory.view().configmaps) == 1, what="the unlabelled ConfigMap to vanish")
        assert inventory.view().configmaps[0][:2] == (controller_ns, SAT)
    finally:
        api_world.kube.delete_namespace(controller_ns)


async def test_watch_namespace_restricts_everything_but_global_configmaps(
    api_world: ApiWorld, make_inventory: MakeInventory
) -> None:
    ns = api_world.namespace
    elsewhere, controller_ns = f"{ns}-else", f"{ns}-ctl"
    try:
        for where in (ns, elsewhere):
            api_world.put(r.VARIANT_AUTOSCALINGS, b.va("v", namespace=where))
            api_world.put(r.DEPLOYMENTS, b.deployment("v", namespace=where, replicas=0))
            api_world.put(r.CONFIGMAPS, b.configmap(SAT, namespace=where, data={}))
        api_world.put(r.CONFIGMAPS, b.configmap(SAT, namespace=controller_ns, data={}))
        api_world.mark()
        inventory = await make_inventory(controller_namespace=controller_ns)
        view = inventory.view()
        assert [str(v.key) for v in view.variants] == [f"{ns}/v"]
        assert sorted(n for n, _, _ in view.configmaps) == sorted([ns, controller_ns])
        requests = api_world.requests()
        va_paths = {e.path for e in requests if e.resource == "variantautoscalings"}
        assert va_paths == {f"/apis/llmd.ai/v1alpha1/namespaces/{ns}/variantautoscalings"}
        namespaced = {e.path.split("/namespaces/")[1].split("/")[0] for e in requests if "/namespaces/" in e.path}
        assert namespaced == {ns, controller_ns}  # never `elsewhere`
    finally:
        for where in (elsewhere, controller_ns):
            api_world.kube.delete_namespace(where)


@pytest.mark.parametrize("version", ["v1", "v1alpha2", "both"])
async def test_inference_pools_and_epp_endpoints(
    api_world: ApiWorld, make_inventory: MakeInventory, version: str
) -> None:
    ns = api_world.namespace
    _targets(api_world)
    selector = {"app": "llama"}
    if version in ("v1", "both"):
        api_world.put(r.INFERENCE_POOLS_V1, b.pool_v1("llama", namespace=ns, selector=selector, epp="llama-epp"))
    if version in ("v1alpha2", "both"):
        api_world.put(
            r.INFERENCE_POOLS_V1ALPHA2, b.pool_v1alpha2("llama", namespace=ns, selector=selector, epp="old-epp")
        )
    api_world.put(
        r.SERVICES,
        b.service(
            "llama-epp",
            namespace=ns,
            selector={"app": "epp"},
            ports=[{"name": "grpc", "port": 9002}, {"name": "http-metrics", "port": 9090, "targetPort": "metrics"}],
        ),
    )
    headless = b.service("old-epp", namespace=ns, selector={"app": "old-epp"}, ports=[])
    headless["spec"]["clusterIP"] = "None"  # the real server takes a Service without ports only when headless
    api_world.put(r.SERVICES, headless)
    # The EPP pods have no owner: the real garbage collector would delete pods of a ReplicaSet that does not exist.
    api_world.put(r.PODS, b.pod("epp-1", namespace=ns, labels={"app": "epp"}, ip="10.1.0.7", ports={"metrics": 9191}))
    api_world.put(r.PODS, b.pod("epp-2", namespace=ns, labels={"app": "epp"}, ip="10.1.0.8", ready=False))
    api_world.put(r.PODS, b.pod("old-epp-1", namespace=ns, labels={"app": "old-epp"}, ip="fd00::5"))
    view = (await make_inventory()).view()
    assert len(view.inference_pools) == 1
    pool = view.inference_pools[0]
    assert (pool.namespace, pool.name, dict(pool.selector)) == (ns, "llama", selector)
    assert pool.variants == (VariantKey(ns, "l4"),)  # the LWS template is labelled app=big
    if version == "v1alpha2":
        assert pool.epp_service == "old-epp"
        assert pool.endpoints == (EppEndpoint(ns, "old-epp-1", "[fd00::5]:9090"),)
    else:  # v1 wins when a pool is served in both versions
        assert pool.epp_service == "llama-epp"
        assert pool.epp_metrics_port == 9191  # the named target port, resolved on the pod
        assert pool.endpoints == (EppEndpoint(ns, "epp-1", "10.1.0.7:9191"),)  # ready pods only


# ---- optional CRDs absent, installed, deleted ---------------------------------------------------------------


@pytest.mark.parametrize(
    "missing",
    [
        (r.LEADERWORKERSETS,),
        (r.INFERENCE_POOLS_V1, r.INFERENCE_POOLS_V1ALPHA2),
        (r.LEADERWORKERSETS, r.INFERENCE_POOLS_V1),
    ],
    ids=["lws", "both-pool-versions", "lws-and-pool-v1"],
)
async def test_missing_optional_crds_are_skipped(
    api_world: ApiWorld, make_inventory: MakeInventory, missing: tuple[r.ResourceType, ...]
) -> None:
    """The CRDs are really deleted from the shared control plane (and re-installed, also on failure)."""
    ns, kube = api_world.namespace, api_world.kube
    try:
        for rt in missing:
            remove_crd(kube, rt)
        api_world.put(r.VARIANT_AUTOSCALINGS, b.va("a", namespace=ns))
        api_world.put(r.DEPLOYMENTS, b.deployment("a", namespace=ns, replicas=0))
        api_world.mark()
        inventory = await make_inventory()
        view = inventory.view()
        assert view.synced
        assert [v.key.name for v in view.variants] == ["a"]
        absent = {_collection(h.name) for h in inventory.health() if h.absent}
        assert absent == {str(rt) for rt in missing}
        gone = {e.path for e in api_world.requests() if e.code == 404}
        assert gone == {rt.path(namespace=ns) for rt in missing}  # real 404s for the missing kinds, nothing else
        # The CRD gets installed later: picked up by the periodic re-check.
        rt = missing[0]
        await asyncio.to_thread(install_crd, kube, rt)
        if rt is r.LEADERWORKERSETS:
            api_world.put(r.VARIANT_AUTOSCALINGS, b.va("g", namespace=ns, target="g", kind="LeaderWorkerSet"))
            api_world.put(r.LEADERWORKERSETS, b.leaderworkerset("g", namespace=ns))
            await eventually(
                lambda: any(v.target is not None and v.key.name == "g" for v in inventory.view().variants),
                what="the LeaderWorkerSet target",
                timeout_s=10,
            )
        else:
            api_world.put(rt, b.pool_v1("p", namespace=ns, selector={"app": "vllm"}, epp="e"))
            await eventually(lambda: len(inventory.view().inference_pools) == 1, what="the new pool", timeout_s=10)
        assert not _health(inventory, str(rt)).absent
    finally:
        for rt in missing:
            install_crd(kube, rt)


async def test_crd_removed_while_watched(api_world: ApiWorld, make_inventory: MakeInventory) -> None:
    kube = api_world.kube
    pool = b.pool_v1("p", namespace=api_world.namespace, selector={"app": "vllm"}, epp="e")
    api_world.put(r.INFERENCE_POOLS_V1, pool)
    inventory = await make_inventory()
    assert len(inventory.view().inference_pools) == 1
    try:
        await asyncio.to_thread(remove_crd, kube, r.INFERENCE_POOLS_V1)
        # The CRD's finalizer deletes the pools, the served version goes, the watch ends; the re-watch and the
        # relist get a real 404: absent, and the store emptied.
        await eventually(
            lambda: _health(inventory, "inferencepools.inference.networking.k8s.io").absent,
            what="the collection to be absent",
            timeout_s=10,
        )
        assert inventory.view().inference_pools == ()
        assert _health(inventory, "inferencepools.inference.networking.k8s.io").stats.lists >= 2
    finally:
        install_crd(kube, r.INFERENCE_POOLS_V1)


# ---- nodes -------------------------------------------------------------------------------------------------


async def test_nodes_report_normalised_gpus(api_world: ApiWorld, make_inventory: MakeInventory) -> None:
    """Nodes are cluster-scoped: named after the test's namespace, deleted after it (apiworld teardown)."""
    prefix = api_world.namespace
    nvidia, amd = "nvidia.com/gpu", "amd.com/gpu"
    nodes = {
        "n1": ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, {nvidia: "8"}),
        "n2": ({"amd.com/gpu.product-name": "AMD-MI300X"}, {amd: "4"}),
        "n3": ({}, {}),
        "n4": ({"nvidia.com/gpu.product": "Tesla-T4"}, {nvidia: "0"}),
    }
    for name, (labels, allocatable) in nodes.items():
        stored = api_world.put(r.NODES, b.node(f"{prefix}-{name}", labels=labels, allocatable=allocatable))
        assert stored["status"]["allocatable"] == {"cpu": "64", **allocatable}  # written through /status
    inventory = await make_inventory()
    mine = tuple(n for n in inventory.view().nodes if n.name.startswith(f"{prefix}-"))
    assert mine == (NodeGpus(f"{prefix}-n1", "A100", 8), NodeGpus(f"{prefix}-n2", "MI300X", 4))


# ---- RBAC: a user without replicasets / nodes -----------------------------------------------------------------

READABLE = {
    "llmd.ai": ["variantautoscalings"],
    "apps": ["deployments", "statefulsets", "replicasets"],
    "leaderworkerset.x-k8s.io": ["leaderworkersets"],
    "": ["pods", "configmaps", "services"],
    "inference.networking.k8s.io": ["inferencepools"],
    "inference.networking.x-k8s.io": ["inferencepools"],
}


async def _restricted_client(world: ApiWorld, *, without: str) -> tuple[KubeClient, str]:
    """A user outside system:masters that a namespaced Role lets read what the inventory reads, except
    `without` (and, being namespaced, never nodes). Returns our client as that user and its name."""
    ns, user = world.namespace, f"{world.user}-ro"
    rules = [
        {"apiGroups": [group], "resources": [x for x in plurals if x != without], "verbs": ["get", "list", "watch"]}
        for group, plurals in READABLE.items()
    ]
    rbac = k8s.RbacAuthorizationV1Api(world.kube.api)
    rbac.create_namespaced_role(ns, {"metadata": {"name": "inventory-reader"}, "rules": rules})
    rbac.create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": "inventory-reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "inventory-reader"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )

    def granted() -> str | None:
        answer = world.kube.kubectl("auth", "can-i", "watch", "pods", "-n", ns, "--as", user, check=False)
        return None if answer.stdout.strip() == "yes" else answer.stdout.strip()

    until(f"RBAC for {user}", granted, timeout_s=10)
    kubeconfig = world.kube.plane.kubeconfig_for(user, AUDITED_GROUP)
    return await KubeClient.connect(kubeconfig=str(kubeconfig), request_timeout_s=10.0), user


@contextlib.asynccontextmanager
async def _restricted_inventory(
    world: ApiWorld, make_inventory: MakeInventory, *, without: str
) -> AsyncIterator[tuple[Inventory, str]]:
    """An inventory as a user of `_restricted_client`; stopped before its client is closed."""
    kube, user = await _restricted_client(world, without=without)
    inventory: Inventory | None = None
    try:
        inventory = await make_inventory(kube=kube)
        yield inventory, user
    finally:
        if inventory is not None:
            await inventory.stop()  # before its client goes
        await kube.close()


def _audit_log(world: ApiWorld) -> Path:
    assert world.audit_log is not None, "this test reads the audit log, which only the local control plane writes"
    return world.audit_log


async def test_forbidden_replicasets_fall_back_to_the_pod_template_hash(
    api_world: ApiWorld, make_inventory: MakeInventory
) -> None:
    """Real pods of a real Deployment; the inventory's user may not read ReplicaSets (a real 403), so the pod's
    pod-template-hash label names the Deployment. A pod of a bare ReplicaSet (no hash label) is not attributed."""
    ns = api_world.namespace
    api_world.put(r.VARIANT_AUTOSCALINGS, b.va("l4", namespace=ns))
    api_world.put(r.DEPLOYMENTS, _without_status(b.deployment("l4", namespace=ns, replicas=1)))
    bare = b.replicaset("l4-zz", namespace=ns, deployment_name="zz")
    del bare["metadata"]["ownerReferences"]
    api_world.put(r.REPLICASETS, {**bare, "spec": {**bare["spec"], "replicas": 1}})
    [pod] = _wait_pods(api_world, "app=l4", 1)
    [other] = _wait_pods(api_world, "app=zz", 1)
    assert pod["metadata"]["labels"]["pod-template-hash"]
    assert "pod-template-hash" not in other["metadata"]["labels"]
    async with _restricted_inventory(api_world, make_inventory, without="replicasets") as (inventory, user):
        assert [(p.name, p.variant) for p in inventory.view().pods] == [(pod["metadata"]["name"], "l4")]
        assert _health(inventory, "replicasets").absent
    rs_answers = {e.code for e in read_audit(_audit_log(api_world), user=user) if e.resource == "replicasets"}
    assert rs_answers == {403}


async def test_forbidden_nodes_are_skipped(api_world: ApiWorld, make_inventory: MakeInventory) -> None:
    async with _restricted_inventory(api_world, make_inventory, without="") as (inventory, user):
        assert inventory.view().nodes == ()
        assert _health(inventory, "nodes").absent
        assert not _health(inventory, "replicasets").absent
    node_answers = {e.code for e in read_audit(_audit_log(api_world), user=user) if e.resource == "nodes"}
    assert node_answers == {403}


# ---- list / watch ---------------------------------------------------------------------------------------------


async def test_watches_closed_by_the_server_resume_from_the_last_resource_version(
    api_world: ApiWorld, make_inventory: MakeInventory
) -> None:
    """timeoutSeconds=1: the real server ends every watch after a second; each re-watch starts from the last
    resourceVersion seen (an event's or a bookmark's), never from scratch, and nothing is listed again."""
    ns = api_world.namespace
    inventory = await make_inventory(reflector=replace(FAST, watch_timeout_s=1.0, backoff_jitter=0.0))
    api_world.put(r.VARIANT_AUTOSCALINGS, b.va("a", namespace=ns))
    await eventually(lambda: len(inventory.view().variants) == 1, what="VA a")
    seen_rv = int(_health(inventory, "variantautoscalings").resource_version)
    api_world.mark()
    health = _health(inventory, "variantautoscalings")
    watches = health.stats.watches
    await eventually(lambda: health.stats.watches >= watches + 3, what="three re-watches", timeout_s=10)
    api_world.put(r.VARIANT_AUTOSCALINGS, b.va("b", namespace=ns))
    await eventually(lambda: len(inventory.view().variants) == 2, what="VA b after the re-watches")
    va = [e for e in api_world.requests() if e.resource == "variantautoscalings"]
    rewatches = [e for e in va if e.verb == "watch"]
    assert len(rewatches) >= 3
    assert [e for e in va if e.verb == "list"] == []  # no relist
    versions = [int(_query(e.uri)["resourceVersion"]) for e in rewatches]
    assert all(v >= seen_rv for v in versions), (seen_rv, versions)
    assert versions == sorted(versions)
    assert (health.stats.lists, health.stats.errors) == (1, 0)


async def test_wait_for_change_wakes_on_status_writes(api_world: ApiWorld, make_inventory: MakeInventory) -> None:
    ns = api_world.namespace
    api_world.put(r.VARIANT_AUTOSCALINGS, b.va("a", namespace=ns))
    inventory = await make_inventory()
    assert not await inventory.wait_for_change(0.1)
    since = inventory.variants_version
    waiter = asyncio.create_task(inventory.wait_for_change(5.0, since=since))
    await asyncio.sleep(0.05)
    status = {"desiredOptimizedAlloc": {"numReplicas": 3, "lastRunTime": "2026-01-01T00:00:00Z", "reason": "x"}}
    written = await asyncio.to_thread(api_world.patch_status, r.VARIANT_AUTOSCALINGS, "a", status)
    assert await waiter
    desired = inventory.view().variants[0].status.desired
    assert desired is not None
    assert desired.num_replicas == 3
    await eventually(
        lambda: (
            (s := inventory.stored_status(VariantKey(ns, "a"))) is not None
            and s.resource_version == written["metadata"]["resourceVersion"]
        ),
        what="the stored resourceVersion",
    )
    # pods do not move the variants version
    version, variants_version = inventory.version, inventory.variants_version
    api_world.put(r.PODS, b.pod("p", namespace=ns))
    await eventually(lambda: inventory.version > version, what="the pod event")
    assert not await inventory.wait_for_change(0.2)
    assert inventory.variants_version == variants_version


async def test_stop_cancels_every_watch(api_world: ApiWorld, client: KubeClient) -> None:
    """The audit log has a watch's ResponseComplete only once its stream has ended, on either side."""
    options = InventoryOptions(
        watch_namespace=api_world.namespace,
        controller_namespace=api_world.namespace,
        reflector=replace(FAST, absent_recheck_s=30),
    )
    inventory = Inventory(client, options)
    async with inventory:
        assert await inventory.wait_synced(10.0)
        expected = len(inventory.health())
        await eventually(lambda: len(_watch_stages(api_world)[0]) >= expected, what="every watch", timeout_s=10)
        started, ended = _watch_stages(api_world)
        assert started - ended  # open while the inventory runs
    await eventually(lambda: not _open_watches(api_world), what="every watch to end", timeout_s=10)
    started, ended = _watch_stages(api_world)
    assert len(started) >= expected
    assert started <= ended


def _watch_stages(world: ApiWorld) -> tuple[set[str], set[str]]:
    """auditIDs of this test user's watches that started, and that completed."""
    started: set[str] = set()
    ended: set[str] = set()
    with _audit_log(world).open("rb") as log:
        for line in log:
            if not line.endswith(b"\n"):
                break
            event = json.loads(line)
            if event.get("user", {}).get("username") != world.user or event.get("verb") != "watch":
                continue
            if event.get("stage") == "ResponseStarted":
                started.add(event["auditID"])
            elif event.get("stage") == "ResponseComplete":
                ended.add(event["auditID"])
    return started, ended


def _open_watches(world: ApiWorld) -> set[str]:
    started, ended = _watch_stages(world)
    return started - ended


async def test_a_bug_in_a_projection_does_not_kill_the_watch(api_world: ApiWorld, client: KubeClient) -> None:
    broken = {"armed": True}

    def project(obj: dict[str, object]) -> str:
        name = str((obj.get("metadata") or {}).get("name"))  # type: ignore[union-attr]
        if name == "bad" and broken["armed"]:
            broken["armed"] = False
            raise RuntimeError("bug")
        return name

    reflector: Reflector[str] = Reflector(client, r.PODS, namespace=api_world.namespace, project=project, options=FAST)
    task = asyncio.create_task(reflector.run())
    try:
        await asyncio.wait_for(reflector.wait_synced(), 10)
        api_world.mark()
        await asyncio.to_thread(api_world.put, r.PODS, b.pod("bad", namespace=api_world.namespace))
        await asyncio.to_thread(api_world.put, r.PODS, b.pod("good", namespace=api_world.namespace))
        await eventually(lambda: sorted(reflector.store.values()) == ["bad", "good"], what="recovery by relist")
        assert reflector.stats.lists == 2
        assert reflector.stats.errors == 1
        relists = [e for e in api_world.requests() if e.verb == "list" and "continue" not in _query(e.uri)]
        assert len(relists) == 1  # the relist, for real
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# ---- the required CRD missing ------------------------------------------------------------------------------


async def test_required_crd_missing_never_syncs_does_not_spin_and_syncs_once_installed(tmp_path: Path) -> None:
    """An adapter started before its CRD (a Helm install racing the CRD, a CRD deleted by mistake).

    The shared control plane always has the VA CRD, so this test starts an etcd + kube-apiserver of its own
    without it (realapi.RealApiServer, about 3 s): real 404s on every list, backed off, and the inventory syncs
    on its own once the CRD is installed.
    """
    server = RealApiServer(tmp_path / "no-crd", install_crd=False)
    await server.start()
    kube_client: KubeClient | None = None
    inventory: Inventory | None = None
    try:
        kubeconfig = server.write_kubeconfig(tmp_path / "serve.kubeconfig")
        kube_client = await KubeClient.connect(kubeconfig=str(kubeconfig), request_timeout_s=10.0)
        inventory = Inventory(kube_client, InventoryOptions(controller_namespace="wva-system", reflector=FAST))
        await inventory.start()
        await asyncio.sleep(1.0)
        assert not inventory.view().synced
        health = _health(inventory, "variantautoscalings")
        assert not health.synced
        assert "404" in health.stats.last_error
        lists = server.by(DEFAULT_CLIENT, method="GET", path_contains="variantautoscalings")
        assert {e.code for e in lists} == {404}
        # backoff 0.02 · 2^n capped at 0.2 s: about 9 lists in a second, never hundreds
        assert 3 <= len(lists) <= 14, len(lists)
        assert server.kube is not None
        await asyncio.to_thread(server.kube.kubectl, "apply", "--server-side", "-k", str(VA_CRD))
        assert await inventory.wait_synced(15.0), [h for h in inventory.health() if not h.synced]
        assert _health(inventory, "variantautoscalings").synced
    finally:
        if inventory is not None:
            await inventory.stop()
        if kube_client is not None:
            await kube_client.close()
        await server.stop()
