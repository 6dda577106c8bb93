"""Where a run's misses are: in the load no causal policy had seen yet, or in load it could have been ready for.

A policy learns a workload from what has arrived. Load that rises far above everything before it — the first
requests of the run (a cold start), a step, a workload's first burst — can be met on time only by replicas ordered
before it was seen, and a replica takes its startup time. So the requests that arrive from such a rise until a
startup after it are **unforeseen**: a clairvoyant schedule (oracle@99) or a static fleet sized in hindsight can
meet them, a causal policy only by standing capacity it had no reason to hold. Every other request is
**foreseeable**: the load was seen before, at least once, a startup ago or more.

    rate(m)     = arrivals in minute m / 60 s                          (minutes from the start of the run)
    rise at m  ⇔ rate(m) > RISE × max(rate(0..m−1))                    (the first minute with load: always)
    unforeseen  = arrivals in [start of m, end of m + lead) for every rise m, lead = the largest p90 startup

Worked example: 4 req/s for 15 minutes, then 24 req/s (steps), startups p90 300 s: minute 0 is a rise (the first
load), so [0, 360 s) is unforeseen; minute 15 (24 > 1.25 × 4) is a rise, so [900, 1260 s) is; a later return to
24 req/s is not (it was seen). The split depends on the workload and the startup only, never on the policy:
every policy is scored on the same requests.

`RISE` = 1.25: a rise within a quarter of the highest load seen is within the margin a policy keeps (the
predictive analyzer's upper-quantile forecast runs ~20–30 % above the arrival rate on the conversation trace:
seed 0 of the benchmark's azure-conv, 21.1 → 26.7 req/s at minute 18).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from adapter.sim.fleet import RequestOutcomes
    from adapter.sim.simulate import Simulation

RISE = 1.25
BIN_S = 60.0


@dataclass(frozen=True, slots=True)
class MissSplit:
    """A run's requests (completed and dropped; in flight at the end not counted, as in `slo_attainment`)
    split by whether their load was foreseeable, and how many of each met both targets."""

    unforeseen: int
    unforeseen_met: int
    foreseeable: int
    foreseeable_met: int
    windows_s: tuple[tuple[float, float], ...]
    """The unforeseen windows, in seconds from the start of the run."""

    @property
    def unforeseen_share(self) -> float:
        total = self.unforeseen + self.foreseeable
        return self.unforeseen / total if total else 0.0

    @property
    def foreseeable_attainment(self) -> float:
        """Attainment on the foreseeable requests (1.0 when there are none, as `slo_attainment` of nothing)."""
        return self.foreseeable_met / self.foreseeable if self.foreseeable else 1.0

    @property
    def unforeseen_attainment(self) -> float:
        return self.unforeseen_met / self.unforeseen if self.unforeseen else 1.0

    @property
    def misses_unforeseen_share(self) -> float:
        """The share of all misses that fell on unforeseen requests."""
        missed = (self.unforeseen - self.unforeseen_met) + (self.foreseeable - self.foreseeable_met)
        return (self.unforeseen - self.unforeseen_met) / missed if missed else 0.0

    def as_dict(self) -> dict[str, float]:
        return {
            "unforeseen_share": round(self.unforeseen_share, 6),
            "foreseeable_attainment": round(self.foreseeable_attainment, 6),
            "unforeseen_attainment": round(self.unforeseen_attainment, 6),
            "misses_unforeseen_share": round(self.misses_unforeseen_share, 6),
        }


def unforeseen_windows(
    arrivals_s: npt.NDArray[np.float64], *, lead_s: float, rise: float = RISE, bin_s: float = BIN_S
) -> tuple[tuple[float, float], ...]:
    """The windows [start of a rise's minute, its end + lead) of the module docstring, merged where they
    overlap; `arrivals_s` in seconds from the start of the run (any order)."""
    if not (lead_s >= 0 and math.isfinite(lead_s)):
        raise ValueError(f"lead_s must be a finite number >= 0, got {lead_s!r}")
    if arrivals_s.size == 0:
        return ()
    counts = np.bincount(np.floor(np.maximum(arrivals_s, 0.0) / bin_s).astype(np.int64))
    windows: list[tuple[float, float]] = []
    highest = 0.0
    for minute, count in enumerate(counts.tolist()):
        if count > 0 and count > rise * highest:
            start, end = minute * bin_s, (minute + 1) * bin_s + lead_s
            if windows and start <= windows[-1][1]:
                windows[-1] = (windows[-1][0], max(windows[-1][1], end))
            else:
                windows.append((start, end))
        highest = max(highest, float(count))
    return tuple(windows)


def split_misses(
    arrivals_s: npt.NDArray[np.float64],
    met: npt.NDArray[np.bool_],
    *,
    lead_s: float,
    rise: float = RISE,
    bin_s: float = BIN_S,
) -> MissSplit:
    """Split the requests (arrival times from the start of the run, and whether each met both targets).

    Example: arrivals at 0 s and 10 s (minute 0, the first load: a rise) and at 400 s (minute 6, one request:
    no rise), met [False, True, True], lead 300 s ⇒ windows ((0, 360),); two unforeseen (one met), one
    foreseeable (met)."""
    if arrivals_s.shape != met.shape:
        raise ValueError(f"arrivals and met differ in shape: {arrivals_s.shape} vs {met.shape}")
    windows = unforeseen_windows(arrivals_s, lead_s=lead_s, rise=rise, bin_s=bin_s)
    inside = np.zeros(arrivals_s.shape, dtype=bool)
    for start, end in windows:
        inside |= (arrivals_s >= start) & (arrivals_s < end)
    return MissSplit(
        unforeseen=int(np.count_nonzero(inside)),
        unforeseen_met=int(np.count_nonzero(inside & met)),
        foreseeable=int(np.count_nonzero(~inside)),
        foreseeable_met=int(np.count_nonzero(~inside & met)),
        windows_s=windows,
    )


def of_run(outcomes: RequestOutcomes, *, start_s: float, ttft_s: float, itl_s: float, lead_s: float) -> MissSplit:
    """`split_misses` of a finished run: its completed requests (met when both targets are, a one-token answer's
    NaN ITL as met) and its dropped ones (missed), arrival times from `start_s` — the requests and the rule of
    `RequestOutcomes.slo_attainment`, so that met / requests of the two parts together is the run's attainment."""
    completed_met = outcomes.met(ttft_s=ttft_s, itl_s=itl_s)
    arrivals = np.concatenate([outcomes.arrival_s, outcomes.dropped_arrival_s]) - start_s
    met = np.concatenate([completed_met, np.zeros(outcomes.dropped_arrival_s.size, dtype=bool)])
    return split_misses(arrivals, met, lead_s=lead_s)


def of_simulation(sim: Simulation) -> MissSplit:
    """`of_run` of a simulation, with the scenario's SLO and its variants' largest p90 startup as the lead."""
    lead_s = max(v.startup.p90_s for v in sim.fleet.variants)
    slo = sim.scenario.slo
    return of_run(
        sim.fleet.outcomes(), start_s=sim.start_s, ttft_s=slo.ttft_ms / 1000.0, itl_s=slo.itl_ms / 1000.0, lead_s=lead_s
    )
