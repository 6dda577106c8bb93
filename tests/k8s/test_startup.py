"""Startup times from the inventory: pod creation → Ready (adapter/k8s/objects.py, inventory.with_startup).

The real kube-apiserver version of this is tests/e2e_k8s/test_api_startup.py; here the projections alone.
"""

from __future__ import annotations

from typing import Any

import pytest

from adapter.domain.cluster import PodInfo
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import ScaleTarget, VariantSpec, VariantView
from adapter.domain.timefmt import parse_rfc3339_s
from adapter.k8s import objects as o
from adapter.k8s.inventory import with_startup
from tests.k8s import builders as b

T0 = parse_rfc3339_s("2026-01-01T12:00:00Z")


def _pod(
    *, created: str | None, ready: bool, since: str | None, terminating: bool = False, phase: str = "Running"
) -> dict[str, Any]:
    obj = b.pod("p", ready=ready, phase=phase)
    if created is not None:
        obj["metadata"]["creationTimestamp"] = created
    if since is not None:
        obj["status"]["conditions"][0]["lastTransitionTime"] = since
    if terminating:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T12:10:00Z"
    return obj


@pytest.mark.parametrize(
    ("obj", "created_s", "ready_since_s", "startup_s"),
    [
        pytest.param(
            _pod(created="2026-01-01T12:00:00Z", ready=True, since="2026-01-01T12:02:07Z"),
            T0,
            T0 + 127,
            127.0,
            id="ready-127s-after-creation",
        ),
        pytest.param(
            _pod(created="2026-01-01T12:00:00Z", ready=False, since="2026-01-01T12:02:07Z"),
            T0,
            None,
            None,
            id="not-ready-no-ready-time",
        ),
        pytest.param(
            _pod(created="2026-01-01T12:00:00Z", ready=True, since="2026-01-01T12:02:07Z", terminating=True),
            T0,
            None,
            None,
            id="terminating-is-not-ready",
        ),
        pytest.param(
            _pod(created="2026-01-01T12:00:00Z", ready=True, since=None), T0, None, None, id="no-transition-time"
        ),
        pytest.param(
            _pod(created=None, ready=True, since="2026-01-01T12:02:07Z"), None, T0 + 127, None, id="no-creation"
        ),
        pytest.param(
            _pod(created="yesterday", ready=True, since="2026-01-01T12:02:07+01:00"),
            None,
            T0 + 127 - 3600,
            None,
            id="malformed-creation-ignored-offset-parsed",
        ),
        pytest.param(
            _pod(created="2026-01-01T12:00:05Z", ready=True, since="2026-01-01T12:00:03Z"),
            T0 + 5,
            T0 + 3,
            0.0,
            id="clock-skew-never-negative",
        ),
    ],
)
def test_pod_timestamps(
    obj: dict[str, Any], created_s: float | None, ready_since_s: float | None, startup_s: float | None
) -> None:
    record = o.project_pod(obj)
    assert record is not None
    assert (record.created_s, record.ready_since_s) == (created_s, ready_since_s)
    info = PodInfo("llm", "p", "l4", record.ready, "", record.created_s, record.ready_since_s)
    assert info.startup_s == startup_s


def _view(name: str, target: str, *, resolved: bool = True) -> VariantView:
    spec = VariantSpec(VariantKey("llm", name), "m", "Deployment", target)
    scale = ScaleTarget("Deployment", "llm", target, 3, 2) if resolved else None
    return VariantView(spec=spec, target=scale)


def _info(name: str, variant: str, *, created: float, ready_at: float | None, namespace: str = "llm") -> PodInfo:
    return PodInfo(namespace, name, variant, ready_at is not None, "", created, ready_at)


def test_with_startup_collects_ready_pods_per_target() -> None:
    views = (
        _view("l4", "dep-l4"),
        _view("l4-twin", "dep-l4"),
        _view("a100", "dep-a100"),
        _view("lost", "x", resolved=False),
    )
    pods = (
        _info("l4-1", "l4", created=T0 + 300, ready_at=T0 + 390),  # 90 s
        _info("l4-0", "l4", created=T0, ready_at=T0 + 120),  # 120 s
        _info("l4-2", "l4", created=T0 + 600, ready_at=None),  # still starting: not counted
        _info("a100-0", "a100", created=T0, ready_at=None),
        _info("other-ns", "l4", created=T0, ready_at=T0 + 5, namespace="elsewhere"),  # no VA l4 there
        _info("lost-0", "lost", created=T0, ready_at=T0 + 7),  # its VA's target is not resolved
    )
    got = {v.key.name: v for v in with_startup(views, pods)}
    assert got["l4"].target is not None
    assert got["l4"].target.startup_s == (90.0, 120.0)
    assert got["l4-twin"].target is not None
    assert got["l4-twin"].target.startup_s == (90.0, 120.0)  # one Deployment, two VAs: its pods, once each
    assert got["a100"] is views[2]  # nothing ready: the view as it was
    assert got["a100"].target is not None
    assert got["a100"].target.startup_s == ()
    assert got["lost"].target is None
