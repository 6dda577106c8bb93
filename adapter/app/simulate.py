"""Composition of `wva-adapter simulate`: the simulated fleet and the collector's own query path.

`adapter.sim` may not import `adapter.metrics` (independent layers, .importlinter), so the piece that joins them
lives here: `SimulatedPrometheus`, the reconciler's `MetricsSource` for a simulation. Each cycle it builds the
queries `serve` builds (`build_queries`: what the models' decisions read, with the default windows `serve` uses),
answers each from the simulated Prometheus (`adapter.sim.metricspath.SeriesStore`) at the virtual now, and hands
the answers to the collector's `assemble` (digest → join, with its checks, drops and counters). The engine
therefore sees exactly the `Collection` → `Snapshot` a real Prometheus holding the same samples would give it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TextIO

from adapter.domain.cluster import Collection, ModelQuery
from adapter.domain.errors import ConfigError
from adapter.metrics.answers import assemble
from adapter.metrics.queries import ALL_QUERIES, HISTOGRAM_QUERIES, Query, QueryName, QueryWindows, build_queries
from adapter.sim import scenario as scenario_module
from adapter.sim.frontier import Frontier, Hint, search
from adapter.sim.metricspath import SeriesStore
from adapter.sim.oracle import OraclePlan
from adapter.sim.policies import parse_policy
from adapter.sim.simulate import Clock, RunOptions, Simulation, oracle_bound, progress_bar, simulate

PLOT_EXTRA_HINT = "pip install 'wva-adapter[sim]'"


def query_window_s(query: Query, windows: QueryWindows) -> float:
    """The range a query's PromQL selects (what `build_queries` renders into it): e.g. `[1m]` for the KV
    usage's `max_over_time`, the retention period for the request count; 0 for instant queries."""
    name = query.name
    if name in (QueryName.KV_CACHE_USAGE, QueryName.QUEUE_LENGTH):
        return windows.saturation_s
    if name in (QueryName.AVG_INPUT_TOKENS, QueryName.AVG_OUTPUT_TOKENS, QueryName.PREFIX_CACHE_HIT_RATE):
        return windows.tokens_s
    if name in (QueryName.AVG_TTFT, QueryName.AVG_ITL):
        return windows.latency_s
    if name is QueryName.DISPATCH_RATE:
        return windows.dispatch_s
    if name is QueryName.REQUEST_COUNT:
        return float(query.retention_s or 0.0)
    if name in HISTOGRAM_QUERIES:
        return windows.latency_histogram_s
    return 0.0


class SimulatedPrometheus:
    """`MetricsSource` over a SeriesStore: the collector's query building and assembly, answers from the sim."""

    def __init__(self, store: SeriesStore, clock: Clock, *, windows: QueryWindows | None = None) -> None:
        self.store = store
        self.clock = clock
        self.windows = windows or QueryWindows()
        self.collections = 0

    async def collect(self, models: Sequence[ModelQuery], pod_variants: Mapping[tuple[str, str], str]) -> Collection:
        now_s = self.clock()
        queries = build_queries(models, windows=self.windows, metrics=ALL_QUERIES)
        outcomes = [
            (q, self.store.answer(q.name.value, now_s=now_s, window_s=query_window_s(q, self.windows) or 1.0))
            for q in queries
        ]
        self.collections += 1
        return assemble(models, outcomes, pod_variants)


def simulated_prometheus(store: SeriesStore, clock: Clock) -> SimulatedPrometheus:
    return SimulatedPrometheus(store, clock)


def run_scenario(
    scenario: scenario_module.Scenario,
    *,
    policy: str | None = None,
    seed: int | None = None,
    show_progress: TextIO | None = None,
    options: RunOptions | None = None,
) -> Simulation:
    """One simulation with the real metrics path; a progress bar on `show_progress` when it is a terminal."""
    progress = progress_bar(show_progress) if show_progress is not None else None
    return simulate(
        scenario, policy=policy, seed=seed, metrics=simulated_prometheus, progress=progress, options=options
    )


def find_frontier(
    scenario: scenario_module.Scenario,
    seed: int,
    *,
    bound: OraclePlan | None = None,
    static: bool = True,
    hint: Hint | None = None,
) -> Frontier:
    """The achievable frontier of (scenario, seed) (adapter.sim.frontier), every candidate played in the loop."""
    bound = bound or oracle_bound(scenario, seed)

    def runner(policy: str, options: RunOptions) -> Simulation:
        return simulate(scenario, policy=policy, seed=seed, metrics=simulated_prometheus, options=options)

    return search(scenario, seed, runner=runner, bound=bound, static=static, hint=hint)


def main(
    scenario_path: Path,
    *,
    policy: str | None,
    out_dir: Path | None,
    seed: int | None,
    frontier: bool = True,
    max_requests: int | None = None,
    stdout: TextIO = sys.stdout,
) -> int:
    """`wva-adapter simulate`: the summary JSON on stdout, the plot into `out_dir`. Raises ConfigError (exit 2),
    also before anything runs when the scenario would generate more requests than `max_requests` per run
    (default `adapter.sim.scenario.MAX_REQUESTS`). With `frontier` the summary carries `oracle99_cost` (a
    schedule search of up to 15 more runs, each stopped as soon as it cannot reach the target; static fleets
    are not searched here, `make bench-sim` does)."""
    plot = plotter() if out_dir is not None else None  # before minutes of simulation, not after
    scenario = scenario_module.load(scenario_path)
    scenario_module.check_work(scenario, max_requests=max_requests)
    run_seed = scenario.seed if seed is None else seed
    parse_policy(policy or scenario.policy)  # an unknown policy fails before the frontier's runs
    options = None
    if frontier:
        bound = oracle_bound(scenario, run_seed)
        options = RunOptions(bound=bound, frontier=find_frontier(scenario, run_seed, bound=bound, static=False))
    sim = run_scenario(scenario, policy=policy, seed=seed, show_progress=sys.stderr, options=options)
    if plot is not None and out_dir is not None:
        png = plot(sim, out_dir / f"{_file_safe(scenario.name)}-{sim.policy}.png")
        sim.summary["plot"] = str(png)
    print(json.dumps(sim.summary, indent=2), file=stdout)
    return 0


def plotter() -> Callable[[Simulation, Path], Path]:
    """`adapter.sim.plot.plot`, or a ConfigError saying how to get it: matplotlib is the optional `sim` extra
    (the serving image does not carry it)."""
    try:
        from adapter.sim.plot import plot
    except ImportError as exc:
        raise ConfigError(
            f"--out: the plot needs matplotlib, which is not installed ({exc.name or exc}); "
            f"install it with {PLOT_EXTRA_HINT}, or leave out --out for the summary alone"
        ) from None
    return plot


def _file_safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name) or "scenario"
