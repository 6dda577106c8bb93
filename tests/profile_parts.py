"""Where a decide of the shipped default goes, part by part, timed without a profiler.

    .venv/bin/python -m tests.profile_parts [--vas 1000] [--config profiles] [--cycles 5] [--first-cycles]

The cycle benchmark's fleet and recorded Prometheus answers (tests/bench_collect.py), decided as the reconciler
decides (`decide_cycle`) with the ConfigMaps of tests/bench_default.py (`profiles`, `learning` or `v1`), every
model's forecaster holding a full history unless `--first-cycles` (`bench_default.full_histories`), after one warm
cycle. Each part in `PARTS` is timed by wrapping the function where its caller looks it up (`timed_parts`); a
part includes the parts it calls, so the table is a tree read by its indentation. Printed: the median cycle (by
its CPU time) as a Markdown table of wall ms a cycle and the share of the decide.

Why not cProfile: it charges a fixed cost to every call, so many small calls look expensive. Two changes it
pointed to measured within the noise (docs/benchmarks/scale.md, item 13), while the parts here, a handful of calls
a cycle each, cost the wrapper ~1 µs a call: their figures are what the decide spends.
Figures only, never an assertion on time.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple


class Part(NamedTuple):
    """A timed part: its label, its depth in the table, and where its caller looks the function up
    ("module:attribute", the attribute a dotted path inside the module)."""

    label: str
    depth: int
    target: str


P = "adapter.analyzers.predictive.analyzer"
PARTS: tuple[Part, ...] = (
    Part("variants by model", 0, "adapter.engine.pipeline:Snapshot.variants_by_model"),
    Part("pods by variant", 0, "adapter.engine.pipeline:Snapshot.pods_by_variant"),
    Part("framing (every model)", 0, "adapter.engine.pipeline:_frame"),
    Part("prepare (the predictive analyzer, every model at once)", 0, f"{P}:_prepare"),
    Part("restore, workload and the forecasters' observation", 1, f"{P}:_restore_and_observe"),
    Part("workload (busy pods, Σλ, request size)", 2, f"{P}:observe"),
    Part("forecaster advance", 2, "adapter.analyzers.predictive.forecast:Forecaster.advance"),
    Part("period searches due", 1, f"{P}:with_periods"),
    Part("filters (learning α, β, γ)", 1, "adapter.analyzers.queueing.ekf:learn_many"),
    Part("SLO, targets, λ* queries", 1, f"{P}:_sized"),
    Part("λ* (every variant in lockstep)", 1, f"{P}:per_replica_rps"),
    Part(
        "measuring (block by block: the other models framed, every model measured)",
        0,
        "adapter.engine.pipeline:_measure",
    ),
    Part("analyses (the models' own steps)", 1, f"{P}:_measure"),
    Part("demand (backlog and forecast)", 2, f"{P}:_demand"),
    Part("forecast peak", 3, "adapter.analyzers.predictive.forecast:Forecaster.peak"),
    Part("supply", 2, f"{P}:_supply"),
    Part("persisted state (to_json)", 1, f"{P}:ModelState.to_json"),
    Part("recommender", 0, "adapter.engine.recommend:observe"),
    Part("allocation", 0, "adapter.engine.pipeline:allocate"),
    Part("outcome (enforcer, fallback)", 0, "adapter.engine.pipeline:outcome_of"),
    Part("finish (bounds, conditions, status)", 0, "adapter.engine.pipeline:finish"),
    Part("GPU pools, their usage", 0, "adapter.engine.pipeline:_pool_usage"),
    Part("the analyzers' memories for the next cycle", 0, "adapter.engine.pipeline:_memories"),
    Part("variants asked to wake (unwoken.advance)", 0, "adapter.engine.unwoken:advance"),
)
"""The parts of the shipped default's decide. A part the configuration does not run (the filters with profiles, the
whole analyzer with V1) reads 0."""


@contextlib.contextmanager
def timed_parts(parts: Sequence[Part], clock: Callable[[], float] = time.perf_counter) -> Iterator[dict[str, float]]:
    """Within the block, every part's function is replaced where it is looked up by one that adds its time (by
    `clock`) to the yielded dict under its label; every function is put back on exit, whatever happens."""
    spent: dict[str, float] = {part.label: 0.0 for part in parts}
    restore: list[tuple[Any, str, Any]] = []

    def timed(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label] += clock() - started

        return wrapper

    try:
        for part in parts:
            module_name, path = part.target.split(":")
            owner: Any = importlib.import_module(module_name)
            *outer, name = path.split(".")
            for attribute in outer:
                owner = getattr(owner, attribute)
            original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
            restore.append((owner, name, original))
            setattr(owner, name, timed(part.label, getattr(owner, name)))
        yield spent
    finally:
        for owner, name, original in reversed(restore):
            setattr(owner, name, original)


def table(parts: Sequence[Part], spent: dict[str, float], decide_s: float) -> str:
    lines = ["| part | ms a cycle | share of decide |", "|---|---:|---:|"]
    for part in parts:
        indent = "&nbsp;&nbsp;" * part.depth
        seconds = spent[part.label]
        lines.append(f"| {indent}{part.label} | {seconds * 1e3:.1f} | {seconds / decide_s:.0%} |")
    lines.append(f"| **decide** | **{decide_s * 1e3:.1f}** | 100% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.profile_parts", description=__doc__.splitlines()[0])
    parser.add_argument("--vas", type=int, default=1000)
    parser.add_argument("--config", choices=("profiles", "learning", "v1"), default="profiles")
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--first-cycles", action="store_true", help="keep the first cycles' short forecast histories")
    args = parser.parse_args(argv)

    from adapter import engine
    from tests.bench_collect import NOW_S
    from tests.bench_default import configs, fleet_snapshot, full_histories
    from tests.profile_cycle import decide_fn

    decide = decide_fn()
    snapshot = fleet_snapshot(args.vas)
    config = configs()[args.config]
    _, state = decide(snapshot, engine.EngineState(), config, NOW_S - 60)
    if not args.first_cycles:
        state = full_histories(state, NOW_S - 60)
    _, state = decide(snapshot, state, config, NOW_S - 30)  # warm: the carried forms, the first searches
    cycles: list[tuple[float, float, dict[str, float]]] = []
    for cycle in range(args.cycles):
        with timed_parts(PARTS) as spent:
            cpu, wall = time.process_time(), time.perf_counter()
            _, state = decide(snapshot, state, config, NOW_S + 30.0 * cycle)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        cycles.append((cpu, wall, dict(spent)))
    cpu, wall, spent = sorted(cycles, key=lambda c: c[0])[len(cycles) // 2]
    histories = "the first cycles' forecast histories" if args.first_cycles else "full forecast histories"
    print(
        f"decide, {args.config}, {args.vas:,} VAs, {histories}: the median of {args.cycles} cycles by CPU "
        f"({cpu * 1e3:.0f} ms CPU, {cpu * 1e6 / args.vas:.0f} µs a VA; the cycles' CPU "
        f"{', '.join(f'{c[0] * 1e3:.0f}' for c in cycles)} ms)"
    )
    print(table(PARTS, spent, wall))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
