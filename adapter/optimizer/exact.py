"""Exact allocation: the cheapest replica mix for every model at once, as a mixed-integer linear program.

For each request r (a model, or one P/D role of it) that needs a change, with variants v of known capacity:

    minimise    Σ_r Σ_v cost_v · n_v  +  P · Σ_r u_r
    subject to  Σ_v cap_v · n_v + u_r >= D_r                     (capacity covers demand; u_r = unmet, >= 0)
                Σ_{v in pool a} gpus_v · n_v <= free_a + Σ_{v in pool a} gpus_v · current_v   (limiter on)
                Σ_v n_v >= 1          if Σ_v current_v >= 1       (the last serving variant keeps one)
                min_v <= n_v <= max_v,  n_v integer

where D_r = Σ_v cap_v · current_v + required_r (scale-up) or − spare_r (scale-down), and the penalty
P = 1 + 1000 · max_v(cost_v / cap_v) makes any unmet unit dearer than any capacity. A unit, not a replica: a
fraction of a unit left unmet can cost less than the replica that would cover it (found by hypothesis: D short by
0.34 tokens of a 400-token, $15 replica; 0.34 · P = $13 < $15, so the program left 0.34 unmet where greedy met
all). So u_r is held at 0 where the variants' maxima can cover D_r and that is sound (`_solve_component`), and
the penalty prices only what cannot be covered. Where the pools cannot cover every request, the same trade remains
(found by hypothesis: one free L4 GPU, the program gave it to a $1 replica meeting 299.8 tokens rather than a $10
one meeting 300 of another model's need: 0.2 tokens more unmet for $9 less); so the caller compares the program's
unmet total with the greedy path's and keeps the greedy allocation when it leaves less unmet
(`allocate._allocate_capacity`): the exact mode never leaves more demand unmet than the greedy one.

Worked example: D = 10,000 tokens, A (cost 5, 2,000 tokens) and B (cost 15, 8,000 tokens), nothing running:
greedy buys 2 B (30, 16,000 tokens); the MILP buys 1 B + 1 A (20, 10,000 tokens) — exactly covered, a third
cheaper.

"Keeps one" binds only a request that runs a replica now. A model at zero gets replicas through its unmet
penalty like any other demand, and is woken by scale-from-zero (enforcer) otherwise; as a hard constraint it
made the program take the only free-able GPU from another model's running replica (found by hypothesis:
model A at zero needing 201 tokens, model B short by 202 on a full L4 pool; B gave up a 1,000-token replica
so A could have one, leaving 1,202 unmet where greedy leaves 403).

The allocation step hands each request over one way, as the greedy path moves (`allocate._one_way`): a
scale-up as the additions alone, a scale-down bounded at the current counts. Re-solved from scratch each cycle,
the program had swapped variants as the demand moved, and every replica it removed left at once while its
replacement took minutes to start (9–54 % dearer than the greedy path on the benchmarks in closed loop); see
docs/configuration.md (`optimizer: exact`). Solved with scipy.optimize.milp (HiGHS); a solver failure returns None
and the caller falls back to the greedy allocation.

Deterministic: the solver's work is bounded by a number of branch-and-bound nodes per program
(`MIP_NODE_LIMIT`), never by wall time, so the same input gives the same allocation on any machine and a
recorded cycle replays bit for bit (with a time limit, a slower or busier machine explored fewer nodes and could
keep a different incumbent). HiGHS itself is deterministic (fixed random seed, no time-dependent choices). When
the limit is reached, the best incumbent is used (feasible, within the bound's gap) and the decision says so.
The limit bounds work, not time: one program's time grows with its size, mostly HiGHS's root node (the
former 1 s time budget cut that root short on a busy machine and kept a different incumbent on a faster one).
`solve` keeps the programs small and their root nodes conclusive (issue 22): a program per set of requests
sharing a constrained pool; within it the pool rows only when the GPUs do not suffice (see `solve`); and in a
program with pool rows, rounding (MIR) cuts on every cover row (`rounding_cuts`). Without the cuts, that
program's LP relaxation bought fractional replicas covering each demand exactly, its bound ignored every
request's remainder, and HiGHS stopped at the node limit far from proving its incumbent. The cuts are valid
inequalities (no integer allocation violates them), so the optimum is the same, only proven sooner. They close
the gap where each request has one variant per pool row, not where requests mix variants across pools: a
two-variant request's cuts are weaker than its integer hull and add up to two rows each, so 500 two-variant
models on two over-full pools (1 or 2 GPUs per replica) stayed unproven at the node limit, 1.0–1.5 s without
the cuts and 2.9–4.6 s with them (the root node alone 0.6–0.7 s without, 2.3–3.0 s with 955 cut rows).

So a component of `PRICED_MIN_REQUESTS` requests or more is solved by price (`_solve_component_priced`): each
request's allocations that can be optimal are enumerated (`_choices_of`: a few to a few dozen, none that
over-covers); the program without pool rows is then one argmin per request (no solver call), and the one with
them a choice program whose LP relaxation is the Lagrangian dual of the pool rows (each request's integer
problem solved under GPU prices λ_a); a vertex of that LP splits at most one request per pool row, and those
few are chosen exactly in what the others leave (`_solve_priced`; the LP value is the proof). Those 500
models: proven optimal (gap 0) in 0.09–0.13 s, with the compact program's best objective or better. When the
rounded allocation is not within the gap of the LP bound, the compact program runs too and the better is kept
(no worse than before, at the LP's cost more). Components of fewer requests (the generated fleets of `make
bench`: 2–8) and boxes too large to enumerate keep the compact program with its cuts, proven within 15 nodes
there. Open: requests of 3–4 variants with wide boxes. 284 requests of the generated fleets' shape (1–4
variants, three over-full pools) exceed `CHOICES_PER_REQUEST_MAX` and stay compact, 2.5 s unproven; with a
box limit of 20,000 they enumerate to 50,000 choices whose LP bound is within 0.005 % of the optimum, but
rounding its three split requests lands 0.5 % above it, so the compact program decides anyway (2.8 s).

At 1,000 VAs (tests/bench_pipeline.py, measured alternately with the compact program with cuts, 4e45dde, and
without them, 3d96069): 820 requests of one variant each, in two components of 410, one per pool, decide in
~0.195–0.21 s when the pools have room (0.006 s of it the solver, was 0.013) and ~0.21–0.23 s when every pool
is over-full (0.024 s of it the two priced programs, proven; with the cuts 0.26–0.27 s, 0.066 s; before them
1.1–1.9 s, unproven, leaving 0.15 M of 25.7 M tokens more unmet). 500 models of two variants sharing both
over-full pools (`-mixed`): ~0.21–0.23 s (one run of nine 0.37 s on the shared machine; 0.05–0.07 s of it the
priced program, proven optimal), with the cuts 1.8–2.8 s and before them 0.84–1.2 s, both unproven; the greedy
limiter's decide is ~0.14 s there, at 7 % less cost and 6x the unmet demand. The generated fleets of `make
bench` kept their cost through the decomposition, the cuts and the pricing (exact/greedy 0.747 in the median
fleet); most of that was removing running replicas while adding others, which the one-way bounds now forbid: the
median is 1.00 (cheaper in 14 of the 35 fleets that both cover, never dearer; covering more demand in 41 of 100).

scipy.optimize and scipy.sparse are imported in the three functions that solve, not with this module: importing
them adds ~26 MB to the resident set of every process (`wva-adapter serve` 136 → 109 MB after its imports),
which only a configuration with `optimizer: exact` uses (docs/benchmarks/scale.md, item 36; a test keeps `serve`'s
imports free of them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

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

    Decomposed (issue 22): requests that share no constrained GPU pool are independent, so each connected
    component is its own program. Within a component the program is first solved without its pool rows: then every
    request stands alone, and all of them are one block-diagonal program (one solver call, not one per request:
    a call costs ~8 ms). If that allocation fits every pool, it is also the optimum with the pool rows (the
    program without them is a relaxation of the one with them; a relaxation's optimum that is feasible for the
    original is optimal for it), and the second program is never built. Only a component whose relaxed optimum
    overruns a pool is solved again with its pool rows, and with the rounding cuts that let HiGHS prove that
    joint program at its root node where each request has one variant (`rounding_cuts`). A component of
    `PRICED_MIN_REQUESTS` requests or more takes the same two steps by price instead (`_solve_component_priced`:
    the relaxation is one argmin per request, the joint program a choice program priced by its LP). So the exact
    mode costs about one block-diagonal program while the GPUs suffice, and the joint program of the requests
    sharing the pools when they do not. Each program is bounded by `node_limit` branch-and-bound nodes."""
    out: dict[tuple[str, ...], dict[str, int]] = {}
    optimal = True
    components = _components(requests, gpus_free) if gpus_free is not None else [list(requests)]
    for component in components:
        choices = None
        if gpus_free is not None and len(component) >= PRICED_MIN_REQUESTS:
            choices = _all_choices(component, gpus_free)
        if choices is not None and gpus_free is not None:
            solved = _solve_component_priced(component, choices, gpus_free=gpus_free, node_limit=node_limit)
        else:
            solved = _solve_component(component, gpus_free=None, node_limit=node_limit)
            if gpus_free is not None and not (
                solved is not None and solved[1] and _fits(component, solved[0], gpus_free)
            ):
                solved = _solve_component(component, gpus_free=gpus_free, node_limit=node_limit)
        if solved is None:
            return None
        targets, proven = solved
        out.update(targets)
        optimal = optimal and proven
    return Solution(out, optimal)


def _fits(
    requests: Sequence[ExactRequest], targets: Mapping[tuple[str, ...], Mapping[str, int]], gpus_free: Mapping[str, int]
) -> bool:
    """Whether `targets` satisfy every pool row of `_solve_component` (GPUs added <= free, per pool)."""
    added: dict[str, int] = {}
    for request in requests:
        for v in request.variants:
            if v.per_replica_capacity > 0 and v.accelerator in gpus_free:
                change = (targets[request.key][v.name] - v.current_replicas) * max(1, v.gpus_per_replica)
                added[v.accelerator] = added.get(v.accelerator, 0) + change
    return all(added_gpus <= gpus_free[pool] for pool, added_gpus in added.items())


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
    """The component's program with coverable demand held covered (u_r = 0) where that is sound, else with every
    u_r priced (module docstring: a fraction of a unit unmet must not be cheaper than the replica that covers it).

    Without pool rows the requests are independent, so each coverable one is held covered. With pool rows,
    holding one request covered could take the GPUs that would cut another's shortfall by more; so the requests
    are held covered only when all of them can be (then no unmet is the least there is, and the program finds
    its cheapest cover), and priced when the pools make that infeasible."""
    if gpus_free is None:
        return _solve_program(requests, gpus_free=None, node_limit=node_limit, cover=True)
    if all(_coverable(request) for request in requests):
        solved = _solve_program(requests, gpus_free=gpus_free, node_limit=node_limit, cover=True)
        if solved is not None:
            return solved
    return _solve_program(requests, gpus_free=gpus_free, node_limit=node_limit, cover=False)


def _coverable(request: ExactRequest) -> bool:
    """Whether the request's variants at their maxima supply its demand (variants of unknown capacity add none)."""
    reachable = sum(v.per_replica_capacity * v.max_replicas for v in request.variants if v.per_replica_capacity > 0)
    return reachable >= request.demand


def _solve_program(
    requests: Sequence[ExactRequest], *, gpus_free: Mapping[str, int] | None, node_limit: int, cover: bool
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
    # The constraint matrix, sparse (rows x columns would be 820 x 2,460 dense at 1,000 VAs, mostly zeros):
    # entries as (row, column, value), built in one pass over the columns.
    entries: list[tuple[int, int, float]] = []
    lower: list[float] = []
    upper: list[float] = []
    unmet_max: list[float] = []  # 0 where the variants' maxima can cover the demand (cover=True)
    by_request: dict[int, list[int]] = {}
    for j, (owner, _) in enumerate(columns):
        by_request.setdefault(owner, []).append(j)
    for r_index, request in enumerate(requests):
        own = by_request.get(r_index, [])
        cover_row = len(lower)
        entries.extend((cover_row, j, columns[j][1].per_replica_capacity) for j in own)
        entries.append((cover_row, n_x + r_index, 1.0))
        lower.append(request.demand)
        upper.append(math.inf)
        unmet_max.append(0.0 if cover and _coverable(request) else math.inf)
        if gpus_free is not None:  # the rounding cuts (`rounding_cuts`): only the pool rows make them pay
            own_variants = [columns[j][1] for j in own]
            for coefficients, bound in rounding_cuts(own_variants, request.demand):
                cut_row = len(lower)
                entries.extend((cut_row, j, a) for j, a in zip(own, coefficients, strict=True) if a != 0)
                entries.append((cut_row, n_x + r_index, 1.0))
                lower.append(bound)
                upper.append(math.inf)
        max_total = sum(columns[j][1].max_replicas for j in own)
        serving = sum(columns[j][1].current_replicas for j in own)
        if request.demand > 0 and max_total >= 1 and serving >= 1:
            serve_row = len(lower)
            entries.extend((serve_row, j, 1.0) for j in own)
            lower.append(1)
            upper.append(math.inf)
    if gpus_free is not None:
        _add_pool_rows(columns, gpus_free, entries, lower, upper)
    row_index, column_index, values = zip(*entries, strict=True)
    from scipy.optimize import Bounds, LinearConstraint, milp  # imported where solved (module docstring)
    from scipy.sparse import coo_array

    matrix = coo_array((values, (row_index, column_index)), shape=(len(lower), n_x + n_u))
    lo = np.array([min(v.min_replicas, v.max_replicas) for _, v in columns] + [0] * n_u, dtype=float)
    hi = np.array([v.max_replicas for _, v in columns] + unmet_max, dtype=float)
    integrality = np.concatenate([np.ones(n_x), np.zeros(n_u)])
    result = milp(
        c,
        constraints=LinearConstraint(matrix, np.array(lower), np.array(upper)),
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


def _add_pool_rows(
    columns: Sequence[tuple[int, VariantSupply]],
    gpus_free: Mapping[str, int],
    entries: list[tuple[int, int, float]],
    lower: list[float],
    upper: list[float],
) -> None:
    """One row per constrained pool, appended: Σ_{v in pool} gpus_v · n_v <= free + Σ_{v in pool} gpus_v · current_v."""
    for pool in sorted({v.accelerator for _, v in columns if v.accelerator in gpus_free}):
        pool_row = len(lower)
        held = 0
        for j, (_, v) in enumerate(columns):
            if v.accelerator == pool:
                entries.append((pool_row, j, float(max(1, v.gpus_per_replica))))
                held += v.current_replicas * max(1, v.gpus_per_replica)
        lower.append(-math.inf)
        upper.append(gpus_free[pool] + held)


CUT_MARGIN = 1e-9
"""A cut's bound is lowered by this fraction of its magnitude (plus as much absolute) so that float rounding in
its coefficients can never cut off an integer point that lies exactly on it."""


def rounding_cuts(variants: Sequence[VariantSupply], demand: float) -> list[tuple[list[float], float]]:
    """Valid inequalities for one request's cover row that hold at every integer replica count: for each distinct
    variant capacity δ, the mixed-integer rounding (MIR) cut of the row divided by δ. Each is (a_v per variant of
    `variants`, in order, and a bound b) meaning Σ_v a_v·n_v + u >= b, u the request's unmet.

    Why: with the pool rows, the program's LP relaxation buys fractional replicas that cover each request's demand
    exactly, so its bound ignores every request's remainder (the part of its last replica it does not need), and
    at 1,000 VAs HiGHS ran out of nodes 25 % away from its incumbent (issue 22: 0.9–1.3 s, unproven). The cuts
    price that remainder in the LP, whose bound is then the integer optimum's or close to it, and the root node
    proves it. Valid inequalities never remove an integer-feasible allocation, so the optimum is unchanged.

    Derivation (Marchand & Wolsey's MIR). With y_v = n_v − lo_v >= 0 the cover row is Σ_v cap_v·y_v + u >= b'
    with b' = D − Σ_v cap_v·lo_v (b' <= 0: the row holds at the lower bounds, no cut). Divide by δ: α_v =
    cap_v/δ, β = b'/δ, f = β − ⌊β⌋ (f = 0: an exact multiple, the cut adds nothing). The MIR inequality is

        Σ_v (⌊α_v⌋ + min(f_v, f)/f)·y_v + u/(δ·f) >= ⌈β⌉,     f_v = α_v − ⌊α_v⌋

    and times δ·f:   Σ_v δ·(f·⌊α_v⌋ + min(f_v, f))·y_v + u >= δ·f·⌈β⌉.

    Worked example: one variant of 80,000 tokens, none required, D = 200,000: β = 2.5, f = 0.5, δ·f = 40,000 (the
    remainder). Cut: 40,000·n + u >= 120,000. At n = 2 the cover row allows u = 40,000 and so does the cut; at
    n = 2.5 the row allows u = 0 but the cut demands u >= 20,000: half a replica no longer covers the remainder
    for free. At n = 3 both give u >= 0. Two variants (δ = 80,000; the other of 30,000 tokens: α = 0.375,
    f_v = 0.375 < f): 40,000·n₁ + 30,000·n₂ + u >= 120,000."""
    lows = [min(v.min_replicas, v.max_replicas) for v in variants]
    rest = demand - sum(v.per_replica_capacity * lo for v, lo in zip(variants, lows, strict=True))
    cuts: list[tuple[list[float], float]] = []
    if rest <= 0:
        return cuts
    for delta in sorted({v.per_replica_capacity for v in variants}):
        beta = rest / delta
        f = beta - math.floor(beta)
        if f < CUT_MARGIN or f > 1 - CUT_MARGIN:
            continue
        coefficients = []
        for v in variants:
            alpha = v.per_replica_capacity / delta
            coefficients.append(delta * (f * math.floor(alpha) + min(alpha - math.floor(alpha), f)))
        bound = delta * f * math.ceil(beta) + sum(a * lo for a, lo in zip(coefficients, lows, strict=True))
        cuts.append((coefficients, bound - CUT_MARGIN * (abs(bound) + 1)))
    return cuts


PRICED_MIN_REQUESTS = 64
"""A component with pool rows and at least this many requests is solved by price (`_solve_component_priced`); a
smaller one (the generated fleets of `make bench`: 2–8 requests) by the compact program, proven within 15 nodes."""
CHOICES_MAX = 200_000
"""Candidate allocations per component at most (`_all_choices`); above it, the compact program with its cuts."""
CHOICES_PER_REQUEST_MAX = 4_096
"""Candidate allocations per request at most: its box of replica counts, enumerated, must stay small."""
PADDED_POINTS_MAX = 1_000_000
"""Box points enumerated at once (`_choices_of`: requests x points of their shared box), bounding its memory
(~100 bytes a point across its arrays); a larger group is enumerated in halves."""


@dataclass(frozen=True, slots=True)
class _Choices:
    """Every request's candidate allocations, one per row, grouped by request (`owner` nondecreasing): the replica
    counts of the owner's priced variants (in its order; zero-padded to the widest), the unmet demand and the
    objective value cost + P·unmet of each, and the GPUs each holds per pool of the component."""

    owner: np.ndarray
    counts: np.ndarray
    unmet: np.ndarray
    value: np.ndarray
    gpus: np.ndarray
    capacity_gpus: np.ndarray
    """Per pool: the right-hand side of its row, free + held."""
    n_requests: int

    def subset(self, keep: np.ndarray) -> _Choices:
        return _Choices(
            self.owner[keep],
            self.counts[keep],
            self.unmet[keep],
            self.value[keep],
            self.gpus[keep],
            self.capacity_gpus,
            self.n_requests,
        )

    def starts(self) -> np.ndarray:
        """Per request, the index of its first row (the next request's when it has none)."""
        return np.searchsorted(self.owner, np.arange(self.n_requests))

    def sizes(self) -> np.ndarray:
        return np.bincount(self.owner, minlength=self.n_requests)


def _all_choices(requests: Sequence[ExactRequest], gpus_free: Mapping[str, int]) -> _Choices | None:
    """Every request's candidate allocations (`_choices_of`), or None when one box or their total is too large to
    enumerate (`CHOICES_PER_REQUEST_MAX`, `CHOICES_MAX`). Requests with as many priced variants are enumerated
    together, in one padded box (numpy, not a loop per request: at 1,000 VAs the loop cost ~40 ms)."""
    priced = [v for r in requests for v in r.variants if v.per_replica_capacity > 0]
    if not priced:
        return None
    penalty = 1 + 1000 * max(v.cost / v.per_replica_capacity for v in priced)
    pools = sorted({v.accelerator for v in priced if v.accelerator in gpus_free})
    capacity = np.array(
        [
            gpus_free[pool]
            + sum(v.current_replicas * max(1, v.gpus_per_replica) for v in priced if v.accelerator == pool)
            for pool in pools
        ],
        dtype=float,
    )
    by_width: dict[int, list[int]] = {}
    for r_index, request in enumerate(requests):
        by_width.setdefault(sum(1 for v in request.variants if v.per_replica_capacity > 0), []).append(r_index)
    parts: list[_Choices] = []
    for width in sorted(by_width):
        group = [requests[i] for i in by_width[width]]
        part = _choices_of(group, pools, capacity, penalty=penalty)
        if part is None:
            return None
        parts.append(replace(part, owner=np.array(by_width[width], dtype=np.int64)[part.owner]))
    owner = np.concatenate([p.owner for p in parts])
    if len(owner) > CHOICES_MAX:
        return None
    width_max = max(p.counts.shape[1] for p in parts)
    counts = np.concatenate([np.pad(p.counts, ((0, 0), (0, width_max - p.counts.shape[1]))) for p in parts])
    order = np.argsort(owner, kind="stable")
    return _Choices(
        owner[order],
        counts[order],
        np.concatenate([p.unmet for p in parts])[order],
        np.concatenate([p.value for p in parts])[order],
        np.concatenate([p.gpus for p in parts])[order],
        capacity,
        len(requests),
    )


def _choices_of(
    requests: Sequence[ExactRequest], pools: Sequence[str], capacity: np.ndarray, *, penalty: float
) -> _Choices | None:
    """The allocations that can be optimal of requests with as many priced variants each, enumerated: every replica
    count n_v in [lo_v, hi_v] except those that over-cover (one replica fewer of some variant would still cover
    D_r and keep one serving: it costs no less and holds no fewer GPUs, so it is never needed), each with its
    value cost + P·max(0, D_r − supply). None when a request's box exceeds `CHOICES_PER_REQUEST_MAX`.

    Why the box stays small: n_v > lo_v + ⌈(D_r − Σ_w cap_w·lo_w)/cap_v⌉ over-covers by v alone, so hi_v is capped
    there (+1 against float rounding). Worked example: D = 200,000, one variant of 80,000 tokens, lo = 1, max =
    10: n in [1, 1 + 2 + 1 = 4]; n = 4 over-covers (3 replicas supply 240,000), so the choices are n = 1, 2, 3
    with unmet 120,000, 40,000, 0. The requests share one box, as wide on each axis as the widest of them;
    counts outside a request's own box are dropped."""
    variants = [tuple(v for v in r.variants if v.per_replica_capacity > 0) for r in requests]
    width = len(variants[0])
    demand = np.array([r.demand for r in requests], dtype=float)
    lows = np.array([[min(v.min_replicas, v.max_replicas) for v in vs] for vs in variants], dtype=np.int64)
    lows = lows.reshape(len(requests), width)
    cap = np.array([[v.per_replica_capacity for v in vs] for vs in variants], dtype=float).reshape(lows.shape)
    cost = np.array([[v.cost for v in vs] for vs in variants], dtype=float).reshape(lows.shape)
    maxima = np.array([[v.max_replicas for v in vs] for vs in variants], dtype=np.int64).reshape(lows.shape)
    keep_one = np.array(
        [
            r.demand > 0 and sum(v.max_replicas for v in vs) >= 1 and sum(v.current_replicas for v in vs) >= 1
            for r, vs in zip(requests, variants, strict=True)
        ]
    )
    rest = np.maximum(0.0, demand - (cap * lows).sum(axis=1))
    # replicas to cover the rest by one variant alone (+1); clipped so that an absurd ratio cannot overflow int64
    need = (
        np.minimum(np.ceil(rest[:, None] / np.where(cap > 0, cap, 1.0)), CHOICES_PER_REQUEST_MAX).astype(np.int64) + 1
    )
    highs = np.minimum(maxima, lows + np.maximum(1, need))
    shape = highs - lows + 1
    if width and np.any(np.prod(shape, axis=1) > CHOICES_PER_REQUEST_MAX):
        return None
    box = shape.max(axis=0) if width else np.zeros(0, dtype=np.int64)
    if len(requests) > 1 and len(requests) * int(np.prod(box)) > PADDED_POINTS_MAX:
        half = len(requests) // 2  # the padded box would be too large in memory: enumerate each half apart
        first = _choices_of(requests[:half], pools, capacity, penalty=penalty)
        second = _choices_of(requests[half:], pools, capacity, penalty=penalty)
        if first is None or second is None:
            return None
        return _Choices(
            np.concatenate([first.owner, second.owner + half]),
            np.concatenate([first.counts, second.counts]),
            np.concatenate([first.unmet, second.unmet]),
            np.concatenate([first.value, second.value]),
            np.concatenate([first.gpus, second.gpus]),
            capacity,
            len(requests),
        )
    offsets = np.indices(tuple(int(b) for b in box)).reshape(width, -1).T if width else np.zeros((1, 0), dtype=np.int64)
    counts = lows[:, None, :] + offsets[None, :, :]  # (requests, box points, variants)
    inside = np.all(counts <= highs[:, None, :], axis=2)
    supplied = (counts * cap[:, None, :]).sum(axis=2)
    replicas = counts.sum(axis=2)
    serves = (replicas >= 1) | ~keep_one[:, None]
    one_fewer_serves = (replicas > 1) | ~keep_one[:, None]
    keep = inside & serves
    for k in range(width):
        over = (counts[:, :, k] > lows[:, None, k]) & (supplied - cap[:, None, k] >= demand[:, None])
        keep &= ~(over & one_fewer_serves)
    owner, point = np.nonzero(keep)
    kept = counts[owner, point]
    unmet = np.maximum(0.0, demand[owner] - supplied[owner, point])
    value = (kept * cost[owner]).sum(axis=1) + penalty * unmet
    gpus = np.zeros((len(owner), len(pools)))
    for k in range(width):
        pool_of = np.array([pools.index(vs[k].accelerator) if vs[k].accelerator in pools else -1 for vs in variants])
        per_replica = np.array([max(1, vs[k].gpus_per_replica) for vs in variants], dtype=float)
        rows = pool_of[owner] >= 0
        np.add.at(gpus, (np.flatnonzero(rows), pool_of[owner][rows]), kept[rows, k] * per_replica[owner][rows])
    return _Choices(owner, kept, unmet, value, gpus, capacity, len(requests))


def _solve_component_priced(
    requests: Sequence[ExactRequest], choices: _Choices, *, gpus_free: Mapping[str, int], node_limit: int
) -> tuple[dict[tuple[str, ...], dict[str, int]], bool] | None:
    """`_solve_component`'s steps on the enumerated allocations: first the program without pool rows, which is
    now one choice per request, the cheapest (coverable requests held covered; the first of equals, so the same
    input gives the same choice), with no solver call; kept when it fits the pools (a relaxation's optimum that
    is feasible is optimal). Else the choice program with the pool rows (`_solve_priced`), every request held
    covered if all can be and that is feasible, else every unmet unit priced."""
    coverable = np.array([_coverable(r) for r in requests], dtype=bool)
    alone = choices.subset(~coverable[choices.owner] | (choices.unmet <= 0))
    if np.all(alone.sizes() > 0):
        by_value = np.lexsort((np.arange(len(alone.value)), alone.value, alone.owner))
        best = by_value[np.unique(alone.owner[by_value], return_index=True)[1]]
        if np.all(alone.gpus[best].sum(axis=0) <= alone.capacity_gpus):
            return _targets(requests, alone, best), True
    if coverable.all():
        solved = _solve_priced(
            requests,
            choices.subset(choices.unmet <= 0),
            node_limit=node_limit,
            fallback=lambda: _solve_program(requests, gpus_free=gpus_free, node_limit=node_limit, cover=True),
        )
        if solved is not None:
            return solved
    return _solve_priced(
        requests,
        choices,
        node_limit=node_limit,
        fallback=lambda: _solve_program(requests, gpus_free=gpus_free, node_limit=node_limit, cover=False),
    )


def _solve_priced(
    requests: Sequence[ExactRequest],
    choices: _Choices,
    *,
    node_limit: int,
    fallback: Callable[[], tuple[dict[tuple[str, ...], dict[str, int]], bool] | None] | None = None,
) -> tuple[dict[tuple[str, ...], dict[str, int]], bool] | None:
    """The program with pool rows, decomposed by price (Dantzig–Wolfe / Lagrangian): each request picks one of its
    candidate allocations (`_choices_of`), w_rk ∈ {0, 1}, and the pool rows couple them:

        minimise Σ_r Σ_k value_rk·w_rk   subject to   Σ_k w_rk = 1 (each r),   Σ_r Σ_k gpus_ark·w_rk <= C_a (each a)

    Why: its LP relaxation is as strong as pricing each pool. Its optimum equals max over prices λ_a >= 0 of
    Σ_r min_k (value_rk + Σ_a λ_a·gpus_ark) − Σ_a λ_a·C_a, the Lagrangian dual, in which each request's whole
    integer problem is solved (not its LP relaxation, as in the compact program, whose MIR cuts approximate this
    only where a request has one variant per pool row). And a vertex of that LP has at most as many requests
    split between allocations as there are pool rows (|rows| = requests + pools basic columns, each request needs
    one), so rounding costs at most a few requests' worth. So: solve the LP (HiGHS dual simplex, deterministic),
    keep every request it did not split, and choose the split ones' allocations exactly in the GPUs the others
    leave (a program of a few requests). The LP value L bounds the optimum from below, the allocation's value Z
    from above; Z − L <= `MIP_REL_GAP`·Z proves it as HiGHS would. Otherwise `fallback` (the compact program
    with its cuts, what the component got before) runs too, and the better allocation is kept, proven if the
    compact program proved it or the LP bound does. Not the whole choice program: on 284 requests of 1–4
    variants (50,000 choices) HiGHS took 14 s to prove it, where the LP bound was within 0.005 % of the optimum
    and rounding the three split requests 0.5 % above.

    Worked example: one A100 GPU free for two requests of one variant each (8 tokens a replica, $1, 1 GPU, none
    running): A needs D = 10, B needs D = 4; P = 1 + 1000·1/8 = 126. A's choices n = 0, 1, 2 are worth 1,260,
    1 + 2·126 = 253 and 2; B's n = 0, 1 are worth 504 and 1. A's first replica saves 1,007 for its GPU, its second
    251, B's one 503: the LP gives the GPU to A's first replica (its price λ is then between 503 and 1,007, where B
    does not bid), L = 253 + 504 = 757, no request is split, Z = L: proven at the root."""
    sizes = choices.sizes()
    if np.any(sizes == 0):
        return None  # a request with no allowed allocation: the program is infeasible
    starts = choices.starts()
    value, gpus, owner, capacity = choices.value, choices.gpus, choices.owner, choices.capacity_gpus
    if np.any(np.minimum.reduceat(gpus, starts, axis=0).sum(axis=0) > capacity):
        return None  # infeasible: a pool cannot hold even each request's smallest allocation in it
    n = len(value)
    from scipy.optimize import linprog  # imported where solved (module docstring)
    from scipy.sparse import coo_array

    one_each = coo_array((np.ones(n), (owner, np.arange(n))), shape=(choices.n_requests, n)).tocsr()
    relaxed = linprog(
        value,
        A_ub=coo_array(gpus.T) if len(capacity) else None,
        b_ub=capacity if len(capacity) else None,
        A_eq=one_each,
        b_eq=np.ones(choices.n_requests),
        bounds=(0, 1),
        method="highs-ds",
    )
    if relaxed.status == 2:  # infeasible: no allocation fits the pools
        return None
    chosen: np.ndarray | None = None
    bound = -math.inf
    if relaxed.status == 0:
        bound = float(relaxed.fun)
        weight = relaxed.x
        best_weight = np.maximum.reduceat(weight, starts)
        split = np.flatnonzero(best_weight < 1 - 1e-6)
        heaviest = np.flatnonzero(weight >= best_weight[owner])
        chosen = heaviest[np.unique(owner[heaviest], return_index=True)[1]]
        if len(split):
            chosen = _choose_split(split, chosen, choices, node_limit=node_limit)
    if chosen is not None and _within_gap(float(value[chosen].sum()), bound):
        return _targets(requests, choices, chosen), True
    compact = fallback() if fallback is not None else None
    if compact is not None:
        compact_value = _objective(requests, compact[0])
        if chosen is None or compact_value <= value[chosen].sum():
            return compact[0], compact[1] or _within_gap(compact_value, bound)
    if chosen is None:
        return None
    return _targets(requests, choices, chosen), False


def _within_gap(value: float, bound: float) -> bool:
    """Whether an allocation worth `value` is proven optimal by a lower bound, as HiGHS proves it (`MIP_REL_GAP`)."""
    return value - bound <= MIP_REL_GAP * abs(value)


def _objective(requests: Sequence[ExactRequest], targets: Mapping[tuple[str, ...], Mapping[str, int]]) -> float:
    """cost + P·unmet of an allocation, P as in the programs (`_solve_program`, `_all_choices`)."""
    priced = [v for r in requests for v in r.variants if v.per_replica_capacity > 0]
    penalty = 1 + 1000 * max(v.cost / v.per_replica_capacity for v in priced)
    total = 0.0
    for r in requests:
        own = [v for v in r.variants if v.per_replica_capacity > 0]
        supplied = sum(v.per_replica_capacity * targets[r.key][v.name] for v in own)
        total += sum(v.cost * targets[r.key][v.name] for v in own) + penalty * max(0.0, r.demand - supplied)
    return total


def _choose_split(split: np.ndarray, chosen: np.ndarray, choices: _Choices, *, node_limit: int) -> np.ndarray | None:
    """`chosen` with the split requests' allocations chosen exactly in what the others leave of each pool."""
    others = np.setdiff1d(np.arange(choices.n_requests), split)
    left = choices.capacity_gpus - choices.gpus[chosen[others]].sum(axis=0)
    index = np.flatnonzero(np.isin(choices.owner, split))
    sub = choices.subset(index)
    sub = replace(sub, owner=np.searchsorted(split, sub.owner), n_requests=len(split))
    picked = _pick(sub, left, node_limit=node_limit)
    if picked is None:
        return None
    out = chosen.copy()
    out[split] = index[picked[0]]
    return out


def _pick(choices: _Choices, capacity: np.ndarray, *, node_limit: int) -> tuple[np.ndarray, bool] | None:
    """The choice program (`_solve_priced`) as a MILP within `capacity`: the index of each request's allocation,
    and whether it is proven optimal."""
    from scipy.optimize import Bounds, LinearConstraint, milp  # imported where solved (module docstring)
    from scipy.sparse import coo_array

    n = len(choices.value)
    one_each = coo_array((np.ones(n), (choices.owner, np.arange(n))), shape=(choices.n_requests, n))
    rows = [LinearConstraint(one_each, 1, 1)]
    if len(capacity):
        rows.append(LinearConstraint(coo_array(choices.gpus.T), -math.inf, capacity))
    result = milp(
        choices.value,
        constraints=rows,
        integrality=np.ones(n),
        bounds=Bounds(0, 1),
        options={"node_limit": node_limit, "mip_rel_gap": MIP_REL_GAP},
    )
    if result.x is None:
        return None
    picked = np.flatnonzero(result.x > 0.5)
    return picked[np.argsort(choices.owner[picked], kind="stable")], result.status == 0


def _targets(
    requests: Sequence[ExactRequest], choices: _Choices, chosen: np.ndarray
) -> dict[tuple[str, ...], dict[str, int]]:
    """Targets per request from one chosen row per request (`chosen[r]`); variants of unknown capacity keep theirs."""
    out = {r.key: {v.name: v.current_replicas for v in r.variants} for r in requests}
    rows = choices.counts[chosen].tolist()
    for request, row in zip(requests, rows, strict=True):
        priced = [v for v in request.variants if v.per_replica_capacity > 0]
        for v, count in zip(priced, row, strict=False):
            out[request.key][v.name] = int(count)
    return out
