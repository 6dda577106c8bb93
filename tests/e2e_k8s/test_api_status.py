"""The StatusWriter against the real kube-apiserver: the VA CRD as shipped (`manifests/crd`, installed with
kubectl), its status subresource, merge patches guarded by resourceVersion, real 409s from a real concurrent
writer. What the writer sent is read back from the apiserver's audit log (apiworld.py).

Still on the fake server (tests/k8s/test_status.py), because the real one cannot be made to do it on demand:
a 409 injected on exactly the first PATCH, and a 409 on every PATCH (the bounded give-up).
"""

from __future__ import annotations

import pytest

from adapter.domain.errors import KubeNotFound
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import Condition, ConditionType, DesiredAlloc, VariantStatus
from adapter.k8s import resources as r
from adapter.k8s.client import KubeClient
from adapter.k8s.inventory import Inventory, InventoryOptions
from adapter.k8s.status import StatusWriter, StoredStatus, status_to_dict
from tests.k8s import builders as b
from tests.k8s.conftest import FAST, eventually
from tests.k8s.test_status import ALLOC, METRICS, OK, STATUSES, T0

from .apiworld import ApiWorld

pytestmark = pytest.mark.e2e_k8s


def _key(world: ApiWorld) -> VariantKey:
    return VariantKey(world.namespace, "l4")


def _seed(world: ApiWorld, status: dict[str, object] | None = None) -> dict[str, object]:
    return world.put(r.VARIANT_AUTOSCALINGS, b.va("l4", namespace=world.namespace, status=status))


@pytest.mark.parametrize("name", list(STATUSES), ids=list(STATUSES))
async def test_every_status_shape_is_accepted_and_stored_as_sent(
    api_world: ApiWorld, client: KubeClient, name: str
) -> None:
    """The CRD's structural schema (pruning, types, enums) keeps every status we render exactly as written."""
    _seed(api_world)
    expected = status_to_dict(STATUSES[name], now_s=T0)
    wrote = await StatusWriter(client, clock=lambda: T0).write(_key(api_world), STATUSES[name], current=None)
    assert wrote == (expected != {})  # an empty status is what a new VA has: nothing to send
    stored = api_world.get(r.VARIANT_AUTOSCALINGS, "l4")
    assert stored.get("status", {}) == expected


async def test_first_write_patches_status_guarded_by_resource_version(api_world: ApiWorld, client: KubeClient) -> None:
    seeded = _seed(api_world)
    api_world.mark()
    writer = StatusWriter(client, clock=lambda: T0)
    assert await writer.write(_key(api_world), STATUSES["full"], current=None)
    [patch] = [e for e in api_world.requests() if e.verb == "patch"]
    assert patch.path == f"/apis/llmd.ai/v1alpha1/namespaces/{api_world.namespace}/variantautoscalings/l4/status"
    assert (patch.subresource, patch.code) == ("status", 200)
    assert patch.body["metadata"] == {"resourceVersion": seeded["metadata"]["resourceVersion"]}  # type: ignore[index]
    stored = api_world.get(r.VARIANT_AUTOSCALINGS, "l4")
    assert stored["status"] == status_to_dict(STATUSES["full"], now_s=T0)
    assert stored["spec"] == seeded["spec"]  # only the status subresource was touched


async def test_unchanged_status_sends_nothing(api_world: ApiWorld, client: KubeClient) -> None:
    _seed(api_world, status_to_dict(STATUSES["full"], now_s=T0))
    key = _key(api_world)
    api_world.mark()
    # without a lookup, `current` alone decides: no request at all
    writer = StatusWriter(client, clock=lambda: T0 + 100)
    assert not await writer.write(key, STATUSES["full"], current=STATUSES["full"])
    # with a lookup that holds the stored status: no request either
    obj = api_world.get(r.VARIANT_AUTOSCALINGS, "l4")
    stored = StoredStatus(obj["metadata"]["resourceVersion"], obj["status"])
    writer = StatusWriter(client, lookup=lambda _key: stored, clock=lambda: T0 + 100)
    assert not await writer.write(key, STATUSES["full"], current=None)
    assert api_world.requests() == []
    # without either, one GET and still no PATCH
    writer = StatusWriter(client, clock=lambda: T0 + 100)
    assert not await writer.write(key, STATUSES["full"], current=None)
    assert [(e.verb, e.name) for e in api_world.requests()] == [("get", "l4")]
    assert writer.stats.skipped == 1
    assert (
        api_world.get(r.VARIANT_AUTOSCALINGS, "l4")["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
    )


async def test_concurrent_writer_is_detected_and_its_times_respected(api_world: ApiWorld, client: KubeClient) -> None:
    """Our lookup is stale: another writer (the admin, a real second client) set MetricsAvailable=True an hour
    ago. The real apiserver refuses our guarded patch with 409; we re-read and keep the other writer's
    lastTransitionTime for the unchanged condition."""
    stale = _seed(api_world)
    other = status_to_dict(VariantStatus(conditions=(METRICS,)), now_s=T0)
    other["conditions"][0]["lastTransitionTime"] = "2025-12-31T23:00:00Z"
    api_world.patch_status(r.VARIANT_AUTOSCALINGS, "l4", other)
    lookup = StoredStatus(stale["metadata"]["resourceVersion"], {})  # type: ignore[index]
    writer = StatusWriter(client, lookup=lambda _key: lookup, clock=lambda: T0 + 3600)
    mine = VariantStatus(
        desired=ALLOC, conditions=(Condition(ConditionType.METRICS_AVAILABLE, True, "MetricsFound", "ok"),)
    )
    api_world.mark()
    assert await writer.write(_key(api_world), mine, current=None)
    assert writer.stats.conflicts == 1
    assert [(e.verb, e.code) for e in api_world.requests()] == [("patch", 409), ("get", 200), ("patch", 200)]
    stored = api_world.get(r.VARIANT_AUTOSCALINGS, "l4")["status"]
    assert stored["conditions"][0]["lastTransitionTime"] == "2025-12-31T23:00:00Z"
    assert stored["desiredOptimizedAlloc"]["numReplicas"] == ALLOC.num_replicas


async def test_removed_fields_are_nulled(api_world: ApiWorld, client: KubeClient) -> None:
    """A merge patch deletes a field only when it sends null; the real server then prunes it."""
    _seed(api_world, status_to_dict(STATUSES["full"], now_s=T0))
    api_world.mark()
    writer = StatusWriter(client, clock=lambda: T0)
    assert await writer.write(_key(api_world), STATUSES["never-updated"], current=None)
    patch = next(e for e in api_world.requests() if e.verb == "patch").body["status"]
    assert patch["actuation"] is None
    assert patch["desiredOptimizedAlloc"]["accelerator"] is None
    stored = api_world.get(r.VARIANT_AUTOSCALINGS, "l4")["status"]
    assert stored == status_to_dict(STATUSES["never-updated"], now_s=T0)
    assert "actuation" not in stored


async def test_deleted_va_is_not_found(api_world: ApiWorld, client: KubeClient) -> None:
    _seed(api_world)
    api_world.delete(r.VARIANT_AUTOSCALINGS, "l4")
    writer = StatusWriter(client, clock=lambda: T0)
    with pytest.raises(KubeNotFound):
        await writer.write(_key(api_world), STATUSES["full"], current=None)


async def test_writer_with_the_inventory_as_lookup(api_world: ApiWorld, client: KubeClient) -> None:
    """The watched status is the writer's base: after the first write, neither a repeat nor a status the watch
    already delivered costs a request, and no GET is ever needed."""
    _seed(api_world)
    api_world.put(r.DEPLOYMENTS, b.deployment("l4", namespace=api_world.namespace))
    key = _key(api_world)
    clock = [T0]
    options = InventoryOptions(reflector=FAST, watch_namespace=api_world.namespace)
    async with Inventory(client, options) as inventory:
        assert await inventory.wait_synced(10.0)
        api_world.mark()
        writer = StatusWriter(client, lookup=inventory.stored_status, clock=lambda: clock[0])
        assert await writer.write(key, STATUSES["full"], current=None)
        # written again before the watch delivered our own write: our last write is the base, no PATCH
        assert not await writer.write(key, STATUSES["full"], current=None)
        await eventually(
            lambda: inventory.view().variants[0].status == STATUSES["full"], what="the watched status", timeout_s=10
        )
        clock[0] += 30
        assert not await writer.write(key, STATUSES["full"], current=inventory.view().variants[0].status)
        newer = VariantStatus(
            desired=DesiredAlloc(4, ALLOC.reason, T0 + 90, T0 + 90, "L4"), applied=True, conditions=(OK, METRICS)
        )
        assert await writer.write(key, newer, current=None)
        sent = [(e.verb, e.name, e.code) for e in api_world.requests() if e.resource == "variantautoscalings"]
        assert [s for s in sent if s[0] in ("patch", "get")] == [("patch", "l4", 200), ("patch", "l4", 200)]
    stored = api_world.get(r.VARIANT_AUTOSCALINGS, "l4")["status"]
    assert stored["desiredOptimizedAlloc"]["numReplicas"] == 4
