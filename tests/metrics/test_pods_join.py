"""The join's per-pod columns (`collector._pods`): tokens in use computed on arrays, equal to the expression per pod
it replaced, bit for bit, over usages, geometries and the cases around them (no usage, no geometry, zero
capacity, halves that round to even, capacities beyond 2**53); geometry labels beyond int32 are invalid."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.domain.cluster import ModelQuery
from adapter.domain.ids import ModelKey
from adapter.metrics.answers import MAX_GEOMETRY_LABEL, _tokens_in_use, assemble
from adapter.metrics.queries import QueryName, build_queries


def _per_pod(usage: float | None, blocks: int | None, size: int | None) -> float | None:
    """The expression `_pods` used per pod before it worked on arrays."""
    if usage is None or blocks is None or size is None:
        return None
    return float(min(max(round(usage * (blocks * size)), 0), blocks * size))


def _both(usages: list[float | None], blocks: list[int | None], sizes: list[int | None]) -> None:
    column = np.array([math.nan if u is None else u for u in usages], dtype=np.float64)
    got = _tokens_in_use(column, blocks, sizes)
    want = [_per_pod(u, b, s) for u, b, s in zip(usages, blocks, sizes, strict=True)]
    assert [None if x is None else x.hex() for x in got] == [None if x is None else x.hex() for x in want]


_usage = st.none() | st.floats(min_value=0.0, max_value=1.5, allow_nan=False) | st.sampled_from([0.5, 0.25, 1.0])
_count = (
    st.none()
    | st.integers(min_value=0, max_value=2**20)
    | st.integers(min_value=0, max_value=MAX_GEOMETRY_LABEL)
    | st.sampled_from([1, 3, 16, 30_000, MAX_GEOMETRY_LABEL])
)


@given(st.lists(st.tuples(_usage, _count, _count), max_size=40))
def test_tokens_in_use_on_arrays_is_the_per_pod_expression(
    pods: list[tuple[float | None, int | None, int | None]],
) -> None:
    usages, blocks, sizes = ([p[i] for p in pods] for i in range(3))
    _both(usages, blocks, sizes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("usages", "blocks", "sizes"),
    [
        ([0.5, 0.5], [1, 3], [1, 1]),  # 0.5 -> 0 and 1.5 -> 2: halves round to even
        ([0.4685], [30_000], [16]),
        ([None, 0.3], [10, None], [16, 16]),
        ([0.7], [0], [16]),  # zero capacity
        ([1.5], [10], [16]),  # above the capacity: cut to it
        ([0.5, 1.0, 1.5, 0.3], [MAX_GEOMETRY_LABEL] * 4, [MAX_GEOMETRY_LABEL] * 4),  # capacities beyond 2**53
        ([1.0, 1.5], [2**53 + 1, 2**53 + 1], [1, 1]),  # not a float: cut at the nearest one
        ([], [], []),
    ],
    ids=[
        "halves-to-even",
        "a-vllm-pod",
        "no-usage-or-no-geometry",
        "zero-capacity",
        "over-full",
        "beyond-2**53",
        "not-a-float",
        "no-pods",
    ],
)
def test_tokens_in_use_cases(usages: list[float | None], blocks: list[int | None], sizes: list[int | None]) -> None:
    _both(usages, blocks, sizes)


@pytest.mark.parametrize(
    ("blocks", "tokens", "dropped"),
    [
        (str(MAX_GEOMETRY_LABEL), 0.5 * MAX_GEOMETRY_LABEL * 16, {}),
        (str(MAX_GEOMETRY_LABEL + 1), None, {"invalid-label": 1}),
        ("1" + "0" * 400, None, {"invalid-label": 1}),  # made the join raise OverflowError
    ],
    ids=["int32-max", "int32-max-plus-one", "400-digits"],
)
def test_a_geometry_label_beyond_int32_is_invalid(blocks: str, tokens: float | None, dropped: dict[str, int]) -> None:
    models = [ModelQuery(ModelKey("ns", "m"))]
    queries = {q.name: q for q in build_queries(models)}
    labels = {"namespace": "ns", "model_name": "m", "pod": "p"}
    geometry = {**labels, "num_gpu_blocks": blocks, "block_size": "16"}
    collection = assemble(
        models,
        [
            (queries[QueryName.KV_CACHE_USAGE], [{"metric": labels, "value": [1.0, "0.5"]}]),
            (queries[QueryName.CACHE_CONFIG_INFO], [{"metric": geometry, "value": [1.0, "1"]}]),
        ],
        {("ns", "p"): "v"},
    )
    (pod,) = collection.pods
    assert (pod.tokens_in_use, collection.dropped_samples) == (tokens, dropped)
