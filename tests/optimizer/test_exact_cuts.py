"""The rounding (MIR) cuts of the exact mode's pool programs (issue 22): valid, and what makes them pay.

Valid: every integer allocation within the bounds satisfies every cut (they tighten the LP relaxation, never the
integer program), so the optimum is the one without them. Paying: a fleet whose requests all share an over-full
pool is proven optimal at the root node, where without the cuts HiGHS runs out of nodes (at 1,000 VAs it did so
after 0.9–1.3 s, 25 % away from its incumbent).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.domain.capacity import VariantSupply
from adapter.optimizer import exact
from adapter.optimizer.exact import ExactRequest, rounding_cuts
from tests.optimizer.test_exact_decomposed import fits, objective, requests_of


def variant(name: str, cap: float, *, lo: int = 0, hi: int = 10, current: int = 0) -> VariantSupply:
    return VariantSupply(name, 15.0, cap, current, lo, hi, current, 0, 1, "A100")


def without_margin(bound: float) -> float:
    """The bound before `CUT_MARGIN` lowered it: b = (b' + m) / (1 - m) for b' = b - m·(|b| + 1), b >= 0."""
    return (bound + exact.CUT_MARGIN) / (1 - exact.CUT_MARGIN)


@pytest.mark.parametrize(
    ("variants", "demand", "expected"),
    [
        # The docstring's worked example: 80,000-token replicas, D = 200,000: remainder 40,000, β = 2.5.
        ([variant("a", 80_000)], 200_000, [([40_000.0], 120_000.0)]),
        # A second variant of 30,000 tokens: its coefficient is δ·min(f_v, f) = 80,000 · 0.375 = 30,000; its own
        # cut (δ = 30,000: β = 6.67, f = 2/3) gives 80,000 a coefficient 30,000·(2/3·2 + 2/3) = 60,000.
        (
            [variant("a", 80_000), variant("b", 30_000)],
            200_000,
            [([60_000.0, 20_000.0], 140_000.0), ([40_000.0, 30_000.0], 120_000.0)],
        ),
        # Lower bounds: y = n - lo, so D' = 200,000 - 80,000 = 120,000, f = 0.5, and the bound moves by a·lo.
        ([variant("a", 80_000, lo=1)], 200_000, [([40_000.0], 80_000.0 + 40_000.0)]),
        # The lower bounds already cover the demand: the cover row holds everywhere, nothing to cut.
        ([variant("a", 80_000, lo=3)], 200_000, []),
        # An exact multiple (f = 0): integer replicas lose nothing to a remainder, so no cut.
        ([variant("a", 50_000)], 200_000, []),
        ([variant("a", 50_000)], 0, []),
    ],
    ids=["one-variant", "two-variants", "lower-bound", "covered-at-lower-bounds", "exact-multiple", "no-demand"],
)
def test_rounding_cuts(variants: list[VariantSupply], demand: float, expected: list[tuple[list[float], float]]) -> None:
    cuts = rounding_cuts(variants, demand)
    assert len(cuts) == len(expected)
    for (coefficients, bound), (want_coefficients, want_bound) in zip(cuts, expected, strict=True):
        assert coefficients == pytest.approx(want_coefficients)
        assert without_margin(bound) == pytest.approx(want_bound)
        assert bound < without_margin(bound), "lowered by the margin"


@st.composite
def requests(draw: st.DrawFn) -> tuple[list[VariantSupply], float]:
    variants = []
    for v in range(draw(st.integers(1, 3))):
        lo = draw(st.integers(0, 2))
        variants.append(
            variant(
                f"v{v}",
                draw(st.sampled_from([0.5, 1.0, 3.0, 7.0, 400.0, 1000.0, 18_000.0])) * draw(st.integers(1, 5)),
                lo=lo,
                hi=lo + draw(st.integers(0, 5)),
            )
        )
    reach = sum(v.per_replica_capacity * v.max_replicas for v in variants)
    return variants, draw(st.floats(0, 1.3)) * reach


@settings(max_examples=300, deadline=None)
@given(requests())
def test_every_integer_allocation_satisfies_every_cut(request: tuple[list[VariantSupply], float]) -> None:
    """Validity (they never remove an allocation the program could choose): for every replica count n in the
    bounds and the least unmet it allows, u = max(0, D - Σ cap·n), Σ a·n + u >= b. Enumerated: the boxes are small."""
    variants, demand = request
    cuts = rounding_cuts(variants, demand)
    for counts in itertools.product(*(range(v.min_replicas, v.max_replicas + 1) for v in variants)):
        unmet = max(0.0, demand - sum(v.per_replica_capacity * n for v, n in zip(variants, counts, strict=True)))
        for coefficients, bound in cuts:
            assert sum(a * n for a, n in zip(coefficients, counts, strict=True)) + unmet >= bound, (counts, unmet)


def test_a_cut_makes_a_fractional_replica_pay_for_the_remainder() -> None:
    """Tightness, the point of the cut: at n = 2.5 replicas of 80,000 tokens (D = 200,000) the cover row allows
    u = 0, the cut requires u >= 20,000 (the convex hull of the integer points, interpolated)."""
    ((coefficients, bound),) = rounding_cuts([variant("a", 80_000)], 200_000)
    assert bound - coefficients[0] * 2.5 == pytest.approx(20_000)


def over_full_fleet(n: int, *, seed: int = 7) -> list[ExactRequest]:
    """`tests.bench_pipeline.scale_snapshot`'s shape: one variant per model, 1–4 replicas of 40k–120k tokens,
    demand 0.5–2x today's supply, all on the A100 pool; with no GPU free, the scale-ups must share what the
    scale-downs release."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        current = rng.randint(1, 4)
        cap = float(rng.randint(40, 120) * 1000)
        v = variant(f"v{i}", cap, lo=1, hi=10, current=current)
        out.append(ExactRequest(("ns", f"m{i}"), (v,), current * cap * rng.uniform(0.5, 2.0)))
    return out


@pytest.mark.parametrize("node_limit", [1, exact.MIP_NODE_LIMIT], ids=["root-only", "default-limit"])
def test_an_over_full_pool_is_proven_optimal_at_the_root(node_limit: int) -> None:
    """40 requests on an over-full pool: without the cuts the default limit ends unproven (and the root alone
    already does at 10 requests); with them the root proves it."""
    requests = over_full_fleet(40)
    solution = exact.solve(requests, gpus_free={"A100": 0}, node_limit=node_limit)
    assert solution is not None
    assert solution.proven_optimal
    assert exact._fits(requests, solution.targets, {"A100": 0})


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1), st.sampled_from([0, 2, 8]))
def test_the_cuts_change_speed_not_the_optimum(seed: int, headroom: int) -> None:
    """Generated fleets (`make bench`'s): with and without the cuts, both allocations fit the pools and, when both
    are proven, have the same objective (cost + P·unmet) within the MIP gap; the same input gives the same answer."""
    requests, free = requests_of(seed, headroom)
    with_cuts = exact.solve(requests, gpus_free=free)
    again = exact.solve(requests, gpus_free=free)
    plain = _solve_without_cuts(requests, free)
    assert (with_cuts is None) == (plain is None)
    if with_cuts is None or plain is None:
        return
    assert again is not None
    assert again.targets == with_cuts.targets
    assert fits(requests, with_cuts, free)
    if not (with_cuts.proven_optimal and plain.proven_optimal):
        return
    penalty = 1 + 1000 * max(v.cost / v.per_replica_capacity for r in requests for v in r.variants)
    (cost, unmet), (plain_cost, plain_unmet) = objective(requests, with_cuts), objective(requests, plain)
    assert math.isclose(cost + penalty * unmet, plain_cost + penalty * plain_unmet, rel_tol=2 * exact.MIP_REL_GAP)


def _solve_without_cuts(requests: Sequence[ExactRequest], free: dict[str, int]) -> exact.Solution | None:
    real = exact.rounding_cuts
    exact.rounding_cuts = lambda variants, demand: []  # type: ignore[assignment]
    try:
        return exact.solve(requests, gpus_free=free)
    finally:
        exact.rounding_cuts = real
