"""Online learning of a variant's service parameters x = (α, β, γ) with an extended Kalman filter (seed 003;
research §3.6); stage 2 of `analyzer.measure` (`learn`, at the end of this file). Pure: numpy and scipy, no clock,
no I/O; nothing here raises on bad data.

One observation per busy pod ("environment"): its arrival rate λ, request size (I, O), batch limit N, and the
measured z = (TTFT, ITL) in ms. The measurement function is the queueing model itself:

    h(x) = (W + prefill, ITL) of QueueModel(α, β, γ; I, O; N, queue 10·N).analyze(λ)
           (the tuner's TTFT leaves out the one decode step that `analyze().ttft_ms` includes)

The filter runs on θ = log x, so every parameter stays positive and its uncertainty is relative (γ ≈ 2e-4 and
α ≈ 20 get the same treatment). Each cycle, for each environment in turn, with θ a random walk:

    predict   P ← P + Q                        Q = diag(0.01²)          (1 % drift per observation)
    gate      y = z − h(e^θ);  H = ∂h/∂θ       (central differences, step 0.01 in θ, i.e. 1 % of x; θ and its
                                               six probes are seven rows of one model call, `linearise`)
              R = diag((σ_z·z)²)               σ_z = (0.05 / 1.96) / √1.0  (5 % error at 95 %, of this pod's z)
              S = H P Hᵀ + R;  NIS = yᵀ S⁻¹ y
              NIS ≥ 7.378 (the χ²₂ 97.5 % quantile), S not positive definite, or h not evaluable → rejected:
              θ and P stay exactly as they were
    update    iterated (Gauss-Newton) EKF: θ_0 = θ, and while the last step moved some θ_j by more than 0.02
              (at most 5 passes), re-linearise at θ_i:
                  K_i = P H_iᵀ (H_i P H_iᵀ + R)⁻¹,   θ_{i+1} = clamp(θ + K_i (z − h(θ_i) − H_i (θ − θ_i)))
              P ← (I − K H) P (I − K H)ᵀ + K R Kᵀ   (Joseph form, with the last pass's K and H)

Many variants at once (`update_many`, `advance_many`, `learn_many`): observation k of every variant is one step of
arrays — one model call for all their rows, one stacked matrix operation per line above — so a cycle costs ~0.6 µs
a model row instead of ~130 µs a seven-row call. The variants never share a number: each gets exactly what it gets
alone (tests/queueing/test_ekf.py). `update` is `update_many` of one variant.

Worked example of the gate: S = diag(4, 1) and y = (4, 2): NIS = 16/4 + 4/1 = 8 ≥ 7.378 → rejected.
Worked example of R: a pod reporting TTFT 200 ms and ITL 30 ms: σ_z = 0.02551, R = diag(5.102², 0.7653²) =
diag(26.03, 0.5857) ms².

Start (`initial_state`): a maximum-a-posteriori fit of θ to this cycle's environments,

    minimise  Σ_pods ‖(h(e^θ) − z) / (σ_z·z)‖²  +  ‖(θ − log x_default) / ln 10‖²     within the state limits

from whichever of these starts costs least: the defaults (α 5 ms, β 0.05 ms, γ 5e-5 ms), upstream's one-pod
guess of the least loaded pod (α = 0.9·ITL, β+γ = (TTFT − α)/I, γ = (ITL − α − (β+γ)) / (I + (O+1)/2 − 1)), and,
when that guess leaves a pod unserved, the guess scaled down until every pod is served with room, and, for a
re-fit, the parameters the lost filter had (where it was lost only because the pods fit no parameters well,
the fit ends near there in a few steps: a 1,000-VA re-fit cycle 0.77 → 0.30 s). A pod the
model cannot serve at a trial θ (λ above its maximum rate) costs (10 + ln(λ/λ_max))/σ_z per component, so the
search is pulled back towards parameters that can serve it. The fits of a cycle (every cold start and re-fit)
run in lockstep, a Levenberg–Marquardt run per variant, each evaluation one model call for all their pods
(`_fit_many`). The prior (a factor of 10 at one standard deviation)
keeps a parameter the data barely see (γ, with a few noisy pods) near a plausible value instead of letting it run
to a limit where the filter could never see it again. P0 = diag(1²) in θ (a factor e at one σ), not the fit's
own (Laplace) covariance: that one assumes the model is exact, and real servers deviate from it by more than the
5 % noise (chunked prefill, scheduling); a filter started that confident rejected most later observations and
lived on re-fits from single cycles (in `wva-adapter simulate`: 42 % instead of 68 % SLO attainment on the
Mooncake trace). No usable pod: the defaults with P0 = diag((ln 10)²).

State limits: the physical range `STATE_LIMITS` (far beyond any GPU), for every new state.

`advance` is one cycle as the analyzer runs it: a cold start when nothing was learned; else `update`; and a
re-fit from this cycle's pods once at least half of each cycle's observations were rejected for
`LOST_AFTER_CYCLES` cycles in a row (the variant changed hardware, or the filter went wrong).

Where we differ from upstream (docs/deviations.md, rows 33, 34, 36 and 42–45): log-parameters; the MAP bootstrap
with fixed physical limits (upstream: one-pod guess, 5 % prior, limits guess/100..guess·100,
which traps γ when the guess is far off); R from each pod's own latencies (upstream: the first busy pod's for the
whole cycle, so pods slower than the first are over-weighted and rejected); the iterated update and the Joseph form
(upstream: one linearisation and P ← (I − KH)P); a failed update keeps the previous state instead of crashing the
engine (upstream panicked on a nil measurement inside the Jacobian); a restored state keeps its own limits.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from adapter.analyzers.queueing.model import RowMetrics, ServiceParams, Work, analyze_rows
from adapter.analyzers.queueing.workload import VariantLoad
from adapter.domain.frozen import fast_init

Vector = npt.NDArray[np.float64]
Matrix = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IndexArray = npt.NDArray[np.intp]

NIS_GATE = 7.378
"""χ²₂ 97.5 % quantile (upstream's comment calls it the 95 % bound)."""
ERROR_LEVEL = 0.05
T_PERCENTILE = 1.96
GAMMA_FACTOR = 1.0
RELATIVE_SD = (ERROR_LEVEL / T_PERCENTILE) / math.sqrt(GAMMA_FACTOR)
"""σ_z: one standard deviation of a reported latency, relative to it (5 % at 95 %)."""
PERCENT_CHANGE = 0.01
"""Process noise: relative drift of each parameter per observation (Q = diag(0.01²) in θ)."""
QUEUE_TO_BATCH = 10
JACOBIAN_STEP = 0.01
RELINEARIZE_ABOVE = 0.02
"""The iterated update re-linearises while a step moved some θ_j by more than this (2 %)."""
MAX_PASSES = 5
DEFAULT_PARAMS = (5.0, 0.05, 5e-5)
PRIOR_SD = math.log(10.0)
"""The cold-start fit's prior around DEFAULT_PARAMS, in θ: a factor of 10 at one standard deviation."""
STATE_LIMITS = ((0.01, 1e-5, 1e-8), (1000.0, 10.0, 1.0))
"""Lower and upper limits of (α, β, γ) in ms for a new state: far beyond any GPU, so a limit is never the answer."""
FIT_MAX_EVALUATIONS = 200
"""The most steps a fit's run takes (each one evaluation, and three more for the Jacobian after an accepted one)."""
FIT_TOLERANCE = 1e-6
"""A fit's run stops when a step lowers its cost by at most this share, or moves θ by at most this (relative): the
fit starts a filter whose P0 is a factor e wide. At scipy's default, 1e-8, a 1,000-VA fit took 58 % more steps
(a third more time)."""
FIT_FIRST_REACH = 20.0
"""A fit's first trust radius in θ: no limit in practice (the box is ~11 wide in each θ_j); it halves after a
failed step and at least doubles after one that did as its quadratic model said."""
FIT_PENALTY = 10.0
"""Relative residual of a pod the model cannot serve at a trial θ (plus ln(λ/λ_max))."""
MAX_FIT_STARTS = 2
"""The defaults and the least loaded pod's guess; then, when some pod is unserved at the guess (the defaults without
one), that start scaled down to serve it (`_serving`)."""
SERVED_MARGIN = 1.5
"""The room a fit's third start leaves the most loaded pod: λ ≤ λ_max / 1.5 (`_serving`)."""
COLD_START_SD = 1.0
"""P0 = diag(1²) in θ after a cold start or re-fit: a factor e at one σ, whatever the fit claims (see below)."""
FIT_CHUNK = 2048
"""Variants fitted in one lockstep at most (`_fit_many`): the lockstep's arrays grow with its rows (a run per variant
and start, each with a copy of its pods), so the 7,906 fits of a 10,000-VA first cycle in one lockstep peaked at
111 MB traced, 29 MB in chunks of 2,048 (docs/benchmarks/scale.md, item 32), while a chunk's calls still have tens of
thousands of rows to share their cost."""
LOST_AFTER_CYCLES = 3
"""Cycles in a row with at least half of the observations rejected, after which `advance` re-fits."""

_PARAM_NAMES = ("alpha_ms", "beta_ms", "gamma_ms")


@fast_init
@dataclass(frozen=True, slots=True)
class Environment:
    """One busy pod's observation: λ req/s, mean tokens, batch limit, measured TTFT (without its decode step)
    and ITL, in ms."""

    arrival_rps: float
    input_tokens: float
    output_tokens: float
    max_batch: int
    ttft_ms: float
    itl_ms: float

    @property
    def valid(self) -> bool:
        """Every number finite and > 0 (NaN fails each comparison), at least one output token, a batch limit."""
        inf = math.inf
        return (
            0 < self.arrival_rps < inf
            and 0 < self.input_tokens < inf
            and 1 <= self.output_tokens < inf
            and 0 < self.ttft_ms < inf
            and 0 < self.itl_ms < inf
            and self.max_batch > 0
        )

    @property
    def z(self) -> Vector:
        return np.array([self.ttft_ms, self.itl_ms], dtype=np.float64)


@fast_init
@dataclass(frozen=True, slots=True)
class FilterState:
    """A variant's learned parameters and their uncertainty, as persisted in VA status (`learned.queueingModel`).

    `covariance` is that of θ = log(α, β, γ): √P_ii is the relative uncertainty of parameter i. `lower`/`upper`
    are the state limits in ms. `to_json()` is a plain dict of floats and lists; `from_json(to_json())` equals
    the state."""

    alpha_ms: float
    beta_ms: float
    gamma_ms: float
    covariance: tuple[tuple[float, float, float], tuple[float, float, float], tuple[float, float, float]]
    lower: tuple[float, float, float]
    upper: tuple[float, float, float]
    updated_s: float
    accepted: int = 0
    rejected: int = 0
    last_nis: float | None = None
    lost_cycles: int = 0
    """Consecutive cycles in which at least half of the observations were rejected (`advance` re-fits after
    LOST_AFTER_CYCLES)."""

    @property
    def samples(self) -> int:
        """Observations the filter has accepted since its start."""
        return self.accepted

    @property
    def theta(self) -> Vector:
        """log(α, β, γ): the filter's state."""
        return np.log(np.array([self.alpha_ms, self.beta_ms, self.gamma_ms], dtype=np.float64))

    @property
    def p(self) -> Matrix:
        """Covariance of θ (log-parameters)."""
        return np.array(self.covariance, dtype=np.float64)

    def params(self) -> ServiceParams:
        return ServiceParams(self.alpha_ms, self.beta_ms, self.gamma_ms)

    def to_json(self) -> dict[str, Any]:
        return {
            "alpha_ms": self.alpha_ms,
            "beta_ms": self.beta_ms,
            "gamma_ms": self.gamma_ms,
            "covariance": [list(row) for row in self.covariance],
            "lower": list(self.lower),
            "upper": list(self.upper),
            "updated_s": self.updated_s,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "last_nis": self.last_nis,
            "lost_cycles": self.lost_cycles,
        }

    @classmethod
    def from_json(cls, doc: Any) -> FilterState:
        """Strict: anything but the shape `to_json` writes raises ValueError naming the field (the caller then
        starts afresh). The covariance must be 3x3, finite, symmetric and positive definite."""
        if not isinstance(doc, Mapping):
            raise ValueError("filter state must be an object")
        alpha, beta, gamma = (_positive(doc.get(k), k) for k in _PARAM_NAMES)
        covariance = _covariance(doc.get("covariance"))
        lower = _triple(doc.get("lower"), "lower")
        upper = _triple(doc.get("upper"), "upper")
        if not all(lo < hi for lo, hi in zip(lower, upper, strict=True)):
            raise ValueError("lower limits must be below upper limits")
        nis = doc.get("last_nis")
        return cls(
            alpha,
            beta,
            gamma,
            covariance,
            lower,
            upper,
            _finite(doc.get("updated_s"), "updated_s"),
            _count(doc.get("accepted", 0), "accepted"),
            _count(doc.get("rejected", 0), "rejected"),
            None if nis is None else _finite(nis, "last_nis"),
            _count(doc.get("lost_cycles", 0), "lost_cycles"),
        )


def _finite(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {str(value)[:40]!r}")
    return float(value)


def _positive(value: Any, name: str) -> float:
    number = _finite(value, name)
    if number <= 0:
        raise ValueError(f"{name} must be > 0, got {number!r}")
    return number


def _count(value: Any, name: str) -> int:
    number = _finite(value, name)
    if number < 0 or number != int(number):
        raise ValueError(f"{name} must be a non-negative integer, got {number!r}")
    return int(number)


def _triple(value: Any, name: str) -> tuple[float, float, float]:
    if not (isinstance(value, list) and len(value) == 3):
        raise ValueError(f"{name} must be a list of 3 numbers")
    a, b, c = (_positive(v, name) for v in value)
    return a, b, c


_Cov = tuple[tuple[float, float, float], tuple[float, float, float], tuple[float, float, float]]


def _covariance(value: Any) -> _Cov:
    if not (isinstance(value, list) and len(value) == 3 and all(isinstance(r, list) and len(r) == 3 for r in value)):
        raise ValueError("covariance must be 3x3")
    rows = [tuple(_finite(v, "covariance") for v in row) for row in value]
    if not _positive_definite(np.array(rows, dtype=np.float64)):
        raise ValueError("covariance must be symmetric and positive definite")
    return _as_cov(np.array(rows, dtype=np.float64))


def _as_cov(p: Matrix) -> _Cov:
    r0, r1, r2 = ((float(p[i, 0]), float(p[i, 1]), float(p[i, 2])) for i in range(3))
    return r0, r1, r2


def _positive_definite(p: Matrix) -> bool:
    """A 3×3 covariance read from outside: finite, symmetric (to 1e-6) and positive definite."""
    if p.shape != (3, 3) or not bool(np.all(np.isfinite(p))):
        return False
    return bool(np.allclose(p, p.T, rtol=1e-6, atol=1e-12)) and _cholesky_succeeds(p)


def _cholesky_succeeds(p: Matrix) -> bool:
    """Positive definite, for a finite matrix already symmetric (the filter's own, symmetrised after each update)."""
    try:
        np.linalg.cholesky(p)
    except np.linalg.LinAlgError:
        return False
    return True


# ---- the measurement function ------------------------------------------------------------------------------


_PROBES = np.vstack([np.zeros(3), *(sign * np.eye(3)[j] for j in range(3) for sign in (1.0, -1.0))])
"""θ and its six central-difference probes: rows 2j+1 and 2j+2 move θ_j up and down by JACOBIAN_STEP."""

RATE, INPUT, OUTPUT, BATCH, TTFT, ITL = range(6)
"""The columns of an observation table (`_observations`): λ req/s, I and O tokens, N, TTFT and ITL in ms."""
_OBSERVATION = attrgetter("arrival_rps", "input_tokens", "output_tokens", "max_batch", "ttft_ms", "itl_ms")


def _observations(envs: Iterable[Environment]) -> Matrix:
    """Environments as a table, a row each in the columns `RATE` … `ITL`: what the lockstep reads of them, read once
    a cycle (one C call an environment) rather than once a step and pass."""
    return np.array(list(map(_OBSERVATION, envs)), dtype=np.float64).reshape(-1, 6)


def _h(rows: RowMetrics) -> Matrix:
    """h = (TTFT without its decode step, ITL) per row of the model's answer; NaN rows where it has none."""
    h = np.column_stack((rows.ttft_ms - rows.itl_ms, rows.itl_ms))
    h[~rows.ok] = np.nan
    return h


def _evaluate(params: Matrix, env: Environment) -> Matrix:
    """h at each row of (α, β, γ) for one environment, in one call (NaN rows outside the model)."""
    rows = analyze_rows(
        params,
        env.input_tokens,
        env.output_tokens,
        env.arrival_rps,
        max_batch=env.max_batch,
        max_queue=QUEUE_TO_BATCH * env.max_batch,
    )
    return _h(rows)


def measure(x: Sequence[float] | Vector, env: Environment) -> Vector | None:
    """h(x): the model's (TTFT without its decode step, ITL) in ms for `env`, or None outside the model."""
    h = _evaluate(np.asarray(x, dtype=np.float64)[None, :], env)[0]
    return h if bool(np.all(np.isfinite(h))) else None


def linearise(theta: Vector, env: Environment) -> tuple[Vector | None, Matrix | None]:
    """(h(e^θ), ∂h/∂θ) from one call of seven rows: θ and its central-difference probes, step 0.01 in θ (1 % of
    each parameter). Either is None when h fails at its rows."""
    with np.errstate(all="ignore"):
        hx, h, _ = _linearise_many(np.asarray(theta, dtype=np.float64)[None, :], _observations([env]))
    hx_ok, h_ok = bool(np.isfinite(hx[0]).all()), bool(np.isfinite(h[0]).all())
    return (hx[0] if hx_ok else None), (h[0] if h_ok else None)


def _linearise_many(theta: Matrix, obs: Matrix) -> tuple[Matrix, npt.NDArray[np.float64], BoolArray]:
    """`linearise` for m variants (θ: (m, 3)), each at its own observation (a row of `obs`, `_observations`), in one
    model call of 7·m rows: h (m, 2), H (m, 2, 3), and whether both are finite (where not, they hold NaN)."""
    m, probes = len(obs), len(_PROBES)
    batch = np.repeat(obs[:, BATCH], probes).astype(np.int64)
    params = np.exp(theta[:, None, :] + JACOBIAN_STEP * _PROBES).reshape(-1, 3)
    rows = analyze_rows(
        params,
        np.repeat(obs[:, INPUT], probes),
        np.repeat(obs[:, OUTPUT], probes),
        np.repeat(obs[:, RATE], probes),
        max_batch=batch,
        max_queue=QUEUE_TO_BATCH * batch,
    )
    h = _h(rows).reshape(m, probes, 2)
    jac = _transposed((h[:, 1::2] - h[:, 2::2]) / (2 * JACOBIAN_STEP))
    evaluable = np.asarray(np.isfinite(h).all(axis=(1, 2)), dtype=np.bool_)
    return h[:, 0], jac, evaluable


def jacobian(theta: Vector, env: Environment) -> Matrix | None:
    """∂h/∂θ by central differences, step 0.01 in θ (1 % of each parameter); None if h fails at a probe."""
    return linearise(theta, env)[1]


# ---- cold start --------------------------------------------------------------------------------------------


def _new_state(x: Sequence[float], p0: Matrix, now_s: float) -> FilterState:
    lower, upper = STATE_LIMITS
    clipped = [min(max(float(v), lo), hi) for v, lo, hi in zip(x, lower, upper, strict=True)]
    return FilterState(clipped[0], clipped[1], clipped[2], _as_cov(p0), lower, upper, now_s)


def initial_state(envs: Sequence[Environment], *, now_s: float) -> FilterState:
    """A cold start: the MAP fit of θ to `envs` with P0 = diag(1²) (module docstring); the defaults with
    P0 = diag((ln 10)²) when no environment is usable or the fit fails."""
    return _started(_fit_many([[e for e in envs if e.valid]]), now_s=now_s)[0]


def _started(fitted: Sequence[tuple[float, float, float] | None], *, now_s: float) -> list[FilterState]:
    """The state each fit starts (`initial_state`): the fitted parameters with P0 = diag(1²), or the defaults with
    P0 = diag((ln 10)²) where there was no fit."""
    return [
        _new_state(DEFAULT_PARAMS, np.eye(3) * PRIOR_SD**2, now_s)
        if x is None
        else _new_state(x, np.eye(3) * COLD_START_SD**2, now_s)
        for x in fitted
    ]


def _guess(env: Environment) -> tuple[float, float, float] | None:
    """Upstream's one-pod inversion at light load (T_iter ≈ α); None when a value comes out ≤ 0."""
    if not env.valid:
        return None
    alpha = 0.9 * env.itl_ms
    beta_plus_gamma = (env.ttft_ms - alpha) / env.input_tokens
    denominator = env.input_tokens + (env.output_tokens + 1) / 2 - 1
    if beta_plus_gamma < 0 or denominator <= 0:
        return None
    gamma = ((env.itl_ms - alpha) - beta_plus_gamma) / denominator
    beta = beta_plus_gamma - gamma
    if alpha <= 0 or beta <= 0 or gamma <= 0:
        return None
    return alpha, beta, gamma


_LOG_LOWER, _LOG_UPPER = np.log(np.array(STATE_LIMITS[0])), np.log(np.array(STATE_LIMITS[1]))
_LOG_PRIOR = np.log(np.array(DEFAULT_PARAMS))
_PRIOR_WEIGHT = 1.0 / PRIOR_SD**2
_DIFFERENCE_STEP = float(np.finfo(np.float64).eps) ** 0.5
"""The forward differences' step in θ, relative to max(1, |θ_j|) (scipy's `2-point` default)."""


class _Runs(NamedTuple):
    """The fit's runs, one per variant and start, with their pods flattened: run r's pods are the rows
    `starts[r]` … `ends[r] − 1` of the pod columns (each run carries its own copy of its variant's pods)."""

    problem: list[int]
    """The variant each run fits (its index in `_fit_many`'s problems)."""
    theta0: Matrix
    starts: npt.NDArray[np.intp]
    ends: npt.NDArray[np.intp]
    run_of_row: npt.NDArray[np.intp]
    input_tokens: Vector
    output_tokens: Vector
    arrival_rps: Vector
    max_batch: npt.NDArray[np.int64]
    z: Matrix

    @staticmethod
    def of(
        problems: Sequence[Sequence[Environment]], previous: Sequence[tuple[float, float, float] | None] = ()
    ) -> _Runs:
        """The runs of each variant with environments: from the defaults, from the guess of its least loaded pod
        that has one (the guess assumes a light load), when that start (the defaults without a guess) leaves a pod
        unserved, from it scaled down to serve every pod (`_serving`), and, when the variant has `previous`
        parameters (a re-fit), from what it had learned."""
        problem: list[int] = []
        theta0: list[Vector] = []
        pods: list[Environment] = []
        starts: list[int] = []
        for index, envs in enumerate(problems):
            if not envs:
                continue
            guesses = [g for e in sorted(envs, key=_by_arrivals) if (g := _guess(e)) is not None]
            origins = list(dict.fromkeys([DEFAULT_PARAMS, *guesses]))[:MAX_FIT_STARTS]
            served = _serving(origins[1] if len(origins) > 1 else origins[0], envs)
            learned = previous[index] if index < len(previous) else None
            for origin in origins + [o for o in (served, learned) if o is not None]:
                problem.append(index)
                theta0.append(np.clip(np.log(np.array(origin)), _LOG_LOWER + 1e-9, _LOG_UPPER - 1e-9))
                starts.append(len(pods))
                pods.extend(envs)
        bounds = np.array([*starts, len(pods)], dtype=np.intp)
        return _Runs(
            problem,
            np.array(theta0, dtype=np.float64).reshape(len(problem), 3),
            bounds[:-1],
            bounds[1:],
            np.repeat(np.arange(len(problem), dtype=np.intp), np.diff(bounds)),
            np.array([e.input_tokens for e in pods], dtype=np.float64),
            np.array([e.output_tokens for e in pods], dtype=np.float64),
            np.array([e.arrival_rps for e in pods], dtype=np.float64),
            np.array([e.max_batch for e in pods], dtype=np.int64),
            np.array([(e.ttft_ms, e.itl_ms) for e in pods], dtype=np.float64).reshape(len(pods), 2),
        )

    def rows_of(self, which: npt.NDArray[np.intp]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
        """The pod rows of the runs `which` (ascending), run after run, and where each run's rows begin among them
        (the `np.add.reduceat` segments)."""
        counts = self.ends[which] - self.starts[which]
        begins = np.cumsum(counts) - counts
        rows = np.arange(int(counts.sum()), dtype=np.intp) + np.repeat(self.starts[which] - begins, counts)
        return rows, begins.astype(np.intp)

    def residuals(self, theta: Matrix, rows: npt.NDArray[np.intp]) -> Matrix:
        """The residual rows (len(rows), 2) of the pods `rows`, each at its run's θ (`theta`, a row per run):
        (h − z) / (σ_z·z), or, for a pod the model cannot serve there, (FIT_PENALTY + ln(λ/λ_max)) / σ_z in both
        components (FIT_PENALTY + 10 when the model cannot be built at all). One model call for all of them."""
        batch = self.max_batch[rows]
        answer = analyze_rows(
            np.exp(theta[self.run_of_row[rows]]),
            self.input_tokens[rows],
            self.output_tokens[rows],
            self.arrival_rps[rows],
            max_batch=batch,
            max_queue=QUEUE_TO_BATCH * batch,
        )
        h, z = _h(answer), self.z[rows]
        out = (h - z) / (RELATIVE_SD * z)
        unserved = ~np.isfinite(h).all(axis=1)
        if unserved.any():
            max_rps, arrivals = answer.max_rps[unserved], self.arrival_rps[rows][unserved]
            known = np.isfinite(max_rps) & (max_rps > 0)
            overload = np.full(len(max_rps), 10.0)
            overload[known] = np.maximum(0.0, np.log(arrivals[known] / max_rps[known]))
            out[unserved] = ((FIT_PENALTY + overload) / RELATIVE_SD)[:, None]
        return out


def _serving(origin: tuple[float, float, float], envs: Sequence[Environment]) -> tuple[float, float, float] | None:
    """`origin` scaled down until the model serves every pod with room (λ ≤ λ_max / SERVED_MARGIN), or None when
    it already does. Scaling (α, β, γ) by 1/s scales the service terms a, b by 1/s and so every μ_n, λ_max with it,
    by s: s = SERVED_MARGIN · max λ / λ_max(origin). Why: a start that leaves a pod unserved must cross the cliff
    where that pod becomes served at saturation (a residual ~10⁴ against the penalty's ~4·10²), which a local
    method does not; from this start it comes from the served side."""
    alpha, beta, gamma = origin
    worst = 0.0
    for env in envs:
        a, b = Work(alpha, beta, gamma, env.input_tokens, env.output_tokens).service_terms()
        top_rps = env.max_batch / (a + b * env.max_batch) * 1000.0
        worst = max(worst, env.arrival_rps / top_rps if top_rps > 0 else math.inf)
    scale = SERVED_MARGIN * worst
    if not (1.0 < scale < math.inf):
        return None
    return alpha / scale, beta / scale, gamma / scale


def _by_arrivals(env: Environment) -> float:
    return env.arrival_rps


def _costs(res: Matrix, segments: npt.NDArray[np.intp], theta: Matrix) -> Vector:
    """F = ½ Σ r² of each run: its pods' residual rows (`res`, run after run from `segments`) and its prior's."""
    prior = (((theta - _LOG_PRIOR) / PRIOR_SD) ** 2).sum(axis=1)
    return np.asarray(0.5 * (np.add.reduceat((res * res).sum(axis=1), segments) + prior), dtype=np.float64)


def _normal_equations(runs: _Runs, theta: Matrix, res: Matrix, which: npt.NDArray[np.intp]) -> tuple[Matrix, Matrix]:
    """A = JᵀJ and g = Jᵀr of the runs `which` at their θ (`res`: every pod's residual rows there), the prior's
    rows included (exactly: their Jacobian is I / ln 10). J of the pods' rows by forward differences, one model
    call a parameter; a step that would leave the state limits goes backwards."""
    rows, segments = runs.rows_of(which)
    at = res[rows]
    jac = np.empty((len(rows), 2, 3))
    for j in range(3):
        step = _DIFFERENCE_STEP * np.maximum(1.0, np.abs(theta[:, j]))
        step = np.where(theta[:, j] + step > _LOG_UPPER[j], -step, step)
        probe = theta.copy()
        probe[:, j] += step
        jac[:, :, j] = (runs.residuals(probe, rows) - at) / step[runs.run_of_row[rows], None]
    a = np.add.reduceat(np.einsum("pki,pkj->pij", jac, jac), segments, axis=0) + np.eye(3) * _PRIOR_WEIGHT
    g = np.add.reduceat(np.einsum("pki,pk->pi", jac, at), segments, axis=0)
    return a, g + (theta[which] - _LOG_PRIOR) * _PRIOR_WEIGHT


def _damped_steps(
    theta: Matrix, a: Matrix, g: Matrix, mu: Vector, reach: Vector
) -> tuple[Matrix, npt.NDArray[np.bool_]]:
    """Each run's damped step δ = −(A + μ·diag A)⁻¹ g, shortened to its trust radius (`reach`, the longest move
    of one θ_j), and whether the run is done instead: its free gradient is ≤ 1e-8 in every θ_j (a minimum), or
    its system cannot be solved. A parameter at a state limit whose gradient points out of the box is held there
    (its row and column of the system replaced by the identity's, its gradient by 0)."""
    held = ((theta <= _LOG_LOWER) & (g > 0)) | ((theta >= _LOG_UPPER) & (g < 0))
    free = (~held).astype(np.float64)
    gradient = g * free
    damped = (a + mu[:, None, None] * (np.eye(3) * a)) * free[:, :, None] * free[:, None, :]
    damped += np.eye(3) * (1.0 - free)[:, :, None]
    solvable = np.isfinite(damped).all(axis=(1, 2)) & np.isfinite(gradient).all(axis=1)
    solvable[solvable] &= np.linalg.det(damped[solvable]) != 0
    delta = np.zeros_like(theta)
    delta[solvable] = -np.linalg.solve(damped[solvable], gradient[solvable][:, :, None])[:, :, 0]
    longest = np.abs(delta).max(axis=1)
    delta *= np.minimum(1.0, reach / np.maximum(longest, 1e-300))[:, None]
    flat = solvable & (np.abs(gradient).max(axis=1) <= 1e-8)
    return delta, ~solvable | flat


def _fit_many(
    problems: Sequence[Sequence[Environment]], previous: Sequence[tuple[float, float, float] | None] = ()
) -> list[tuple[float, float, float] | None]:
    """The MAP fit (module docstring) of every variant of `problems` (each its valid environments), in lockstep: a
    Levenberg–Marquardt run for each variant from the one of its starts (`_Runs.of`) where F is lowest
    (`_lowest_of_each`), every evaluation one `analyze_rows` call for the pods of every run still going.

        minimise  F(θ) = ½ Σ r(θ)²   r: the pods' residual rows (`_Runs.residuals`), (θ − log x_default) / ln 10
        step      δ = −(A + μ·diag A)⁻¹ g   (A = JᵀJ, g = Jᵀr: `_normal_equations`; `_damped_steps`), no move of a
                  θ_j longer than the trust radius; θ' = θ + δ clipped to the state limits
        accept    F(θ') < F(θ): μ ← μ·max(1/3, 1 − (2ρ − 1)³), ν ← 2 (Nielsen), ρ = the decrease over the one the
                  quadratic model predicted; the radius at least doubles when ρ > 0.75
        reject    μ ← μ·ν, ν ← 2ν; the radius ← half the step's longest move
        stop      a decrease ≤ t·F or a move ≤ t·(t + ‖θ‖) (t = `FIT_TOLERANCE`), the free gradient ≤ 1e-8,
                  μ > 1e16, or `FIT_MAX_EVALUATIONS` steps

    Each variant's answer is where its run ends; None for a variant without environments.
    Worked example (tests/queueing/test_ekf.py): four pods observed without noise at (20, 0.08, 2e-4) give back
    each parameter within 5 %.

    Why not scipy's `least_squares` a variant (the fit until 2026-11-27): each of its ~80 evaluations (Jacobian
    included) solved the variant's pods one by one, and the solver has its own work a step: 25–50 ms a variant of
    10 pods, so a 1,000-VA fleet's first cycle took ~43 s, and filters lost every few cycles (the simulator's
    servers, further from the model than 5 %) re-fit that often (docs/benchmarks/scale.md, item 16). Here the rows
    of every run share each call (~1 µs a row). tests/queueing/test_ekf.py compares what it finds with
    `least_squares` on generated variants. The third start (`_serving`) is what makes it reach as low: without it,
    from starts that leave a pod unserved, a local method stalls at the cliff where the pod becomes served at
    saturation (a residual ~10⁴, against the penalty's ~4·10²), which trf's larger first steps often jumped."""
    if len(problems) > FIT_CHUNK:  # each variant's fit is its own (tests/queueing/test_ekf.py): chunks change nothing
        return [
            answer
            for start in range(0, len(problems), FIT_CHUNK)
            for answer in _fit_many(problems[start : start + FIT_CHUNK], previous[start : start + FIT_CHUNK])
        ]
    runs = _Runs.of(problems, previous)
    answers: list[tuple[float, float, float] | None] = [None] * len(problems)
    if not runs.problem:
        return answers
    with np.errstate(all="ignore"):
        search = _Lockstep(runs)
        search.run()
    for run in np.flatnonzero(search.chosen).tolist():
        if np.isfinite(search.theta[run]).all():
            alpha, beta, gamma = (float(v) for v in np.exp(search.theta[run]))
            answers[runs.problem[run]] = (alpha, beta, gamma)
    return answers


def _lowest_of_each(problem: Sequence[int], cost: Vector) -> BoolArray:
    """The run of lowest finite cost of each variant (the first on a tie): the one that goes on from its start.

    Why one run a variant, not all of them (2026-11-28): a start ahead at the outset nearly always stays ahead.
    Every start run to its end and the best kept, against the best start alone, on the fits of the simulator's
    learning runs (seed 0: 584 variants), the benchmark's fleet (796) and 360 generated variants: an answer within
    0.1 % of the cost on all but 25, 1 and 2 of them, for a third of the work; in the closed loop (148 runs each of
    the predictive analyzer learning and of `wva-slo`, seeds 0–3) attainment 86.64 → 86.64 % and 67.17 → 68.38 %,
    cost −0.04 % and +1.2 % (docs/benchmarks/scale.md, item 18)."""
    finite = np.where(np.isfinite(cost), cost, np.inf)
    runs = np.asarray(problem, dtype=np.intp)
    lowest = np.full(int(runs.max(initial=-1)) + 1, np.inf)
    np.minimum.at(lowest, runs, finite)
    chosen = np.zeros(len(runs), dtype=np.bool_)
    candidates = np.flatnonzero(np.isfinite(finite) & (finite == lowest[runs]))
    _, first = np.unique(runs[candidates], return_index=True)
    chosen[candidates[first]] = True
    return chosen


class _Lockstep:
    """Every run of a lockstep fit as columns (`_fit_many`): θ, F, the damping μ and its factor ν, the trust
    radius, A and g at θ (stale after an accepted step), the pods' residual rows at θ, the run chosen for each
    variant (its start of lowest F, `_lowest_of_each`; the others stay at their starts) and which runs go on."""

    def __init__(self, runs: _Runs) -> None:
        count = len(runs.problem)
        self.runs = runs
        self.theta = runs.theta0.copy()
        self.res = runs.residuals(self.theta, np.arange(len(runs.run_of_row), dtype=np.intp))
        self.cost = _costs(self.res, runs.starts, self.theta)
        self.mu, self.nu, self.reach = np.full(count, 1e-3), np.full(count, 2.0), np.full(count, FIT_FIRST_REACH)
        self.a, self.g = np.zeros((count, 3, 3)), np.zeros((count, 3))
        self.stale = np.ones(count, dtype=np.bool_)
        self.chosen = _lowest_of_each(runs.problem, self.cost)
        self.going = self.chosen.copy()

    def run(self) -> None:
        """Step until no run is left going, at most `FIT_MAX_EVALUATIONS` steps."""
        for _ in range(FIT_MAX_EVALUATIONS):
            if not self.step():
                break

    def step(self) -> bool:
        """One step of every run still going (`_fit_many`'s docstring); False when none is left."""
        runs, theta, a, g = self.runs, self.theta, self.a, self.g
        fresh = np.flatnonzero(self.going & self.stale)
        if fresh.size:
            a[fresh], g[fresh] = _normal_equations(runs, theta, self.res, fresh)
            self.stale[fresh] = False
        live = np.flatnonzero(self.going)
        delta, done = _damped_steps(theta[live], a[live], g[live], self.mu[live], self.reach[live])
        self.going[live[done]] = False
        live, delta = live[~done], delta[~done]
        if not live.size:
            return False
        trial = np.clip(theta[live] + delta, _LOG_LOWER, _LOG_UPPER)
        moved = trial - theta[live]
        rows, segments = runs.rows_of(live)
        probe = theta.copy()
        probe[live] = trial
        trial_res = runs.residuals(probe, rows)
        trial_cost = _costs(trial_res, segments, trial)
        before = self.cost[live]
        drop = before - trial_cost
        quadratic = np.einsum("ri,ri->r", g[live], moved) + 0.5 * np.einsum("ri,rij,rj->r", moved, a[live], moved)
        taken = drop > 0  # NaN is not
        kept = np.repeat(taken, np.diff(np.append(segments, len(rows))))
        self.res[rows[kept]] = trial_res[kept]
        ok = live[taken]
        theta[ok], self.cost[ok], self.stale[ok] = trial[taken], trial_cost[taken], True
        self._adapt(live, taken, np.where(quadratic < 0, drop / -quadratic, 0.0), np.abs(moved).max(axis=1))
        small_drop = taken & (drop <= FIT_TOLERANCE * before)
        small_move = np.linalg.norm(moved, axis=1) <= FIT_TOLERANCE * (
            FIT_TOLERANCE + np.linalg.norm(theta[live], axis=1)
        )
        self.going[live[small_drop | small_move | (self.mu[live] > 1e16)]] = False
        return True

    def _adapt(self, live: npt.NDArray[np.intp], taken: npt.NDArray[np.bool_], rho: Vector, longest: Vector) -> None:
        """μ, ν and the trust radius after a step: taken (ρ the actual over the predicted decrease) or not."""
        mu, nu, reach = self.mu, self.nu, self.reach
        ok, no = live[taken], live[~taken]
        mu[ok] *= np.maximum(1.0 / 3.0, 1.0 - (2.0 * rho[taken] - 1.0) ** 3)
        nu[ok] = 2.0
        widen = taken & (rho > 0.75)
        reach[live[widen]] = np.maximum(reach[live[widen]], 2.0 * longest[widen])
        mu[no] *= nu[no]
        nu[no] *= 2.0
        reach[no] = np.maximum(0.5 * longest[~taken], 1e-12)


# ---- update --------------------------------------------------------------------------------------------------


@fast_init
@dataclass(frozen=True, slots=True)
class Outcome:
    """A cycle's result: the state to keep, how many observations were accepted and rejected, why (the first
    rejection of each kind, in order: `REJECTIONS`), and how the filter (re)started this cycle ("" / "cold start" /
    "re-fitted")."""

    state: FilterState
    accepted: int = 0
    rejected: int = 0
    reasons: tuple[str, ...] = field(default_factory=tuple)
    started: str = ""


def update(state: FilterState, environments: Sequence[Environment], *, now_s: float) -> Outcome:
    """Run the filter over this cycle's environments, in order. Never raises: an observation that cannot be
    used (gate, non-finite numbers, a singular or indefinite S, a model error) is rejected with a reason and
    leaves θ and P as they were. `update_many` with one variant."""
    return update_many([(state, environments)], now_s=now_s)[0]


def update_many(jobs: Sequence[tuple[FilterState, Sequence[Environment]]], *, now_s: float) -> list[Outcome]:
    """`update` for many variants in lockstep: step k takes the k-th observation of every variant that has one, all
    in one model call (7 rows a variant) and one array operation per line of the filter's equations. Variants do
    not interact: each one's outcome is its `update` alone, up to the last bits of rounding (the array solve and
    stacked matrix products round as they do; tests/queueing/test_ekf.py). Why: a variant's observations are
    sequential, so one variant is ~10 model calls of 7 rows a cycle, each mostly call overhead (~130 µs); in
    lockstep the rows of a whole block of variants share each call (~0.6 µs a row)."""
    table, firsts, lengths = _valid_only(
        _observations(chain.from_iterable(environments for _, environments in jobs)), [len(e) for _, e in jobs]
    )
    return _update_valid([state for state, _ in jobs], table, firsts, lengths, now_s=now_s)


def _update_valid(
    states: Sequence[FilterState], table: Matrix, firsts: IndexArray, lengths: IndexArray, *, now_s: float
) -> list[Outcome]:
    """`update_many` of valid observations: variant j's are the rows `firsts[j]` … `firsts[j] + lengths[j] − 1` of
    `table` (`_observations`, `_valid_only`), in order; step k takes row `firsts[j] + k` of each variant j still
    observing."""
    count = len(states)
    if not count:
        return []
    x = np.log(np.array([(s.alpha_ms, s.beta_ms, s.gamma_ms) for s in states], dtype=np.float64).reshape(count, 3))
    p = np.array([s.covariance for s in states], dtype=np.float64).reshape(count, 3, 3)
    lo = np.log(np.array([s.lower for s in states], dtype=np.float64)).reshape(count, 3)
    hi = np.log(np.array([s.upper for s in states], dtype=np.float64)).reshape(count, 3)
    q = np.eye(3) * PERCENT_CHANGE**2
    accepted, rejected = np.zeros(count, dtype=np.intp), np.zeros(count, dtype=np.intp)
    nis_last, has_nis = np.zeros(count), np.zeros(count, dtype=np.bool_)
    reasons: dict[int, list[str]] = {}
    seen = np.zeros((count, len(REJECTIONS)), dtype=np.bool_)  # the kinds of rejection each variant has had
    for k in range(int(lengths.max(initial=0))):
        rows = np.flatnonzero(lengths > k)
        with np.errstate(all="ignore"):
            steps = _steps(x[rows], p[rows] + q, table[firsts[rows] + k], lo=lo[rows], hi=hi[rows])
        taken = steps.rejection < 0
        x[rows[taken]], p[rows[taken]] = steps.theta[taken], steps.p[taken]
        accepted[rows[taken]] += 1
        rejected[rows[~taken]] += 1
        nis_last[rows[taken]], has_nis[rows[taken]] = steps.nis[taken], True
        variants, kinds, values = rows[~taken], steps.rejection[~taken], steps.value[~taken]
        first = ~seen[variants, kinds]  # a variant has one observation a step: one rejection at most
        seen[variants[first], kinds[first]] = True
        for j, kind, value in zip(variants[first].tolist(), kinds[first].tolist(), values[first].tolist(), strict=True):
            reasons.setdefault(j, []).append(REJECTIONS[kind].format(value))
    learned, covariances = np.exp(x).tolist(), p.tolist()
    counts = zip(
        accepted.tolist(), rejected.tolist(), nis_last.tolist(), has_nis.tolist(), lengths.tolist(), strict=True
    )
    outcomes = []
    for j, (state, (taken_j, rejected_j, nis, has, observed)) in enumerate(zip(states, counts, strict=True)):
        if not observed:
            outcomes.append(Outcome(state, reasons=("no busy pod with TTFT and ITL",)))
            continue
        # nothing accepted: the parameters and covariance stay bit for bit; the bookkeeping moves either way
        alpha, beta, gamma = learned[j] if taken_j else (state.alpha_ms, state.beta_ms, state.gamma_ms)
        c0, c1, c2 = covariances[j]
        new = FilterState(
            alpha,
            beta,
            gamma,
            ((c0[0], c0[1], c0[2]), (c1[0], c1[1], c1[2]), (c2[0], c2[1], c2[2])) if taken_j else state.covariance,
            state.lower,
            state.upper,
            now_s,
            state.accepted + taken_j,
            state.rejected + rejected_j,
            nis if has else state.last_nis,
            state.lost_cycles + 1 if 2 * rejected_j >= observed else 0,
        )
        outcomes.append(Outcome(new, taken_j, rejected_j, tuple(reasons.get(j, ()))))
    return outcomes


def measurement_noise(env: Environment) -> Matrix:
    """R = diag((σ_z·z)²) from this pod's own latencies. Example: TTFT 200 ms, ITL 30 ms →
    σ_z = 0.05/1.96 = 0.025510, R = diag(5.1020², 0.76531²) = diag(26.031, 0.58569) ms²."""
    return np.diag((RELATIVE_SD * env.z) ** 2)


def normalized_innovation_squared(y: Vector, s: Matrix) -> float:
    """NIS = yᵀ S⁻¹ y; NaN when S is not symmetric positive definite. Example: y = (4, 2), S = diag(4, 1):
    16/4 + 4/1 = 8 ≥ 7.378, so the observation is rejected."""
    if s.shape != (2, 2) or not bool(_symmetric_pd_2x2(s[None])[0]):
        return math.nan
    return float(y @ np.linalg.inv(s) @ y)


REJECTIONS = (
    "the model cannot evaluate {:.3g} req/s at the current parameters",
    "innovation covariance not positive definite",
    "observation rejected by the NIS gate ({:.3g} >= " + f"{NIS_GATE})",
    "update left the parameters or their covariance not finite",
)
"""Why an observation is rejected, by kind (`_Steps.rejection`), each formatted with the kind's value (the arrival
rate, the NIS; NaN and unused for the others). Example: kind 2 with NIS 8.0 reads "observation rejected by the
NIS gate (8 >= 7.378)"."""
_UNEVALUABLE, _INDEFINITE, _GATED, _NOT_FINITE = range(len(REJECTIONS))


class _Steps(NamedTuple):
    """`_steps`' answer per variant: θ and P after the step, the NIS, and the kind of rejection of its observation
    (an index of `REJECTIONS`; −1 when accepted, else θ and P are not to be used) with the value its reason names."""

    theta: Matrix
    p: npt.NDArray[np.float64]
    nis: Vector
    rejection: npt.NDArray[np.intp]
    value: Vector


def _transposed(m: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return np.swapaxes(m, -1, -2)


def _steps(x: Matrix, p: npt.NDArray[np.float64], obs: Matrix, *, lo: Matrix, hi: Matrix) -> _Steps:
    """One gated, iterated update of θ = log x for each of m variants (x: (m, 3), p: (m, 3, 3), already
    predicted), each with its own observation (a row of `obs`, `_observations`): the module docstring's equations,
    one array operation per line."""
    m = len(obs)
    z = obs[:, TTFT : ITL + 1]
    r = np.zeros((m, 2, 2))
    r[:, [0, 1], [0, 1]] = (RELATIVE_SD * z) ** 2
    rejection, value = np.full(m, -1, dtype=np.intp), np.full(m, math.nan)
    nis = np.full(m, math.nan)
    hx, h, evaluable = _linearise_many(x, obs)
    rejection[~evaluable], value[~evaluable] = _UNEVALUABLE, obs[~evaluable, RATE]
    y = z - hx
    s = h @ p @ _transposed(h) + r
    definite = _symmetric_pd_2x2(s)
    rejection[evaluable & ~definite] = _INDEFINITE
    live = evaluable & definite
    s_inv = np.zeros_like(s)
    s_inv[live] = np.linalg.inv(s[live])
    nis[live] = (y[live, None, :] @ s_inv[live] @ y[live, :, None])[:, 0, 0]
    gated = live & ~(nis < NIS_GATE)  # NaN is gated too
    rejection[gated], value[gated] = _GATED, nis[gated]
    live &= ~gated
    k = p @ _transposed(h) @ s_inv
    theta = np.clip(x + (k @ y[:, :, None])[:, :, 0], lo, hi)
    last = x.copy()
    moving = live.copy()
    for _ in range(MAX_PASSES - 1):
        moving &= np.abs(theta - last).max(axis=1) > RELINEARIZE_ABOVE
        if not moving.any():
            break
        rows = np.flatnonzero(moving)
        hx_i, h_i, evaluable_i = _linearise_many(theta[rows], obs[rows])
        s_i = h_i @ p[rows] @ _transposed(h_i) + r[rows]
        good = evaluable_i & _symmetric_pd_2x2(s_i)
        moving[rows[~good]] = False  # keep the last pass that could be evaluated
        rows, hx_i, h_i, s_i = rows[good], hx_i[good], h_i[good], s_i[good]
        k_i = p[rows] @ _transposed(h_i) @ np.linalg.inv(s_i)
        x_r, theta_r = x[rows], theta[rows]
        innovation = z[rows] - hx_i - (h_i @ (x_r - theta_r)[:, :, None])[:, :, 0]
        last[rows], theta[rows] = theta_r, np.clip(x_r + (k_i @ innovation[:, :, None])[:, :, 0], lo[rows], hi[rows])
        k[rows], h[rows] = k_i, h_i
    i_kh = np.eye(3) - k @ h
    p_new = i_kh @ p @ _transposed(i_kh) + k @ r @ _transposed(k)
    p_new = (p_new + _transposed(p_new)) / 2  # exactly symmetric: a + b == b + a in floating point
    finite = np.isfinite(theta).all(axis=1) & np.isfinite(p_new).all(axis=(1, 2))
    rejection[live & ~_cholesky_succeeds_each(p_new, live & finite)] = _NOT_FINITE
    return _Steps(theta, p_new, nis, rejection, value)


def _cholesky_succeeds_each(p: npt.NDArray[np.float64], rows: BoolArray) -> BoolArray:
    """`_cholesky_succeeds` for the stack's matrices where `rows` (False elsewhere): one LAPACK call for all of
    them, and one by one only when some matrix fails (numpy then raises for the whole stack)."""
    succeeds = np.asarray(rows, dtype=np.bool_).copy()
    try:
        np.linalg.cholesky(p[succeeds])
    except np.linalg.LinAlgError:
        for j in np.flatnonzero(succeeds).tolist():
            succeeds[j] = _cholesky_succeeds(p[j])
    return succeeds


def _symmetric_pd_2x2(s: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
    """Per 2×2 matrix of the stack `s`: finite, symmetric within 1e-6 relative, positive definite."""
    s01, s10, s00, s11 = s[:, 0, 1], s[:, 1, 0], s[:, 0, 0], s[:, 1, 1]
    finite = np.isfinite(s).all(axis=(1, 2))
    symmetric = np.abs(s01 - s10) <= np.maximum(1e-6 * np.maximum(np.abs(s01), np.abs(s10)), 1e-12)
    with np.errstate(all="ignore"):
        definite = finite & symmetric & (s00 > 0) & (s11 > 0) & (s00 * s11 - s01 * s10 > 0)
    return np.asarray(definite, dtype=np.bool_)


# ---- one cycle -------------------------------------------------------------------------------------------------


def advance(previous: FilterState | None, environments: Sequence[Environment], *, now_s: float) -> Outcome | None:
    """One cycle of learning for one variant: a cold start when nothing was learned (no update on the same
    observations); a re-fit when the filter is lost (`LOST_AFTER_CYCLES`); else `update`. Without a usable
    observation the previous state is kept, and None is returned when there is none (nothing to learn from)."""
    return advance_many([(previous, environments)], now_s=now_s)[0]


def advance_many(
    jobs: Sequence[tuple[FilterState | None, Sequence[Environment]]], *, now_s: float
) -> list[Outcome | None]:
    """`advance` for many variants: every cold start and re-fit in one lockstep fit (`_fit_many`), every update in
    one `update_many`."""
    table = _observations(chain.from_iterable(environments for _, environments in jobs))
    return _advance([previous for previous, _ in jobs], table, [len(e) for _, e in jobs], now_s=now_s)


def _advance(
    previous: Sequence[FilterState | None], table: Matrix, lengths: Sequence[int], *, now_s: float
) -> list[Outcome | None]:
    """`advance_many` of every variant's observations as rows of one table (`_observations`), variant after
    variant, `lengths[j]` rows for variant j: the valid ones kept (`_valid_only`), the fits given them as
    environments, the updates as rows."""
    table, firsts, counts = _valid_only(table, lengths)
    outcomes: list[Outcome | None] = [None] * len(previous)
    updates: list[int] = []
    fits: list[int] = []
    for index, (state, observed) in enumerate(zip(previous, counts.tolist(), strict=True)):
        if state is None:
            if observed:
                fits.append(index)
        elif not observed:
            outcomes[index] = Outcome(state, reasons=("no busy pod with TTFT and ITL",))
        elif state.lost_cycles >= LOST_AFTER_CYCLES:
            fits.append(index)
        else:
            updates.append(index)
    problems = [_environments(table[firsts[i] : firsts[i] + counts[i]]) for i in fits]
    learned = [(p.alpha_ms, p.beta_ms, p.gamma_ms) if (p := previous[i]) is not None else None for i in fits]
    for index, state in zip(fits, _started(_fit_many(problems, learned), now_s=now_s), strict=True):
        before = previous[index]
        if before is None:
            outcomes[index] = Outcome(state, started="cold start")
        else:
            outcomes[index] = Outcome(
                replace(state, accepted=before.accepted, rejected=before.rejected), started="re-fitted"
            )
    rows = np.array(updates, dtype=np.intp)
    states = [state for i in updates if (state := previous[i]) is not None]
    updated = _update_valid(states, table, firsts[rows], counts[rows], now_s=now_s)
    for index, outcome in zip(updates, updated, strict=True):
        outcomes[index] = outcome
    return outcomes


def learn(previous: FilterState | None, load: VariantLoad, *, now_s: float) -> Outcome | None:
    """One cycle of learning from a variant's busy pods: `advance` over one observation per pod (`environments`);
    `learn_many` of one variant, so one path reads the pods."""
    return learn_many([(previous, load)], now_s=now_s)[0]


def learn_many(jobs: Sequence[tuple[FilterState | None, VariantLoad]], *, now_s: float) -> list[Outcome | None]:
    """`learn` for many variants, in lockstep (`advance_many`): every busy pod's observation read straight into the
    table the lockstep reads (`_observed`), without an `Environment` a pod."""
    loads = [load for _, load in jobs]
    return _advance(
        [previous for previous, _ in jobs], _observed(loads), [len(load.busy) for load in loads], now_s=now_s
    )


def environments(load: VariantLoad) -> list[Environment]:
    """One observation per busy pod (latencies in ms); invalid ones are dropped by the filter. Each value is
    `usable(x)` written out (x when finite and > 0, else 0). The filter reads the same numbers as arrays
    (`_observed`, equal to these bit for bit: tests/queueing/test_slo.py); this is their form as objects."""
    isfinite, batch = math.isfinite, load.max_batch
    return [
        Environment(
            rate if rate is not None and isfinite(rate) and rate > 0 else 0.0,
            i if i is not None and isfinite(i) and i > 0 else 0.0,
            o if o is not None and isfinite(o) and o > 0 else 0.0,
            batch,
            (ttft if ttft is not None and isfinite(ttft) and ttft > 0 else 0.0) * 1000.0,
            (itl if itl is not None and isfinite(itl) and itl > 0 else 0.0) * 1000.0,
        )
        for rate, i, o, ttft, itl in map(_OBSERVED, load.busy)
    ]


_OBSERVED = attrgetter("arrival_rate_rps", "avg_input_tokens", "avg_output_tokens", "avg_ttft_s", "avg_itl_s")
"""What `environments` reads of a pod, in one C call."""


def _observed(loads: Sequence[VariantLoad]) -> Matrix:
    """`environments` of every load as one observation table (`_observations`' columns), load after load: each
    value `usable(x)` over the arrays (a missing value is NaN, so 0 as in `environments`), the latencies in ms.
    The same numbers as `_observations` of `environments`, bit for bit (tests/queueing/test_slo.py)."""
    pods = [pod for load in loads for pod in load.busy]
    # one flat iterator of floats (None is NaN, as in np.array): ~0.3 µs a pod, against ~0.8 µs for np.array of a
    # list of 5-tuples, which inspects every tuple as a sequence (docs/benchmarks/scale.md, item 38)
    raw = np.fromiter(chain.from_iterable(map(_OBSERVED, pods)), np.float64, 5 * len(pods)).reshape(len(pods), 5)
    table = np.empty((len(pods), 6))
    with np.errstate(invalid="ignore", over="ignore"):  # a latency near the float range is inf in ms, as in Python
        raw = np.where(np.isfinite(raw) & (raw > 0), raw, 0.0)
        table[:, [TTFT, ITL]] = raw[:, 3:] * 1000.0
    table[:, [RATE, INPUT, OUTPUT]] = raw[:, :3]
    table[:, BATCH] = np.repeat([load.max_batch for load in loads], [len(load.busy) for load in loads])
    return table


def _valid_only(table: Matrix, lengths: Sequence[int]) -> tuple[Matrix, IndexArray, IndexArray]:
    """The valid rows of an observation table whose variant j has `lengths[j]` rows, variant after variant
    (`Environment.valid` over the arrays), and where each variant's valid rows begin and how many they are."""
    with np.errstate(invalid="ignore"):  # NaN fails each comparison
        valid = ((table > 0) & (table < math.inf)).all(axis=1) & (table[:, OUTPUT] >= 1)
    kept = np.concatenate(([0], np.cumsum(valid)))
    bounds = np.concatenate(([0], np.cumsum(np.asarray(lengths, dtype=np.intp))))
    firsts = kept[bounds[:-1]]
    return table[valid], firsts.astype(np.intp), (kept[bounds[1:]] - firsts).astype(np.intp)


def _environments(rows: Matrix) -> list[Environment]:
    """The environments of rows of an observation table (for the fits, which read them one by one)."""
    return [Environment(rate, i, o, int(batch), ttft, itl) for rate, i, o, batch, ttft, itl in rows.tolist()]
