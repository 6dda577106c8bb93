"""Cost-aware optimizer: worked examples, tie-breaks, bounds and properties, through the allocation step in
cost-aware mode (one model, GPUs unlimited)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.config.configmaps import AllocationMode
from adapter.domain.capacity import CapacitySignal, CapacityUnit, GpuPools, VariantSupply
from adapter.domain.decision import AnalyzerName
from adapter.domain.ids import ModelKey
from adapter.optimizer.allocate import ModelAllocation, allocate

MODEL = ModelKey("ns", "m")


def v(name: str, cost: float, cap: float, current: int, lo: int = 0, hi: int = 100) -> VariantSupply:
    return VariantSupply(name, cost, cap, current, lo, hi)


def optimize(required: float, spare: float, variants: list[VariantSupply]) -> ModelAllocation:
    """One model's capacity signal through the allocation step in cost-aware mode."""
    signal = CapacitySignal(MODEL, AnalyzerName.SATURATION_TOKEN, CapacityUnit.TOKENS, required, spare, tuple(variants))
    return allocate([signal], mode=AllocationMode(), gpus=GpuPools())[MODEL]


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        pytest.param(
            # A costs 5/2000 = 0.0025 per token, B 15/8000 = 0.001875: B is more cost-efficient.
            # ceil(5000 / 8000) = 1 replica of B.
            (5000, 0, [v("a", 5, 2000, 1), v("b", 15, 8000, 1)]),
            {"a": 1, "b": 2},
            id="scale-up-goes-to-the-best-cost-per-unit",
        ),
        pytest.param(
            # B can take only 1 more (max 2): 8000 covered, 4000 left → ceil(4000/2000) = 2 of A.
            (12000, 0, [v("a", 5, 2000, 1), v("b", 15, 8000, 1, hi=2)]),
            {"a": 3, "b": 2},
            id="scale-up-spills-to-the-next-variant-at-max",
        ),
        pytest.param(
            # Equal cost per unit: alphabetically first wins.
            (100, 0, [v("b", 1, 100, 1), v("a", 1, 100, 1)]),
            {"a": 2, "b": 1},
            id="scale-up-tie-goes-to-the-first-name",
        ),
        pytest.param(
            # Most expensive first: floor(9000 / 8000) = 1 of B removed, 1000 left < 2000 → A unchanged.
            (0, 9000, [v("a", 5, 2000, 3), v("b", 15, 8000, 2)]),
            {"a": 3, "b": 1},
            id="scale-down-removes-the-most-expensive-first",
        ),
        pytest.param(
            # B removed entirely (min 0), then the cheapest keeps one replica because nobody else serves.
            (0, 1e9, [v("a", 5, 2000, 3), v("b", 15, 8000, 2)]),
            {"a": 1, "b": 0},
            id="scale-down-keeps-one-replica-on-the-cheapest",
        ),
        pytest.param(
            (0, 1e9, [v("a", 5, 2000, 3, lo=2), v("b", 15, 8000, 4, lo=3)]),
            {"a": 2, "b": 3},
            id="scale-down-respects-min-replicas",
        ),
        pytest.param(
            # A variant with unknown capacity is neither chosen nor "free".
            (100, 0, [v("cheap-unknown", 0, 0, 0), v("b", 10, 50, 1)]),
            {"cheap-unknown": 0, "b": 3},
            id="unknown-capacity-is-never-chosen",
        ),
        pytest.param(
            (0, 0, [v("a", 5, 2000, 3)]),
            {"a": 3},
            id="steady-state-keeps-current",
        ),
    ],
)
def test_allocates_as_the_worked_example_says(
    request_: tuple[float, float, list[VariantSupply]], expected: dict[str, int]
) -> None:
    result = optimize(*request_)
    assert dict(result.targets) == expected
    assert result.optimizer == "cost-aware"


def test_reports_unmet_capacity_when_every_variant_is_at_max() -> None:
    result = optimize(10_000, 0, [v("a", 1, 1000, 2, hi=3)])
    assert result.targets == {"a": 3}
    assert result.unmet == pytest.approx(9000)


variants_st = st.lists(
    st.builds(
        v,
        name=st.sampled_from(["a", "b", "c", "d"]),
        cost=st.floats(0.1, 50),
        cap=st.floats(1, 10_000),
        current=st.integers(0, 20),
        lo=st.integers(0, 3),
        hi=st.integers(3, 40),
    ),
    min_size=1,
    max_size=4,
    unique_by=lambda x: x.name,
)


def _clip(vs: list[VariantSupply]) -> list[VariantSupply]:
    return [
        VariantSupply(
            x.name,
            x.cost,
            x.per_replica_capacity,
            min(max(x.current_replicas, x.min_replicas), x.max_replicas),
            x.min_replicas,
            x.max_replicas,
        )
        for x in vs
    ]


@settings(max_examples=200, deadline=None)
@given(vs=variants_st, required=st.floats(0, 1e5), data=st.data())
def test_scale_up_covers_the_requirement_or_hits_every_max(
    vs: list[VariantSupply], required: float, data: st.DataObject
) -> None:
    vs = _clip(vs)
    result = optimize(required, 0, vs)
    added = sum((result.targets[x.name] - x.current_replicas) * x.per_replica_capacity for x in vs)
    assert all(x.current_replicas <= result.targets[x.name] <= x.max_replicas for x in vs)
    assert added + result.unmet >= required - 1e-6
    if result.unmet > 0:
        assert all(result.targets[x.name] == x.max_replicas for x in vs)
    reordered = data.draw(st.permutations(vs))
    assert optimize(required, 0, reordered).targets == result.targets


@settings(max_examples=200, deadline=None)
@given(vs=variants_st, spare=st.floats(0, 1e5))
def test_scale_down_never_removes_more_than_spare_nor_breaks_bounds(vs: list[VariantSupply], spare: float) -> None:
    vs = _clip(vs)
    result = optimize(0, spare, vs)
    removed = sum((x.current_replicas - result.targets[x.name]) * x.per_replica_capacity for x in vs)
    assert removed <= spare + 1e-6
    assert all(x.min_replicas <= result.targets[x.name] <= x.current_replicas for x in vs)
    if any(x.current_replicas > 0 for x in vs):
        assert sum(result.targets.values()) >= 1


@settings(max_examples=100, deadline=None)
@given(vs=variants_st, low=st.floats(0, 5e4), extra=st.floats(0, 5e4))
def test_more_required_capacity_never_lowers_a_target(vs: list[VariantSupply], low: float, extra: float) -> None:
    vs = _clip(vs)
    a = optimize(low, 0, vs).targets
    b = optimize(low + extra, 0, vs).targets
    assert all(b[name] >= a[name] for name in a)
    assert not math.isnan(sum(b.values()))
