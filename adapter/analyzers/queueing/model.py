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
* The probabilities are computed in log space — ``log p_n = n·log λ − Σ_{j<n} log μ_{min(j+1,N)}``, normalised with
  log-sum-exp — instead of upstream's iterative "divide by MaxFloat64/K on overflow" rescaling. Both give the same
  distribution; log space cannot overflow and is one vectorised numpy expression.
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

import math
from dataclasses import dataclass
from typing import NamedTuple

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
        n = np.arange(1, self.max_batch + 1, dtype=np.float64)
        service_ms = self._prefill_time(n) + request.output_tokens * self._decode_time(n)
        serv_rate = n / service_ms  # μ_n, requests per ms
        if not (np.all(np.isfinite(serv_rate)) and np.all(serv_rate > 0)):
            raise ModelError(f"service rates are not finite and positive for {params} and {request}")
        self._serv_rate = serv_rate
        k = self.max_batch + self.max_queue
        # log μ of the transition n → n+1, n = 0..K-1, and its running sum: log p_n = n·log λ − cum[n]
        log_mu = np.log(serv_rate[np.minimum(np.arange(k), self.max_batch - 1)])
        self._cum_log_mu = np.concatenate(([0.0], np.cumsum(log_mu)))
        self._states = np.arange(k + 1, dtype=np.float64)
        self._range = RateRange(
            min_rps=float(serv_rate[0] * EPSILON * 1000.0),
            max_rps=float(serv_rate[-1] * (1.0 - EPSILON) * 1000.0),
        )

    # ---- service model -----------------------------------------------------------------------------------------

    def _delta(self) -> float:
        p, i, o = self.params, self.request.input_tokens, self.request.output_tokens
        return p.beta_ms * (i + o) / (o + 1.0) + p.gamma_ms * (i + o / 2.0)

    def _iteration_time(self, n: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return self.params.alpha_ms + n * self._delta()

    def _prefill_time(self, n: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        i = self.request.input_tokens
        if i == 0:
            return np.zeros_like(n)
        return self._iteration_time(n) + (self.params.beta_ms + self.params.gamma_ms) * i

    def _decode_time(self, n: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        p, i, o = self.params, self.request.input_tokens, self.request.output_tokens
        return self._iteration_time(n) + p.beta_ms + p.gamma_ms * (i + o / 2.0)

    @property
    def rate_range_rps(self) -> RateRange:
        """The rates `analyze` and `max_rate` work over, req/s."""
        return self._range

    @property
    def service_rates_per_ms(self) -> npt.NDArray[np.float64]:
        """μ_1..μ_N, requests per ms (a copy)."""
        return self._serv_rate.copy()

    # ---- the M/M/1/K solution ----------------------------------------------------------------------------------

    def _solve(self, rate_rps: float) -> Metrics:
        lam = rate_rps / 1000.0  # per ms
        n_max = self.max_batch
        log_p = self._states * math.log(lam) - self._cum_log_mu
        log_p -= log_p.max()
        p = np.exp(log_p)
        p /= p.sum()
        in_batch = self._states[1 : n_max + 1] @ p[1 : n_max + 1]
        p_upto_n = float(p[: n_max + 1].sum())
        avg_in_servers = float(in_batch) + n_max * max(1.0 - p_upto_n, 0.0)
        mean_in_system = float(self._states @ p)
        throughput = lam * (1.0 - float(p[-1]))
        response = mean_in_system / throughput
        service = avg_in_servers / throughput
        wait = max(response - service, 0.0)
        prefill = float(self._prefill_time(np.array([avg_in_servers]))[0])
        itl = (service - prefill) / self.request.output_tokens
        return Metrics(
            rate_rps=rate_rps,
            ttft_ms=wait + prefill + itl,
            itl_ms=itl,
            rho=min(max(avg_in_servers / n_max, 0.0), 1.0),
            throughput_rps=throughput * 1000.0,
            avg_batch=avg_in_servers,
            wait_ms=wait,
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
