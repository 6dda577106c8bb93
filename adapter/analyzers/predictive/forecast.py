"""Demand forecast over a startup lead: a damped local-linear trend and, when the history shows one, a period.

What the predictive analyzer needs is not the next value of the arrival rate but the most it will be asked to
serve before a replica ordered now is ready: the peak of an upper quantile of the rate over [now, now + lead],
lead = the variant's startup time. Per model, every engine cycle, one observation (the arrival rate the pods
report, req/s) goes into `Forecaster.observe`; `Forecaster.peak` answers.

**History.** Observations sit on a regular grid of `step_s` (the engine interval): a cycle that lands in the
step of the previous one replaces it, skipped steps are filled with the last value, and at most `max_points`
are kept (4 h at 30 s). The grid is what a restart or fail-over persists (`to_json`/`from_json`).

**Trend** (Holt's damped linear method, the steady-state form of a local-linear-trend Kalman filter):

    level'  = a·y + (1 − a)·(level + φ·slope)
    slope'  = b·(level' − level) + (1 − b)·φ·slope
    mean(k) = level' + slope'·(φ + φ² + … + φᵏ)                     (k steps ahead)

with a = 0.5, b = 0.2, φ = 0.95 (a trend fades over ~20 steps: a 5-minute ramp is followed, noise is not
extrapolated far). σ is robust: 1.4826 × the median absolute one-step error e = y − (level + φ·slope) over the
last 40 steps (`robust_sigma`; an exponentially weighted variance, weight 0.1, until 8 errors exist), so a burst
— two huge errors — does not widen the forecast for the next half-hour; the periodic part and the attainment
controller answer for bursts. The upper quantile k steps ahead is mean(k) + z_q·σ·√(1 + (k − 1)/2) (z_0.9 =
1.2816; the spread of a rate over 1-minute windows grows slower than a random walk's √k).

Worked example: level 10, slope 1 req/s per step, φ 0.95, σ 1, z 1.2816. Three steps ahead:
mean = 10 + 1·(0.95 + 0.9025 + 0.857375) = 12.71; upper = 12.71 + 1.2816·1·√2 = 14.52 req/s.

**Period.** Every `detect_every` steps the history is searched for a period P (in steps): the lag with the
highest Pearson correlation between the series, less its least-squares line (so that a trend is not mistaken
for a period), and itself shifted by P, over at least `min_overlap` steps, accepted at ≥ `min_correlation` when
the series varies at all (coefficient of variation ≥ 0.1), the lag is a local maximum standing `MIN_DIP` above
the lowest correlation at a shorter lag, and the history holds two periods (1.5 when the correlation is
≥ `STRONG_CORRELATION`: a burst seen twice); then back-tested on the last period (its spread within
`AMPLITUDE_RATIO` of the spread one period earlier, and the value one period earlier must predict it better than
the value 10 steps earlier, Crane's check in miniature: `_repeats`). With a period, the
seasonal forecast k steps ahead is the mean of the values one, two and three periods before that step (as many
as the history holds), widened by ±1 step for phase jitter; the forecast is the larger of trend and season.
When the season foresaw the present — the current rate at most `SEASON_TOLERANCE` above the seasonal forecast
for now — a rising slope is not extrapolated: the rise is the season's, and the seasonal forecast already
carries it and its end (Holt-Winters keeps its slope on the deseasonalised series for the same reason). Without
this, the onset of a foreseen 30 req/s burst read as a trend forecast ~50 req/s and ordered replicas that came
up after the burst had ended.
Example: bursts every 900 s at a 30-s step ⇒ P = 30; 300 s before the next burst (k = 10), the value
30 − 10 = 20 steps ago is the last burst's.

**A rise seen before** (`_seen_rise`): without a season that foresaw it, a rise the history has seen recur from
where this one started (`recurring_rise`'s statistic) is extrapolated only to where it went, × 1.1; a rise seen
for the first time, or beyond the last, keeps its slope.

**Out of idle** (`IDLE_STEPS`): the first rate after a minute of zeros resets the trend state (level = that rate,
slope 0): the rise out of zero is a wake, not a trend to extrapolate.

**Caps.** The answer is never negative and never above `cap_ratio` × the largest value in the history (AIBrix
caps its projection at 4× the observed mean; a trend extrapolated over minutes amplifies noise).

The forecast is pure: a value in, a new value out; no clock, no I/O.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from adapter.analyzers.predictive.floats import Floats
from adapter.domain.frozen import fast_init, replace

LEVEL_GAIN = 0.5
SLOPE_GAIN = 0.2
DAMPING = 0.95
ERROR_WEIGHT = 0.1
SEASONAL_CYCLES = 3
SPREAD_GROWTH = 2.0
"""The spread grows as √(1 + (k − 1)/2), not √k: a request rate over 1-minute windows wanders less than a random
walk; chosen on the development scenarios (tests/bench_forecast.py --set dev), narrower on traces, no worse on
ramps."""
ERROR_WINDOW = 40
"""One-step errors kept for the robust σ (20 minutes at 30 s)."""
MIN_ERRORS = 8
MIN_DIP = 0.3
"""A period's correlation peak must stand this far above the lowest correlation at a shorter lag."""
STRONG_CORRELATION = 0.9
"""With fewer than two periods of history (but at least 1.5), a period needs this correlation."""
PERSISTENCE_STEPS = 10
SEASON_TOLERANCE = 0.1
"""How far above the seasonal forecast for now the present may be and still count as foreseen (`_explained`)."""
IDLE_STEPS = 2
"""A rate after this many steps of zeros (a model idle for a 1-minute rate window) starts the trend afresh: level
the new rate, slope 0. A wake is a level, not a trend, but the rise out of zero — seen through the rate window
as 0 → 1.7 → 3.1 req/s for a step to 3 — set a slope that forecast 6.3 req/s over the lead and ordered a second
variant's replica (kept 15 minutes by the retention). Measured: a KEDA probe with both variants at zero 25 %
cheaper (seeds 0–4; attainment −0.8 to +1.5 points, mean +0.1), a drop to zero and back 7 % cheaper,
idle-wake.yaml 1–14 % cheaper (seed 3 −1.9 points, mean −0.4), azure-code 2–3 % and code-x1 0–4 % cheaper at
±0.1 point (their traces start from zero); the 35 other benchmark, development, held-out and probe scenarios
unchanged (seeds 0–1)."""
RISE_QUANTILE = 0.75
RISE_BAND = 0.25
RISE_MIN_OCCASIONS = 8
RISE_MATERIAL = 1.0
RISE_WINDOW = 240
"""`recurring_rise`: the quantile of the rises seen from about the present rate (within ±`RISE_BAND` of it, at least
`RISE_MIN_OCCASIONS` occasions among the last `RISE_WINDOW` steps, 2 h), kept only when it at least doubles the present
rate (`RISE_MATERIAL` × the rate)."""
NOISE_RATIO = 2.0
"""A period's values must spread over at least this many times the series' step noise (`_step_noise`): 30 steps
of Poisson noise at 1 req/s once read as a 12-step period (r ≥ 0.7 over 18 steps, the back-test passed by chance;
a hypothesis seed found it)."""
BACKTEST_MARGIN = 0.8
AMPLITUDE_RATIO = 3.0
"""A repeat's spread over the back-tested window is within this factor of the spread one period before (`_repeats`)."""
CLIP_SIGMAS = 3.0
"""The line removed before the period search is fitted to the series clipped at median ± this many robust σ."""


@fast_init
@dataclass(frozen=True, slots=True)
class ForecastConfig:
    step_s: float = 30.0
    """Grid step: the engine interval."""
    quantile: float = 0.9
    """Upper quantile of the demand the capacity is sized for."""
    max_points: int = 480
    """History kept (480 × 30 s = 4 h): the longest period that can be found is 2 h (1.5 cycles needed)."""
    detect_every: int = 5
    """Steps between period searches (the search is O(n log n) in the history; the trend is O(1) a step)."""
    min_overlap: int = 8
    min_correlation: float = 0.7
    min_period_steps: int = 4
    cap_ratio: float = 4.0

    def __post_init__(self) -> None:
        if not (self.step_s > 0 and math.isfinite(self.step_s)):
            raise ValueError(f"step_s must be > 0, got {self.step_s}")
        if not 0.5 <= self.quantile < 1.0:
            raise ValueError(f"quantile must be in [0.5, 1), got {self.quantile}")
        if self.max_points < 16 or self.detect_every < 1 or self.min_period_steps < 2:
            raise ValueError("max_points >= 16, detect_every >= 1 and min_period_steps >= 2 are required")

    @property
    def z(self) -> float:
        return normal_quantile(self.quantile)


@functools.lru_cache(maxsize=8)
def normal_quantile(p: float) -> float:
    """z_p of the standard normal distribution, cached: a few µs each, and asked once a model a cycle here and once
    a variant in capacity.py, always for the same few probabilities (the forecast's quantile, the SLO's tail)."""
    return NormalDist().inv_cdf(p)


@fast_init
@dataclass(frozen=True, slots=True)
class Forecast:
    """The peak of the upper-quantile demand over the lead, and how it was made (for `explain`)."""

    peak_rps: float
    trend_rps: float
    """The trend's upper quantile at its highest over the lead."""
    seasonal_rps: float | None
    """The seasonal forecast's highest over the lead (None: no period)."""
    period_s: float | None
    level_rps: float
    slope_rps_per_s: float
    sigma_rps: float
    lead_s: float
    points: int
    rise_foreseen: bool = False
    """The season foresaw the present rise, so the trend was not extrapolated by its slope (`_explained`)."""
    seen_rise_rps: float | None = None
    """Where the present rise went when it was seen before: the trend's ceiling (`_seen_rise`); None otherwise."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "peak_rps": round(self.peak_rps, 4),
            "trend_rps": round(self.trend_rps, 4),
            "seasonal_rps": None if self.seasonal_rps is None else round(self.seasonal_rps, 4),
            "period_s": self.period_s,
            "level_rps": round(self.level_rps, 4),
            "slope_rps_per_s": round(self.slope_rps_per_s, 6),
            "sigma_rps": round(self.sigma_rps, 4),
            "lead_s": self.lead_s,
            "points": self.points,
            "rise_foreseen": self.rise_foreseen,
            "seen_rise_rps": None if self.seen_rise_rps is None else round(self.seen_rise_rps, 4),
        }


@fast_init
@dataclass(frozen=True, slots=True)
class Forecaster:
    """One model's demand history and trend state (module docstring). Immutable: `observe` returns a new one."""

    config: ForecastConfig = field(default_factory=ForecastConfig)
    start_s: float | None = None
    """Time of values[0] (grid origin); None before the first observation."""
    values: Floats = field(default_factory=Floats)
    """The history, packed (`Floats`: 8 bytes a value, not a float object each)."""
    level: float = 0.0
    slope: float = 0.0
    """Per step."""
    variance: float = 0.0
    """The trend state (level, slope, one-step error variance) over every step but the last."""
    errors: tuple[float, ...] = ()
    """The last `ERROR_WINDOW` one-step errors (their median absolute value is the robust σ)."""
    period_steps: int | None = None
    since_detect: int = 0

    @property
    def last_s(self) -> float | None:
        if self.start_s is None or not self.values:
            return None
        return self.start_s + (len(self.values) - 1) * self.config.step_s

    def recurring_rise(self, lead_s: float) -> float:
        """How far the rate has risen within a lead from about the present rate, when such rises recur (req/s;
        0 when they do not).

        For each kept step i with a full lead after it: rise_i = max(y[i+1 … i+L]) − y[i], L = ⌈lead / step⌉.
        Of the steps whose rate was within ±`RISE_BAND` of the present rate y (at least `RISE_MIN_OCCASIONS` of
        them), the `RISE_QUANTILE` quantile of their rises, when it is ≥ `RISE_MATERIAL` × y; else 0.

        Why: the trend's spread is the median one-step error, small on a load that is calm most steps, so right
        after a burst the forecast falls back to the calm rate and scale-down gives back replicas the next burst
        needs before a new one could start. A periodic season answers only once two bursts are seen; a load that
        has risen from here again and again within a startup will likely rise again. A single step (4 → 24 req/s)
        is a rise from 4, not from 24: once at 24 it has no occasions near the present, and it holds nothing. A
        burst seen once holds while its occasions are over a quarter of those near the present rate: its lead's
        worth of steps before it against three times as many calm steps since (10 and 30 at a 5-minute lead).

        Worked example: bursts to 30 req/s over a base of 4, lead 10 steps, a burst every 30 steps: of the steps
        at 3–5 req/s, one in three is followed within 10 steps by 30 req/s (rise 26), the others by ~4.5 (rise
        ~0.5) ⇒ the 75th percentile is 26 ≥ 1 × 4 ⇒ 26 req/s: scale-down keeps capacity for 4 + 26 = 30 req/s."""
        steps = max(1, math.ceil(max(lead_s, 0.0) / self.config.step_s))
        values = self.values[-RISE_WINDOW:]
        return _rise_from(values, values[-1], steps) if values else 0.0

    def observe(self, now_s: float, rate_rps: float) -> Forecaster:
        """One cycle's arrival rate (`advance`), and the period search when it is due (`with_periods` does the
        searches of many forecasters at once)."""
        return with_periods([self.advance(now_s, rate_rps)])[0]

    @property
    def search_due(self) -> bool:
        """Whether `detect_every` steps have passed since the last period search."""
        return self.since_detect >= self.config.detect_every

    def advance(self, now_s: float, rate_rps: float) -> Forecaster:
        """One cycle's arrival rate, without the period search it may make due (`search_due`). A non-finite or
        negative rate is ignored (the history stays as it was).

        The trend state covers every step but the last: the last step's value may still be replaced by a later
        reading in the same step, and is folded in when the next step begins (and, provisionally, by `peak`)."""
        if not (math.isfinite(rate_rps) and rate_rps >= 0 and math.isfinite(now_s)):
            return self
        cfg = self.config
        if self.start_s is None or not self.values:
            return replace(self, start_s=now_s, values=Floats.of((rate_rps,)), level=rate_rps, slope=0.0, variance=0.0)
        last_s = self.last_s
        assert last_s is not None
        steps = math.floor((now_s - last_s) / cfg.step_s + 0.5)
        if steps < 0:
            return self  # an observation from the past (clock skew across a fail-over): ignored
        # Runs sliced and joined once (each a copy of up to `max_points` doubles)
        held, state, added_errors = self.values, (self.level, self.slope, self.variance), []
        if steps == 0:  # same step: the newer reading wins
            values = held[:-1] + Floats.of((rate_rps,))
        else:
            last = held[-1]
            state = _rebased(state, held)
            if len(held) > 1:
                added_errors.append(_error(state, last))
            state = self._fold(state, last, len(held))
            for _ in range(steps - 1):  # skipped steps: the last value held
                added_errors.append(_error(state, last))
                state = _holt(state, last)
            values = held + Floats.of((*(last,) * (steps - 1), rate_rps))
        start_s = self.start_s
        if len(values) > cfg.max_points:
            drop = len(values) - cfg.max_points
            values = values[drop:]
            start_s += drop * cfg.step_s
        errors = (self.errors + tuple(added_errors))[-ERROR_WINDOW:]
        level, slope, variance = state
        return replace(
            self,
            start_s=start_s,
            values=values,
            level=level,
            slope=slope,
            variance=variance,
            errors=errors,
            since_detect=self.since_detect + steps,
        )

    @staticmethod
    def _fold(state: tuple[float, float, float], value: float, count: int) -> tuple[float, float, float]:
        """The trend state with the (now final) value of the last step folded in; the first step only sets the
        level."""
        if count == 1:
            return (value, 0.0, 0.0)
        return _holt(state, value)

    def peak(self, now_s: float, lead_s: float) -> Forecast:
        """The highest upper-quantile demand over [now, now + lead] (module docstring)."""
        cfg = self.config
        current = self.values[-1] if self.values else 0.0
        if not self.values:
            return Forecast(0.0, 0.0, None, None, 0.0, 0.0, 0.0, lead_s, 0)
        last_s = self.last_s if self.last_s is not None else now_s
        offset = max(0, math.floor((now_s - last_s) / cfg.step_s + 0.5))  # steps since the last observation
        horizon = offset + max(0, math.ceil(max(lead_s, 0.0) / cfg.step_s))
        state = _rebased((self.level, self.slope, self.variance), self.values)
        level, slope, variance = self._fold(state, current, len(self.values))
        sigma = robust_sigma(self.errors, variance)
        ahead = range(max(offset, 1), horizon + 1)
        by_step = self._seasonal(offset, horizon)  # k = offset (now) … horizon
        seasonal = max((value for value in by_step if value is not None), default=None)
        foreseen = slope > 0 and seasonal is not None and _explained(current, by_step[0])
        seen = self._seen_rise(current, horizon - offset) if slope > 0 and not foreseen else None
        extrapolated = 0.0 if foreseen else slope  # the season foresaw the rise: its forecast carries it
        trend = _highest_trend(current, level, extrapolated, sigma, ahead=ahead, z=cfg.z)
        if seen is not None:  # a rise seen before: extrapolated fast, but not past where it went
            trend = min(trend, max(current, seen))
        peak = max(trend, seasonal or 0.0, current)
        highest = self.values.max()
        cap = cfg.cap_ratio * max(highest, 1e-09)
        peak = min(max(peak, 0.0), cap)
        return Forecast(
            peak_rps=peak,
            trend_rps=min(max(trend, 0.0), cap),
            seasonal_rps=None if seasonal is None else min(seasonal, cap),
            period_s=None if self.period_steps is None else self.period_steps * cfg.step_s,
            level_rps=level,
            slope_rps_per_s=slope / cfg.step_s,
            sigma_rps=sigma,
            lead_s=lead_s,
            points=len(self.values),
            rise_foreseen=foreseen,
            seen_rise_rps=seen,
        )

    def _seen_rise(self, current: float, steps: int) -> float | None:
        """Where a rise under way went before, when the history has seen it recur; else None.

        The rise started from the lowest rate of the last lead, s; when the present rate is at least
        (1 + `RISE_MATERIAL`)·s and, over the history before that lead (so the rise under way does not count
        itself), the rise that recurs from s (`_rise_from`) reached about the present, the answer is
        (s + that rise)·(1 + `SEASON_TOLERANCE`): the trend may extrapolate up to there, not beyond. Without it
        every onset of a burst seen before read as a trend to ~50 req/s, and the replicas ordered for it came up
        after the 2-minute burst ended (bursts 9 % dearer). A rise seen for the first time keeps its slope: its
        overshoot is what drains the backlog a step builds while replicas start (section "Trend" above).

        Example: bursts from 4 to 30 req/s, seen before; one step into the next, the rate reads 17 (the rate window
        catching up) and the slope extrapolates ~45 ⇒ s = 4, the recurring rise from 4 is 26 ⇒ the trend is held
        at 30 × 1.1 = 33 req/s."""
        if steps < 1:
            return None
        values = self.values[-(RISE_WINDOW + steps) :]
        if len(values) <= 2 * steps + RISE_MIN_OCCASIONS:
            return None
        start = min(values[-steps - 1 :])
        if current < (1.0 + RISE_MATERIAL) * start:
            return None  # not a rise the recurring rise would hold for
        rise = _rise_from(values[:-steps], start, steps)
        if rise > 0 and current <= (start + rise) * (1.0 + SEASON_TOLERANCE):
            return (start + rise) * (1.0 + SEASON_TOLERANCE)
        return None

    def _seasonal(self, first: int, horizon: int) -> list[float | None]:
        """The seasonal forecast k steps ahead for k = first … horizon (module docstring: the mean of the highest
        value around the step one, two and three periods before; None where the history holds none of them, and
        everywhere without a period)."""
        period = self.period_steps
        if period is None:
            return [None] * (horizon - first + 1)
        values = self.values
        n = len(values)
        if horizon < period and n - 2 + first - SEASONAL_CYCLES * period >= 0:
            # Every step's window lies whole in the history (a full history, a period longer than the lead): each
            # cycle's windows are the consecutive triples of one slice, and every step has all its samples: the
            # same maxima and the same sums in the same order as the loop below, without its slice a window.
            cycles = []
            for cycle in range(1, SEASONAL_CYCLES + 1):
                low = n - 2 + first - cycle * period  # the first step's window starts here
                seen = values[low : low + horizon - first + 3].tolist()
                cycles.append(map(max, seen, seen[1:], seen[2:]))
            return [sum(samples) / SEASONAL_CYCLES for samples in zip(*cycles, strict=True)]
        means: list[float | None] = []
        values_list = values.tolist()  # many windows of 1–3 values: sliced from a list, not from the packed run
        for k in range(first, horizon + 1):
            samples = []
            for cycle in range(1, SEASONAL_CYCLES + 1):
                centre = n - 1 + k - cycle * period
                low, high = max(centre - 1, 0), min(centre + 2, n)  # the steps around it that exist
                if low < high:
                    samples.append(max(values_list[low:high]))
            means.append(sum(samples) / len(samples) if samples else None)
        return means

    # ------------------------------------------------------------------------------------ persistence

    def to_json(self) -> dict[str, Any]:
        """The forecaster as a checkpoint writes it, every number exact (JSON's shortest repr of each double), so
        that `from_json` restores it as it was but for `since_detect`: a new leader forecasts as the old one would
        have. Written at checkpoints only (analyzer.py `CHECKPOINT_INTERVAL_S`), so a history's ~9 KB of JSON is
        rendered once every 5 minutes a model; rounded to 5 digits (~4 KB) it needed a rounded copy of every
        history carried from cycle to cycle while it was written every cycle (docs/benchmarks/scale.md, items 12
        and 35)."""
        return {
            "startS": self.start_s,
            "stepS": self.config.step_s,
            "values": self.values.tolist(),
            "level": self.level,
            "slope": self.slope,
            "variance": self.variance,
            "errors": list(self.errors),
            "periodSteps": self.period_steps,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], config: ForecastConfig) -> Forecaster:
        """Restore a persisted forecaster; ValueError naming the key when it is not one. A history kept at
        another step (the engine interval changed) restarts the history but keeps nothing wrong."""
        if not isinstance(data, Mapping):
            raise ValueError("forecast: expected an object")
        step = _number(data, "stepS")
        start = data.get("startS")
        if start is not None:
            start = _number(data, "startS")
        values = data.get("values")
        if not isinstance(values, list) or not all(_finite_non_negative(v) for v in values):
            raise ValueError("forecast.values: expected a list of finite numbers >= 0")
        if len(values) > config.max_points:
            values = values[-config.max_points :]
        errors = data.get("errors", [])
        if not isinstance(errors, list) or not all(
            not isinstance(e, bool) and isinstance(e, int | float) and math.isfinite(e) for e in errors
        ):
            raise ValueError("forecast.errors: expected a list of finite numbers")
        period = data.get("periodSteps")
        if period is not None and (isinstance(period, bool) or not isinstance(period, int) or period < 2):
            raise ValueError(f"forecast.periodSteps: expected an integer >= 2 or null, got {period!r}")
        if not math.isclose(step, config.step_s):
            return cls(config)
        return cls(
            config,
            start_s=start if values else None,
            values=Floats.of(values),
            level=_number(data, "level", signed=True),  # Holt's level dips below 0 as a rate falls to 0
            slope=_number(data, "slope", signed=True),
            variance=_number(data, "variance"),
            errors=tuple(float(e) for e in errors[-ERROR_WINDOW:]),
            period_steps=period,
        )


def with_periods(forecasters: Sequence[Forecaster]) -> list[Forecaster]:
    """The forecasters, those whose period search is due (`Forecaster.search_due`) with it done: the searches of
    one configuration together (`detect_periods`)."""
    out = list(forecasters)
    due: dict[ForecastConfig, list[int]] = {}
    for index, forecaster in enumerate(out):
        if forecaster.search_due:
            due.setdefault(forecaster.config, []).append(index)
    for config, indices in due.items():
        periods = detect_periods([out[i].values for i in indices], config)
        for index, period in zip(indices, periods, strict=True):
            out[index] = replace(out[index], period_steps=period, since_detect=0)
    return out


def _rise_from(values: Floats, present: float, steps: int) -> float:
    """`Forecaster.recurring_rise` from the rate `present` over `values`, a lead of `steps` (its docstring)."""
    n = len(values)
    if n <= steps + RISE_MIN_OCCASIONS:
        return 0.0
    band = RISE_BAND * max(present, 1.0)
    # No occasion near the present can rise by the material amount when even the history's peak is too low: most
    # cycles of a steady load end here, before any array is built.
    if values.max() - (present - band) < max(RISE_MATERIAL * present, 1e-12):
        return 0.0
    y = values.array
    m = n - steps  # occasions with a full lead after them
    ahead = y[1 : m + 1].copy()
    for k in range(2, steps + 1):  # the running max over the lead: `steps` vector maxima, no window copies
        np.maximum(ahead, y[k : m + k], out=ahead)
    base = y[:m]
    near = np.abs(base - present) <= band
    count = int(np.count_nonzero(near))
    if count < RISE_MIN_OCCASIONS:
        return 0.0
    rises = np.sort(np.maximum(ahead[near] - base[near], 0.0))
    position = RISE_QUANTILE * (count - 1)  # the quantile as numpy's default (linear) computes it
    low = math.floor(position)
    high = min(low + 1, count - 1)
    rise = float(rises[low] + (rises[high] - rises[low]) * (position - low))
    return rise if rise > 0 and rise >= RISE_MATERIAL * present else 0.0


def _explained(current: float, seasonal_now: float | None) -> bool:
    """Whether the season foresaw the present: the current rate is at most `SEASON_TOLERANCE` above the seasonal
    forecast for now. Then the trend's slope is the season's own rise (a burst's onset, the morning of a day) and
    extrapolating it would count the rise twice; a rise beyond the season keeps the slope."""
    return seasonal_now is not None and current <= seasonal_now * (1.0 + SEASON_TOLERANCE)


def _highest_trend(current: float, level: float, slope: float, sigma: float, *, ahead: range, z: float) -> float:
    """The present rate or the trend's upper quantile k steps ahead (`trend_upper`), whichever is highest over
    k in `ahead`.

    When the slope is ≥ 0 every term of `trend_upper` is non-decreasing in k (φᵏ falls; σ ≥ 0 and z ≥ 0, as the
    quantile is ≥ 0.5), and so is each rounded operation on them: the last step is the highest, one evaluation
    instead of one a step (a lead of 10 steps: 10). With a falling slope the highest can be the first step or the
    last (the fall against the widening spread), and every step is evaluated. Example: level 10, slope 1, σ 1,
    z 1.2816, steps 1–3 ⇒ 12.23, 13.42, 14.52 ⇒ 14.52."""
    if not ahead:
        return current
    if slope >= 0 and sigma >= 0 and z >= 0:
        return max(current, trend_upper(level, slope, sigma, ahead[-1], z))
    return max([current, *(trend_upper(level, slope, sigma, k, z) for k in ahead)])


def trend_upper(level: float, slope: float, sigma: float, k: int, z: float) -> float:
    """The trend's upper quantile k steps ahead: level + slope·(φ + … + φᵏ) + z·σ·√(1 + (k − 1)/2) (module
    docstring)."""
    damped = DAMPING * (1.0 - DAMPING**k) / (1.0 - DAMPING)
    return level + slope * damped + z * sigma * math.sqrt(1.0 + (k - 1) / SPREAD_GROWTH)


def _holt(state: tuple[float, float, float], y: float) -> tuple[float, float, float]:
    """One step of the damped Holt recursion and the error variance (module docstring)."""
    level, slope, variance = state
    error = y - (level + DAMPING * slope)
    new_level = LEVEL_GAIN * y + (1.0 - LEVEL_GAIN) * (level + DAMPING * slope)
    new_slope = SLOPE_GAIN * (new_level - level) + (1.0 - SLOPE_GAIN) * DAMPING * slope
    new_variance = (1.0 - ERROR_WEIGHT) * variance + ERROR_WEIGHT * error * error
    return new_level, new_slope, new_variance


def _rebased(state: tuple[float, float, float], values: Sequence[float]) -> tuple[float, float, float]:
    """The state to fold the last value from: when it is the first rate after `IDLE_STEPS` steps of zeros, a
    trend that starts at it (level the rate, slope 0); else `state`."""
    if len(values) > IDLE_STEPS and values[-1] > 0 and all(v <= 0 for v in values[-IDLE_STEPS - 1 : -1]):
        return (values[-1], 0.0, state[2])
    return state


def _error(state: tuple[float, float, float], y: float) -> float:
    """The one-step error of the state's prediction for `y`."""
    level, slope, _ = state
    return y - (level + DAMPING * slope)


def robust_sigma(errors: tuple[float, ...], variance: float) -> float:
    """1.4826 · median |e| of the recent one-step errors (σ of a normal with that median absolute deviation): a
    burst's two large errors do not inflate it for the next half-hour as they would a squared-error average. With
    fewer than `MIN_ERRORS` errors, the exponentially weighted variance's √ instead.
    Example: errors −1, 0.5, 2, −0.5, 30 (a burst) ⇒ median |e| = 1 ⇒ σ = 1.48 (the EWMA would say ~9)."""
    if len(errors) < MIN_ERRORS:
        return math.sqrt(max(variance, 0.0))
    # `_mad_sigma` in Python, the same operations as numpy's median (the middle one, or the mean of the middle two):
    # at `ERROR_WINDOW` values its array calls took ~50 µs a model a cycle, half of `peak`; sorting takes ~4
    deviations = sorted(map(abs, errors))
    middle = len(deviations) // 2
    median = deviations[middle] if len(deviations) % 2 else (deviations[middle - 1] + deviations[middle]) / 2
    return 1.4826 * median


PERIOD_ROWS = 128
"""The histories one array of `detect_periods` holds at most. Its ~25 array calls each serve this many searches
(enough that the calls' own cost is spread thin), and the search's arrays — the rows, their FFT at twice their
length, the cross sums and a score per lag — stay small. At 10,000 VAs a cycle's ~670 searches of 480 steps as one
array peaked at 44 MB (traced), which the allocator then kept; in arrays of 128 rows, 8.4 MB, and 59 ms against 72
(the arrays stay in the CPU's caches; docs/benchmarks/scale.md, item 35)."""


def detect_period(values: np.ndarray | Floats | Sequence[float], config: ForecastConfig) -> int | None:
    """The period of `values` in steps, or None (module docstring: the best local maximum of the lagged
    Pearson correlation, over ≥ `min_overlap` steps and ≥ 1.5 periods of history, at ≥ `min_correlation`).

    All lags at once in O(n log n): the cross sums Σ x_i·x_(i+L) from one FFT, the slices' sums and sums of
    squares from prefix sums. Example: a flat 4 req/s with a 30 req/s block of 4 steps every 30 steps, 50 steps
    long ⇒ 30."""
    return detect_periods([values], config)[0]


def detect_periods(
    histories: Sequence[np.ndarray | Floats | Sequence[float]], config: ForecastConfig
) -> list[int | None]:
    """`detect_period` of every history, in order. The histories of one length are searched as the rows of one
    array, so that each of the search's ~25 array calls serves every model due for a search this cycle: one by
    one, the ~67 searches of a 1,000-VA cycle (full histories, one model in five searched a cycle) took ~35 ms,
    ~500 µs each where one alone takes ~300 (docs/benchmarks/scale.md, item 13).

    Each row gets what it would get alone, bit for bit: numpy's reductions along a row (mean, std, cumsum),
    its medians and its forward FFT compute a row of a 2-D array as they compute it alone, and every other step
    is element by element; the two that do not — the inverse FFT and the line's least squares (LAPACK solves
    many right-hand sides together differently) — run a row at a time (a property in the tests)."""
    periods: list[int | None] = [None] * len(histories)
    by_length: dict[int, list[int]] = {}
    for index, values in enumerate(histories):
        by_length.setdefault(len(values), []).append(index)
    for n, same_length in by_length.items():
        if n < 2 * config.min_overlap + 1:
            continue
        for start in range(0, len(same_length), PERIOD_ROWS):
            indices = same_length[start : start + PERIOD_ROWS]
            raw = np.array([_row(histories[i]) for i in indices], dtype=np.float64).reshape(len(indices), n)
            for index, period in zip(indices, _periods(raw, config), strict=True):
                periods[index] = period
    return periods


def _row(values: np.ndarray | Floats | Sequence[float]) -> np.ndarray | Sequence[float]:
    """A history as `detect_periods` stacks it: a packed run as the array over its bytes (a copy of 480 objects
    otherwise, once per value)."""
    return values.array if isinstance(values, Floats) else values


def _periods(raw: np.ndarray, config: ForecastConfig) -> list[int | None]:
    """`detect_period` of each row of `raw` (rows × n steps, n ≥ 2·`min_overlap` + 1)."""
    rows, n = raw.shape
    level = raw.mean(axis=1)
    searched = np.flatnonzero((level > 0) & ~(raw.std(axis=1) < 0.1 * level))  # a series that varies at all
    answers: list[int | None] = [None] * rows
    longest = min(math.floor(n / 1.5), n - config.min_overlap)
    if not searched.size or longest < config.min_period_steps:
        return answers
    raw, level = raw[searched], level[searched]
    t = np.arange(n, dtype=np.float64)
    slope, intercept = _lines(_clipped(raw))
    x = raw - (slope[:, None] * t + intercept[:, None])  # detrended: a ramp correlates with itself at every lag
    keep = np.flatnonzero(~(x.std(axis=1) < 0.05 * level))
    if not keep.size:
        return answers
    searched, raw, level, centred = searched[keep], raw[keep], level[keep], x[keep]
    spectrum = np.fft.rfft(centred, 2 * n, axis=1)
    power = spectrum * np.conj(spectrum)
    cross = np.array([np.fft.irfft(row, 2 * n)[: n + 1] for row in power])
    zeros = np.zeros((centred.shape[0], 1))
    s1 = np.concatenate((zeros, np.cumsum(centred, axis=1)), axis=1)
    s2 = np.concatenate((zeros, np.cumsum(centred * centred, axis=1)), axis=1)
    lags = np.arange(config.min_period_steps, longest + 1)
    m = n - lags
    sum_a, sum_b = s1[:, m], s1[:, n, None] - s1[:, lags]
    sq_a, sq_b = s2[:, m], s2[:, n, None] - s2[:, lags]
    cov = cross[:, lags] / m - (sum_a / m) * (sum_b / m)
    var_a = np.maximum(sq_a / m - (sum_a / m) ** 2, 0.0)
    var_b = np.maximum(sq_b / m - (sum_b / m) ** 2, 0.0)
    denom = np.sqrt(var_a * var_b)
    floor = 1e-12 * level[:, None] * level[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        score = np.where(denom > floor, cov / denom, 0.0)
    for row, index in enumerate(searched.tolist()):
        best = _best_lag(score[row], lags, n, config)
        if best is not None and _repeats(raw[row], best):
            answers[index] = best
    return answers


def _best_lag(score: np.ndarray, lags: np.ndarray, n: int, config: ForecastConfig) -> int | None:
    """The period among `lags` (ascending) by their correlation `score` over a history of `n` steps, or None.

    A lag qualifies when its score is at least `min_correlation` and `MIN_DIP` above the lowest score up to it (a
    smooth series correlates at every short lag), is a local maximum (no higher score at the next lag), and, under
    two periods of history, at least `STRONG_CORRELATION`. Of those, in order of lag, a longer one replaces the one
    chosen only when its score is higher by 0.05 (prefer the fundamental). The tests run on all lags at once (at
    480 steps ~300 lags: a loop over them took ~150 µs a period search); `lowest` is Python's `min` from +∞, NaN
    scores skipped as `min` skips them."""
    lowest = np.fmin.accumulate(np.concatenate(([math.inf], score)))[1:]
    weak = (score < config.min_correlation) | (score - lowest < MIN_DIP)
    rising = np.zeros(score.size, dtype=bool)
    rising[:-1] = score[:-1] < score[1:]
    short = (score < STRONG_CORRELATION) & (n < 2 * lags)
    best: tuple[float, int] | None = None
    for i in np.flatnonzero(~(weak | rising | short)).tolist():
        value = float(score[i])
        if best is None or value > best[0] + 0.05:
            best = (value, int(lags[i]))
    return None if best is None else best[1]


def _clipped(raw: np.ndarray) -> np.ndarray:
    """Each row of `raw` clipped to its median ± `CLIP_SIGMAS` robust σ (1.4826 × the median absolute deviation),
    for fitting the line `detect_period` removes: a ramp's spread is its own and is kept, a burst is not allowed
    to tilt the line. Fitted to the raw series, one 4-step burst in 51 steps of flat noise tilted it enough that
    the two ends' residuals were two parallel slopes, correlating at 0.91 over 17 steps — a period made of noise.
    Example: 17 ± 0.8 req/s with 102 at four steps ⇒ median 17.0, σ 0.79 ⇒ the burst is fitted as 19.3."""
    median = np.median(raw, axis=1, keepdims=True)
    sigma = _mad_sigma(raw - median)
    clipped: np.ndarray = np.clip(raw, median - CLIP_SIGMAS * sigma, median + CLIP_SIGMAS * sigma)
    return clipped


def _lines(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The least-squares line through each row (y over steps 0 … n − 1): slopes and intercepts, each what
    `np.polyfit(t, row, 1)` answers, bit for bit: the same scaled design matrix (made once per length) and the same
    LAPACK solve, one right-hand side at a time (solved together, LAPACK rounds differently)."""
    lhs, scale, rcond = _line_design(rows.shape[1])
    fits = np.array([np.linalg.lstsq(lhs, row + 0.0, rcond=rcond)[0] for row in rows]) / scale
    return fits[:, 0], fits[:, 1]


@functools.lru_cache(maxsize=4)
def _line_design(n: int) -> tuple[np.ndarray, np.ndarray, float]:
    """`np.polyfit`'s design matrix for a line through n steps, scaled by its columns' norms, the norms, and its
    `rcond` (n·ε)."""
    lhs = np.vander(np.arange(n, dtype=np.float64) + 0.0, 2)
    scale = np.sqrt((lhs * lhs).sum(axis=0))
    lhs /= scale
    lhs.flags.writeable = False
    scale.flags.writeable = False
    return lhs, scale, float(n * np.finfo(np.float64).eps)


def _repeats(raw: np.ndarray, period: int) -> bool:
    """Back-test on the last period, or as much of it as has a value one period before (1.5 periods of history
    leave half a period): the values there must repeat those one period before in amplitude — their spreads
    within `AMPLITUDE_RATIO` of each other — and predict them better than the value
    `min(period − 1, PERSISTENCE_STEPS)` steps before does (mean absolute error, by `BACKTEST_MARGIN`).

    Why both: a step up, detrended, looks like two teeth of a saw, and predicted by its own past period it is
    wrong by the step; a repeat must also spread over at least `NOISE_RATIO` × the series' step noise
    (`_step_noise`), or it is noise; and Pearson's correlation is blind to scale, so over a short overlap one burst
    (std 8 req/s) can correlate at 0.9 with base-load noise (std 0.5) one "period" later — no repeat at all, and the
    seasonal forecast would copy the burst into a quiet future. Example: one 30 req/s burst at steps 10–13 of a
    31-step 4 req/s series "repeats" at lag 19 (r ≥ 0.9): the spreads are 8.3 and 0.5 ⇒ rejected."""
    n = raw.size
    window = np.arange(max(n - period, period), n)
    if window.size < 2:
        return False
    before = raw[window - period]
    spreads = float(np.std(raw[window])), float(np.std(before))
    if min(spreads) <= 0 or max(spreads) > AMPLITUDE_RATIO * min(spreads):
        return False
    if min(spreads) < NOISE_RATIO * _step_noise(raw):
        return False  # the "repeat" varies no more than the series does from one step to the next: noise
    lag = min(period - 1, PERSISTENCE_STEPS)
    seasonal = float(np.mean(np.abs(raw[window] - before)))
    persistence = float(np.mean(np.abs(raw[window] - raw[window - lag])))
    return seasonal < BACKTEST_MARGIN * persistence


def _mad_sigma(deviations: np.ndarray) -> np.ndarray:
    """1.4826 · median |x| of deviations centred on 0, along the last axis (kept, of length 1): the σ of a normal
    with that median absolute deviation (`robust_sigma`, `_clipped` and `_step_noise` each measure a spread so that
    a burst's few values do not move it)."""
    sigma: np.ndarray = 1.4826 * np.median(np.abs(deviations), axis=-1, keepdims=True)
    return sigma


def _step_noise(raw: np.ndarray) -> float:
    """The series' noise: σ of one value, from the median absolute one-step change (1.4826 · median |Δy| / √2), which
    the rare steps of a burst's edges do not move. Example: Poisson counts of 60 a minute (σ 0.13 req/s at 1 req/s)
    ⇒ ≈ 0.13."""
    if raw.size < 2:
        return 0.0
    return float(_mad_sigma(np.diff(raw))[0]) / math.sqrt(2.0)


def _number(data: Mapping[str, Any], key: str, *, signed: bool = False) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"forecast.{key}: expected a finite number, got {value!r}")
    if not signed and value < 0:
        raise ValueError(f"forecast.{key}: expected a number >= 0, got {value!r}")
    return float(value)


def _finite_non_negative(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value) and value >= 0
