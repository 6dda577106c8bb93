"""Closing the loop on delivered attainment: a bounded integral controller on the capacity headroom.

The capacity model (queueing model with tail-tightened targets, capacity.py) says how many requests per second
one replica serves within the SLO; it is a model of means, and the per-request tail depends on the traffic (the
fidelity grid of docs/simulator.md: 99 % needs 25–80 % of the mean-based capacity, by workload). So the
analyzer divides each replica's modelled capacity by a headroom H, and this controller moves H until the
measured attainment — the fraction of requests within both targets, from vLLM's latency histograms — meets
`sloAttainmentTarget`.

    e = target − measured                                   (measured over the histogram window, ~5 min)
    log H ← clip(log H + g·e, log H_min, log H_max),        g = G_UP when e > 0, G_DOWN when e < 0
    −MAX_STEP_DOWN ≤ g·e ≤ MAX_STEP_UP per cycle

Multiplicative (integral in log H), because H is a scale: a 10 % shortfall asks for the same relative change at
H = 1 and H = 5. Worked example: target 0.99, measured 0.90 ⇒ e = 0.09, g·e = 4·0.09 = 0.36 ⇒ H × e^0.36 =
×1.43 this cycle. Measured 0.995 ⇒ e = −0.005 ⇒ H × e^(−0.005) = ×0.995: down slowly, up fast.

Anti-windup — the integral holds (neither up nor down) when:
* there is no evidence: fewer than `MIN_REQUESTS` completions in the window (NaN is not 0 %);
* capacity is in flight: a replica ordered is not ready yet, or became ready less than half a window ago (the
  window still holds the time before it, which says nothing about the capacity now);
and it does not go up while every variant is at its maximum (more headroom would buy nothing).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

G_UP = 4.0
G_DOWN = 1.0
MAX_STEP_UP = 0.4
MAX_STEP_DOWN = 0.1
MIN_REQUESTS = 50.0
H_MIN = 0.5
H_MAX = 12.0


@dataclass(frozen=True, slots=True)
class Controller:
    """One model's headroom and why it last moved or held."""

    headroom: float = 1.0
    last_measured: float | None = None
    hold: str = ""
    """Why the integral held this cycle ("" when it moved)."""
    settled_since_s: float | None = None
    """When the model's ready capacity last stopped changing (anti-windup)."""

    def update(
        self,
        *,
        target: float,
        measured: float | None,
        completions: float,
        window_s: float,
        in_flight: bool,
        at_max: bool,
        capacity_changed: bool,
        now_s: float,
    ) -> Controller:
        """One cycle (module docstring). `completions`: requests finished in the window; `in_flight`: a replica
        is ordered and not ready; `capacity_changed`: the ready replicas differ from the last cycle's."""
        settled = now_s if capacity_changed or self.settled_since_s is None else self.settled_since_s
        state = replace(self, last_measured=measured, settled_since_s=settled)
        if measured is None or not math.isfinite(measured) or completions < MIN_REQUESTS:
            return replace(state, hold="no evidence (too few requests in the window)")
        if in_flight:
            return replace(state, hold="capacity in flight")
        if now_s - settled < window_s / 2:
            return replace(state, hold="capacity changed within half a window")
        error = target - measured
        if error > 0 and at_max:
            return replace(state, hold="every variant at its maximum")
        step = max(-MAX_STEP_DOWN, min(MAX_STEP_UP, (G_UP if error > 0 else G_DOWN) * error))
        headroom = min(H_MAX, max(H_MIN, self.headroom * math.exp(step)))
        return replace(state, headroom=headroom, hold="")

    def to_json(self) -> dict[str, Any]:
        return {
            "headroom": round(self.headroom, 6),
            "lastMeasured": None if self.last_measured is None else round(self.last_measured, 6),
            "settledSinceS": self.settled_since_s,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Controller:
        if not isinstance(data, Mapping):
            raise ValueError("controller: expected an object")
        headroom = data.get("headroom")
        if isinstance(headroom, bool) or not isinstance(headroom, int | float) or not H_MIN <= headroom <= H_MAX:
            raise ValueError(f"controller.headroom: expected a number in [{H_MIN}, {H_MAX}], got {headroom!r}")
        measured = data.get("lastMeasured")
        if measured is not None and (isinstance(measured, bool) or not isinstance(measured, int | float)):
            raise ValueError(f"controller.lastMeasured: expected a number or null, got {measured!r}")
        settled = data.get("settledSinceS")
        if settled is not None and (isinstance(settled, bool) or not isinstance(settled, int | float)):
            raise ValueError(f"controller.settledSinceS: expected a number or null, got {settled!r}")
        return cls(
            float(headroom),
            None if measured is None else float(measured),
            "",
            None if settled is None else float(settled),
        )
