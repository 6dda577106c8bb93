"""Seed 000, "Analysis Algorithm": the V1 saturation analysis (`adapter.analyzers.saturation.measure`).

Boundary cases use binary-exact thresholds (EXACT: kv 0.75 / queue 5, triggers 0.25 / 3) so that the inclusive
and strict comparisons are exercised on exact equality; worked examples use seed 000's recommended values
(0.80 / 5, triggers 0.10 / 3) with approximate comparisons.
"""

from __future__ import annotations

import pytest

from adapter.analyzers.saturation import measure
from adapter.config.configmaps import SaturationConfig

from .builders import EXACT, RECOMMENDED, pod, pods, same_pods

COSTS = {"a": 5.0, "b": 20.0}


@pytest.mark.parametrize(
    ("kv", "queue", "saturated"),
    [
        pytest.param(0.75, 0.0, True, id="kv-equal-to-threshold-is-saturated"),
        pytest.param(0.5, 0.0, False, id="kv-below-threshold-is-not-saturated"),
        pytest.param(0.0, 5.0, True, id="queue-equal-to-threshold-is-saturated"),
        pytest.param(0.0, 4.0, False, id="queue-below-threshold-is-not-saturated"),
        pytest.param(1.0, 9.0, True, id="both-above-is-saturated"),
    ],
)
def test_a_replica_is_saturated_when_kv_or_queue_reaches_its_threshold_inclusively(kv, queue, saturated):
    analysis = measure([pod("a", "a-0", kv, queue)], cfg=EXACT, costs=COSTS)
    variant = analysis.variants[0]
    assert (variant.saturated_pods == ("a-0",)) is saturated
    assert analysis.non_saturated_count == (0 if saturated else 1)


@pytest.mark.parametrize(
    ("loads", "should_scale_up"),
    [
        # kv 0.5, queue 0 -> spare kv 0.75 - 0.5 = 0.25, not < 0.25 (strict); spare queue 5 -> no scale-up
        pytest.param([(0.5, 0.0), (0.5, 0.0)], False, id="kv-spare-equal-to-trigger-does-not-fire"),
        # kv 0.625 -> spare 0.125 < 0.25 -> scale-up
        pytest.param([(0.625, 0.0), (0.625, 0.0)], True, id="kv-spare-below-trigger-fires"),
        # queue 2 -> spare 5 - 2 = 3, not < 3 -> no scale-up
        pytest.param([(0.0, 2.0), (0.0, 2.0)], False, id="queue-spare-equal-to-trigger-does-not-fire"),
        # queue 3 -> spare 2 < 3 -> scale-up (kv is idle: the triggers are OR-ed)
        pytest.param([(0.0, 3.0), (0.0, 3.0)], True, id="queue-spare-below-trigger-fires-alone"),
        # mean of spare kv: (0.5 + 0.0625) / 2 = 0.28125 >= 0.25 -> no scale-up even though one pod is hot
        pytest.param([(0.25, 0.0), (0.6875, 0.0)], False, id="the-mean-not-the-worst-pod-decides"),
    ],
)
def test_scale_up_fires_only_when_an_average_spare_is_strictly_below_its_trigger(loads, should_scale_up):
    analysis = measure(pods("a", *loads), cfg=EXACT, costs=COSTS)
    assert analysis.should_scale_up is should_scale_up


@pytest.mark.parametrize(
    ("loads", "safe"),
    [
        # N=2, kv 0.25 each: spare 0.5, load 0.75 - 0.5 = 0.25, x 2/1 = 0.5, remaining 0.75 - 0.5 = 0.25 >= 0.25
        pytest.param([(0.25, 0.0), (0.25, 0.0)], True, id="remaining-kv-spare-equal-to-trigger-is-safe"),
        # N=2, kv 0.3125: spare 0.4375, load 0.3125 x 2 = 0.625, remaining 0.125 < 0.25 -> unsafe
        pytest.param([(0.3125, 0.0), (0.3125, 0.0)], False, id="remaining-kv-spare-below-trigger-is-unsafe"),
        # N=2, queue 1: spare 4, load 1 x 2 = 2, remaining 5 - 2 = 3 >= 3 -> safe (inclusive)
        pytest.param([(0.0, 1.0), (0.0, 1.0)], True, id="remaining-queue-spare-equal-to-trigger-is-safe"),
        # N=2, queue 1.5: load 1.5 x 2 = 3, remaining 2 < 3 -> unsafe
        pytest.param([(0.0, 1.5), (0.0, 1.5)], False, id="remaining-queue-spare-below-trigger-is-unsafe"),
        # N=4, kv 0.375: load 0.375 x 4/3 = 0.5, remaining 0.25 >= 0.25 -> safe (the factor is N/(N-1))
        pytest.param([(0.375, 0.0)] * 4, True, id="factor-is-n-over-n-minus-one"),
        # N=1, idle: the N >= 2 precondition fails before the simulation
        pytest.param([(0.0, 0.0)], False, id="a-single-idle-replica-is-never-safe"),
        # 1 saturated + 2 idle: N=2 non-saturated, loads 0 -> remaining 0.75 and 5 -> safe
        pytest.param([(0.75, 0.0), (0.0, 0.0), (0.0, 0.0)], True, id="saturated-replicas-are-left-out"),
        # 2 saturated + 1 idle: N=1 -> unsafe
        pytest.param([(0.75, 0.0), (0.0, 5.0), (0.0, 0.0)], False, id="one-non-saturated-of-three-is-unsafe"),
    ],
)
def test_scale_down_is_safe_only_when_the_n_over_n_minus_1_simulation_keeps_both_triggers(loads, safe):
    analysis = measure(pods("a", *loads), cfg=EXACT, costs=COSTS)
    assert analysis.scale_down_safe is safe


def test_one_saturated_and_two_idle_replicas_can_be_safe_to_scale_down_with_the_recommended_thresholds():
    # Seed 000 (research §1.3 edge): saturated replicas are excluded from the N/(N-1) simulation.
    # kv 0.95 is saturated; the two idle replicas give N=2, avg spare kv 0.8, queue 5;
    # load 0 x 2 = 0 -> remaining 0.8 >= 0.1 and 5 >= 3 -> safe.
    analysis = measure(pods("a", (0.95, 0.0), (0.0, 0.0), (0.0, 0.0)), cfg=RECOMMENDED, costs=COSTS)
    assert analysis.non_saturated_count == 2
    assert analysis.avg_spare_kv == pytest.approx(0.8)
    assert analysis.avg_spare_queue == pytest.approx(5.0)
    assert analysis.scale_down_safe is True
    assert analysis.should_scale_up is False


def test_with_no_non_saturated_replica_the_averages_are_zero_and_scale_up_fires():
    # All three saturated (kv >= 0.80 or queue >= 5): no spare to average -> 0 and 0; 0 < 0.1 -> scale-up.
    analysis = measure(pods("a", (0.8, 0.0), (0.1, 5.0), (0.99, 7.0)), cfg=RECOMMENDED, costs=COSTS)
    assert analysis.non_saturated_count == 0
    assert analysis.avg_spare_kv == 0.0
    assert analysis.avg_spare_queue == 0.0
    assert analysis.should_scale_up is True
    assert analysis.scale_down_safe is False


def test_with_zero_triggers_an_all_saturated_model_does_not_scale_up():
    # Research §1.3: 0 < 0 is false, so zero triggers never fire, even with every replica saturated.
    cfg = SaturationConfig(kv_cache_threshold=0.8, queue_length_threshold=5, kv_spare_trigger=0, queue_spare_trigger=0)
    analysis = measure(same_pods("a", 2, 0.9, 6), cfg=cfg, costs=COSTS)
    assert analysis.should_scale_up is False


def test_model_level_averages_are_the_plain_mean_over_non_saturated_replicas_across_variants():
    # Variant a: three pods at kv 0.25 (spare 0.5 each); variant b: one pod at kv 0.5 (spare 0.25) and one
    # saturated pod (kv 0.75, excluded). Plain mean over the 4 non-saturated replicas:
    # (3 x 0.5 + 0.25) / 4 = 1.75 / 4 = 0.4375 (the mean of the variant means would be 0.375).
    # Queue: a pods queue 1 (spare 4), b pod queue 3 (spare 2): (3 x 4 + 2) / 4 = 3.5.
    data = same_pods("a", 3, 0.25, 1.0) + pods("b", (0.5, 3.0), (0.75, 0.0))
    analysis = measure(data, cfg=EXACT, costs=COSTS)
    assert analysis.non_saturated_count == 4
    assert analysis.total_replicas == 5
    assert analysis.avg_spare_kv == 0.4375
    assert analysis.avg_spare_queue == 3.5
    by_name = {v.name: v for v in analysis.variants}
    assert by_name["a"].avg_spare_kv == 0.5
    assert by_name["b"].avg_spare_kv == 0.25
    assert by_name["b"].saturated_pods == ("b-1",)
    assert by_name["b"].replica_count == 2
    assert by_name["b"].max_kv_cache_usage == 0.75  # maxima include saturated replicas


def test_a_replica_crossing_into_saturation_leaves_the_mean_so_more_load_can_stop_a_scale_up():
    # Seed 000 averages spare capacity over *non-saturated* replicas only. With pods at kv 0.6875 (spare 0.0625)
    # and 0.375 (spare 0.375): mean 0.21875 < 0.25 -> scale-up. Push the first pod to 0.75: it is saturated, the
    # mean is the second pod's 0.375 >= 0.25 -> no scale-up. This is why the monotonicity property
    # (test_properties) only raises load on replicas that stay on the same side of the threshold.
    before = measure(pods("a", (0.6875, 0.0), (0.375, 0.0)), cfg=EXACT, costs=COSTS)
    after = measure(pods("a", (0.75, 0.0), (0.375, 0.0)), cfg=EXACT, costs=COSTS)
    assert before.avg_spare_kv == 0.21875
    assert before.should_scale_up is True
    assert after.avg_spare_kv == 0.375
    assert after.should_scale_up is False


def test_the_implementation_docstrings_worked_example_four_replicas_at_kv_0_2_is_safe_to_scale_down():
    # avg spare kv 0.8 - 0.2 = 0.6, queue 5; load_kv 0.2 x 4/3 = 0.2667 -> remaining 0.5333 >= 0.1;
    # load_q 0 -> remaining 5 >= 3 -> safe; 0.6 >= 0.1 and 5 >= 3 -> no scale-up.
    analysis = measure(same_pods("a", 2, 0.2, 0) + same_pods("b", 2, 0.2, 0), cfg=RECOMMENDED, costs=COSTS)
    assert analysis.avg_spare_kv == pytest.approx(0.6)
    assert analysis.avg_spare_queue == pytest.approx(5.0)
    assert analysis.scale_down_safe is True
    assert analysis.should_scale_up is False


def test_the_seed_scale_up_fixture_arithmetic_fires_on_kv_and_queue():
    # seed000-scale-up-cheapest: kv 0.75/0.76/0.72/0.74 -> spares 0.05/0.04/0.08/0.06, mean 0.0575 < 0.1;
    # queue 2/2/1/2 -> spares 3/3/4/3, mean 3.25 >= 3. Scale-up on KV only.
    data = pods("v1-l4", (0.75, 2), (0.76, 2)) + pods("v2-a100", (0.72, 1), (0.74, 2))
    analysis = measure(data, cfg=RECOMMENDED, costs={"v1-l4": 5, "v2-a100": 20})
    assert analysis.avg_spare_kv == pytest.approx(0.0575)
    assert analysis.avg_spare_queue == pytest.approx(3.25)
    assert analysis.should_scale_up is True
    assert "KV spare" in analysis.scale_up_reason
    assert "queue spare" not in analysis.scale_up_reason


def test_an_empty_input_gives_an_empty_analysis_that_neither_scales_up_nor_down():
    analysis = measure([], cfg=RECOMMENDED, costs=COSTS)
    assert analysis.total_replicas == 0
    assert analysis.variants == ()
    assert analysis.should_scale_up is False
    assert analysis.scale_down_safe is False


def test_the_analysis_does_not_depend_on_the_order_of_pods():
    data = pods("a", (0.3, 1), (0.7, 2), (0.1, 0)) + pods("b", (0.5, 4), (0.79, 0))
    forward = measure(data, cfg=RECOMMENDED, costs=COSTS)
    backward = measure(tuple(reversed(data)), cfg=RECOMMENDED, costs=COSTS)
    assert forward == backward
