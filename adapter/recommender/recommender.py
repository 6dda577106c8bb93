"""The recommender (seed 004): replica bounds for each variant from a long, decaying memory of its demand.

Each cycle every variant of a model with a capacity signal gets one sample: the model's demand expressed in
replicas of that variant (`demand / per_replica_capacity`). Two decaying histograms per variant: a long one
(half-life 24 h) for the recommendation, a short one (1 h) for the optional scale-down floor.

    target = P90(long) · 1.15                                      (percentile, then 15 % safety margin)
    upper  = P95(long) · 1.15 · (1 + 1.0 / confidence)^1.0          (wide while the history is short)
    lower  = P50(long) · 1.15 · (1 + 0.001 / confidence)^(−2.0)
    confidence = min(lifespan in days, samples / samples-per-day)   (samples-per-day = 2,880 at 30 s cycles)

each rounded up to whole replicas, at least `minimum_replicas`, lower ≤ target ≤ upper. Worked example: a
variant that has needed 2.0 replicas every 30 s for a day (2,880 samples over 86,370 s): with first bucket 0.1
and ratio 1.05, 2.0 falls in bucket 14 = [1.9599, 2.1579), so P50 = P90 = P95 = 2.1579 (the upper edge);
× 1.15 = 2.4815; confidence = min(0.99965, 1.0) = 0.99965:
target = ceil(2.4815) = 3; upper = ceil(2.4815 · (1 + 1/0.99965)) = ceil(4.964) = 5;
lower = ceil(2.4815 · (1 + 0.001/0.99965)^−2) = ceil(2.4765) = 3.
After one hour only (120 samples over 3,570 s): confidence = min(0.04132, 0.04167) = 0.04132, so
upper = ceil(2.4815 · (1 + 24.20)) = ceil(62.54) = 63 — wide until the history earns trust.

Scale-down floor (off by default, `scaleDownFloor: recommender` per model): while it is on, a model is never
scaled below the lower bound of its short (1 h) histogram, so a dip of a few minutes does not cost a cold start
a few minutes later.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from adapter.domain.frozen import fast_init
from adapter.domain.snapshot import Recommendation
from adapter.recommender.histogram import DecayingHistogram, HistogramOptions

DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class RecommenderConfig:
    half_life_s: float = DAY_S
    short_half_life_s: float = 3_600.0
    histogram: HistogramOptions = field(default_factory=HistogramOptions)
    target_percentile: float = 0.90
    lower_percentile: float = 0.50
    upper_percentile: float = 0.95
    safety_margin: float = 0.15
    upper_multiplier: float = 1.0
    upper_exponent: float = 1.0
    lower_multiplier: float = 0.001
    lower_exponent: float = -2.0
    samples_per_day: float = 2_880.0
    minimum_replicas: int = 0
    checkpoint_interval_s: float = 300.0
    """How often the leader rewrites a variant's checkpoint in VA status (the status write is per cycle anyway;
    the checkpoint is the bulky part)."""

    def __post_init__(self) -> None:
        for name in ("half_life_s", "short_half_life_s", "samples_per_day", "checkpoint_interval_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"recommender {name} must be > 0, got {value!r}")
        for name in ("target_percentile", "lower_percentile", "upper_percentile"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"recommender {name} must be in (0, 1], got {value!r}")
        if not self.lower_percentile <= self.target_percentile <= self.upper_percentile:
            raise ValueError("recommender percentiles must satisfy lower <= target <= upper")
        if self.safety_margin < 0 or self.minimum_replicas < 0:
            raise ValueError("recommender safety_margin and minimum_replicas must be >= 0")


@fast_init
@dataclass(frozen=True, slots=True)
class VariantHistory:
    long: DecayingHistogram
    short: DecayingHistogram
    first_sample_s: float
    last_sample_s: float
    samples: int
    checkpointed_s: float | None = None

    @classmethod
    def new(cls, cfg: RecommenderConfig, now_s: float) -> VariantHistory:
        return cls(
            DecayingHistogram.empty(cfg.histogram, cfg.half_life_s, now_s),
            DecayingHistogram.empty(cfg.histogram, cfg.short_half_life_s, now_s),
            now_s,
            now_s,
            0,
        )

    def observe(self, demand_replicas: float, now_s: float) -> VariantHistory:
        if not (math.isfinite(demand_replicas) and demand_replicas >= 0):
            return self
        long, short = self.long, self.short
        index = long.options.find_bucket(demand_replicas)
        same = short.options is long.options or short.options == long.options  # always, unless restored otherwise
        return VariantHistory(  # spelled out, not `replace`: 10,000 a cycle at 10,000 VAs
            long.add_to_bucket(index, now_s),
            short.add_to_bucket(index, now_s) if same else short.add(demand_replicas, now_s),
            self.first_sample_s if self.samples else now_s,
            now_s,
            self.samples + 1,
            self.checkpointed_s,
        )

    def confidence(self, cfg: RecommenderConfig) -> float:
        lifespan_days = max(0.0, self.last_sample_s - self.first_sample_s) / DAY_S
        return min(lifespan_days, self.samples / cfg.samples_per_day)

    def checkpoint(self) -> dict[str, Any]:
        return {
            "long": self.long.checkpoint(),
            "short": self.short.checkpoint(),
            "first_sample_s": self.first_sample_s,
            "last_sample_s": self.last_sample_s,
            "samples": self.samples,
        }

    @classmethod
    def restore(cls, doc: Any, *, now_s: float) -> VariantHistory:
        if not isinstance(doc, Mapping):
            raise ValueError("recommender checkpoint must be an object")
        samples = doc.get("samples")
        first, last = doc.get("first_sample_s"), doc.get("last_sample_s")
        if not (type(samples) is int and samples >= 0):
            raise ValueError("samples must be a non-negative integer")
        times = [_time(first), _time(last)]
        return cls(
            DecayingHistogram.restore(doc.get("long")),
            DecayingHistogram.restore(doc.get("short")),
            times[0],
            times[1],
            samples,
            checkpointed_s=now_s,
        )


def recommend(history: VariantHistory, cfg: RecommenderConfig) -> Recommendation | None:
    """lower / target / upper replicas, or None before the first sample."""
    if history.samples == 0 or history.long.is_empty:
        return None
    margin = 1.0 + cfg.safety_margin
    target, lower, upper = (
        q * margin
        for q in history.long.percentiles((cfg.target_percentile, cfg.lower_percentile, cfg.upper_percentile))
    )
    confidence = history.confidence(cfg)
    if confidence > 0:
        upper *= (1 + cfg.upper_multiplier / confidence) ** cfg.upper_exponent
        lower *= (1 + cfg.lower_multiplier / confidence) ** cfg.lower_exponent
    else:  # a single instant of history: nothing to be confident about
        upper = math.inf
        lower = 0.0
    t = max(cfg.minimum_replicas, _ceil(target))
    lo = min(t, max(cfg.minimum_replicas, _ceil(lower)))
    hi = max(t, _ceil(upper) if math.isfinite(upper) else 2**31 - 1)
    return Recommendation(lower_bound=lo, target=t, upper_bound=hi)


def floor_replicas(history: VariantHistory, cfg: RecommenderConfig) -> int:
    """The scale-down floor: the short (1 h) history's lower bound, in replicas."""
    if history.samples == 0 or history.short.is_empty:
        return 0
    lower = history.short.percentile(cfg.lower_percentile) * (1.0 + cfg.safety_margin)
    return max(cfg.minimum_replicas, _ceil(lower))


def _time(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError("sample times must be finite numbers")
    return float(value)


def _ceil(value: float) -> int:
    """Whole replicas, rounding up; 1e-9 of slack so that 2.0000000001 from float error stays 2."""
    return max(0, math.ceil(value - 1e-9))
