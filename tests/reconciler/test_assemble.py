"""`build_snapshot`: the engine's input keeps the pods of the view's VAs only, matched by namespace and name."""

from __future__ import annotations

import pytest

from adapter.domain.cluster import ClusterView, Collection
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import PodMetrics, VariantSpec, VariantView
from adapter.reconciler.assemble import build_snapshot


def _view(*keys: tuple[str, str]) -> ClusterView:
    return ClusterView(
        variants=tuple(
            VariantView(spec=VariantSpec(VariantKey(ns, name), "m", "Deployment", name, cost=1.0)) for ns, name in keys
        ),
        synced=True,
    )


def _pod(namespace: str, pod: str, variant: str) -> PodMetrics:
    return PodMetrics(namespace, pod, variant, kv_cache_usage=0.5)


@pytest.mark.parametrize(
    ("view_keys", "pods", "kept"),
    [
        pytest.param([("a", "v")], [("a", "p1", "v"), ("a", "p2", "v")], ["p1", "p2"], id="all-known"),
        pytest.param([("a", "v")], [("a", "p1", "w"), ("a", "p2", "v")], ["p2"], id="unknown-variant"),
        pytest.param([("a", "v")], [("b", "p1", "v"), ("a", "p2", "v")], ["p2"], id="same-name-other-namespace"),
        pytest.param([("a", "v"), ("b", "w")], [("b", "p1", "v"), ("a", "p2", "w")], [], id="names-crossed"),
        pytest.param(
            [("a", "v"), ("b", "w")],
            [("b", "p3", "w"), ("a", "p1", "v"), ("b", "p0", "w")],
            ["p3", "p1", "p0"],
            id="order-kept",
        ),
        pytest.param([], [("a", "p1", "v")], [], id="no-vas"),
    ],
)
def test_keeps_the_pods_of_the_views_vas_in_the_collections_order(
    view_keys: list[tuple[str, str]], pods: list[tuple[str, str, str]], kept: list[str]
) -> None:
    collection = Collection(pods=tuple(_pod(*p) for p in pods))
    snapshot = build_snapshot(_view(*view_keys), collection, now_s=100.0)
    assert [p.pod for p in snapshot.pods] == kept
    assert snapshot.taken_at_s == 100.0
    assert all(VariantKey(p.namespace, p.variant) in {v.key for v in snapshot.variants} for p in snapshot.pods)
