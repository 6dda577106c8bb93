"""`pod_metrics_from_columns` builds, column by column, exactly the PodMetrics the constructor builds, and refuses
columns that would leave a field unset or misaligned."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.domain.snapshot import PodMetrics, pod_metrics_from_columns

NAMES = [f.name for f in fields(PodMetrics)]
MAYBE_FLOAT = st.none() | st.floats(allow_nan=False, allow_infinity=False)
MAYBE_INT = st.none() | st.integers(min_value=0, max_value=2**40)
ROW = st.fixed_dictionaries(
    {
        name: st.text(max_size=8)
        if name in ("namespace", "pod", "variant")
        else (MAYBE_INT if name in ("num_gpu_blocks", "block_size", "max_batch_size") else MAYBE_FLOAT)
        for name in NAMES
    }
)


@given(st.lists(ROW, max_size=20))
def test_equal_to_the_constructor(rows: list[dict[str, Any]]) -> None:
    columns = {name: [row[name] for row in rows] for name in NAMES}
    built = pod_metrics_from_columns(columns)
    assert built == tuple(PodMetrics(**row) for row in rows)
    assert all(type(pod) is PodMetrics for pod in built)


def test_the_pods_are_frozen() -> None:
    (pod,) = pod_metrics_from_columns(
        {name: ["x"] if name in ("namespace", "pod", "variant") else [None] for name in NAMES}
    )
    with pytest.raises(AttributeError):
        pod.pod = "y"  # type: ignore[misc]


def _columns(length: int = 1) -> dict[str, list[Any]]:
    return {name: [None] * length for name in NAMES}


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        pytest.param(
            {k: v for k, v in _columns().items() if k != "kv_cache_usage"},
            "missing ['kv_cache_usage']",
            id="missing-field",
        ),
        pytest.param(_columns() | {"gpu": [None]}, "unknown ['gpu']", id="unknown-field"),
        pytest.param(_columns() | {"pod": [None, None]}, "lengths [1, 2]", id="misaligned"),
    ],
)
def test_refuses(columns: dict[str, list[Any]], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        pod_metrics_from_columns(columns)
