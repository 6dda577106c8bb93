"""Fixtures of the real-control-plane tests (tests/e2e_k8s/README in the module docstrings):

session: `plane` (etcd + kube-apiserver + kube-controller-manager), `kube` (kubectl + Python client as admin,
adapter manifests installed from the e2e-loopback overlay), `loop` (a background asyncio loop), `service`
(the loopback Service the APIService routes to), `prometheus` + `node` (the real Prometheus scraping the
emulated vLLM pods that the emulated kubelet runs for every Pod), `adapter_kubeconfig` (the adapter's
ServiceAccount token).

per test: `api_world` + `client` (apiworld.py: a namespace, an audited admin user and our `KubeClient` as that
user, for the client-level tests `test_api_*.py`), and `env`, which creates the test's namespace from
manifests/examples, starts `wva-adapter serve`
processes, routes the APIService to them, and cleans up (also on failure).
"""

from __future__ import annotations

import gc
import hashlib
import os
import re
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from adapter.k8s.client import KubeClient

from .adapter import AdapterProcess
from .apiworld import ApiWorld, world_for
from .cluster import VA_GROUP, VA_PLURAL, VA_VERSION, Kube, until
from .controlplane import (
    ADAPTER_SA,
    CONTROLLER_NS,
    ControlPlane,
    ExternalCluster,
    adapter_host,
    write_token_kubeconfig,
)
from .node import FileSdPrometheus, LoopbackService, LoopThread, Node


@pytest.fixture(scope="session")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane | ExternalCluster]:
    workdir = tmp_path_factory.mktemp("control-plane")
    control_plane: ControlPlane | ExternalCluster
    control_plane = ExternalCluster(workdir) if os.environ.get("WVA_E2E_KUBECONFIG") else ControlPlane(workdir)
    print(f"\n[e2e-k8s] control plane under {workdir} (logs: {control_plane.logs})")
    try:
        control_plane.start()
        figures = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in control_plane.startup_s.items())
        print(f"[e2e-k8s] ready: {figures}; apiserver {control_plane.url}")
        yield control_plane
    finally:
        control_plane.stop()


@pytest.fixture(scope="session")
def loop() -> Iterator[LoopThread]:
    thread = LoopThread()
    try:
        yield thread
    finally:
        thread.stop()


@pytest.fixture(scope="session")
def kube(plane: ControlPlane | ExternalCluster) -> Iterator[Kube]:
    client = Kube(plane)
    try:
        client.install_adapter_manifests()
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def service(kube: Kube, loop: LoopThread) -> Iterator[LoopbackService]:
    loopback = LoopbackService(host=adapter_host())
    loop.run(loopback.start())
    kube.point_apiservice(port=loopback.port, ca_pem=kube.plane.pki.adapter_ca.read_bytes(), host=adapter_host())
    try:
        yield loopback
    finally:
        loop.run(loopback.stop())


@pytest.fixture(scope="session")
def adapter_kubeconfig(kube: Kube) -> Path:
    token = kube.service_account_token(CONTROLLER_NS, ADAPTER_SA)
    return write_token_kubeconfig(
        kube.plane.workdir / "adapter.kubeconfig",
        server=kube.plane.url,
        ca=kube.plane.pki.ca,
        token=token,
        user=ADAPTER_SA,
    )


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory, loop: LoopThread) -> Iterator[FileSdPrometheus]:
    prom = FileSdPrometheus(tmp_path_factory.mktemp("prometheus"), jobs={})
    prom.write_targets([])
    prom.start()
    try:
        took = loop.run(prom.wait_ready())
        print(f"[e2e-k8s] prometheus {prom.url} ready in {took:.1f}s")
        yield prom
    finally:
        prom.stop()


@pytest.fixture(scope="session")
def node(kube: Kube, prometheus: FileSdPrometheus, loop: LoopThread) -> Iterator[Node]:
    emulated = Node(kube.core, prometheus)
    loop.run(emulated.start())
    try:
        yield emulated
    finally:
        loop.run(emulated.stop())


@dataclass
class Env:
    """One test's world: its namespace, its adapters, and the session's shared parts."""

    kube: Kube
    loop: LoopThread
    node: Node
    service: LoopbackService
    prometheus: FileSdPrometheus
    adapter_kubeconfig: Path
    workdir: Path
    namespace: str
    adapters: list[AdapterProcess] = field(default_factory=list)

    @property
    def plane(self) -> ControlPlane | ExternalCluster:
        return self.kube.plane

    def create_namespace(self, *, hpa: bool = True, patches: list[dict[str, Any]] | None = None) -> None:
        """manifests/examples (+ examples/hpa) in this test's namespace; the node runs its pods."""
        self.loop.run(self.node.adopt(self.namespace))
        self.kube.namespace_from_examples(self.workdir / "kustomize", self.namespace, hpa=hpa, patches=patches or [])

    def set_load(self, variant: str, load: dict[str, float]) -> None:
        self.loop.run(self.node.set_load(self.namespace, variant, load))

    def set_demand(self, kv_total: float) -> None:
        self.loop.run(self.node.set_demand(self.namespace, kv_total))

    def pods(self, variant: str) -> list[str]:
        return self.loop.run(self.node.running(self.namespace, variant))

    def start_adapter(self, name: str, *extra_args: str, without: tuple[str, ...] = ()) -> AdapterProcess:
        """`wva-adapter serve` for this namespace; `without` leaves default flags out (adapter.py)."""
        adapter = AdapterProcess(
            name=name,
            log=self.plane.logs / f"adapter-{self.namespace}-{name}.log",
            kubeconfig=self.adapter_kubeconfig,
            prometheus_url=self.prometheus.url,
            serving=self.plane.pki.adapter_serving,
            watch_namespace=self.namespace,
            extra_args=list(extra_args),
            without=without,
        )
        self.adapters.append(adapter)
        took = adapter.start()
        print(
            f"[e2e-k8s] adapter {name} healthy in {took:.1f}s (https :{adapter.https_port}, grpc :{adapter.grpc_port})"
        )
        return adapter

    def route_to(self, *adapters: AdapterProcess) -> float:
        """Put `adapters` behind the APIService's loopback Service and wait until the aggregator uses them."""
        self.loop.run(self.service.set_backends([a.https_port for a in adapters]))
        return self.kube.wait_apiservice_available()

    def wait_pods(self, variant: str, count: int, *, timeout_s: float = 30) -> float:
        """`count` emulated pods of `variant` running and the Deployment reporting them ready."""

        def check() -> str | None:
            deployment = self.kube.deployment(self.namespace, variant)
            ready = (deployment.get("status") or {}).get("readyReplicas") or 0
            pods = self.pods(variant)
            return None if len(pods) == count and ready == count else f"{len(pods)} pods, readyReplicas={ready}"

        return until(f"{count} ready pods of {variant}", check, timeout_s=timeout_s)

    def decided(self, variant: str, replicas: int, reason: str = "saturation-only mode: no-change") -> str | None:
        """None when the VA's status holds `replicas` for `reason`, with metrics found and its target resolved."""
        va = self.kube.va(self.namespace, variant)
        alloc = (va.get("status") or {}).get("desiredOptimizedAlloc") or {}
        metrics = self.kube.condition(va, "MetricsAvailable")
        target = self.kube.condition(va, "TargetResolved")
        if (
            alloc.get("numReplicas") == replicas
            and str(alloc.get("reason", "")).startswith(reason)
            and metrics.get("status") == "True"
            and target.get("status") == "True"
        ):
            return None
        return (
            f"{variant}: {alloc.get('numReplicas')} ({alloc.get('reason')}), MetricsAvailable={metrics.get('status')}/"
            f"{metrics.get('reason')}, TargetResolved={target.get('status')}"
        )

    def wait_decided(self, want: dict[str, int], *, timeout_s: float = 45, hold_s: float = 2.0) -> float:
        """Every VA in `want` decided at its count from real metrics (no fallback, no holding), for `hold_s`."""
        since: list[float] = []

        def check() -> str | None:
            problem = next((p for v, n in want.items() if (p := self.decided(v, n)) is not None), None)
            if problem is not None:
                since.clear()
                return problem
            since.append(time.monotonic())
            return None if since[-1] - since[0] >= hold_s else f"steady for {since[-1] - since[0]:.1f}s"

        return until(f"decisions {want} from real metrics", check, timeout_s=timeout_s)

    def wait_scraped(self, pods: int, *, timeout_s: float = 30) -> float:
        """Prometheus holds a KV-cache sample of exactly `pods` pods of this namespace (discovery takes ~5 s)."""
        query = f'count(vllm:kv_cache_usage_perc{{namespace="{self.namespace}"}})'

        def check() -> str | None:
            with requests.Session() as http:
                http.trust_env = False
                answer = http.get(f"{self.prometheus.url}/api/v1/query", params={"query": query}, timeout=5).json()
            result = answer.get("data", {}).get("result") or []
            count = int(float(result[0]["value"][1])) if result else 0
            return None if count == pods else f"{count} pods scraped"

        return until(f"Prometheus scraping {pods} pods of {self.namespace}", check, timeout_s=timeout_s, every_s=0.5)

    def describe(self) -> str:
        """The state that explains a timeout: every VA's decision and conditions, every Deployment, the pods."""
        lines = []
        for item in self.kube.custom.list_namespaced_custom_object(VA_GROUP, VA_VERSION, self.namespace, VA_PLURAL)[
            "items"
        ]:
            status = item.get("status") or {}
            conditions = {
                c["type"]: f"{c['status']}/{c['reason']}: {c.get('message', '')}"
                for c in status.get("conditions") or []
            }
            lines.append(f"VA {item['metadata']['name']}: {status.get('desiredOptimizedAlloc')} {conditions}")
        for deployment in self.kube.apps.list_namespaced_deployment(self.namespace).items:
            lines.append(
                f"Deployment {deployment.metadata.name}: spec {deployment.spec.replicas} status "
                f"{deployment.status.replicas} ready {deployment.status.ready_replicas}"
            )
        pods = sorted(f"{p.name}({p.variant})" for p in list(self.node.pods.values()) if p.namespace == self.namespace)
        lines.append(f"emulated pods: {pods}; node errors: {self.node.errors}")
        for adapter in self.adapters:
            lines.append(f"adapter {adapter.name} log tail:\n{adapter.tail(15)}")
        return "\n".join(lines)

    def teardown(self) -> None:
        for adapter in self.adapters:
            adapter.stop()
        self.loop.run(self.service.set_backends([]))
        self.loop.run(self.node.release(self.namespace))
        self.kube.delete_namespace(self.namespace)


@pytest.fixture
def env(
    request: pytest.FixtureRequest,
    kube: Kube,
    loop: LoopThread,
    node: Node,
    service: LoopbackService,
    prometheus: FileSdPrometheus,
    adapter_kubeconfig: Path,
    tmp_path: Path,
) -> Iterator[Env]:
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    namespace = f"e2e-{slug}-{hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:6]}"
    world = Env(kube, loop, node, service, prometheus, adapter_kubeconfig, tmp_path, namespace)
    try:
        yield world
    finally:
        world.teardown()
        if node.errors:
            print(f"[e2e-k8s] node errors: {node.errors}")


@pytest.fixture
def api_world(request: pytest.FixtureRequest, kube: Kube) -> Iterator[ApiWorld]:
    world = world_for(kube, request.node.nodeid, request.node.name)
    try:
        yield world
    finally:
        world.teardown()


@pytest.fixture
async def client(api_world: ApiWorld) -> AsyncIterator[KubeClient]:
    """Our client (kubernetes.aio underneath) as the test's audited user, from its kubeconfig."""
    kube_client = await KubeClient.connect(kubeconfig=str(api_world.kubeconfig), request_timeout_s=10.0)
    try:
        yield kube_client
    finally:
        await kube_client.close()


@pytest.fixture(autouse=True)
def _collect_garbage_after_each_test() -> Iterator[None]:
    """Collect garbage when each test ends, after its event loop has closed.

    A connection that a test leaves open is then reported (pytest's unraisable ResourceWarning, an error
    under our filterwarnings) by the test that leaked it. Without this, the report came at whatever
    later moment the collector happened to run, and failed an innocent test about one run in three. What a
    `GcPause` froze is collected too (`gc.unfreeze`): frozen objects are beyond `gc.collect` alone.
    """
    yield
    gc.unfreeze()
    gc.collect()
