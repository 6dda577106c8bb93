"""Exact allocation: the cheapest replica mix for every model at once, as a mixed-integer linear program.

For each request r (a model, or one P/D role of it) that needs a change, with variants v of known capacity:

    minimise    Σ_r Σ_v cost_v · n_v  +  P · Σ_r u_r
    subject to  Σ_v cap_v · n_v + u_r >= D_r                     (capacity covers demand; u_r = unmet, >= 0)
                Σ_{v in pool a} gpus_v · n_v <= free_a + Σ_{v in pool a} gpus_v · current_v   (limiter on)
                Σ_v n_v >= 1          if Σ_v current_v >= 1       (the last serving variant keeps one)
                min_v <= n_v <= max_v,  n_v integer

where D_r = Σ_v cap_v · current_v + required_r (scale-up) or − spare_r (scale-down), and the penalty
P = 1 + 1000 · max_v(cost_v / cap_v) makes any unmet unit dearer than any capacity. Worked example: D = 10,000
tokens, A (cost 5, 2,000 tokens) and B (cost 15, 8,000 tokens), nothing running: greedy buys 2 B (30, 16,000
tokens); the MILP buys 1 B + 1 A (20, 10,000 tokens) — exactly covered, a third cheaper.

"Keeps one" binds only a request that runs a replica now. A model at zero gets replicas through its unmet
penalty like any other demand, and is woken by scale-from-zero (enforcer) otherwise; as a hard constraint it
made the program take the only free-able GPU from another model's running replica (found by hypothesis:
model A at zero needing 201 tokens, model B short by 202 on a full L4 pool; B gave up a 1,000-token replica
so A could have one, leaving 1,202 unmet where greedy leaves 403).

Unlike the greedy path, the program may move capacity between variants in one cycle (fewer expensive, more
cheap replicas): cheaper at steady state, at the price of a cold start; see docs/configuration.md
(`optimizer: exact`). Solved with scipy.optimize.milp (HiGHS); a solver failure returns None and the caller
falls back to the greedy allocation.

Deterministic: the solver's work is bounded by a number of branch-and-bound nodes per program
(`MIP_NODE_LIMIT`), never by wall time, so the same input gives the same allocation on any machine and a
recorded cycle replays bit for bit (with a time limit, a slower or busier machine explored fewer nodes and could
keep a different incumbent). HiGHS itself is deterministic (fixed random seed, no time-dependent choices). When
the limit is reached, the best incumbent is used (feasible, within the bound's gap) and the decision says so.
The limit bounds work, not time: one program's time grows with its size. A cycle of 1,000 VAs with the limiter
on (two programs of ~820 columns) costs ~1.1 s of CPU in `make bench`, mostly HiGHS's root node, which the
former 1 s time budget cut short on a busy machine (0.65-0.77 s of CPU there, and a different incumbent on a
faster one); 5, 20 or 50 nodes cost the same there, 200 twice as much.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from adapter.domain.capacity import VariantSupply

MIP_REL_GAP = 1e-3
"""Stop when the incumbent is provably within 0.1 % of the optimum: cost figures are not more precise."""
MIP_NODE_LIMIT = 50
"""Branch-and-bound nodes per program at most (the deterministic bound, module docstring). The generated fleets
of `make bench` (2–8 models, 1–4 variants, three pools) are proven optimal within 15 nodes."""


@dataclass(frozen=True, slots=True)
class ExactRequest:
    key: tuple[str, ...]
    variants: Sequence[VariantSupply]
    demand: float
    """D_r: the total capacity the request's variants must supply."""


@dataclass(frozen=True, slots=True)
class Solution:
    targets: Mapping[tuple[str, ...], Mapping[str, int]]
    proven_optimal: bool
    """False when a program reached `MIP_NODE_LIMIT`: its best incumbent is used (still feasible)."""


def solve(
    requests: Sequence[ExactRequest], *, gpus_free: Mapping[str, int] | None, node_limit: int = MIP_NODE_LIMIT
) -> Solution | None:
    """Targets per request and variant (variants of unknown capacity keep their current count), or None.

    Requests that share no constrained GPU pool are independent, so each connected component is its own,
    much smaller, program (without the limiter every request is its own component), each bounded by
    `node_limit` branch-and-bound nodes."""
    out: dict[tuple[str, ...], dict[str, int]] = {}
    optimal = True
    for component in _components(requests, gpus_free):
        solved = _solve_component(component, gpus_free=gpus_free, node_limit=node_limit)
        if solved is None:
            return None
        targets, proven = solved
        out.update(targets)
        optimal = optimal and proven
    return Solution(out, optimal)


def _components(requests: Sequence[ExactRequest], gpus_free: Mapping[str, int] | None) -> list[list[ExactRequest]]:
    """Union-find over requests joined by a shared constrained pool; components in first-request order."""
    parent = list(range(len(requests)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    if gpus_free is not None:
        first_with_pool: dict[str, int] = {}
        for i, request in enumerate(requests):
            for v in request.variants:
                if v.per_replica_capacity > 0 and v.accelerator in gpus_free:
                    j = first_with_pool.setdefault(v.accelerator, i)
                    parent[root(i)] = root(j)
    groups: dict[int, list[ExactRequest]] = {}
    for i, request in enumerate(requests):
        groups.setdefault(root(i), []).append(request)
    return list(groups.values())


def _solve_component(
    requests: Sequence[ExactRequest], *, gpus_free: Mapping[str, int] | None, node_limit: int
) -> tuple[dict[tuple[str, ...], dict[str, int]], bool] | None:
    columns: list[tuple[int, VariantSupply]] = []
    for r_index, request in enumerate(requests):
        for v in request.variants:
            if v.per_replica_capacity > 0:
                columns.append((r_index, v))
    if not columns:
        return {r.key: {v.name: v.current_replicas for v in r.variants} for r in requests}, True
    n_x, n_u = len(columns), len(requests)
    penalty = 1 + 1000 * max(v.cost / v.per_replica_capacity for _, v in columns)
    c = np.concatenate([np.array([v.cost for _, v in columns], dtype=float), np.full(n_u, penalty)])
    rows: list[np.ndarray] = []
    lower: list[float] = []
    upper: list[float] = []
    for r_index, request in enumerate(requests):
        cover = np.zeros(n_x + n_u)
        serve = np.zeros(n_x + n_u)
        max_total = serving = 0
        for j, (owner, v) in enumerate(columns):
            if owner == r_index:
                cover[j] = v.per_replica_capacity
                serve[j] = 1
                max_total += v.max_replicas
                serving += v.current_replicas
        cover[n_x + r_index] = 1
        rows.append(cover)
        lower.append(request.demand)
        upper.append(math.inf)
        if request.demand > 0 and max_total >= 1 and serving >= 1:
            rows.append(serve)
            lower.append(1)
            upper.append(math.inf)
    if gpus_free is not None:
        for pool in sorted({v.accelerator for _, v in columns if v.accelerator in gpus_free}):
            row = np.zeros(n_x + n_u)
            held = 0
            for j, (_, v) in enumerate(columns):
                if v.accelerator == pool:
                    row[j] = max(1, v.gpus_per_replica)
                    held += v.current_replicas * max(1, v.gpus_per_replica)
            rows.append(row)
            lower.append(-math.inf)
            upper.append(gpus_free[pool] + held)
    lo = np.array([min(v.min_replicas, v.max_replicas) for _, v in columns] + [0] * n_u, dtype=float)
    hi = np.array([v.max_replicas for _, v in columns] + [math.inf] * n_u, dtype=float)
    integrality = np.concatenate([np.ones(n_x), np.zeros(n_u)])
    result = milp(
        c,
        constraints=LinearConstraint(np.array(rows), np.array(lower), np.array(upper)),
        integrality=integrality,
        bounds=Bounds(lo, hi),
        options={"node_limit": node_limit, "mip_rel_gap": MIP_REL_GAP},
    )
    if result.x is None:  # infeasible, or no incumbent within the node limit; a node-limited incumbent is kept
        return None
    out = {r.key: {v.name: v.current_replicas for v in r.variants} for r in requests}
    for j, (owner, v) in enumerate(columns):
        out[requests[owner].key][v.name] = round(result.x[j])
    return out, result.status == 0
