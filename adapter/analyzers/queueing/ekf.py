"""Online learning of a variant's service parameters x = (α, β, γ) with an extended Kalman filter (seed 003;
research §3.6).

One observation per busy pod ("environment"): its arrival rate λ, request size (I, O), batch limit N, and the
measured z = (TTFT, ITL) in ms. The measurement function is the queueing model itself:

    h(x) = (W + prefill, ITL) of QueueModel(α, β, γ; I, O; N, queue 10·N).analyze(λ)
           (the tuner's TTFT leaves out the one decode step that `analyze().ttft_ms` includes)

The filter runs on θ = log x (so every parameter stays positive and its uncertainty is relative: γ ≈ 2e-4 and
α ≈ 20 get the same treatment). Each cycle, for each environment in turn, with θ a random walk:

    predict   P ← P + Q                                   Q = diag(0.01²)        (1 % drift per observation)
    update    y = z − h(e^θ);  H = ∂h/∂θ (central differences, step 0.01, i.e. 1 % of x)
              S = H P Hᵀ + R;  K = P Hᵀ S⁻¹;  θ ← clamp(θ + K y);  P ← (I − K H) P
              R = diag(((0.05 / 1.96)² / 1.0) · z_first²)   (5 % error at 95 %, from the first busy pod)
    gate      NIS = yᵀ S⁻¹ y ≥ 7.378 (the χ²₂ 97.5 % quantile), a non-positive parameter, a singular S or a
              model error → the update is rejected and x, P stay as they were

Worked example of the gate: with S = diag(4, 1) and y = (4, 2), NIS = 16/4 + 4/1 = 8 ≥ 7.378 → rejected.

Start: the persisted state; else a bootstrap from this cycle's observations — a least-squares fit of the model
to every busy pod, started from upstream's one-pod guess (α = 0.9·ITL, β+γ = (TTFT − α)/I,
γ = (ITL − α − (β+γ)) / (I + (O+1)/2 − 1)) or the defaults (5 ms, 0.05 ms, 5e-5 ms) — bounded to
[start/100, start·100]. Upstream started the filter from the one-pod guess with a 5 % prior; a guess an order of
magnitude off (γ especially) then had every observation rejected by the gate, forever.

Where we differ from upstream (docs/deviations.md): a failed update keeps the previous state instead of
crashing the engine (a nil measurement inside the Jacobian panicked upstream); a restored state keeps its own
bounds instead of being clipped to the defaults'; the state records how many updates it accepted and rejected.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.optimize import least_squares

from adapter.analyzers.queueing.model import QueueModel, RequestSize, ServiceParams
from adapter.domain.errors import ModelError

NIS_GATE = 7.378
ERROR_LEVEL = 0.05
T_PERCENTILE = 1.96
GAMMA_FACTOR = 1.0
PERCENT_CHANGE = 0.01
QUEUE_TO_BATCH = 10
JACOBIAN_STEP = 0.01
DEFAULT_PARAMS = (5.0, 0.05, 5e-5)
BOUND_FACTOR = 100.0
COLD_START_SPREAD = 1.0
PARAM_RANGE = ((0.01, 1e-5, 1e-8), (1000.0, 10.0, 1.0))
"""Where a cold-start fit may look, per parameter (ms): far beyond any GPU, so a bound is never the answer."""
FIT_MAX_EVALUATIONS = 200
LOST_AFTER_CYCLES = 3
"""A filter that rejected every observation for this many cycles in a row is re-fitted from the observations."""
FIT_PENALTY = 10.0
"""Relative residual given to an environment the model cannot evaluate at a trial x (beyond its rate range)."""


@dataclass(frozen=True, slots=True)
class Environment:
    """One busy pod's observation: λ req/s, mean tokens, batch limit, measured TTFT and ITL (ms)."""

    arrival_rps: float
    input_tokens: float
    output_tokens: float
    max_batch: int
    ttft_ms: float
    itl_ms: float

    @property
    def valid(self) -> bool:
        values = (self.arrival_rps, self.input_tokens, self.output_tokens, self.ttft_ms, self.itl_ms)
        return all(math.isfinite(v) and v > 0 for v in values) and self.max_batch > 0 and self.output_tokens >= 1


@dataclass(frozen=True, slots=True)
class FilterState:
    """A variant's learned parameters and their uncertainty, as persisted in VA status (`learned.queueingModel`)."""

    alpha_ms: float
    beta_ms: float
    gamma_ms: float
    covariance: tuple[tuple[float, float, float], ...]
    lower: tuple[float, float, float]
    upper: tuple[float, float, float]
    updated_s: float
    accepted: int = 0
    rejected: int = 0
    last_nis: float | None = None
    lost_cycles: int = 0
    """Consecutive cycles in which every observation was rejected (the analyzer re-fits after a few)."""

    @property
    def theta(self) -> npt.NDArray[np.float64]:
        """log(α, β, γ): the filter's state."""
        return np.log(np.array([self.alpha_ms, self.beta_ms, self.gamma_ms], dtype=np.float64))

    @property
    def p(self) -> npt.NDArray[np.float64]:
        """Covariance of θ (log-parameters): √P_ii is the relative uncertainty of parameter i."""
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
        """Strict: anything but the shape `to_json` writes raises ValueError (the caller then starts afresh)."""
        if not isinstance(doc, Mapping):
            raise ValueError("filter state must be an object")
        x = tuple(_positive(doc.get(k), k) for k in ("alpha_ms", "beta_ms", "gamma_ms"))
        cov = doc.get("covariance")
        if not (isinstance(cov, list) and len(cov) == 3 and all(isinstance(r, list) and len(r) == 3 for r in cov)):
            raise ValueError("covariance must be 3x3")
        covariance = tuple(tuple(_finite(v, "covariance") for v in row) for row in cov)
        lower = _triple(doc.get("lower"), "lower")
        upper = _triple(doc.get("upper"), "upper")
        if not all(lo < hi for lo, hi in zip(lower, upper, strict=True)):
            raise ValueError("lower bounds must be below upper bounds")
        nis = doc.get("last_nis")
        return cls(
            x[0],
            x[1],
            x[2],
            covariance,  # type: ignore[arg-type]
            lower,
            upper,
            _finite(doc.get("updated_s"), "updated_s"),
            int(_finite(doc.get("accepted", 0), "accepted")),
            int(_finite(doc.get("rejected", 0), "rejected")),
            None if nis is None else _finite(nis, "last_nis"),
            int(_finite(doc.get("lost_cycles", 0), "lost_cycles")),
        )


def _finite(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number")
    return float(value)


def _positive(value: Any, name: str) -> float:
    number = _finite(value, name)
    if number <= 0:
        raise ValueError(f"{name} must be > 0")
    return number


def _triple(value: Any, name: str) -> tuple[float, float, float]:
    if not (isinstance(value, list) and len(value) == 3):
        raise ValueError(f"{name} must be a list of 3 numbers")
    a, b, c = (_positive(v, name) for v in value)
    return a, b, c


def measure(x: Sequence[float] | npt.NDArray[np.float64], env: Environment) -> npt.NDArray[np.float64] | None:
    """h(x): the model's (TTFT without its decode step, ITL) in ms for `env`, or None outside the model."""
    try:
        model = QueueModel(
            ServiceParams(float(x[0]), float(x[1]), float(x[2])),
            RequestSize(env.input_tokens, env.output_tokens),
            max_batch=env.max_batch,
            max_queue=QUEUE_TO_BATCH * env.max_batch,
        )
        m = model.analyze(env.arrival_rps)
    except (ModelError, ValueError, ArithmeticError):
        return None
    out = np.array([m.ttft_ms - m.itl_ms, m.itl_ms], dtype=np.float64)
    return out if bool(np.all(np.isfinite(out))) else None


def jacobian(theta: npt.NDArray[np.float64], env: Environment) -> npt.NDArray[np.float64] | None:
    """∂h/∂θ by central differences, step 0.01 in θ (1 % of each parameter)."""
    h = np.zeros((2, 3))
    for j in range(3):
        up, down = theta.copy(), theta.copy()
        up[j] += JACOBIAN_STEP
        down[j] -= JACOBIAN_STEP
        hi, lo = measure(np.exp(up), env), measure(np.exp(down), env)
        if hi is None or lo is None:
            return None
        h[:, j] = (hi - lo) / (2 * JACOBIAN_STEP)
    return h


def initial_state(envs: Sequence[Environment], *, now_s: float) -> FilterState:
    """A cold start: a least-squares fit of (α, β, γ) to this cycle's environments (in log space, so the
    parameters stay positive), started from upstream's one-environment guess or the defaults; the defaults when
    nothing fits. The fit's parameters get a wide prior (P0 = diag((0.25 · x)²)) so the filter can still move;
    the bounds are [x/100, x·100] around the start."""
    valid = [e for e in envs if e.valid]
    start = next((g for e in valid if (g := _guess(e)) is not None), None) or DEFAULT_PARAMS
    x = _fit(start, valid) or start
    p0 = tuple(tuple(COLD_START_SPREAD**2 if i == j else 0.0 for j in range(3)) for i in range(3))
    lower = tuple(max(v / BOUND_FACTOR, lo) for v, lo in zip(x, PARAM_RANGE[0], strict=True))
    upper = tuple(min(v * BOUND_FACTOR, hi) for v, hi in zip(x, PARAM_RANGE[1], strict=True))
    return FilterState(x[0], x[1], x[2], p0, lower, upper, now_s)  # type: ignore[arg-type]


def _fit(start: tuple[float, float, float], envs: Sequence[Environment]) -> tuple[float, float, float] | None:
    """Minimise Σ ((h(x) − z) / z)² over the environments, in log space within `PARAM_RANGE`, from `start` and
    from the defaults (a few noisy pods leave the problem badly conditioned: two starts avoid most local
    minima); the lower-cost fit wins. None when nothing fits."""
    if not envs:
        return None
    z = [np.array([e.ttft_ms, e.itl_ms]) for e in envs]

    def residuals(theta: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        x = np.exp(theta)
        out = []
        for env, target in zip(envs, z, strict=True):
            hx = measure(x, env)
            out.append(np.full(2, FIT_PENALTY) if hx is None else (hx - target) / target)
        return np.concatenate(out)

    lower, upper = np.log(np.array(PARAM_RANGE[0])), np.log(np.array(PARAM_RANGE[1]))
    best: tuple[float, npt.NDArray[np.float64]] | None = None
    for origin in dict.fromkeys((start, DEFAULT_PARAMS)):
        theta0 = np.clip(np.log(np.array(origin)), lower + 1e-9, upper - 1e-9)
        try:
            result = least_squares(residuals, theta0, bounds=(lower, upper), max_nfev=FIT_MAX_EVALUATIONS)
        except (ValueError, ArithmeticError, np.linalg.LinAlgError):
            continue
        if np.all(np.isfinite(result.x)) and (best is None or result.cost < best[0]):
            best = (float(result.cost), result.x)
    if best is None:
        return None
    a, b, c = (float(v) for v in np.exp(best[1]))
    return a, b, c


def _guess(env: Environment) -> tuple[float, float, float] | None:
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


@dataclass(frozen=True, slots=True)
class Outcome:
    state: FilterState
    accepted: int = 0
    rejected: int = 0
    reasons: tuple[str, ...] = field(default_factory=tuple)


def update(state: FilterState, environments: Sequence[Environment], *, now_s: float) -> Outcome:
    """Run the filter over this cycle's environments, in order; never raises."""
    envs = [e for e in environments if e.valid]
    if not envs:
        return Outcome(state, reasons=("no busy pod with TTFT and ITL",))
    x, p = state.theta, state.p
    lo, hi = np.log(np.array(state.lower)), np.log(np.array(state.upper))
    q = np.diag(np.full(3, PERCENT_CHANGE**2))
    z_first = np.array([envs[0].ttft_ms, envs[0].itl_ms])
    r = np.diag(((ERROR_LEVEL / T_PERCENTILE) ** 2 / GAMMA_FACTOR) * z_first**2)
    accepted = rejected = 0
    reasons: list[str] = []
    nis_last: float | None = state.last_nis
    for env in envs:
        x_new, p_new, nis, why = _step(x, p + q, env, r=r, lo=lo, hi=hi)
        if why:
            rejected += 1
            reasons.append(why)
            continue
        x, p, nis_last = x_new, p_new, nis
        accepted += 1
    covariance = tuple(tuple(float(v) for v in row) for row in p)
    alpha, beta, gamma = (float(v) for v in np.exp(x))
    new = replace(
        state,
        alpha_ms=alpha,
        beta_ms=beta,
        gamma_ms=gamma,
        covariance=covariance,  # type: ignore[arg-type]
        updated_s=now_s,
        accepted=state.accepted + accepted,
        rejected=state.rejected + rejected,
        last_nis=nis_last,
        lost_cycles=state.lost_cycles + 1 if accepted == 0 else 0,
    )
    return Outcome(new, accepted, rejected, tuple(dict.fromkeys(reasons)))


def _step(
    x: npt.NDArray[np.float64],
    p: npt.NDArray[np.float64],
    env: Environment,
    *,
    r: npt.NDArray[np.float64],
    lo: npt.NDArray[np.float64],
    hi: npt.NDArray[np.float64],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], float, str]:
    """One predict-update on θ = log x; the last value is the rejection reason ("" when accepted)."""
    hx = measure(np.exp(x), env)
    h = jacobian(x, env)
    if hx is None or h is None:
        return x, p, math.nan, f"the model cannot evaluate {env.arrival_rps:.3g} req/s at the current parameters"
    y = np.array([env.ttft_ms, env.itl_ms]) - hx
    s = h @ p @ h.T + r
    try:
        s_inv = np.linalg.inv(s)
    except np.linalg.LinAlgError:
        return x, p, math.nan, "singular innovation covariance"
    nis = float(y @ s_inv @ y)
    if not math.isfinite(nis) or nis >= NIS_GATE:
        return x, p, nis, f"observation rejected by the NIS gate ({nis:.3g} >= {NIS_GATE})"
    k = p @ h.T @ s_inv
    x_new = np.clip(x + k @ y, lo, hi)
    p_new = (np.eye(3) - k @ h) @ p
    p_new = (p_new + p_new.T) / 2  # keep it symmetric against rounding
    if not (np.all(np.isfinite(x_new)) and np.all(np.isfinite(p_new))):
        return x, p, nis, "update left the parameters not finite"
    return x_new, p_new, nis, ""
