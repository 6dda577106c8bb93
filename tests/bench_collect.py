"""Benchmark: one full reconcile cycle's data path at fleet scale, from recorded Prometheus answers.

    .venv/bin/python -m tests.bench_collect [--runs 5] [--scales 100,1000,10000] [--metrics all,v1] [--cycles 50]

Per scale (VAs = models × 3 variants, 10 pods per VA; 1,000 VAs = 334 models and 10,000 pods):

1. `collect`: the real `PrometheusCollector` (requests, typed decoding, digest and per-pod assembly) against a
   local aiohttp fake `/api/v1/query` that serves answers generated once (the same query strings
   `build_queries` makes, the latency histograms included, realistic labels and values, a few NaN from idle
   pods), gzipped for a client that accepts gzip as Prometheus does (each answer compressed once, when first
   asked). The fake runs in a child process so its work and memory are not measured.
2. `snapshot`: joining the Collection with the inventory's VariantViews into a `Snapshot`, as `serve` joins them
   (`reconciler.assemble.build_snapshot`: the pods of known VAs only).
3. `decide`: as the reconciler runs it (`decide_cycle`: the GC paused), with the engine state of the previous
   cycle carried over and the clock 30 s later each cycle.
4. `publish`: `DecisionStore.publish` of the decisions.

Each scale runs in its own process (so peak RSS is that scale's): one warm-up cycle, then `--runs` measured
cycles; medians are reported (wall per stage, and the process' CPU for the cycle, steadier on a shared
machine), plus ru_maxrss (peak RSS of the process: Python, the fleet, the answers in flight), the peak RSS of
the measured cycles alone (`cycles_peak_rss_mb`: VmHWM reset after the warm-up and, with `--histories full`, after
the histories are put in, which builds a second engine state beside the first for a moment: no `serve` does that)
and tracemalloc's peak for one extra cycle (Python allocations of the cycle alone). `--cycles N` goes on to N
cycles and reports the resident set's growth from the end of the measured runs to the last cycle (steady state:
nothing should grow). Ratios are against the 1,000-VA row, so 10× more VAs should read ≈10× for linear growth. No
asserts: figures only. `main` returns the figures for tests/bench.py's summary.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gzip
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from adapter import engine
from adapter.app.memory import tune_malloc
from adapter.config.engine import EngineConfig
from adapter.domain.cluster import ClusterView, Collection, ModelQuery
from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.latency import VLLM_ITL_BUCKETS_S, VLLM_TTFT_BUCKETS_S
from adapter.domain.snapshot import DesiredAlloc, ScaleTarget, VariantSpec, VariantStatus, VariantView
from adapter.metrics.collector import PrometheusCollector
from adapter.metrics.queries import EPP_MODEL_LABEL, Query, QueryName, build_queries
from adapter.reconciler.assemble import build_snapshot
from adapter.store.decisions import DecisionStore
from tests import benchchild
from tests.metrics import V1_QUERIES

VARIANTS_PER_MODEL = 3
PODS_PER_VA = 10
NAMESPACES = 10
ACCELERATORS = (("L4", 0.8), ("A100", 2.5), ("H100", 4.0))
NOW_S = 1_780_000_000.0
STAGES = ("collect", "snapshot", "decide", "publish", "total")


@dataclass(frozen=True)
class Fleet:
    models: list[ModelQuery]
    views: tuple[VariantView, ...]
    pods: list[tuple[str, str, str, str]]
    """(namespace, pod, model_id, variant)."""
    pod_variants: dict[tuple[str, str], str]
    """What the k8s inventory hands the collector (built there, not per collection)."""


def make_fleet(n_vas: int) -> Fleet:
    n_models = -(-n_vas // VARIANTS_PER_MODEL)
    models: list[ModelQuery] = []
    views: list[VariantView] = []
    pods: list[tuple[str, str, str, str]] = []
    for m in range(n_models):
        key = ModelKey(f"team-{m % NAMESPACES:02d}", f"org/model-{m:05d}")
        models.append(ModelQuery(key, retention_s=600.0 if m % 4 else 300.0))
        for v, (accelerator, cost) in enumerate(ACCELERATORS):
            if len(views) == n_vas:
                break
            name = f"model-{m:05d}-{accelerator.lower()}"
            spec = VariantSpec(
                key=VariantKey(key.namespace, name),
                model_id=key.model_id,
                target_kind="Deployment",
                target_name=name,
                min_replicas=1,
                max_replicas=30,
                cost=cost * (1 + v),
                accelerator=accelerator,
            )
            status = VariantStatus(
                desired=DesiredAlloc(PODS_PER_VA, "steady", NOW_S - 30, NOW_S - 900, accelerator=accelerator)
            )
            target = ScaleTarget("Deployment", key.namespace, name, PODS_PER_VA, PODS_PER_VA)
            views.append(VariantView(spec=spec, status=status, target=target))
            pods.extend((key.namespace, f"{name}-{i:02d}", key.model_id, name) for i in range(PODS_PER_VA))
    return Fleet(models, tuple(views), pods, {(ns, pod): variant for ns, pod, _, variant in pods})


# ------------------------------------------------------------------------------------------ recorded answers


def _sample(labels: Mapping[str, str], value: float | str) -> dict[str, Any]:
    return {"metric": dict(labels), "value": [NOW_S, str(value)]}


def record_answers(fleet: Fleet, *, seed: int = 7) -> dict[str, bytes]:
    """The JSON body Prometheus would send for each query of one cycle, keyed by the exact query string."""
    rng = random.Random(seed)
    load = {}  # per model: a load level, so some models saturate and some idle
    for mq in fleet.models:
        load[mq.key.model_id] = rng.choice((0.0, 0.2, 0.5, 0.85, 0.95))
    answers: dict[str, bytes] = {}
    for query in build_queries(fleet.models):
        answers[query.promql] = json.dumps(
            {"status": "success", "data": {"resultType": "vector", "result": _result(query, fleet, load, rng)}}
        ).encode()
    return answers


def _result(query: Query, fleet: Fleet, load: dict[str, float], rng: random.Random) -> list[dict[str, Any]]:
    name = query.name
    if name is QueryName.REQUEST_COUNT:
        return [
            _sample({"namespace": mq.key.namespace, "model_name": mq.key.model_id}, round(load[mq.key.model_id] * 900))
            for mq in fleet.models
            if mq.key in query.models
        ]
    if name in (QueryName.TTFT_HISTOGRAM, QueryName.TPOT_HISTOGRAM):
        # model-level: one series per model and vLLM default edge, cumulative rates of a model's requests
        edges = VLLM_TTFT_BUCKETS_S if name is QueryName.TTFT_HISTOGRAM else VLLM_ITL_BUCKETS_S
        typical = 0.5 if name is QueryName.TTFT_HISTOGRAM else 0.05
        out = []
        for mq in fleet.models:
            total = load[mq.key.model_id] * 40.0
            for le in (*edges, math.inf):
                share = 1.0 if math.isinf(le) else le / (le + typical)
                labels = {"namespace": mq.key.namespace, "model_name": mq.key.model_id}
                labels["le"] = "+Inf" if math.isinf(le) else repr(le)
                out.append(_sample(labels, round(total * share, 4)))
        return out
    if name in (QueryName.EPP_QUEUE_SIZE, QueryName.EPP_QUEUE_BYTES):
        per_req = 1 if name is QueryName.EPP_QUEUE_SIZE else 4096
        return [
            _sample(
                {"namespace": mq.key.namespace, EPP_MODEL_LABEL: mq.key.model_id},
                int(load[mq.key.model_id] > 0.9) * 3 * per_req,
            )
            for mq in fleet.models
        ]
    out = []
    for ns, pod, model, _ in fleet.pods:
        lvl = load[model]
        idle = lvl == 0.0
        labels = {"namespace": ns, "model_name": model, "pod": pod}
        if name is QueryName.KV_CACHE_USAGE:
            value: float | str = round(min(1.0, max(0.0, lvl + rng.uniform(-0.05, 0.05))), 4)
        elif name is QueryName.QUEUE_LENGTH:
            value = rng.randint(3, 9) if lvl > 0.9 else 0
        elif name is QueryName.RUNNING_REQUESTS:
            value = int(lvl * 256)
        elif name is QueryName.CACHE_CONFIG_INFO:
            labels |= {"num_gpu_blocks": "30000", "block_size": "16"}
            value = 1
        elif name is QueryName.DISPATCH_RATE:
            labels = {"namespace": ns, "pod_name": pod, EPP_MODEL_LABEL: model}
            value = round(lvl * 8, 3)
        elif idle:
            value = "NaN"  # 0/0 over the window: what an idle pod's averages look like
        else:
            value = {
                QueryName.AVG_INPUT_TOKENS: 1000 + rng.randint(-200, 200),
                QueryName.AVG_OUTPUT_TOKENS: 200 + rng.randint(-50, 50),
                QueryName.PREFIX_CACHE_HIT_RATE: round(rng.random(), 3),
                QueryName.AVG_TTFT: round(0.1 + lvl * 0.5, 3),
                QueryName.AVG_ITL: round(0.02 + lvl * 0.03, 4),
            }[name]
        out.append(_sample(labels, value))
    return out


# ------------------------------------------------------------------------------------------ fake Prometheus


def serve_main(n_vas: int, port_file: Path) -> None:
    """Child process: serve the recorded answers for `n_vas` until terminated."""
    answers = record_answers(make_fleet(n_vas))
    empty = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
    packed: dict[str, bytes] = {}  # gzipped on first demand, then kept (Prometheus would compress every time)

    async def handle(request: web.Request) -> web.Response:
        query = request.query.get("query")
        if query is None and request.method == "POST":
            query = str((await request.post()).get("query", ""))
        if "gzip" in request.headers.get("Accept-Encoding", ""):  # as Prometheus' own handler answers
            key = query or ""
            body = packed.get(key) or packed.setdefault(key, gzip.compress(answers.get(key, empty), compresslevel=6))
            return web.Response(body=body, content_type="application/json", headers={"Content-Encoding": "gzip"})
        return web.Response(body=answers.get(query or "", empty), content_type="application/json")

    async def run() -> None:
        app = web.Application()
        app.router.add_route("*", "/api/v1/query", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = int(runner.addresses[0][1])
        port_file.write_text(str(port))
        await asyncio.Event().wait()

    asyncio.run(run())


def start_fake(n_vas: int) -> tuple[subprocess.Popen[bytes], str]:
    port_file = Path(tempfile.mkdtemp(prefix="bench-collect-")) / "port"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.bench_collect", "--serve", str(n_vas), "--port-file", str(port_file)],
        stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not port_file.exists() or not port_file.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"the fake Prometheus for {n_vas} VAs did not start")
        time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port_file.read_text()}"


@contextlib.contextmanager
def fake_prometheus(n_vas: int) -> Iterator[str]:
    """`start_fake` as a context: the fake Prometheus's URL inside, its process stopped after, whatever happens."""
    proc, url = start_fake(n_vas)
    try:
        yield url
    finally:
        proc.kill()
        proc.wait(timeout=30)


# ------------------------------------------------------------------------------------------ measurement


def _decide() -> Any:
    """How the reconciler decides (adapter.reconciler.loop.decide_cycle: the GC paused), or, on code that has
    no such function (the 'before' of issue 22), `engine.decide` as the reconciler then called it."""
    try:
        from adapter.reconciler.loop import decide_cycle
    except ImportError:
        return engine.decide
    return decide_cycle


def rss_mb() -> float:
    """The process' resident set now (Linux /proc), MB."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def reset_peak_rss() -> bool:
    """Start the process' peak resident set (VmHWM) again from its resident set now: Linux's /proc/self/clear_refs
    (value 5, since Linux 4.0), so that `peak_rss_mb_since_reset` reads the peak of what follows alone. False where
    the kernel refuses it (a sandbox without clear_refs): the peak then counts from the process' start."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return True


def peak_rss_mb_since_reset() -> float:
    """The process' peak resident set since `reset_peak_rss` (or since it started), MB: VmHWM of /proc/self/status."""
    with open("/proc/self/status") as status:
        line = next(x for x in status if x.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def engine_config(name: str) -> EngineConfig:
    """`default`: no ConfigMap (the saturation-percentage analyzer, V1); `shipped`: manifests/deploy's ConfigMaps
    (the predictive analyzer and its settings, what `serve` runs with out of the box)."""
    if name == "default":
        return EngineConfig()
    from tests.shipped import configset_of, shipped_configmaps

    return EngineConfig(configmaps=configset_of(shipped_configmaps()))


@dataclass
class Loop:
    """What the reconciler carries from cycle to cycle: the engine state, the store, the clock."""

    collector: PrometheusCollector
    fleet: Fleet
    config: EngineConfig = field(default_factory=EngineConfig)
    store: DecisionStore = field(default_factory=DecisionStore)
    state: engine.EngineState = field(default_factory=engine.EngineState)
    cycles: int = 0

    async def cycle(self) -> tuple[dict[str, float], dict[str, float], Collection, int]:
        """One cycle; wall and CPU seconds per stage (CPU: every thread of this process; the fake Prometheus
        runs in another)."""
        now_s = NOW_S + 30.0 * self.cycles
        wall, cpu = [time.perf_counter()], [time.process_time()]

        def mark() -> None:
            wall.append(time.perf_counter())
            cpu.append(time.process_time())

        collection = await self.collector.collect(self.fleet.models, self.fleet.pod_variants)
        mark()
        snapshot = build_snapshot(ClusterView(variants=self.fleet.views, synced=True), collection, now_s=now_s)
        mark()
        result, self.state = _decide()(snapshot, self.state, self.config, now_s)
        mark()
        self.store.publish(result.decisions, now_s=now_s)
        mark()
        self.cycles += 1
        stages = STAGES[:-1]
        wall_s = {s: wall[i + 1] - wall[i] for i, s in enumerate(stages)} | {"total": wall[-1] - wall[0]}
        cpu_s = {s: cpu[i + 1] - cpu[i] for i, s in enumerate(stages)} | {"total": cpu[-1] - cpu[0]}
        return wall_s, cpu_s, collection, len(result.decisions)


PROFILES = {"all": None, "v1": V1_QUERIES, "config": None}
"""Which queries the collector sends: all 14 metrics, only what the V1 analyzer, the enforcer and scale-from-zero
read, or what the engine configuration's decisions read (`config`: each model's `ModelQuery.reads` from
`engine.reads`, as `serve` asks)."""


HISTORIES = ("first", "full")
"""The forecasters' histories the measured cycles start from: as the first cycles leave them, or `full`
(`bench_default.full_histories`: `max_points` steps each, the steady state of a `serve` that has run for hours),
put in after the warm-up cycle."""


async def measure(
    n_vas: int, runs: int, *, metrics: str, cycles: int, config: str = "default", histories: str = "first"
) -> dict[str, Any]:
    proc, url = start_fake(n_vas)
    try:
        fleet = make_fleet(n_vas)
        if metrics == "config":  # what `serve` asks for (adapter/reconciler/assemble.py `model_queries`)
            configmaps = engine_config(config).configmaps
            models = [dataclasses.replace(m, reads=engine.reads(configmaps, m.key)) for m in fleet.models]
            fleet = dataclasses.replace(fleet, models=models)
        baseline_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        async with PrometheusCollector(url, timeout_s=60, metrics=PROFILES[metrics]) as collector:
            loop = Loop(collector, fleet, engine_config(config))
            _, _, collection, n_decisions = await loop.cycle()  # warm-up
            if not collection.available or collection.errors:
                raise SystemExit(f"collection failed: {collection.errors[:2]}")
            if histories == "full":
                from tests.bench_default import full_histories

                loop.state = full_histories(loop.state, NOW_S)
            facts = {"pods_collected": len(collection.pods), "dropped": dict(collection.dropped_samples)}
            del collection  # a cycle's collection is garbage once decided: keeping it would count twice
            was_reset = reset_peak_rss()  # the measured cycles' own peak, without the warm-up's or the histories'
            samples = [(await loop.cycle())[:2] for _ in range(runs)]
            rss_by_cycle = [rss_mb()]
            while loop.cycles < cycles:  # steady state: does anything grow from cycle to cycle?
                await loop.cycle()
                rss_by_cycle.append(rss_mb())
            peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before tracemalloc's own memory
            cycles_peak_rss = peak_rss_mb_since_reset() if was_reset else None
            tracemalloc.start()
            await loop.cycle()
            _, traced_peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {
        "vas": n_vas,
        "metrics": metrics,
        "config": config,
        "histories": histories,
        "models": len(fleet.models),
        "pods": len(fleet.pods),
        "decisions": n_decisions,
        **facts,
        "median_s": {s: statistics.median(w[s] for w, _ in samples) for s in STAGES},
        "median_cpu_s": {s: statistics.median(c[s] for _, c in samples) for s in STAGES},
        "runs": runs,
        "peak_rss_mb": peak_rss,
        "cycles_peak_rss_mb": cycles_peak_rss,
        "baseline_rss_mb": baseline_rss_mb,
        "tracemalloc_peak_mb": traced_peak / 2**20,
        "cycles": loop.cycles,
        "rss_mb_by_cycle": [round(x, 1) for x in rss_by_cycle],
        "rss_growth_mb": round(rss_by_cycle[-1] - rss_by_cycle[0], 1),
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'metrics':>7} {'VAs':>6} {'pods':>7} | " + " ".join(f"{s + ' ms':>11}" for s in STAGES) + " | "
        f"{'CPU ms':>7} | {'RSS MB':>7} {'base MB':>7} {'traced MB':>9} {'growth MB':>9} | "
        "ratio vs 1000 VAs (collect, decide, total)"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        same = [x for x in rows if x["metrics"] == r["metrics"]]
        ref = next((x for x in same if x["vas"] == 1000), same[0])
        med = r["median_s"]
        ratios = ", ".join(f"{med[s] / ref['median_s'][s]:.2f}x" for s in ("collect", "decide", "total"))
        growth = f"{r['rss_growth_mb']:>+9.1f}" if r["cycles"] > r["runs"] + 1 else f"{'-':>9}"
        lines.append(
            f"{r['metrics']:>7} {r['vas']:>6} {r['pods']:>7} | "
            + " ".join(f"{med[s] * 1000:>11.1f}" for s in STAGES)
            + f" | {r['median_cpu_s']['total'] * 1000:>7.0f} | {r['peak_rss_mb']:>7.0f} {r['baseline_rss_mb']:>7.0f}"
            f" {r['tracemalloc_peak_mb']:>9.0f} {growth} | {ratios}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m tests.bench_collect", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--scales", default="100,1000,10000", help="comma-separated VA counts")
    parser.add_argument(
        "--metrics",
        default="all,v1",
        help="query sets: all (14 metrics), v1 (what V1 reads), config (what --config reads)",
    )
    parser.add_argument(
        "--config", choices=("default", "shipped"), default="default", help="engine ConfigMaps (see engine_config)"
    )
    parser.add_argument(
        "--histories", choices=HISTORIES, default="first", help="forecast histories to start from (see HISTORIES)"
    )
    parser.add_argument(
        "--cycles", type=int, default=0, help="go on to this many cycles and report the RSS growth (steady state)"
    )
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        serve_main(args.serve, args.port_file)
        return {}
    if args.child is not None:
        if (why := tune_malloc()) is not None:  # as `wva-adapter serve` runs (adapter/app/memory.py)
            print(f"bench_collect: allocator left as it is: {why}", file=sys.stderr)
        row = asyncio.run(
            measure(
                args.child,
                args.runs,
                metrics=args.metrics,
                cycles=args.cycles,
                config=args.config,
                histories=args.histories,
            )
        )
        benchchild.report(row)
        return row
    rows = []
    for metrics in args.metrics.split(","):
        for n_vas in (int(s) for s in args.scales.split(",")):
            row = benchchild.run(
                "tests.bench_collect",
                *(str(n_vas), "--runs", str(args.runs), "--metrics", metrics),
                *("--cycles", str(args.cycles), "--config", args.config, "--histories", args.histories),
            )
            rows.append(row)
            print(
                f"  {metrics} {n_vas} VAs: total {row['median_s']['total'] * 1000:.0f} ms, "
                f"peak RSS {row['peak_rss_mb']:.0f} MB",
                file=sys.stderr,
                flush=True,
            )
    print(
        "collect -> snapshot -> decide (as the reconciler: state carried, GC paused) -> DecisionStore.publish; "
        f"median of {args.runs} cycles per row (wall ms per stage, CPU ms in total)"
    )
    print(table(rows))
    document = {"benchmark": "collect_cycle", "rows": rows}
    print(json.dumps(document))
    return document


if __name__ == "__main__":
    main()
