"""Benchmark: KEDA GetMetrics on our scaler against a bare servicer returning a constant response.

    .venv/bin/python -m tests.servers.keda_bench [--seconds 3] [--rounds 3]

Both gRPC servers run in this process on 127.0.0.1; the load generator runs in a child process (grpc.aio,
a few concurrent closed-loop callers on one channel, like KEDA's one connection per scaler). Reported per
server: calls/s (median over rounds) and the ratio ours/bare; then p50/p99 latency at a paced 200 calls/s.
Prints one JSON document. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import time
from typing import Any

import grpc

from adapter.domain.decision import AnalyzerName, VariantDecision
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import DecisionPath
from adapter.servers._keda_pb import externalscaler_pb2 as pb
from adapter.servers._keda_pb import externalscaler_pb2_grpc as pb_grpc
from adapter.servers.keda import start_keda_server
from adapter.store import DecisionStore


class _Bare(pb_grpc.ExternalScalerServicer):  # type: ignore[misc]
    async def GetMetrics(self, request: Any, context: Any) -> Any:
        return pb.GetMetricsResponse(
            metricValues=[pb.MetricValue(metricName="wva_desired_replicas", metricValue=3, metricValueFloat=3.0)]
        )


async def _start_bare() -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    pb_grpc.add_ExternalScalerServicer_to_server(_Bare(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def _caller(stub: Any, request: Any, deadline: float, interval_s: float | None, lat: list[float]) -> int:
    count = 0
    next_at = time.perf_counter()
    while (now := time.perf_counter()) < deadline:
        if interval_s is not None:
            if next_at > now:
                await asyncio.sleep(next_at - now)
            next_at += interval_s
        started = time.perf_counter()
        await stub.GetMetrics(request)
        lat.append(time.perf_counter() - started)
        count += 1
    return count


async def _load(port: int, seconds: float, callers: int, rate: float | None) -> dict[str, float]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.ExternalScalerStub(channel)
        ref = pb.ScaledObjectRef(name="llama-h100", namespace="llm")
        request = pb.GetMetricsRequest(scaledObjectRef=ref, metricName="wva_desired_replicas")
        await stub.GetMetrics(request)  # warm up the channel
        lat: list[float] = []
        interval = None if rate is None else callers / rate
        deadline = time.perf_counter() + seconds
        counts = await asyncio.gather(*(_caller(stub, request, deadline, interval, lat) for _ in range(callers)))
    lat.sort()
    return {
        "rps": sum(counts) / seconds,
        "p50_ms": 1000 * lat[len(lat) // 2],
        "p99_ms": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))],
    }


def _child(port: int, seconds: float, callers: int, rate: float | None, out: Any) -> None:
    out.send(asyncio.run(_load(port, seconds, callers, rate)))


def _measure(port: int, seconds: float, callers: int, rate: float | None) -> dict[str, float]:
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(port, seconds, callers, rate, send))
    proc.start()
    result: dict[str, float] = recv.recv()
    proc.join()
    return result


async def _benchmark(seconds: float, rounds: int, callers: int) -> dict[str, Any]:
    store = DecisionStore()
    key = VariantKey("llm", "llama-h100")
    decision = VariantDecision(key, "meta/llama-3.1-8b", 3, 2, "bench", DecisionPath.OPTIMIZER, AnalyzerName.NONE)
    store.publish({key: decision}, now_s=0.0)
    ours = await start_keda_server(store, address="127.0.0.1:0")
    bare, bare_port = await _start_bare()
    loop = asyncio.get_running_loop()
    try:
        rounds_out: dict[str, list[float]] = {"ours": [], "bare": []}
        for _ in range(rounds):
            for name, port in (("bare", bare_port), ("ours", ours.port)):
                r = await loop.run_in_executor(None, _measure, port, seconds, callers, None)
                rounds_out[name].append(r["rps"])
        paced = await loop.run_in_executor(None, _measure, ours.port, seconds, 4, 200.0)
    finally:
        await ours.stop()
        await bare.stop(None)
    ours_rps, bare_rps = statistics.median(rounds_out["ours"]), statistics.median(rounds_out["bare"])
    return {
        "benchmark": "keda GetMetrics",
        "rounds": rounds,
        "seconds_per_round": seconds,
        "callers": callers,
        "ours_calls_per_s_median": round(ours_rps, 1),
        "bare_calls_per_s_median": round(bare_rps, 1),
        "ratio": round(ours_rps / bare_rps, 3),
        "paced_200_per_s": {k: round(v, 3) for k, v in paced.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="keda_bench")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--callers", type=int, default=8)
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(_benchmark(args.seconds, args.rounds, args.callers)), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
