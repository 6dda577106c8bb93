"""`GcPause`: the collector off inside and as it was after, also when pauses nest; what survived the work frozen
when the last pause ends, still freed by its reference count; cyclic garbage a freeze held back collected by the
next full collection, due every `RECLAIM_EVERY_S`. What freezing saves, the young collections over a cycle's
survivors, is measured by `python -m tests.bench_default` (docs/benchmarks/scale.md, item 33), not here."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import weakref
from collections.abc import Iterator

import pytest

from adapter import engine
from adapter.domain.snapshot import Snapshot
from adapter.metrics.collector import PrometheusCollector
from adapter.reconciler import gcpause
from adapter.reconciler.gcpause import GcPause
from adapter.reconciler.loop import decide_cycle
from tests.bench_collect import NOW_S, fake_prometheus, make_fleet
from tests.metrics.test_reads import CASES, VAS


class Node:
    """A container the collector tracks, which a weak reference can watch."""

    def __init__(self) -> None:
        self.other: object = None


class Clock:
    def __init__(self) -> None:
        self.now_s = 1_000.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """A clock of the test's own; the last full collection just now, so none is due until the test says so."""
    fake = Clock()
    monkeypatch.setattr(GcPause, "clock", fake)
    monkeypatch.setattr(GcPause, "_reclaimed_s", fake.now_s)
    yield fake
    gc.unfreeze()  # what the test froze goes back to the collector
    gc.collect()


def test_off_inside_nested_pauses_and_as_it_was_after(clock: Clock) -> None:
    assert gc.isenabled()
    with GcPause():
        with GcPause():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with GcPause():
            pass
        assert not gc.isenabled()  # it was off before: left off
    finally:
        gc.enable()


def test_what_survives_the_work_is_frozen_and_still_freed_by_its_count(clock: Clock) -> None:
    frozen_before = gc.get_freeze_count()
    with GcPause():
        survivor = Node()
        with GcPause():
            pass
        assert gc.get_freeze_count() == frozen_before  # an inner pause's end freezes nothing
    assert gc.get_freeze_count() > frozen_before
    assert gc.is_tracked(survivor)
    watched = weakref.ref(survivor)
    del survivor
    assert watched() is None  # frozen objects die by their count, as any other


def test_cyclic_garbage_a_freeze_held_back_is_collected_when_a_full_collection_is_due(clock: Clock) -> None:
    with GcPause():
        node = Node()
        node.other = node  # a cycle: only the collector can free it
        watched = weakref.ref(node)
        del node
    gc.collect()
    assert watched() is not None  # frozen: no collection reaches it

    clock.now_s += gcpause.RECLAIM_EVERY_S - 1
    with GcPause():
        pass
    assert watched() is not None  # not due yet

    clock.now_s += 1
    with GcPause():
        pass
    assert watched() is None
    assert GcPause._reclaimed_s == clock.now_s


@pytest.mark.timeout(10)
def test_a_finalizer_the_full_collection_runs_may_pause_too(clock: Clock) -> None:
    """The full collection runs the finalizers of the garbage it frees, inside the last pause's end: one that
    pauses (any code may) neither waits for itself nor leaves the collector off."""
    paused: list[bool] = []

    def pause() -> None:
        with GcPause():
            paused.append(not gc.isenabled())

    with GcPause():
        node = Node()
        node.other = node
        weakref.finalize(node, pause)
        del node
    clock.now_s += gcpause.RECLAIM_EVERY_S
    with GcPause():
        pass
    assert paused == [True]
    assert gc.isenabled()


def test_a_collector_off_before_the_pause_is_left_off_and_nothing_is_frozen(clock: Clock) -> None:
    clock.now_s += gcpause.RECLAIM_EVERY_S  # a full collection would be due, if the collector were ours to run
    gc.disable()
    try:
        frozen_before = gc.get_freeze_count()
        with GcPause():
            survivor = Node()
        assert gc.get_freeze_count() == frozen_before
        assert GcPause._reclaimed_s == clock.now_s - gcpause.RECLAIM_EVERY_S
        assert not gc.isenabled()
        assert gc.is_tracked(survivor)
    finally:
        gc.enable()


@pytest.fixture(scope="module")
def prometheus() -> Iterator[str]:
    with fake_prometheus(VAS) as url:
        yield url


@pytest.mark.parametrize("name", list(CASES))
def test_a_cycle_collected_and_decided_leaves_no_cyclic_garbage(prometheus: str, name: str, clock: Clock) -> None:
    """What freezing relies on: the cycle's own work (the real collector against the benchmark's fake Prometheus,
    then `decide_cycle`, three cycles, the engine state carried) frees everything it drops by reference counts,
    for every analyzer. Its garbage is kept (`DEBUG_SAVEALL`) and must be none."""
    config = CASES[name][0]()
    fleet = make_fleet(VAS)
    models = [dataclasses.replace(m, reads=engine.reads(config.configmaps, m.key)) for m in fleet.models]

    async def cycles() -> list[object]:
        async with PrometheusCollector(prometheus, timeout_s=60) as collector:
            gc.unfreeze()
            gc.collect()
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                state = engine.EngineState()
                for cycle in range(3):
                    collection = await collector.collect(models, fleet.pod_variants)
                    assert collection.available
                    now_s = NOW_S + 30.0 * cycle
                    snapshot = Snapshot(now_s, fleet.views, collection.pods, collection.models)
                    result, state = decide_cycle(snapshot, state, config, now_s)
                    assert len(result.decisions) == VAS
                del collection, snapshot, result, state
                gc.unfreeze()
                gc.collect()
                return list(gc.garbage)
            finally:
                gc.set_debug(0)
                gc.garbage.clear()

    assert asyncio.run(cycles()) == []
