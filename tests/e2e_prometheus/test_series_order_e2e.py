"""End to end with a real Prometheus: the order in which it writes the per-pod answers' series.

The series cache reads an element first by its place in the last answer of its family (`_Series.codes_of`): the
same series at the same place costs one comparison of label bytes instead of a copy and a lookup. That pays only
if Prometheus writes one family's series in one order, from query to query and from cycle to cycle; were it not
to, every element would be read by lookup as before — slower, the same digests. This checks the order on the
Prometheus the project runs against, and that a collection's second cycle reads every element by place.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapter.domain.cluster import ModelQuery
from adapter.domain.ids import ModelKey
from adapter.metrics import answers
from adapter.metrics.collector import PrometheusCollector
from adapter.metrics.queries import QueryName, QueryWindows, build_queries
from tests.metrics.emulators import MetricsServer, VllmPod

from .prom import PrometheusProcess, Target

MODELS = (ModelKey("ns-a", "org/model-a"), ModelKey("ns-b", "org/model-b"))
PODS = {f"pod-{i:02d}": MODELS[i % 2] for i in range(24)}
WINDOWS = QueryWindows(saturation_s=2, tokens_s=4, latency_s=4, dispatch_s=3)
VLLM_FAMILY = [name for name in answers.SERIES_CACHED if answers._Family.of(name) is answers._Family.VLLM]


@pytest.fixture
async def prometheus(tmp_path: Path) -> AsyncIterator[PrometheusProcess]:
    pods = {name: VllmPod(key.model_id) for name, key in PODS.items()}
    for i, pod in enumerate(pods.values()):
        pod.set_load(kv_cache_usage=0.01 * (i + 1), waiting=i % 3, running=i % 5, success_rps=1.0 + i % 4)
    servers = {name: await MetricsServer(pod.render).start() for name, pod in pods.items()}
    targets = [Target(servers[name].address, key.namespace, name) for name, key in PODS.items()]
    prom = PrometheusProcess(tmp_path / "prometheus", {"vllm": targets})
    prom.start()
    try:
        await prom.wait_ready()
        yield prom
    finally:
        prom.stop()
        for server in servers.values():
            await server.stop()


async def _orders(collector: PrometheusCollector) -> dict[QueryName, list[tuple[str, str]]]:
    """The (namespace, pod) of each element of every per-pod vLLM answer, in the answer's order."""
    queries = [q for q in build_queries([ModelQuery(k) for k in MODELS], windows=WINDOWS) if q.name in VLLM_FAMILY]
    return {
        q.name: [(s.labels["namespace"], s.labels.get("pod", "")) for s in await collector.query(q.promql)]
        for q in queries
    }


async def test_prometheus_writes_a_family_s_series_in_one_order(prometheus: PrometheusProcess) -> None:
    async with PrometheusCollector(prometheus.url, timeout_s=5, windows=WINDOWS) as collector:
        deadline = time.monotonic() + 30
        while True:  # every pod scraped into every answer (the rates need two scrapes)
            first = await _orders(collector)
            if all(len(order) == len(PODS) for order in first.values()) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert {name: len(order) for name, order in first.items()} == {name: len(PODS) for name in VLLM_FAMILY}
        await asyncio.sleep(2.5)  # new scrapes, new values
        second = await _orders(collector)
        orders = {tuple(order) for order in (*first.values(), *second.values())}
        assert len(orders) == 1, orders  # one order: from query to query of the family, and from cycle to cycle

        pod_variants = {(key.namespace, name): f"variant-{key.namespace}" for name, key in PODS.items()}
        models = [ModelQuery(k) for k in MODELS]
        await collector.collect(models, pod_variants)
        series = collector._series._series[answers._Family.VLLM]
        kept = series.order_codes
        got = await collector.collect(models, pod_variants)
    assert got.available
    assert len(got.pods) == len(PODS)
    assert series.order_codes is kept  # the second cycle's eight answers read every element by its place
    assert len(kept) == len(PODS)
