"""Which forecaster? The arrival series of the benchmark workloads, forecast a startup ahead by each candidate,
scored on what the predictive analyzer asks of it: the most demand over the next `lead` (docs/predictive.md).

    python -m tests.bench_forecast [--out docs/benchmarks] [--seeds 3]

Per workload and seed, the series is what the engine sees: the arrival rate over the last minute, sampled every
30-s cycle. At every cycle t each forecaster, given the series up to t, answers its estimate of
need(t) = max rate over (t, t + 300 s]. Scores (lower is better for the first two):

* pinball loss at q = 0.9 of the answer against need(t), per req/s of mean need (a quantile forecast's
  proper score: under-forecasts cost 0.9 per req/s, over-forecasts 0.1);
* shortfall: the mean of max(0, need − answer) / mean need — demand that would find no capacity;
* coverage: the fraction of cycles where answer ≥ need (a p90 forecaster should be near 0.9);
* excess: mean answer / mean need − 1 — capacity bought beyond need;
* time per update.

Candidates: `last` (the rate now: a reactive policy's view), `damped-holt+season` (adapter.analyzers.predictive
.forecast, what the analyzer uses), the same without the seasonal part, and statsmodels' Holt-Winters
(`ExponentialSmoothing`, additive damped trend, refitted every 10 cycles on the last 4 h, upper quantile from
its residual standard deviation), with and without an additive season at the period our detector finds.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from adapter.analyzers.predictive.forecast import ForecastConfig, Forecaster, detect_period
from adapter.sim import scenario as scenario_module

REPO = Path(__file__).resolve().parents[1]
DEV = {p.stem: p for p in sorted((REPO / "examples/scenarios/dev").glob("*.yaml"))}
"""Tuning set (`--set dev`): the development scenarios; the benchmark's are the judged set."""
WORKLOADS = {
    "azure-code": REPO / "examples/scenarios/bench/azure-code.yaml",
    "azure-conv": REPO / "examples/scenarios/bench/azure-conv.yaml",
    "mooncake": REPO / "examples/scenarios/bench/mooncake.yaml",
    "diurnal": REPO / "examples/scenarios/bench/diurnal.yaml",
    "steps": REPO / "examples/scenarios/bench/steps.yaml",
    "bursts": REPO / "examples/scenarios/bench/bursts.yaml",
}
STEP_S = 30.0
RATE_WINDOW_S = 60.0
LEAD_S = 300.0
QUANTILE = 0.9
Z90 = 1.2815515655446004


def series(path: Path, seed: int) -> np.ndarray:
    """The arrival rate over the last minute at every 30-s cycle of the run."""
    scenario = scenario_module.load(path)
    table = scenario.requests(run_seed=seed)
    duration = scenario.effective_duration_s()
    ends = np.arange(STEP_S, duration + 1e-9, STEP_S)
    arrivals = np.sort(table.arrival_s[table.arrival_s < duration])
    counts = np.searchsorted(arrivals, ends) - np.searchsorted(arrivals, ends - RATE_WINDOW_S)
    return np.asarray(counts / RATE_WINDOW_S, dtype=np.float64)


Predict = Callable[[np.ndarray], float]
"""Given the series up to and including t, the forecast of the most demand over the lead."""


def last(history: np.ndarray) -> float:
    return float(history[-1])


class Ours:
    def __init__(self, *, seasonal: bool) -> None:
        self.forecaster = Forecaster(ForecastConfig(step_s=STEP_S, quantile=QUANTILE))
        self.seasonal = seasonal
        self.seen = 0

    def __call__(self, history: np.ndarray) -> float:
        for value in history[self.seen :]:
            self.forecaster = self.forecaster.observe(self.seen * STEP_S, float(value))
            self.seen += 1
        if not self.seasonal:
            from dataclasses import replace

            self.forecaster = replace(self.forecaster, period_steps=None)
        return self.forecaster.peak(self.seen * STEP_S, LEAD_S).peak_rps


class HoltWinters:
    """statsmodels' ExponentialSmoothing, refitted every `refit` cycles on the last 480 points."""

    def __init__(self, *, seasonal: bool, refit: int = 10) -> None:
        self.seasonal = seasonal
        self.refit = refit
        self.fit_at = -refit
        self.result: object | None = None
        self.sigma = 0.0
        self.period: int | None = None

    def __call__(self, history: np.ndarray) -> float:
        from statsmodels.tsa.holtwinters import ExponentialSmoothing

        n = history.size
        horizon = math.ceil(LEAD_S / STEP_S)
        if n < 10:
            return float(history[-1])
        if n - self.fit_at >= self.refit:
            data = history[-480:]
            period = detect_period(data, ForecastConfig(step_s=STEP_S)) if self.seasonal else None
            self.period = period if period is not None and data.size >= 2 * period else None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = ExponentialSmoothing(
                    data + 1e-3,
                    trend="add",
                    damped_trend=True,
                    seasonal="add" if self.period else None,
                    seasonal_periods=self.period,
                    initialization_method="estimated",
                )
                self.result = model.fit()
            residuals = np.asarray(self.result.resid)  # type: ignore[attr-defined]
            self.sigma = float(np.std(residuals)) if residuals.size else 0.0
            self.fit_at = n
            self.fitted_n = n
        steps_since = n - self.fit_at
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            path = np.asarray(self.result.forecast(steps_since + horizon))[steps_since:]  # type: ignore[attr-defined]
        upper = path + Z90 * self.sigma * np.sqrt(np.arange(1, horizon + 1))
        return float(max(history[-1], np.max(upper), 0.0))


@dataclass
class Score:
    pinball: float
    shortfall: float
    coverage: float
    excess: float
    update_ms: float


def score(values: np.ndarray, predict: Predict) -> Score:
    horizon = math.ceil(LEAD_S / STEP_S)
    answers, needs, times = [], [], []
    for t in range(1, values.size - horizon):
        started = time.perf_counter()
        answers.append(predict(values[: t + 1]))
        times.append(time.perf_counter() - started)
        needs.append(float(np.max(values[t + 1 : t + 1 + horizon])))
    a, y = np.asarray(answers), np.asarray(needs)
    mean_need = max(float(np.mean(y)), 1e-9)
    diff = y - a
    pinball = float(np.mean(np.maximum(QUANTILE * diff, (QUANTILE - 1) * diff))) / mean_need
    return Score(
        pinball=pinball,
        shortfall=float(np.mean(np.maximum(diff, 0.0))) / mean_need,
        coverage=float(np.mean(a >= y)),
        excess=float(np.mean(a)) / mean_need - 1.0,
        update_ms=1000.0 * statistics.median(times),
    )


CANDIDATES: dict[str, Callable[[], Predict]] = {
    "last": lambda: last,
    "damped-holt+season (ours)": lambda: Ours(seasonal=True),
    "damped-holt (ours, no season)": lambda: Ours(seasonal=False),
    "statsmodels Holt-Winters": lambda: HoltWinters(seasonal=False),
    "statsmodels Holt-Winters + season": lambda: HoltWinters(seasonal=True),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench_forecast", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--set", choices=("bench", "dev"), default="bench")
    args = parser.parse_args(argv)
    workloads = WORKLOADS if args.set == "bench" else DEV
    started = time.perf_counter()
    rows: dict[tuple[str, str], list[Score]] = {}
    for workload, path in workloads.items():
        for seed in range(args.seeds):
            values = series(path, seed)
            for name, make in CANDIDATES.items():
                rows.setdefault((workload, name), []).append(score(values, make()))
        print(f"{workload}: done", flush=True)
    lines = [
        "# Forecasters on the benchmark workloads",
        "",
        "Generated by `python -m tests.bench_forecast` (part of `make bench-sim`); do not edit by hand. The question",
        "each answers at every 30-s cycle: the most demand (req/s, over 1-minute windows) in the next 300 s (the p90",
        f"startup). Means over {args.seeds} seeds. Pinball (q = 0.9) and shortfall are per req/s of mean need: lower",
        "is better; coverage is the share of cycles the answer covered the need (0.9 is the target of a p90 forecast);",
        "excess is capacity bought beyond the need on average.",
        "",
        "| workload | forecaster | pinball q0.9 | shortfall | coverage | excess | ms / update |",
        "|---|---|---|---|---|---|---|",
    ]
    for (workload, name), scores in rows.items():
        mean = {k: statistics.fmean(getattr(s, k) for s in scores) for k in Score.__dataclass_fields__}
        lines.append(
            f"| {workload} | {name} | {mean['pinball']:.3f} | {mean['shortfall']:.3f} | {mean['coverage']:.2f} | "
            f"{mean['excess']:+.2f} | {mean['update_ms']:.3f} |"
        )
    totals = {
        name: statistics.fmean(statistics.fmean(s.pinball for s in rows[(w, name)]) for w in workloads)
        for name in CANDIDATES
    }
    lines += ["", "Mean pinball over the workloads: " + ", ".join(f"{n} {v:.3f}" for n, v in totals.items()) + "."]
    lines += ["", f"Took {time.perf_counter() - started:.0f} s.", ""]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "forecasters.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
