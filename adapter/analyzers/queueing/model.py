"""The state-dependent M/M/1/K model of one vLLM replica, as upstream WVA's `pkg/analyzer` solves it.

Inputs: the service parameters α (ms per iteration), β (ms per token of compute), γ (ms per token of KV-cache
access), the request size I (average input tokens, ≥ 0) and O (average output tokens, ≥ 1), the maximum batch
N (``max_batch``, vLLM's ``--max-num-seqs``) and the queue capacity Q (``max_queue``); K = N + Q.

Service model (research/wva-upstream.md §3.1), for a batch of n requests::

    δ              = β·(I+O)/(O+1) + γ·(I + O/2)          marginal work of one request per iteration
    IterationTime(n) = α + n·δ
    PrefillTime(n)   = IterationTime(n) + (β+γ)·I          (0 when I == 0)
    DecodeTime(n)    = IterationTime(n) + β + γ·(I + O/2)  time of one output token
    μ_n            = n / (PrefillTime(n) + O·DecodeTime(n))   requests/ms leaving a batch of n, n = 1..N
    RateRange      = [μ_1·ε, μ_N·(1−ε)] · 1000 req/s,  ε = 0.001

State-dependent M/M/1/K (§3.2): with arrival rate λ (per ms) the birth-death chain on 0..K has
``p_{n+1} = p_n · λ / μ_{min(n+1, N)}``, normalised to sum 1. Then::

    avgNumInServers = Σ_{i=1..N} i·p_i + N·(1 − Σ_{i=0..N} p_i)    (requests in the batch)
    L = Σ_{i=1..K} i·p_i        X = λ·(1 − p_K)       (mean in system; throughput of admitted requests)
    T = L/X     S = avgNumInServers/X     W = max(T − S, 0)     (response, service and queue-wait times)

Metrics at a rate (§3.3), with ``prefill = PrefillTime(avgNumInServers)`` at the fractional mean batch::

    ITL  = (S − prefill)/O
    TTFT = W + prefill + ITL               (one decode step is included, as upstream does)
    rho  = clamp(avgNumInServers/N, 0, 1)  throughput = X·1000 req/s

λ* (§3.4, `max_rate`): for each positive target, bisect λ over the rate range until the metric is within relative
tolerance 1e-6 of the target (at most 100 iterations, the bounds are tried first); a target below the metric at
the lowest rate is an error ("below the bounded region"), a target above the metric at the highest rate yields the
highest rate. λ* is the minimum over the targets; a target of 0 leaves that dimension unconstrained.

Worked example (asserted by tests/queueing/test_model.py): α = 20, β = 0.08, γ = 0.0002, I = 512, O = 128,
N = 256, Q = 100::

    δ = 0.08·640/129 + 0.0002·576 = 0.512099 ms
    μ_1   = 1/(61.5745 + 128·20.7073)     = 3.68717e-4 /ms
    μ_256 = 256/(192.160 + 128·151.293)   = 0.0130895 /ms
    RateRange = [0.000368717, 13.0764] req/s
    analyze(5 req/s):  TTFT = 102.512 ms, ITL = 31.0807 ms, rho = 0.0790969, avg batch = 20.2488, W = 0
    max_rate(TTFT 2000 ms, ITL 100 ms) → λ* = 11.9650 req/s; ITL binds (100.000 ms), TTFT = 240.972 ms,
        rho = 0.604811, throughput = 11.9650 req/s
    max_rate(TTFT 2000 ms, ITL 0)      → λ* = 12.9788 req/s (TTFT binds; W = 1674.62 ms)

Differences from upstream, on purpose:

* float64 throughout. Upstream computes the service model in float32 and only the probabilities in float64, so
  results can differ from upstream's by float32 rounding; they are not bit for bit the same.
* The probabilities are computed in log space — ``log p_n = n·log λ − Σ_{j<n} log μ_{min(j+1,N)}``, normalised by
  their largest value — instead of upstream's iterative "divide by MaxFloat64/K on overflow" rescaling. Both give
  the same distribution; log space cannot overflow.
* Only the N + 1 states 0..N are summed element by element. Above N every transition has the same rate μ_N, so the
  Q queue states form a geometric series with ratio r = λ/μ_N, summed in closed form (`_geometric_tail`): for
  y = ±ln r ≤ 0, Σ_{k<Q} e^(k·y) = expm1(Q·y)/expm1(y) and its mean index 1/expm1(−y) − Q/expm1(−Q·y), anchored
  at state N when r ≤ 1 and at state K when r > 1 so that no term exceeds the largest probability. Near r = 1
  (|Q·ln r| < 1, where the closed form would cancel digits) the tail is summed term by term. The EKF's queue of
  10·N states thus costs N + 1 elements instead of 11·N + 1: a solve is ~4× cheaper, and `analyze_rows` solves many
  (parameters, request, rate) rows in one vectorised pass, which the EKF's Jacobian and fit use. Worked example of
  the tail: N = 2, Q = 3, μ_2 = 1, λ = 0.5 ⇒ r = 0.5 and the tail weights relative to p_2 are 0.5, 0.25, 0.125:
  mass 0.875 = e^(−0.693)·expm1(−2.079)/expm1(−0.693) = 0.5·0.875/0.5, first moment Σ j·r^j = 0.5 + 0.5 + 0.375
  = 1.375. Results agree with the element-by-element sum to ~1e-14 relative (tests/queueing/test_model.py).
* Inputs are validated up front (α > 0, β ≥ 0, γ ≥ 0, all finite; see the classes), with messages that name the
  parameter, the value and the allowed range. Upstream's validity check (``1 − p_0`` below K) is always satisfied
  and is not reproduced.

A property of upstream's model kept as is: TTFT never falls as the rate rises, but ITL can. Prefill is taken at
the time-averaged batch avgNumInServers (idle time included, so below 1 at low load) while S is the mean time a
request spends in service. With max_batch = 1, S = 1/μ_1 at every rate, so ITL falls slightly as the rate rises.
With few output tokens the prefill term grows faster than S: ITL fell by up to 12 % with O ≈ 1 and max_batch 2
in random searches over 136,000 models. It never fell with O ≥ 3 and max_batch ≥ 2, there or in hypothesis runs.
Real chat and code traces average tens to hundreds of output tokens. tests/queueing/test_model.py pins all three
cases. Where ITL is not monotone, λ* for an ITL target comes from upstream's bisection, which assumes that it is.

Pure: numpy and the standard library only, no I/O.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from adapter.domain.errors import ModelError

EPSILON = 0.001
"""Fraction kept off both ends of the rate range (upstream's epsilon)."""
TOLERANCE = 1e-6
"""Relative tolerance of the λ* bisection."""
MAX_ITERATIONS = 100
"""Bisection iterations at most."""
DEFAULT_MAX_BATCH = 256
DEFAULT_MAX_QUEUE = 100
MAX_STATES = 1_000_000
"""Upper bound on max_batch and max_queue each (keeps one solve to a few MB)."""


class InvalidInput(ValueError):
    """An input outside its allowed range. `param` is the parameter's name, `reason` the rest of the message."""

    def __init__(self, param: str, reason: str) -> None:
        super().__init__(f"{param} {reason}")
        self.param = param
        self.reason = reason


class BeyondModel(ModelError):
    """The model has no answer: a target below the bounded region, or a rate above the maximum sustainable rate.

    `param` names the input responsible (``ttft_ms``, ``itl_ms`` or ``rate_rps``), `reason` the rest of the message.
    """

    def __init__(self, param: str, reason: str) -> None:
        super().__init__(f"{param} {reason}")
        self.param = param
        self.reason = reason


def _check_finite(param: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(param, f"must be a number, got {value!r}")
    if not math.isfinite(value):
        raise InvalidInput(param, f"must be a finite number, got {value!r}")
    return float(value)


def _check_min(param: str, value: float, minimum: float, *, strict: bool) -> float:
    v = _check_finite(param, value)
    if v < minimum or (strict and v == minimum):
        op = ">" if strict else ">="
        raise InvalidInput(param, f"must be {op} {minimum:g}, got {v:g}")
    return v


def _check_int(param: str, value: int, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(param, f"must be an integer in [{minimum}, {maximum}], got {value!r}")
    if not minimum <= value <= maximum:
        raise InvalidInput(param, f"must be an integer in [{minimum}, {maximum}], got {value}")
    return value


@dataclass(frozen=True, slots=True)
class ServiceParams:
    """α: ms per iteration (> 0); β: ms per token of compute (≥ 0); γ: ms per token of KV-cache access (≥ 0)."""

    alpha_ms: float
    beta_ms: float
    gamma_ms: float

    def __post_init__(self) -> None:
        _check_min("alpha_ms", self.alpha_ms, 0.0, strict=True)
        _check_min("beta_ms", self.beta_ms, 0.0, strict=False)
        _check_min("gamma_ms", self.gamma_ms, 0.0, strict=False)


@dataclass(frozen=True, slots=True)
class RequestSize:
    """Average tokens of a request: input ≥ 0, output ≥ 1 (averages, so fractional values are allowed)."""

    input_tokens: float
    output_tokens: float

    def __post_init__(self) -> None:
        _check_min("input_tokens", self.input_tokens, 0.0, strict=False)
        _check_min("output_tokens", self.output_tokens, 1.0, strict=False)


class RateRange(NamedTuple):
    """The arrival rates the model answers for, req/s: μ_1·ε and μ_N·(1−ε)."""

    min_rps: float
    max_rps: float


@dataclass(frozen=True, slots=True)
class Metrics:
    """The model's answer at one arrival rate `rate_rps` (req/s). Times in ms; `avg_batch` = avgNumInServers."""

    rate_rps: float
    ttft_ms: float
    itl_ms: float
    rho: float
    throughput_rps: float
    avg_batch: float
    wait_ms: float


Array = npt.NDArray[np.float64]


# ---- the service model, vectorised over rows of (α, β, γ, I, O) --------------------------------------------------


class Work(NamedTuple):
    """(α, β, γ, I, O): scalars for one model, or column vectors of shape (m, 1) for m rows."""

    alpha_ms: Array | float
    beta_ms: Array | float
    gamma_ms: Array | float
    input_tokens: Array | float
    output_tokens: Array | float

    @property
    def delta_ms(self) -> Array | float:
        """δ = β·(I+O)/(O+1) + γ·(I + O/2): the marginal work of one request per iteration, ms."""
        i, o = self.input_tokens, self.output_tokens
        return self.beta_ms * (i + o) / (o + 1.0) + self.gamma_ms * (i + o / 2.0)

    def prefill_ms(self, n: Any) -> Any:
        """PrefillTime(n) = α + n·δ + (β+γ)·I, and 0 where I == 0 (floats or arrays)."""
        i = self.input_tokens
        return (self.alpha_ms + n * self.delta_ms + (self.beta_ms + self.gamma_ms) * i) * (i != 0)

    def decode_ms(self, n: Any) -> Any:
        """DecodeTime(n) = α + n·δ + β + γ·(I + O/2): the time of one output token."""
        i, o = self.input_tokens, self.output_tokens
        return self.alpha_ms + n * self.delta_ms + self.beta_ms + self.gamma_ms * (i + o / 2.0)

    def service_rates(self, max_batch: int) -> Array:
        """μ_n = n / (PrefillTime(n) + O·DecodeTime(n)) for n = 1..N, requests per ms (one row per row)."""
        n = np.arange(1, max_batch + 1, dtype=np.float64)
        return np.asarray(n / (self.prefill_ms(n) + self.output_tokens * self.decode_ms(n)), dtype=np.float64)


# ---- the stationary distribution: the head vectorised over rows, the queue tail in closed form -------------------

_EXP_LIMIT = 700.0
"""Beyond e^700 a term of the tail formulas is taken as infinite (its reciprocal as 0)."""


def _geometric(y: float, terms: int) -> tuple[float, float]:
    """(G, G1) = (Σ_{k<Q} e^(k·y), Σ_{k<Q} k·e^(k·y)) for y ≤ 0.

    Closed form G = expm1(Q·y)/expm1(y) and G1 = G·(1/expm1(−y) − Q/expm1(−Q·y)); term by term where |Q·y| < 1
    (near y = 0 the closed form cancels digits). Example: y = ln 0.5, Q = 3: G = 1 + 0.5 + 0.25 = 1.75,
    G1 = 0.5 + 2·0.25 = 1.0."""
    if abs(y) * terms < 1.0:
        k = np.arange(terms, dtype=np.float64)
        e = np.exp(k * y)
        return float(e.sum()), float(e @ k)
    g = math.expm1(terms * y) / math.expm1(y)
    first = 1.0 / math.expm1(-y) if -y < _EXP_LIMIT else 0.0
    last = terms / math.expm1(-terms * y) if -terms * y < _EXP_LIMIT else 0.0
    return g, g * (first - last)


def _tail(w_n: float, w_k: float, log_r: float, terms: int) -> tuple[float, float]:
    """(Σ_{j=1..Q} w_(N+j), Σ_{j=1..Q} j·w_(N+j)) with w_(N+j) = w_N·r^j: anchored at N (w_N·r, ratio r) when
    r ≤ 1, at K (w_K, ratio 1/r, state N + Q − k) when r > 1, so every term stays below the largest weight."""
    if terms == 0:
        return 0.0, 0.0
    if log_r <= 0:
        g, g1 = _geometric(log_r, terms)
        anchor = w_n * math.exp(log_r)
        return anchor * g, anchor * (g + g1)
    g, g1 = _geometric(-log_r, terms)
    return w_k * g, w_k * (terms * g - g1)


class _Solved(NamedTuple):
    ttft_ms: float
    itl_ms: float
    in_servers: float
    wait_ms: float
    throughput_per_ms: float


@functools.lru_cache(maxsize=64)
def _head_states(max_batch: int) -> Array:
    states = np.arange(max_batch + 1, dtype=np.float64)
    states.flags.writeable = False
    return states


def _solve_rows(
    lam: Array, cum_log_mu: Array, log_mu_top: Array, max_queue: int, work: Work | list[Work]
) -> list[_Solved]:
    """The metrics of §3.3 per row at rates `lam` (per ms, all > 0): `cum_log_mu` (rows or 1 × N+1) holds
    Σ_{j<n} log μ_(j+1) for n = 0..N and `log_mu_top` (rows or 1) log μ_N; `work` shared or one per row.

    The head (states 0..N) is summed element by element, vectorised over rows and scaled by its largest weight;
    the Q queue states are a geometric series from state N (`_tail`). The distribution's log is concave (μ_n rises
    with n), so when the queue's last state K outweighs the head, it is the largest and the row is rescaled to it."""
    n_max = cum_log_mu.shape[1] - 1
    states = _head_states(n_max)
    log_lam = np.log(lam)
    log_w = np.multiply.outer(log_lam, states)
    log_w -= cum_log_mu
    head_top = log_w.max(axis=1)
    log_w -= head_top[:, None]
    log_w_n = log_w[:, -1].tolist()
    w = np.exp(log_w, out=log_w)
    rows = zip(
        lam.tolist(),
        (log_lam - log_mu_top).tolist(),
        log_w_n,
        w.sum(axis=1).tolist(),
        (w @ states).tolist(),
        strict=True,
    )
    solved = []
    for row, (rate, log_r, log_wn, mass, first) in enumerate(rows):
        log_wk = log_wn + max_queue * log_r  # state K against the head's largest weight
        scale = math.exp(-log_wk) if log_wk > 0 else 1.0
        head = _Head(math.exp(log_wn) * scale, math.exp(min(log_wk, 0.0)), log_r, mass * scale, first * scale)
        try:
            solved.append(_solve_row(rate, head, n_max, max_queue, work[row] if isinstance(work, list) else work))
        except ArithmeticError:  # a degenerate row (a zero throughput): no answer, never an exception
            solved.append(_Solved(math.nan, math.nan, math.nan, math.nan, math.nan))
    return solved


class _Head(NamedTuple):
    """One row's chain below the queue, weights relative to the largest: w_N, w_K, ln r, Σ_0..N w, Σ_0..N n·w."""

    w_n: float
    w_k: float
    log_r: float
    mass: float
    first: float


def _solve_row(rate: float, head: _Head, n_max: int, max_queue: int, work: Work) -> _Solved:
    """One row of `_solve_rows` in plain floats (module docstring, §3.2–3.3)."""
    tail_mass, tail_first = _tail(head.w_n, head.w_k, head.log_r, max_queue)
    total = head.mass + tail_mass
    in_servers = (head.first + n_max * tail_mass) / total  # Σ_1..N i·p_i + N·(1 − Σ_0..N p_i)
    mean_in_system = (head.first + n_max * tail_mass + tail_first) / total
    p_full = head.w_k / total  # w_K = w_N when Q = 0
    throughput = rate * (1.0 - p_full)
    service = in_servers / throughput
    wait = max(mean_in_system / throughput - service, 0.0)
    prefill = float(work.prefill_ms(in_servers))
    itl = (service - prefill) / float(work.output_tokens)
    return _Solved(wait + prefill + itl, itl, in_servers, wait, throughput)


class RowMetrics(NamedTuple):
    """`analyze_rows`' answer, one element per row; NaN (and `ok` False) where a row has no answer."""

    ttft_ms: Array
    itl_ms: Array
    wait_ms: Array
    max_rps: Array
    ok: npt.NDArray[np.bool_]


def analyze_rows(
    params_ms: Array,
    input_tokens: Array | float,
    output_tokens: Array | float,
    rate_rps: Array | float,
    *,
    max_batch: int,
    max_queue: int,
) -> RowMetrics:
    """`QueueModel(...).analyze(rate)` for m rows at once: `params_ms` is (m, 3) of (α, β, γ); the request size and
    rate are per row or shared. Never raises on data: a row whose inputs are outside the classes' ranges, whose
    service rates are not finite and positive, or whose rate is not in (0, max_rps] has ok False and NaN metrics
    (its max_rps is still given when the service rates are valid). Agrees with `analyze` row by row (tests)."""
    rows = len(params_ms)
    table = np.empty((rows, 6))  # α, β, γ, I, O, rate
    table[:, :3] = params_ms
    table[:, 3], table[:, 4], table[:, 5] = input_tokens, output_tokens, rate_rps
    with np.errstate(all="ignore"):
        valid = (
            np.isfinite(table).all(axis=1)
            & (table[:, 1:5] >= _LOWER_BOUNDS).all(axis=1)
            & (table[:, 0] > 0)
            & (table[:, 5] > 0)
        )
        work = Work(*(table[:, j : j + 1] for j in range(5)))
        mu = work.service_rates(max_batch)
        rates_ok = valid & ((mu > 0) & (mu < np.inf)).all(axis=1)
        max_rps = np.where(rates_ok, mu[:, -1] * (1.0 - EPSILON) * 1000.0, np.nan)
        ok = rates_ok & (table[:, 5] <= max_rps)
        out = np.full((rows, 3), np.nan)
        if np.any(ok):
            every = bool(ok.all())
            log_mu = np.log(mu if every else mu[ok])
            cum = np.concatenate((np.zeros((log_mu.shape[0], 1)), np.cumsum(log_mu, axis=1)), axis=1)
            kept = table if every else table[ok]
            solved = _solve_rows(
                kept[:, 5] / 1000.0, cum, log_mu[:, -1], max_queue, [Work(*r) for r in kept[:, :5].tolist()]
            )
            out[ok] = [(one.ttft_ms, one.itl_ms, one.wait_ms) for one in solved]
    ok &= np.isfinite(out).all(axis=1)
    return RowMetrics(out[:, 0], out[:, 1], out[:, 2], max_rps, ok)


_LOWER_BOUNDS = np.array([0.0, 0.0, 0.0, 1.0])
"""β ≥ 0, γ ≥ 0, I ≥ 0, O ≥ 1 (α > 0 and the rate > 0 are strict)."""


class QueueModel:
    """One replica of a model server. See the module docstring for the equations."""

    def __init__(
        self,
        params: ServiceParams,
        request: RequestSize,
        *,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_queue: int = DEFAULT_MAX_QUEUE,
    ) -> None:
        if not isinstance(params, ServiceParams):
            raise InvalidInput("params", f"must be a ServiceParams, got {type(params).__name__}")
        if not isinstance(request, RequestSize):
            raise InvalidInput("request", f"must be a RequestSize, got {type(request).__name__}")
        self.params = params
        self.request = request
        self.max_batch = _check_int("max_batch", max_batch, 1, MAX_STATES)
        self.max_queue = _check_int("max_queue", max_queue, 0, MAX_STATES)
        self._work = Work(params.alpha_ms, params.beta_ms, params.gamma_ms, request.input_tokens, request.output_tokens)
        with np.errstate(all="ignore"):
            serv_rate = self._work.service_rates(self.max_batch)
        if not (np.all(np.isfinite(serv_rate)) and np.all(serv_rate > 0)):
            raise ModelError(f"service rates are not finite and positive for {params} and {request}")
        self._serv_rate = serv_rate
        log_mu = np.log(serv_rate)
        self._cum_log_mu = np.concatenate(([0.0], np.cumsum(log_mu)))[None, :]
        self._log_mu_top = log_mu[-1:]
        self._range = RateRange(
            min_rps=float(serv_rate[0] * EPSILON * 1000.0),
            max_rps=float(serv_rate[-1] * (1.0 - EPSILON) * 1000.0),
        )

    def _prefill_time(self, n: Array) -> Array:
        return np.asarray(self._work.prefill_ms(n), dtype=np.float64)

    @property
    def rate_range_rps(self) -> RateRange:
        """The rates `analyze` and `max_rate` work over, req/s."""
        return self._range

    @property
    def service_rates_per_ms(self) -> Array:
        """μ_1..μ_N, requests per ms (a copy)."""
        return self._serv_rate.copy()

    # ---- the M/M/1/K solution ----------------------------------------------------------------------------------

    def _solve(self, rate_rps: float) -> Metrics:
        lam = rate_rps / 1000.0  # per ms
        (solved,) = _solve_rows(np.array([lam]), self._cum_log_mu, self._log_mu_top, self.max_queue, self._work)
        return Metrics(
            rate_rps=rate_rps,
            ttft_ms=solved.ttft_ms,
            itl_ms=solved.itl_ms,
            rho=min(max(solved.in_servers / self.max_batch, 0.0), 1.0),
            throughput_rps=solved.throughput_per_ms * 1000.0,
            avg_batch=solved.in_servers,
            wait_ms=solved.wait_ms,
        )

    def analyze(self, rate_rps: float) -> Metrics:
        """The metrics at arrival rate `rate_rps` (req/s), which must be in (0, rate_range_rps.max_rps]."""
        rate = _check_min("rate_rps", rate_rps, 0.0, strict=True)
        if rate > self._range.max_rps:
            raise BeyondModel(
                "rate_rps",
                f"{rate:g} req/s is above the maximum sustainable rate {self._range.max_rps:.6g} req/s "
                f"(allowed: (0, {self._range.max_rps:.6g}])",
            )
        return self._solve(rate)

    # ---- λ* ----------------------------------------------------------------------------------------------------

    def _largest_rate_for(self, param: str, label: str, target: float) -> float:
        """Upstream's BinarySearch for one target, increasing or decreasing metric."""
        lo, hi = self._range

        def metric(rate: float) -> float:
            m = self._solve(rate)
            return m.ttft_ms if param == "ttft_ms" else m.itl_ms

        def close(y: float) -> bool:
            return y == target or abs((y - target) / target) <= TOLERANCE

        y_lo, y_hi = metric(lo), metric(hi)
        if close(y_lo):
            return lo
        if close(y_hi):
            return hi
        increasing = y_hi >= y_lo
        if not increasing:
            # The metric falls as the rate rises (ITL with O < 3 or a batch of one, or flat within rounding,
            # e.g. β = γ = 0): the highest rate is the best; it meets the target or nothing does.
            if target >= y_hi:
                return hi
            raise BeyondModel(
                param,
                f"target {target:g} ms is below the bounded region: the minimum achievable {label} is "
                f"{y_hi:.6g} ms (at {hi:.6g} req/s)",
            )
        if target < y_lo:
            raise BeyondModel(
                param,
                f"target {target:g} ms is below the bounded region: the minimum achievable {label} is "
                f"{y_lo:.6g} ms (at {lo:.6g} req/s)",
            )
        if target > y_hi:
            return hi
        mid = lo
        for _ in range(MAX_ITERATIONS):
            mid = (lo + hi) / 2.0
            y = metric(mid)
            if close(y):
                return mid
            if (y < target) == increasing:
                lo = mid
            else:
                hi = mid
        return mid

    def max_rate(self, ttft_ms: float, itl_ms: float) -> Metrics:
        """The metrics at λ*, the largest rate meeting both targets (ms; 0 = unconstrained; not both 0)."""
        ttft = _check_min("ttft_ms", ttft_ms, 0.0, strict=False)
        itl = _check_min("itl_ms", itl_ms, 0.0, strict=False)
        if ttft == 0 and itl == 0:
            raise InvalidInput("targets", "must constrain something: ttft_ms and itl_ms are both 0 (unconstrained)")
        rates = [self._range.max_rps]
        if ttft > 0:
            rates.append(self._largest_rate_for("ttft_ms", "TTFT", ttft))
        if itl > 0:
            rates.append(self._largest_rate_for("itl_ms", "ITL", itl))
        return self._solve(min(rates))
