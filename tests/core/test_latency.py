"""adapter.domain.latency: worked examples and properties of the fraction within a bound."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.domain.ids import ModelKey
from adapter.domain.latency import (
    INF,
    VLLM_ITL_BUCKETS_S,
    VLLM_TTFT_BUCKETS_S,
    LatencyHistogram,
    ModelLatency,
    joint_attainment_lower_bound,
)
from adapter.domain.snapshot import ModelTraffic

# The module docstring's example: vLLM's TTFT edges 1.0 and 2.5 s around a 2 s target.
EXAMPLE = LatencyHistogram.from_pairs([(0.5, 2.0), (1.0, 6.0), (2.5, 9.0), (INF, 10.0)])


@pytest.mark.parametrize(
    ("bound_s", "want"),
    [
        pytest.param(1.0, 0.6, id="edge-1.0-exact"),
        pytest.param(2.5, 0.9, id="edge-2.5-exact"),
        pytest.param(2.0, 0.8, id="2s-between-edges-6+3*2/3=8-of-10"),
        pytest.param(0.25, 0.1, id="first-bucket-from-zero-1-of-10"),
        pytest.param(0.0, 0.0, id="zero"),
        pytest.param(-1.0, 0.0, id="negative"),
        pytest.param(100.0, 0.9, id="above-last-edge-reads-last-edge"),
        pytest.param(INF, 1.0, id="infinity-is-everything"),
    ],
)
def test_fraction_within_worked_examples(bound_s: float, want: float) -> None:
    assert EXAMPLE.fraction_within(bound_s) == pytest.approx(want, abs=1e-12)


def test_bracket_and_edges() -> None:
    assert EXAMPLE.bracket(2.0) == (0.6, 0.9)
    assert EXAMPLE.bracket(1.0) == (0.6, 0.6)
    assert EXAMPLE.bracket(100.0) == (0.9, 1.0)
    assert EXAMPLE.is_edge(1.0)
    assert EXAMPLE.is_edge(2.5)
    assert not EXAMPLE.is_edge(2.0)
    assert not EXAMPLE.is_edge(INF)
    assert EXAMPLE.edges_s == (0.5, 1.0, 2.5)
    assert EXAMPLE.total_rps == 10.0
    assert 2.0 not in VLLM_TTFT_BUCKETS_S  # why the docs recommend --custom-histogram-buckets
    assert 0.1 in VLLM_ITL_BUCKETS_S


def test_no_evidence_is_none_not_zero() -> None:
    idle = LatencyHistogram.from_pairs([(1.0, 0.0), (INF, 0.0)])
    assert idle.fraction_within(1.0) is None
    assert idle.bracket(1.0) is None
    latency = ModelLatency(window_s=300.0, ttft=EXAMPLE, tpot=None)
    assert latency.ttft_within(2.0) == pytest.approx(0.8)
    assert latency.tpot_within(0.1) is None
    assert latency.attainment_lower_bound(ttft_target_s=2.0, tpot_target_s=0.1) is None
    assert latency.attainment_bracket(ttft_target_s=2.0, tpot_target_s=0.1) is None


ALL_WITHIN_HALF = LatencyHistogram.from_pairs([(0.5, 10.0), (1.0, 10.0), (INF, 10.0)])
EIGHTY_WITHIN_HALF = LatencyHistogram.from_pairs([(0.5, 8.0), (1.0, 10.0), (INF, 10.0)])


@pytest.mark.parametrize(
    ("ttft_s", "tpot", "tpot_s", "want"),
    [
        pytest.param(1.0, ALL_WITHIN_HALF, 0.5, (0.6, 0.6), id="both-edges-exact"),
        pytest.param(2.0, ALL_WITHIN_HALF, 0.5, (0.6, 0.9), id="ttft-between-1-and-2.5"),
        pytest.param(2.0, EIGHTY_WITHIN_HALF, 0.75, (0.4, 0.9), id="both-between"),
    ],
)
def test_attainment_bracket_is_the_lower_bound_at_the_edges_around_each_target(
    ttft_s: float, tpot: LatencyHistogram, tpot_s: float, want: tuple[float, float]
) -> None:
    """EXAMPLE as TTFT (1.0 s → 0.6, 2.5 s → 0.9): the range is the Fréchet lower bound at the edges below and
    above each target (TPOT 0.75 s in the second case: 0.8 at 0.5 s, 1.0 at 1 s ⇒ 0.6 + 0.8 − 1 to 0.9 + 1 − 1),
    and the interpolated estimate lies inside it."""
    latency = ModelLatency(window_s=300.0, ttft=EXAMPLE, tpot=tpot)
    low, high = latency.attainment_bracket(ttft_target_s=ttft_s, tpot_target_s=tpot_s) or (-1.0, -1.0)
    assert (low, high) == pytest.approx(want)
    estimate = latency.attainment_lower_bound(ttft_target_s=ttft_s, tpot_target_s=tpot_s)
    assert estimate is not None
    assert low - 1e-12 <= estimate <= high + 1e-12


def test_from_pairs_repairs_as_prometheus() -> None:
    raw = [(INF, 10.0), (1.0, 6.0), (2.5, 9.0), (1.0, 0.5)]
    assert LatencyHistogram.from_pairs(raw).buckets == ((1.0, 6.5), (2.5, 9.0), (INF, 10.0))
    # a bucket above the total is cut to it; a dip is raised to the bucket below
    assert LatencyHistogram.from_pairs([(1.0, 12.0), (INF, 10.0)]).buckets == ((1.0, 10.0), (INF, 10.0))
    assert LatencyHistogram.from_pairs([(1.0, 5.0), (2.0, 4.9), (INF, 6.0)]).buckets == (
        (1.0, 5.0),
        (2.0, 5.0),
        (INF, 6.0),
    )


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        pytest.param([(1.0, 1.0)], r"\+Inf", id="no-inf"),
        pytest.param([(math.nan, 1.0), (INF, 1.0)], "bound", id="nan-bound"),
        pytest.param([(-1.0, 1.0), (INF, 1.0)], "bound", id="negative-bound"),
        pytest.param([(1.0, -1.0), (INF, 1.0)], "rate", id="negative-rate"),
        pytest.param([(1.0, math.nan), (INF, 1.0)], "rate", id="nan-rate"),
        pytest.param([(1.0, 1.0), (INF, math.inf)], "rate", id="inf-rate"),
    ],
)
def test_from_pairs_rejects(pairs: list[tuple[float, float]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LatencyHistogram.from_pairs(pairs)


def test_constructor_checks_canonical_form() -> None:
    with pytest.raises(ValueError, match="increasing"):
        LatencyHistogram(((2.0, 1.0), (1.0, 1.0), (INF, 1.0)))
    with pytest.raises(ValueError, match="below the previous"):
        LatencyHistogram(((1.0, 2.0), (INF, 1.0)))
    with pytest.raises(ValueError, match=r"\+Inf"):
        LatencyHistogram(())


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        pytest.param(0.97, 0.98, 0.95, id="3%-and-2%-miss"),
        pytest.param(1.0, 0.9, 0.9, id="one-perfect"),
        pytest.param(0.4, 0.5, 0.0, id="floored-at-zero"),
        pytest.param(0.0, 0.0, 0.0, id="none-meet"),
    ],
)
def test_joint_lower_bound(a: float, b: float, want: float) -> None:
    assert joint_attainment_lower_bound(a, b) == pytest.approx(want)


def test_joint_lower_bound_rejects_and_propagates_none() -> None:
    assert joint_attainment_lower_bound(None, 0.9) is None
    assert joint_attainment_lower_bound(0.9, None) is None
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        joint_attainment_lower_bound(1.2, 0.5)


def test_model_latency_and_traffic_defaults() -> None:
    assert ModelTraffic(ModelKey("ns", "m")).latency is None  # every existing fixture and test: unchanged
    both = ModelLatency(window_s=60.0, ttft=EXAMPLE, tpot=LatencyHistogram.from_pairs([(0.1, 19.0), (INF, 20.0)]))
    # TTFT within 2 s: 0.8 (miss 0.2); TPOT within 0.1 s: 0.95 (miss 0.05) ⇒ ≥ 0.75
    assert both.attainment_lower_bound(ttft_target_s=2.0, tpot_target_s=0.1) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="window_s"):
        ModelLatency(window_s=0.0)


# ------------------------------------------------------------------------------------------ properties


@st.composite
def histograms(draw: st.DrawFn) -> list[tuple[float, float]]:
    """Raw pairs as a collector would see them: distinct edges, non-negative per-bucket rates, +inf last."""
    edges = sorted(draw(st.sets(st.floats(1e-3, 1e4, allow_nan=False), min_size=1, max_size=25)))
    increments = draw(st.lists(st.floats(0.0, 1e3), min_size=len(edges) + 1, max_size=len(edges) + 1))
    pairs, running = [], 0.0
    for le, inc in zip([*edges, INF], increments, strict=True):
        running += inc
        pairs.append((le, running))
    return pairs


bounds = st.floats(-1.0, 2e4, allow_nan=False)


@settings(max_examples=200)
@given(histograms(), bounds, bounds)
def test_monotone_in_the_bound_and_within_unit_interval(pairs: list[tuple[float, float]], x: float, y: float) -> None:
    h = LatencyHistogram.from_pairs(pairs)
    fx, fy = h.fraction_within(min(x, y)), h.fraction_within(max(x, y))
    if h.total_rps == 0:
        assert fx is None
        assert fy is None
        return
    assert fx is not None
    assert fy is not None
    assert 0.0 <= fx <= fy <= 1.0


@settings(max_examples=200)
@given(histograms())
def test_exact_at_every_edge(pairs: list[tuple[float, float]]) -> None:
    h = LatencyHistogram.from_pairs(pairs)
    total = pairs[-1][1]
    for le, rate in pairs[:-1]:
        got = h.fraction_within(le)
        if total == 0:
            assert got is None
        else:
            assert got == pytest.approx(rate / total, rel=1e-12, abs=1e-15)
            assert h.is_edge(le)
            lower, upper = h.bracket(le) or (math.nan, math.nan)
            assert lower == upper == got


@settings(max_examples=300)
@given(histograms(), st.one_of(bounds, st.sampled_from([math.nan, INF, -INF, 0.0, -0.0])), st.data())
def test_is_edge_is_membership_in_the_finite_bounds(
    pairs: list[tuple[float, float]], bound: float, data: st.DataObject
) -> None:
    """`is_edge` searches the buckets themselves: the same answer as `bound in edges_s` (an edge drawn from the
    histogram half of the time, so both answers are exercised)."""
    h = LatencyHistogram.from_pairs(pairs)
    if data.draw(st.booleans(), label="an edge"):
        bound = data.draw(st.sampled_from(h.edges_s), label="edge")
    assert h.is_edge(bound) is (bound in h.edges_s)


@settings(max_examples=200)
@given(histograms(), bounds, st.randoms(use_true_random=False))
def test_order_of_buckets_on_input_is_irrelevant(
    pairs: list[tuple[float, float]], bound: float, rng: random.Random
) -> None:
    shuffled = list(pairs)
    rng.shuffle(shuffled)
    assert LatencyHistogram.from_pairs(shuffled) == LatencyHistogram.from_pairs(pairs)
    assert LatencyHistogram.from_pairs(shuffled).fraction_within(bound) == LatencyHistogram.from_pairs(
        pairs
    ).fraction_within(bound)


@settings(max_examples=200)
@given(histograms(), bounds)
def test_interpolated_fraction_lies_in_the_edge_bracket(pairs: list[tuple[float, float]], bound: float) -> None:
    h = LatencyHistogram.from_pairs(pairs)
    got, bracket = h.fraction_within(bound), h.bracket(bound)
    if got is None or bracket is None:
        assert got is None
        assert bracket is None
        return
    assert bracket[0] - 1e-12 <= got <= bracket[1] + 1e-12


@settings(max_examples=200)
@given(st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_joint_bound_is_below_both_marginals(a: float, b: float) -> None:
    joint = joint_attainment_lower_bound(a, b)
    assert joint is not None
    assert 0.0 <= joint <= min(a, b) + 1e-12


@given(histograms(), st.randoms(use_true_random=False))
def test_from_pairs_output_passes_the_constructors_check(pairs: list[tuple[float, float]], rng: random.Random) -> None:
    """`from_pairs` skips the constructor's check of its own output (canonical by construction): the check,
    run on that output, must accept it, with duplicated bounds and a rate above the total among the pairs."""
    raw = [*pairs, *rng.sample(pairs, k=min(2, len(pairs)))]
    raw.append((pairs[0][0], 2 * max(rate for _, rate in pairs) + 1))  # above the +Inf rate: capped
    h = LatencyHistogram.from_pairs(raw)
    assert LatencyHistogram(h.buckets) == h
