"""Latency histograms: the two model-level bucket queries, assembled into `ModelTraffic.latency`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapter.domain.cluster import ModelQuery
from adapter.domain.errors import QueryError
from adapter.domain.ids import ModelKey
from adapter.domain.latency import INF, LatencyHistogram
from adapter.metrics.answers import assemble
from adapter.metrics.collector import PrometheusCollector
from adapter.metrics.queries import HISTOGRAM_QUERIES, Query, QueryName, QueryWindows, build_queries

from .emulators import FakePrometheus, vector

LLAMA = ModelKey("ns-a", "meta/llama-3.1-8b")
QWEN = ModelKey("ns-b", "Qwen/Qwen2.5-7B")
MODELS = [ModelQuery(LLAMA), ModelQuery(QWEN)]
WINDOWS = QueryWindows(latency_histogram_s=120)


def query(name: QueryName) -> Query:
    return next(q for q in build_queries(MODELS, windows=WINDOWS) if q.name is name)


def bucket(model: ModelKey, le: str, value: float | str) -> tuple[dict[str, str], float | str]:
    return {"namespace": model.namespace, "model_name": model.model_id, "le": le}, value


TTFT_LLAMA = vector(
    bucket(LLAMA, "1.0", 6),
    bucket(LLAMA, "1", 0.5),  # another client library's spelling of the same edge: one edge
    bucket(LLAMA, "+Inf", 10),
    bucket(LLAMA, "2.5", 9),
)
TPOT_LLAMA = vector(bucket(LLAMA, "0.05", 3), bucket(LLAMA, "0.1", 3.9), bucket(LLAMA, "+Inf", 4))


def test_histograms_become_model_latency_and_a_model_without_series_gets_none() -> None:
    got = assemble(
        MODELS, [(query(QueryName.TTFT_HISTOGRAM), TTFT_LLAMA), (query(QueryName.TPOT_HISTOGRAM), TPOT_LLAMA)], {}
    )
    latency = got.models[LLAMA].latency
    assert latency is not None
    assert latency.window_s == 120
    assert latency.ttft == LatencyHistogram(((1.0, 6.5), (2.5, 9.0), (INF, 10.0)))
    assert latency.tpot == LatencyHistogram(((0.05, 3.0), (0.1, 3.9), (INF, 4.0)))
    assert latency.ttft_within(1.0) == pytest.approx(0.65)
    assert latency.tpot_within(0.1) == pytest.approx(0.975)
    assert got.models[QWEN].latency is None
    assert got.dropped_samples == {}
    assert not got.unavailable_models


@pytest.mark.parametrize(
    ("element", "reason"),
    [
        pytest.param(bucket(LLAMA, "2.5", "NaN"), "nan", id="nan-rate"),
        pytest.param(bucket(LLAMA, "2.5", -1), "negative", id="negative-rate"),
        pytest.param(bucket(LLAMA, "2.5", "+Inf"), "inf", id="infinite-rate"),
        pytest.param(bucket(LLAMA, "soon", 9), "invalid-label", id="le-not-a-number"),
        pytest.param(bucket(LLAMA, "NaN", 9), "invalid-label", id="le-nan"),
        pytest.param(bucket(LLAMA, "-1", 9), "invalid-label", id="le-negative"),
        pytest.param(({"namespace": "ns-a", "model_name": LLAMA.model_id}, 9), "missing-label", id="no-le"),
        pytest.param(({"namespace": "ns-a", "le": "2.5"}, 9), "missing-label", id="no-model"),
        pytest.param(bucket(ModelKey("ns-a", "other"), "2.5", 9), "unknown-model", id="cross-product"),
    ],
)
def test_unusable_bucket_samples_are_dropped_and_counted(
    element: tuple[dict[str, str], float | str], reason: str
) -> None:
    answer = vector(bucket(LLAMA, "1.0", 6), element, bucket(LLAMA, "+Inf", 10))
    got = assemble(MODELS, [(query(QueryName.TTFT_HISTOGRAM), answer)], {})
    assert got.dropped_samples == {reason: 1}
    latency = got.models[LLAMA].latency
    assert latency is not None
    assert latency.ttft == LatencyHistogram(((1.0, 6.0), (INF, 10.0)))
    assert latency.tpot is None  # its query was not asked: no evidence


def test_a_histogram_without_its_inf_bucket_is_dropped_whole() -> None:
    answer = vector(bucket(LLAMA, "1.0", 6), bucket(LLAMA, "+Inf", "NaN"), bucket(QWEN, "1.0", 1))
    got = assemble(MODELS, [(query(QueryName.TTFT_HISTOGRAM), answer)], {})
    assert got.models[LLAMA].latency is None
    assert got.models[QWEN].latency is None
    assert got.dropped_samples == {"nan": 1, "incomplete-histogram": 2}


_SEVENTEEN = [(str(0.1 * (i + 1)), 9.0 - 0.5 * i) for i in range(16)]
"""17 buckets, the first rate the largest: the running maximum must carry it across all 16 widths of the scan."""


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        pytest.param(
            [("1.0", 6), ("2.5", 11), ("1", 0.5), ("+Inf", 10)],
            ((1.0, 6.5), (2.5, 10.0), (INF, 10.0)),
            id="the-docstring-example",
        ),
        pytest.param(
            [("1", 0.1), ("+Inf", 5), ("1.0", 0.2), ("1.00", 0.3)],
            ((1.0, (0.1 + 0.2) + 0.3), (INF, 5.0)),  # 0.6000000000000001, not 0.1 + (0.2 + 0.3) = 0.6
            id="one-bound-three-spellings-summed-in-order",
        ),
        pytest.param(
            [*_SEVENTEEN, ("+Inf", 9.5)],
            (*((float(le), 9.0) for le, _ in _SEVENTEEN), (INF, 9.5)),
            id="the-first-rate-carried-over-17-buckets",
        ),
        pytest.param([("0.5", "-0"), ("+Inf", "-0")], ((0.5, 0.0), (INF, 0.0)), id="minus-zero-read-as-zero"),
    ],
)
def test_a_models_pairs_become_what_from_pairs_makes_of_them(
    pairs: list[tuple[str, float | str]], expected: tuple[object, ...]
) -> None:
    """To the bit (repr): the digest gives what `from_pairs` makes of the model's pairs, and what is expected."""
    answer = vector(*(bucket(LLAMA, le, rate) for le, rate in pairs), bucket(QWEN, "+Inf", 1))
    got = assemble(MODELS, [(query(QueryName.TTFT_HISTOGRAM), answer)], {})
    latency = got.models[LLAMA].latency
    assert latency is not None
    assert latency.ttft is not None
    assert repr(latency.ttft.buckets) == repr(expected)
    spec = LatencyHistogram.from_pairs((float(le), float(rate)) for le, rate in pairs)
    assert repr(latency.ttft.buckets) == repr(spec.buckets)
    assert LatencyHistogram(latency.ttft.buckets) == latency.ttft  # canonical: the constructor's check passes
    assert got.dropped_samples == {}


def test_a_failed_histogram_query_leaves_its_side_none_and_no_model_unavailable() -> None:
    outcomes = [
        (query(QueryName.TTFT_HISTOGRAM), QueryError("boom")),
        (query(QueryName.TPOT_HISTOGRAM), TPOT_LLAMA),
    ]
    got = assemble(MODELS, outcomes, {})
    latency = got.models[LLAMA].latency
    assert latency is not None
    assert latency.ttft is None
    assert latency.tpot is not None
    assert not got.unavailable_models
    assert got.errors == ("ttft_histogram: QueryError: boom",)


def test_a_histogram_query_needs_its_window() -> None:
    assert {QueryName.TTFT_HISTOGRAM, QueryName.TPOT_HISTOGRAM} == HISTOGRAM_QUERIES
    with pytest.raises(ValueError, match="window"):
        Query(QueryName.TTFT_HISTOGRAM, "x", frozenset())


@pytest.fixture
async def fake() -> AsyncIterator[FakePrometheus]:
    server = await FakePrometheus().start()
    yield server
    await server.stop()


async def test_through_the_http_client(fake: FakePrometheus) -> None:
    """The real client path: the two queries are sent once per cycle for all models, and answered."""
    fake.answers = {
        query(QueryName.TTFT_HISTOGRAM).promql: TTFT_LLAMA,
        query(QueryName.TPOT_HISTOGRAM).promql: TPOT_LLAMA,
    }
    async with PrometheusCollector(fake.url, timeout_s=2, windows=WINDOWS) as collector:
        got = await collector.collect(MODELS, {})
    assert sum("_bucket" in sent for sent in fake.seen) == 2
    latency = got.models[LLAMA].latency
    assert latency is not None
    assert latency.ttft is not None
    assert latency.tpot is not None
    assert latency.ttft.total_rps == 10.0
    assert got.models[QWEN].latency is None
