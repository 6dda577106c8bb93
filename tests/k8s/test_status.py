"""VA status rendering and the StatusWriter against the fake API server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from adapter.config.va import status_from_dict
from adapter.domain.errors import KubeConflict, KubeNotFound
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import Condition, ConditionType, DesiredAlloc, Recommendation, VariantStatus
from adapter.k8s import resources as r
from adapter.k8s.client import KubeClient
from adapter.k8s.inventory import Inventory, InventoryOptions
from adapter.k8s.status import StatusWriter, StoredStatus, condition_reason, merge_patch, status_to_dict
from tests.k8s import builders as b
from tests.k8s.builders import NS
from tests.k8s.conftest import FAST, eventually
from tests.k8s.fake_apiserver import FakeApiServer
from tests.manifests.strict import schema_errors

T0 = 1767225600.0  # 2026-01-01T00:00:00Z
KEY = VariantKey(NS, "l4")
CRD = Path(__file__).parents[2] / "manifests" / "crd" / "llmd.ai_variantautoscalings.yaml"

OK = Condition(ConditionType.TARGET_RESOLVED, True, "TargetFound", "Scale target Deployment l4 found", T0)
METRICS = Condition(ConditionType.METRICS_AVAILABLE, True, "MetricsFound", "ok", T0 + 30)
ALLOC = DesiredAlloc(
    num_replicas=3,
    reason="Optimizer solution: cost and latency optimized allocation",
    last_run_time_s=T0 + 60,
    last_update_s=T0,
    accelerator="L4",
)

STATUSES = {
    "empty": VariantStatus(),
    "desired-only": VariantStatus(desired=ALLOC),
    "never-updated": VariantStatus(desired=DesiredAlloc(0, "first run", T0, None)),
    "applied-false": VariantStatus(desired=ALLOC, applied=False),
    "full": VariantStatus(desired=ALLOC, applied=True, conditions=(OK, METRICS)),
    "false-condition": VariantStatus(
        conditions=(Condition(ConditionType.METRICS_AVAILABLE, False, "MetricsMissing", "no pods", T0),)
    ),
    "recommendation-and-learned": VariantStatus(
        desired=ALLOC,
        recommendation=Recommendation(1, 2, 4),
        learned={"queueingModel": {"alpha_ms": 20.5, "covariance": [[1.0, 0.0], [0.0, 2.5]]}},
    ),
}


@pytest.mark.parametrize("status", list(STATUSES.values()), ids=list(STATUSES))
def test_status_round_trips(status: VariantStatus) -> None:
    rendered = status_to_dict(status, now_s=T0 + 999)
    assert status_from_dict(rendered) == status


@pytest.mark.parametrize("status", list(STATUSES.values()), ids=list(STATUSES))
def test_rendered_status_satisfies_the_crd_schema(status: VariantStatus) -> None:
    crd = yaml.safe_load(CRD.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    weird = VariantStatus(
        desired=status.desired,
        applied=status.applied,
        recommendation=status.recommendation,
        learned=status.learned,
        conditions=(*status.conditions, Condition(ConditionType.OPTIMIZATION_READY, True, "engine ran: ok (v2)", "")),
    )
    assert schema_errors(status_to_dict(weird, now_s=T0), schema) == []


def test_rendering_details() -> None:
    rendered = status_to_dict(STATUSES["full"], now_s=T0)
    assert rendered == {
        "desiredOptimizedAlloc": {
            "numReplicas": 3,
            "lastRunTime": "2026-01-01T00:01:00Z",
            "lastUpdate": "2026-01-01T00:00:00Z",
            "reason": ALLOC.reason,
            "accelerator": "L4",
        },
        "actuation": {"applied": True},
        "conditions": [
            {
                "type": "TargetResolved",
                "status": "True",
                "reason": "TargetFound",
                "message": "Scale target Deployment l4 found",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            },
            {
                "type": "MetricsAvailable",
                "status": "True",
                "reason": "MetricsFound",
                "message": "ok",
                "lastTransitionTime": "2026-01-01T00:00:30Z",
            },
        ],
    }


@pytest.mark.parametrize(
    ("previous_status", "own_time", "expected"),
    [
        ("True", T0 + 500, "2025-12-31T00:00:00Z"),  # unchanged status: the stored time stays
        ("False", T0 + 500, "2026-01-01T00:08:20Z"),  # flipped: the condition's own time
        ("False", None, "2026-01-01T00:16:40Z"),  # flipped without a time: now
        (None, None, "2026-01-01T00:16:40Z"),  # new condition without a time: now
    ],
    ids=["unchanged-keeps", "flipped-own-time", "flipped-now", "new-now"],
)
def test_last_transition_time(previous_status: str | None, own_time: float | None, expected: str) -> None:
    previous = (
        {"conditions": []}
        if previous_status is None
        else {
            "conditions": [
                {
                    "type": "TargetResolved",
                    "status": previous_status,
                    "reason": "TargetFound",
                    "message": "",
                    "lastTransitionTime": "2025-12-31T00:00:00Z",
                }
            ]
        }
    )
    status = VariantStatus(conditions=(Condition(ConditionType.TARGET_RESOLVED, True, "TargetFound", "", own_time),))
    rendered = status_to_dict(status, previous=previous, now_s=T0 + 1000)
    assert rendered["conditions"][0]["lastTransitionTime"] == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("MetricsFound", "MetricsFound"),
        ("metrics missing", "MetricsMissing"),
        ("engine ran: ok (v2)", "EngineRanOkV2"),
        ("2 fast", "Fast"),
        ("", "Unknown"),
        ("***", "Unknown"),
        ("Trailing:", "Trailing"),
        ("A" * 2000, "A" * 1024),
    ],
    ids=["valid", "spaces", "punctuation", "leading-digit", "empty", "symbols", "trailing-colon", "too-long"],
)
def test_condition_reason(text: str, expected: str) -> None:
    assert condition_reason(text) == expected


@pytest.mark.parametrize(
    ("base", "target", "patch"),
    [
        ({}, {"a": 1}, {"a": 1}),
        ({"a": 1}, {"a": 1}, {}),
        ({"a": 1, "b": 2}, {"a": 1}, {"b": None}),
        ({"d": {"x": 1, "y": 2}}, {"d": {"x": 1}}, {"d": {"y": None}}),
        ({"l": [1, 2]}, {"l": [2]}, {"l": [2]}),
        ({"d": 1}, {"d": {"x": 1}}, {"d": {"x": 1}}),
    ],
    ids=["add", "same", "remove", "nested-remove", "list-replaced", "scalar-to-map"],
)
def test_merge_patch(base: dict[str, Any], target: dict[str, Any], patch: dict[str, Any]) -> None:
    assert merge_patch(base, target) == patch


# ---- the writer against the API server ------------------------------------------------------------------


def _seed(api: FakeApiServer, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return api.put(r.VARIANT_AUTOSCALINGS, b.va("l4", status=status))


def _patches(api: FakeApiServer, since: int = 0) -> int:
    return api.count(method="PATCH", since=since)


async def test_first_write_patches_status_guarded_by_resource_version(
    fake_api: FakeApiServer, kube: KubeClient
) -> None:
    seeded = _seed(fake_api)
    writer = StatusWriter(kube, clock=lambda: T0)
    assert await writer.write(KEY, STATUSES["full"], current=None)
    [patch] = [e for e in fake_api.log if e.method == "PATCH"]
    assert patch.path == f"/apis/llmd.ai/v1alpha1/namespaces/{NS}/variantautoscalings/l4/status"
    assert patch.content_type == "application/merge-patch+json"
    assert patch.body["metadata"] == {"resourceVersion": seeded["metadata"]["resourceVersion"]}
    stored = fake_api.get(r.VARIANT_AUTOSCALINGS, NS, "l4")
    assert stored["status"] == status_to_dict(STATUSES["full"], now_s=T0)
    assert stored["spec"] == seeded["spec"]  # only the status subresource was touched


async def test_unchanged_status_sends_nothing(fake_api: FakeApiServer, kube: KubeClient) -> None:
    _seed(fake_api, status_to_dict(STATUSES["full"], now_s=T0))
    since = len(fake_api.log)
    # without a lookup, `current` alone decides: no request at all
    writer = StatusWriter(kube, clock=lambda: T0 + 100)
    assert not await writer.write(KEY, STATUSES["full"], current=STATUSES["full"])
    # with a lookup that holds the stored status: no request either
    obj = fake_api.get(r.VARIANT_AUTOSCALINGS, NS, "l4")
    stored = StoredStatus(obj["metadata"]["resourceVersion"], obj["status"])
    writer = StatusWriter(kube, lookup=lambda _key: stored, clock=lambda: T0 + 100)
    assert not await writer.write(KEY, STATUSES["full"], current=None)
    assert fake_api.count(since=since) == 0
    # without either, one GET and still no PATCH
    writer = StatusWriter(kube, clock=lambda: T0 + 100)
    assert not await writer.write(KEY, STATUSES["full"], current=None)
    assert fake_api.count(since=since) == 1
    assert _patches(fake_api) == 0
    assert writer.stats.skipped == 1


async def test_injected_conflict_rereads_and_retries(fake_api: FakeApiServer, kube: KubeClient) -> None:
    _seed(fake_api)
    fake_api.fail(method="PATCH", status=409, times=1)
    writer = StatusWriter(kube, clock=lambda: T0)
    assert await writer.write(KEY, STATUSES["desired-only"], current=None)
    assert writer.stats.conflicts == 1
    assert [e.method for e in fake_api.log] == ["GET", "PATCH", "GET", "PATCH"]
    assert fake_api.get(r.VARIANT_AUTOSCALINGS, NS, "l4")["status"]["desiredOptimizedAlloc"]["numReplicas"] == 3


async def test_concurrent_writer_is_detected_and_its_times_respected(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """Our lookup is stale: another writer set MetricsAvailable=True an hour ago. Our guarded patch is
    refused (409), we re-read, and keep the other writer's lastTransitionTime for the unchanged condition."""
    stale = _seed(fake_api)
    other = fake_api.get(r.VARIANT_AUTOSCALINGS, NS, "l4")
    other["status"] = status_to_dict(VariantStatus(conditions=(METRICS,)), now_s=T0)
    other["status"]["conditions"][0]["lastTransitionTime"] = "2025-12-31T23:00:00Z"
    fake_api.put(r.VARIANT_AUTOSCALINGS, other)
    lookup = StoredStatus(stale["metadata"]["resourceVersion"], {})
    writer = StatusWriter(kube, lookup=lambda _key: lookup, clock=lambda: T0 + 3600)
    mine = VariantStatus(
        desired=ALLOC, conditions=(Condition(ConditionType.METRICS_AVAILABLE, True, "MetricsFound", "ok"),)
    )
    assert await writer.write(KEY, mine, current=None)
    assert writer.stats.conflicts == 1
    stored = fake_api.get(r.VARIANT_AUTOSCALINGS, NS, "l4")["status"]
    assert stored["conditions"][0]["lastTransitionTime"] == "2025-12-31T23:00:00Z"


async def test_persistent_conflict_gives_up_after_bounded_attempts(fake_api: FakeApiServer, kube: KubeClient) -> None:
    _seed(fake_api)
    fake_api.fail(method="PATCH", status=409, times=None)
    writer = StatusWriter(kube, clock=lambda: T0, max_attempts=3)
    with pytest.raises(KubeConflict, match="after 3 attempts"):
        await writer.write(KEY, STATUSES["full"], current=None)
    assert _patches(fake_api) == 3


async def test_removed_fields_are_nulled(fake_api: FakeApiServer, kube: KubeClient) -> None:
    _seed(fake_api, status_to_dict(STATUSES["full"], now_s=T0))
    writer = StatusWriter(kube, clock=lambda: T0)
    assert await writer.write(KEY, STATUSES["never-updated"], current=None)
    patch = next(e for e in fake_api.log if e.method == "PATCH").body["status"]
    assert patch["actuation"] is None
    assert patch["desiredOptimizedAlloc"]["accelerator"] is None
    assert fake_api.get(r.VARIANT_AUTOSCALINGS, NS, "l4")["status"] == status_to_dict(
        STATUSES["never-updated"], now_s=T0
    )


async def test_deleted_va_is_not_found(fake_api: FakeApiServer, kube: KubeClient) -> None:
    writer = StatusWriter(kube, clock=lambda: T0)
    with pytest.raises(KubeNotFound):
        await writer.write(KEY, STATUSES["full"], current=None)


async def test_writer_with_the_inventory_as_lookup(fake_api: FakeApiServer, kube: KubeClient) -> None:
    _seed(fake_api)
    fake_api.put(r.DEPLOYMENTS, b.deployment("l4"))
    clock = [T0]
    async with Inventory(kube, InventoryOptions(reflector=FAST)) as inventory:
        assert await inventory.wait_synced(5.0)
        writer = StatusWriter(kube, lookup=inventory.stored_status, clock=lambda: clock[0])
        assert await writer.write(KEY, STATUSES["full"], current=None)
        # written again before the watch delivered our own write: our last write is the base, no PATCH
        since = len(fake_api.log)
        assert not await writer.write(KEY, STATUSES["full"], current=None)
        assert fake_api.count(since=since) == 0
        await eventually(lambda: inventory.view().variants[0].status == STATUSES["full"], what="the watched status")
        clock[0] += 30
        assert not await writer.write(KEY, STATUSES["full"], current=inventory.view().variants[0].status)
        newer = VariantStatus(
            desired=DesiredAlloc(4, ALLOC.reason, T0 + 90, T0 + 90, "L4"), applied=True, conditions=(OK, METRICS)
        )
        assert await writer.write(KEY, newer, current=None)
        assert _patches(fake_api) == 2
        assert fake_api.count(method="GET", path_contains="variantautoscalings/l4") == 0  # never needed a GET
