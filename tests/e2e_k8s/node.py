"""The parts of a cluster the control plane does not include, emulated on 127.0.0.1 for the real-control-plane tests.

* `LoopThread`: one asyncio loop in a background thread for the session (the tests themselves are synchronous,
  so session-scoped servers cannot live on pytest-asyncio's per-test loops).
* `Node` plays the kubelet and the vLLM containers. There is no scheduler and no kubelet: the ReplicaSet
  controller creates Pods that would stay Pending. For every Pod of an adopted namespace the node starts an
  emulated vLLM `/metrics` server (`tests.metrics.emulators.VllmPod`, model = the container's
  `--served-model-name`), marks the Pod Running and Ready through the status subresource (what a kubelet
  reports, so Deployment `readyReplicas` follows; with `set_startup`, only once the variant's startup time has
  passed since the Pod's creation, as a model load would take), and lists it in Prometheus' file-based service
  discovery with the `namespace` and `pod` labels Kubernetes SD would attach. A Pod that disappears (scale-down deletes
  unscheduled pods at once) loses its server and its target. The Pod IP is left empty: nothing dials it.
* `FileSdPrometheus`: the real Prometheus of tests/e2e_prometheus, scraping every second from that file
  (Prometheus applies discovery changes every 5 s: a new pod is scraped 5-6 s after it appears).
* `LoopbackService`: the Service in front of the adapter, as kube-proxy would be. The APIService's
  ExternalName Service resolves to 127.0.0.1:<port>; this TCP forwarder listens there and hands each
  connection to one live adapter replica, round robin, trying the next when one refuses (a killed pod). TLS
  passes through untouched: the aggregator's client certificate and SNI reach the adapter as they are.
"""

from __future__ import annotations

import asyncio
import calendar
import contextlib
import functools
import json
import math
import os
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client as k8s

from tests.e2e_prometheus.prom import PrometheusProcess
from tests.metrics.emulators import MetricsServer, VllmPod

T = TypeVar("T")

VARIANT_LABEL = "llm-d.ai/variant"
IDLE: dict[str, float] = {"kv_cache_usage": 0.0, "waiting": 0, "running": 0, "success_rps": 0}


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="e2e-k8s-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def stop(self) -> None:
        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self.run(cancel_all(), 30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


# ------------------------------------------------------------------------------------------ Prometheus


@dataclass
class FileSdPrometheus(PrometheusProcess):
    """PrometheusProcess with one job fed by file-based service discovery (`targets.json` in its workdir)."""

    @property
    def targets_file(self) -> Path:
        return self.workdir / "targets.json"

    def config(self) -> dict[str, object]:
        interval = f"{int(self.scrape_interval_s * 1000)}ms"
        return {
            "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
            "scrape_configs": [
                {"job_name": "vllm", "file_sd_configs": [{"files": [str(self.targets_file)], "refresh_interval": "1s"}]}
            ],
        }

    def write_targets(self, targets: list[dict[str, Any]]) -> None:
        """Atomically replace the discovered targets (rename, so Prometheus never reads half a file)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        scratch = self.targets_file.with_suffix(".tmp")
        scratch.write_text(json.dumps(targets, indent=1))
        os.replace(scratch, self.targets_file)


# ------------------------------------------------------------------------------------------ the node


@dataclass
class EmulatedPod:
    namespace: str
    name: str
    variant: str
    vllm: VllmPod
    server: MetricsServer
    ready_at_s: float = 0.0


def served_model_name(pod: dict[str, Any]) -> str:
    """vLLM's model name: `--served-model-name`, else `--model`, of the first container (as vLLM reports it)."""
    containers = pod.get("spec", {}).get("containers") or [{}]
    args = [*(containers[0].get("command") or []), *(containers[0].get("args") or [])]
    for flag in ("--served-model-name", "--model"):
        if flag in args and args.index(flag) + 1 < len(args):
            return str(args[args.index(flag) + 1])
    return "unknown"


@dataclass
class Node:
    core: k8s.CoreV1Api
    prometheus: FileSdPrometheus
    poll_s: float = 0.2
    namespaces: set[str] = field(default_factory=set)
    loads: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    demand_kv: dict[str, float] = field(default_factory=dict)
    """Per namespace: total KV-cache demand in pods' worth, spread evenly over all its pods (see `set_demand`)."""
    pods: dict[tuple[str, str], EmulatedPod] = field(default_factory=dict)
    startup_s: dict[tuple[str, str], float] = field(default_factory=dict)
    """Per (namespace, variant): seconds from a Pod's creation until the node marks it Ready (0 = at once)."""
    errors: list[str] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    # -- called from the test thread (through LoopThread.run, so state is only touched on the loop) --

    async def adopt(self, namespace: str) -> None:
        self.namespaces.add(namespace)

    async def release(self, namespace: str) -> None:
        """Stop emulating a namespace's pods (the test is over; its namespace is being deleted)."""
        self.namespaces.discard(namespace)
        self.demand_kv.pop(namespace, None)
        for key in [k for k in self.pods if k[0] == namespace]:
            await self.pods.pop(key).server.stop()
        self._publish()

    async def set_load(self, namespace: str, variant: str, load: dict[str, float]) -> None:
        """The load every pod of `variant` reports, now and when it starts later."""
        self.loads[(namespace, variant)] = dict(load)
        for pod in self.pods.values():
            if (pod.namespace, pod.variant) == (namespace, variant):
                pod.vllm.set_load(**load)

    async def set_startup(self, namespace: str, variant: str, seconds: float) -> None:
        """Pods of `variant` become Ready `seconds` after their creationTimestamp (whole seconds), not at once."""
        self.startup_s[(namespace, variant)] = seconds

    async def set_demand(self, namespace: str, kv_total: float) -> None:
        """A load balancer in front of every pod of the namespace (both variants of the model behind one pool):
        each pod's KV-cache usage is `kv_total / pods`, capped at 0.99; queue 0. More pods, less each.

        Worked example with the saturation thresholds 0.80 / trigger 0.10 and kv_total 2.7: 2 pods at 0.99 and
        3 pods at 0.90 are all saturated (scale up); 4 pods at 0.675 leave 0.125 spare (steady), and removing
        one would leave 0.8 - 0.675·4/3 = -0.1 (not safe to scale down)."""
        self.demand_kv[namespace] = kv_total
        self._spread(namespace)

    def _spread(self, namespace: str) -> None:
        if namespace not in self.demand_kv:
            return
        members = [p for p in self.pods.values() if p.namespace == namespace]
        if not members:
            return
        kv = min(0.99, self.demand_kv[namespace] / len(members))
        for pod in members:
            pod.vllm.set_load(kv_cache_usage=kv, waiting=0, running=round(40 * kv), success_rps=max(0.5, 4 * kv))

    async def running(self, namespace: str, variant: str) -> list[str]:
        return sorted(p.name for p in self.pods.values() if (p.namespace, p.variant) == (namespace, variant))

    # -- the loop --

    async def start(self) -> None:
        self.prometheus.write_targets([])
        self._task = asyncio.create_task(self._run(), name="e2e-node")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for pod in self.pods.values():
            await pod.server.stop()
        self.pods.clear()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            for namespace in sorted(self.namespaces):
                try:
                    await self._sync(loop, namespace)
                except Exception as exc:  # the API may be busy; report, never die silently
                    message = f"{namespace}: {exc!r}"
                    if len(self.errors) < 50 and message not in self.errors:
                        self.errors.append(message)
            await asyncio.sleep(self.poll_s)

    async def _sync(self, loop: asyncio.AbstractEventLoop, namespace: str) -> None:
        call = functools.partial(self.core.list_namespaced_pod, namespace, _preload_content=False, _request_timeout=5)
        response = await loop.run_in_executor(None, call)
        items = json.loads(response.data)["items"]
        if namespace not in self.namespaces:
            return  # released while listing
        seen: set[tuple[str, str]] = set()
        changed = False
        for pod in items:
            if namespace not in self.namespaces:
                return  # released (a test's teardown) during one of the awaits below
            meta = pod["metadata"]
            key = (namespace, meta["name"])
            if meta.get("deletionTimestamp"):
                continue
            seen.add(key)
            if key not in self.pods:
                variant = (meta.get("labels") or {}).get(VARIANT_LABEL, "")
                vllm = VllmPod(served_model_name(pod))
                vllm.set_load(**self.loads.get((namespace, variant), IDLE))
                server = await MetricsServer(vllm.render).start()
                self.pods[key] = EmulatedPod(namespace, meta["name"], variant, vllm, server)
                changed = True
            now_s = int(time.time())  # one whole second for the check and the stamp it writes
            if not _ready(pod) and self._started(pod, self.pods[key].variant, now_s):
                await loop.run_in_executor(None, functools.partial(self._mark_ready, pod, now_s))
                emulated = self.pods.get(key)  # None if the namespace was released meanwhile
                if emulated is not None:
                    emulated.ready_at_s = time.monotonic()
        for key in [k for k in self.pods if k[0] == namespace and k not in seen]:
            gone = self.pods.pop(key, None)
            if gone is not None:
                await gone.server.stop()
                changed = True
        if changed:
            self._spread(namespace)
            self._publish()

    def _started(self, pod: dict[str, Any], variant: str, now_s: int) -> bool:
        """True once the variant's startup time has passed since the Pod was created, in the whole seconds the
        API server stamped `creationTimestamp` with and `_mark_ready` will stamp Ready with: the same `now_s`
        decides and is written, so the stored creation → Ready is never shorter than the startup time (a
        check on the float clock and a stamp read from it again later could disagree if the clock stepped)."""
        delay = self.startup_s.get((pod["metadata"]["namespace"], variant), 0.0)
        if delay <= 0:
            return True
        created = calendar.timegm(time.strptime(pod["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ"))
        return now_s >= created + math.ceil(delay)

    def _mark_ready(self, pod: dict[str, Any], now_s: int) -> None:
        """What the kubelet reports once the containers run and pass their readiness probe, stamped `now_s`."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now_s))
        conditions = [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        containers = [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }
            for c in pod["spec"]["containers"]
        ]
        body = {
            "status": {"phase": "Running", "startTime": now, "conditions": conditions, "containerStatuses": containers}
        }
        meta = pod["metadata"]
        self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], body, _request_timeout=5)

    def _publish(self) -> None:
        self.prometheus.write_targets(
            [
                {"targets": [p.server.address], "labels": {"namespace": p.namespace, "pod": p.name}}
                for p in sorted(self.pods.values(), key=lambda p: (p.namespace, p.name))
            ]
        )


def _ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )


# ------------------------------------------------------------------------------------------ the Service


@dataclass
class LoopbackService:
    """A TCP forwarder on 127.0.0.1 standing in for the adapter's Service (see the module docstring)."""

    host: str = "127.0.0.1"
    backends: list[int] = field(default_factory=list)
    port: int = 0
    connections: dict[int, int] = field(default_factory=dict)
    refused: int = 0
    _server: asyncio.Server | None = None
    _next: int = 0
    _pipes: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def set_backends(self, ports: list[int]) -> None:
        self.backends = list(ports)
        self.connections = {}

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._pipes):
                task.cancel()
            await asyncio.gather(*self._pipes, return_exceptions=True)
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._pipes.add(task)
        try:
            backends = list(self.backends)
            upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
            for i in range(len(backends)):
                port = backends[(self._next + i) % len(backends)]
                try:
                    upstream = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2.0)
                except (OSError, TimeoutError):
                    self.refused += 1
                    continue
                self._next = (self._next + i + 1) % len(backends)
                self.connections[port] = self.connections.get(port, 0) + 1
                break
            if upstream is None:
                return
            up_reader, up_writer = upstream
            try:
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            finally:
                up_writer.close()
        finally:
            writer.close()
            self._pipes.discard(task)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()
