"""The picture of one simulation (matplotlib, Agg backend: no display needed).

Four panels over minutes since the start: the offered load (arrivals per second between scrapes) and the EPP
queue; replicas per variant (spec.replicas as a step, ready pods dashed, and dotted either a reference run's
spec.replicas — e.g. oracle@99 played in the loop — or, without one, the oracle bound's plan); the p99
TTFT per minute of arrival against the TTFT target; the p99 ITL per minute against the ITL target. Dropped
requests are marked as crosses on the TTFT panel's top edge.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from adapter.sim.simulate import Simulation

BIN_S = 60.0


def _p99_per_bin(t_min: np.ndarray, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    out = np.full(edges.size - 1, np.nan)
    keep = ~np.isnan(values)
    t_min, values = t_min[keep], values[keep]
    index = np.searchsorted(edges, t_min, side="right") - 1
    for b in range(out.size):
        selected = values[index == b]
        if selected.size:
            out[b] = float(np.percentile(selected, 99))
    return out


def _name(sim: Simulation) -> str:
    return "oracle@99 in the loop" if str(sim.policy) == "oracle" else f"{sim.policy} reference"


def plot(sim: Simulation, path: Path, *, reference: Simulation | None = None, dpi: int = 90) -> Path:
    """Write the PNG; returns its path (parent directories are created). `reference`: another run of the same
    scenario whose spec.replicas are drawn dotted (its policy named in the legend and the title)."""
    fleet = sim.fleet
    points = [p for p in fleet.timeline if p.t_s <= sim.end_s + 1e-9]
    t = np.array([(p.t_s - sim.start_s) / 60.0 for p in points])
    arrived = np.array([p.arrived for p in points], dtype=np.float64)
    outcomes = fleet.outcomes()
    slo = sim.scenario.slo
    fig, axes = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
    load, replicas, ttft, itl = axes
    if t.size > 1:
        rate = np.diff(arrived) / np.maximum(np.diff(t) * 60.0, 1e-9)
        load.step(t[1:], rate, where="pre", lw=0.8, label="arrivals (req/s)")
        load.step(t, [p.epp_queue for p in points], where="post", lw=0.6, color="C3", label="EPP queue")
    load.set_ylabel("load")
    load.legend(fontsize=7, loc="upper left")
    _replica_panel(replicas, sim, reference, t, points)
    replicas.set_ylabel("replicas")
    replicas.legend(fontsize=7, loc="upper left", ncol=3)
    end_min = (sim.end_s - sim.start_s) / 60.0
    edges = np.arange(0.0, end_min + BIN_S / 60.0, BIN_S / 60.0)
    arrival_min = (outcomes.arrival_s - sim.start_s) / 60.0
    centers = edges[:-1]
    ttft.step(centers, _p99_per_bin(arrival_min, outcomes.ttft_s * 1000.0, edges), where="post", label="p99 TTFT")
    ttft.axhline(slo.ttft_ms, color="k", ls=":", lw=0.9, label=f"SLO {slo.ttft_ms:g} ms")
    if outcomes.dropped:
        dropped_min = (outcomes.dropped_arrival_s - sim.start_s) / 60.0
        ttft.plot(dropped_min, np.full(dropped_min.size, slo.ttft_ms * 10), "x", ms=3, color="C3", label="dropped")
    ttft.set_yscale("log")
    ttft.set_ylabel("TTFT (ms)")
    ttft.legend(fontsize=7, loc="upper left")
    itl.step(centers, _p99_per_bin(arrival_min, outcomes.itl_s * 1000.0, edges), where="post", color="C1",
             label="p99 ITL")  # fmt: skip
    itl.axhline(slo.itl_ms, color="k", ls=":", lw=0.9, label=f"SLO {slo.itl_ms:g} ms")
    itl.set_ylabel("ITL (ms)")
    itl.set_xlabel("minutes")
    itl.legend(fontsize=7, loc="upper left")
    fig.suptitle(_title(sim, reference), fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def _replica_panel(ax: Any, sim: Simulation, reference: Simulation | None, t: np.ndarray, points: list[Any]) -> None:
    """Spec as a step and ready pods dashed per variant; dotted, the reference run's spec or the bound's plan."""
    for i, v in enumerate(sim.fleet.variants):
        color = f"C{i}"
        ax.step(t, [p.spec[i] for p in points], where="post", color=color, label=f"{v.name} spec")
        ax.plot(t, [p.ready[i] for p in points], ls="--", lw=0.7, color=color, label=f"{v.name} ready")
        if reference is not None:
            ref = [p for p in reference.fleet.timeline if p.t_s <= reference.end_s + 1e-9]
            ref_t = [(p.t_s - reference.start_s) / 60.0 for p in ref]
            ax.step(ref_t, [p.spec[i] for p in ref], where="post", ls=":", lw=0.9, color=color,
                    label=f"{v.name} {_name(reference)}")  # fmt: skip
        else:
            plan = sim.oracle.replicas[i]
            bins_t = np.arange(plan.size + 1) * sim.scenario.engine_interval_s / 60.0
            ax.step(bins_t, np.append(plan, plan[-1]), where="post", ls=":", lw=0.9, color=color,
                    label=f"{v.name} oracle plan")  # fmt: skip


def _title(sim: Simulation, reference: Simulation | None) -> str:
    """Policy, attainment and cost, against the bound and oracle@99; the reference run's figures below."""
    s = sim.summary
    ratio = s.get("cost_ratio_vs_oracle")
    title = (
        f"{sim.scenario.name} — {sim.policy}: SLO attainment {s['slo_attainment']:.1%}, cost {s['cost']:.2f}"
        f" (bound {s['oracle_cost']:.2f}{f', {ratio:.2f}x' if ratio is not None else ''}"
    )
    if s.get("oracle99_cost"):
        title += f"; oracle@99 {s['oracle99_cost']:.2f}, {s['cost_ratio_vs_oracle99']:.2f}x"
    if reference is not None:
        r = reference.summary
        title += f")\ndotted: {_name(reference)}, attainment {r['slo_attainment']:.1%}, cost {r['cost']:.2f}"
    else:
        title += ")"
    return title
