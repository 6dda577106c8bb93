"""Closing the loop on delivered attainment: a bounded integral controller on the capacity headroom.

The capacity model (queueing model with tail-tightened targets, capacity.py) says how many requests per second
one replica serves within the SLO; it is a model of means, and the per-request tail depends on the traffic (the
fidelity grid of docs/simulator.md: 99 % needs 25–80 % of the mean-based capacity, by workload). So the
analyzer divides each replica's modelled capacity by a headroom H, and this controller moves H until the
measured attainment — the fraction of requests within both targets, from vLLM's latency histograms — meets
`sloAttainmentTarget`.

    e = target − measured                                   (measured over the histogram window, ~5 min)
    log H ← clip(log H + g·e·τ, log H_min, log H_max),      g = G_UP when e > 0, G_DOWN when e < 0
    −MAX_STEP_DOWN ≤ g·e ≤ MAX_STEP_UP,   τ = min(Δt, 2·CYCLE_S) / CYCLE_S

Multiplicative (integral in log H), because H is a scale: a 10 % shortfall asks for the same relative change at
H = 1 and H = 5. An integral over time, not over cycles: τ scales each step by the time since the model's last
cycle (Δt) against the 30-s cycle the gains were tuned at, so the engine interval (`GLOBAL_OPT_INTERVAL`) does not
change how fast H moves; a gap longer than two cycles counts as two. Worked example (30-s cycles, τ = 1): target
0.99, measured 0.90 ⇒ e = 0.09, g·e = 4·0.09 = 0.36 ⇒ H × e^0.36 = ×1.43 this cycle. Measured 0.995 ⇒ e = −0.005
⇒ H × e^(−0.01) = ×0.99: down slowly, up fast. With 15-s cycles τ = 0.5: ×1.20 per cycle, ×1.43 per 30 s.

Anti-windup — the integral holds when there is no evidence (fewer than `MIN_REQUESTS` completions in the window:
NaN is not 0 %), and otherwise holds only the move that the state of the fleet could mislead:
* over target while arrivals are below `MIN_LOAD` of the ready replicas' capacity: no move down (a fleet held
  at its minimum at night, or sized ahead of a forecast, meets any target; believing it would drive H to its
  floor before the morning);
* a replica ordered and not ready yet: no move up (what is coming may be enough);
* arrivals above the ready replicas' capacity at the current headroom, a backlog growing past `BACKLOG_S` of
  arrivals, or the backlog either left still draining, within the window: no move up (the shortfall is demand
  the fleet was not sized for — a forecast miss, a burst no forecast saw coming, requests grown longer than the
  capacity model has seen yet — and more headroom would not have been in place for it, only oversize every
  later cycle; the forecast and the backlog term answer it);
* ready capacity grew less than a window ago: no move up (the window still holds the shortfall before it);
  the analyzer reports a model back from cycles it did not see (at zero, metrics missing) as grown;
* ready capacity shrank less than half a window ago: no move down (the window still holds the surplus before it);
* every variant at its maximum: no move up (more headroom would buy nothing);
* the last three moves up gained less than two points of attainment: no move up (the misses are not for want of
  capacity; an unreachable target would otherwise buy the maximum fleet).
A move the other way is safe in each case — a window measured with *less* capacity than now that still meets the
target says the capacity now is more than enough — so a fleet growing with its load still learns it is too big.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapter.domain.frozen import fast_init, replace

G_UP = 4.0
G_DOWN = 2.0
MAX_STEP_UP = 0.4
MAX_STEP_DOWN = 0.1
MIN_REQUESTS = 50.0
FUTILE_RAISES = 3
FUTILE_GAIN = 0.02
"""Three raises of the headroom (each after the capacity it bought was in place) that moved attainment by less
than two points say the misses are not for want of capacity (a TTFT target below the prefill of the longest
prompts, say): further raises are held, so an unreachable target does not buy the maximum fleet."""
OVERLOAD = 1.0
"""Arrivals / the ready replicas' capacity at the current headroom above which a cycle counts as outrun by its
demand (anti-windup: what such a window misses says nothing about the headroom)."""
MIN_LOAD = 0.7
"""Below this arrival rate / capacity, the fleet is sized by its minimum, by rounding or ahead of a forecast,
not by the model at full load: that it meets the target says nothing about how much less headroom would do."""
H_MIN = 1.0
"""Never more per replica than the tail-tightened model says: a fleet meets any target below full load, so
evidence for *less* headroom than the model would have to come from the very peaks that violate it."""
H_MAX = 12.0
CYCLE_S = 30.0
"""The engine interval the gains are per (τ in the module docstring). Why: the same 5-minute window of misses was
integrated once per cycle, so 15-s cycles moved H twice as fast — on the bursts workload H went 1.0 → 1.44
where 30-s cycles left it at 1.0, and the hour cost 37 % more (a probe, seed 0)."""
BACKLOG_S = 10.0
"""A backlog that grew since the last cycle and holds at least this many seconds of arrivals is an overload,
whatever the capacity model says: the model sizes replicas by the mean request size of the metrics window,
which lags when requests change. Why: prompts grown from 500 to 4,000 tokens at a steady 6 req/s — the window
still priced an A100 at 11 req/s while 119 requests queued, the integral read the misses as a headroom shortfall
and raised H 1.0 → 1.68 in two cycles, and the fleet stayed 1.68× too big for the rest of the hour (the
"not loaded" hold below kept H there): 23–25 % of the hour's cost, for 1.2–1.5 points gained in the minute
the extra replicas shortened the crisis by (a probe, seeds 0–1). Ten seconds, not the 2-s TTFT target: a queue of a
headroom shortfall is the tail's, seconds long; a longer one is throughput missing (at 5 s a probe of 4-minute
bursts with 20–40-s startups, seed 1, read its bursts as overloads: −0.7 point)."""


@fast_init
@dataclass(frozen=True, slots=True)
class Controller:
    """One model's headroom and why it last moved or held."""

    headroom: float = 1.0
    last_measured: float | None = None
    hold: str = ""
    """Why the integral held this cycle ("" when it moved)."""
    settled_since_s: float | None = None
    """When the model's ready capacity last changed (anti-windup)."""
    change: int = 0
    """The sign of that change: +1 grew, −1 shrank, 0 never changed."""
    raises: tuple[float, ...] = ()
    """The attainment measured at each of the last `FUTILE_RAISES` moves up (cleared by a move down)."""
    overloaded_at_s: float | None = None
    """When arrivals last outran the ready capacity (load > `OVERLOAD`), or the backlog they left was still
    draining (anti-windup)."""
    overloaded: bool = False
    """Whether the last cycle was so."""
    backlog: float = 0.0
    """The requests waiting at the last cycle (a growing backlog can be an overload: `BACKLOG_S`)."""

    def update(
        self,
        *,
        target: float,
        measured: float | None,
        completions: float,
        window_s: float,
        in_flight: bool,
        at_max: bool,
        capacity_change: int,
        load: float,
        backlog: float,
        arrival_rps: float,
        now_s: float,
        elapsed_s: float = CYCLE_S,
    ) -> Controller:
        """One cycle (module docstring). `completions`: requests finished in the window; `in_flight`: a replica
        is ordered and not ready; `capacity_change`: the sign of the change of ready capacity since the last
        cycle (0: none); `load`: the arrival rate / the ready replicas' capacity at the current headroom;
        `backlog`: requests waiting now (an overload lasts until the backlog it left is drained); `arrival_rps`:
        the arrival rate (the backlog's yardstick, `BACKLOG_S`); `elapsed_s`: the time since the model's last
        cycle (τ)."""
        settled_since_s, change = self.settled_since_s, self.change
        if capacity_change or settled_since_s is None:
            settled_since_s, change = now_s, (capacity_change > 0) - (capacity_change < 0)
        growing = backlog > self.backlog and backlog >= max(1.0, BACKLOG_S * arrival_rps)
        overloaded = load > OVERLOAD or growing or (self.overloaded and backlog >= 1.0)
        state = replace(
            self,
            settled_since_s=settled_since_s,
            change=change,
            overloaded=overloaded,
            backlog=backlog,
            overloaded_at_s=now_s if overloaded else self.overloaded_at_s,
            last_measured=measured,
        )
        if measured is None or not math.isfinite(measured) or completions < MIN_REQUESTS:
            return replace(state, hold="no evidence (too few requests in the window)")
        error = target - measured
        since = now_s - state.settled_since_s if state.settled_since_s is not None else math.inf
        if error > 0:
            if in_flight:
                return replace(state, hold="short, but capacity is in flight")
            if state.overloaded_at_s is not None and now_s - state.overloaded_at_s < window_s:
                return replace(state, hold="short, but arrivals outran the ready capacity within the window")
            if since < window_s and state.change > 0:
                return replace(state, hold="short, but capacity grew within the window")
            if at_max:
                return replace(state, hold="short, but every variant at its maximum")
            if len(state.raises) >= FUTILE_RAISES and measured - state.raises[0] < FUTILE_GAIN:
                return replace(
                    state,
                    hold=f"short, but the last {FUTILE_RAISES} raises moved attainment only from "
                    f"{state.raises[0]:.1%} to {measured:.1%}: more capacity is not what is missing",
                )
        elif error < 0 and load < MIN_LOAD:
            return replace(state, hold=f"over target, but the fleet is not loaded (arrivals {load:.0%} of capacity)")
        elif error < 0 and since < window_s / 2 and state.change < 0:
            return replace(state, hold="over target, but capacity shrank within half a window")
        tau = min(max(elapsed_s, 0.0), 2.0 * CYCLE_S) / CYCLE_S
        step = max(-MAX_STEP_DOWN, min(MAX_STEP_UP, (G_UP if error > 0 else G_DOWN) * error)) * tau
        headroom = min(H_MAX, max(H_MIN, self.headroom * math.exp(step)))
        raises = (*state.raises, measured)[-FUTILE_RAISES:] if headroom > self.headroom else ()
        return replace(state, headroom=headroom, hold="", raises=raises)

    def to_json(self) -> dict[str, Any]:
        return {
            "headroom": round(self.headroom, 6),
            "lastMeasured": None if self.last_measured is None else round(self.last_measured, 6),
            "settledSinceS": self.settled_since_s,
            "change": self.change,
            "raises": [round(x, 6) for x in self.raises],
            "overloadedAtS": self.overloaded_at_s,
            "overloaded": self.overloaded,
            "backlog": round(self.backlog, 3),
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
        change = data.get("change", 0)
        if change not in (-1, 0, 1) or isinstance(change, bool):
            raise ValueError(f"controller.change: expected -1, 0 or 1, got {change!r}")
        raises = data.get("raises", [])
        if not isinstance(raises, list) or not all(
            not isinstance(x, bool) and isinstance(x, int | float) and 0 <= x <= 1 for x in raises
        ):
            raise ValueError(f"controller.raises: expected a list of fractions, got {raises!r}")
        overloaded = data.get("overloadedAtS")
        if overloaded is not None and (isinstance(overloaded, bool) or not isinstance(overloaded, int | float)):
            raise ValueError(f"controller.overloadedAtS: expected a number or null, got {overloaded!r}")
        overloaded_now = data.get("overloaded", False)
        if not isinstance(overloaded_now, bool):
            raise ValueError(f"controller.overloaded: expected true or false, got {overloaded_now!r}")
        backlog = data.get("backlog", 0.0)
        if isinstance(backlog, bool) or not isinstance(backlog, int | float) or not 0 <= backlog < math.inf:
            raise ValueError(f"controller.backlog: expected a number >= 0, got {backlog!r}")
        return cls(
            float(headroom),
            None if measured is None else float(measured),
            "",
            None if settled is None else float(settled),
            int(change),
            tuple(float(x) for x in raises[-FUTILE_RAISES:]),
            None if overloaded is None else float(overloaded),
            overloaded_now,
            float(backlog),
        )
