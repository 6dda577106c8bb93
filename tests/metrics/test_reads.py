"""A decision reads only what the engine and its configuration's analyzer read (`engine.reads`), and the collector
asks Prometheus for those fields only (`queries.reading`, `ModelQuery.reads`): for each analyzer, the decisions
from what its configuration reads equal, cycle after cycle, the decisions from every query.

The fleet is the cycle benchmark's (tests/bench_collect.py: 3 variants a model, 10 pods a variant, every metric
answered), served by its fake Prometheus and collected by the real collector both ways. A field an analyzer read
without listing it in `reads` would be None in the narrowed collection, and its decisions would differ."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from adapter import engine
from adapter.config.engine import EngineConfig
from adapter.domain.cluster import Collection, ModelQuery
from adapter.domain.snapshot import Snapshot
from adapter.metrics.collector import PrometheusCollector
from adapter.metrics.queries import FIELDS, QueryName, build_queries, reading
from adapter.reconciler.loop import decide_cycle
from tests.bench_collect import NOW_S, Fleet, fake_prometheus, make_fleet
from tests.bench_default import configs
from tests.core.builders import RECOMMENDED_SATURATION, configset
from tests.shipped import configset_of, shipped_configmaps

VAS = 60
CYCLES = 3
Q = QueryName
ENGINE = {Q.KV_CACHE_USAGE, Q.QUEUE_LENGTH, Q.REQUEST_COUNT}
WORKLOAD = {Q.AVG_INPUT_TOKENS, Q.AVG_OUTPUT_TOKENS, Q.AVG_TTFT, Q.AVG_ITL, Q.DISPATCH_RATE}


def _queueing() -> EngineConfig:
    """The shipped ConfigMaps without the saturation one, whose `analyzerName: predictive` selects the predictive
    analyzer: the queueing model's `default` entry then selects the queueing model."""
    entries = [e for e in shipped_configmaps() if e["name"] != "wva-saturation-scaling-config"]
    return EngineConfig(configmaps=configset_of(entries))


CASES: dict[str, tuple[Callable[[], EngineConfig], set[QueryName]]] = {
    "v1": (EngineConfig, ENGINE),
    "tokens": (
        lambda: EngineConfig(
            configmaps=configset(saturation="analyzerName: saturation-token-based\n" + RECOMMENDED_SATURATION)
        ),
        ENGINE
        | {
            Q.CACHE_CONFIG_INFO,
            Q.AVG_INPUT_TOKENS,
            Q.AVG_OUTPUT_TOKENS,
            Q.PREFIX_CACHE_HIT_RATE,
            Q.EPP_QUEUE_SIZE,
            Q.EPP_QUEUE_BYTES,
        },
    ),
    "queueing": (_queueing, ENGINE | WORKLOAD),
    "predictive-learning": (
        lambda: configs()["learning"],
        ENGINE | WORKLOAD | {Q.EPP_QUEUE_SIZE, Q.TTFT_HISTOGRAM, Q.TPOT_HISTOGRAM},
    ),
    "predictive-profiles": (
        lambda: configs()["profiles"],
        ENGINE | WORKLOAD | {Q.EPP_QUEUE_SIZE, Q.TTFT_HISTOGRAM, Q.TPOT_HISTOGRAM},
    ),
}


@pytest.fixture(scope="module")
def prometheus() -> Iterator[str]:
    with fake_prometheus(VAS) as url:
        yield url


def _collect(url: str, models: list[ModelQuery], fleet: Fleet) -> Collection:
    async def run() -> Collection:
        async with PrometheusCollector(url, timeout_s=60) as collector:
            return await collector.collect(models, fleet.pod_variants)

    return asyncio.run(run())


def _decisions(collection: Collection, fleet: Fleet, config: EngineConfig) -> list[str]:
    """Every cycle's decisions, analyses and learned sections, as text, the engine state carried."""
    state, seen = engine.EngineState(), []
    for cycle in range(CYCLES):
        snapshot = Snapshot(
            NOW_S + 30.0 * cycle,
            fleet.views,
            collection.pods,
            collection.models,
            metrics_available=collection.available,
            unavailable_models=collection.unavailable_models,
        )
        result, state = decide_cycle(snapshot, state, config, NOW_S + 30.0 * cycle)
        seen.append(repr((sorted(result.decisions.items()), sorted(result.analyses.items()), result.learned)))
    return seen


@pytest.mark.parametrize("name", list(CASES))
def test_decisions_from_what_the_configuration_reads_equal_those_from_every_query(prometheus: str, name: str) -> None:
    build, expected = CASES[name]
    config = build()
    fleet = make_fleet(VAS)
    narrowed = [dataclasses.replace(m, reads=engine.reads(config.configmaps, m.key)) for m in fleet.models]
    asked = {q.name for q in build_queries(narrowed)}
    assert asked == expected
    everything, partly = _collect(prometheus, fleet.models, fleet), _collect(prometheus, narrowed, fleet)
    assert everything.available
    assert partly.available
    assert not everything.errors
    assert not partly.errors
    if asked != set(QueryName):  # the narrowed collection lacks something, so the comparison below means something
        assert partly.pods != everything.pods or partly.models != everything.models
    assert _decisions(partly, fleet, config) == _decisions(everything, fleet, config)


@pytest.mark.parametrize(
    ("reads", "expected"),
    [
        pytest.param(None, set(QueryName), id="every-field"),
        pytest.param(frozenset(), {Q.KV_CACHE_USAGE, Q.QUEUE_LENGTH}, id="nothing-but-the-essential"),
        pytest.param(
            frozenset({"latency"}),
            {Q.KV_CACHE_USAGE, Q.QUEUE_LENGTH, Q.TTFT_HISTOGRAM, Q.TPOT_HISTOGRAM},
            id="a-field-two-queries-fill",
        ),
        pytest.param(
            frozenset({"tokens_in_use", "max_batch_size"}),
            {Q.KV_CACHE_USAGE, Q.QUEUE_LENGTH, Q.CACHE_CONFIG_INFO},
            id="a-field-no-query-fills",
        ),
    ],
)
def test_reading_asks_for_the_queries_that_fill_a_field_read(
    reads: frozenset[str] | None, expected: set[QueryName]
) -> None:
    assert reading([ModelQuery(_model(), reads=reads)]) == expected


def test_reading_is_the_union_over_the_models_and_every_query_once_a_model_reads_every_field() -> None:
    v1 = ModelQuery(_model("a"), reads=frozenset({"kv_cache_usage", "request_count"}))
    slo = ModelQuery(_model("b"), reads=frozenset({"avg_ttft_s"}))
    assert reading([v1, slo]) == {Q.KV_CACHE_USAGE, Q.QUEUE_LENGTH, Q.REQUEST_COUNT, Q.AVG_TTFT}
    assert reading([v1, ModelQuery(_model("c"))]) == set(QueryName)


def test_every_field_a_query_fills_is_a_field_of_the_snapshot_and_every_analyzer_reads_only_those() -> None:
    from adapter.analyzers.registry import ANALYZERS
    from adapter.domain.snapshot import ModelTraffic, PodMetrics

    data = {f.name for f in dataclasses.fields(PodMetrics)} | {f.name for f in dataclasses.fields(ModelTraffic)}
    data -= {"namespace", "pod", "variant", "key"}
    filled = set().union(*FIELDS.values())
    assert set(FIELDS) == set(QueryName)
    assert filled == data - {"max_batch_size"}  # nothing collects the batch limit: the pod template's is used
    for analyzer in ANALYZERS:
        assert analyzer.reads <= data, analyzer.name
    assert engine.ENGINE_READS.issubset(data)


def _model(name: str = "m") -> Any:
    from adapter.domain.ids import ModelKey

    return ModelKey("ns", name)


def test_the_fields_of_each_query_are_those_the_assembly_fills() -> None:
    """`FIELDS` (what `reading` asks for) against the assembly's own maps from a query to the field it fills
    (adapter/metrics/answers.py): a per-pod or per-model query fills its one field, both histograms the latency,
    `cache_config_info` the KV geometry and, with the KV usage, the tokens in use."""
    from adapter.metrics import answers

    filled: dict[QueryName, set[str]] = {name: {field} for name, field in answers._POD_FIELD.items()}
    filled |= {name: {field} for name, field in answers._MODEL_FIELD.items()}
    filled |= {name: {"latency"} for name in answers._HISTOGRAM_FIELD}
    filled[Q.CACHE_CONFIG_INFO] = {"num_gpu_blocks", "block_size", "tokens_in_use"}
    assert {name: set(fields) for name, fields in FIELDS.items()} == filled
