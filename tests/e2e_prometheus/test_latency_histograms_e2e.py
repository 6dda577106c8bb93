"""Latency histograms end to end: emulated vLLM pods → a real Prometheus (1 s scrapes) → the collector's two
model-level bucket queries → `ModelTraffic.latency`, compared with what the pods observed.

The pods' observations cycle through fixed values (one per finished request), so the fraction within every
bucket edge is known from what each pod observed; Prometheus' `rate()` extrapolation changes the rates a
little (and equally for every bucket of a pod), not the fractions. Covered: several pods of one model summed
per edge, a pod on vLLM 0.11 exposing the per-request TPOT histogram *and* the deprecated per-token one (counted
once), a pod of an older vLLM exposing only the deprecated name (the fall-back), an idle model (series at zero:
no evidence, never "0 % within") and a model with no pods at all (no series: `latency=None`).
Run with `-s` for the transcript.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapter.domain.cluster import Collection, ModelQuery
from adapter.domain.ids import ModelKey
from adapter.domain.latency import VLLM_ITL_BUCKETS_S, VLLM_TTFT_BUCKETS_S, LatencyHistogram
from adapter.metrics.collector import PrometheusCollector
from adapter.metrics.queries import QueryWindows
from tests.metrics.emulators import MetricsServer, VllmPod

from .prom import PrometheusProcess, Target

LLAMA = ModelKey("ns-a", "meta/llama-3.1-8b")
QWEN = ModelKey("ns-b", "Qwen/Qwen2.5-7B-Instruct")
IDLE = ModelKey("ns-b", "org/idle-model")
NO_PODS = ModelKey("ns-a", "org/no-pods")
MODELS = [ModelQuery(k) for k in (LLAMA, QWEN, IDLE, NO_PODS)]
WINDOW_S = 20.0
WINDOWS = QueryWindows(saturation_s=2, tokens_s=4, latency_s=4, dispatch_s=3, latency_histogram_s=WINDOW_S)

TTFT_CYCLE = (0.05, 0.3, 0.8, 1.5, 3.0)
TPOT_CYCLE = (0.02, 0.04, 0.09, 0.2)
# pod -> (model, success req/s, kind): "current" = vLLM >= 0.13 names, "0.11" = both TPOT names, "legacy" = the
# deprecated per-token name only
PODS: dict[str, tuple[ModelKey, float, str]] = {
    "llama-a100-0": (LLAMA, 4.0, "current"),
    "llama-a100-1": (LLAMA, 2.0, "0.11"),
    "llama-l4-0": (LLAMA, 2.0, "legacy"),
    "qwen-h100-0": (QWEN, 3.0, "current"),
    "idle-0": (IDLE, 0.0, "current"),
}


@pytest.fixture
async def pods(tmp_path: Path) -> AsyncIterator[tuple[dict[str, VllmPod], PrometheusProcess]]:
    emulated: dict[str, VllmPod] = {}
    for name, (key, rps, kind) in PODS.items():
        # the 0.11 pod's deprecated histogram gets an extra edge (0.035): its series must be dropped as a whole
        # (`or ignoring (le)`), not edge by edge, or the 0.035 bucket would leak into the model's TPOT
        pod = VllmPod(
            key.model_id,
            legacy=kind == "legacy",
            also_deprecated_tpot=kind == "0.11",
            deprecated_tpot_buckets=tuple(sorted((*VLLM_ITL_BUCKETS_S, 0.035))),
        )
        pod.set_load(success_rps=rps)
        if key == QWEN:
            pod.set_latencies(ttft_s=[0.1, 0.6], tpot_s=[0.03])
        else:
            # the per-token ITL of the 0.11 pod sits above every TPOT value: counted by mistake, it would show
            pod.set_latencies(ttft_s=TTFT_CYCLE, tpot_s=TPOT_CYCLE, itl_s=[0.3] if kind == "0.11" else [0.06, 0.12])
        emulated[name] = pod
    servers = {name: await MetricsServer(p.render).start() for name, p in emulated.items()}
    targets = [Target(servers[name].address, key.namespace, name) for name, (key, _, _) in PODS.items()]
    prom = PrometheusProcess(tmp_path / "prometheus", {"vllm": targets})
    prom.start()
    try:
        yield emulated, prom
    finally:
        prom.stop()
        for server in servers.values():
            await server.stop()


def observed(pods: dict[str, VllmPod], model: ModelKey, which: str) -> list[float]:
    """Every value the model's pods gave the histogram the collector reads: TTFT, or per-request TPOT (the
    per-token ITL for a legacy pod, whose deprecated name is the fall-back)."""
    out: list[float] = []
    for name, (key, _, kind) in PODS.items():
        if key == model:
            out += pods[name].observed["itl" if which == "tpot" and kind == "legacy" else which]
    return out


def compare(got: LatencyHistogram | None, values: list[float], edges: tuple[float, ...], want_rps: float) -> list[str]:
    if got is None:
        return ["no histogram"]
    problems = []
    if not math.isclose(got.total_rps, want_rps, rel_tol=0.1):
        problems.append(f"total {got.total_rps:.3f}/s, the pods finish {want_rps}/s")
    for edge in edges:
        truth = sum(1 for v in values if v <= edge) / len(values)
        fraction = got.fraction_within(edge)
        if fraction is None or abs(fraction - truth) > 0.05:
            problems.append(f"within {edge:g} s: {fraction} vs observed {truth:.3f}")
    return problems


def describe(c: Collection) -> list[str]:
    lines = []
    for key, traffic in sorted(c.models.items()):
        latency = traffic.latency
        if latency is None:
            lines.append(f"  {key}: latency None")
            continue
        for label, h in (("ttft", latency.ttft), ("tpot", latency.tpot)):
            if h is None:
                lines.append(f"  {key} {label}: None")
                continue
            shown = ", ".join(f"{le:g}:{rate:.2f}" for le, rate in h.buckets if rate > 0 or le == math.inf)
            lines.append(f"  {key} {label} over {latency.window_s:g}s: total {h.total_rps:.2f}/s; {shown}")
    return lines


async def test_the_collector_reads_what_the_pods_observed(
    pods: tuple[dict[str, VllmPod], PrometheusProcess],
) -> None:
    emulated, prom = pods
    ready_s = await prom.wait_ready()
    print(f"\nprometheus {prom.url} ready in {ready_s:.2f}s; latency histogram window {WINDOW_S:g}s")
    variants = {(key.namespace, name): name for name, (key, _, _) in PODS.items()}
    started = time.monotonic()
    problems: list[str] = ["not collected yet"]
    async with PrometheusCollector(prom.url, timeout_s=2.0, windows=WINDOWS) as collector:
        while time.monotonic() - started < WINDOW_S + 25:
            await asyncio.sleep(1.0)
            if time.monotonic() - started < WINDOW_S + 5:
                continue  # the window fills first: until then the rates average over less than it
            got = await collector.collect(MODELS, variants)
            llama, qwen = got.models[LLAMA].latency, got.models[QWEN].latency
            problems = [] if llama and qwen else [f"latency llama={llama} qwen={qwen}"]
            if not problems:
                assert llama is not None
                assert qwen is not None
                problems += [
                    *(
                        f"llama ttft {p}"
                        for p in compare(llama.ttft, observed(emulated, LLAMA, "ttft"), VLLM_TTFT_BUCKETS_S, 8.0)
                    ),
                    *(
                        f"llama tpot {p}"
                        for p in compare(llama.tpot, observed(emulated, LLAMA, "tpot"), VLLM_ITL_BUCKETS_S, 8.0)
                    ),
                    *(
                        f"qwen ttft {p}"
                        for p in compare(qwen.ttft, observed(emulated, QWEN, "ttft"), VLLM_TTFT_BUCKETS_S, 3.0)
                    ),
                    *(
                        f"qwen tpot {p}"
                        for p in compare(qwen.tpot, observed(emulated, QWEN, "tpot"), VLLM_ITL_BUCKETS_S, 3.0)
                    ),
                ]
            if not problems:
                break
    print(
        f"collected after {time.monotonic() - started:.1f}s in {got.duration_s * 1000:.0f} ms, "
        f"dropped {dict(got.dropped_samples)}:"
    )
    for line in describe(got):
        print(line)
    assert not problems, problems
    assert not got.errors
    llama = got.models[LLAMA].latency
    assert llama is not None
    assert llama.window_s == WINDOW_S
    assert llama.ttft is not None
    assert llama.tpot is not None
    # vLLM's edges as Prometheus 2 keeps them ("1.0", "2560.0", "+Inf"), parsed back to the defaults
    assert llama.ttft.edges_s == VLLM_TTFT_BUCKETS_S
    assert llama.tpot.edges_s == VLLM_ITL_BUCKETS_S  # no 0.035 edge from the 0.11 pod's deprecated histogram
    # the 2 s TTFT target between the 1.0 and 2.5 edges: interpolated inside the bracket the edges give
    lower, upper = llama.ttft.bracket(2.0) or (math.nan, math.nan)
    assert lower <= (llama.ttft_within(2.0) or math.nan) <= upper
    assert not llama.ttft.is_edge(2.0)
    idle = got.models[IDLE].latency
    assert idle is not None
    assert idle.ttft is not None
    assert idle.ttft.total_rps == 0
    assert idle.ttft_within(1.0) is None  # no evidence, never 0 % within
    assert got.models[NO_PODS].latency is None  # no series at all
