"""A decaying histogram with exponential buckets, as the Kubernetes VPA recommender keeps one (seed 004).

Buckets: bucket i covers [start_i, start_{i+1}) with

    start_i = first · (ratio^i − 1) / (ratio − 1)        (first bucket width `first`, each next one `ratio` wider)

Example (first 0.1 replica, ratio 1.05): starts 0, 0.1, 0.205, 0.31525, …; bucket 14 is [1.9599, 2.1579);
176 buckets reach 10,000 replicas.

Decay without touching stored weights: a sample at time t is added with weight 2^((t − reference) / half_life),
so a sample one half-life older weighs half as much as a new one. When the exponent would exceed 100 the
reference moves forward and every stored weight is scaled down once by the same factor (what the VPA's
`shiftReferenceTimestamp` does), so weights stay finite forever.

Percentile p: the smallest bucket whose cumulative weight reaches p · total; its *upper* boundary is returned
(the last bucket returns its start), as the VPA does — an estimate errs on the side of more capacity.

Memory is bounded: a fixed number of buckets (computed from `max_value`) whatever the number of samples.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from adapter.domain.frozen import fast_init

MAX_DECAY_EXPONENT = 100.0
EPSILON = 1e-10


@dataclass(frozen=True, slots=True)
class HistogramOptions:
    first_bucket: float = 0.1
    ratio: float = 1.05
    max_value: float = 10_000.0
    _log_ratio: float = field(init=False, repr=False, compare=False)
    _num_buckets: int = field(init=False, repr=False, compare=False)
    """Both derived once (`find_bucket` runs twice a VA and cycle: 20,000 at 10,000 VAs)."""

    def __post_init__(self) -> None:
        for name, value in (("first_bucket", self.first_bucket), ("max_value", self.max_value)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"histogram {name} must be a finite number > 0, got {value!r}")
        if not (math.isfinite(self.ratio) and self.ratio > 1):
            raise ValueError(f"histogram ratio must be > 1, got {self.ratio!r}")
        # math.log(x, base) is math.log(x) / math.log(base): the same floats
        object.__setattr__(self, "_log_ratio", math.log(self.ratio))
        object.__setattr__(self, "_num_buckets", math.ceil(self._position(self.max_value)) + 1)

    def _position(self, value: float) -> float:
        """Where `value` falls on the bucket scale: log_ratio(value · (ratio − 1) / first + 1), the inverse of
        `bucket_start` (bucket i covers positions [i, i + 1))."""
        return math.log(value * (self.ratio - 1) / self.first_bucket + 1) / self._log_ratio

    @property
    def num_buckets(self) -> int:
        return self._num_buckets

    def bucket_start(self, index: int) -> float:
        return self.first_bucket * (self.ratio**index - 1) / (self.ratio - 1)

    def find_bucket(self, value: float) -> int:
        """The bucket of `value`: ⌊log_ratio(value · (ratio − 1) / first + 1)⌋, within [0, num_buckets − 1]."""
        if value < self.first_bucket:
            return 0
        return min(max(int(self._position(value)), 0), self._num_buckets - 1)


@fast_init
@dataclass(frozen=True, slots=True)
class DecayingHistogram:
    """Sparse weights by bucket index; immutable: `add` returns a new histogram."""

    options: HistogramOptions
    half_life_s: float
    reference_s: float
    weights: Mapping[int, float]

    @classmethod
    def empty(cls, options: HistogramOptions, half_life_s: float, reference_s: float) -> DecayingHistogram:
        if not (math.isfinite(half_life_s) and half_life_s > 0):
            raise ValueError(f"half-life must be > 0 s, got {half_life_s!r}")
        return cls(options, half_life_s, reference_s, {})

    @property
    def total_weight(self) -> float:
        return sum(self.weights.values())

    @property
    def is_empty(self) -> bool:
        return self.total_weight < EPSILON

    def add(self, value: float, now_s: float, weight: float = 1.0) -> DecayingHistogram:
        """The histogram with one more sample. Non-finite or negative values are ignored."""
        if not (math.isfinite(value) and value >= 0 and math.isfinite(weight) and weight > 0):
            return self
        return self.add_to_bucket(self.options.find_bucket(value), now_s, weight)

    def add_to_bucket(self, index: int, now_s: float, weight: float = 1.0) -> DecayingHistogram:
        """`add` of a sample already placed in bucket `index` (of these options) with a valid weight: two
        histograms of the same options share one `find_bucket`."""
        hist = self
        if (now_s - self.reference_s) / self.half_life_s > MAX_DECAY_EXPONENT:
            hist = self._shifted(now_s)
        factor = 2.0 ** ((now_s - hist.reference_s) / hist.half_life_s)
        weights = dict(hist.weights)
        weights[index] = weights.get(index, 0.0) + weight * factor
        return DecayingHistogram(hist.options, hist.half_life_s, hist.reference_s, weights)

    def _shifted(self, now_s: float) -> DecayingHistogram:
        """Move the reference to `now_s` (whole half-lives), scaling stored weights by 2^(−Δ/half_life)."""
        steps = math.floor((now_s - self.reference_s) / self.half_life_s)
        new_reference = self.reference_s + steps * self.half_life_s
        scale = 2.0 ** (-steps)
        weights = {i: w * scale for i, w in self.weights.items() if w * scale > EPSILON}
        return DecayingHistogram(self.options, self.half_life_s, new_reference, weights)

    def percentile(self, p: float) -> float:
        """The value below which a fraction p of the (decayed) weight lies; 0 for an empty histogram."""
        return self.percentiles((p,))[0]

    def percentiles(self, ps: Sequence[float]) -> tuple[float, ...]:
        """`percentile(p)` for each p, from one sort and one running sum of the buckets (the recommender asks
        for three per VA and cycle: 30,000 at 10,000 VAs).

        For each p the answer is the end of the first bucket (in index order) whose running weight reaches
        p · total, less a relative slack of EPSILON; the last bucket answers its start. Example: weights
        {0: 1, 3: 1}, p = 0.5 -> the running sums are (1, 2), 1 >= 0.5 · 2 -> bucket 0 -> bucket_start(1)."""
        total = self.total_weight
        if total < EPSILON:
            return tuple(0.0 for _ in ps)
        options = self.options
        last = options.num_buckets - 1
        order = sorted(self.weights)
        running = list(accumulate(map(self.weights.__getitem__, order)))  # the same sums, in the same order
        out: list[float] = []
        for p in ps:
            at = bisect_left(running, min(max(p, 0.0), 1.0) * total - EPSILON * total)  # first sum >= it
            if at == len(order):
                out.append(options.bucket_start(max(self.weights)))
            else:
                index = order[at]
                out.append(options.bucket_start(index + 1) if index < last else options.bucket_start(index))
        return tuple(out)

    # ---- checkpoint -------------------------------------------------------------------------------------------

    def checkpoint(self) -> dict[str, Any]:
        """Compact JSON: reference time, half-life, options, and the non-zero buckets."""
        return {
            "reference_s": self.reference_s,
            "half_life_s": self.half_life_s,
            "first_bucket": self.options.first_bucket,
            "ratio": self.options.ratio,
            "max_value": self.options.max_value,
            "buckets": {str(i): w for i, w in sorted(self.weights.items())},
        }

    @classmethod
    def restore(cls, doc: Any) -> DecayingHistogram:
        """Inverse of `checkpoint`; ValueError for anything else."""
        if not isinstance(doc, Mapping):
            raise ValueError("histogram checkpoint must be an object")
        options = HistogramOptions(_num(doc, "first_bucket"), _num(doc, "ratio"), _num(doc, "max_value"))
        buckets = doc.get("buckets")
        if not isinstance(buckets, Mapping):
            raise ValueError("histogram checkpoint buckets must be an object")
        weights: dict[int, float] = {}
        for key in buckets:
            if not (isinstance(key, str) and key.isdigit() and int(key) < options.num_buckets):
                raise ValueError(f"histogram bucket {str(key)[:20]!r} out of range")
            weight = _num(buckets, key)
            if weight < 0:
                raise ValueError("histogram weights must be >= 0")
            weights[int(key)] = weight
        hist = cls.empty(options, _num(doc, "half_life_s"), _num(doc, "reference_s"))
        return DecayingHistogram(hist.options, hist.half_life_s, hist.reference_s, weights)


def _num(doc: Mapping[str, Any], key: str) -> float:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{key} must be a finite number")
    return float(value)
