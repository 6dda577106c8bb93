"""The exact mode's price-based decomposition (issue 22): each request's allocations enumerated (`_choices_of`), the
pool rows priced by the LP of the choice program, the few requests it splits chosen exactly (`_solve_priced`).

Reference: the compact joint program with its pool rows (`_solve_component`, what a component of fewer than
`PRICED_MIN_REQUESTS` requests still gets). Both are exact within the MIP gap, so their objectives (cost + P x
unmet) agree within it where both are proven; where several allocations are optimal they may pick different
ones, so the properties compare objectives and feasibility, not targets.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.domain.capacity import VariantSupply
from adapter.optimizer import exact
from adapter.optimizer.exact import ExactRequest, Solution
from tests.optimizer.test_exact_decomposed import fits, objective, reference_solve, requests_of


def variant(
    name: str, cap: float, *, lo: int = 0, hi: int = 10, current: int = 0, cost: float = 15.0, pool: str = "A100"
) -> VariantSupply:
    return VariantSupply(name, cost, cap, current, lo, hi, current, 0, 1, pool)


@contextmanager
def priced_from(n_requests: int) -> Iterator[None]:
    """Components of at least `n_requests` requests solved by price (0: every one, even the generated fleets')."""
    real = exact.PRICED_MIN_REQUESTS
    exact.PRICED_MIN_REQUESTS = n_requests
    try:
        yield
    finally:
        exact.PRICED_MIN_REQUESTS = real


def value(requests: Sequence[ExactRequest], solution: Solution) -> float:
    penalty = 1 + 1000 * max(v.cost / v.per_replica_capacity for r in requests for v in r.variants)
    cost, unmet = objective(requests, solution)
    return cost + penalty * unmet


@pytest.mark.parametrize(
    ("variants", "demand", "expected"),
    [
        # `_choices_of`'s worked example: D = 200,000, 80,000 a replica, lo = 1: n = 4 over-covers (3 supply 240,000).
        ([variant("a", 80_000, lo=1, current=1)], 200_000, [[1], [2], [3]]),
        # Keep one: a request serving now may not go to zero (n = 0 is not a choice), one at zero may.
        ([variant("a", 80_000, current=1)], 100_000, [[1], [2]]),
        ([variant("a", 80_000)], 100_000, [[0], [1], [2]]),
        # Two variants: every mix that covers with no replica to spare, and every one short of D.
        (
            [variant("a", 80_000, current=1), variant("b", 30_000)],
            100_000,
            [[0, 1], [0, 2], [0, 3], [0, 4], [1, 0], [1, 1], [2, 0]],
        ),
        # Max bounds the box: at most 1 replica, never covered.
        ([variant("a", 80_000, hi=1, current=1)], 200_000, [[1]]),
        # No variant of known capacity: the one allocation is the empty one (all of D unmet).
        ([], 200_000, [[]]),
    ],
    ids=["worked-example", "keeps-one", "may-go-to-zero", "two-variants", "at-max", "no-priced-variant"],
)
def test_choices(variants: list[VariantSupply], demand: float, expected: list[list[int]]) -> None:
    request = ExactRequest(("m",), tuple(variants), demand)
    choices = exact._choices_of([request], ["A100"], np.array([100.0]), penalty=1e3)
    assert choices is not None
    assert choices.counts.tolist() == expected
    supplied = choices.counts @ np.array([v.per_replica_capacity for v in variants], dtype=float)
    assert choices.unmet.tolist() == pytest.approx(np.maximum(0.0, demand - supplied).tolist())
    costs = np.array([v.cost for v in variants], dtype=float)
    assert choices.value.tolist() == pytest.approx((choices.counts @ costs + 1e3 * choices.unmet).tolist())
    assert choices.gpus[:, 0].tolist() == choices.counts.sum(axis=1).tolist()


def test_requests_of_one_width_share_a_padded_box_but_keep_their_own() -> None:
    """`_choices_of` enumerates requests with as many variants in one box as wide as the widest; a point outside a
    request's own box (here A's n = 2, 3 beyond its max of 1) is not one of its choices."""
    a = ExactRequest(("a",), (variant("v", 80_000, hi=1, current=1),), 200_000)
    b = ExactRequest(("b",), (variant("v", 80_000, lo=1, current=1),), 200_000)
    choices = exact._choices_of([a, b], ["A100"], np.array([100.0]), penalty=1e3)
    assert choices is not None
    assert choices.owner.tolist() == [0, 1, 1, 1]
    assert choices.counts.tolist() == [[1], [1], [2], [3]]


def test_a_group_too_large_to_pad_at_once_is_enumerated_in_halves(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same choices whether the requests share one padded box or are split until each part fits."""
    requests = stress_fleet(9)
    pools, capacity = ["A100", "H100"], np.array([100.0, 100.0])
    whole = exact._choices_of(requests, pools, capacity, penalty=1e3)
    monkeypatch.setattr(exact, "PADDED_POINTS_MAX", 1)
    halves = exact._choices_of(requests, pools, capacity, penalty=1e3)
    assert whole is not None
    assert halves is not None
    for field in ("owner", "counts", "unmet", "value", "gpus"):
        assert getattr(halves, field).tolist() == getattr(whole, field).tolist(), field


def test_a_box_too_large_to_enumerate_is_left_to_the_compact_program() -> None:
    many = tuple(variant(f"v{k}", 1.0, hi=100) for k in range(4))  # 100^4 counts cover 400 units: too many
    request = ExactRequest(("m",), many, 400.0)
    assert exact._choices_of([request], ["A100"], np.array([10.0]), penalty=1e3) is None
    assert exact._all_choices([request], {"A100": 10}) is None
    tiny = ExactRequest(("t",), (variant("v", 1e-12, hi=2**31 - 1),), 1e12)  # 1e24 replicas: no int64 overflow
    assert exact._choices_of([tiny], ["A100"], np.array([10.0]), penalty=1e3) is None
    other = ExactRequest(("n",), many, 400.0)
    with priced_from(0):
        solution = exact.solve([request, other], gpus_free={"A100": 10})  # still solved, by the compact program
    assert solution is not None
    assert exact._fits([request, other], solution.targets, {"A100": 10})


def test_the_worked_example_one_gpu_for_two_requests() -> None:
    """`_solve_priced`'s docstring: A's replica saves 1,007, B's 503; the LP gives the one free GPU to A."""
    a = ExactRequest(("a",), (variant("v", 8.0, cost=1.0),), 10.0)
    b = ExactRequest(("b",), (variant("v", 8.0, cost=1.0),), 4.0)
    choices = exact._all_choices([a, b], {"A100": 1})
    assert choices is not None
    assert choices.owner.tolist() == [0, 0, 0, 1, 1]
    assert choices.value.tolist() == [1260.0, 253.0, 2.0, 504.0, 1.0]
    solved = exact._solve_priced([a, b], choices, node_limit=1)
    assert solved == ({("a",): {"v": 1}, ("b",): {"v": 0}}, True)


@pytest.mark.parametrize("priced_from_n", [10**9, 0], ids=["compact", "priced"])
def test_coverable_demand_is_held_covered(priced_from_n: int) -> None:
    """The module docstring's case: D short by 0.34 tokens of a 400-token, $15 replica. Priced, 0.34 unmet costs
    0.34·P = $13 < $15, but coverable demand is held covered: both paths buy the second replica."""
    request = ExactRequest(("m",), (variant("v", 400.0, current=1),), 400.34)
    with priced_from(priced_from_n):
        solution = exact.solve([request], gpus_free={"A100": 10})
    assert solution is not None
    assert solution.targets == {("m",): {"v": 2}}


def stress_fleet(n_models: int, *, seed: int = 7) -> list[ExactRequest]:
    """Issue 22's multi-variant stress fleet: models of two variants (A100 and H100, 1 or 2 GPUs a replica,
    1–4 running, 40k–120k tokens each), demand 0.5–2x today's supply; with no GPU free both pools are over-full
    and every request spans both, so the whole fleet is one component."""
    rng = random.Random(seed)
    out = []
    for m in range(n_models):
        variants = []
        for k, pool in enumerate(("A100", "H100")):
            current = rng.randint(1, 4)
            cap = float(rng.randint(40, 120) * 1000)
            gpus = rng.choice((1, 1, 2))
            cost = 15.0 if pool == "A100" else 5.0
            variants.append(VariantSupply(f"v{k}", cost, cap, current, 1, 10, current, 0, gpus, pool))
        supply = sum(v.current_replicas * v.per_replica_capacity for v in variants)
        out.append(ExactRequest(("ns", f"m{m}"), tuple(variants), supply * rng.uniform(0.5, 2.0)))
    return out


def test_the_multi_variant_stress_fleet_is_proven_optimal_by_price() -> None:
    """80 two-variant models on two over-full pools: at the root alone (one node) the compact program (with its
    cuts) stays unproven; by price the same root proves it (the LP splits at most two requests), both pools hold,
    and its value is the compact program's optimum at the default node limit, within the gap."""
    requests, free = stress_fleet(80), {"A100": 0, "H100": 0}
    with priced_from(10**9):
        compact_root = exact.solve(requests, gpus_free=free, node_limit=1)
        compact = exact.solve(requests, gpus_free=free)
    priced = exact.solve(requests, gpus_free=free, node_limit=1)
    assert compact_root is not None
    assert compact is not None
    assert priced is not None
    assert not compact_root.proven_optimal, "the fleet is hard for the compact program (else this shows nothing)"
    assert compact.proven_optimal
    assert priced.proven_optimal
    assert fits(requests, priced, free)
    assert math.isclose(value(requests, priced), value(requests, compact), rel_tol=2 * exact.MIP_REL_GAP)


@settings(max_examples=80, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1), st.sampled_from([-1, 0, 2, 8]))
def test_priced_is_feasible_deterministic_and_within_the_gap_of_the_joint_program(seed: int, headroom: int) -> None:
    """The generated fleets of `make bench` (2–8 requests, 1–4 variants, three pools), every component solved by
    price; headroom -1: no GPU free in any pool (over-full). Feasible (bounds, pools), the same answer twice, and
    within the MIP gap of the compact joint program's objective when both are proven (never worse than it by
    more than the gap when the priced one is: the joint program's allocation is feasible, so the optimum is no
    more than its value)."""
    requests, free = requests_of(seed, max(0, headroom))
    if headroom < 0:
        free = dict.fromkeys(free, 0)
    with priced_from(0):
        priced, again = exact.solve(requests, gpus_free=free), exact.solve(requests, gpus_free=free)
    joint = reference_solve(requests, gpus_free=free)
    assert (priced is None) == (joint is None)
    if priced is None or joint is None:
        return
    assert again is not None
    assert again.targets == priced.targets, "same input, same answer"
    assert fits(requests, priced, free), "every pool row holds"
    for r in requests:
        assert all(
            min(v.min_replicas, v.max_replicas) <= priced.targets[r.key][v.name] <= v.max_replicas for v in r.variants
        )
    if priced.proven_optimal:
        assert value(requests, priced) <= value(requests, joint) * (1 + 2 * exact.MIP_REL_GAP) + 1e-6
        if joint.proven_optimal:
            assert math.isclose(
                value(requests, priced), value(requests, joint), rel_tol=2 * exact.MIP_REL_GAP, abs_tol=1e-6
            )


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1), st.integers(min_value=2, max_value=30))
def test_priced_stress_fleets_within_the_gap_of_the_joint_program(seed: int, n_models: int) -> None:
    """Small stress fleets (two variants on two over-full pools): the priced answer fits and, when proven, is no
    worse than the joint compact program's (proven or not) by more than the gap."""
    requests, free = stress_fleet(n_models, seed=seed), {"A100": 0, "H100": 0}
    with priced_from(0):
        priced = exact.solve(requests, gpus_free=free)
    joint = reference_solve(requests, gpus_free=free)
    assert priced is not None
    assert joint is not None
    assert fits(requests, priced, free)
    if priced.proven_optimal:
        assert value(requests, priced) <= value(requests, joint) * (1 + 2 * exact.MIP_REL_GAP) + 1e-6


def test_below_the_threshold_the_compact_program_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small components (the generated fleets') keep the compact program: no enumeration, no LP."""
    calls: list[int] = []
    real = exact._all_choices

    def counting(requests: Sequence[ExactRequest], gpus_free: Mapping[str, int]) -> object:
        calls.append(len(requests))
        return real(requests, gpus_free)

    monkeypatch.setattr(exact, "_all_choices", counting)
    requests, free = requests_of(7, 0)
    assert exact.solve(requests, gpus_free=free) is not None
    assert calls == []
    assert exact.solve(stress_fleet(exact.PRICED_MIN_REQUESTS), gpus_free={"A100": 0, "H100": 0}) is not None
    assert calls == [exact.PRICED_MIN_REQUESTS]


def test_the_priced_answer_is_the_same_in_another_process() -> None:
    """Determinism across processes (what a replay on another machine relies on): the LP, the split repair and
    the ties between equal choices (the first) depend on nothing but the input."""
    code = (
        "import json\n"
        "from tests.optimizer.test_exact_priced import stress_fleet\n"
        "from adapter.optimizer import exact\n"
        "sol = exact.solve(stress_fleet(120, seed=3), gpus_free={'A100': 0, 'H100': 0})\n"
        "print(json.dumps([sol.proven_optimal, {'|'.join(k): dict(v) for k, v in sorted(sol.targets.items())}]))\n"
    )
    repo_root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=repo_root)
    solution = exact.solve(stress_fleet(120, seed=3), gpus_free={"A100": 0, "H100": 0})
    assert solution is not None
    here = [solution.proven_optimal, {"|".join(k): dict(v) for k, v in sorted(solution.targets.items())}]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == here


def test_when_rounding_is_not_proven_the_compact_program_also_runs_and_the_better_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The LP bound not met by the rounded allocation (forced here: no gap is ever within): the compact program
    with its cuts runs too, the better allocation is kept, and it fits the pools."""
    requests, free = stress_fleet(80), {"A100": 0, "H100": 0}
    with priced_from(10**9):
        compact = exact.solve(requests, gpus_free=free)
    calls: list[bool] = []
    solve_program = exact._solve_program

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(kwargs["gpus_free"] is not None)
        return solve_program(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(exact, "_solve_program", counting)
    monkeypatch.setattr(exact, "_within_gap", lambda value, bound: False)
    priced = exact.solve(requests, gpus_free=free)
    assert compact is not None
    assert priced is not None
    assert calls == [True], "the compact program with pool rows ran once (cover=False: not all coverable)"
    assert fits(requests, priced, free)
    assert value(requests, priced) <= value(requests, compact) + 1e-6
    assert priced.proven_optimal == compact.proven_optimal
