"""Profile one reconcile cycle's data path at fleet scale: where the time and the memory go.

    .venv/bin/python -m tests.profile_cycle [--vas 10000] [--top 5]

The same fleet and recorded Prometheus answers as tests/bench_collect.py (the fake runs in a child process).
Printed as Markdown tables for docs/benchmarks/scale.md:

* collect: cProfile of the collector's per-query work done serially in this thread (fetch, decode, digest), then
  the join into the `Collection`; the worker threads of `collect()` do exactly this work, but cProfile sees only
  the thread it runs in;
* decide: cProfile of `engine.decide` as the reconciler calls it (`decide_cycle`, with the cyclic GC paused when
  the code under test pauses it), on the snapshot of that collection, with the engine state of a previous cycle;
* memory: per stage, tracemalloc's peak and the largest allocation sites (by line) of what is live with the
  stage's result (the collection; the decisions and the next state).

cProfile adds a fixed cost per call, so it over-weights small, frequent functions; the shares are what to read,
not the absolute times (tests/bench_collect.py measures those without a profiler).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import re
import tracemalloc
from collections.abc import Callable
from typing import Any

from adapter import engine
from adapter.config.engine import EngineConfig
from adapter.domain.cluster import Collection
from adapter.domain.snapshot import Snapshot
from adapter.metrics import answers
from adapter.metrics.collector import PrometheusCollector
from adapter.metrics.queries import build_queries
from tests.bench_collect import NOW_S, Fleet, make_fleet, start_fake


def collect_serially(collector: PrometheusCollector, fleet: Fleet) -> Collection:
    """The work of `collector.collect` without its thread pool (so cProfile sees it)."""
    queries = build_queries(fleet.models, windows=collector.windows)
    if hasattr(collector, "pod_index"):  # issue 22: fetch the body, then decode and digest it
        index = collector.pod_index(fleet.pod_variants)
        outcomes = [(q, collector._digest(q, collector._receive(collector._send(q.promql)), index)) for q in queries]
        return answers.join(fleet.models, outcomes, index)
    outcomes = [(q, collector._fetch_digest(q, fleet.pod_variants)) for q in queries]  # type: ignore[attr-defined, unused-ignore]
    return answers.join(fleet.models, outcomes, fleet.pod_variants)  # type: ignore[arg-type, unused-ignore]


def decide_fn() -> Callable[..., Any]:
    """How the reconciler calls the engine (with the GC pause where the code has one)."""
    try:
        from adapter.reconciler.loop import decide_cycle

        return decide_cycle
    except ImportError:
        return engine.decide


def short(path: str) -> str:
    """A source path without the machine's prefix: `adapter/metrics/collector.py`, `json/decoder.py`."""
    for marker in ("/site-packages/", "/lib/python3.11/"):
        if marker in path:
            return path.rsplit(marker, maxsplit=1)[-1]
    match = re.search(r"/((?:adapter|tests)/.*)$", path)
    return match.group(1) if match else path


def profile_table(fn: Callable[[], Any], top: int) -> tuple[str, float]:
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    stats = pstats.Stats(prof, stream=io.StringIO())
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:top]  # type: ignore[attr-defined]
    lines = ["| function | calls | own s | own % | cumulative s |", "|---|---:|---:|---:|---:|"]
    for (path, line, name), (_, calls, own, cumulative, _) in rows:
        lines.append(
            f"| `{short(path)}:{line}({name})` | {calls} | {own:.3f} | {100 * own / total:.0f} % | {cumulative:.3f} |"
        )
    return "\n".join(lines), total


def memory_table(fn: Callable[[], Any], top: int) -> tuple[str, float, Any]:
    """Run `fn` under tracemalloc: its peak, and the largest sites of what is still live while its result is."""
    tracemalloc.start(1)
    result = fn()
    _, peak = tracemalloc.get_traced_memory()
    snapshot = tracemalloc.take_snapshot()
    tracemalloc.stop()
    total = sum(stat.size for stat in snapshot.statistics("filename"))
    lines = [f"| allocated at (live with the result: {total / 2**20:.0f} MB) | MB | blocks |", "|---|---:|---:|"]
    for stat in snapshot.statistics("lineno")[:top]:
        frame = stat.traceback[0]
        lines.append(f"| `{short(frame.filename)}:{frame.lineno}` | {stat.size / 2**20:.1f} | {stat.count} |")
    return "\n".join(lines), peak / 2**20, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.profile_cycle", description=__doc__.splitlines()[0])
    parser.add_argument("--vas", type=int, default=10000)
    parser.add_argument("--top", type=int, default=5)
    args = parser.parse_args(argv)
    proc, url = start_fake(args.vas)
    try:
        fleet = make_fleet(args.vas)
        decide = decide_fn()
        collector = PrometheusCollector(url, timeout_s=120)
        try:
            collection = collect_serially(collector, fleet)  # warm-up
            snapshot = Snapshot(NOW_S, fleet.views, collection.pods, collection.models)
            _, state = decide(snapshot, engine.EngineState(), EngineConfig(), NOW_S - 30)
            table, total = profile_table(lambda: collect_serially(collector, fleet), args.top)
            title = f"top {args.top} by own time (profiled total {total:.2f} s)"
            print(f"### collect, {args.vas} VAs: {title}\n\n{table}\n")
            table, total = profile_table(lambda: decide(snapshot, state, EngineConfig(), NOW_S), args.top)
            print(f"### decide, {args.vas} VAs: top {args.top} by own time (profiled total {total:.2f} s)\n\n{table}\n")
            del collection, snapshot
            table, peak, collection = memory_table(lambda: collect_serially(collector, fleet), args.top)
            print(f"### memory of collect, {args.vas} VAs: tracemalloc peak {peak:.0f} MB\n\n{table}\n")
            snapshot = Snapshot(NOW_S, fleet.views, collection.pods, collection.models)
            table, peak, _ = memory_table(lambda: decide(snapshot, state, EngineConfig(), NOW_S), args.top)
            print(f"### memory of decide, {args.vas} VAs: tracemalloc peak {peak:.0f} MB\n\n{table}\n")
        finally:
            collector.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
