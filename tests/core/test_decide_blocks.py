"""decide in blocks of models (adapter/engine/pipeline.py, `BLOCK_VAS`): the same result, field by field and in the
same order, as one pass over every model — errors while measuring or finishing a model included — and blocks only
where each model's allocation is its own."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter import engine
from adapter.config.configmaps import AllocationMode
from adapter.domain.ids import ModelKey
from adapter.domain.snapshot import Snapshot, VariantView
from adapter.engine import pipeline
from adapter.metrics.answers import assemble
from tests.core.test_scale_reference import saturation_config, views_for
from tests.metrics.test_collector_reference import generated_cycle


def _models(*sizes: int) -> list[tuple[ModelKey, Sequence[VariantView]]]:
    view = mock.sentinel.view
    return [(ModelKey("ns", f"m{i}"), [view] * size) for i, size in enumerate(sizes)]


@pytest.mark.parametrize(
    ("sizes", "block_vas", "independent", "want"),
    [
        pytest.param((3, 3, 3), 5, True, [[0, 1], [2]], id="runs-of-at-least-5"),
        pytest.param((3, 3, 3), 3, True, [[0], [1], [2]], id="each-model-reaches-it"),
        pytest.param((9, 1), 5, True, [[0], [1]], id="a-model-larger-than-a-block"),
        pytest.param((1, 1), 5, True, [[0, 1]], id="one-short-block"),
        pytest.param((3, 3, 3), 1, False, [[0, 1, 2]], id="coupled-one-block"),
        pytest.param((), 5, True, [], id="no-models"),
    ],
)
def test_blocks(sizes: tuple[int, ...], block_vas: int, independent: bool, want: list[list[int]]) -> None:
    models = _models(*sizes)
    with mock.patch.object(pipeline, "BLOCK_VAS", block_vas):
        got = pipeline._blocks(models, independent=independent)
    assert [[models.index(m) for m in block] for block in got] == want


@pytest.mark.parametrize(
    ("mode", "independent"),
    [
        pytest.param(AllocationMode(), True, id="cost-aware"),
        pytest.param(AllocationMode(limiter=True), False, id="gpu-limiter"),
        pytest.param(AllocationMode(exact=True), False, id="exact"),
        pytest.param(AllocationMode(limiter=True, exact=True), False, id="exact-limited"),
    ],
)
def test_only_cost_aware_unlimited_allocation_is_independent(mode: AllocationMode, independent: bool) -> None:
    assert mode.independent is independent


@contextmanager
def _failing(measure: set[str], finish: set[str]) -> Iterator[None]:
    """Models (by model ID) whose measuring or whose enforcing raises, as a bug would."""
    measure_model, outcome_of = pipeline.measure_model, pipeline.outcome_of

    def measuring(framed: Any, *args: Any, **kwargs: Any) -> Any:
        if framed.model.model_id in measure:
            raise RuntimeError(f"measure {framed.model.model_id}")
        return measure_model(framed, *args, **kwargs)

    def enforcing(plan: Any, *args: Any, **kwargs: Any) -> Any:
        if plan.model.model_id in finish:
            raise RuntimeError(f"finish {plan.model.model_id}")
        return outcome_of(plan, *args, **kwargs)

    with mock.patch.object(pipeline, "measure_model", measuring), mock.patch.object(pipeline, "outcome_of", enforcing):
        yield


def _ordered(result: Any, state: engine.EngineState) -> list[object]:
    """Every field of the result and the next state, each mapping as its list of items (so the order counts)."""
    values = [getattr(result, f) for f in result.__dataclass_fields__]
    values += [getattr(state, f) for f in state.__dataclass_fields__]
    return [list(value.items()) if isinstance(value, dict) else value for value in values]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(min_value=0, max_value=2**32 - 1),
    st.sampled_from(["v1", "v2"]),
    st.integers(min_value=1, max_value=4),
    st.data(),
)
def test_blocks_decide_as_one_pass(seed: int, analyzer: str, block_vas: int, data: st.DataObject) -> None:
    models, pod_variants, outcomes = generated_cycle(seed)
    if not pod_variants:
        return
    views = views_for(seed, pod_variants, [m.key for m in models])
    config = saturation_config(analyzer)
    collection = assemble(models, outcomes, pod_variants)
    snapshot = Snapshot(1_000.0, views, collection.pods, collection.models)
    ids = sorted({v.spec.model_id for v in views})
    measure = set(data.draw(st.lists(st.sampled_from(ids), max_size=2)))
    finish = set(data.draw(st.lists(st.sampled_from(ids), max_size=2)))

    def cycle(blocks_of: int) -> list[object]:
        with mock.patch.object(pipeline, "BLOCK_VAS", blocks_of), _failing(measure, finish):
            first, state = engine.decide(snapshot, engine.EngineState(), config, 1_000.0)
            second, last = engine.decide(snapshot, state, config, 1_030.0)  # with the first cycle's state
        return [_ordered(first, state), _ordered(second, last)]

    assert cycle(block_vas) == cycle(10**9)


@pytest.mark.parametrize("block_vas", [pytest.param(1, id="a-block-a-model"), pytest.param(10**9, id="one-block")])
def test_errors_list_measuring_failures_before_finishing_ones(block_vas: int) -> None:
    """As one pass over the models orders them: every model that failed while measuring (in model order), then
    every model that failed while enforcing — here model a fails late and model b early, so b comes first."""
    seed = next(s for s in range(1000) if len({m.key.model_id for m in generated_cycle(s)[0]}) >= 3)
    models, pod_variants, outcomes = generated_cycle(seed)
    views = views_for(seed, pod_variants, [m.key for m in models])
    config = saturation_config("v1")
    collection = assemble(models, outcomes, pod_variants)
    snapshot = Snapshot(1_000.0, views, collection.pods, collection.models)
    first, second = sorted({v.spec.model_id for v in views})[:2]
    with mock.patch.object(pipeline, "BLOCK_VAS", block_vas), _failing(measure={second}, finish={first}):
        result, _ = engine.decide(snapshot, engine.EngineState(), config, 1_000.0)
    failed = dict(result.errors.items())
    early = sorted(key for key in failed if key.model_id == second)  # every namespace that has the model
    late = sorted(key for key in failed if key.model_id == first)
    assert early
    assert late
    assert list(failed) == [*early, *late]
    assert all(failed[key].endswith(f"measure {second}") for key in early)
    assert all(failed[key].endswith(f"finish {first}") for key in late)
