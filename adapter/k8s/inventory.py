"""The inventory: list+watch of everything the engine reads from Kubernetes, served as a frozen ClusterView.

Watched (all namespaces, or `watch_namespace` only):

| what                               | why                                                    | if missing |
|------------------------------------|--------------------------------------------------------|------------|
| VariantAutoscalings (llmd.ai)      | the variants; followers serve their status             | retry      |
| Deployments, StatefulSets          | scale targets: replicas, pod template                  | retry      |
| LeaderWorkerSets (x-k8s.io/v1)     | scale targets                                          | skipped    |
| ReplicaSets                        | pod → ReplicaSet → Deployment (else pod-template-hash) | skipped    |
| Pods                               | ready/pending pods per VA, startup times; EPP pod IPs  | retry      |
| ConfigMaps, label app.kubernetes.io/name=workload-variant-autoscaler | engine configuration | retry |
| InferencePools (k8s.io/v1, x-k8s.io/v1alpha2) | pools → EPP service, variants per pool      | skipped    |
| Services                           | the EPP service's selector and metrics port            | skipped    |
| Nodes                              | allocatable GPUs per accelerator (the limiter)         | skipped    |

"Skipped" collections are optional: an absent CRD, or RBAC that does not grant them, is logged once and
re-checked every minute; the rest of the inventory works without them. With `watch_namespace`, the
ConfigMaps of the controller namespace (global) and of the watched namespace (local) are both watched.

Everything runs on the event loop (one task per watch); `view()` is synchronous and cheap: sections of the
view are rebuilt only when a collection they depend on changed, and the result is cached.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from adapter.config.configmaps import CONFIGMAP_LABEL, DEFAULT_CONTROLLER_NAMESPACE
from adapter.domain.cluster import ClusterView, EppEndpoint, InferencePoolInfo, PodInfo
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import VariantView
from adapter.k8s import objects, resources
from adapter.k8s.client import KubeClient
from adapter.k8s.objects import (
    ConfigMapRecord,
    NodeRecord,
    PodRecord,
    PoolRecord,
    ReplicaSetRecord,
    ServiceRecord,
    VaRecord,
    Workload,
)
from adapter.k8s.reflector import Reflector, ReflectorOptions, ReflectorStats
from adapter.k8s.resources import ResourceType
from adapter.k8s.status import StoredStatus

__all__ = ["Inventory", "InventoryOptions", "WatchHealth"]

log = logging.getLogger(__name__)

# Collection names (also the keys of `Inventory.health()`).
VA: Final = "variantautoscalings"
DEPLOY: Final = "deployments"
STS: Final = "statefulsets"
LWS: Final = "leaderworkersets"
RS: Final = "replicasets"
PODS: Final = "pods"
CMS: Final = "configmaps"
POOLS_V1: Final = "inferencepools.v1"
POOLS_V1A2: Final = "inferencepools.v1alpha2"
SVC: Final = "services"
NODES: Final = "nodes"

_WORKLOADS: Final = frozenset({DEPLOY, STS, LWS})
_SECTION_DEPS: Final[Mapping[str, frozenset[str]]] = {
    "variants": frozenset({VA}) | _WORKLOADS,
    "pods": frozenset({VA, RS, PODS}),
    "configmaps": frozenset({CMS}),
    "pools": frozenset({VA, PODS, POOLS_V1, POOLS_V1A2, SVC}) | _WORKLOADS,
    "nodes": frozenset({NODES}),
}
_VARIANT_SOURCES: Final = frozenset({VA}) | _WORKLOADS
"""Changes that move `variants_version` (what followers serve: VA status and current replicas)."""


@dataclass(frozen=True, slots=True)
class InventoryOptions:
    controller_namespace: str = DEFAULT_CONTROLLER_NAMESPACE
    """Where the global WVA ConfigMaps live."""
    watch_namespace: str | None = None
    """Restrict VAs, targets, pods, pools and services to one namespace (`--watch-namespace`)."""
    watch_nodes: bool = True
    """Nodes feed the GPU limiter only; turn off when the limiter is unused and RBAC is namespaced."""
    watch_inference_pools: bool = True
    reflector: ReflectorOptions = field(default_factory=ReflectorOptions)


@dataclass(frozen=True, slots=True)
class WatchHealth:
    """One watch's state, for readiness and telemetry."""

    name: str
    synced: bool
    absent: bool
    resource_version: str
    objects: int
    stats: ReflectorStats


@dataclass(frozen=True, slots=True)
class _Spec:
    name: str
    resource: ResourceType
    project: Callable[[dict[str, Any]], Any]
    namespace: str | None = None
    label_selector: str | None = None
    optional: bool | None = None


class Inventory:
    """Watches the cluster; `view()` returns the current `ClusterView` (implements the reconciler's
    `ClusterSource`).

    Lifecycle: `await inventory.start()` spawns the watches; `await inventory.wait_synced(timeout_s)`
    waits for every initial list; `await inventory.stop()` cancels them (or use `async with`). `sleep`,
    `clock` and `rng` are handed to every reflector (tests inject them). The inventory never raises from
    its watches: errors are retried with backoff and visible in `health()`.
    """

    def __init__(
        self,
        client: KubeClient,
        options: InventoryOptions | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.options = options or InventoryOptions()
        self._reflectors: dict[str, list[Reflector[Any]]] = {}
        for spec in self._specs():
            reflector: Reflector[Any] = Reflector(
                client,
                spec.resource,
                project=spec.project,
                on_change=self._changed_callback(spec.name),
                namespace=spec.namespace,
                label_selector=spec.label_selector,
                optional=spec.optional,
                options=self.options.reflector,
                sleep=sleep,
                clock=clock,
                rng=rng,
            )
            self._reflectors.setdefault(spec.name, []).append(reflector)
        self._tasks: list[asyncio.Task[None]] = []
        self._dirty: set[str] = set(_SECTION_DEPS)
        self._sections: dict[str, Any] = {}
        self._view = ClusterView()
        self._version = 0
        self._variants_version = 0
        self._variants_changed = asyncio.Event()

    def _specs(self) -> list[_Spec]:
        ns = self.options.watch_namespace or None
        label = "=".join(CONFIGMAP_LABEL)
        specs = [
            _Spec(VA, resources.VARIANT_AUTOSCALINGS, objects.project_va, ns),
            _Spec(DEPLOY, resources.DEPLOYMENTS, objects.project_deployment, ns),
            _Spec(STS, resources.STATEFULSETS, objects.project_statefulset, ns),
            _Spec(LWS, resources.LEADERWORKERSETS, objects.project_leaderworkerset, ns),
            _Spec(RS, resources.REPLICASETS, objects.project_replicaset, ns, optional=True),
            _Spec(PODS, resources.PODS, objects.project_pod, ns),
        ]
        if ns is None:
            specs.append(_Spec(CMS, resources.CONFIGMAPS, objects.project_configmap, None, label))
        else:
            for cm_ns in sorted({self.options.controller_namespace, ns}):
                specs.append(_Spec(CMS, resources.CONFIGMAPS, objects.project_configmap, cm_ns, label))
        if self.options.watch_inference_pools:
            specs += [
                _Spec(POOLS_V1, resources.INFERENCE_POOLS_V1, objects.project_pool_v1, ns),
                _Spec(POOLS_V1A2, resources.INFERENCE_POOLS_V1ALPHA2, objects.project_pool_v1alpha2, ns),
                _Spec(SVC, resources.SERVICES, objects.project_service, ns, optional=True),
            ]
        if self.options.watch_nodes:
            specs.append(_Spec(NODES, resources.NODES, objects.project_node, optional=True))
        return specs

    # ---- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start every watch (idempotent)."""
        if self._tasks:
            return
        for name, group in self._reflectors.items():
            for index, reflector in enumerate(group):
                self._tasks.append(asyncio.create_task(reflector.run(), name=f"inventory:{name}:{index}"))

    async def stop(self, *, timeout_s: float = 5.0) -> None:
        """Cancel every watch and wait for them (bounded: a task that ignores cancellation is logged, not
        awaited forever)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        if not tasks:
            return
        done, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for task in pending:
            log.error("inventory watch %s did not stop within %g s", task.get_name(), timeout_s)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.error("inventory watch %s failed: %r", task.get_name(), task.exception())

    async def __aenter__(self) -> Inventory:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def synced(self) -> bool:
        return all(r.synced for group in self._reflectors.values() for r in group)

    async def wait_synced(self, timeout_s: float) -> bool:
        """True once every initial list completed (or its optional collection proved absent)."""
        waits = [r.wait_synced() for group in self._reflectors.values() for r in group]
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.gather(*waits)
        except TimeoutError:
            return False
        return True

    def health(self) -> list[WatchHealth]:
        return [
            WatchHealth(r.name, r.synced, r.absent, r.resource_version, len(r.store), r.stats)
            for group in self._reflectors.values()
            for r in group
        ]

    # ---- change notification ------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """Bumps on every change to any watched projection."""
        return self._version

    @property
    def variants_version(self) -> int:
        """Bumps when a VA (spec or status) or a scale target changes: what a follower re-publishes."""
        return self._variants_version

    async def wait_for_change(self, timeout_s: float, *, since: int | None = None) -> bool:
        """Wait until `variants_version` exceeds `since` (default: its value now). True on a change,
        False after `timeout_s`. Lets a follower re-publish as soon as the leader's status write arrives,
        and the leader react to a VA edit, without polling."""
        baseline = self._variants_version if since is None else since
        try:
            async with asyncio.timeout(timeout_s):
                while self._variants_version <= baseline:
                    await self._variants_changed.wait()
        except TimeoutError:
            return False
        return True

    def _changed_callback(self, name: str) -> Callable[[Reflector[Any]], None]:
        def changed(_reflector: Reflector[Any]) -> None:
            self._version += 1
            for section, deps in _SECTION_DEPS.items():
                if name in deps:
                    self._dirty.add(section)
            if name in _VARIANT_SOURCES:
                self._variants_version += 1
                event, self._variants_changed = self._variants_changed, asyncio.Event()
                event.set()

        return changed

    # ---- reading ------------------------------------------------------------------------------------

    def _items(self, name: str) -> Iterable[Any]:
        for reflector in self._reflectors.get(name, ()):
            yield from reflector.store.values()

    def _vas(self) -> list[VaRecord]:
        return sorted(self._items(VA), key=lambda r: r.key)

    def stored_status(self, key: VariantKey) -> StoredStatus | None:
        """The watched status and resourceVersion of a VA (the StatusWriter's lookup)."""
        for reflector in self._reflectors[VA]:
            record = reflector.store.get((key.namespace, key.name))
            if record is not None:
                return StoredStatus(record.resource_version, record.raw_status)
        return None

    def va_uid(self, key: VariantKey) -> str | None:
        """The watched VA's `metadata.uid` (None when the VA is not known): what Events name as `regarding`."""
        for reflector in self._reflectors[VA]:
            record = reflector.store.get((key.namespace, key.name))
            if record is not None:
                return record.uid or None
        return None

    def view(self) -> ClusterView:
        """The cluster now, as a frozen value (cached; only changed sections are rebuilt)."""
        if self._dirty:
            dirty, self._dirty = self._dirty, set()
            workloads: dict[tuple[str, str, str], Workload] = {}
            vas: list[VaRecord] = []
            if dirty & {"variants", "pods", "pools"}:
                workloads = {(w.kind, w.namespace, w.name): w for name in _WORKLOADS for w in self._items(name)}
                vas = self._vas()
            if "variants" in dirty:
                self._sections["variants"] = self._build_variants(vas, workloads)
            if "pods" in dirty:
                self._sections["pods"] = self._build_pods(vas)
            if "configmaps" in dirty:
                records: list[ConfigMapRecord] = sorted(self._items(CMS), key=lambda c: (c.namespace, c.name))
                self._sections["configmaps"] = tuple((c.namespace, c.name, c.data) for c in records)
            if "pools" in dirty:
                self._sections["pools"] = self._build_pools(vas, workloads)
            if "nodes" in dirty:
                nodes: list[NodeRecord] = sorted(self._items(NODES), key=lambda n: n.name)
                self._sections["nodes"] = tuple(g for n in nodes for g in n.gpus)
            variants, invalid, invalid_keys = self._sections["variants"]
            if dirty & {"variants", "pods"}:
                self._sections["joined"] = with_startup(variants, self._sections["pods"])
            self._view = ClusterView(
                variants=self._sections["joined"],
                pods=self._sections["pods"],
                configmaps=self._sections["configmaps"],
                inference_pools=self._sections["pools"],
                nodes=self._sections["nodes"],
                invalid=invalid,
                invalid_keys=invalid_keys,
                synced=False,
            )
        synced = self.synced
        if self._view.synced != synced:
            self._view = replace(self._view, synced=synced)
        return self._view

    @staticmethod
    def _build_variants(
        vas: list[VaRecord], workloads: Mapping[tuple[str, str, str], Workload]
    ) -> tuple[tuple[VariantView, ...], tuple[str, ...], dict[VariantKey, str]]:
        views: list[VariantView] = []
        invalid: list[str] = []
        invalid_keys: dict[VariantKey, str] = {}
        for record in vas:
            if record.spec is None:
                invalid.append(record.error)
                invalid_keys[record.key] = record.error
                continue
            spec = record.spec
            workload = workloads.get((spec.target_kind, spec.key.namespace, spec.target_name))
            target = workload.scale_target() if workload is not None else None
            views.append(VariantView(spec=spec, status=record.status, target=target))
        return tuple(views), tuple(invalid), invalid_keys

    @staticmethod
    def _target_index(vas: list[VaRecord]) -> dict[tuple[str, str, str], str]:
        """(kind, namespace, name) of a scale target → the VA that targets it (the first by name)."""
        index: dict[tuple[str, str, str], str] = {}
        for record in vas:
            if record.spec is not None:
                spec = record.spec
                index.setdefault((spec.target_kind, spec.key.namespace, spec.target_name), spec.key.name)
        return index

    def _build_pods(self, vas: list[VaRecord]) -> tuple[PodInfo, ...]:
        index = self._target_index(vas)
        replicasets: dict[tuple[str, str], ReplicaSetRecord] = {}
        for reflector in self._reflectors[RS]:
            replicasets.update(reflector.store)
        pods: list[PodInfo] = []
        for pod in self._items(PODS):
            owner = objects.pod_workload(pod, replicasets)
            variant = index.get((owner[0], pod.namespace, owner[1])) if owner else None
            if variant is not None:
                pods.append(
                    PodInfo(pod.namespace, pod.name, variant, pod.ready, pod.ip, pod.created_s, pod.ready_since_s)
                )
        return tuple(sorted(pods, key=lambda p: (p.namespace, p.name)))

    def _build_pools(
        self, vas: list[VaRecord], workloads: Mapping[tuple[str, str, str], Workload]
    ) -> tuple[InferencePoolInfo, ...]:
        pools: dict[tuple[str, str], PoolRecord] = {}
        for name in (POOLS_V1A2, POOLS_V1):  # v1 wins when both versions serve the same pool
            for pool in self._items(name):
                pools[(pool.namespace, pool.name)] = pool
        if not pools:
            return ()
        services: dict[tuple[str, str], ServiceRecord] = {}
        for reflector in self._reflectors.get(SVC, ()):
            services.update(reflector.store)
        pods_by_ns: dict[str, list[PodRecord]] = {}
        for pod in self._items(PODS):
            pods_by_ns.setdefault(pod.namespace, []).append(pod)
        out: list[InferencePoolInfo] = []
        for (namespace, name), pool in sorted(pools.items()):
            members = tuple(
                record.key
                for record in vas
                if record.spec is not None
                and record.key.namespace == namespace
                and _selects(
                    pool.selector,
                    workloads.get((record.spec.target_kind, namespace, record.spec.target_name)),
                )
            )
            service = services.get((namespace, pool.epp_service)) if pool.epp_service else None
            endpoints: list[EppEndpoint] = []
            port = objects.DEFAULT_EPP_METRICS_PORT
            if service is not None and service.selector:
                epp_pods = [
                    p
                    for p in pods_by_ns.get(namespace, ())
                    if p.ready and p.ip and all(p.labels.get(k) == v for k, v in service.selector.items())
                ]
                port = service.metrics_port(epp_pods[0] if epp_pods else None)
                for pod in sorted(epp_pods, key=lambda p: p.name):
                    pod_port = service.metrics_port(pod)
                    host = f"[{pod.ip}]" if ":" in pod.ip else pod.ip
                    endpoints.append(EppEndpoint(namespace=namespace, pod=pod.name, address=f"{host}:{pod_port}"))
            out.append(
                InferencePoolInfo(
                    namespace=namespace,
                    name=name,
                    selector=dict(pool.selector),
                    epp_service=pool.epp_service,
                    epp_metrics_port=port,
                    endpoints=tuple(endpoints),
                    variants=members,
                )
            )
        return tuple(out)


def with_startup(views: tuple[VariantView, ...], pods: tuple[PodInfo, ...]) -> tuple[VariantView, ...]:
    """The views with each scale target's `startup_s`: the startup durations (creation → Ready) of its pods
    that are Ready now, ascending. A pod belongs to the VA that owns it (`PodInfo.variant`); VAs sharing one
    target share its durations. Views whose target has none are returned as they are.

    Example: Deployment l4 with pods created 12:00:00 / Ready 12:02:00 and created 12:05:00 / Ready 12:06:30,
    and one still starting ⇒ `startup_s = (90.0, 120.0)`.
    """
    target_of = {(v.key.namespace, v.key.name): (v.spec.target_kind, v.spec.target_name) for v in views}
    durations: dict[tuple[str, str, str], list[float]] = {}
    for pod in pods:
        startup = pod.startup_s
        target = target_of.get((pod.namespace, pod.variant))
        if startup is not None and target is not None:
            durations.setdefault((pod.namespace, *target), []).append(startup)
    out = []
    for view in views:
        found = durations.get((view.key.namespace, view.spec.target_kind, view.spec.target_name))
        if view.target is None or not found:
            out.append(view)
        else:
            out.append(replace(view, target=replace(view.target, startup_s=tuple(sorted(found)))))
    return tuple(out)


def _selects(selector: Mapping[str, str], workload: Workload | None) -> bool:
    """A pool selects a VA when its (non-empty) selector is a subset of the target's pod labels."""
    if workload is None or not selector:
        return False
    return all(workload.pod_labels.get(k) == v for k, v in selector.items())
