"""Benchmark: scale-from-zero wake latency, end to end (issue 22).

    .venv/bin/python -m tests.bench_wake [--wakes 100] [--pools 10] [--interval 0.1]

From the moment an EPP's `/metrics` shows a queued request for an idle model to the moment a KEDA client's
`StreamIsActive` stream for that model's ScaledObject receives `isActive: true`:

    EPP /metrics (aiohttp, real HTTP on 127.0.0.1, Prometheus text)
      -> the reconciler's wake loop (the real `Reconciler`, polling every `--interval`, default serve's 100 ms)
      -> the real `EppScraper` (HTTP GET, prometheus_client's text parser) -> `engine.wake` -> `DecisionStore.upsert`
      -> the KEDA external scaler (grpc.aio, 127.0.0.1) -> a grpc.aio client's open `StreamIsActive` stream.

`--wakes` models (one cheap and one dear variant each, both at zero replicas, a decision of 0 published as a
previous cycle would have) sit behind `--pools` InferencePools, each with its own EPP endpoint; every model's
ScaledObject has its stream open from the start, as KEDA keeps one per ScaledObject. The models are woken one at
a time, at a random phase of the poll: the latency is measured in this process from the queue appearing to the
stream's message. The Kubernetes side (status writes) is a no-op sink: what KEDA sees comes from the store.
Prints one JSON document (median, p99, max, and what a wake consists of); no asserts on time.

`--decide-s D` measures the same wakes while the reconciler's cycles run back to back, each deciding for D seconds of
CPU (a pure-Python spin in the decide thread, holding the GIL as a large fleet's decide does, then a result with no
decision, so that no cycle wakes a model itself): a wake then nearly always arrives while a cycle decides.
`make bench` runs it with 1.5 s, what the shipped default takes to decide 1,000 VAs learning α, β, γ (V1 takes
~0.8 s at 10,000 VAs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from aiohttp import web

from adapter.domain.cluster import ClusterView, Collection, EppEndpoint, InferencePoolInfo
from adapter.domain.decision import AnalyzerName, CycleResult, VariantDecision
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import DecisionPath, ScaleTarget, VariantSpec, VariantStatus, VariantView
from adapter.metrics.epp import EppScraper
from adapter.reconciler import loop as loop_module
from adapter.reconciler.loop import Reconciler, ReconcilerOptions
from adapter.reconciler.ports import AlwaysLeader
from adapter.servers._keda_pb import externalscaler_pb2 as pb2
from adapter.servers._keda_pb import externalscaler_pb2_grpc as pb2_grpc
from adapter.servers.keda import start_keda_server
from adapter.store.decisions import DecisionStore

NS = "bench"
GOAL_MS = 300.0


def model_id(i: int) -> str:
    return f"org/m-{i:03d}"


def va_name(i: int, variant: str) -> str:
    return f"m-{i:03d}-{variant}"


@dataclass
class Epp:
    """The EPP endpoints: each serves the flow-control queue of its pool's models."""

    queues: dict[str, float] = field(default_factory=dict)
    scrapes: int = 0

    def exposition(self, models: list[str]) -> str:
        lines = [
            "# HELP llm_d_epp_flow_control_queue_size Requests waiting in the flow-control queue.",
            "# TYPE llm_d_epp_flow_control_queue_size gauge",
        ]
        lines += [
            f'llm_d_epp_flow_control_queue_size{{target_model_name="{m}"}} {self.queues.get(m, 0.0)}' for m in models
        ]
        return "\n".join(lines) + "\n"


class NoStatus:
    async def write(self, key: VariantKey, status: VariantStatus, *, current: VariantStatus | None) -> bool:
        return True


@dataclass
class FixedCluster:
    current: ClusterView

    def view(self) -> ClusterView:
        return self.current


class NoMetrics:
    async def collect(self, models: Any, pod_variants: Any) -> Any:
        raise AssertionError("the benchmark runs the wake loop only")


class NoCollection:
    """The cycles' metrics with `--decide-s`: an empty collection (the spinning decide reads none of it)."""

    async def collect(self, models: Any, pod_variants: Any) -> Collection:
        return Collection()


def spinning_decide(decide_s: float) -> Callable[..., Any]:
    """A decide of `decide_s` seconds of pure-Python CPU that decides nothing: a large fleet's decide as the loop
    sees it, without the cycles waking the idle models themselves (the engine's last resort would)."""

    def decide(snapshot: Any, state: Any, config: Any, now_s: float) -> tuple[CycleResult, Any]:
        deadline = time.process_time() + decide_s
        while time.process_time() < deadline:
            pass
        return CycleResult(now_s, {}, {}), state

    return decide


def variant(i: int, name: str, cost: float) -> VariantView:
    return VariantView(
        spec=VariantSpec(
            VariantKey(NS, va_name(i, name)), model_id(i), "Deployment", va_name(i, name), min_replicas=0, cost=cost
        ),
        target=ScaleTarget("Deployment", NS, va_name(i, name), 0, 0, spec_replicas=0),
    )


def zero(view: VariantView) -> VariantDecision:
    return VariantDecision(
        key=view.key,
        model_id=view.spec.model_id,
        desired_replicas=0,
        current_replicas=0,
        reason="Scaled to zero: no requests over the retention period",
        path=DecisionPath.OPTIMIZER,
        analyzer=AnalyzerName.SATURATION_PERCENTAGE,
    )


async def start_epps(epp: Epp, pools: int, wakes: int) -> tuple[list[web.AppRunner], list[int]]:
    """One HTTP server per pool (its EPP), each exposing its models' queues at /metrics."""
    runners, ports = [], []
    for pool in range(pools):
        models = [model_id(i) for i in range(wakes) if i % pools == pool]

        async def metrics(request: web.Request, models: list[str] = models) -> web.Response:
            epp.scrapes += 1
            return web.Response(text=epp.exposition(models), content_type="text/plain")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        ports.append(int(runner.addresses[0][1]))
    return runners, ports


async def benchmark(*, wakes: int, pools: int, interval_s: float, seed: int, decide_s: float = 0.0) -> dict[str, Any]:
    rng = random.Random(seed)
    epp = Epp()
    runners, ports = await start_epps(epp, pools, wakes)
    views = [v for i in range(wakes) for v in (variant(i, "l4", 1.0), variant(i, "h100", 4.0))]
    inference_pools = tuple(
        InferencePoolInfo(
            NS,
            f"pool-{p}",
            {"pool": str(p)},
            endpoints=(EppEndpoint(NS, f"epp-{p}", f"127.0.0.1:{ports[p]}"),),
            variants=tuple(v.key for v in views if int(v.spec.model_id[-3:]) % pools == p),
        )
        for p in range(pools)
    )
    view = ClusterView(variants=tuple(views), inference_pools=inference_pools, synced=True)
    store = DecisionStore()
    store.publish({v.key: zero(v) for v in views}, now_s=time.time())  # what the last cycle decided
    scraper = EppScraper(timeout_s=2.0)
    reconciler = Reconciler(
        cluster=FixedCluster(view),
        metrics=NoCollection() if decide_s > 0 else NoMetrics(),
        epp=scraper,
        status=NoStatus(),
        leadership=AlwaysLeader(),
        store=store,
        options=ReconcilerOptions(controller_namespace=NS, wake_interval_s=interval_s),
    )
    keda = await start_keda_server(store, address="127.0.0.1:0")
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{keda.port}")
    stub = pb2_grpc.ExternalScalerStub(channel)
    activated: dict[int, asyncio.Future[float]] = {i: asyncio.get_running_loop().create_future() for i in range(wakes)}

    async def watch(i: int) -> None:
        ref = pb2.ScaledObjectRef(name=va_name(i, "l4"), namespace=NS)
        async for message in stub.StreamIsActive(ref):
            if message.result and not activated[i].done():
                activated[i].set_result(time.perf_counter())

    watchers = [asyncio.create_task(watch(i)) for i in range(wakes)]
    stop = asyncio.Event()
    loop_task = asyncio.create_task(reconciler._wake_loop(stop))
    cycles: list[int] = []

    async def cycle_back_to_back() -> None:
        while not stop.is_set():
            await reconciler.run_cycle()
            cycles.append(1)

    cycle_task = asyncio.create_task(cycle_back_to_back()) if decide_s > 0 else None
    latencies_ms: list[float] = []
    try:
        await asyncio.sleep(max(0.5, 3 * interval_s))  # streams open, the loop polling
        for i in range(wakes):
            await asyncio.sleep(rng.uniform(0, interval_s))  # a random phase of the poll
            started = time.perf_counter()
            epp.queues[model_id(i)] = 3.0
            finished = await asyncio.wait_for(activated[i], timeout=10.0)
            latencies_ms.append((finished - started) * 1e3)
    finally:
        stop.set()
        await loop_task
        if cycle_task is not None:
            await cycle_task
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        await channel.close(grace=None)
        await keda.stop(0)
        await scraper.close()
        for runner in runners:
            await runner.cleanup()
    latencies_ms.sort()
    median = statistics.median(latencies_ms)
    p99 = latencies_ms[min(len(latencies_ms) - 1, int(len(latencies_ms) * 0.99))]
    return {
        "benchmark": "scale-from-zero wake",
        "wakes": wakes,
        "pools": pools,
        "poll_interval_ms": interval_s * 1e3,
        "decide_s": decide_s,
        "cycles_during": len(cycles),
        "median_ms": round(median, 1),
        "p99_ms": round(p99, 1),
        "max_ms": round(latencies_ms[-1], 1),
        "min_ms": round(latencies_ms[0], 1),
        "goal_ms": GOAL_MS,
        "median_ratio_to_goal": round(median / GOAL_MS, 3),
        "p99_ratio_to_goal": round(p99 / GOAL_MS, 3),
        "epp_scrapes": epp.scrapes,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m tests.bench_wake", description=__doc__.splitlines()[0])
    parser.add_argument("--wakes", type=int, default=100)
    parser.add_argument("--pools", type=int, default=10)
    parser.add_argument("--interval", type=float, default=0.1, help="the wake poll interval, s (serve: 0.1)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--decide-s", type=float, default=0.0, help="cycles back to back, each deciding this long")
    args = parser.parse_args(argv)
    real = loop_module.engine.decide  # the engine's, so that the cycles decide through `decide_cycle` as shipped
    if args.decide_s > 0:  # `make bench` runs every benchmark in one process: put the real one back after
        loop_module.engine.decide = spinning_decide(args.decide_s)  # type: ignore[assignment]
    try:
        result = asyncio.run(
            benchmark(
                wakes=args.wakes, pools=args.pools, interval_s=args.interval, seed=args.seed, decide_s=args.decide_s
            )
        )
    finally:
        loop_module.engine.decide = real
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
