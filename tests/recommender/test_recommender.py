"""The decaying-histogram recommender (issue 12): worked examples, properties, checkpoints, and the engine
(recommendation in status, restore after a restart, the scale-down floor)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.config.engine import EngineConfig
from adapter.domain.ids import VariantKey
from adapter.engine import recommend as engine_recommend
from adapter.recommender.histogram import DecayingHistogram, HistogramOptions
from adapter.recommender.recommender import RecommenderConfig, VariantHistory, floor_replicas, recommend
from tests.core.builders import T0, Fleet, configset, same_pods, spec

OPTIONS = HistogramOptions()
CFG = RecommenderConfig()
HOUR = 3600.0

# ---- histogram ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("index", "start"),
    [
        pytest.param(0, 0.0, id="0"),
        pytest.param(1, 0.1, id="1"),
        pytest.param(2, 0.205, id="2"),
        pytest.param(14, 1.9598631988787956, id="14"),
    ],
)
def test_bucket_starts(index: int, start: float) -> None:
    # start_i = 0.1 · (1.05^i − 1) / 0.05
    assert OPTIONS.bucket_start(index) == pytest.approx(start)
    assert OPTIONS.find_bucket(start + 1e-9) == index


OPTION_SETS = st.builds(
    HistogramOptions,
    first_bucket=st.floats(1e-3, 10.0),
    ratio=st.floats(1.001, 3.0),
    max_value=st.floats(1.0, 1e9),
)


@given(OPTION_SETS, st.floats(0.0, 1e10) | st.floats(0.0, 5.0))
def test_find_bucket_and_num_buckets_equal_the_formula_with_log_to_the_base_ratio(
    options: HistogramOptions, value: float
) -> None:
    """The constants derived once at construction give the floats `math.log(x, ratio)` gives: the same bucket
    for every value (a bucket boundary is where a different rounding would show)."""
    first, ratio = options.first_bucket, options.ratio
    count = math.ceil(math.log(options.max_value * (ratio - 1) / first + 1, ratio)) + 1
    assert options.num_buckets == count
    for v in (value, options.bucket_start(options.find_bucket(value))):
        want = 0 if v < first else min(max(int(math.log(v * (ratio - 1) / first + 1, ratio)), 0), count - 1)
        assert options.find_bucket(v) == want


def test_a_history_adds_one_sample_to_both_histograms_in_one_bucket() -> None:
    """`observe` places the sample once for both histograms; each equals adding it on its own."""
    history = VariantHistory.new(CFG, 0.0).observe(2.0, 0.0).observe(7.3, 600.0)
    long = DecayingHistogram.empty(CFG.histogram, CFG.half_life_s, 0.0).add(2.0, 0.0).add(7.3, 600.0)
    short = DecayingHistogram.empty(CFG.histogram, CFG.short_half_life_s, 0.0).add(2.0, 0.0).add(7.3, 600.0)
    assert (history.long, history.short) == (long, short)
    restored = VariantHistory.restore(history.checkpoint(), now_s=600.0)  # options equal, not the same object
    assert restored.long.options is not restored.short.options
    assert restored.observe(3.1, 900.0).short == short.add(3.1, 900.0)


def _percentile_by_scan(hist: DecayingHistogram, p: float) -> float:
    """The bucket scan `percentiles` replaced (one sort and one walk per p), kept to check it against."""
    total = hist.total_weight
    if total < 1e-10:
        return 0.0
    threshold = min(max(p, 0.0), 1.0) * total
    cumulative = 0.0
    last = hist.options.num_buckets - 1
    for index in sorted(hist.weights):
        cumulative += hist.weights[index]
        if cumulative >= threshold - 1e-10 * total:
            return hist.options.bucket_start(index + 1) if index < last else hist.options.bucket_start(index)
    return hist.options.bucket_start(max(hist.weights))


@given(
    st.dictionaries(
        st.integers(0, OPTIONS.num_buckets - 1), st.floats(0.0, 1e6, allow_nan=False) | st.just(0.0), max_size=30
    ),
    st.lists(st.floats(-0.5, 1.5, allow_nan=False) | st.sampled_from([0.0, 0.5, 0.9, 1.0]), max_size=5),
)
def test_percentiles_in_one_pass_equal_the_scan(weights: dict[int, float], ps: list[float]) -> None:
    hist = DecayingHistogram(OPTIONS, HOUR, 0.0, weights)
    assert hist.percentiles(ps) == tuple(_percentile_by_scan(hist, p) for p in ps)
    assert [hist.percentile(p) for p in ps] == [_percentile_by_scan(hist, p) for p in ps]


def test_a_running_sum_short_by_float_error_reaches_the_percentile() -> None:
    # 0.7 + 0.2 = 0.8999999999999999 < 0.9 · 1.0: within the slack, so the 90th percentile ends in bucket 1
    hist = DecayingHistogram(OPTIONS, HOUR, 0.0, {0: 0.7, 1: 0.2, 2: 0.1})
    assert hist.percentiles((0.9,)) == (OPTIONS.bucket_start(2),)


def test_a_sample_one_half_life_older_weighs_half() -> None:
    hist = DecayingHistogram.empty(OPTIONS, HOUR, 0.0).add(1.0, 0.0).add(5.0, HOUR)
    old, new = hist.weights[OPTIONS.find_bucket(1.0)], hist.weights[OPTIONS.find_bucket(5.0)]
    assert old / new == pytest.approx(0.5)


def test_percentiles_on_known_data() -> None:
    # 10 samples at 1.0 and 90 at 3.0 (same time): P5 is in 1.0's bucket, P50 and P95 in 3.0's.
    hist = DecayingHistogram.empty(OPTIONS, HOUR, 0.0)
    for _ in range(10):
        hist = hist.add(1.0, 0.0)
    for _ in range(90):
        hist = hist.add(3.0, 0.0)
    upper_of = lambda v: OPTIONS.bucket_start(OPTIONS.find_bucket(v) + 1)  # noqa: E731
    assert hist.percentile(0.05) == pytest.approx(upper_of(1.0))
    assert hist.percentile(0.50) == pytest.approx(upper_of(3.0))
    assert hist.percentile(0.95) == pytest.approx(upper_of(3.0))
    assert DecayingHistogram.empty(OPTIONS, HOUR, 0.0).percentile(0.9) == 0


def test_reference_shift_keeps_weights_finite_and_ratios_exact() -> None:
    hist = DecayingHistogram.empty(OPTIONS, 1.0, 0.0).add(1.0, 0.0)
    hist = hist.add(2.0, 150.0)  # 150 half-lives later: the reference moves
    assert all(math.isfinite(w) for w in hist.weights.values())
    assert hist.reference_s > 0
    assert hist.percentile(0.5) == pytest.approx(OPTIONS.bucket_start(OPTIONS.find_bucket(2.0) + 1))


def test_checkpoint_round_trip_and_strictness() -> None:
    hist = DecayingHistogram.empty(OPTIONS, HOUR, 10.0).add(1.5, 20.0).add(7.0, 30.0)
    assert DecayingHistogram.restore(hist.checkpoint()) == hist
    with pytest.raises(ValueError, match="out of range"):
        DecayingHistogram.restore(hist.checkpoint() | {"buckets": {"9999": 1.0}})


# ---- recommendations ---------------------------------------------------------------------------------------


def _steady(replicas: float, samples: int, every_s: float = 30.0) -> VariantHistory:
    h = VariantHistory.new(CFG, 0.0)
    for i in range(samples):
        h = h.observe(replicas, every_s * i)
    return h


def test_worked_example_one_day_at_two_replicas() -> None:
    # see adapter/recommender/recommender.py: bucket upper edge 2.1579 · 1.15 = 2.4815
    rec = recommend(_steady(2.0, 2880), CFG)
    assert rec is not None
    assert (rec.lower_bound, rec.target, rec.upper_bound) == (3, 3, 5)


def test_worked_example_one_hour_is_wide() -> None:
    rec = recommend(_steady(2.0, 120), CFG)
    assert rec is not None
    assert (rec.target, rec.upper_bound) == (3, 63)


def test_confidence_grows_with_history() -> None:
    widths = [recommend(_steady(2.0, n), CFG) for n in (30, 120, 720, 2880)]
    uppers = [r.upper_bound for r in widths if r is not None]
    assert uppers == sorted(uppers, reverse=True)
    assert uppers[0] > uppers[-1]


def test_bounds_after_restore_equal_bounds_before() -> None:
    history = _steady(3.3, 500)
    restored = VariantHistory.restore(history.checkpoint(), now_s=1e6)
    assert recommend(restored, CFG) == recommend(history, CFG)
    assert floor_replicas(restored, CFG) == floor_replicas(history, CFG)


values = st.lists(st.floats(0, 500, allow_nan=False), min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(values)
def test_lower_le_target_le_upper(samples: list[float]) -> None:
    h = VariantHistory.new(CFG, 0.0)
    for i, v in enumerate(samples):
        h = h.observe(v, 30.0 * (i + 1))
    rec = recommend(h, CFG)
    assert rec is not None
    assert rec.lower_bound <= rec.target <= rec.upper_bound


@settings(max_examples=100, deadline=None)
@given(values, st.floats(0, 100, allow_nan=False))
def test_monotone_in_the_samples(samples: list[float], extra: float) -> None:
    def target(vs: list[float]) -> int:
        h = VariantHistory.new(CFG, 0.0)
        for i, v in enumerate(vs):
            h = h.observe(v, 30.0 * (i + 1))
        rec = recommend(h, CFG)
        assert rec is not None
        return rec.target

    assert target([v + extra for v in samples]) >= target(samples)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 10_000, allow_nan=False), min_size=1, max_size=300))
def test_memory_is_bounded(samples: list[float]) -> None:
    h = VariantHistory.new(CFG, 0.0)
    for i, v in enumerate(samples):
        h = h.observe(v, 30.0 * i)
    assert len(h.long.weights) <= OPTIONS.num_buckets
    assert len(h.short.weights) <= OPTIONS.num_buckets


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 100, allow_nan=False), min_size=2, max_size=20), st.randoms(use_true_random=False))
def test_order_of_simultaneous_samples_does_not_matter(samples: list[float], rnd: object) -> None:
    shuffled = list(samples)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    a = DecayingHistogram.empty(OPTIONS, HOUR, 0.0)
    b = DecayingHistogram.empty(OPTIONS, HOUR, 0.0)
    for v in samples:
        a = a.add(v, 10.0)
    for v in shuffled:
        b = b.add(v, 10.0)
    assert a.percentile(0.9) == b.percentile(0.9)
    assert a.weights.keys() == b.weights.keys()


# ---- in the engine ------------------------------------------------------------------------------------------


def _fleet(floor: bool = False) -> Fleet:
    saturation = "kvCacheThreshold: 0.80\nqueueLengthThreshold: 5\nkvSpareTrigger: 0.1\nqueueSpareTrigger: 3\n"
    if floor:
        saturation += "scaleDownFloor: recommender\n"
    return Fleet(
        specs=[spec("a", cost=5, min_replicas=1)],
        config=EngineConfig(configmaps=configset(saturation=saturation)),
        replicas={"a": 4},
    )


def test_recommendation_in_decision_and_status_and_checkpointed() -> None:
    fleet = _fleet()
    fleet.cycle(T0, same_pods("a", 4, 0.4, 0))
    decision = fleet.decision("a")
    assert decision.recommendation is not None
    status = fleet.statuses[VariantKey("llm", "a")]
    assert status.recommendation == decision.recommendation
    assert engine_recommend.LEARNED_SECTION in status.learned  # the first checkpoint is due at once


def test_a_new_leader_restores_the_history_from_status() -> None:
    fleet = _fleet()
    for i in range(12):  # 6 minutes: checkpoints at 0 and 5 min
        fleet.cycle(T0 + 30 * i, same_pods("a", 4, 0.4, 0))
    before = fleet.state.recommender[VariantKey("llm", "a")]
    fleet.restart()
    fleet.cycle(T0 + 30 * 12, same_pods("a", 4, 0.4, 0))
    after = fleet.state.recommender[VariantKey("llm", "a")]
    # restored from the 5-minute checkpoint (11 samples) plus this cycle's: history survived the restart
    assert after.samples == 11 + 1
    assert before.samples == 12


def test_scale_down_floor_holds_capacity_through_a_dip() -> None:
    # an hour at 4 busy replicas, then the load dips: without the floor V1 steps down, with it it holds.
    for floor, expect_held in ((False, False), (True, True)):
        fleet = _fleet(floor)
        for i in range(120):
            fleet.cycle(T0 + 30 * i, same_pods("a", 4, 0.55, 0))
            fleet.apply()
        fleet.cycle(T0 + 30 * 120, same_pods("a", 4, 0.05, 0))
        held = fleet.decision("a").desired_replicas == 4
        assert held is expect_held, (floor, fleet.decision("a").reason)
