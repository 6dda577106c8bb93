"""Inventory against the fake API server: the ClusterView it builds, and list/watch under failures."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace

import pytest

from adapter.domain.cluster import EppEndpoint, PodInfo
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import NodeGpus
from adapter.k8s import resources as r
from adapter.k8s.client import KubeClient
from adapter.k8s.inventory import Inventory, InventoryOptions
from adapter.k8s.reflector import ReflectorOptions
from tests.k8s import builders as b
from tests.k8s.builders import NS
from tests.k8s.conftest import FAST, eventually
from tests.k8s.fake_apiserver import FakeApiServer

CONTROLLER_NS = "wva-system"
MakeInventory = Callable[..., Awaitable[Inventory]]


@pytest.fixture
async def make_inventory(kube: KubeClient) -> AsyncIterator[MakeInventory]:
    """Start an Inventory (fast retry timing) and wait for its initial sync; stopped after the test."""
    started: list[Inventory] = []

    async def make(*, sync: bool = True, reflector: ReflectorOptions = FAST, **options: object) -> Inventory:
        opts = InventoryOptions(controller_namespace=CONTROLLER_NS, reflector=reflector, **options)  # type: ignore[arg-type]
        inventory = Inventory(kube, opts)
        started.append(inventory)
        await inventory.start()
        if sync:
            assert await inventory.wait_synced(5.0), [h for h in inventory.health() if not h.synced]
        return inventory

    yield make
    for inventory in started:
        await inventory.stop()


def _fleet(api: FakeApiServer) -> None:
    """Two valid VAs (Deployment, LeaderWorkerSet), one invalid, pods of every kind of owner."""
    api.put(r.VARIANT_AUTOSCALINGS, b.va("l4", labels={"inference.optimization/acceleratorName": "L4"}))
    api.put(r.VARIANT_AUTOSCALINGS, b.va("h100", target="big", kind="LeaderWorkerSet", cost="40.0"))
    api.put(r.VARIANT_AUTOSCALINGS, b.va("broken", min_replicas=5, max_replicas=2))
    api.put(r.VARIANT_AUTOSCALINGS, b.va("orphan", target="nowhere"))
    tmpl = b.template(
        gpus=2,
        args=["--max-num-seqs", "64", "--max-num-batched-tokens=4096"],
        node_selector={"nvidia.com/gpu.product": "NVIDIA-L4"},
        labels={"app": "llama", "variant": "l4"},
    )
    api.put(r.DEPLOYMENTS, b.deployment("l4", replicas=3, status_replicas=3, ready=2, tmpl=tmpl))
    api.put(r.LEADERWORKERSETS, b.leaderworkerset("big"))
    api.put(r.REPLICASETS, b.replicaset("l4-7d9f", deployment_name="l4"))
    api.put(r.PODS, b.pod("l4-7d9f-a", owner="l4-7d9f", ip="10.0.0.1"))
    api.put(r.PODS, b.pod("l4-7d9f-b", owner="l4-7d9f", ready=False, phase="Pending", ip=""))
    api.put(r.PODS, b.pod("l4-7d9f-c", owner="l4-7d9f", phase="Succeeded"))  # finished: not listed
    # The ReplicaSet of this pod is not (yet) known: the pod-template-hash label names the Deployment.
    api.put(r.PODS, b.pod("l4-5c6b-x", owner="l4-5c6b", labels={"pod-template-hash": "5c6b"}, ip="10.0.0.3"))
    api.put(
        r.PODS,
        b.pod("big-0", owner_kind="StatefulSet", owner="big", labels={"leaderworkerset.sigs.k8s.io/name": "big"}),
    )
    api.put(r.PODS, b.pod("other-1", owner="other-rs"))  # owned by something no VA targets


async def test_view_of_a_fleet(fake_api: FakeApiServer, make_inventory: MakeInventory) -> None:
    _fleet(fake_api)
    view = (await make_inventory()).view()
    assert view.synced
    by_name = {v.key.name: v for v in view.variants}
    assert sorted(by_name) == ["h100", "l4", "orphan"]
    l4 = by_name["l4"]
    assert l4.accelerator == "L4"  # the VA label wins over the nodeSelector
    assert l4.spec.cost == 10.0
    assert l4.spec.max_replicas == 4
    assert l4.target is not None
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
    assert len(view.invalid) == 1
    assert "llm/broken" in view.invalid[0]
    assert "minReplicas (5) must be less than or equal to maxReplicas (2)" in view.invalid[0]
    assert view.pods == (
        PodInfo(NS, "big-0", "h100", True, "10.0.0.1"),
        PodInfo(NS, "l4-5c6b-x", "l4", True, "10.0.0.3"),
        PodInfo(NS, "l4-7d9f-a", "l4", True, "10.0.0.1"),
        PodInfo(NS, "l4-7d9f-b", "l4", False, ""),
    )


async def test_view_follows_watch_events(fake_api: FakeApiServer, make_inventory: MakeInventory) -> None:
    _fleet(fake_api)
    inventory = await make_inventory()
    first = inventory.view()
    assert inventory.view() is first  # nothing changed: the cached value
    fake_api.put(r.DEPLOYMENTS, b.deployment("l4", replicas=5, status_replicas=4, ready=4))
    fake_api.delete(r.PODS, NS, "l4-7d9f-b")
    fake_api.put(r.VARIANT_AUTOSCALINGS, b.va("broken"))  # fixed
    fake_api.delete(r.VARIANT_AUTOSCALINGS, NS, "orphan")

    def settled() -> bool:
        v = inventory.view()
        names = [x.key.name for x in v.variants]
        l4 = next(x for x in v.variants if x.key.name == "l4")
        return (
            names == ["broken", "h100", "l4"] and l4.target is not None and l4.target.replicas == 4 and len(v.pods) == 3
        )

    await eventually(settled, what="the view to follow the watch events")
    assert inventory.view().invalid == ()


async def test_unchanged_projection_does_not_bump_versions(
    fake_api: FakeApiServer, make_inventory: MakeInventory
) -> None:
    _fleet(fake_api)
    inventory = await make_inventory()
    version = inventory.version
    obj = fake_api.get(r.PODS, NS, "l4-7d9f-a")
    obj["status"]["startTime"] = "2026-01-01T00:00:05Z"  # irrelevant to the projection
    fake_api.put(r.PODS, obj)
    fake_api.put(r.PODS, b.pod("marker", owner="l4-7d9f"))
    await eventually(lambda: any(p.name == "marker" for p in inventory.view().pods), what="marker pod")
    assert inventory.version == version + 1


async def test_configmaps_are_filtered_by_label(fake_api: FakeApiServer, make_inventory: MakeInventory) -> None:
    sat = "wva-saturation-scaling-config"
    fake_api.put(r.CONFIGMAPS, b.configmap(sat, namespace=CONTROLLER_NS, data={"default": "kvCacheThreshold: 0.7"}))
    fake_api.put(r.CONFIGMAPS, b.configmap(sat, namespace=NS, data={"default": "kvCacheThreshold: 0.9"}))
    fake_api.put(r.CONFIGMAPS, b.configmap("kube-root-ca.crt", namespace=NS, data={"ca.crt": "x"}, labels={}))
    inventory = await make_inventory()
    assert [(ns, name) for ns, name, _ in inventory.view().configmaps] == [(NS, sat), (CONTROLLER_NS, sat)]
    cm_requests = [e for e in fake_api.log if "/configmaps" in e.path]
    assert cm_requests
    assert all(
        e.query.get("labelSelector") == "app.kubernetes.io/name=workload-variant-autoscaler" for e in cm_requests
    )
    # Removing the label makes the ConfigMap leave the watch (the API server sends DELETED).
    fake_api.put(r.CONFIGMAPS, b.configmap(sat, namespace=NS, data={"default": "x"}, labels={}))
    await eventually(lambda: len(inventory.view().configmaps) == 1, what="the unlabelled ConfigMap to vanish")
    assert inventory.view().configmaps[0][:2] == (CONTROLLER_NS, sat)


async def test_watch_namespace_restricts_everything_but_global_configmaps(
    fake_api: FakeApiServer, make_inventory: MakeInventory
) -> None:
    sat = "wva-saturation-scaling-config"
    for ns in (NS, "elsewhere"):
        fake_api.put(r.VARIANT_AUTOSCALINGS, b.va("v", namespace=ns))
        fake_api.put(r.DEPLOYMENTS, b.deployment("v", namespace=ns))
        fake_api.put(r.CONFIGMAPS, b.configmap(sat, namespace=ns, data={}))
    fake_api.put(r.CONFIGMAPS, b.configmap(sat, namespace=CONTROLLER_NS, data={}))
    inventory = await make_inventory(watch_namespace=NS)
    view = inventory.view()
    assert [str(v.key) for v in view.variants] == [f"{NS}/v"]
    assert sorted(ns for ns, _, _ in view.configmaps) == [NS, CONTROLLER_NS]
    va_paths = {e.path for e in fake_api.log if "variantautoscalings" in e.path}
    assert va_paths == {f"/apis/llmd.ai/v1alpha1/namespaces/{NS}/variantautoscalings"}


@pytest.mark.parametrize("version", ["v1", "v1alpha2", "both"])
async def test_inference_pools_and_epp_endpoints(
    fake_api: FakeApiServer, make_inventory: MakeInventory, version: str
) -> None:
    _fleet(fake_api)
    selector = {"app": "llama"}
    if version in ("v1", "both"):
        fake_api.put(r.INFERENCE_POOLS_V1, b.pool_v1("llama", selector=selector, epp="llama-epp"))
    if version in ("v1alpha2", "both"):
        fake_api.put(r.INFERENCE_POOLS_V1ALPHA2, b.pool_v1alpha2("llama", selector=selector, epp="old-epp"))
    fake_api.put(
        r.SERVICES,
        b.service(
            "llama-epp",
            selector={"app": "epp"},
            ports=[{"name": "grpc", "port": 9002}, {"name": "http-metrics", "port": 9090, "targetPort": "metrics"}],
        ),
    )
    fake_api.put(r.SERVICES, b.service("old-epp", selector={"app": "old-epp"}, ports=[]))
    fake_api.put(r.PODS, b.pod("epp-1", owner="epp-rs", labels={"app": "epp"}, ip="10.1.0.7", ports={"metrics": 9191}))
    fake_api.put(r.PODS, b.pod("epp-2", owner="epp-rs", labels={"app": "epp"}, ip="10.1.0.8", ready=False))
    fake_api.put(r.PODS, b.pod("old-epp-1", owner="old-rs", labels={"app": "old-epp"}, ip="fd00::5"))
    view = (await make_inventory()).view()
    assert len(view.inference_pools) == 1
    pool = view.inference_pools[0]
    assert (pool.namespace, pool.name, dict(pool.selector)) == (NS, "llama", selector)
    assert pool.variants == (VariantKey(NS, "l4"),)  # the LWS template is labelled app=big
    if version == "v1alpha2":
        assert pool.epp_service == "old-epp"
        assert pool.endpoints == (EppEndpoint(NS, "old-epp-1", "[fd00::5]:9090"),)
    else:  # v1 wins when a pool is served in both versions
        assert pool.epp_service == "llama-epp"
        assert pool.epp_metrics_port == 9191  # the named target port, resolved on the pod
        assert pool.endpoints == (EppEndpoint(NS, "epp-1", "10.1.0.7:9191"),)  # ready pods only


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
    fake_api: FakeApiServer, make_inventory: MakeInventory, missing: tuple[r.ResourceType, ...]
) -> None:
    for rt in missing:
        fake_api.unserve(rt)
    fake_api.put(r.VARIANT_AUTOSCALINGS, b.va("a"))
    fake_api.put(r.DEPLOYMENTS, b.deployment("a"))
    inventory = await make_inventory()
    view = inventory.view()
    assert view.synced
    assert [v.key.name for v in view.variants] == ["a"]
    absent = {h.name for h in inventory.health() if h.absent}
    assert absent == {str(rt) for rt in missing}
    # The CRD gets installed later: picked up by the periodic re-check.
    rt = missing[0]
    fake_api.serve(rt)
    if rt is r.LEADERWORKERSETS:
        fake_api.put(r.VARIANT_AUTOSCALINGS, b.va("g", target="g", kind="LeaderWorkerSet"))
        fake_api.put(r.LEADERWORKERSETS, b.leaderworkerset("g"))
        await eventually(lambda: any(v.target is not None and v.key.name == "g" for v in inventory.view().variants))
    else:
        fake_api.put(rt, b.pool_v1("p", selector={"app": "vllm"}, epp="e"))
        await eventually(lambda: len(inventory.view().inference_pools) == 1, what="the new pool")


async def test_crd_removed_while_watched(fake_api: FakeApiServer, make_inventory: MakeInventory) -> None:
    fake_api.put(r.INFERENCE_POOLS_V1, b.pool_v1("p", selector={"app": "vllm"}, epp="e"))
    inventory = await make_inventory()
    assert len(inventory.view().inference_pools) == 1
    fake_api.unserve(r.INFERENCE_POOLS_V1)
    await eventually(lambda: inventory.view().inference_pools == (), what="the pools of the removed CRD to go")
    assert any(h.absent for h in inventory.health() if h.name.startswith("inferencepools.inference.networking.k8s.io"))


async def test_required_crd_missing_never_syncs_and_does_not_spin(
    fake_api: FakeApiServer, make_inventory: MakeInventory
) -> None:
    fake_api.unserve(r.VARIANT_AUTOSCALINGS)
    inventory = await make_inventory(sync=False)
    await asyncio.sleep(1.0)
    assert not inventory.view().synced
    health = next(h for h in inventory.health() if h.name.startswith("variantautoscalings"))
    assert not health.synced
    assert "404" in health.stats.last_error
    # backoff 0.02 · 2^n capped at 0.2 s: about 9 lists in a second, never hundreds
    assert 3 <= fake_api.count(path_contains="variantautoscalings") <= 12


async def test_nodes_report_normalised_gpus(fake_api: FakeApiServer, make_inventory: MakeInventory) -> None:
    fake_api.put(
        r.NODES,
        b.node("n1", labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, allocatable={"nvidia.com/gpu": "8"}),
    )
    fake_api.put(
        r.NODES, b.node("n2", labels={"amd.com/gpu.product-name": "AMD-MI300X"}, allocatable={"amd.com/gpu": "4"})
    )
    fake_api.put(r.NODES, b.node("n3", labels={}, allocatable={}))
    fake_api.put(
        r.NODES, b.node("n4", labels={"nvidia.com/gpu.product": "Tesla-T4"}, allocatable={"nvidia.com/gpu": "0"})
    )
    inventory = await make_inventory()
    assert inventory.view().nodes == (NodeGpus("n1", "A100", 8), NodeGpus("n2", "MI300X", 4))


async def test_forbidden_replicasets_fall_back_to_the_pod_template_hash(
    fake_api: FakeApiServer, make_inventory: MakeInventory
) -> None:
    fake_api.fail(path_contains="/replicasets", status=403, times=None)
    fake_api.put(r.VARIANT_AUTOSCALINGS, b.va("l4"))
    fake_api.put(r.DEPLOYMENTS, b.deployment("l4"))
    fake_api.put(r.PODS, b.pod("l4-5c6b-x", owner="l4-5c6b", labels={"pod-template-hash": "5c6b"}))
    fake_api.put(r.PODS, b.pod("l4-zz-y", owner="l4-zz"))  # no hash label: cannot be attributed
    inventory = await make_inventory()
    assert [(p.name, p.variant) for p in inventory.view().pods] == [("l4-5c6b-x", "l4")]


async def test_forbidden_nodes_are_skipped(fake_api: FakeApiServer, make_inventory: MakeInventory) -> None:
    fake_api.fail(path_contains="/api/v1/nodes", status=403, times=None)
    inventory = await make_inventory()
    assert inventory.view().nodes == ()
    assert any(h.absent for h in inventory.health() if h.name.startswith("nodes"))


# ---- list / watch under failures ------------------------------------------------------------------------


def _reflector_health(inventory: Inventory, prefix: str) -> object:
    return next(h for h in inventory.health() if h.name.startswith(prefix))


async def test_closed_stream_rewatches_from_the_last_resource_version(
    fake_api: FakeApiServer, make_inventory: MakeInventory
) -> None:
    inventory = await make_inventory()
    fake_api.put(r.VARIANT_AUTOSCALINGS, b.va("a"))
    await eventually(lambda: len(inventory.view().variants) == 1, what="VA a")
    seen_rv = str(fake_api.rv)
    lists = fake_api.count(path_contains="variantautoscalings", watch=False)
    since = len(fake_api.log)
    fake_api.close_watches(r.VARIANT_AUTOSCALINGS)
    await eventually(lambda: fake_api.count(path_contains="variantautoscalings", watch=True, since=since) == 1)
    rewatch = next(e for e in fake_api.log[since:] if e.watch and "variantautoscalings" in e.path)
    assert rewatch.query["resourceVersion"] == seen_rv
    assert fake_api.count(path_contains="variantautoscalings", watch=False) == lists  # no relist


async def test_bookmark_moves_the_resource_version(fake_api: FakeApiServer, make_inventory: MakeInventory) -> None:
    inventory = await make_inventory()
    await eventually(lambda: fake_api.watch_count(r.VARIANT_AUTOSCALINGS) == 1, what="the VA watch")
    fake_api.bookmark(r.VARIANT_AUTOSCALINGS)
    bookmark_rv = str(fake_api.rv)
    await eventually(lambda: _health_rv(inventory, "variantautoscalings") == bookmark_rv, what="the bookmark RV")
    since = len(fake_api.log)
    fake_api.close_watches(r.VARIANT_AUTOSCALINGS)
    await eventually(lambda: fake_api.count(path_contains="variantautoscalings", watch=True, since=since) == 1)
    rewatch = next(e for e in fake_api.log[since:] if e.watch and "variantautoscalings" in e.path)
    assert rewatch.query["resourceVersion"] == bookmark_rv


def _health_rv(inventory: Inventory, prefix: str) -> str:
    return next(h.resource_version for h in inventory.health() if h.name.startswith(prefix))


async def test_gone_mid_watch_relists_and_catches_up(fake_api: FakeApiServer, make_inventory: MakeInventory) -> None:
    fake_api.put(r.VARIANT_AUTOSCALINGS, b.va("a"))
    inventory = await make_inventory()
    await eventually(lambda: fake_api.watch_count(r.VARIANT_AUTOSCALINGS) == 1, what="the VA watch")
    lists = fake_api.count(path_contains="variantautoscalings", watch=False)
    # While the watch is being expired, a VA is deleted and another added: only a relist shows both.
    fake_api.expire(r.VARIANT_AUTOSCALINGS)
    fake_api.objects[("llmd.ai", "v1alpha1", "variantautoscalings")].clear()
    fake_api.put(r.VARIANT_AUTOSCALINGS, b.va("b"))
    fake_api.compacted[("llmd.ai", "v1alpha1", "variantautoscalings")] = fake_api.rv
    await eventually(lambda: [v.key.name for v in inventory.view().variants] == ["b"], what="the relisted view")
    assert fake_api.count(path_contains="variantautoscalings", watch=False) == lists + 1
    health = _reflector_health(inventory, "variantautoscalings")
    assert health.stats.relists_after_gone == 1  # type: ignore[attr-defined]
    fake_api.put(r.VARIANT_AUTOSCALINGS, b.va("c"))  # and the new watch works
    await eventually(lambda: len(inventory.view().variants) == 2, what="VA c after the relist")


async def test_server_errors_back_off_without_spinning(fake_api: FakeApiServer, make_inventory: MakeInventory) -> None:
    inventory = await make_inventory()
    await eventually(lambda: fake_api.watch_count(r.PODS) == 1, what="the pod watch")
    fault = fake_api.fail(path_contains="/pods", status=500, times=None)
    since = len(fake_api.log)
    fake_api.drop_watches(r.PODS)
    await asyncio.sleep(1.0)
    attempts = fake_api.count(path_contains="/pods", since=since)
    # Backoff 0.02, 0.04, 0.08, 0.16, 0.2, 0.2 … s: ≈ 8 attempts in a second; a spin would be thousands.
    assert 3 <= attempts <= 12, attempts
    assert inventory.view().synced  # the last good state is still served
    fault.times = 0
    fake_api.put(r.PODS, b.pod("after", owner="x"))
    await eventually(lambda: _health_rv(inventory, "pods") == str(fake_api.rv), what="recovery")
    assert fake_api.count(path_contains="/pods", watch=False, since=since) == 0  # re-watched, never relisted


async def test_dropped_connections_rewatch_without_relisting(
    fake_api: FakeApiServer, make_inventory: MakeInventory
) -> None:
    inventory = await make_inventory()
    pods = next(h for h in inventory.health() if h.name.startswith("pods"))
    for i in range(3):
        await eventually(lambda: fake_api.watch_count(r.PODS) == 1, what="the pod watch")
        fake_api.put(r.PODS, b.pod(f"p{i}", owner="x"))
        await eventually(lambda: _health_rv(inventory, "pods") == str(fake_api.rv), what=f"event {i}")
        fake_api.drop_watches(r.PODS)

        def noticed(drops: int = i + 1) -> bool:
            return pods.stats.errors == drops

        await eventually(noticed, what=f"drop {i + 1} noticed")
    await eventually(lambda: fake_api.watch_count(r.PODS) == 1, what="the last re-watch")
    assert pods.stats.lists == 1
    assert pods.stats.watches == 4
    assert "ClientPayloadError" in pods.stats.last_error


async def test_streams_that_close_at_once_do_not_spin(fake_api: FakeApiServer, make_inventory: MakeInventory) -> None:
    await make_inventory()
    since = len(fake_api.log)
    fake_api.empty_watches = True  # every watch ends immediately without an event (no error)
    fake_api.close_watches(r.CONFIGMAPS)
    await asyncio.sleep(1.0)
    watches = fake_api.count(path_contains="/configmaps", watch=True, since=since)
    assert 3 <= watches <= 12, watches


async def test_wait_for_change_wakes_on_status_writes(fake_api: FakeApiServer, make_inventory: MakeInventory) -> None:
    fake_api.put(r.VARIANT_AUTOSCALINGS, b.va("a"))
    inventory = await make_inventory()
    assert not await inventory.wait_for_change(0.1)
    since = inventory.variants_version
    waiter = asyncio.create_task(inventory.wait_for_change(5.0, since=since))
    await asyncio.sleep(0.05)
    obj = fake_api.get(r.VARIANT_AUTOSCALINGS, NS, "a")
    obj["status"] = {"desiredOptimizedAlloc": {"numReplicas": 3, "lastRunTime": "2026-01-01T00:00:00Z", "reason": "x"}}
    fake_api.put(r.VARIANT_AUTOSCALINGS, obj)
    assert await waiter
    desired = inventory.view().variants[0].status.desired
    assert desired is not None
    assert desired.num_replicas == 3
    stored = inventory.stored_status(VariantKey(NS, "a"))
    assert stored is not None
    assert stored.resource_version == str(fake_api.rv)
    # pods do not move the variants version
    version = inventory.variants_version
    fake_api.put(r.PODS, b.pod("p", owner="x"))
    assert not await inventory.wait_for_change(0.2)
    assert inventory.variants_version == version


async def test_malformed_status_is_ignored_not_invalid(fake_api: FakeApiServer, make_inventory: MakeInventory) -> None:
    fake_api.put(
        r.VARIANT_AUTOSCALINGS,
        b.va("a", status={"desiredOptimizedAlloc": {"numReplicas": 1, "lastRunTime": "yesterday"}}),
    )
    view = (await make_inventory()).view()
    assert [v.key.name for v in view.variants] == ["a"]
    assert view.variants[0].status.desired is None
    assert view.invalid == ()


async def test_stop_cancels_every_watch(fake_api: FakeApiServer, kube: KubeClient) -> None:
    inventory = Inventory(kube, InventoryOptions(reflector=replace(FAST, absent_recheck_s=30)))
    async with inventory:
        assert await inventory.wait_synced(5.0)
        await eventually(lambda: fake_api.watch_count(r.PODS) == 1, what="the pod watch")
    await eventually(lambda: not fake_api.watchers, what="every watch to end")


async def test_a_bug_in_a_projection_does_not_kill_the_watch(fake_api: FakeApiServer, kube: KubeClient) -> None:
    from adapter.k8s.reflector import Reflector

    broken = {"armed": True}

    def project(obj: dict[str, object]) -> str:
        name = str((obj.get("metadata") or {}).get("name"))  # type: ignore[union-attr]
        if name == "bad" and broken["armed"]:
            broken["armed"] = False
            raise RuntimeError("bug")
        return name

    reflector: Reflector[str] = Reflector(kube, r.PODS, project=project, options=FAST)
    task = asyncio.create_task(reflector.run())
    try:
        await reflector.wait_synced()
        fake_api.put(r.PODS, b.pod("bad"))
        fake_api.put(r.PODS, b.pod("good"))
        await eventually(lambda: sorted(reflector.store.values()) == ["bad", "good"], what="recovery by relist")
        assert reflector.stats.lists == 2
        assert reflector.stats.errors == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
