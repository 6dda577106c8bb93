"""Inventory against the fake API server: only what needs a fault the real kube-apiserver cannot produce on demand.

Everything else (the view of a fleet, watch events, label-filtered ConfigMaps, the watch namespace, InferencePools
and EPP endpoints, optional CRDs missing / installed / deleted, the required CRD missing, nodes, RBAC-forbidden
ReplicaSets and Nodes, watches resumed from a resourceVersion, wait_for_change, stop, a bug in a projection) moved
to the real server: tests/e2e_k8s/test_api_inventory.py. Each test here names, in its docstring, the fault it needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from adapter.domain.ids import VariantKey
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


async def test_invalid_spec_is_reported_not_served(fake_api: FakeApiServer, make_inventory: MakeInventory) -> None:
    """Fault: a VA spec our CRD's schema refuses (minReplicas > maxReplicas; the real server answers 422)."""
    fake_api.put(r.VARIANT_AUTOSCALINGS, b.va("l4"))
    fake_api.put(r.VARIANT_AUTOSCALINGS, b.va("broken", min_replicas=5, max_replicas=2))
    inventory = await make_inventory()
    view = inventory.view()
    assert [v.key.name for v in view.variants] == ["l4"]
    assert len(view.invalid) == 1
    assert "llm/broken" in view.invalid[0]
    assert "minReplicas (5) must be less than or equal to maxReplicas (2)" in view.invalid[0]
    assert list(view.invalid_keys) == [VariantKey(NS, "broken")]
    fake_api.put(r.VARIANT_AUTOSCALINGS, b.va("broken"))  # fixed
    await eventually(lambda: len(inventory.view().variants) == 2, what="the fixed VA")
    assert inventory.view().invalid == ()


async def test_malformed_status_is_ignored_not_invalid(fake_api: FakeApiServer, make_inventory: MakeInventory) -> None:
    """Fault: a VA status our CRD's schema refuses (lastRunTime "yesterday"; the real server answers 422)."""
    fake_api.put(
        r.VARIANT_AUTOSCALINGS,
        b.va("a", status={"desiredOptimizedAlloc": {"numReplicas": 1, "lastRunTime": "yesterday"}}),
    )
    view = (await make_inventory()).view()
    assert [v.key.name for v in view.variants] == ["a"]
    assert view.variants[0].status.desired is None
    assert view.invalid == ()


# ---- list / watch under failures ------------------------------------------------------------------------


def _reflector_health(inventory: Inventory, prefix: str) -> object:
    return next(h for h in inventory.health() if h.name.startswith(prefix))


def _health_rv(inventory: Inventory, prefix: str) -> str:
    return next(h.resource_version for h in inventory.health() if h.name.startswith(prefix))


async def test_bookmark_moves_the_resource_version(fake_api: FakeApiServer, make_inventory: MakeInventory) -> None:
    """Fault: a BOOKMARK sent on demand (the real server sends them only on its own schedule)."""
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


async def test_gone_mid_watch_relists_and_catches_up(fake_api: FakeApiServer, make_inventory: MakeInventory) -> None:
    """Fault: 410 Gone injected in the middle of a watch, with the objects changed meanwhile."""
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
    """Fault: a burst of HTTP 500 on every pod request after a dropped pod watch."""
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
    """Fault: the TCP connection of the pod watch dropped mid-stream, three times."""
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
    """Fault: every watch ends at once, without an event and without an error."""
    await make_inventory()
    since = len(fake_api.log)
    fake_api.empty_watches = True  # every watch ends immediately without an event (no error)
    fake_api.close_watches(r.CONFIGMAPS)
    await asyncio.sleep(1.0)
    watches = fake_api.count(path_contains="/configmaps", watch=True, since=since)
    assert 3 <= watches <= 12, watches
