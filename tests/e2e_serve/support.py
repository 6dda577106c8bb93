"""Shared by the `serve` end-to-end tests: a cluster holding two variants of one model, `run_serve` run
in-process, and clients for everything it serves (HTTPS External Metrics API, KEDA gRPC, /metrics, /readyz).

Everything listens on 127.0.0.1. The Kubernetes API is a real etcd + kube-apiserver of the test's own
(`tests.e2e_k8s.realapi.RealApiServer`; objects from `tests.k8s.builders`), spoken to by the real
`kubernetes.aio` client through a generated kubeconfig. Each `serve` instance is a user of its own, so the
apiserver's audit log attributes every request to the instance that sent it (`api.by(name, ...)`).

Every wait is `until(...)`: a bounded poll that fails with the last thing it saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import grpc.aio
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from adapter.app.serve import ServeEndpoints, run_serve
from adapter.config.settings import Settings
from adapter.domain.ids import VariantKey
from adapter.k8s import resources as r
from adapter.servers._keda_pb import externalscaler_pb2 as pb
from adapter.servers._keda_pb import externalscaler_pb2_grpc as pb_grpc
from adapter.servers.tls import generate_serving_cert
from adapter.store.decisions import StoredDecision
from tests.e2e_k8s.realapi import RealApiServer
from tests.k8s import builders as b
from tests.servers._em_support import EM_BASE, em_request

NS = b.NS
CONTROLLER_NS = "wva-system"
MODEL = "meta/llama-3.1-8b"
CHEAP, DEAR = "l4", "a100"
VARIANTS = (CHEAP, DEAR)
ACCELERATOR = {CHEAP: "L4", DEAR: "A100"}
GPU_PRODUCT = {CHEAP: "NVIDIA-L4", DEAR: "NVIDIA-A100-SXM4-80GB"}
COST = {CHEAP: "1", DEAR: "5"}
MIN_REPLICAS, MAX_REPLICAS = 1, 5
SATURATION_CM = "wva-saturation-scaling-config"
SATURATION_DEFAULT = "kvCacheThreshold: 0.80\nqueueLengthThreshold: 5\nkvSpareTrigger: 0.10\nqueueSpareTrigger: 3\n"
"""Seed 001's recommended thresholds, stated explicitly: a pod at kv >= 0.8 or queue >= 5 is saturated."""


def pod_name(variant: str, index: int) -> str:
    return f"{variant}-{index}"


def replicaset_name(variant: str) -> str:
    return f"{variant}-7d9f"


# ------------------------------------------------------------------------------------------ waiting

Check = Callable[[], Awaitable[str | None]]
"""An async condition: None when satisfied, else a description of what is still wrong."""


def check_of(fn: Callable[..., str | Awaitable[str | None] | None], *args: Any, **kwargs: Any) -> Check:
    """A Check from a synchronous or asynchronous function returning None or a complaint."""

    async def check() -> str | None:
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return None if result is None else str(result)

    return check


def all_of(*checks: Check) -> Check:
    async def check() -> str | None:
        problems = [p for c in checks if (p := await c()) is not None]
        return "; ".join(problems) if problems else None

    return check


async def until(what: str, check: Check, *, timeout_s: float, every_s: float = 0.1) -> float:
    """Poll `check` (None = satisfied, else what is still wrong) until satisfied; returns the seconds it took.
    Fails the test with the last complaint after `timeout_s`."""
    started = time.monotonic()
    while True:
        problem = await check()
        if problem is None:
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}; last seen: {problem}", pytrace=False)
        await asyncio.sleep(every_s)


# ------------------------------------------------------------------------------------------ the cluster


@dataclass
class Cluster:
    """The cluster's objects: per variant a VA, a Deployment, a ReplicaSet and its Pods; the saturation
    ConfigMap in the controller namespace."""

    api: RealApiServer

    def install(self) -> None:
        for variant in VARIANTS:
            self.api.put(
                r.VARIANT_AUTOSCALINGS,
                b.va(
                    variant,
                    model=MODEL,
                    cost=COST[variant],
                    min_replicas=MIN_REPLICAS,
                    max_replicas=MAX_REPLICAS,
                    labels={"inference.optimization/acceleratorName": ACCELERATOR[variant]},
                ),
            )
            self.api.put(r.REPLICASETS, b.replicaset(replicaset_name(variant), deployment_name=variant))
            self.add_pod(variant, 0)
            self.scale(variant, 1)
        self.api.put(
            r.CONFIGMAPS, b.configmap(SATURATION_CM, namespace=CONTROLLER_NS, data={"default": SATURATION_DEFAULT})
        )

    def scale(self, variant: str, replicas: int) -> None:
        """What the HPA and the Deployment controller do: spec.replicas and the status follow."""
        template = b.template(labels={"app": variant}, node_selector={"nvidia.com/gpu.product": GPU_PRODUCT[variant]})
        self.api.put(
            r.DEPLOYMENTS,
            b.deployment(variant, replicas=replicas, status_replicas=replicas, ready=replicas, tmpl=template),
        )

    def add_pod(self, variant: str, index: int) -> None:
        name = pod_name(variant, index)
        self.api.put(
            r.PODS,
            b.pod(name, owner=replicaset_name(variant), ip=f"10.0.{VARIANTS.index(variant)}.{index + 1}"),
        )

    def va(self, variant: str) -> dict[str, Any]:
        return self.api.get(r.VARIANT_AUTOSCALINGS, NS, variant)

    def alloc(self, variant: str) -> dict[str, Any]:
        """`status.desiredOptimizedAlloc` as the API holds it ({} before the first write)."""
        return dict((self.va(variant).get("status") or {}).get("desiredOptimizedAlloc") or {})

    def condition(self, variant: str, kind: str) -> dict[str, Any]:
        for c in (self.va(variant).get("status") or {}).get("conditions") or []:
            if c.get("type") == kind:
                return dict(c)
        return {}

    def status_line(self, variant: str) -> str:
        alloc, metrics = self.alloc(variant), self.condition(variant, "MetricsAvailable")
        return (
            f"{variant}: numReplicas={alloc.get('numReplicas')} reason={alloc.get('reason')!r} "
            f"MetricsAvailable={metrics.get('status')}/{metrics.get('reason')}"
        )


# ------------------------------------------------------------------------------------------ serve


@dataclass(frozen=True)
class Tls:
    cert: Path
    key: Path
    ca_pem: bytes


def make_tls(directory: Path) -> Tls:
    """A serving certificate for 127.0.0.1 (and the Service names) signed by a fresh CA the clients verify."""
    cert, key, ca_pem = generate_serving_cert(service="wva-adapter", namespace=CONTROLLER_NS, directory=directory)
    return Tls(cert, key, ca_pem)


def serve_settings(*, kubeconfig: Path, prometheus_url: str, tls: Tls, **overrides: Any) -> Settings:
    """Settings for `run_serve` on 127.0.0.1 ephemeral ports, a 1 s engine interval, short timeouts."""
    fields: dict[str, Any] = {
        "kubeconfig": kubeconfig,
        "prometheus_url": prometheus_url,
        "secure_port": 0,
        "bind_address": "127.0.0.1",
        "keda_grpc_address": "127.0.0.1:0",
        "metrics_bind_address": "127.0.0.1:0",
        "health_probe_bind_address": "127.0.0.1:0",
        "authentication_skip_lookup": True,
        "tls_cert_file": tls.cert,
        "tls_private_key_file": tls.key,
        "controller_namespace": CONTROLLER_NS,
        "engine_interval_s": 1.0,
        "prometheus_timeout_s": 1.0,
        "rest_client_timeout_s": 5.0,
    }
    fields.update(overrides)
    return Settings(**fields)


@dataclass
class Serve:
    """One `run_serve` running as an asyncio task, and clients for what it serves."""

    name: str
    task: asyncio.Task[int]
    stop_event: asyncio.Event
    endpoints: ServeEndpoints
    ca_pem: bytes

    @classmethod
    async def start(cls, name: str, settings: Settings, ca_pem: bytes, *, timeout_s: float = 15.0) -> Serve:
        loop = asyncio.get_running_loop()
        started: asyncio.Future[ServeEndpoints] = loop.create_future()
        stop = asyncio.Event()
        task = asyncio.create_task(run_serve(settings, stop=stop, on_started=started.set_result), name=f"serve-{name}")
        waiters: set[asyncio.Future[Any]] = {task, started}
        done, _ = await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if started not in done:
            if task in done:
                pytest.fail(f"serve {name} ended before it started: {task.exception() or task.result()!r}")
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 10)
            pytest.fail(f"serve {name} did not start within {timeout_s} s")
        return cls(name, task, stop, started.result(), ca_pem)

    async def stop(self, *, timeout_s: float = 10.0) -> int:
        """Set the stop event (what SIGTERM does) and wait for `run_serve` to return its exit code."""
        self.stop_event.set()
        try:
            return await asyncio.wait_for(self.task, timeout_s)
        except TimeoutError:
            pytest.fail(f"serve {self.name} did not stop within {timeout_s} s")

    def assert_running(self) -> None:
        if self.task.done():
            pytest.fail(f"serve {self.name} ended: {self.task.exception() or self.task.result()!r}")

    def stored(self, variant: str) -> StoredDecision | None:
        return self.endpoints.store.get(VariantKey(NS, variant))

    async def external_metric(self, variant: str, metric: str = "wva_desired_replicas") -> float | None:
        """The value served over HTTPS for `variant_name=<variant>` (None when nothing is served for it)."""
        path = f"{EM_BASE}/namespaces/{NS}/{metric}?labelSelector=variant_name%3D{variant}"
        response = await em_request(self.endpoints.https_port, path, ca_pem=self.ca_pem, timeout_s=5.0)
        if response.status == 404:
            return None
        assert response.status == 200, f"{self.name}: GET {path}: {response.status} {response.text}"
        items = response.json()["items"]
        if not items:
            return None
        [item] = items
        assert item["metricName"] == metric
        assert item["metricLabels"]["variant_name"] == variant
        assert item["metricLabels"]["model_id"] == MODEL
        return quantity(item["value"])

    async def keda_metric(self, variant: str) -> float:
        """KEDA's GetMetrics for a ScaledObject named after the VA (the scaler's default)."""
        async with grpc.aio.insecure_channel(f"127.0.0.1:{self.endpoints.grpc_port}") as channel:
            stub = pb_grpc.ExternalScalerStub(channel)
            ref = pb.ScaledObjectRef(name=variant, namespace=NS)
            reply = await stub.GetMetrics(
                pb.GetMetricsRequest(scaledObjectRef=ref, metricName="wva_desired_replicas"), timeout=5.0
            )
        [value] = reply.metricValues
        assert value.metricName == "wva_desired_replicas"
        return float(value.metricValueFloat)

    async def scrape(self) -> list[Sample]:
        """Every sample of our own /metrics."""
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http,
            http.get(f"http://127.0.0.1:{self.endpoints.metrics_port}/metrics") as response,
        ):
            assert response.status == 200
            text = await response.text()
        return [s for family in text_string_to_metric_families(text) for s in family.samples]

    async def scraped(self) -> dict[str, float]:
        """`wva_desired_replicas` by variant from our own /metrics."""
        return {
            s.labels["variant_name"]: s.value
            for s in await self.scrape()
            if s.name == "wva_desired_replicas" and s.labels.get("namespace") == NS
        }

    async def sample(self, name: str, **labels: str) -> float:
        """The sum of the /metrics samples called `name` whose labels include `labels` (0 when none)."""
        return sum(
            s.value
            for s in await self.scrape()
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    async def probe(self, path: str) -> int:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http,
            http.get(f"http://127.0.0.1:{self.endpoints.health_port}{path}") as response,
        ):
            return response.status


def quantity(text: str) -> float:
    """A Kubernetes Quantity as the adapter writes it: an integer or milli-units ("1500m")."""
    return int(text[:-1]) / 1000 if text.endswith("m") else float(text)


async def served_everywhere(serve: Serve, variant: str) -> tuple[float | None, float, float | None]:
    """(External Metrics API, KEDA GetMetrics, /metrics) for one variant."""
    return (
        await serve.external_metric(variant),
        await serve.keda_metric(variant),
        (await serve.scraped()).get(variant),
    )


def expect_values(values: Mapping[str, float | None], want: float) -> str | None:
    wrong = {k: v for k, v in values.items() if v != want}
    return None if not wrong else f"want {want:g}, got {dict(values)}"
