"""The simulated Prometheus (adapter/sim/metricspath.py) and the collector path over it (adapter/app/simulate.py):
Prometheus' rate extrapolation, staleness, and what the collector's own assembly makes of the answers."""

from __future__ import annotations

import asyncio

import pytest

from adapter.app.simulate import SimulatedPrometheus, query_window_s
from adapter.domain.cluster import ModelQuery
from adapter.domain.ids import ModelKey
from adapter.metrics.queries import QueryName, QueryWindows, build_queries, duration
from adapter.sim.fleet import FleetConfig, SimulatedFleet, StartupTime, VariantConfig
from adapter.sim.metricspath import ANSWERED_QUERIES, SeriesStore, extrapolated_delta
from adapter.sim.replica import PerfParams
from adapter.sim.simulate import Clock
from adapter.sim.workload import PoissonArrivals, SyntheticWorkload, TokenLengths

MODEL = ModelKey("llm", "meta/llama")


@pytest.mark.parametrize(
    ("points", "start", "end", "expected"),
    [
        pytest.param([(15, 0), (30, 30), (45, 60), (60, 90)], 0, 60, 90.0, id="docstring-example"),
        pytest.param([(30, 30), (40, 40), (50, 50)], 0, 60, 35.0, id="far-start-extends-half-an-interval"),
        pytest.param([(10, 100), (20, 110), (30, 5), (40, 15)], 10, 40, 25.0, id="counter-reset"),
        pytest.param([(10, 10), (20, 20)], 5, 25, 20.0, id="both-sides-within-threshold"),
    ],
)
def test_extrapolated_delta(points: list[tuple[float, float]], start: float, end: float, expected: float) -> None:
    assert extrapolated_delta(points, start_s=start, end_s=end, counter=True) == pytest.approx(expected)


def test_extrapolation_needs_two_samples() -> None:
    with pytest.raises(ValueError, match="two samples"):
        extrapolated_delta([(1.0, 1.0)], start_s=0, end_s=60, counter=True)


def test_every_collector_query_is_answered() -> None:
    assert {q.value for q in QueryName} <= ANSWERED_QUERIES


@pytest.mark.parametrize("retention_s", [600.0, 1800.0])
def test_query_windows_are_the_ones_rendered_into_the_promql(retention_s: float) -> None:
    windows = QueryWindows(saturation_s=45.0)
    for query in build_queries([ModelQuery(MODEL, retention_s)], windows=windows):
        window = query_window_s(query, windows)
        if window > 0:
            assert f"[{duration(window)}]" in query.promql, (query.name, window)
        else:
            assert "[" not in query.promql, f"{query.name} is an instant query"


def busy_fleet(series: SeriesStore, *, rate: float = 6.0, replicas: int = 2) -> SimulatedFleet:
    perf = PerfParams(kv_cache_tokens=40_000, max_num_seqs=64)
    variant = VariantConfig(
        "l4", "L4", 1.0, perf, initial_replicas=replicas, max_replicas=4, startup=StartupTime(0.0, 0.0)
    )
    workload = SyntheticWorkload(PoissonArrivals(rate), TokenLengths(500, 100), duration_s=None, seed=3)
    config = FleetConfig(model_id=MODEL.model_id, variants=(variant,), namespace=MODEL.namespace)
    return SimulatedFleet(config, workload, scrape_sink=series)


def collect(fleet: SimulatedFleet, series: SeriesStore, now_s: float) -> object:
    source = SimulatedPrometheus(series, Clock(now_s))
    pod_variants = {(MODEL.namespace, p.name): p.variant for p in fleet.pods()}
    return asyncio.run(source.collect([ModelQuery(MODEL, 600.0)], pod_variants))


def test_the_collector_assembles_pod_metrics_from_the_scrapes() -> None:
    series = SeriesStore(namespace=MODEL.namespace, model_id=MODEL.model_id)
    fleet = busy_fleet(series)
    fleet.advance(600.0)
    collection = collect(fleet, series, 600.0)
    assert collection.available
    assert not collection.errors
    assert not collection.unavailable_models
    pods = collection.pods  # type: ignore[attr-defined]
    assert len(pods) == 2
    total_arrival = 0.0
    for pod in pods:
        assert pod.variant == "l4"
        assert 0.0 <= pod.kv_cache_usage <= 1.0
        assert pod.queue_length is not None
        assert pod.running_requests is not None
        assert (pod.num_gpu_blocks, pod.block_size) == (40_000 // 16, 16)
        assert pod.avg_input_tokens == pytest.approx(500, rel=0.2)
        assert pod.avg_output_tokens == pytest.approx(100, rel=0.25)
        assert pod.prefix_cache_hit_rate == 0.0
        assert 0 < pod.avg_ttft_s < 5
        assert 0 < pod.avg_itl_s < 0.5
        total_arrival += pod.arrival_rate_rps
    assert total_arrival == pytest.approx(6.0, rel=0.3)
    traffic = collection.models[MODEL]  # type: ignore[attr-defined]
    assert traffic.request_count == pytest.approx(6.0 * 600, rel=0.15)
    assert traffic.epp_queue_size == 0.0


def test_the_saturation_gauges_match_the_fleets_own_view() -> None:
    """The fleet's snapshot (used by the demo) computes max_over_time itself; at a scrape instant both agree."""
    series = SeriesStore(namespace=MODEL.namespace, model_id=MODEL.model_id)
    fleet = busy_fleet(series, rate=12.0)
    fleet.advance(450.0)
    collected = {p.pod: p for p in collect(fleet, series, 450.0).pods}  # type: ignore[attr-defined]
    for pod in fleet.snapshot(450.0).pods:
        assert collected[pod.pod].kv_cache_usage == pytest.approx(pod.kv_cache_usage, abs=0.02)
        assert collected[pod.pod].queue_length == pytest.approx(pod.queue_length, abs=2)


def test_a_gone_pod_is_stale_at_once_but_its_requests_still_count() -> None:
    series = SeriesStore(namespace=MODEL.namespace, model_id=MODEL.model_id)
    fleet = busy_fleet(series, rate=4.0)
    fleet.advance(300.0)
    before = collect(fleet, series, 300.0).models[MODEL].request_count  # type: ignore[attr-defined]
    fleet.set_replicas("l4", 1, 300.0)
    fleet.advance(345.0)  # drained and gone; three scrapes since
    running = series.answer("num_requests_running", now_s=345.0)
    assert len(running) == 1, "the instant selector sees only the pod still scraped"
    kv = series.answer("kv_cache_usage", now_s=345.0, window_s=60.0)
    assert len(kv) == 2, "max_over_time still sees the gone pod's samples inside its window"
    count = series.answer("model_request_count", now_s=345.0, window_s=600.0)
    assert float(count[0]["value"][1]) >= before * 0.9


def test_no_pods_no_answers_and_nan_is_dropped_by_the_collector() -> None:
    series = SeriesStore(namespace=MODEL.namespace, model_id=MODEL.model_id)
    fleet = busy_fleet(series, rate=0.0, replicas=1)
    fleet.advance(120.0)
    ttft = series.answer("avg_ttft", now_s=120.0, window_s=60.0)
    assert ttft
    assert ttft[0]["value"][1] == "NaN", "0/0 as PromQL computes it"
    collection = collect(fleet, series, 120.0)
    assert collection.pods[0].avg_ttft_s is None  # type: ignore[attr-defined]
    assert collection.dropped_samples.get("nan", 0) >= 1  # type: ignore[attr-defined]
    assert SeriesStore(namespace="a", model_id="b").answer("kv_cache_usage", now_s=0.0) == []
    with pytest.raises(KeyError, match="does not answer"):
        series.answer("bogus", now_s=0.0)
