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

λ* (§3.4, `max_rate`): for each positive target, search λ over the rate range until the metric is within relative
tolerance 1e-6 of the target (the bounds are tried first); a target below the metric at the lowest rate is an error
("below the bounded region"), a target above the metric at the highest rate yields the highest rate. λ* is the
minimum over the targets, and the model there must meet both (see below for ITL falling with the rate); a target
of 0 leaves that dimension unconstrained. Whether a target can be met at all is told by the range's ends, TTFT's
first; then the target likely to bind is searched (`_search_order`), and the other only when the model at the first
one's λ* misses it (each metric rises with the rate, so meeting it there puts its own λ* no lower).

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
* No state is summed one by one (upstream sums all K + 1 in a loop, rescaling on overflow). The service time of a
  batch of n is a + b·n (`Work.service_terms`), so below N the weights w_n = Π_{j≤n} λ/μ_j = x^n·(r)_n/n! with
  x = λ·b and r = a/b + 1 are a negative binomial distribution: the head's mass and first moment are regularised
  incomplete beta functions (`_Chain.head`; worked example there). Above N every transition has the rate μ_N, so
  the Q queue states are a geometric series with ratio λ/μ_N, summed in closed form (`_geometric`, `_tail`):
  anchored at state N when the ratio is ≤ 1 and at state K when it is > 1, so no term exceeds the largest weight,
  and term by term near a ratio of 1 (|Q·ln ratio| < 1), where the closed form would cancel digits. Worked example
  of the tail: N = 2, Q = 3, μ_2 = 1, λ = 0.5 ⇒ ratio 0.5 and the tail weights relative to p_2 are 0.5, 0.25,
  0.125: mass 0.875, first moment Σ j·0.5^j = 0.5 + 0.5 + 0.375 = 1.375. A solve is thus a few scalar functions
  whatever N and Q (9 µs against 15–50 µs summing every state, N = 256 and Q = 100 or 2,560); where a/b exceeds
  `NB_MAX_SHAPE` (b ≈ 0, a batch barely slows an iteration) the head is summed element by element in log space.
  Results agree with summing every state to 1e-9 relative or better (tests/queueing/test_model.py, hypothesis);
  at the lowest rates both lose digits in ITL = (S − prefill)/O. `analyze_rows` solves many (parameters,
  request, rate, N, Q) rows in one call without raising, as arrays (the same steps; ~0.6 µs a row), for the
  EKF's Jacobian and fit over many variants at once; `_solve_chain` solves one rate at a time for `max_rate`, and
  `max_rates` runs many λ* searches in lockstep on arrays (`_Solver`, `_roots`).
* λ* by Brent's method (`_root`) where upstream bisects: the same stopping rule (the metric within 1e-6 of the
  target), reached in 4–11 solves a target instead of 19–23 on the tests' targets (the worked example: 12 solves
  for both targets and the range's ends, 44 bisecting). Rates can differ within the tolerance's width (1e-6 on
  the metric, ~1e-6 relative on λ*: 11.9650101 against 11.9650132 req/s above); 100 simulation runs of the
  benchmark scenarios decided the same either way. The target likely to bind is searched first and the other only
  where the model at that λ* misses it (upstream searches both): where ITL binds — the A100 and L40S profiles at the
  benchmark's 2 s / 100 ms, tail-tightened or not, for most request sizes — 7–9 solves a λ* instead of 13–20; on the
  scale benchmark's fleet, where TTFT binds, 6.7 a variant instead of 8.1. The same λ* and the same error either way
  (the previous code against this on 16,000 random models).
* Inputs are validated up front (α > 0, β ≥ 0, γ ≥ 0, all finite; see the classes), with messages that name the
  parameter, the value and the allowed range. Upstream's validity check (``1 − p_0`` below K) is always satisfied
  and is not reproduced.

A property of upstream's model kept as is: TTFT never falls as the rate rises, but ITL can. Prefill is taken at
the time-averaged batch avgNumInServers (idle time included, so below 1 at low load) while S is the mean time a
request spends in service. With max_batch = 1, S = 1/μ_1 at every rate, so ITL falls slightly as the rate rises.
With few output tokens the prefill term grows faster than S: ITL fell by up to 12 % with O ≈ 1 and max_batch 2
in random searches over 136,000 models. It never fell with O ≥ 3 and max_batch ≥ 2, there or in hypothesis runs.
Real chat and code traces average tens to hundreds of output tokens. tests/queueing/test_model.py pins all three
cases. Where ITL falls with the rate, the rates that meet an ITL target lie above a threshold: λ* is then the
TTFT-bound rate when its ITL meets the target too, else no rate meets both (BeyondModel), where upstream returns
that rate anyway (α 23, β 0.5, γ 0, I 800, O 3, N 1, targets TTFT 800 / ITL 150 ms: at 0.20995 req/s ITL is 151
ms).

Pure: numpy, scipy.special and the standard library only, no I/O.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
from scipy import special

from adapter.domain.errors import ModelError
from adapter.domain.frozen import fast_init

EPSILON = 0.001
"""Fraction kept off both ends of the rate range (upstream's epsilon)."""
TOLERANCE = 1e-6
"""Relative tolerance of the λ* search (on the metric)."""
MAX_ITERATIONS = 100
"""λ* search steps at most."""
_RATE_EPS = 2.2e-16
"""The λ* search stops when its bracket is narrower than this relative to the rate (float64's resolution)."""
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


@fast_init
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


@fast_init
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


@fast_init
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


# ---- the service model -------------------------------------------------------------------------------------------


class Work(NamedTuple):
    """(α, β, γ, I, O) in ms and tokens: one replica's service model."""

    alpha_ms: float
    beta_ms: float
    gamma_ms: float
    input_tokens: float
    output_tokens: float

    @property
    def delta_ms(self) -> float:
        """δ = β·(I+O)/(O+1) + γ·(I + O/2): the marginal work of one request per iteration, ms."""
        i, o = self.input_tokens, self.output_tokens
        return self.beta_ms * (i + o) / (o + 1.0) + self.gamma_ms * (i + o / 2.0)

    def prefill_ms(self, n: Any) -> Any:
        """PrefillTime(n) = α + n·δ + (β+γ)·I, and 0 where I == 0 (n a float or an array)."""
        i = self.input_tokens
        return (self.alpha_ms + n * self.delta_ms + (self.beta_ms + self.gamma_ms) * i) * (i != 0)

    def service_terms(self) -> tuple[float, float]:
        """(a, b) with PrefillTime(n) + O·DecodeTime(n) = a + b·n, so μ_n = n / (a + b·n):

            a = [I > 0]·(α + (β+γ)·I) + O·(α + β + γ·(I + O/2)),     b = δ·(O + [I > 0])

        Example (the worked example above): a = 61.0624 + 128·20.1952 = 2646.05, b = 0.512099·129 = 66.0608 ⇒
        μ_1 = 1/2712.11 = 3.68717e-4 /ms, μ_256 = 256/19557.6 = 0.0130895 /ms."""
        i, o = self.input_tokens, self.output_tokens
        prefilling = 1.0 if i != 0 else 0.0
        decode = self.alpha_ms + self.beta_ms + self.gamma_ms * (i + o / 2.0)
        a = prefilling * (self.alpha_ms + (self.beta_ms + self.gamma_ms) * i) + o * decode
        return a, self.delta_ms * (o + prefilling)


# ---- the stationary distribution in closed form ------------------------------------------------------------------

_EXP_LIMIT = 700.0
"""Beyond e^700 a term of the tail formulas is taken as infinite (its reciprocal as 0)."""
NB_MAX_SHAPE = 1e4
"""The head is summed in closed form while a/b ≤ this (real servers: 20 to a few thousand); beyond it (b ≈ 0: a
batch barely slows an iteration), and for b = 0, element by element: the incomplete beta loses digits there."""
_NEGLIGIBLE_LOG = -60.0 * math.log(2.0)
"""ln 2⁻⁶⁰: a head whose tail beyond N is below this has mass 1 in float64 (`_negligible_tail`)."""
_STIRLING = (1.0 / 12.0, -1.0 / 360.0, 1.0 / 1260.0, -1.0 / 1680.0)
"""The first terms of ln Γ(z)'s asymptotic series Σ c_k / z^(2k−1): beyond them the error is below 1/(1188·z⁹)."""


def _log_rising(r: float, n: int) -> float:
    """ln Γ(r + n) − ln Γ(r) = ln (r)_n without the cancellation of two large lgamma values: from r = 30 as
    (r − ½)·ln(1 + n/r) + n·ln(r + n) − n plus the difference of the Stirling series (error < 1e-16 there).
    Example: r = 1e6, n = 1: ln 1e6 = 13.815510558; the two lgamma values (1.28e7 each) differ from it by ~1e-9."""
    if r < 30.0:
        return math.lgamma(r + n) - math.lgamma(r)
    z = r + n
    c1, c3, c5, c7 = _STIRLING  # Σ_k c_k·(z^(1−2k) − r^(1−2k)), written out (the hot path of every solve)
    series = c1 * (z**-1 - r**-1) + c3 * (z**-3 - r**-3) + c5 * (z**-5 - r**-5) + c7 * (z**-7 - r**-7)
    return (r - 0.5) * math.log1p(n / r) + n * math.log(z) - n + series


def _negligible_tail(r: float, k: float, x: float) -> bool:
    """Whether P(NB(r, x) ≥ k) < 2⁻⁶⁰, so that P(NB ≤ k − 1) = I_{1−x}(r, k) is 1 in float64 and the incomplete beta
    function need not be called (~1.3 µs a pair of calls; most solves, a batch far below N).

    Chernoff: P(X ≥ k) ≤ E[e^(tX)]·e^(−tk) with E[e^(tX)] = ((1−x)/(1−x·e^t))^r, least at x·e^t = k/(k+r), which
    is a t > 0 when k is above the mean r·x/(1−x):  ln P ≤ r·ln(1−x) + r·ln((k+r)/r) + k·ln((k+r)·x/k).
    Example: r = 41.06, x = 0.3303 (the worked example at 5 req/s), k = 257: −295 < −41.6 ⇒ negligible.
    Wherever the bound holds, scipy's `betainc` returns exactly 1.0 (2,000,000 random (r, k, x); and the λ* hash
    of 1,500 random models is unchanged), so skipping the call changes no result."""
    if not k * (1.0 - x) > r * x:
        return False
    bound = r * math.log1p(-x) + r * math.log((k + r) / r) + k * math.log((k + r) * x / k)
    return bound < _NEGLIGIBLE_LOG


def _service_rate(a_ms: float, b_ms: float, n: int) -> float:
    """μ_n = n/(a + b·n), requests per ms: what a batch of n completes per ms (`_Chain.mu_ms`)."""
    return n / (a_ms + b_ms * n)


class _Chain(NamedTuple):
    """One replica's birth-death chain: μ_n = n/(a + b·n) for n = 1..N, then μ_N for the Q queue states."""

    a_ms: float
    b_ms: float
    max_batch: int
    max_queue: int
    log_mu_top: float
    """ln μ_N: every solve's queue ratio is λ/μ_N (computed once a chain, not once a solve)."""

    @classmethod
    def of(cls, work: Work, max_batch: int, max_queue: int) -> _Chain | None:
        """The chain of `work` (inputs already in range), or None when its service rates are not finite and positive
        (a + b·n overflowing, say): the one check `QueueModel` and `analyze_rows` share."""
        a, b = work.service_terms()
        if not (math.isfinite(a) and math.isfinite(b) and a > 0 and b >= 0):
            return None
        slowest, fastest = _service_rate(a, b, 1), _service_rate(a, b, max_batch)
        return cls(a, b, max_batch, max_queue, math.log(fastest)) if slowest > 0 and fastest > 0 else None

    def mu_ms(self, n: int) -> float:
        """μ_n = n/(a + b·n), requests per ms (n ≤ N)."""
        return _service_rate(self.a_ms, self.b_ms, n)

    @property
    def rate_range(self) -> RateRange:
        """μ_1·ε and μ_N·(1−ε), req/s: the rates the model answers for."""
        return RateRange(min_rps=self.mu_ms(1) * EPSILON * 1000.0, max_rps=self.max_rps)

    @property
    def max_rps(self) -> float:
        """μ_N·(1−ε), req/s: the top of `rate_range`."""
        return self.mu_ms(self.max_batch) * (1.0 - EPSILON) * 1000.0

    def service_rates(self) -> Array:
        n = np.arange(1, self.max_batch + 1, dtype=np.float64)
        return np.asarray(n / (self.a_ms + self.b_ms * n), dtype=np.float64)

    def head(self, lam: float) -> tuple[float, float, float]:
        """(ln w_N, Σ_{n≤N} w_n, Σ_{n≤N} n·w_n) at λ per ms, on a scale where every w_n ≤ 1.

        With x = λ·b and r = a/b + 1, w_n = Π_{j≤n} λ/μ_j = x^n·(r)_n/n!: the negative binomial NB(r, x) times
        (1 − x)^(−r) (x < 1 wherever λ ≤ μ_N). So, in the NB's own scale, Σ_{n≤N} w_n = P(NB ≤ N) = I_{1−x}(r, N+1)
        (the regularised incomplete beta), Σ_{n≤N} n·w_n = r·x/(1−x)·I_{1−x}(r+1, N) (as n·NB(n; r) =
        r·x/(1−x)·NB(n−1; r+1)), ln w_N = ln NB(N; r, x) = ln (r)_N − ln N! + N·ln x + r·ln(1−x).
        Example: a = 2646.05, b = 66.0608, N = 256, λ = 0.005 /ms: x = 0.330304, r = 41.0553, mean batch
        Σ n·w / Σ w = 20.2487. For b = 0 or a/b > NB_MAX_SHAPE the N + 1 terms are summed one by one."""
        n = self.max_batch
        if self.b_ms > 0 and self.a_ms <= NB_MAX_SHAPE * self.b_ms:
            x, r = lam * self.b_ms, self.a_ms / self.b_ms + 1.0
            log_w_n = _log_rising(r, n) - math.lgamma(n + 1) + n * math.log(x) + r * math.log1p(-x)
            if _negligible_tail(r, n + 1.0, x) and _negligible_tail(r + 1.0, n, x):
                mass, shifted = 1.0, 1.0
            else:  # I_{1−x}(r, N+1) and I_{1−x}(r+1, N) in one ufunc call (~1 µs less a solve than two)
                mass, shifted = special.betainc(np.array((r, r + 1.0)), _head_shapes(n), 1.0 - x).tolist()
            return log_w_n, mass, r * x / (1.0 - x) * shifted
        states = _head_states(n)
        log_w = states * math.log(lam) - np.concatenate(([0.0], np.cumsum(np.log(self.service_rates()))))
        top = float(log_w.max())
        w = np.exp(log_w - top)
        return float(log_w[-1]) - top, float(w.sum()), float(w @ states)


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
def _head_shapes(max_batch: int) -> Array:
    """(N + 1, N): the second shape parameters of the head's two incomplete beta functions, read-only."""
    shapes = np.array((max_batch + 1.0, float(max_batch)))
    shapes.flags.writeable = False
    return shapes


@functools.lru_cache(maxsize=64)
def _head_states(max_batch: int) -> Array:
    states = np.arange(max_batch + 1, dtype=np.float64)
    states.flags.writeable = False
    return states


def _solve_chain(lam: float, chain: _Chain, work: Work) -> _Solved:
    """The metrics of §3.3 at λ per ms (> 0, at most μ_N): the head in closed form (`_Chain.head`), the Q queue
    states a geometric series from state N (`_tail`). The distribution's log is concave (μ_n rises with n), so
    when the queue's last state K outweighs the head it is the largest, and the weights are rescaled to it."""
    log_w_n, mass, first = chain.head(lam)
    log_r = math.log(lam) - chain.log_mu_top
    log_w_k = log_w_n + chain.max_queue * log_r
    scale = math.exp(-log_w_k) if log_w_k > 0 else 1.0
    w_n, w_k = math.exp(log_w_n) * scale, math.exp(min(log_w_k, 0.0))
    mass, first = mass * scale, first * scale
    tail_mass, tail_first = _tail(w_n, w_k, log_r, chain.max_queue)
    total = mass + tail_mass
    n_max = chain.max_batch
    in_servers = (first + n_max * tail_mass) / total  # Σ_1..N i·p_i + N·(1 − Σ_0..N p_i)
    mean_in_system = (first + n_max * tail_mass + tail_first) / total
    throughput = lam * (1.0 - w_k / total)  # w_K = w_N when Q = 0
    service = in_servers / throughput
    wait = max(mean_in_system / throughput - service, 0.0)
    prefill = float(work.prefill_ms(in_servers))
    itl = (service - prefill) / work.output_tokens
    return _Solved(wait + prefill + itl, itl, in_servers, wait, throughput)


class RowMetrics(NamedTuple):
    """`analyze_rows`' answer, one element per row; NaN (and `ok` False) where a row has no answer."""

    ttft_ms: Array
    itl_ms: Array
    wait_ms: Array
    max_rps: Array
    ok: npt.NDArray[np.bool_]


IntArray = npt.NDArray[np.int64]


def analyze_rows(
    params_ms: Array,
    input_tokens: Array | float,
    output_tokens: Array | float,
    rate_rps: Array | float,
    *,
    max_batch: IntArray | int,
    max_queue: IntArray | int,
    one_by_one: bool = False,
) -> RowMetrics:
    """`QueueModel(...).analyze(rate)` for m rows at once: `params_ms` is (m, 3) of (α, β, γ); the request size,
    rate, batch limit and queue capacity are per row or shared. Never raises on data: a row whose inputs are outside
    the classes' ranges, whose service rates are not finite and positive, or whose rate is not in (0, max_rps] has
    ok False and NaN metrics (its max_rps is still given when the service rates are valid).

    The rows are solved as arrays (`_solve_rows`: the same equations as `_solve_chain`, one numpy or scipy call per
    step for all rows), which is what makes the EKF's lockstep over many variants cheap: ~1 µs a row against ~10 µs
    solving them one by one. A head with no closed form (b = 0 or a/b > `NB_MAX_SHAPE`) is summed state by state
    as a matrix of the rows of one N (`_heads`; the EKF's fits try such parameters, and one by one they were a
    fifth of a 1,000-VA fit: docs/benchmarks/scale.md, item 17). Rows whose queue ratio lies within 1/Q of 1 are
    solved one by one by `_solve_chain`. Agrees with `analyze` row by row to ~1e-13 relative (numpy's vectorised log
    and exp round differently from libm's in the last bit; tests/queueing/test_model.py).

    `one_by_one` solves every row by `_solve_chain` instead (~9 µs a row, where the arrays cost ~150 µs a call
    whatever its size)."""
    rows = len(params_ms)
    table = np.empty((rows, 8))  # α, β, γ, I, O, rate, N, Q
    table[:, :3] = params_ms
    table[:, 3], table[:, 4], table[:, 5] = input_tokens, output_tokens, rate_rps
    table[:, 6], table[:, 7] = max_batch, max_queue
    out = np.full((rows, 4), np.nan)  # TTFT, ITL, W, max rate per row
    if one_by_one:
        for index, row in enumerate(table.tolist()):
            out[index] = _analyze_one(row)
    else:
        _analyze_arrays(table, out)
    ok = np.isfinite(out).all(axis=1)
    out[~ok, :3] = np.nan
    return RowMetrics(out[:, 0], out[:, 1], out[:, 2], out[:, 3], ok)


def _analyze_arrays(table: npt.NDArray[np.float64], out: npt.NDArray[np.float64]) -> None:
    """`analyze_rows` as arrays: (TTFT, ITL, W, max rate) of each row of `table` into `out` (NaN: no answer)."""
    alpha, beta, gamma, i, o, rate, n, q = table.T
    with np.errstate(all="ignore"):
        valid = (alpha > 0) & (beta >= 0) & (gamma >= 0) & (i >= 0) & (o >= 1) & (rate > 0)  # NaN fails too
        valid &= np.isfinite(table[:, :5]).all(axis=1) & (n >= 1) & (q >= 0)
        prefilling = (i != 0).astype(np.float64)
        delta = beta * (i + o) / (o + 1.0) + gamma * (i + o / 2.0)
        decode = alpha + beta + gamma * (i + o / 2.0)
        a = prefilling * (alpha + (beta + gamma) * i) + o * decode
        b = delta * (o + prefilling)
        valid &= np.isfinite(a) & np.isfinite(b) & (a > 0) & (b >= 0)
        mu_top = n / (a + b * n)
        valid &= (1.0 / (a + b) > 0) & (mu_top > 0)
        max_rps = mu_top * (1.0 - EPSILON) * 1000.0
        out[valid, 3] = max_rps[valid]
        valid &= rate <= max_rps
        lam = rate / 1000.0
        log_r = np.log(lam) - np.log(mu_top)
        closed = valid & _summable(q, log_r, summed_up_to=0)
        if closed.any():
            columns = _Columns(alpha, beta, gamma, i, o, n, q, a, b, delta, lam, log_r)
            solved = _solve_rows(_Columns(*(c[closed] for c in columns)))
            out[closed, :3] = np.column_stack((solved.ttft_ms, solved.itl_ms, solved.wait_ms))
    for index in np.flatnonzero(valid & ~closed).tolist():
        out[index, :3] = _analyze_row(table[index].tolist())


def _summable(q: Array, log_r: Array, *, summed_up_to: int) -> npt.NDArray[np.bool_]:
    """The rows `_solve_rows` solves (any head, `_heads`): those whose queue it can sum — in closed form, its ratio
    at least 1/Q away from 1 in log, or term by term, at most `summed_up_to` states (`analyze_rows` 0, which keeps
    its rows as they were; `max_rates` `ROWS_TERM_BY_TERM`)."""
    return np.asarray((q <= summed_up_to) | (np.abs(log_r) * q >= 1.0))


def _analyze_one(row: Sequence[float]) -> tuple[float, float, float, float]:
    """(TTFT, ITL, W, max rate) of one row of `analyze_rows`' table (α, β, γ, I, O, rate, N, Q) by `_solve_chain`,
    with the same checks as the arrays; NaN where there is no answer (the max rate is still given when the service
    rates are valid)."""
    alpha, beta, gamma, i, o, rate, n, q = row
    nan, finite = math.nan, math.isfinite
    if not (alpha > 0 and beta >= 0 and gamma >= 0 and i >= 0 and o >= 1 and rate > 0 and n >= 1 and q >= 0):
        return nan, nan, nan, nan  # NaN fails too
    if not (finite(alpha) and finite(beta) and finite(gamma) and finite(i) and finite(o)):
        return nan, nan, nan, nan
    work = Work(alpha, beta, gamma, i, o)
    chain = _Chain.of(work, int(n), int(q))
    if chain is None:
        return nan, nan, nan, nan
    max_rps = chain.max_rps
    if rate > max_rps:
        return nan, nan, nan, max_rps
    return (*_solved_or_nan(rate, chain, work), max_rps)


def _analyze_row(row: Sequence[float]) -> tuple[float, float, float]:
    """(TTFT, ITL, W) of one row of `analyze_rows`' table (α, β, γ, I, O, rate, N, Q) that `_solve_rows` does not
    cover (its checks passed), by `_solve_chain`; NaN where it has no answer."""
    alpha, beta, gamma, i, o, rate, n, q = row
    work = Work(alpha, beta, gamma, i, o)
    chain = _Chain.of(work, int(n), int(q))
    return _solved_or_nan(rate, chain, work) if chain is not None else (math.nan, math.nan, math.nan)


def _solved_or_nan(rate_rps: float, chain: _Chain, work: Work) -> tuple[float, float, float]:
    """(TTFT, ITL, W) of `_solve_chain` at `rate_rps`; NaN for a degenerate row (never an exception)."""
    try:
        solved = _solve_chain(rate_rps / 1000.0, chain, work)
    except (ArithmeticError, ValueError):
        return math.nan, math.nan, math.nan
    return solved.ttft_ms, solved.itl_ms, solved.wait_ms


def _log_rising_rows(r: Array, n: Array) -> Array:
    """`_log_rising` for arrays: ln (r)_n by lgamma below r = 30, by the Stirling difference from there."""
    z = r + n
    c1, c3, c5, c7 = _STIRLING
    series = c1 * (z**-1 - r**-1) + c3 * (z**-3 - r**-3) + c5 * (z**-5 - r**-5) + c7 * (z**-7 - r**-7)
    stirling = (r - 0.5) * np.log1p(n / r) + n * np.log(z) - n + series
    small = r < 30.0
    if small.any():
        stirling[small] = special.gammaln(z[small]) - special.gammaln(r[small])
    return np.asarray(stirling, dtype=np.float64)


def _negligible_tails(r: Array, k: Array, x: Array) -> npt.NDArray[np.bool_]:
    """`_negligible_tail` for arrays."""
    bound = r * np.log1p(-x) + r * np.log((k + r) / r) + k * np.log((k + r) * x / k)
    return np.asarray((k * (1.0 - x) > r * x) & (bound < _NEGLIGIBLE_LOG), dtype=np.bool_)


ROWS_TERM_BY_TERM = 1024
"""`_geometric_rows` sums a queue near a ratio of 1 term by term on arrays up to this many states (a row of Q
exponentials each); `_Solver.solve` leaves longer ones to the scalar solve."""


def _geometric_rows(y: Array, terms: Array) -> tuple[Array, Array]:
    """`_geometric` for arrays: the closed form, and term by term where |Q·y| < 1, the rows of one Q together as a
    matrix of Q exponentials a row (`analyze_rows` passes none of those: it solves them one by one)."""
    with np.errstate(all="ignore"):  # 0/0 where y = 0: those rows are near, summed below
        g = np.expm1(terms * y) / np.expm1(y)
        first = np.where(-y < _EXP_LIMIT, 1.0 / np.expm1(-y), 0.0)
        last = np.where(-terms * y < _EXP_LIMIT, terms / np.expm1(-terms * y), 0.0)
        g1 = g * (first - last)
    near = np.abs(y) * terms < 1.0
    for count in np.unique(terms[near]).tolist():
        rows = near & (terms == count)
        k = np.arange(int(count), dtype=np.float64)
        e = np.exp(np.multiply.outer(y[rows], k))
        g[rows], g1[rows] = e.sum(axis=1), (e * k).sum(axis=1)  # not e @ k: BLAS rounds a row by its neighbours
    return g, g1


class _Columns(NamedTuple):
    """`analyze_rows`' inputs and service terms as columns (one element per row): α, β, γ, I, O, N, Q, then
    a, b of `Work.service_terms`, δ, λ per ms and ln(λ/μ_N)."""

    alpha: Array
    beta: Array
    gamma: Array
    i: Array
    o: Array
    n: Array
    q: Array
    a: Array
    b: Array
    delta: Array
    lam: Array
    log_r: Array


class _SolvedRows(NamedTuple):
    """`_Solved` for many rows: one array a field, in `_Solved`'s order."""

    ttft_ms: Array
    itl_ms: Array
    in_servers: Array
    wait_ms: Array
    throughput_per_ms: Array


def _solve_rows(c: _Columns) -> _SolvedRows:
    """`_solve_chain` for rows whose queue has no state, a ratio at least 1/Q away from 1 in log, or at most
    `ROWS_TERM_BY_TERM` states (`_summable`), whatever their head (`_heads`): the same equations step for step."""
    lam, n, q, log_r = c.lam, c.n, c.q, c.log_r
    log_w_n, mass, first = _heads(lam, c.a, c.b, n)
    log_w_k = log_w_n + q * log_r
    scale = np.where(log_w_k > 0, np.exp(-log_w_k), 1.0)
    w_n, w_k = np.exp(log_w_n) * scale, np.exp(np.minimum(log_w_k, 0.0))
    mass, first = mass * scale, first * scale
    below = log_r <= 0
    g, g1 = _geometric_rows(np.where(below, log_r, -log_r), q)
    anchor = w_n * np.exp(log_r)
    tail_mass = np.where(below, anchor * g, w_k * g)
    tail_first = np.where(below, anchor * (g + g1), w_k * (q * g - g1))
    empty = q == 0
    tail_mass[empty], tail_first[empty] = 0.0, 0.0
    total = mass + tail_mass
    in_servers = (first + n * tail_mass) / total
    mean_in_system = (first + n * tail_mass + tail_first) / total
    throughput = lam * (1.0 - w_k / total)
    service = in_servers / throughput
    wait = np.maximum(mean_in_system / throughput - service, 0.0)
    prefill = (c.alpha + in_servers * c.delta + (c.beta + c.gamma) * c.i) * (c.i != 0)
    itl = (service - prefill) / c.o
    return _SolvedRows(wait + prefill + itl, itl, in_servers, wait, throughput)


def _heads(lam: Array, a: Array, b: Array, n: Array) -> tuple[Array, Array, Array]:
    """`_Chain.head` for arrays: (ln w_N, Σ w_n, Σ n·w_n) a row. In closed form (the negative binomial's incomplete
    beta functions) where b > 0 and a/b ≤ `NB_MAX_SHAPE`; else summed state by state, the rows of one N together as
    a matrix of N + 1 states a row, with `head`'s operations (a cumulative sum of ln μ_n along each row)."""
    closed = (b > 0) & (a <= NB_MAX_SHAPE * b)
    log_w_n, mass, first = np.empty_like(lam), np.empty_like(lam), np.empty_like(lam)
    if closed.any():
        lam_c, n_c = lam[closed], n[closed]
        x, r = lam_c * b[closed], a[closed] / b[closed] + 1.0
        log_w_n[closed] = _log_rising_rows(r, n_c) - special.gammaln(n_c + 1.0) + n_c * np.log(x) + r * np.log1p(-x)
        mass_c, shifted = np.ones_like(x), np.ones_like(x)
        summed = ~(_negligible_tails(r, n_c + 1.0, x) & _negligible_tails(r + 1.0, n_c, x))
        if summed.any():
            mass_c[summed] = special.betainc(r[summed], n_c[summed] + 1.0, 1.0 - x[summed])
            shifted[summed] = special.betainc(r[summed] + 1.0, n_c[summed], 1.0 - x[summed])
        mass[closed], first[closed] = mass_c, r * x / (1.0 - x) * shifted
    for count in np.unique(n[~closed]).tolist():
        rows = ~closed & (n == count)
        states = _head_states(int(count))
        log_mu = np.log(states[1:] / (a[rows, None] + b[rows, None] * states[1:]))
        log_w = np.multiply.outer(np.log(lam[rows]), states)
        log_w[:, 1:] -= np.cumsum(log_mu, axis=1)
        top = log_w.max(axis=1)
        w = np.exp(log_w - top[:, None])
        log_w_n[rows], mass[rows], first[rows] = log_w[:, -1] - top, w.sum(axis=1), (w * states).sum(axis=1)
    return log_w_n, mass, first


class _Target(NamedTuple):
    """One target of `max_rate`: its parameter name and label (for errors), its value in ms, and the metric it bounds
    as its index in `_Solved` (0 TTFT, 1 ITL)."""

    param: str
    label: str
    ms: float
    column: int

    def of(self, solved: _Solved) -> float:
        """The metric this target bounds, in the model as solved at some rate."""
        return solved[self.column]


TTFT, ITL = 0, 1
"""`_Solved`'s columns of the two metrics λ* bounds."""


def _close(y: float, target: float) -> bool:
    """Whether a metric is within `TOLERANCE` (relative) of its target: where the λ* search stops."""
    return y == target or abs((y - target) / target) <= TOLERANCE


class _Root(NamedTuple):
    """A root search a λ* search asks for: where the metric in `column` meets `target`, between the range's ends."""

    column: int
    target: float
    low: tuple[float, _Solved]
    high: tuple[float, _Solved]


Search = Generator["tuple[float, ...] | _Root", Any, "Metrics"]
"""A λ* search as a coroutine. It yields what it needs: rates to solve (it is sent the model solved at each, in
order) or a root search (it is sent the root's rate and the model solved there); it returns the metrics at λ*.
`QueueModel.max_rate` answers one search's asks with scalar solves and `_root`; `max_rates` answers the asks of many
searches in lockstep, each step's rates as one array call (`_Solver.solve`) and its roots together (`_roots`)."""
_Found = Generator["tuple[float, ...] | _Root", Any, tuple[float, "_Solved"]]
"""One target's part of a `Search`: its λ* and the model solved there."""


def _drive(search: Search, solve: Callable[[float], _Solved]) -> Metrics:
    """One search run to its answer, each rate it asks for solved by `solve`, each root found by `_root`."""
    try:
        ask = next(search)
        while True:
            ask = search.send(_root(ask, solve) if isinstance(ask, _Root) else tuple(solve(rate) for rate in ask))
    except StopIteration as done:
        answer: Metrics = done.value
        return answer


def _g(y: float, target: float) -> float:
    """Brent's function of a metric: ln(metric/target); no metric is ≤ 0 (if one were, it is far below)."""
    return math.log(y / target) if y > 0 else -_EXP_LIMIT


def _root(query: _Root, solve: Callable[[float], _Solved]) -> tuple[float, _Solved]:
    """The rate in (low, high) where the rising metric (`query.column` of the model solved at that rate) meets
    `query.target` within `TOLERANCE`, and the model solved there; `low` is below the target, `high` above.

    Brent's method (Brent 1973, as Numerical Recipes' zbrent and scipy's brentq) on g(rate) = ln(metric/target):
    inverse quadratic interpolation through the last three points, or the secant through two, where it lands well
    inside the bracket and shrinks it fast enough, else a bisection step; the bracket [low, high] always holds the
    root. The log makes g nearly linear where TTFT's queueing wait climbs steeply towards the top of the range, so
    interpolation is accepted there too. Stops at the first rate whose metric is within tolerance, as upstream's
    bisection does (the same acceptance rule: rates can differ within the tolerance's width), after 4–11 solves
    where bisection takes 19–23 (tests/queueing/test_model.py). Example: the module docstring's model, ITL target
    100 ms: λ* = 11.9650 req/s in 5 solves besides the range's ends. `_roots` is the same search for many models
    at once, step for step."""
    column, target, low, high = query
    # Brent's names: a, b, c are (rate, model, g) with b the best guess, c across the root from b, a the previous
    # b; `step` is the last step taken and `previous` the one before it (an interpolation must halve it).
    a = (low[0], low[1], _g(low[1][column], target))
    b = (high[0], high[1], _g(high[1][column], target))
    c = a
    step = previous = b[0] - a[0]
    for _ in range(MAX_ITERATIONS):
        if (b[2] > 0) == (c[2] > 0):  # c is the end of the bracket across the root from b
            c = a
            step = previous = b[0] - a[0]
        if abs(c[2]) < abs(b[2]):  # b is the best guess so far
            a, b, c = b, c, b
        tol = 2.0 * _RATE_EPS * abs(b[0])
        half = 0.5 * (c[0] - b[0])
        if abs(half) <= tol:
            return b[0], b[1]
        if abs(previous) >= tol and abs(a[2]) > abs(b[2]):
            s = b[2] / a[2]
            if a[0] == c[0]:  # secant
                p, q = 2.0 * half * s, 1.0 - s
            else:  # inverse quadratic interpolation
                q, r = a[2] / c[2], b[2] / c[2]
                p = s * (2.0 * half * q * (q - r) - (b[0] - a[0]) * (r - 1.0))
                q = (q - 1.0) * (r - 1.0) * (s - 1.0)
            q = -q if p > 0 else q
            p = abs(p)
            if 2.0 * p < min(3.0 * half * q - abs(tol * q), abs(previous * q)):
                previous, step = step, p / q
            else:
                step = previous = half
        else:
            step = previous = half
        a = b
        rate = b[0] + (step if abs(step) > tol else math.copysign(tol, half))
        solved = solve(rate)
        if _close(solved[column], target):
            return rate, solved
        b = (rate, solved, _g(solved[column], target))
    return b[0], b[1]


class _Brent(NamedTuple):
    """`_root`'s state for many searches, one element each: which query, its metric's column and target, Brent's
    a, b, c (rate, model solved there as a `_Solved` row, g) and the last two steps."""

    query: npt.NDArray[np.int64]
    column: npt.NDArray[np.int64]
    target: Array
    a_rate: Array
    a_model: Array
    a_g: Array
    b_rate: Array
    b_model: Array
    b_g: Array
    c_rate: Array
    c_model: Array
    c_g: Array
    step: Array
    previous: Array

    def keep(self, mask: npt.NDArray[np.bool_]) -> _Brent:
        return _Brent._make(x[mask] for x in self)

    def bracketed(self) -> _Brent:
        """`_root`'s first two lines of a step: c across the root from b, then b the best guess."""
        flip = (self.b_g > 0) == (self.c_g > 0)
        flip2 = flip[:, None]
        span = self.b_rate - self.a_rate
        c_rate, c_model, c_g = (np.where(flip, self.a_rate, self.c_rate), np.where(flip2, self.a_model, self.c_model),
                                np.where(flip, self.a_g, self.c_g))  # fmt: skip
        step, previous = np.where(flip, span, self.step), np.where(flip, span, self.previous)
        swap = np.abs(c_g) < np.abs(self.b_g)
        swap2 = swap[:, None]
        return self._replace(  # a, b, c = b, c, b where swapped
            a_rate=np.where(swap, self.b_rate, self.a_rate),
            a_model=np.where(swap2, self.b_model, self.a_model),
            a_g=np.where(swap, self.b_g, self.a_g),
            b_rate=np.where(swap, c_rate, self.b_rate),
            b_model=np.where(swap2, c_model, self.b_model),
            b_g=np.where(swap, c_g, self.b_g),
            c_rate=np.where(swap, self.b_rate, c_rate),
            c_model=np.where(swap2, self.b_model, c_model),
            c_g=np.where(swap, self.b_g, c_g),
            step=step,
            previous=previous,
        )

    def stepped(self, tol: Array, half: Array) -> tuple[_Brent, Array]:
        """`_root`'s interpolation or bisection: the state with a = b and the next rate to solve."""
        a_g, b_g, c_g, previous = self.a_g, self.b_g, self.c_g, self.previous
        s = b_g / a_g
        secant = self.a_rate == self.c_rate
        q_ac, r_bc = a_g / c_g, b_g / c_g
        p = np.where(
            secant,
            2.0 * half * s,
            s * (2.0 * half * q_ac * (q_ac - r_bc) - (self.b_rate - self.a_rate) * (r_bc - 1.0)),
        )
        q = np.where(secant, 1.0 - s, (q_ac - 1.0) * (r_bc - 1.0) * (s - 1.0))
        q = np.where(p > 0, -q, q)
        p = np.abs(p)
        interpolate = (np.abs(previous) >= tol) & (np.abs(a_g) > np.abs(b_g))
        interpolate &= 2.0 * p < np.minimum(3.0 * half * q - np.abs(tol * q), np.abs(previous * q))
        step = np.where(interpolate, p / q, half)
        rate = self.b_rate + np.where(np.abs(step) > tol, step, np.copysign(tol, half))
        moved = self._replace(
            a_rate=self.b_rate,
            a_model=self.b_model,
            a_g=b_g,
            step=step,
            previous=np.where(interpolate, self.step, half),
        )
        return moved, rate


def _roots(queries: Sequence[_Root], solve_rows: Callable[[IntArray, Array], Array]) -> list[tuple[float, _Solved]]:
    """`_root` of many queries at once, step for step: every operation of `_root` on arrays, one element a query
    (the same IEEE operations in the same order, g by `math.log`), so that, solved alike, each query gets exactly
    what `_root` gives it (tests/queueing/test_model.py). A query leaves the arrays with its answer.
    `solve_rows(which, rates)` is query `which[k]` solved at `rates[k]`: an (m, 5) array of `_Solved` rows."""
    if not queries:
        return []
    found = [(q.high[0], q.high[1]) for q in queries]  # every one replaced by its answer below
    column = np.array([q.column for q in queries])
    target = np.array([q.target for q in queries])
    low_model, high_model = np.array([q.low[1] for q in queries]), np.array([q.high[1] for q in queries])
    rows = np.arange(len(queries))
    low_g, high_g = _gs(low_model[rows, column], target), _gs(high_model[rows, column], target)
    low_rate, high_rate = np.array([q.low[0] for q in queries]), np.array([q.high[0] for q in queries])
    span = high_rate - low_rate
    brent = _Brent(rows, column, target, low_rate, low_model, low_g, high_rate, high_model, high_g,
                   low_rate, low_model, low_g, span, span)  # fmt: skip
    with np.errstate(all="ignore"):
        for _ in range(MAX_ITERATIONS):
            if not len(brent.query):
                break
            brent = brent.bracketed()
            tol = 2.0 * _RATE_EPS * np.abs(brent.b_rate)
            half = 0.5 * (brent.c_rate - brent.b_rate)
            done = np.abs(half) <= tol
            _record(found, brent.query[done], brent.b_rate[done], brent.b_model[done])
            brent, rate = brent.stepped(tol, half)
            brent, rate = brent.keep(~done), rate[~done]
            solved = solve_rows(brent.query, rate)
            y = solved[np.arange(len(rate)), brent.column]
            met = (y == brent.target) | (np.abs((y - brent.target) / brent.target) <= TOLERANCE)
            _record(found, brent.query[met], rate[met], solved[met])
            brent = brent._replace(b_rate=rate, b_model=solved, b_g=_gs(y, brent.target)).keep(~met)
    _record(found, brent.query, brent.b_rate, brent.b_model)  # the steps ran out: the best guess
    return found


def _record(found: list[tuple[float, _Solved]], which: npt.NDArray[np.int64], rates: Array, models: Array) -> None:
    for index, rate, row in zip(which.tolist(), rates.tolist(), models.tolist(), strict=True):
        found[index] = (rate, _Solved(*row))


def _gs(y: Array, target: Array) -> Array:
    """`_g` of each metric against its target, by `math.log` as `_root` computes it."""
    return np.array([_g(v, t) for v, t in zip(y.tolist(), target.tolist(), strict=True)], dtype=np.float64)


def _unreachable(goal: _Target, low: tuple[float, _Solved], high: tuple[float, _Solved]) -> BeyondModel | None:
    """The error when no rate of the range meets `goal`: its target below the metric at every rate, which the range's
    ends tell (the metric rises with the rate, or where it falls the highest rate is its least); else None."""
    param, label, target, _ = goal
    (lo, at_lo), (hi, at_hi) = low, high
    y_lo, y_hi = goal.of(at_lo), goal.of(at_hi)
    if _close(y_lo, target) or _close(y_hi, target):
        return None
    rate, least = (hi, y_hi) if y_hi < y_lo else (lo, y_lo)
    if not target < least:
        return None
    return BeyondModel(
        param,
        f"target {target:g} ms is below the bounded region: the minimum achievable {label} is {least:.6g} ms "
        f"(at {rate:.6g} req/s)",
    )


def _search_order(goals: Sequence[_Target], low: tuple[float, _Solved], high: tuple[float, _Solved]) -> list[_Target]:
    """The order `max_rate` searches its targets in: the one likely to bind first, so that the other is met at its
    λ* and needs no search. A guess from the range's ends, no solve; a wrong one costs the solves of searching both,
    as upstream always does, and never changes λ*.

    TTFT first when even its part without the queue wait, prefill + ITL, drawn as a straight line from the lowest to
    the highest rate, reaches its target before ITL's straight line reaches its own: the wait only adds to TTFT, so
    its λ* comes no later than that. Otherwise ITL first: TTFT stays near its floor until a queue forms, close to
    the top of the range. Example (the A100 profile, I 983, O 200, targets 123 / 101 ms as observed latencies
    give them): TTFT without the wait 85 → 311 ms, 17 % of the way up the range; ITL 10 → 123 ms, 80 % ⇒ TTFT
    first (9 solves instead of 13); I 1155, O 230 at the benchmark's tightened 447 / 61 ms: TTFT's line (96 → 333
    ms) never reaches its target, ITL's does at 43 % ⇒ ITL first (8 solves instead of 18)."""
    if len(goals) < 2:
        return list(goals)
    (_, at_lo), (_, at_hi) = low, high

    def crossing(y_lo: float, y_hi: float, target: float) -> float:
        return (target - y_lo) / (y_hi - y_lo) if y_hi > y_lo else math.inf

    unqueued_ttft = crossing(at_lo.ttft_ms - at_lo.wait_ms, at_hi.ttft_ms - at_hi.wait_ms, goals[0].ms)
    itl = crossing(at_lo.itl_ms, at_hi.itl_ms, goals[1].ms)
    return list(goals) if unqueued_ttft < itl else [goals[1], goals[0]]


def _met(goal: _Target, solved: _Solved) -> bool:
    """Whether the model solved at some rate meets `goal`'s target (within `TOLERANCE`)."""
    value = goal.of(solved)
    return value <= goal.ms or _close(value, goal.ms)


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
        chain = _Chain.of(self._work, self.max_batch, self.max_queue)
        if chain is None:
            raise ModelError(f"service rates are not finite and positive for {params} and {request}")
        self._chain = chain
        self._range = chain.rate_range

    def _prefill_time(self, n: Array) -> Array:
        return np.asarray(self._work.prefill_ms(n), dtype=np.float64)

    @property
    def rate_range_rps(self) -> RateRange:
        """The rates `analyze` and `max_rate` work over, req/s."""
        return self._range

    @property
    def service_rates_per_ms(self) -> Array:
        """μ_1..μ_N, requests per ms."""
        return self._chain.service_rates()

    # ---- the M/M/1/K solution ----------------------------------------------------------------------------------

    def _solve(self, rate_rps: float) -> Metrics:
        return self._metrics(rate_rps, self._solved_at(rate_rps))

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

    def _metrics(self, rate_rps: float, solved: _Solved) -> Metrics:
        return Metrics(
            rate_rps=rate_rps,
            ttft_ms=solved.ttft_ms,
            itl_ms=solved.itl_ms,
            rho=min(max(solved.in_servers / self.max_batch, 0.0), 1.0),
            throughput_rps=solved.throughput_per_ms * 1000.0,
            avg_batch=solved.in_servers,
            wait_ms=solved.wait_ms,
        )

    def _solved_at(self, rate_rps: float) -> _Solved:
        return _solve_chain(rate_rps / 1000.0, self._chain, self._work)

    def _largest_rate_for(self, goal: _Target, low: tuple[float, _Solved], high: tuple[float, _Solved]) -> _Found:
        """λ* for one target and the model solved there: `low` and `high` are the rate range's ends, solved once for
        both targets. The metric rises with the rate (TTFT always, ITL nearly always: module docstring) or, where
        it falls, the highest rate is the answer or nothing is."""
        y_lo, y_hi = goal.of(low[1]), goal.of(high[1])
        if _close(y_lo, goal.ms):
            return low
        if _close(y_hi, goal.ms) or y_hi < y_lo or goal.ms > y_hi:
            # y_hi < y_lo: the metric falls as the rate rises (ITL with O < 3 or a batch of one, or flat within
            # rounding, e.g. β = γ = 0): the highest rate is the best (`_unreachable` has said that it meets it).
            return high
        found: tuple[float, _Solved] = yield _Root(goal.column, goal.ms, low, high)
        return found

    def max_rate(self, ttft_ms: float, itl_ms: float) -> Metrics:
        """The metrics at λ*, the largest rate meeting both targets (ms; 0 = unconstrained; not both 0)."""
        return _drive(self._search(ttft_ms, itl_ms), self._solved_at)

    def _search(self, ttft_ms: float, itl_ms: float) -> Search:
        """`max_rate` as a search (`Search`): the range's ends in one ask, then a root search a target."""
        ttft = _check_min("ttft_ms", ttft_ms, 0.0, strict=False)
        itl = _check_min("itl_ms", itl_ms, 0.0, strict=False)
        if ttft == 0 and itl == 0:
            raise InvalidInput("targets", "must constrain something: ttft_ms and itl_ms are both 0 (unconstrained)")
        lo, hi = self._range
        at_lo, at_hi = yield (lo, hi)
        low, high = (lo, at_lo), (hi, at_hi)
        goals = [
            goal for goal in (_Target("ttft_ms", "TTFT", ttft, TTFT), _Target("itl_ms", "ITL", itl, ITL)) if goal.ms > 0
        ]
        for goal in goals:  # TTFT, then ITL: the first target out of reach is the error
            if (error := _unreachable(goal, low, high)) is not None:
                raise error
        best = high
        for goal in _search_order(goals, low, high):
            if best is not high and _met(goal, best[1]):
                continue  # met at the other target's λ*, which is therefore the lower: nothing to search
            found = yield from self._largest_rate_for(goal, low, high)
            best = found if found[0] < best[0] else best
        rate, solved = best
        for goal in goals:
            # Only a metric that falls as the rate rises (ITL with a batch of one or O < 3) can miss here: the rates
            # that meet it lie above a threshold, those that meet the other target below λ*, and the two do not meet.
            if not _met(goal, solved):
                raise BeyondModel(
                    goal.param,
                    f"no rate meets both targets: at {rate:.6g} req/s, the most the other target allows, {goal.label} "
                    f"is {goal.of(solved):.6g} ms against {goal.ms:g} ms, and {goal.label} only falls as the rate "
                    "rises",
                )
        return self._metrics(rate, solved)


LOCKSTEP_FROM = 16
"""`max_rates` searches in lockstep from this many queries; fewer are searched one by one (`max_rate`), where the
array calls' fixed cost (~150 µs a step for ~12 steps) exceeds ~60 µs a search."""


def max_rates(queries: Sequence[tuple[QueueModel, float, float]]) -> list[Metrics | InvalidInput | ModelError]:
    """`model.max_rate(ttft_ms, itl_ms)` of each (model, ttft_ms, itl_ms): its answer, or the error it raises.

    From `LOCKSTEP_FROM` queries the searches run in lockstep: each step gathers what every unfinished search asks
    for, solves the rates as rows of one array call (`_Solver.solve`: ~0.5 µs a row against ~9 µs a scalar solve) and
    runs the root searches together (`_roots`, Brent's steps on arrays). The answers then differ from `max_rate`'s
    in the solves' last bits only (numpy's vectorised log and exp round differently from libm's): λ* agrees to
    1e-12 relative (2.3e-13 the worst of 1,200 random queries), and where a range's two ends tie within that the
    error names the other end. A query's answer does not depend on the queries beside it once in lockstep, bit for
    bit (no reduction across rows: tests/queueing/test_model.py). An error other than
    the model's own (an `ArithmeticError` of a degenerate solve) propagates, as from `max_rate`."""
    # An error is an answer here, a value: kept without its traceback, whose frames hold the list of answers that
    # holds the error — a reference cycle only the cyclic GC frees (docs/benchmarks/scale.md, item 11)
    answers: list[Metrics | InvalidInput | ModelError] = []
    if len(queries) < LOCKSTEP_FROM:
        for model, ttft_ms, itl_ms in queries:
            try:
                answers.append(model.max_rate(ttft_ms, itl_ms))
            except (InvalidInput, ModelError) as error:
                answers.append(error.with_traceback(None))
        return answers
    answers = [ModelError("not searched")] * len(queries)
    asking: list[tuple[int, Search, tuple[float, ...] | _Root]] = []

    def send(index: int, search: Search, answer: Any) -> None:
        try:
            ask = next(search) if answer is None else search.send(answer)
        except StopIteration as done:
            answers[index] = done.value
        except (InvalidInput, ModelError) as error:
            answers[index] = error.with_traceback(None)
        else:
            asking.append((index, search, ask))

    for index, (model, ttft_ms, itl_ms) in enumerate(queries):
        send(index, model._search(ttft_ms, itl_ms), None)
    solver = _Solver([model for model, _, _ in queries])
    while asking:
        step, asking = asking, []
        rates = [(index, search, ask) for index, search, ask in step if not isinstance(ask, _Root)]
        roots = [(index, search, ask) for index, search, ask in step if isinstance(ask, _Root)]
        which = np.array([index for index, _, ask in rates for _ in ask], dtype=np.int64)
        rows = solver.solve(which, np.array([rate for _, _, ask in rates for rate in ask])).tolist()
        at = 0
        for index, search, ask in rates:
            send(index, search, tuple(_Solved(*row) for row in rows[at : at + len(ask)]))
            at += len(ask)
        rooted = np.array([index for index, _, _ in roots], dtype=np.int64)

        def solve_rooted(k: IntArray, at_rps: Array, rooted: IntArray = rooted) -> Array:
            return solver.solve(rooted[k], at_rps)

        found = _roots([ask for _, _, ask in roots], solve_rooted)
        for (index, search, _), answer in zip(roots, found, strict=True):
            send(index, search, answer)
    return answers


class _Solver:
    """Many models solved as arrays: their service terms as one table, a row a model (α, β, γ, I, O, then the
    chain's a, b, N, Q, ln μ_N, then δ), built once for all the steps of `max_rates`."""

    def __init__(self, models: Sequence[QueueModel]) -> None:
        self._models = models
        rows = [(*model._work, *model._chain, model._work.delta_ms) for model in models]
        self._table = np.array(rows, dtype=np.float64).reshape(-1, 11)

    def solve(self, which: IntArray, rates_rps: Array) -> Array:
        """Model `which[k]` solved at `rates_rps[k]` (within its range), as `QueueModel._solved_at`: an (m, 5) array
        of `_Solved` rows. Rows outside `_solve_rows`' closed forms, or whose array answer is not finite, are solved
        by `_solve_chain` (which raises where it must)."""
        out = np.full((len(which), 5), np.nan)
        alpha, beta, gamma, i, o, a, b, n, q, log_mu_top, delta = self._table[which].T
        lam = rates_rps / 1000.0
        with np.errstate(all="ignore"):
            log_r = np.log(lam) - log_mu_top
            closed = _summable(q, log_r, summed_up_to=ROWS_TERM_BY_TERM)
            if closed.any():
                columns = _Columns(alpha, beta, gamma, i, o, n, q, a, b, delta, lam, log_r)
                out[closed] = np.column_stack(_solve_rows(_Columns(*(c[closed] for c in columns))))
        for k in np.flatnonzero(~np.isfinite(out).all(axis=1)).tolist():
            out[k] = self._models[which[k]]._solved_at(float(rates_rps[k]))
        return out
