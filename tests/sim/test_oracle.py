"""The oracle (adapter/sim/oracle.py): worked examples, capacities from the queueing model, and the property
that makes it an oracle — its cost is at most that of every schedule covering the same demand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.analyzers.queueing.model import QueueModel, RequestSize, ServiceParams
from adapter.sim.oracle import (
    MIN_DEMAND_RPS,
    Demand,
    OracleVariant,
    capacity_rps,
    covers,
    demand_bins,
    effective_batch,
    plan,
    schedule_cost,
)
from adapter.sim.replica import PerfParams
from adapter.sim.workload import Request

PERF = PerfParams()


def one_variant(**kw: float) -> list[OracleVariant]:
    base = {"cost_per_hour": 2.0, "min_replicas": 1, "max_replicas": 10, "startup_median_s": 120.0}
    base.update(kw)
    return [
        OracleVariant(
            "a",
            float(base["cost_per_hour"]),
            int(base["min_replicas"]),
            int(base["max_replicas"]),
            float(base["startup_median_s"]),
            PERF,
            initial_replicas=1,
        )
    ]


def demand_of(*rates: float) -> Demand:
    n = len(rates)
    return Demand(30.0, np.array(rates, dtype=np.float64), np.full(n, 512.0), np.full(n, 128.0))


@pytest.mark.parametrize(
    ("rates", "replicas", "cost"),
    [
        pytest.param((4, 12, 4), [1, 3, 1], 2 / 3600 * (30 * 5 + 120 * 2), id="step-then-back"),
        pytest.param((4, 12, 4, 12), [1, 3, 3, 3], 2 / 3600 * (30 * 10 + 120 * 2), id="dip-shorter-than-startup"),
        pytest.param((0, 0), [1, 1], 2 / 3600 * 60, id="idle-pays-min-replicas"),
        pytest.param((100,), [10], 2 / 3600 * (30 * 10 + 120 * 9), id="infeasible-clipped-to-max"),
    ],
)
def test_worked_examples(rates: tuple[float, ...], replicas: list[int], cost: float) -> None:
    result = plan(one_variant(), demand_of(*rates), np.full((1, len(rates)), 5.0))
    assert result.replicas[0].tolist() == replicas
    assert result.cost == pytest.approx(cost)
    assert result.optimal
    assert result.infeasible_bins == (1 if max(rates) > 50 else 0)


def test_cheaper_variant_first_and_mixes_when_bounded() -> None:
    variants = [
        OracleVariant("cheap", 1.0, 0, 2, 60.0, PERF),
        OracleVariant("dear", 4.0, 0, 5, 60.0, PERF),
    ]
    # per req/s: cheap 1.0/5 = 0.2, dear 4.0/10 = 0.4 → cheap first, up to its max of 2 (10 req/s)
    result = plan(variants, demand_of(8, 26), np.array([[5.0, 5.0], [10.0, 10.0]]))
    assert result.replicas[:, 0].tolist() == [2, 0]
    assert result.replicas[:, 1].tolist() == [2, 2]


def test_capacity_is_the_queueing_models_rate_at_the_slo() -> None:
    perf = PerfParams(alpha_ms=20, beta_ms=0.08, gamma_ms=0.0002, kv_cache_tokens=10_000_000, max_num_seqs=256)
    model = QueueModel(ServiceParams(20, 0.08, 0.0002), RequestSize(512, 128), max_batch=256)
    assert capacity_rps(perf, 512, 128, ttft_ms=2000, itl_ms=100) == pytest.approx(model.max_rate(2000, 100).rate_rps)
    assert capacity_rps(perf, 512, 128, ttft_ms=1, itl_ms=100) == 0.0, "unreachable SLO: no capacity"


def test_effective_batch_is_bounded_by_kv() -> None:
    perf = PerfParams(kv_cache_tokens=440_000, max_num_seqs=256)
    assert effective_batch(perf, 12_000, 340) == 36
    assert effective_batch(perf, 500, 100) == 256
    assert effective_batch(PerfParams(kv_cache_tokens=100), 5000, 100) == 1


def test_demand_bins_rate_and_mean_sizes() -> None:
    requests = [Request(t, 100 + i, 10) for i, t in enumerate(np.linspace(0, 29.9, 90))] + [Request(45.0, 7, 3)]
    demand = demand_bins(requests, duration_s=60.0, interval_s=30.0)
    assert demand.rate_rps.tolist() == pytest.approx([3.0, 1 / 30])
    assert demand.input_tokens[0] == pytest.approx(100 + 44.5)
    assert demand.output_tokens[1] == 3.0


# ------------------------------------------------------------------------------------------ the property


@st.composite
def instances(draw: st.DrawFn) -> tuple[list[OracleVariant], Demand, np.ndarray, np.ndarray]:
    n_var = draw(st.integers(1, 3))
    n_bins = draw(st.integers(1, 10))
    variants = []
    for v in range(n_var):
        lo = draw(st.integers(0, 2))
        hi = draw(st.integers(max(lo, 1), 6))
        variants.append(
            OracleVariant(
                f"v{v}",
                draw(st.floats(0.1, 5.0)),
                lo,
                hi,
                draw(st.sampled_from([0.0, 30.0, 90.0, 300.0])),
                PERF,
                initial_replicas=draw(st.integers(lo, hi)),
            )
        )
    capacity = np.array(
        [[draw(st.sampled_from([0.0, 0.5, 2.0, 3.7, 8.0])) for _ in range(n_bins)] for _ in range(n_var)]
    )
    rates = np.array([draw(st.floats(0.0, 40.0)) for _ in range(n_bins)])
    demand = Demand(30.0, rates, np.full(n_bins, 512.0), np.full(n_bins, 128.0))
    # a random schedule that covers the demand: random counts, topped up in a random order until covered
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    schedule = np.zeros((n_var, n_bins), dtype=np.int64)
    most = (capacity * np.array([v.max_replicas for v in variants])[:, None]).sum(axis=0)
    for b in range(n_bins):
        for v, variant in enumerate(variants):
            schedule[v, b] = rng.integers(variant.min_replicas, variant.max_replicas + 1)
        target = min(rates[b], most[b])
        while (capacity[:, b] * schedule[:, b]).sum() < target:
            v = int(rng.integers(0, n_var))
            schedule[v, b] = min(schedule[v, b] + 1, variants[v].max_replicas)
    return variants, demand, capacity, schedule


@settings(max_examples=150, deadline=None)
@given(instances())
def test_oracle_costs_at_most_any_schedule_that_covers_the_demand(
    case: tuple[list[OracleVariant], Demand, np.ndarray, np.ndarray],
) -> None:
    variants, demand, capacity, schedule = case
    maxima = [v.max_replicas for v in variants]
    assert covers(schedule, capacity, demand.rate_rps, max_replicas=maxima)
    result = plan(variants, demand, capacity)
    assert result.optimal
    assert covers(result.replicas, capacity, demand.rate_rps, max_replicas=maxima)
    for v, variant in enumerate(variants):
        assert variant.min_replicas <= result.replicas[v].min()
        assert result.replicas[v].max() <= variant.max_replicas
    assert result.cost == pytest.approx(schedule_cost(result.replicas, variants, interval_s=30.0))
    assert result.cost <= schedule_cost(schedule, variants, interval_s=30.0) * (1 + 1e-9) + 1e-12


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 30.0), min_size=1, max_size=8), st.floats(1.0, 2.0))
def test_more_demand_never_costs_less(rates: list[float], factor: float) -> None:
    variants = one_variant(max_replicas=20)
    capacity = np.full((1, len(rates)), 4.0)
    low = plan(variants, demand_of(*rates), capacity).cost
    high = plan(variants, demand_of(*(r * factor for r in rates)), capacity).cost
    assert high >= low - 1e-12
    assert math.isfinite(high)


# ---- make before break: the schedule the frontier plays in the loop -----------------------------------------


def running_dear_idle_cheap() -> list[OracleVariant]:
    """An A100 running (cap 10 req/s, $2.5/h) and a cheaper L40S at zero (cap 5, $1.5/h), both minReplicas 0."""
    return [
        OracleVariant("a100", 2.5, 0, 4, 120.0, PERF, initial_replicas=1),
        OracleVariant("l40s", 1.5, 0, 4, 120.0, PERF, initial_replicas=0),
    ]


@pytest.mark.parametrize(
    ("ready_after_s", "a100", "l40s"),
    [
        pytest.param(None, [0] * 40, [1] * 40, id="the-bound-swaps-at-the-start"),
        pytest.param([300.0, 300.0], [1] * 10 + [0] * 30, [0] * 10 + [1] * 30, id="kept-until-the-l40s-can-serve"),
        pytest.param([0.0, 0.0], [0] * 40, [1] * 40, id="ready-at-once-is-the-bound"),
        pytest.param([300.0, 90.0], [1] * 3 + [0] * 37, [0] * 3 + [1] * 37, id="each-variant-its-own-lead"),
    ],
)
def test_the_replicas_running_at_the_start_are_kept_until_their_replacement_can_serve(
    ready_after_s: list[float] | None, a100: list[int], l40s: list[int]
) -> None:
    # The docstring example of `_make_first`: 0.3 req/s for 40 bins of 30 s. The bound stops the A100 at t = 0
    # (the L40S's startup paid before the start); in the loop nothing would serve for minutes.
    variants = running_dear_idle_cheap()
    result = plan(variants, demand_of(*[0.3] * 40), np.array([[10.0] * 40, [5.0] * 40]), ready_after_s=ready_after_s)
    assert result.optimal
    assert result.replicas[0].tolist() == a100
    assert result.replicas[1].tolist() == l40s


def test_make_before_break_covers_what_the_running_replicas_can_and_no_more() -> None:
    # 12 req/s from the start: the running A100 (10 req/s) serves what it can in the early bins; the rest waits for
    # the L40S (the program stays feasible, and the demand the bound covers is still covered).
    variants = running_dear_idle_cheap()
    capacity = np.array([[10.0] * 12, [5.0] * 12])
    result = plan(variants, demand_of(*[12.0] * 12), capacity, ready_after_s=[300.0, 300.0])
    assert result.optimal
    assert all(n >= 1 for n in result.replicas[0][:10])
    assert covers(result.replicas, capacity, np.full(12, 12.0), max_replicas=[4, 4])


@settings(max_examples=100, deadline=None)
@given(instances(), st.lists(st.sampled_from([0.0, 30.0, 90.0, 300.0]), min_size=3, max_size=3))
def test_make_before_break_only_adds_constraints(
    case: tuple[list[OracleVariant], Demand, np.ndarray, np.ndarray], ready: list[float]
) -> None:
    """Never below the bound, every bound property kept, and in each bin before a variant's lead the replicas
    that were running at the start (at most their initial count each) cover min(D_b, what they can)."""
    variants, demand, capacity, _ = case
    ready_after_s = ready[: len(variants)]
    maxima = [v.max_replicas for v in variants]
    bound = plan(variants, demand, capacity)
    held = plan(variants, demand, capacity, ready_after_s=ready_after_s)
    assert held.optimal
    assert held.cost >= bound.cost * (1 - 1e-9) - 1e-12
    assert covers(held.replicas, capacity, demand.rate_rps, max_replicas=maxima)
    for b in range(demand.bins):
        most = [
            v.initial_replicas if b * demand.interval_s < ready_after_s[i] else v.max_replicas
            for i, v in enumerate(variants)
        ]
        rate = demand.rate_rps[b] if demand.rate_rps[b] >= MIN_DEMAND_RPS else 0.0  # below: none, as the bound reads it
        need = min(rate, sum(capacity[i, b] * most[i] for i in range(len(variants))))
        serving = sum(capacity[i, b] * min(held.replicas[i, b], most[i]) for i in range(len(variants)))
        assert serving >= need * (1 - 1e-6) - 1e-9, (b, held.replicas[:, b], most)
