"""The reconciler: the only place where time passes. It joins the edges to the pure engine.

Leader, every `interval_s`:
    view = cluster.view() ─► collect(metrics) ─► Snapshot ─► engine.decide ─► store.publish ─► VA status writes
    (decide runs in one worker thread, `_DECIDER`, so the servers sharing this loop keep answering)
Leader, every `wake_interval_s` (100 ms): the EPP queues of idle models ─► engine.wake ─► store.upsert (the
    KEDA stream pushes it) ─► VA status writes; a queued request wakes one replica of the cheapest variant.
    A wake never waits for a decide under way (at 10,000 VAs, or learning α, β, γ at 1,000, a decide takes
    seconds, its first cycle minutes): it is decided at once from the state that decide started from (with the
    wakes it already answered), published, and decided again from the state the decide leaves before that
    decide's result is published (`_Meanwhile`), so the cycle's result cannot undo it.
Follower: serves the leader's decisions from the VA statuses it watches, so every replica answers the same.

A failed collection is not an error of the cycle: the engine's fallback hierarchy decides for the affected
models. Only a bug (an exception from the engine) marks the cycle failed, and the loop goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from adapter import engine
from adapter.config.configmaps import ConfigSet
from adapter.config.engine import EngineConfig
from adapter.config.safeload import rejection_reason
from adapter.domain.cluster import ClusterView, Collection
from adapter.domain.decision import CycleResult, VariantDecision
from adapter.domain.errors import AdapterError
from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.snapshot import Condition, ConditionType, Snapshot, VariantStatus
from adapter.reconciler.assemble import build_snapshot, decisions_from_status, model_queries, wake_snapshot
from adapter.reconciler.gcpause import GcPause
from adapter.reconciler.gil import FinelySharedGil
from adapter.reconciler.ports import (
    ClusterSource,
    CycleObserver,
    CycleRecorder,
    EppSource,
    Leadership,
    MetricsSource,
    StatusSink,
)
from adapter.store import DecisionStore
from adapter.store.decisions import EMPTY_FIGURES, CycleFigures

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReconcilerOptions:
    controller_namespace: str
    interval_s: float = 30.0
    wake_interval_s: float = 0.1
    collect_timeout_s: float = 20.0
    status_concurrency: int = 8
    scale_to_zero_env: str | None = None


class Reconciler:
    def __init__(
        self,
        *,
        cluster: ClusterSource,
        metrics: MetricsSource,
        epp: EppSource | None,
        status: StatusSink,
        leadership: Leadership,
        store: DecisionStore,
        options: ReconcilerOptions,
        observer: CycleObserver | None = None,
        recorder: CycleRecorder | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._cluster = cluster
        self._metrics = metrics
        self._epp = epp
        self._status = status
        self._leadership = leadership
        self._store = store
        self._options = options
        self._observer = observer
        self._recorder = recorder
        self._clock = clock
        self._state = engine.EngineState()
        self._state_lock = asyncio.Lock()
        """Held from reading the engine state to publishing what was decided from it: the cycle decides in a worker
        thread while this loop goes on. A wake meanwhile does not wait for it (`_meanwhile`)."""
        self._meanwhile: _Meanwhile | None = None
        """While a cycle decides: the wakes answered in the meantime, applied again to the state it leaves."""
        self._previous: dict[VariantKey, VariantDecision] = {}
        self.cycles = 0
        self.last_error: str | None = None
        self._invalid_seen: tuple[str, ...] = ()
        self._cm_errors_seen: tuple[str, ...] = ()
        self._errors_seen: dict[ModelKey, str] = {}

    @property
    def options(self) -> ReconcilerOptions:
        return self._options

    def update_options(self, options: ReconcilerOptions) -> None:
        """Live settings (`adapter.app.live`): the next wait and cycle use `options`."""
        self._options = options

    @property
    def ready(self) -> bool:
        """Ready once the inventory has synced and something has been published (leader or follower)."""
        return self.cycles > 0

    def _configmaps(self, view: ClusterView) -> ConfigSet:
        return ConfigSet.from_raw(
            view.configmaps,
            controller_namespace=self._options.controller_namespace,
            scale_to_zero_env=self._options.scale_to_zero_env,
        )

    async def run_cycle(self) -> CycleResult | None:
        """One cycle. Returns the engine's result on the leader, None on a follower or before sync."""
        view = self._cluster.view()
        if not view.synced:
            return None
        self._report_invalid(view)
        if not self._leadership.is_leader:
            await self.publish_follower()
            return None
        started = time.perf_counter()
        now_s = self._clock()
        try:
            configmaps = self._configmaps(view)
            self._report_configmap_errors(configmaps)
            collection = await self._collect(view, configmaps)
            snapshot = build_snapshot(view, collection, now_s=now_s)
        except Exception:
            self._cycle_failed(started)
            return None
        async with self._state_lock:
            state_before = self._state
            self._meanwhile = meanwhile = _Meanwhile(state_before)
            try:
                config = EngineConfig(configmaps=configmaps)
                result, self._state = await asyncio.get_running_loop().run_in_executor(
                    _DECIDER, decide_cycle, snapshot, state_before, config, now_s
                )
            except Exception:
                self._state = meanwhile.state  # the wakes answered meanwhile stand
                self._cycle_failed(started)
                return None
            finally:
                self._meanwhile = None
            rewoken = self._wake_again(meanwhile)
            decisions = {**result.decisions, **{k: d for r, _ in rewoken for k, d in r.decisions.items()}}
            self._store.publish(servable(decisions, view), now_s=now_s)
            self._store.publish_figures(CycleFigures(result.analyses, result.gpu_pools, result.errors))
            if self._recorder is not None:
                # the wakes applied again are not recorded twice: each was recorded when it was answered
                self._recorder.record(snapshot, result, state_before=state_before, configmaps=configmaps.sources)
        self._report_model_errors(result)
        overridden = {k for r, _ in rewoken for k in r.decisions}
        statuses = {k: v for k, v in engine.statuses(result, snapshot).items() if k not in overridden}
        for again, answered in rewoken:
            statuses.update(engine.statuses(again, answered))
        await self._write_statuses(statuses, view)
        await self._mark_invalid(view)
        if self._observer is not None:
            self._observer.record_cycle(
                duration_s=time.perf_counter() - started, decisions=decisions, previous=self._previous
            )
        self._previous = dict(decisions)
        self.cycles += 1
        return result

    def _wake_again(self, meanwhile: _Meanwhile) -> list[tuple[CycleResult, Snapshot]]:
        """The wakes answered while the cycle decided, decided again from the state it left (in their order): a
        model the cycle already asked to run is not woken again; one it left at zero is, so the cycle's result
        does not undo a wake already served. Each with the snapshot it was decided from."""
        again: list[tuple[CycleResult, Snapshot]] = []
        for snapshot in meanwhile.snapshots:
            result, self._state = engine.wake(snapshot, self._state, snapshot.taken_at_s)
            if result.decisions:
                again.append((result, snapshot))
        return again

    def _cycle_failed(self, started: float) -> None:
        """Called from an `except` block: the cycle is lost (a bug), the previous decisions stay served."""
        log.exception("engine cycle failed; serving the previous decisions")
        if self._observer is not None:
            self._observer.record_cycle_error(duration_s=time.perf_counter() - started)

    def _report_model_errors(self, result: CycleResult) -> None:
        """Log a model's internal error once per distinct message; the model is held, the others decided."""
        for model, error in sorted(result.errors.items()):
            if self._errors_seen.get(model) != error:
                log.error("deciding %s failed; holding it at its previous allocation: %s", model, error)
        self._errors_seen = dict(result.errors)

    def _report_invalid(self, view: ClusterView) -> None:
        """Log each invalid VA once (when the set changes): it is not decided until it is fixed."""
        if view.invalid != self._invalid_seen:
            for message in sorted(set(view.invalid) - set(self._invalid_seen)):
                log.warning("not deciding an invalid VariantAutoscaling: %s", message)
                if self._observer is not None:
                    self._observer.record_rejected(kind="VariantAutoscaling", reason=rejection_reason(message))
            self._invalid_seen = view.invalid

    def _report_configmap_errors(self, configmaps: ConfigSet) -> None:
        """Log each invalid ConfigMap entry once and count it; the VAs it applies to carry it in their
        OptimizationReady condition (reason InvalidConfiguration), and every other entry still applies."""
        errors = tuple(configmaps.errors())
        for message in sorted(set(errors) - set(self._cm_errors_seen)):
            log.warning("ignoring an invalid ConfigMap entry: %s", message)
            if self._observer is not None:
                self._observer.record_rejected(kind="ConfigMap", reason=rejection_reason(message))
        self._cm_errors_seen = errors

    async def _mark_invalid(self, view: ClusterView) -> None:
        """Leader: an invalid VA gets OptimizationReady=False (reason InvalidSpec) with the problem, so
        `kubectl describe va` says why it is not decided. Written only when it changes."""
        for key, message in sorted(view.invalid_keys.items()):
            status = VariantStatus(
                conditions=(Condition(ConditionType.OPTIMIZATION_READY, False, "InvalidSpec", message),)
            )
            try:
                await self._status.write(key, status, current=None)
            except AdapterError as exc:
                log.warning("status of invalid %s not written: %s (retried next cycle)", key, exc)

    async def publish_follower(self) -> None:
        """On a follower: serve the leader's decisions from the watched VA statuses. No-op on the leader."""
        view = self._cluster.view()
        if not view.synced or self._leadership.is_leader:
            return
        self._state = engine.EngineState()  # a future leader term starts from VA status, like any leader
        self._store.publish(servable(decisions_from_status(view), view), now_s=self._clock())
        self._store.publish_figures(EMPTY_FIGURES)
        self.cycles += 1

    async def _collect(self, view: ClusterView, configmaps: ConfigSet) -> Collection:
        queries = model_queries(view, configmaps)
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self._options.collect_timeout_s):
                collection = await self._metrics.collect(queries, view.pod_variants())
        except (AdapterError, TimeoutError) as exc:
            self.last_error = f"metrics collection failed: {exc or 'timed out'}"
            log.warning("%s; the fallback hierarchy decides this cycle", self.last_error)
            collection = Collection(available=False, errors=(self.last_error,))
        if not collection.available:
            self.last_error = "metrics unavailable: " + ("; ".join(collection.errors[:3]) or "no source answered")
            log.warning("%s", self.last_error)
        else:
            self.last_error = None
        if self._observer is not None:
            self._observer.record_collection(
                duration_s=time.perf_counter() - started,
                ok=collection.available,
                dropped=collection.dropped_samples,
            )
        return collection

    async def _write_statuses(self, statuses: Mapping[VariantKey, VariantStatus], view: ClusterView) -> None:
        current = {v.key: v.status for v in view.variants}
        limit = asyncio.Semaphore(self._options.status_concurrency)

        async def write(key: VariantKey, status: VariantStatus) -> None:
            async with limit:
                try:
                    await self._status.write(key, status, current=current.get(key))
                except AdapterError as exc:
                    log.warning("status of %s not written: %s (retried next cycle)", key, exc)

        await asyncio.gather(*(write(k, s) for k, s in statuses.items()))

    async def wake_cycle(self) -> list[VariantKey]:
        """Scale-from-zero: scrape the EPP queues of idle models; the engine wakes the cheapest variant of each
        that waits (`engine.wake`). Published at once, written to VA status and recorded like a cycle."""
        if self._epp is None or not self._leadership.is_leader:
            return []
        view = self._cluster.view()
        if not view.synced:
            return []
        idle = engine.idle_models(view.variants, self._meanwhile.state if self._meanwhile else self._state)
        if not idle:
            return []
        keys = {v.key for v in view.variants if v.spec.model in set(idle)}
        pools = [p for p in view.inference_pools if any(k in keys for k in p.variants)]
        try:
            queues = await self._epp.queue_sizes(pools)
        except AdapterError as exc:
            log.warning("EPP scrape failed: %s", exc)
            return []
        now_s = self._clock()
        snapshot = wake_snapshot(view, queues, idle, now_s=now_s)
        meanwhile = self._meanwhile
        if meanwhile is not None:  # a cycle is deciding: answer now; it applies this wake again to what it leaves
            state_before = meanwhile.state
            result, meanwhile.state = engine.wake(snapshot, state_before, now_s)
            if result.decisions:
                meanwhile.snapshots.append(snapshot)
        else:
            state_before = self._state
            result, self._state = engine.wake(snapshot, state_before, now_s)
        if not result.decisions:
            return []
        self._store.upsert(list(result.decisions.values()), now_s=now_s)
        if self._recorder is not None:
            sources = self._configmaps(view).sources
            self._recorder.record(snapshot, result, state_before=state_before, configmaps=sources)
        await self._write_statuses(engine.statuses(result, snapshot), view)
        for key, decision in sorted(result.decisions.items()):
            log.info("scale-from-zero: %s → 1 (%s)", key, decision.reason)
        return sorted(result.decisions)

    async def run(self, stop: asyncio.Event) -> None:
        """Cycle every interval and poll wakes every wake interval until `stop` is set."""
        wake_task = asyncio.create_task(self._wake_loop(stop), name="scale-from-zero")
        try:
            while not stop.is_set():
                await self.run_cycle()
                with contextlib.suppress(TimeoutError):  # asyncio.timeout: wait_for can swallow a cancel
                    async with asyncio.timeout(self._options.interval_s):
                        await stop.wait()
        finally:
            wake_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await wake_task

    async def _wake_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.wake_cycle()
            except Exception:
                log.exception("scale-from-zero poll failed")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._options.wake_interval_s):
                    await stop.wait()


@dataclass(slots=True)
class _Meanwhile:
    """The wakes of one cycle's decide: `state` is the state the decide started from with the wakes answered since
    (what the next wake meanwhile reads), `snapshots` each wake's input, decided again from the state it leaves."""

    state: engine.EngineState
    snapshots: list[Snapshot] = field(default_factory=list)


_DECIDER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine-decide")
"""The one thread every cycle's decide runs in, off the event loop: the servers that share the loop (External
Metrics API, KEDA scaler, probes, the Lease) keep answering while a large fleet is decided (a decide holds the GIL
only between the interpreter's switches, every 1 ms while it decides: `decide_cycle`). Not the loop's default
executor, which `asyncio.run` joins at exit: a stop during a decide leaves it to `serve`'s exit, as the Prometheus
query threads are (adapter/app/serve.py)."""


def decide_cycle(
    snapshot: Snapshot, state: engine.EngineState, config: EngineConfig, now_s: float
) -> tuple[CycleResult, engine.EngineState]:
    """`engine.decide` as every cycle runs it: with the cyclic GC paused (adapter/reconciler/gcpause.py says
    why; at 10,000 VAs it is a third of decide's CPU and the reason decide grew faster than the fleet), and the GIL
    handed over after 1 ms, so that the event loop answers meanwhile (adapter/reconciler/gil.py)."""
    with GcPause(), FinelySharedGil():
        return engine.decide(snapshot, state, config, now_s)


def servable(decisions: Mapping[VariantKey, VariantDecision], view: ClusterView) -> dict[VariantKey, VariantDecision]:
    """The decisions to serve: only those of VAs whose scale target exists. A number for a Deployment that does
    not exist would be invented (upstream WVA skips such VAs); the VA's status still carries the decision and
    TargetResolved=False, and the value appears as soon as the target does."""
    resolved = {v.key for v in view.variants if v.target is not None}
    return {key: decision for key, decision in decisions.items() if key in resolved}
