"""The exact optimizer's decomposition (issue 22) finds programs as good as the joint program it replaced.

Reference: before issue 22, `exact.solve` gave every connected component one program with its pool rows (and,
without the limiter, every request a program of its own). Now a component is first solved without its pool rows
as one block-diagonal program, kept when it fits the pools. Both are optimal within the MIP gap, so the
objective (cost + penalty x unmet) agrees within that gap; where several allocations are optimal the two may
pick different ones, so the property compares objectives and feasibility, not targets.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.optimizer import exact
from adapter.optimizer.exact import ExactRequest, Solution
from tests.bench_pipeline import generated_fleet


def reference_solve(requests: Sequence[ExactRequest], *, gpus_free: Mapping[str, int] | None) -> Solution | None:
    """`exact.solve` before issue 22."""
    out: dict[tuple[str, ...], dict[str, int]] = {}
    optimal = True
    for component in exact._components(requests, gpus_free):
        solved = exact._solve_component(component, gpus_free=gpus_free, node_limit=exact.MIP_NODE_LIMIT)
        if solved is None:
            return None
        out.update(solved[0])
        optimal = optimal and solved[1]
    return Solution(out, optimal)


def requests_of(seed: int, headroom: int) -> tuple[list[ExactRequest], dict[str, int]]:
    """The greedy-vs-exact benchmark's fleets, as exact requests; `headroom` more free GPUs per pool."""
    signals, gpus = generated_fleet(random.Random(seed))
    requests = []
    for s in signals:
        supplied = sum(v.current_replicas * v.per_replica_capacity for v in s.variants)
        requests.append(
            ExactRequest((s.model.namespace, s.model.model_id, ""), tuple(s.variants), supplied + s.required)
        )
    free = {pool: n + headroom for pool, n in gpus.free().items()}
    return requests, free


def objective(requests: Sequence[ExactRequest], solution: Solution) -> tuple[float, float]:
    """(cost, unmet demand) of a solution."""
    cost = unmet = 0.0
    for r in requests:
        targets = solution.targets[r.key]
        cost += sum(v.cost * targets[v.name] for v in r.variants)
        supplied = sum(targets[v.name] * v.per_replica_capacity for v in r.variants if v.per_replica_capacity > 0)
        unmet += max(0.0, r.demand - supplied)
    return cost, unmet


def fits(requests: Sequence[ExactRequest], solution: Solution, free: Mapping[str, int]) -> bool:
    return exact._fits(requests, solution.targets, free)


@settings(max_examples=80, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1), st.sampled_from([0, 2, 8, 1000]), st.booleans())
def test_decomposed_is_as_good_as_the_joint_program(seed: int, headroom: int, limiter: bool) -> None:
    requests, free = requests_of(seed, headroom)
    gpus_free = free if limiter else None
    new, old = exact.solve(requests, gpus_free=gpus_free), reference_solve(requests, gpus_free=gpus_free)
    assert (new is None) == (old is None)
    if new is None or old is None:
        return
    if gpus_free is not None:
        assert fits(requests, new, gpus_free), "every pool row holds"
    if not (new.proven_optimal and old.proven_optimal):
        return
    (new_cost, new_unmet), (old_cost, old_unmet) = objective(requests, new), objective(requests, old)
    penalty = 1 + 1000 * max(v.cost / v.per_replica_capacity for r in requests for v in r.variants)
    new_value, old_value = new_cost + penalty * new_unmet, old_cost + penalty * old_unmet
    assert math.isclose(new_value, old_value, rel_tol=2 * exact.MIP_REL_GAP, abs_tol=1e-6)


@pytest.mark.parametrize("headroom", [0, 1000], ids=["pools-tight", "pools-ample"])
def test_one_program_per_component_when_the_pools_suffice(headroom: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ample pools: one solver call for the whole fleet; tight ones: a second, with the pool rows."""
    requests, free = requests_of(7, headroom)
    if not headroom:  # no GPU free anywhere: every model here needs more capacity, so the relaxation overruns
        free = dict.fromkeys(free, 0)
    calls: list[bool] = []
    solve_component = exact._solve_component

    def counting(component: Sequence[ExactRequest], *, gpus_free: Mapping[str, int] | None, node_limit: int) -> object:
        calls.append(gpus_free is not None)
        return solve_component(component, gpus_free=gpus_free, node_limit=node_limit)

    monkeypatch.setattr(exact, "_solve_component", counting)
    solution = exact.solve(requests, gpus_free=free)
    assert solution is not None
    components = exact._components(requests, free)
    if headroom:
        assert calls == [False] * len(components)
    else:
        assert calls.count(False) == len(components)
        assert calls.count(True) >= 1
