"""The simulated cluster around the real reconciler: `simulate` drives the engine through the code `serve` runs.

    SimulatedFleet ──scrape──► SeriesStore (simulated Prometheus) ──► MetricsSource (given by the caller:
          ▲                                                           build_queries → answers → the collector's
          │ spec.replicas                                             `assemble`, see adapter.app.simulate)
          │                                                                  │
    actuator (HPA/KEDA emulation) ◄── DecisionStore ◄── Reconciler.run_cycle ◄┘  (view ─► collect ─► Snapshot
                                                           ▲        │              ─► engine.decide ─► publish)
                                   SimCluster.view() ──────┘        └─► SimCluster.write (VA status, as the
                                   (VAs, Deployments, pods, ConfigMaps)   API server stores it: a dict)

`SimCluster` is the inventory (`ClusterSource`) and the status writer (`StatusSink`) at once. Pods carry their
creation and ready times and scale targets the startup durations of their ready pods (`ScaleTarget.startup_s`),
as the real inventory reports them. VA statuses are rendered with `status_to_dict` and read back with
`status_from_dict`, exactly the round trip through the API server, so what a leader remembers across cycles in
VA status (learned queueing-model parameters, transition times) survives as it does in a cluster. `SimEpp`
answers the scale-from-zero poll from the fleet's EPP queue (the real one scrapes the EPP pods directly, without
Prometheus' delay). Nothing here reads the wall clock: the reconciler gets the simulation's clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from adapter.config.va import VariantAutoscaling, status_from_dict, status_to_dict
from adapter.domain.cluster import ClusterView, InferencePoolInfo
from adapter.domain.cluster import PodInfo as ClusterPod
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import VariantStatus, VariantView
from adapter.reconciler.loop import Reconciler, ReconcilerOptions
from adapter.reconciler.ports import AlwaysLeader, MetricsSource
from adapter.sim.fleet import PodState, SimulatedFleet
from adapter.store import DecisionStore

POOL_NAME = "sim-inference-pool"


class SimCluster:
    """The Kubernetes side of a simulated model: its VAs, their Deployments (the fleet), pods, ConfigMaps."""

    def __init__(
        self,
        fleet: SimulatedFleet,
        vas: Sequence[VariantAutoscaling],
        configmaps: Sequence[tuple[str, str, Mapping[str, str]]],
        *,
        clock: Callable[[], float],
    ) -> None:
        self.fleet = fleet
        self.vas = tuple(sorted(vas, key=lambda va: va.key))
        self.configmaps = tuple(configmaps)
        self._clock = clock
        self.stored: dict[VariantKey, dict[str, Any]] = {}
        """Each VA's `status` as the API server would hold it."""
        self.writes = 0

    def view(self) -> ClusterView:
        namespace = self.fleet.config.namespace
        variants = tuple(
            VariantView(
                spec=va.to_spec(),
                status=status_from_dict(self.stored.get(va.key, {})),
                target=self.fleet.scale_target(va.key.name),
            )
            for va in self.vas
        )
        pods = tuple(
            ClusterPod(
                namespace=namespace,
                name=p.name,
                variant=p.variant,
                ready=p.state is PodState.READY,
                created_s=p.created_s,
                ready_since_s=p.ready_at_s if p.state is PodState.READY else None,
            )
            for p in self.fleet.pods()
        )
        pool = InferencePoolInfo(
            namespace=namespace, name=POOL_NAME, selector={}, variants=tuple(va.key for va in self.vas)
        )
        return ClusterView(
            variants=variants,
            pods=pods,
            configmaps=self.configmaps,
            inference_pools=(pool,),
            nodes=self.fleet.config.nodes,
            synced=True,
        )

    async def write(self, key: VariantKey, status: VariantStatus, *, current: VariantStatus | None) -> bool:
        """The API server's side of `StatusWriter.write`: store the rendering (the stored status is always known
        here, so `current` is not needed)."""
        del current
        previous = self.stored.get(key)
        rendered = status_to_dict(status, previous=previous, now_s=self._clock())
        if rendered == previous:
            return False
        self.stored[key] = rendered
        self.writes += 1
        return True


class SimEpp:
    """Scale-from-zero's EPP scrape: the fleet's flow-control queue, now."""

    def __init__(self, fleet: SimulatedFleet) -> None:
        self.fleet = fleet

    async def queue_sizes(self, pools: Sequence[InferencePoolInfo]) -> dict[tuple[str, str], float]:
        if not any(p.name == POOL_NAME for p in pools):
            return {}
        config = self.fleet.config
        return {(config.namespace, config.model_id): float(self.fleet.epp_queue_size)}


def build_reconciler(
    cluster: SimCluster,
    metrics: MetricsSource,
    *,
    store: DecisionStore,
    controller_namespace: str,
    interval_s: float,
    clock: Callable[[], float],
) -> Reconciler:
    """The reconciler `serve` runs, as the only replica (leader), wired to the simulated edges."""
    return Reconciler(
        cluster=cluster,
        metrics=metrics,
        epp=SimEpp(cluster.fleet),
        status=cluster,
        leadership=AlwaysLeader(),
        store=store,
        options=ReconcilerOptions(controller_namespace=controller_namespace, interval_s=interval_s),
        clock=clock,
    )
