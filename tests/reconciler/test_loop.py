"""The reconciler against fake edges: leader cycles, followers serving from status, fail-over, wakes."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import pytest
from prometheus_client import CollectorRegistry

from adapter.domain.cluster import ClusterView, Collection, InferencePoolInfo, ModelQuery
from adapter.domain.decision import CycleKind, CycleResult
from adapter.domain.errors import PrometheusUnavailable
from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.snapshot import (
    DecisionPath,
    DesiredAlloc,
    ModelTraffic,
    PodMetrics,
    ScaleTarget,
    Snapshot,
    VariantSpec,
    VariantStatus,
    VariantView,
)
from adapter.engine import EngineState
from adapter.reconciler.loop import Reconciler, ReconcilerOptions
from adapter.servers.telemetry import Telemetry
from adapter.store import DecisionStore

NS = "llm"
MODEL = ModelKey(NS, "m")
CM = "workload-variant-autoscaler-system"
SATURATION = (CM, "wva-saturation-scaling-config", {"default": "kvCacheThreshold: 0.80\nqueueLengthThreshold: 5\n"})


def variant(name: str, cost: float, replicas: int, *, status: VariantStatus | None = None) -> VariantView:
    return VariantView(
        spec=VariantSpec(VariantKey(NS, name), "m", "Deployment", name, min_replicas=0, max_replicas=10, cost=cost),
        status=status or VariantStatus(),
        target=ScaleTarget("Deployment", NS, name, replicas=replicas, ready_replicas=replicas, spec_replicas=replicas),
    )


def pods(name: str, n: int, kv: float) -> list[PodMetrics]:
    return [PodMetrics(NS, f"{name}-{i}", name, kv_cache_usage=kv, queue_length=0) for i in range(n)]


@dataclass
class FakeCluster:
    current: ClusterView

    def view(self) -> ClusterView:
        return self.current


@dataclass
class FakeMetrics:
    collection: Collection | None = None
    calls: list[list[ModelQuery]] = field(default_factory=list)

    async def collect(self, models: Sequence[ModelQuery], pod_variants: Mapping[tuple[str, str], str]) -> Collection:
        self.calls.append(list(models))
        if self.collection is None:
            raise PrometheusUnavailable("connection refused")
        return self.collection


@dataclass
class FakeStatus:
    writes: dict[VariantKey, VariantStatus] = field(default_factory=dict)

    async def write(self, key: VariantKey, status: VariantStatus, *, current: VariantStatus | None) -> bool:
        self.writes[key] = status
        return True


@dataclass
class FakeLeader:
    is_leader: bool = True


@dataclass
class FakeEpp:
    sizes: dict[tuple[str, str], float] = field(default_factory=dict)
    calls: int = 0

    async def queue_sizes(self, pools: Sequence[InferencePoolInfo]) -> dict[tuple[str, str], float]:
        self.calls += 1
        return self.sizes


def make(
    view: ClusterView,
    *,
    metrics: FakeMetrics,
    leader: bool = True,
    epp: FakeEpp | None = None,
    now: list[float] | None = None,
) -> tuple[Reconciler, DecisionStore, FakeStatus]:
    store, status = DecisionStore(), FakeStatus()
    clock = now or [1_000_000.0]
    rec = Reconciler(
        cluster=FakeCluster(view),
        metrics=metrics,
        epp=epp,
        status=status,
        leadership=FakeLeader(leader),
        store=store,
        options=ReconcilerOptions(controller_namespace=CM, interval_s=0.01, wake_interval_s=0.01),
        clock=lambda: clock[0],
    )
    return rec, store, status


def busy_view() -> ClusterView:
    return ClusterView(variants=(variant("cheap", 1, 2), variant("dear", 5, 2)), configmaps=(SATURATION,), synced=True)


def busy_collection(kv: float) -> Collection:
    return Collection(
        pods=tuple(pods("cheap", 2, kv) + pods("dear", 2, kv)),
        models={MODEL: ModelTraffic(MODEL, request_count=100)},
    )


async def test_the_leader_decides_publishes_and_writes_every_status() -> None:
    rec, store, status = make(busy_view(), metrics=FakeMetrics(busy_collection(0.78)))
    result = await rec.run_cycle()
    assert result is not None
    # kv 0.78 everywhere: spare 0.02 < 0.10 → scale up the cheapest variant by one.
    assert store.get(VariantKey(NS, "cheap")).desired_replicas == 3  # type: ignore[union-attr]
    assert store.get(VariantKey(NS, "dear")).desired_replicas == 2  # type: ignore[union-attr]
    assert set(status.writes) == {VariantKey(NS, "cheap"), VariantKey(NS, "dear")}
    assert status.writes[VariantKey(NS, "cheap")].desired.num_replicas == 3  # type: ignore[union-attr]
    assert rec.ready


async def test_a_failed_collection_lets_the_fallback_hierarchy_decide() -> None:
    rec, store, _ = make(busy_view(), metrics=FakeMetrics(None))
    await rec.run_cycle()
    served = store.get(VariantKey(NS, "cheap"))
    assert served is not None
    assert served.decision.path is DecisionPath.LAST_RESORT
    assert served.desired_replicas == 2  # first run: the current replicas
    assert "metrics collection failed" in (rec.last_error or "")


async def test_a_follower_serves_exactly_what_the_leader_wrote() -> None:
    leader, leader_store, written = make(busy_view(), metrics=FakeMetrics(busy_collection(0.78)))
    await leader.run_cycle()
    with_status = replace(
        busy_view(), variants=tuple(replace(v, status=written.writes[v.key]) for v in busy_view().variants)
    )
    follower, follower_store, follower_writes = make(with_status, metrics=FakeMetrics(None), leader=False)
    assert await follower.run_cycle() is None
    assert follower_writes.writes == {}
    assert {e.key: e.desired_replicas for e in follower_store.list()} == {
        e.key: e.desired_replicas for e in leader_store.list()
    }


@pytest.mark.parametrize(
    ("persisted", "served"),
    [
        pytest.param(DecisionPath.FALLBACK, DecisionPath.FALLBACK, id="fallback"),
        pytest.param(DecisionPath.LAST_RESORT, DecisionPath.LAST_RESORT, id="last-resort"),
        pytest.param(DecisionPath.SCALE_FROM_ZERO, DecisionPath.SCALE_FROM_ZERO, id="scale-from-zero"),
        pytest.param(DecisionPath.UNKNOWN, DecisionPath.UNKNOWN, id="written-without-a-path"),
    ],
)
async def test_a_follower_serves_the_persisted_path_not_one_read_from_the_reason(
    persisted: DecisionPath, served: DecisionPath
) -> None:
    desired = DesiredAlloc(2, "saturation-only mode: no-change", 999_970.0, 999_970.0, path=persisted)
    view = replace(busy_view(), variants=(variant("cheap", 1, 2, status=VariantStatus(desired=desired)),))
    follower, store, _ = make(view, metrics=FakeMetrics(None), leader=False)
    await follower.run_cycle()
    decision = store.get(VariantKey(NS, "cheap"))
    assert decision is not None
    assert decision.decision.path is served
    assert decision.decision.reason == "saturation-only mode: no-change"


async def test_a_new_leader_after_fail_over_keeps_the_decisions_during_an_outage() -> None:
    leader, _, written = make(busy_view(), metrics=FakeMetrics(busy_collection(0.78)))
    await leader.run_cycle()
    with_status = replace(
        busy_view(), variants=tuple(replace(v, status=written.writes[v.key]) for v in busy_view().variants)
    )
    successor, store, _ = make(with_status, metrics=FakeMetrics(None), now=[1_000_030.0])
    await successor.run_cycle()
    assert store.get(VariantKey(NS, "cheap")).desired_replicas == 3  # type: ignore[union-attr]
    assert "maintaining controller intent" in store.get(VariantKey(NS, "cheap")).decision.reason  # type: ignore[union-attr]


async def test_a_configmap_change_takes_effect_in_the_next_cycle() -> None:
    rec, store, _ = make(busy_view(), metrics=FakeMetrics(busy_collection(0.60)))
    await rec.run_cycle()
    assert store.get(VariantKey(NS, "cheap")).desired_replicas == 2  # type: ignore[union-attr]  spare 0.2: steady
    strict = (CM, "wva-saturation-scaling-config", {"default": "kvCacheThreshold: 0.65\nkvSpareTrigger: 0.10\n"})
    rec._cluster = FakeCluster(replace(busy_view(), configmaps=(strict,)))  # type: ignore[assignment]
    await rec.run_cycle()
    assert store.get(VariantKey(NS, "cheap")).desired_replicas == 3  # type: ignore[union-attr]  spare 0.05 < 0.10


async def test_the_collector_is_asked_for_what_the_configured_analyzer_reads_and_follows_a_configmap_change() -> None:
    """Each cycle's `ModelQuery.reads` is `engine.reads` under the ConfigMaps of that cycle: V1's fields, then the
    token-based analyzer's once the saturation ConfigMap selects it."""
    metrics = FakeMetrics(busy_collection(0.60))
    rec, _, _ = make(busy_view(), metrics=metrics)
    await rec.run_cycle()
    (query,) = metrics.calls[-1]
    assert query.reads == {"kv_cache_usage", "queue_length", "request_count"}
    tokens = (CM, "wva-saturation-scaling-config", {"default": "analyzerName: saturation-token-based\n"})
    rec._cluster = FakeCluster(replace(busy_view(), configmaps=(tokens,)))  # type: ignore[assignment]
    await rec.run_cycle()
    (query,) = metrics.calls[-1]
    assert query.reads is not None
    assert {"tokens_in_use", "prefix_cache_hit_rate", "epp_queue_bytes", "request_count"} <= query.reads
    assert "avg_ttft_s" not in query.reads


async def test_nothing_is_decided_before_the_inventory_has_synced() -> None:
    rec, store, status = make(replace(busy_view(), synced=False), metrics=FakeMetrics(busy_collection(0.5)))
    assert await rec.run_cycle() is None
    assert store.list() == []
    assert status.writes == {}
    assert not rec.ready


def idle_view() -> ClusterView:
    return ClusterView(
        variants=(variant("cheap", 1, 0), variant("dear", 5, 0)),
        inference_pools=(
            InferencePoolInfo(NS, "pool", {"app": "m"}, variants=(VariantKey(NS, "cheap"), VariantKey(NS, "dear"))),
        ),
        synced=True,
    )


@pytest.mark.parametrize(
    ("view", "queue", "expected", "scrapes"),
    [
        pytest.param(idle_view(), 3.0, [VariantKey(NS, "cheap")], (1, 1), id="queued-request-wakes-the-cheapest"),
        pytest.param(idle_view(), 0.0, [], (1, 2), id="empty-queue-wakes-nothing-and-keeps-polling"),
        pytest.param(
            replace(idle_view(), variants=(variant("cheap", 1, 0), variant("dear", 5, 1))),
            3.0,
            [],
            (0, 0),
            id="a-running-variant-serves-the-queue-no-scrape",
        ),
    ],
)
async def test_scale_from_zero_wakes_one_replica_on_the_cheapest_variant(
    view: ClusterView, queue: float, expected: list[VariantKey], scrapes: tuple[int, int]
) -> None:
    epp = FakeEpp({(NS, "m"): queue})
    rec, store, status = make(view, metrics=FakeMetrics(None), epp=epp)
    pushed: list[frozenset[VariantKey]] = []
    store.subscribe(pushed.append)
    assert await rec.wake_cycle() == expected
    for key in expected:
        stored = store.get(key)
        assert stored is not None
        assert stored.desired_replicas == 1
        assert stored.decision.path is DecisionPath.SCALE_FROM_ZERO
        assert "pending request" in stored.decision.reason
        assert status.writes[key].desired.num_replicas == 1  # type: ignore[union-attr]
        assert pushed == [frozenset({key})]
    assert epp.calls == scrapes[0]
    # Already woken (or not idle): the next poll does not scrape again; an idle empty model is polled again.
    await rec.wake_cycle()
    assert epp.calls == scrapes[1]


async def test_a_follower_never_wakes_anything() -> None:
    rec, store, _ = make(idle_view(), metrics=FakeMetrics(None), leader=False, epp=FakeEpp({(NS, "m"): 5.0}))
    assert await rec.wake_cycle() == []
    assert store.list() == []


async def test_the_engine_keeps_a_woken_variant_while_it_starts() -> None:
    rec, store, status = make(idle_view(), metrics=FakeMetrics(Collection()), epp=FakeEpp({(NS, "m"): 2.0}))
    await rec.wake_cycle()
    view = idle_view()
    view = replace(view, variants=tuple(replace(v, status=status.writes.get(v.key, v.status)) for v in view.variants))
    rec._cluster = FakeCluster(view)  # type: ignore[assignment]
    await rec.run_cycle()  # no pods report yet: the fallback keeps the woken replica
    assert store.get(VariantKey(NS, "cheap")).desired_replicas == 1  # type: ignore[union-attr]
    assert store.get(VariantKey(NS, "dear")).desired_replicas == 0  # type: ignore[union-attr]


async def test_run_stops_promptly_when_asked() -> None:
    rec, store, _ = make(busy_view(), metrics=FakeMetrics(busy_collection(0.5)), epp=FakeEpp())
    stop = asyncio.Event()
    task = asyncio.create_task(rec.run(stop))
    async with asyncio.timeout(5):
        while rec.cycles < 3:
            await asyncio.sleep(0.005)
    stop.set()
    await asyncio.wait_for(task, timeout=5)
    assert len(store.list()) == 2


async def test_an_invalid_va_is_logged_once_and_not_decided(caplog: pytest.LogCaptureFixture) -> None:
    view = replace(busy_view(), invalid=("VariantAutoscaling llm/broken.spec: minReplicas (3) must be <= 1",))
    rec, store, _ = make(view, metrics=FakeMetrics(busy_collection(0.5)))
    with caplog.at_level("WARNING"):
        await rec.run_cycle()
        await rec.run_cycle()
    assert sum("llm/broken" in r.getMessage() for r in caplog.records) == 1
    assert VariantKey(NS, "broken") not in {e.key for e in store.list()}


def with_telemetry(collection: Collection) -> tuple[Reconciler, DecisionStore, Telemetry]:
    """A leader over the busy view whose cycles report to a real Telemetry (its own registry)."""
    store = DecisionStore()
    telemetry = Telemetry(store, registry=CollectorRegistry())
    rec = Reconciler(
        cluster=FakeCluster(busy_view()),
        metrics=FakeMetrics(collection),
        epp=None,
        status=FakeStatus(),
        leadership=FakeLeader(True),
        store=store,
        options=ReconcilerOptions(controller_namespace=CM),
        observer=telemetry,
        clock=lambda: 1_000_000.0,
    )
    return rec, store, telemetry


async def test_collection_outcome_and_dropped_samples_reach_telemetry() -> None:
    collection = replace(busy_collection(0.5), dropped_samples={"nan": 3, "unknown-pod": 2})
    rec, _, telemetry = with_telemetry(collection)
    await rec.run_cycle()
    await rec.run_cycle()
    reg = telemetry.registry
    assert reg.get_sample_value("wva_metrics_samples_dropped_total", {"reason": "nan"}) == 6
    assert reg.get_sample_value("wva_metrics_samples_dropped_total", {"reason": "unknown-pod"}) == 4
    labels = {"source": "prometheus", "outcome": "success"}
    assert reg.get_sample_value("wva_metrics_collection_duration_seconds_count", labels) == 2
    assert reg.get_sample_value("wva_cycle_duration_seconds_count", {"outcome": "success"}) == 2


async def test_last_error_tells_when_metrics_are_unavailable_and_clears_on_recovery() -> None:
    metrics = FakeMetrics(Collection(available=False, errors=("PrometheusUnavailable: connection refused",)))
    rec, _, _ = make(busy_view(), metrics=metrics)
    await rec.run_cycle()
    assert rec.last_error is not None
    assert "connection refused" in rec.last_error
    metrics.collection = busy_collection(0.5)
    await rec.run_cycle()
    assert rec.last_error is None


async def test_the_loop_keeps_answering_while_a_cycle_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cycle decides in a worker thread: a decide that holds the CPU for a second leaves this loop (the External
    Metrics API, the KEDA scaler and the probes share it) answering every few milliseconds, not after the second."""
    import adapter.reconciler.loop as loop

    real = loop.decide_cycle

    def slow_decide(*args: object) -> object:
        deadline = time.process_time() + 1.0
        while time.process_time() < deadline:  # pure Python: holds the GIL between the interpreter's switches
            pass
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(loop, "decide_cycle", slow_decide)
    rec, store, _ = make(busy_view(), metrics=FakeMetrics(busy_collection(0.5)))
    cycle = asyncio.create_task(rec.run_cycle())
    gaps: list[float] = []
    last = time.perf_counter()
    while not cycle.done():
        await asyncio.sleep(0.005)
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
    assert await cycle is not None
    assert len(store.list()) == 2
    assert len(gaps) > 20  # the loop ran all along
    assert max(gaps) < 0.5, f"the event loop stalled for {max(gaps):.2f} s during decide"


@pytest.mark.parametrize(
    ("cycle", "path_after"),
    [
        pytest.param("asks-for-it", DecisionPath.LAST_RESORT, id="the-cycle-asks-for-the-variant-too"),
        pytest.param("decides-nothing", DecisionPath.SCALE_FROM_ZERO, id="the-cycle-leaves-it-at-zero"),
        pytest.param("raises", DecisionPath.SCALE_FROM_ZERO, id="the-cycle-fails"),
    ],
)
async def test_a_wake_during_a_cycle_is_served_at_once_and_the_cycle_cannot_undo_it(
    monkeypatch: pytest.MonkeyPatch, cycle: str, path_after: DecisionPath
) -> None:
    """A wake that comes while the cycle decides (in its worker thread, for seconds at 10,000 VAs) does not wait for
    it: it is decided from the state the cycle started from, served and pushed at once. When the cycle ends, the
    wake is decided again from the state the cycle leaves, before the cycle's result is published: a cycle that
    asked for the variant itself (here its first run's last resort) keeps its own decision; one that left the model
    at zero, or failed, does not undo the wake. Later polls, during the cycle and after it, do not wake it again."""
    import adapter.reconciler.loop as loop

    real, release = loop.decide_cycle, threading.Event()

    def held_decide(snapshot: Snapshot, state: EngineState, config: object, now_s: float) -> object:
        release.wait(timeout=5)
        if cycle == "raises":
            raise RuntimeError("a bug in the engine")
        if cycle == "decides-nothing":
            return CycleResult(now_s, {}, {}), state
        return real(snapshot, state, config, now_s)  # type: ignore[arg-type]

    monkeypatch.setattr(loop, "decide_cycle", held_decide)
    epp = FakeEpp({(NS, "m"): 2.0})
    rec, store, status = make(idle_view(), metrics=FakeMetrics(Collection()), epp=epp)
    recorded: list[tuple[CycleKind, EngineState]] = []
    rec._recorder = ListRecorder(recorded)
    pushed: list[frozenset[VariantKey]] = []
    store.subscribe(pushed.append)
    cheap = VariantKey(NS, "cheap")
    running = asyncio.create_task(rec.run_cycle())
    await asyncio.sleep(0.05)  # the cycle is deciding
    assert await asyncio.wait_for(rec.wake_cycle(), timeout=1.0) == [cheap]
    assert not running.done()
    woken = store.get(cheap)
    assert woken is not None
    assert woken.desired_replicas == 1
    assert woken.decision.path is DecisionPath.SCALE_FROM_ZERO
    assert pushed == [frozenset({cheap})]
    assert status.writes[cheap].desired.num_replicas == 1  # type: ignore[union-attr]
    assert await rec.wake_cycle() == []  # asked to run already: not scraped, not woken again
    assert epp.calls == 1
    release.set()
    assert (await running is None) == (cycle == "raises")
    after = store.get(cheap)
    assert after is not None
    assert after.desired_replicas == 1
    assert after.decision.path is path_after
    assert status.writes[cheap].desired.num_replicas == 1  # type: ignore[union-attr]
    assert await rec.wake_cycle() == []
    assert epp.calls == 1
    # the wake recorded once, when answered, from the state the cycle started from; then the cycle, if it decided
    kinds = [kind for kind, _ in recorded]
    assert kinds == [CycleKind.SCALE_FROM_ZERO] + ([] if cycle == "raises" else [CycleKind.DECIDE])
    assert all(state == EngineState() for _, state in recorded)


@dataclass
class ListRecorder:
    records: list[tuple[CycleKind, EngineState]]

    def record(self, snapshot: Snapshot, result: CycleResult, *, state_before: EngineState, configmaps: object) -> None:
        self.records.append((result.kind, state_before))


async def test_a_decide_that_raises_loses_the_cycle_and_keeps_what_was_served(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in the engine (an exception from decide, in its thread) fails that cycle only: the previous
    decisions stay served, the failure is logged and counted, and the state lock is free for the next cycle."""
    import adapter.reconciler.loop as loop

    rec, store, telemetry = with_telemetry(busy_collection(0.5))
    assert await rec.run_cycle() is not None
    served = {d.key: d.desired_replicas for d in store.list()}
    real = loop.decide_cycle

    def broken(*args: object) -> object:
        raise RuntimeError("a bug in the engine")

    monkeypatch.setattr(loop, "decide_cycle", broken)
    assert await rec.run_cycle() is None
    assert {d.key: d.desired_replicas for d in store.list()} == served
    assert "engine cycle failed; serving the previous decisions" in caplog.text
    assert telemetry.registry.get_sample_value("wva_cycle_duration_seconds_count", {"outcome": "error"}) == 1
    monkeypatch.setattr(loop, "decide_cycle", real)
    assert await rec.run_cycle() is not None  # the lock was released
