"""The simulated Prometheus (adapter/sim/metricspath.py) and the collector path over it (adapter/app/simulate.py):
Prometheus' rate extrapolation, staleness, and what the collector's own assembly makes of the answers."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.app.simulate import SimulatedPrometheus, query_window_s
from adapter.domain.cluster import ModelQuery
from adapter.domain.ids import ModelKey
from adapter.metrics.queries import QueryName, QueryWindows, build_queries, duration
from adapter.sim.fleet import FleetConfig, PodScrape, SimulatedFleet, StartupTime, VariantConfig
from adapter.sim.metricspath import (
    ANSWERED_QUERIES,
    SeriesStore,
    extrapolated_delta,
    extrapolated_deltas,
    monotone_increases,
)
from adapter.sim.replica import TPOT_BUCKETS_S, TTFT_BUCKETS_S, PerfParams, ScrapeSample
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


# ------------------------------------------------------------------------------------------ latency histograms


@st.composite
def counter_columns(draw: st.DrawFn) -> tuple[list[float], np.ndarray, float, float]:
    """Scrape times and several counters (columns) sampled at them, with occasional resets (to 0)."""
    n = draw(st.integers(2, 12))
    step = draw(st.floats(1.0, 30.0))
    t0 = draw(st.floats(0.0, 100.0))
    times = [t0 + i * step for i in range(n)]
    columns = []
    for _ in range(draw(st.integers(1, 6))):
        value, column = draw(st.integers(0, 50)), []  # bucket counters count observations
        for _ in range(n):
            value = 0 if draw(st.integers(0, 9)) == 0 else value + draw(st.integers(0, 20))
            column.append(float(value))
        columns.append(column)
    start = t0 - draw(st.floats(0.0, 3 * step))
    end = times[-1] + draw(st.floats(0.0, 3 * step))
    return times, np.array(columns, dtype=np.float64).T, start, end


@settings(max_examples=200)
@given(counter_columns())
def test_extrapolated_deltas_is_the_scalar_rule_column_by_column(
    case: tuple[list[float], np.ndarray, float, float],
) -> None:
    times, values, start, end = case
    got = extrapolated_deltas(times, values, start_s=start, end_s=end)
    for j in range(values.shape[1]):
        points = list(zip(times, values[:, j], strict=True))
        want = extrapolated_delta(points, start_s=start, end_s=end, counter=True)
        assert got[j] == pytest.approx(want, rel=1e-9, abs=1e-9)


@settings(max_examples=200)
@given(counter_columns())
def test_the_fast_path_without_resets_is_the_general_rule(case: tuple[list[float], np.ndarray, float, float]) -> None:
    times, values, start, end = case
    monotone = np.maximum.accumulate(values, axis=0)  # the same columns without their resets
    want = extrapolated_deltas(times, monotone, start_s=start, end_s=end)
    got = monotone_increases((times[0], monotone[0]), (times[-1], monotone[-1]), len(times), start_s=start, end_s=end)
    assert got == pytest.approx(list(want), rel=1e-12, abs=1e-12)


def test_extrapolated_deltas_docstring_example() -> None:
    values = np.array([[0, 0], [30, 15], [60, 30], [90, 45]], dtype=np.float64)
    assert list(extrapolated_deltas([15, 30, 45, 60], values, start_s=0, end_s=60)) == [90.0, 45.0]
    assert monotone_increases((15, [0, 0]), (60, [90, 45]), 4, start_s=0, end_s=60) == [90.0, 45.0]
    with pytest.raises(ValueError, match="two samples"):
        extrapolated_deltas([1.0], values[:1], start_s=0, end_s=1)
    with pytest.raises(ValueError, match="two samples"):
        monotone_increases((1.0, [0]), (1.0, [0]), 2, start_s=0, end_s=1)


def _bucket_rates_by_hand(series: SeriesStore, field: str, now_s: float, window_s: float) -> dict[str, float]:
    """Prometheus' answer computed the slow way: the scalar rule on every (pod, bucket) series, summed by le."""
    edges = (*(TTFT_BUCKETS_S if field == "ttft_buckets" else TPOT_BUCKETS_S), math.inf)
    out: dict[str, float] = {}
    for pod_series in series._series.values():
        points = [(t, s) for t, s in pod_series.samples if now_s - window_s < t <= now_s]
        if len(points) < 2:
            continue
        for j, le in enumerate(edges):
            column = [(t, float(getattr(s, field)[j])) for t, s in points]
            delta = extrapolated_delta(column, start_s=now_s - window_s, end_s=now_s, counter=True)
            key = "+Inf" if math.isinf(le) else repr(le)
            out[key] = out.get(key, 0.0) + delta / window_s
    return out


def test_bucket_rates_are_summed_over_pods_including_a_gone_one() -> None:
    series = SeriesStore(namespace=MODEL.namespace, model_id=MODEL.model_id)
    fleet = busy_fleet(series, rate=10.0, replicas=3)
    fleet.advance(600.0)
    fleet.set_replicas("l4", 2, 600.0)
    fleet.advance(690.0)  # the removed pod is gone, its samples still inside the 300 s window
    assert len(fleet.pods()) == 2
    assert len(series._series) == 3  # the gone pod's series is still stored
    for query, field in (("ttft_histogram", "ttft_buckets"), ("tpot_histogram", "tpot_buckets")):
        answer = series.answer(query, now_s=690.0, window_s=300.0)
        got = {e["metric"]["le"]: float(e["value"][1]) for e in answer}
        assert all(e["metric"].keys() == {"namespace", "model_name", "le"} for e in answer)
        want = _bucket_rates_by_hand(series, field, 690.0, 300.0)
        assert got.keys() == want.keys()
        assert list(got)[-1] == "+Inf"
        for le, rate in want.items():
            assert got[le] == pytest.approx(rate, rel=1e-9)
    inf_rate = {
        e["metric"]["le"]: float(e["value"][1]) for e in series.answer("ttft_histogram", now_s=690.0, window_s=300.0)
    }["+Inf"]
    assert inf_rate == pytest.approx(10.0, rel=0.15)  # every request's first token, from all three pods
    assert series.answer("ttft_histogram", now_s=0.0, window_s=300.0) == []  # no two samples yet


def test_the_collector_reads_the_fleets_latency_histograms() -> None:
    """Through the collector's own queries and assembly: the fraction within an edge is the fleet's truth."""
    series = SeriesStore(namespace=MODEL.namespace, model_id=MODEL.model_id)
    fleet = busy_fleet(series, rate=14.0, replicas=2)
    fleet.advance(900.0)
    collection = collect(fleet, series, 900.0)
    latency = collection.models[MODEL].latency  # type: ignore[attr-defined]
    assert latency is not None
    assert latency.window_s == QueryWindows().latency_histogram_s == 300.0
    assert latency.ttft is not None
    assert latency.tpot is not None
    outcomes = fleet.outcomes()
    first_token_s = outcomes.arrival_s + outcomes.ttft_s
    recent = (first_token_s > 900.0 - 300.0) & (first_token_s <= 900.0)
    done = (outcomes.arrival_s + outcomes.e2e_s > 600.0) & (outcomes.arrival_s + outcomes.e2e_s <= 900.0)
    tpot = np.where(np.isnan(outcomes.itl_s), 0.0, outcomes.itl_s)
    for edge in (0.25, 0.5, 1.0):
        truth = float(np.mean(outcomes.ttft_s[recent] <= edge))
        assert latency.ttft_within(edge) == pytest.approx(truth, abs=0.03), edge
    for edge in (0.025, 0.05, 0.075):
        truth = float(np.mean(tpot[done] <= edge))
        assert latency.tpot_within(edge) == pytest.approx(truth, abs=0.03), edge
    assert 0.0 < latency.ttft_within(0.25) < 1.0  # the test can fail: the load spreads TTFT over edges
    # the fleet's own view (the demo's Snapshot) computes Δcounter/Δt itself: the same answer within noise
    own = fleet.snapshot(900.0).models[MODEL].latency
    assert own is not None
    assert own.window_s == 300.0
    for edge in (0.25, 0.5, 1.0):
        assert own.ttft_within(edge) == pytest.approx(latency.ttft_within(edge), abs=0.02)
    assert own.tpot_within(0.05) == pytest.approx(latency.tpot_within(0.05), abs=0.02)


def _sample(ttft: list[int], tpot: list[int]) -> ScrapeSample:
    ttft_buckets = (*ttft, *[ttft[-1]] * (len(TTFT_BUCKETS_S) + 1 - len(ttft)))
    tpot_buckets = (*tpot, *[tpot[-1]] * (len(TPOT_BUCKETS_S) + 1 - len(tpot)))
    return ScrapeSample(0.0, 0.0, 0, 0, 0, 0, 0, 0, 0.0, ttft_buckets[-1], 0.0, 0, ttft_buckets, tpot_buckets)


def test_a_counter_reset_takes_the_general_path() -> None:
    """A pod whose counters restart (not something a simulated replica does, but the store must not care)."""
    series = SeriesStore(namespace=MODEL.namespace, model_id=MODEL.model_id)
    rounds = [([0, 2, 4], [1, 3]), ([1, 5, 9], [2, 6]), ([0, 1, 2], [0, 1]), ([1, 3, 6], [2, 3])]
    for i, (ttft, tpot) in enumerate(rounds):
        scrape = PodScrape("p-0", "l4", _sample(ttft, tpot), 100, 16)
        series.scrape(15.0 * (i + 1), [scrape], epp_queue_size=0, epp_queue_bytes=0)
    for query, field in (("ttft_histogram", "ttft_buckets"), ("tpot_histogram", "tpot_buckets")):
        got = {e["metric"]["le"]: float(e["value"][1]) for e in series.answer(query, now_s=60.0, window_s=60.0)}
        want = _bucket_rates_by_hand(series, field, 60.0, 60.0)
        assert got == pytest.approx(want, rel=1e-12)
    # the lowest TTFT bucket: 0, 1, 0 (reset), 1 ⇒ Δ = 1 + 1 (the value before the reset) = 2 over 45 s sampled
    lowest = series.answer("ttft_histogram", now_s=60.0, window_s=60.0)[0]
    assert lowest["metric"]["le"] == "0.001"
    assert float(lowest["value"][1]) * 60.0 == pytest.approx(2.0 * 45.0 / 45.0)
