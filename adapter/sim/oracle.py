"""The clairvoyant oracle of DESIGN §3.3: the cheapest replica schedule that covers the demand at the SLO.

It knows the whole workload in advance. For every bin of `interval_s` (the engine interval) it knows the
arrival rate D_b and the mean request size (I_b, O_b); every variant v has a capacity at the SLO
cap_vb = λ*_v(I_b, O_b) — the largest arrival rate one replica sustains with mean TTFT and ITL within the
targets, from the queueing model (`adapter.analyzers.queueing.model`, the same α, β, γ as the simulated
replica; `wva-adapter capacity` computes the same number). A replica needed in bin b is started exactly its
median startup time before b and is paid from then on:

    minimise   Σ_v cost_v/3600 · ( Σ_b Δ·n_vb  +  median_v · Σ_b s_vb )
    subject to Σ_v cap_vb · n_vb ≥ D_b                 (every bin covered)
               s_vb ≥ n_vb − n_v,b−1,  s_vb ≥ 0        (replicas started at b; n_v,−1 = initial replicas)
               min_v ≤ n_vb ≤ max_v,  n_vb integer

solved exactly as one mixed-integer program over all bins (scipy's HiGHS). Optimising all bins at once
matters: the cheapest mix of each bin on its own, plus startups, is *not* a lower bound (keeping a replica
through a dip shorter than its startup, or a steadier mix, can be cheaper), and the oracle must be below every
schedule that covers the demand (tests/sim/test_oracle.py checks it against random schedules).

Conventions, stated:

* Capacity uses an effective batch N = min(max_num_seqs, ⌊kv_cache_tokens / (I + O/2)⌋) (a request holds
  I + O/2 KV tokens on average over its life), so KV-bound workloads (Mooncake's 12k-token prompts) are not
  credited with 256 concurrent requests. A variant whose SLO is unreachable at any rate has capacity 0.
* Bins whose demand exceeds every variant at max_replicas are *infeasible*: they are covered as far as
  possible (the demand is clipped to the largest capacity), and counted in `infeasible_bins`.
* The fleet's initial replicas are ready at the start (as in the simulated fleet); any replica beyond them is
  started, and paid, its median startup before the bin that needs it — for the first bins that lies before
  the start, the price of having it ready in time.
* Example: one variant at 2.0/h, 1 initial replica, median startup 120 s, Δ = 30 s, capacity 5 req/s, demand
  4, 12, 4, 12 req/s ⇒ n = 1, 3, 3, 3 (keeping two replicas through the 30 s dip is cheaper than restarting
  them for 120 s): cost = 2/3600·(30·10 + 120·2) = 0.3. Demand 4, 12, 4 alone ⇒ n = 1, 3, 1, cost 0.2167.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array, hstack, vstack

from adapter.analyzers.queueing.model import (
    BeyondModel,
    InvalidInput,
    QueueModel,
    RequestSize,
    ServiceParams,
)
from adapter.domain.errors import ModelError
from adapter.sim.replica import PerfParams
from adapter.sim.workload import Request, RequestTable

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

MILP_TIME_LIMIT_S = 60.0
"""HiGHS' time limit; a plan cut short reports the solver's lower bound as its cost (still a lower bound)."""
MIN_DEMAND_RPS = 1e-6
"""Below one request in 11 days a bin's demand is read as none (keeps the program's coefficients sane)."""
DEFAULT_INPUT_TOKENS = 512.0
DEFAULT_OUTPUT_TOKENS = 128.0
"""Request size of an empty bin (its demand is 0, so only the minimum replicas are paid; size is moot)."""


@dataclass(frozen=True, slots=True)
class OracleVariant:
    name: str
    cost_per_hour: float
    min_replicas: int
    max_replicas: int
    startup_median_s: float
    perf: PerfParams
    initial_replicas: int = 0


@dataclass(frozen=True, slots=True)
class Demand:
    """Per bin: arrival rate (req/s) and mean input/output tokens of the requests that arrived in it."""

    interval_s: float
    rate_rps: FloatArray
    input_tokens: FloatArray
    output_tokens: FloatArray

    @property
    def bins(self) -> int:
        return int(self.rate_rps.size)

    def scaled(self, headroom: float) -> Demand:
        """The same bins with every rate × `headroom` (the frontier search's knob: capacity bought ahead of
        the mean, for the tail). Example: 3 req/s × 1.25 = 3.75 req/s."""
        if not (headroom > 0 and math.isfinite(headroom)):
            raise ValueError(f"headroom must be a finite number > 0, got {headroom}")
        return Demand(self.interval_s, self.rate_rps * headroom, self.input_tokens, self.output_tokens)


@dataclass(frozen=True, slots=True)
class OraclePlan:
    replicas: IntArray
    """n_vb, shape (variants, bins)."""
    capacity_rps: FloatArray
    """cap_vb, shape (variants, bins)."""
    cost: float
    infeasible_bins: int
    optimal: bool
    """False when the solver stopped at its time limit (then `cost` is its proven lower bound)."""


def demand_bins(requests: Iterable[Request], *, duration_s: float, interval_s: float) -> Demand:
    """Bin the requests arriving in [0, duration_s) by `interval_s` (the last bin may be shorter: its rate
    is over its own length). Example: 90 requests in [0, 30) ⇒ rate 3 req/s."""
    if interval_s <= 0 or duration_s <= 0:
        raise ValueError("duration_s and interval_s must be > 0")
    if not isinstance(requests, RequestTable):
        requests = RequestTable.of(itertools.takewhile(lambda r: r.arrival_s < duration_s, requests))
    bins = max(1, math.ceil(duration_s / interval_s - 1e-9))
    inside = requests.arrival_s < duration_s
    index = np.minimum((requests.arrival_s[inside] // interval_s).astype(np.int64), bins - 1)
    count = np.bincount(index, minlength=bins).astype(np.float64)
    tokens_in = np.bincount(index, weights=requests.input_tokens[inside].astype(np.float64), minlength=bins)
    tokens_out = np.bincount(index, weights=requests.output_tokens[inside].astype(np.float64), minlength=bins)
    lengths = np.full(bins, interval_s)
    lengths[-1] = duration_s - interval_s * (bins - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_in = np.where(count > 0, tokens_in / count, DEFAULT_INPUT_TOKENS)
        mean_out = np.where(count > 0, np.maximum(tokens_out / count, 1.0), DEFAULT_OUTPUT_TOKENS)
    return Demand(
        interval_s, count / lengths, np.asarray(mean_in, dtype=np.float64), np.asarray(mean_out, dtype=np.float64)
    )


def effective_batch(perf: PerfParams, input_tokens: float, output_tokens: float) -> int:
    """min(max_num_seqs, ⌊kv_cache_tokens / (I + O/2)⌋), at least 1. Example: 440,000 KV tokens, I 12,000,
    O 340 ⇒ ⌊440000/12170⌋ = 36 (below max_num_seqs 256)."""
    by_kv = math.floor(perf.kv_cache_tokens / max(input_tokens + output_tokens / 2.0, 1.0))
    return max(1, min(perf.max_num_seqs, by_kv))


def capacity_rps(
    perf: PerfParams, input_tokens: float, output_tokens: float, *, ttft_ms: float, itl_ms: float
) -> float:
    """λ*: the largest arrival rate one replica sustains with mean TTFT ≤ ttft_ms and ITL ≤ itl_ms (0 when
    no rate does)."""
    try:
        model = QueueModel(
            ServiceParams(perf.alpha_ms, perf.beta_ms, perf.gamma_ms),
            RequestSize(input_tokens, max(output_tokens, 1.0)),
            max_batch=effective_batch(perf, input_tokens, output_tokens),
        )
        return float(model.max_rate(ttft_ms, itl_ms).rate_rps)
    except (BeyondModel, InvalidInput, ModelError):
        return 0.0


def capacities(variants: Sequence[OracleVariant], demand: Demand, *, ttft_ms: float, itl_ms: float) -> FloatArray:
    """cap_vb for every variant and bin (one queueing-model solve per distinct request size)."""
    out = np.zeros((len(variants), demand.bins))
    cache: dict[tuple[int, float, float], float] = {}
    for v, variant in enumerate(variants):
        for b in range(demand.bins):
            if demand.rate_rps[b] <= 0:
                continue  # no demand: capacity is irrelevant
            key = (v, round(float(demand.input_tokens[b]), 1), round(float(demand.output_tokens[b]), 1))
            if key not in cache:
                cache[key] = capacity_rps(variant.perf, key[1], key[2], ttft_ms=ttft_ms, itl_ms=itl_ms)
            out[v, b] = cache[key]
    return out


def schedule_cost(replicas: IntArray, variants: Sequence[OracleVariant], *, interval_s: float) -> float:
    """The oracle's accounting of any schedule n_vb: replica time plus one median startup per replica started
    (above the previous bin's count; before bin 0, the initial replicas). See the module docstring's example."""
    total = 0.0
    for v, variant in enumerate(variants):
        row = replicas[v].astype(np.float64)
        starts = float(np.maximum(np.diff(row, prepend=float(variant.initial_replicas)), 0.0).sum())
        total += variant.cost_per_hour / 3600.0 * (interval_s * row.sum() + variant.startup_median_s * starts)
    return float(total)


def covered_demand(capacity: FloatArray, demand: FloatArray, max_replicas: Sequence[int]) -> FloatArray:
    """What the oracle covers per bin: the demand, clipped to every variant at max_replicas (infeasible bins);
    a demand below `MIN_DEMAND_RPS` is none."""
    most = (capacity * np.asarray(max_replicas, dtype=np.float64)[:, None]).sum(axis=0)
    wanted = np.where(demand < MIN_DEMAND_RPS, 0.0, demand)
    return np.asarray(np.minimum(wanted, most), dtype=np.float64)


def covers(replicas: IntArray, capacity: FloatArray, demand: FloatArray, *, max_replicas: Sequence[int]) -> bool:
    """Whether a schedule covers every bin's (clipped) demand: the schedules the oracle is a lower bound of."""
    supplied = (capacity * replicas).sum(axis=0)
    return bool(np.all(supplied >= covered_demand(capacity, demand, max_replicas) * (1 - 1e-9) - 1e-12))


def plan(
    variants: Sequence[OracleVariant],
    demand: Demand,
    capacity: FloatArray,
    *,
    time_limit_s: float = MILP_TIME_LIMIT_S,
    ready_after_s: Sequence[float] | None = None,
) -> OraclePlan:
    """Solve the program of the module docstring; with `ready_after_s`, also break only after make (`_make_first`)."""
    n_var, n_bins = len(variants), demand.bins
    if capacity.shape != (n_var, n_bins):
        raise ValueError(f"capacity has shape {capacity.shape}, expected {(n_var, n_bins)}")
    lo = np.array([v.min_replicas for v in variants], dtype=np.float64)
    hi = np.array([v.max_replicas for v in variants], dtype=np.float64)
    target = covered_demand(capacity, demand.rate_rps, [v.max_replicas for v in variants])
    infeasible = int(np.count_nonzero(demand.rate_rps > target * (1 + 1e-9) + MIN_DEMAND_RPS))
    n_s = n_var * n_bins
    n_total = n_var * n_bins + n_s

    def n_idx(v: int, b: int) -> int:
        return v * n_bins + b

    def s_idx(v: int, b: int) -> int:
        return n_var * n_bins + v * n_bins + b

    objective = np.zeros(n_total)
    for v, variant in enumerate(variants):
        per_s = variant.cost_per_hour / 3600.0
        for b in range(n_bins):
            objective[n_idx(v, b)] = per_s * demand.interval_s
            objective[s_idx(v, b)] = per_s * variant.startup_median_s
    matrix, lower = _constraints(variants, capacity, target, index=(n_idx, s_idx))
    var_lo = np.concatenate([np.repeat(lo, n_bins), np.zeros(n_s)])
    var_hi = np.concatenate([np.repeat(hi, n_bins), np.repeat(hi, n_bins)])
    integrality = np.concatenate([np.ones(n_var * n_bins), np.zeros(n_s)])
    if ready_after_s is not None:
        extra, extra_lower, k_hi = _make_first(
            variants, capacity, target, ready_after_s, interval_s=demand.interval_s, n_idx=n_idx
        )
        if k_hi.size:
            matrix = vstack([hstack([matrix, coo_array((matrix.shape[0], k_hi.size))]), extra]).tocsr()
            lower = np.concatenate([lower, extra_lower])
            objective = np.concatenate([objective, np.zeros(k_hi.size)])
            var_lo = np.concatenate([var_lo, np.zeros(k_hi.size)])
            var_hi = np.concatenate([var_hi, k_hi])
            integrality = np.concatenate([integrality, np.zeros(k_hi.size)])
    constraints = LinearConstraint(matrix, lower, np.full(lower.size, np.inf))
    result = milp(
        objective,
        constraints=constraints,
        integrality=integrality,
        bounds=Bounds(var_lo, var_hi),
        options={"time_limit": time_limit_s, "mip_rel_gap": 0.0, "presolve": True},
    )
    if result.x is None:
        raise ModelError(f"the oracle's program has no solution: {result.message}")
    replicas = np.rint(result.x[: n_var * n_bins]).astype(np.int64).reshape(n_var, n_bins)
    optimal = bool(result.status == 0)
    cost = schedule_cost(replicas, variants, interval_s=demand.interval_s)
    if not optimal:
        bound = getattr(result, "mip_dual_bound", None)
        cost = float(bound) if bound is not None and math.isfinite(bound) else cost
    return OraclePlan(replicas, capacity, cost, infeasible, optimal)


def _make_first(
    variants: Sequence[OracleVariant],
    capacity: FloatArray,
    target: FloatArray,
    ready_after_s: Sequence[float],
    *,
    interval_s: float,
    n_idx: Callable[[int, int], int],
) -> tuple[Any, FloatArray, FloatArray]:
    """Rows that keep the replicas running at the start until their replacements can be ready: the schedule the
    frontier plays in the loop, where a replica started at t = 0 serves only after its startup.

    The bound may swap the fleet at bin 0 (it pays a replica's startup *before* the start to have it ready there):
    with an A100 running and a cheaper L40S at zero, it stops the A100 at t = 0, and played in the loop nothing
    serves until the L40S has started — minutes of misses that no headroom buys back. Variant v's replicas beyond
    its initial count serve only from `ready_after_s[v]` (the lead it is requested with in the loop), so in each
    early bin b the replicas already running must cover what they can:

        Σ_v cap_vb · k_vb ≥ min(D_b, Σ_v cap_vb · m_vb),   0 ≤ k_vb ≤ n_vb,   k_vb ≤ m_vb
        m_vb = initial_v while b·Δ < ready_after_s[v], else max_v

    (k_vb: the replicas of v serving in bin b). Example: A100 1 running (cap 10 req/s), L40S 0 (cap 5), demand
    0.3 req/s, ready_after 300 s, Δ 30 s: in bins 0–9 the L40S serves nothing, so 10·k_A100 ≥ 0.3 with
    k_A100 ≤ n_A100 keeps the A100 until bin 10; the L40S, needed from bin 10, is requested its lead earlier, at 0.
    Only constraints are added, so the cost is never below the bound's. `n_idx` maps (variant, bin) to the column
    of n_vb, as in `_constraints`; the k columns follow the program's n and s. Returns (rows over [n, s, k], their
    lower bounds, the upper bounds of the k columns)."""
    n_var, n_bins = capacity.shape
    early_bins = [min(n_bins, max(0, math.ceil(ready / interval_s - 1e-9))) for ready in ready_after_s]
    n_early = max(early_bins, default=0)
    width = 2 * n_var * n_bins
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lower: list[float] = []
    k_hi = np.zeros(n_var * n_early)

    def k_idx(v: int, b: int) -> int:
        return int(width + v * n_early + b)

    r = 0
    for b in range(n_early):
        most = [variants[v].initial_replicas if b < early_bins[v] else variants[v].max_replicas for v in range(n_var)]
        need = min(float(target[b]), float(sum(capacity[v, b] * most[v] for v in range(n_var))))
        for v in range(n_var):
            k_hi[k_idx(v, b) - width] = most[v]
            rows += [r, r]  # n_vb − k_vb ≥ 0
            cols += [n_idx(v, b), k_idx(v, b)]
            vals += [1.0, -1.0]
            lower.append(0.0)
            r += 1
        if need < MIN_DEMAND_RPS:
            continue
        for v in range(n_var):
            if capacity[v, b] > 0 and most[v] > 0:
                rows.append(r)
                cols.append(k_idx(v, b))
                vals.append(capacity[v, b] / need)
        lower.append(1.0 - 1e-9)
        r += 1
    matrix = coo_array((vals, (rows, cols)), shape=(r, width + n_var * n_early))
    return matrix, np.array(lower, dtype=np.float64), k_hi


def _constraints(
    variants: Sequence[OracleVariant],
    capacity: FloatArray,
    target: FloatArray,
    *,
    index: tuple[Callable[[int, int], int], Callable[[int, int], int]],
) -> tuple[Any, FloatArray]:
    """The program's rows (coverage per bin, starts per variant and bin) and their lower bounds; `index` maps
    (variant, bin) to the column of n_vb and of s_vb."""
    n_var, n_bins = capacity.shape
    n_idx, s_idx = index
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lower: list[float] = []
    r = 0
    for b in range(n_bins):  # coverage, divided by the demand: Σ_v (cap/target)·n ≥ 1 (HiGHS' feasibility
        if target[b] < MIN_DEMAND_RPS:  # tolerance is absolute, so a tiny demand would otherwise pass uncovered)
            continue
        for v in range(n_var):
            if capacity[v, b] > 0:
                rows.append(r)
                cols.append(n_idx(v, b))
                vals.append(capacity[v, b] / target[b])
        lower.append(1.0 - 1e-9)
        r += 1
    for v, variant in enumerate(variants):  # starts: s_vb − n_vb + n_v,b−1 ≥ 0, and s_v0 − n_v0 ≥ −initial
        rows += [r, r]
        cols += [s_idx(v, 0), n_idx(v, 0)]
        vals += [1.0, -1.0]
        lower.append(-float(variant.initial_replicas))
        r += 1
        for b in range(1, n_bins):
            rows += [r, r, r]
            cols += [s_idx(v, b), n_idx(v, b), n_idx(v, b - 1)]
            vals += [1.0, -1.0, 1.0]
            lower.append(0.0)
            r += 1
    matrix = coo_array((vals, (rows, cols)), shape=(r, 2 * n_var * n_bins)).tocsr()
    return matrix, np.array(lower, dtype=np.float64)


def oracle(
    requests: Iterable[Request],
    variants: Sequence[OracleVariant],
    *,
    duration_s: float,
    interval_s: float,
    ttft_ms: float,
    itl_ms: float,
) -> OraclePlan:
    """Bin the workload, compute capacities at the SLO, solve."""
    demand = demand_bins(requests, duration_s=duration_s, interval_s=interval_s)
    return plan(variants, demand, capacities(variants, demand, ttft_ms=ttft_ms, itl_ms=itl_ms))
