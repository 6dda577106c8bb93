"""The series cache (`SeriesCache`) digests a per-pod answer exactly as `digest(query, decode_answer(body), index)`:
the same column bit for bit and the same drops in the same order, through cycles whose pods and wanted models
change under it; where its raw reading refuses a body it says so (None), and only where the typed reading
refuses it too, so that the collector's fallback reads it as before.

The answers are tests/metrics/test_collector_reference.py's generated ones: pods behind a VA or not, wanted
models or not, missing labels, `pod_name` for `pod`, a known pod's name under another namespace, several series
of one pod (max), NaN, ±Inf, negative and out-of-range values, malformed elements.
"""

from __future__ import annotations

import collections
import json
import random
import sys
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter.domain.cluster import ModelQuery
from adapter.domain.errors import QueryError
from adapter.domain.ids import ModelKey
from adapter.metrics import answers
from adapter.metrics.answers import Digest, PodIndex, SeriesCache, decode_answer, digest
from adapter.metrics.collector import PrometheusCollector
from adapter.metrics.queries import Query, QueryName, build_queries
from tests.metrics.test_collector_reference import generated_cycle

URL = "http://prometheus"


def _body(elements: list[dict[str, Any]]) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": elements}}).encode()


def _typed(query: Query, body: bytes, index: PodIndex) -> Digest | QueryError:
    try:
        return digest(query, decode_answer(body, URL), index)
    except QueryError as e:
        return e


def _check(cache: SeriesCache, query: Query, body: bytes, index: PodIndex) -> bool:
    """One answer through the cache against the typed path; whether the cache read it (not None)."""
    got, want = cache.digest(query, body, index), _typed(query, body, index)
    if got is None:  # only where the typed reading refuses the body too (its text reading or an error follows)
        with pytest.raises(msgspec.DecodeError):
            answers._DECODER.decode(body)
        return False
    assert isinstance(want, Digest)
    assert got.query is query
    if query.name is QueryName.CACHE_CONFIG_INFO:
        assert got.geometry is not None
        assert want.geometry is not None
        assert list(got.geometry.items()) == list(want.geometry.items())  # the pods in the same order too
    else:
        assert got.column is not None
        assert want.column is not None
        assert got.column.tobytes() == want.column.tobytes()  # NaN where no sample, bit for bit
    # the reasons and their counts (no reason counted 0); in any order: `join` sorts them into the Collection
    assert sorted(got.dropped.items()) == sorted(want.dropped.items())
    return True


def _cycles(seed: int) -> tuple[list[tuple[list[Query], PodIndex]], dict[QueryName, bytes]]:
    """A generated cycle's per-pod answers, and the (queries, index) of five cycles that read them: some pods,
    every pod (new ones come, the others keep their names), other pods (some go, some come back), fewer wanted
    models, and the same again."""
    rng = random.Random(seed)
    models, pod_variants, outcomes = generated_cycle(seed)
    cached = answers.SERIES_CACHED
    bodies = {q.name: _body(a) for q, a in outcomes if q.name in cached and not isinstance(a, Exception)}
    pods = sorted(pod_variants)

    def some() -> PodIndex:
        return PodIndex.of({k: pod_variants[k] for k in pods if rng.random() < 0.7})

    everything = PodIndex.of(pod_variants)
    fewer = [m for m in models if rng.random() < 0.6] or models[:1]
    return [
        (list(build_queries(models)), some()),
        (list(build_queries(models)), everything),
        (list(build_queries(models)), some()),
        (list(build_queries(fewer)), some()),
        (list(build_queries(fewer)), everything),
    ], bodies


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_the_cache_digests_as_the_typed_path_through_changing_pods_and_models(seed: int) -> None:
    cycles, bodies = _cycles(seed)
    cache = SeriesCache()
    for queries, index in cycles:
        for query in queries:
            if query.name in bodies:
                _check(cache, query, bodies[query.name], index)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_the_cache_digests_as_the_typed_path_whatever_the_order_of_the_series(seed: int) -> None:
    """`_Series.codes_of` reads an element by its place in the family's last answer first: answers in the same
    order, shuffled, shortened, lengthened, with one series moved, and the same again, through changing pods."""
    rng = random.Random(seed)
    cycles, bodies = _cycles(seed)
    cache = SeriesCache()
    for queries, index in cycles:
        for query in queries:
            if query.name not in bodies:
                continue
            elements = json.loads(bodies[query.name])["data"]["result"]
            shuffled = rng.sample(elements, len(elements))
            moved = elements[1:] + elements[:1]
            cut = rng.randrange(len(elements) + 1)
            for variant in (elements, elements, shuffled, shuffled, elements[:cut], elements, moved, elements):
                _check(cache, query, _body(variant), index)


def _by_hex(codes: dict[bytes, int]) -> dict[str, int]:
    """The codes by their keys' hex: a copy that holds no reference to the keys themselves."""
    return {raw.hex(): code for raw, code in codes.items()}


def test_an_answer_in_the_last_one_s_order_is_read_by_place() -> None:
    namespace, model = "ns", "org/m"
    queries = build_queries([ModelQuery(ModelKey(namespace, model))])
    kv, queue = (
        next(q for q in queries if q.name is name) for name in (QueryName.KV_CACHE_USAGE, QueryName.QUEUE_LENGTH)
    )
    elements = [
        {"metric": {"model_name": model, "namespace": namespace, "pod": f"p{i}"}, "value": [1, f"0.{i}"]}
        for i in range(4)
    ]
    index = PodIndex.of({(namespace, f"p{i}"): "v" for i in (1, 2, 3)})
    cache = SeriesCache()
    assert _check(cache, kv, _body(elements), index)
    series = cache._series[answers._Family.VLLM]
    learnt, order_codes = _by_hex(series.codes), series.order_codes
    assert order_codes == [answers.UNKNOWN_POD, 0, 1, 2]
    assert _check(cache, queue, _body(elements), index)  # another query of the family, the same order
    assert series.order_codes is order_codes  # read by place: nothing rebuilt
    assert _by_hex(series.codes) == learnt
    assert _check(cache, kv, _body(elements[::-1]), index)
    assert series.order_codes == [2, 1, 0, answers.UNKNOWN_POD]  # the new order kept for the next answer
    assert _by_hex(series.codes) == learnt  # the same series, nothing learnt again
    # each key is the very bytes its place in the order wraps (the dict, the wrapper, the loop's name and
    # getrefcount's argument): the copy made to look it up replaced the dict's key, so no series is held twice
    assert [sys.getrefcount(raw) for raw in series.codes] == [4] * len(elements)
    series.renumber(PodIndex.of({(namespace, f"p{i}"): "v" for i in (0, 3)}))
    assert (series.order, series.order_codes) == ([], [])  # its codes were the old index's
    assert _check(cache, kv, _body(elements), series.index)


def test_a_cached_cycle_reads_every_answer_and_a_gone_pod_that_returns_is_known_again() -> None:
    namespace, model = "ns", "org/m"
    (query,) = [
        q for q in build_queries([ModelQuery(ModelKey(namespace, model))]) if q.name is QueryName.KV_CACHE_USAGE
    ]
    body = _body(
        [
            {"metric": {"model_name": model, "namespace": namespace, "pod": f"p{i}"}, "value": [1, f"0.{i}"]}
            for i in range(4)
        ]
    )
    both = PodIndex.of({(namespace, "p1"): "v", (namespace, "p3"): "v"})
    one = PodIndex.of({(namespace, "p3"): "v"})
    cache = SeriesCache()
    for index in (both, one, both, one, both):  # p1 goes, comes back, goes, comes back
        assert _check(cache, query, body, index)
    got = cache.digest(query, body, both)
    assert got is not None
    assert got.column is not None
    assert got.column.tolist() == [0.1, 0.3]
    assert dict(got.dropped) == {"unknown-pod": 2}


@pytest.mark.parametrize(
    "value",
    [pytest.param("+Inf", id="plus-inf-text-reading"), pytest.param("one", id="not-a-number")],
)
def test_what_the_raw_reading_refuses_the_collector_reads_as_before(value: str) -> None:
    models = [ModelQuery(ModelKey("ns", "org/m"))]
    (query,) = [q for q in build_queries(models) if q.name is QueryName.QUEUE_LENGTH]
    body = _body(
        [
            {"metric": {"model_name": "org/m", "namespace": "ns", "pod": "p0"}, "value": [1, "2"]},
            {"metric": {"model_name": "org/m", "namespace": "ns", "pod": "p1"}, "value": [1, value]},
        ]
    )
    index = PodIndex.of({("ns", "p0"): "v", ("ns", "p1"): "v"})
    assert SeriesCache().digest(query, body, index) is None
    prometheus = PrometheusCollector(URL)
    try:
        if value == "one":
            with pytest.raises(QueryError, match="malformed vector element"):
                prometheus._digest(query, body, index)
        else:
            got = prometheus._digest(query, body, index)
            assert got.column is not None
            assert got.column.tolist()[0] == 2.0
            assert dict(got.dropped) == {"inf": 1}
    finally:
        prometheus.close()


def test_labels_that_are_not_strings_fall_to_the_typed_path() -> None:
    models = [ModelQuery(ModelKey("ns", "org/m"))]
    (query,) = [q for q in build_queries(models) if q.name is QueryName.KV_CACHE_USAGE]
    body = _body([{"metric": {"model_name": "org/m", "namespace": "ns", "pod": 7}, "value": [1, "0.5"]}])
    index = PodIndex.of({("ns", "p0"): "v"})
    assert SeriesCache().digest(query, body, index) is None
    assert isinstance(_typed(query, body, index), QueryError)


def test_a_cache_that_outgrows_its_pods_starts_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answers, "SPARE_SERIES", 2)
    models = [ModelQuery(ModelKey("ns", "org/m"))]
    (query,) = [q for q in build_queries(models) if q.name is QueryName.KV_CACHE_USAGE]
    strangers = [
        {"metric": {"model_name": "org/x", "namespace": "ns", "pod": f"s{i}"}, "value": [1, "0.5"]} for i in range(5)
    ]
    mine = {"metric": {"model_name": "org/m", "namespace": "ns", "pod": "p0"}, "value": [1, "0.5"]}
    cache = SeriesCache()
    first, second = PodIndex.of({("ns", "p0"): "v"}), PodIndex.of({("ns", "p0"): "w"})
    assert _check(cache, query, _body([mine, *strangers]), first)
    series = cache._series[answers._Family.VLLM]
    assert len(series.codes) == 6  # more than 2 × 1 pod + 2
    assert _check(cache, query, _body([mine]), second)
    assert len(cache._series[answers._Family.VLLM].codes) == 1  # started over, then learnt the one series it read
    smaller = PodIndex.of({("ns", "p0"): "v"})
    assert _check(cache, query, _body([mine, *strangers[:3]]), smaller)
    assert len(cache._series[answers._Family.VLLM].codes) == 4  # within the bound: renumbered and kept


def test_a_forgotten_geometry_series_takes_its_geometry_with_it() -> None:
    models = [ModelQuery(ModelKey("ns", "org/m"))]
    (query,) = [q for q in build_queries(models) if q.name is QueryName.CACHE_CONFIG_INFO]
    labels = {"model_name": "org/m", "namespace": "ns", "num_gpu_blocks": "100", "block_size": "16"}
    body = _body([{"metric": {**labels, "pod": pod}, "value": [1, "1"]} for pod in ("p0", "stranger")])
    cache = SeriesCache()
    assert _check(cache, query, body, PodIndex.of({("ns", "p0"): "v"}))
    series = cache._series[answers._Family.GEOMETRY]
    assert len(series.shapes) == 2  # p0's and the stranger's (an unknown pod, its labels counts)
    series.renumber(PodIndex.of({("ns", "p0"): "w"}))
    assert (len(series.codes), len(series.shapes)) == (1, 1)  # the stranger forgotten, geometry and all


@pytest.mark.parametrize(
    ("codes", "values", "upper", "pods", "kept", "drops"),
    [
        pytest.param(
            [4, answers.UNKNOWN_POD, 7, 9],
            [0.5, 0.3, float("nan"), 2.0],
            1.0,
            [4],
            [0.5],
            {"unknown-pod": 1, "nan": 1, "out-of-range": 1},
            id="the-docstring-example",
        ),
        pytest.param(
            [2, 0, 2, answers.MISSING_LABEL, answers.UNKNOWN_MODEL, answers.MISSING_LABEL],
            [1.0, -0.0, 3.0, 1.0, 1.0, 1.0],
            float("inf"),
            [2, 0, 2],
            [1.0, -0.0, 3.0],
            {"missing-label": 2, "unknown-model": 1},
            id="a-pod-twice-and-minus-zero-kept-in-order",
        ),
        pytest.param(
            [1, 2, 3], [float("inf"), -1.0, float("-inf")], float("inf"), [], [], {"inf": 2, "negative": 1}, id="none"
        ),
        pytest.param([], [], 1.0, [], [], {}, id="empty"),
    ],
)
def test_usable_keeps_what_names_a_pod_with_a_value_in_range(
    codes: list[int], values: list[float], upper: float, pods: list[int], kept: list[float], drops: dict[str, int]
) -> None:
    counted: collections.Counter[str] = collections.Counter()
    at, samples = answers._usable(codes, np.array(values, dtype=np.float64), upper, counted)
    assert at.tolist() == pods
    assert repr(samples.tolist()) == repr(kept)  # -0.0 stays -0.0, as the loop it replaced kept it
    assert dict(counted) == drops  # no reason counted 0
