"""VA status rendering (pure), and the StatusWriter's conflict handling against the fake API server.

The StatusWriter's functional tests run on the real kube-apiserver (tests/e2e_k8s/test_api_status.py). Two stay
here because they need a fault the real server cannot produce on demand: a 409 on exactly the first PATCH, and a
409 on every PATCH (the bounded give-up).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from adapter.config.va import status_from_dict
from adapter.domain.errors import KubeConflict
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import (
    Condition,
    ConditionType,
    DecisionPath,
    DesiredAlloc,
    Recommendation,
    VariantStatus,
)
from adapter.k8s import resources as r
from adapter.k8s.client import KubeClient
from adapter.k8s.status import StatusWriter, condition_reason, merge_patch, status_to_dict
from tests.k8s import builders as b
from tests.k8s.builders import NS
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
    path=DecisionPath.OPTIMIZER,
)

STATUSES = {
    "empty": VariantStatus(),
    "desired-only": VariantStatus(desired=ALLOC),
    "never-updated": VariantStatus(desired=DesiredAlloc(0, "first run", T0, None, path=DecisionPath.LAST_RESORT)),
    "written-without-a-path": VariantStatus(desired=DesiredAlloc(2, "from an older release", T0, T0)),
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
            "path": "optimizer",
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


async def test_injected_conflict_rereads_and_retries(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """Fault: a 409 on exactly the first PATCH (the real server's 409 from a real writer is in test_api_status)."""
    _seed(fake_api)
    fake_api.fail(method="PATCH", status=409, times=1)
    writer = StatusWriter(kube, clock=lambda: T0)
    assert await writer.write(KEY, STATUSES["desired-only"], current=None)
    assert writer.stats.conflicts == 1
    assert [e.method for e in fake_api.log] == ["GET", "PATCH", "GET", "PATCH"]
    assert fake_api.get(r.VARIANT_AUTOSCALINGS, NS, "l4")["status"]["desiredOptimizedAlloc"]["numReplicas"] == 3


async def test_persistent_conflict_gives_up_after_bounded_attempts(fake_api: FakeApiServer, kube: KubeClient) -> None:
    """Fault: every PATCH answered 409, which no real writer can keep up."""
    _seed(fake_api)
    fake_api.fail(method="PATCH", status=409, times=None)
    writer = StatusWriter(kube, clock=lambda: T0, max_attempts=3)
    with pytest.raises(KubeConflict, match="after 3 attempts"):
        await writer.write(KEY, STATUSES["full"], current=None)
    assert _patches(fake_api) == 3
