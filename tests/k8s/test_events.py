"""Events about decisions: which status changes are worth one (pure), and how they are written — series, rate
limit, bounded queue, retries — on virtual clocks with an in-memory sink.

The same recorder against the real kube-apiserver (Events on a VA after a real scale decision, none in a steady
cycle, counted in the audit log, and `kubectl describe va`): tests/e2e_k8s/test_hpa_actuation.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pytest

from adapter.domain.errors import KubeError, KubeNotFound
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import Condition, ConditionType, DesiredAlloc, VariantStatus
from adapter.k8s.client import KubeInvalid, KubeUnavailable
from adapter.k8s.events import (
    NOTE_MAX_BYTES,
    DecisionEvents,
    EventRecorder,
    ObjectRef,
    PlannedEvent,
    Published,
    published,
    transition_events,
)

KEY = VariantKey("llm", "llama-8b-l4")
VA = ObjectRef("llmd.ai/v1alpha1", "VariantAutoscaling", "llm", "llama-8b-l4", "uid-1")
OTHER = ObjectRef("llmd.ai/v1alpha1", "VariantAutoscaling", "llm", "llama-8b-a100", "uid-2")
T0 = 1_767_225_600.0


# ---- which changes make an Event ----------------------------------------------------------------------------


def _p(replicas: int | None, ready: bool | None = True, ready_reason: str = "SaturationOnlyMode") -> Published:
    return Published(replicas, f"reason for {replicas}", ready, ready_reason, f"message {ready_reason}")


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        pytest.param(None, _p(2), [("Normal", "DesiredReplicasSet", "desired replicas 2: reason for 2")], id="first"),
        pytest.param(_p(2), _p(2), [], id="steady"),
        pytest.param(
            _p(2), _p(3), [("Normal", "DesiredReplicasIncreased", "desired replicas 2 → 3: reason for 3")], id="up"
        ),
        pytest.param(
            _p(3), _p(1), [("Normal", "DesiredReplicasDecreased", "desired replicas 3 → 1: reason for 1")], id="down"
        ),
        pytest.param(
            _p(2),
            _p(2, False, "MetricsUnavailable"),
            [("Warning", "FallbackDecision", "MetricsUnavailable: message MetricsUnavailable")],
            id="into-fallback",
        ),
        pytest.param(
            _p(2, False, "MetricsUnavailable"),
            _p(2, False, "AnalysisUnavailable"),
            [],
            id="fallback-reason-changes-within-fallback",
        ),
        pytest.param(
            _p(2, False, "MetricsUnavailable"),
            _p(3),
            [
                ("Normal", "DesiredReplicasIncreased", "desired replicas 2 → 3: reason for 3"),
                ("Normal", "FallbackEnded", "message SaturationOnlyMode"),
            ],
            id="out-of-fallback-with-a-change",
        ),
        pytest.param(
            _p(2, True, "OptimizationSucceeded"),
            _p(3, True, "LimitedByGpus"),
            [
                ("Normal", "DesiredReplicasIncreased", "desired replicas 2 → 3: reason for 3"),
                ("Warning", "LimitedByGpus", "message LimitedByGpus"),
            ],
            id="limited-scale-up",
        ),
        pytest.param(_p(3, True, "LimitedByGpus"), _p(3, True, "LimitedByGpus"), [], id="still-limited"),
        pytest.param(
            _p(2, True, "OptimizationSucceeded"),
            _p(2, True, "NotWokenFromZero"),
            [("Warning", "NotWokenFromZero", "message NotWokenFromZero")],
            id="a-variant-not-woken",
        ),
        pytest.param(
            _p(2, True, "NotWokenFromZero"),
            _p(3, True, "NotWokenFromZero"),
            [("Normal", "DesiredReplicasIncreased", "desired replicas 2 → 3: reason for 3")],
            id="still-not-woken",
        ),
        pytest.param(
            None,
            Published(None, "", False, "InvalidSpec", "minReplicas > maxReplicas"),
            [("Warning", "InvalidSpec", "minReplicas > maxReplicas")],
            id="invalid-spec",
        ),
        pytest.param(
            Published(None, "", False, "InvalidSpec", "bad"),
            _p(1, True, "OptimizationSucceeded"),
            [("Normal", "DesiredReplicasSet", "desired replicas 1: reason for 1")],
            id="fixed-spec-is-no-fallback-end",
        ),
        pytest.param(_p(2), Published(2, "another reason text", True, "SaturationOnlyMode"), [], id="text-only"),
    ],
)
def test_transition_events(before: Published | None, after: Published, expected: list[tuple[str, str, str]]) -> None:
    assert [(e.type, e.reason, e.note) for e in transition_events(before, after)] == expected


def test_published_reads_the_status() -> None:
    status = VariantStatus(
        desired=DesiredAlloc(3, "scale-up", T0, T0, "L4"),
        conditions=(Condition(ConditionType.OPTIMIZATION_READY, True, "LimitedByGpus", "limited: 2 GPUs"),),
    )
    assert published(status) == Published(3, "scale-up", True, "LimitedByGpus", "limited: 2 GPUs")
    assert published(VariantStatus()) is None
    assert published(None) is None


# ---- the recorder -----------------------------------------------------------------------------------------


@dataclass
class Clocks:
    wall_s: float = T0
    mono_s: float = 100.0

    def advance(self, seconds: float) -> None:
        self.wall_s += seconds
        self.mono_s += seconds


@dataclass
class MemorySink:
    events: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    fail: list[KubeError] = field(default_factory=list)
    """Raised by the next calls, one per call."""

    def _maybe_fail(self) -> None:
        if self.fail:
            raise self.fail.pop(0)

    async def create(self, namespace: str, body: Mapping[str, Any]) -> None:
        self.calls.append(("create", body["metadata"]["name"]))
        self._maybe_fail()
        self.events[(namespace, body["metadata"]["name"])] = dict(body)

    async def patch(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        self.calls.append(("patch", name))
        self._maybe_fail()
        if (namespace, name) not in self.events:
            raise KubeNotFound(f"events {namespace}/{name}")
        self.events[(namespace, name)].update(body)


def _recorder(sink: MemorySink, clocks: Clocks, **kwargs: Any) -> EventRecorder:
    return EventRecorder(sink, instance="wva-adapter-pod-0", clock=lambda: clocks.wall_s,
                         monotonic=lambda: clocks.mono_s, **kwargs)  # fmt: skip


def _record(recorder: EventRecorder, regarding: ObjectRef = VA, note: str = "desired replicas 1 → 2: x") -> None:
    recorder.record(regarding, type="Normal", reason="DesiredReplicasIncreased", note=note)


async def test_one_event_is_created_with_the_api_fields() -> None:
    sink, clocks = MemorySink(), Clocks()
    recorder = _recorder(sink, clocks)
    _record(recorder)
    await recorder.flush()
    [(_, name)] = sink.calls
    body = sink.events[("llm", name)]
    assert name == f"llama-8b-l4.{int(T0 * 1e9):x}"
    assert body == {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "llm"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "llm-d.ai/wva-adapter",
        "reportingInstance": "wva-adapter-pod-0",
        "action": "Decide",
        "reason": "DesiredReplicasIncreased",
        "type": "Normal",
        "regarding": {
            "apiVersion": "llmd.ai/v1alpha1",
            "kind": "VariantAutoscaling",
            "namespace": "llm",
            "name": "llama-8b-l4",
            "uid": "uid-1",
        },
        "note": "desired replicas 1 → 2: x",
    }
    assert recorder.stats.created == 1


async def test_repeats_become_a_series_written_at_start_refresh_and_finish() -> None:
    """client-go tools/events: the 2nd occurrence patches series.count=2 at once, later ones count in memory,
    written when the series is refreshed (30 min) and when it ends (6 min without a repeat)."""
    sink, clocks = MemorySink(), Clocks()
    recorder = _recorder(sink, clocks)
    _record(recorder)
    await recorder.flush()
    clocks.advance(10)
    _record(recorder)
    await recorder.flush()
    name = sink.calls[0][1]
    assert sink.calls == [("create", name), ("patch", name)]
    assert sink.events[("llm", name)]["series"] == {"count": 2, "lastObservedTime": "2026-01-01T00:00:10.000000Z"}
    for _ in range(8):  # repeats every 60 s for 8 min: nothing written
        clocks.advance(60)
        _record(recorder)
        await recorder.flush()
        recorder.sweep()
        await recorder.flush()
    assert len(sink.calls) == 2
    assert recorder.stats.aggregated == 8
    clocks.advance(1800 - 8 * 60)  # 30 min after the last write: refreshed, though still repeating
    _record(recorder)
    recorder.sweep()
    await recorder.flush()
    assert sink.calls[-1] == ("patch", name)
    assert sink.events[("llm", name)]["series"]["count"] == 11
    clocks.advance(359)
    recorder.sweep()
    await recorder.flush()
    assert len(sink.calls) == 3, "the series is still open"
    clocks.advance(1)
    _record(recorder, OTHER)  # unrelated, keeps the recorder busy
    recorder.sweep()
    await recorder.flush()
    assert [c for c in sink.calls if c[1] == name] == [("create", name), ("patch", name), ("patch", name)], (
        "the final count equals what was written: no extra write"
    )
    clocks.advance(1)
    _record(recorder)  # after the series ended: a new Event
    await recorder.flush()
    assert sink.calls[-1][0] == "create"
    assert sink.calls[-1][1] != name


async def test_a_series_with_unwritten_repeats_gets_its_final_count() -> None:
    sink, clocks = MemorySink(), Clocks()
    recorder = _recorder(sink, clocks)
    for _ in range(2):
        _record(recorder)
        clocks.advance(5)
    await recorder.flush()
    name = sink.calls[0][1]
    assert sink.events[("llm", name)]["series"] == {"count": 2, "lastObservedTime": "2026-01-01T00:00:05.000000Z"}
    for _ in range(2):
        _record(recorder)
        clocks.advance(5)
    recorder.sweep()
    await recorder.flush()
    assert sink.events[("llm", name)]["series"]["count"] == 2, "repeats 3 and 4 are counted, not written yet"
    clocks.advance(360)
    recorder.sweep()
    await recorder.flush()
    assert sink.events[("llm", name)]["series"] == {"count": 4, "lastObservedTime": "2026-01-01T00:00:15.000000Z"}
    assert recorder.stats.series_patches == 2


async def test_different_notes_are_different_events() -> None:
    """A note cannot change once written, so "2 → 3" and "3 → 4" never share a series."""
    sink, clocks = MemorySink(), Clocks()
    recorder = _recorder(sink, clocks)
    _record(recorder, note="desired replicas 2 → 3: x")
    _record(recorder, note="desired replicas 3 → 4: x")
    await recorder.flush()
    assert [c[0] for c in sink.calls] == ["create", "create"]
    assert sorted(e["note"] for e in sink.events.values()) == ["desired replicas 2 → 3: x", "desired replicas 3 → 4: x"]


async def test_flapping_is_rate_limited_per_object() -> None:
    """Burst 25, then one new Event per 5 min per VA; another VA has its own bucket."""
    sink, clocks = MemorySink(), Clocks()
    recorder = _recorder(sink, clocks)
    for i in range(40):
        _record(recorder, note=f"desired replicas {i} → {i + 1}: x")
    _record(recorder, OTHER)
    await recorder.flush()
    assert recorder.stats.created == 26
    assert recorder.stats.rate_limited == 15
    clocks.advance(299)
    _record(recorder, note="desired replicas 100 → 101: x")
    assert recorder.stats.rate_limited == 16
    clocks.advance(1)
    _record(recorder, note="desired replicas 101 → 102: x")
    await recorder.flush()
    assert recorder.stats.created == 27


async def test_the_queue_is_bounded() -> None:
    sink, clocks = MemorySink(), Clocks()
    recorder = _recorder(sink, clocks, max_queued=3, burst=100)
    for i in range(5):
        _record(recorder, note=f"n{i}")
    assert recorder.stats.queue_full == 2
    await recorder.flush()
    assert recorder.stats.created == 3


async def test_the_writer_stops_when_cancelled_as_an_event_arrives() -> None:
    """A cancellation that lands in the same loop turn as a new Event must still end `run` (on 3.11,
    `asyncio.wait_for` returned the finished wait and swallowed the cancellation: the writer looped on
    and `serve` missed its shutdown budget)."""
    sink, clocks = MemorySink(), Clocks()
    recorder = _recorder(sink, clocks)
    writer = asyncio.create_task(recorder.run())
    for _ in range(3):
        await asyncio.sleep(0)  # the writer is now waiting for work
    _record(recorder)  # wakes the writer ...
    writer.cancel()  # ... in the same turn as the cancellation
    done, _ = await asyncio.wait({writer}, timeout=1.0)
    assert writer in done, "the writer ignored its cancellation"
    assert writer.cancelled()


async def test_transport_errors_are_retried_then_dropped() -> None:
    sink, clocks = MemorySink(), Clocks()
    recorder = _recorder(sink, clocks, max_attempts=3)
    sink.fail = [KubeUnavailable("connection refused"), KubeUnavailable("HTTP 503", status=503)]
    _record(recorder)
    for _ in range(3):
        await recorder.flush()
    assert recorder.stats.created == 1
    assert len(sink.calls) == 3
    sink.fail = [KubeUnavailable("down")] * 3
    _record(recorder, note="other")
    for _ in range(4):
        await recorder.flush()
    assert recorder.stats.failed == 1
    assert len(sink.calls) == 6


async def test_a_rejected_event_is_not_retried() -> None:
    sink, clocks = MemorySink(), Clocks()
    recorder = _recorder(sink, clocks)
    sink.fail = [KubeInvalid("Event is invalid: note: Too long", status=422)]
    _record(recorder)
    await recorder.flush()
    await recorder.flush()
    assert (len(sink.calls), recorder.stats.failed, recorder.stats.created) == (1, 1, 0)


async def test_a_series_whose_event_expired_is_created_again() -> None:
    sink, clocks = MemorySink(), Clocks()
    recorder = _recorder(sink, clocks)
    _record(recorder)
    await recorder.flush()
    sink.events.clear()  # the API's event TTL (1 h) removed it
    _record(recorder)
    await recorder.flush()
    assert [c[0] for c in sink.calls] == ["create", "patch", "create"]
    [event] = sink.events.values()
    assert event["series"]["count"] == 2


def test_a_long_note_is_cut_to_the_api_limit() -> None:
    sink, clocks = MemorySink(), Clocks()
    recorder = _recorder(sink, clocks)
    _record(recorder, note="é" * 2000)
    [write] = list(recorder._queue)
    note = write.cached.body["note"]
    assert len(note.encode("utf-8")) <= NOTE_MAX_BYTES
    assert note.endswith("…")


# ---- derived from status writes ---------------------------------------------------------------------------


@dataclass
class FakeWriter:
    """The inner StatusSink: `written` says what write() answers (False: nothing to send)."""

    written: bool = True
    calls: int = 0
    fail: Exception | None = None

    async def write(self, key: VariantKey, status: VariantStatus, *, current: VariantStatus | None) -> bool:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        return self.written


def _status(replicas: int, ready_reason: str = "SaturationOnlyMode", ready: bool = True) -> VariantStatus:
    return VariantStatus(
        desired=DesiredAlloc(replicas, f"decided {replicas}", T0, T0, "L4"),
        conditions=(Condition(ConditionType.OPTIMIZATION_READY, ready, ready_reason, f"msg {ready_reason}"),),
    )


def _events_of(recorder: EventRecorder) -> list[tuple[str, str]]:
    return [(w.cached.body["reason"], w.cached.body["note"]) for w in recorder._queue]


async def test_status_writes_record_what_changed_once() -> None:
    recorder, writer = _recorder(MemorySink(), Clocks()), FakeWriter()
    events = DecisionEvents(writer, recorder, uid_of=lambda _key: "uid-1")
    await events.write(KEY, _status(2), current=_status(1))
    assert _events_of(recorder) == [("DesiredReplicasIncreased", "desired replicas 1 → 2: decided 2")]
    # The next cycle, before the watch delivered our write: the cluster still shows 1; no second Event.
    await events.write(KEY, _status(2), current=_status(1))
    # After the watch caught up.
    await events.write(KEY, _status(2), current=_status(2))
    assert len(_events_of(recorder)) == 1
    assert recorder._queue[0].cached.body["regarding"]["uid"] == "uid-1"


async def test_a_new_leader_compares_with_what_its_predecessor_published() -> None:
    recorder = _recorder(MemorySink(), Clocks())
    events = DecisionEvents(FakeWriter(), recorder, uid_of=lambda _key: None)
    await events.write(KEY, _status(3), current=_status(3))  # the predecessor already published 3
    assert _events_of(recorder) == []
    await events.write(KEY, _status(3, "MetricsUnavailable", ready=False), current=_status(3))
    assert _events_of(recorder) == [("FallbackDecision", "MetricsUnavailable: msg MetricsUnavailable")]
    assert "uid" not in recorder._queue[0].cached.body["regarding"]


async def test_no_event_without_a_write() -> None:
    recorder = _recorder(MemorySink(), Clocks())
    events = DecisionEvents(FakeWriter(written=False), recorder, uid_of=lambda _key: "u")
    assert await events.write(KEY, _status(2), current=_status(1)) is False
    assert _events_of(recorder) == []
    failing = DecisionEvents(FakeWriter(fail=KubeError("409 after 4 attempts")), recorder, uid_of=lambda _key: "u")
    with pytest.raises(KubeError):
        await failing.write(KEY, _status(2), current=_status(1))
    assert _events_of(recorder) == []


def test_micro_time_format_parses_as_rfc3339() -> None:
    sink, clocks = MemorySink(), Clocks(wall_s=T0 + 0.123456)
    recorder = _recorder(sink, clocks)
    _record(recorder)
    stamp = recorder._queue[0].cached.body["eventTime"]
    assert stamp == "2026-01-01T00:00:00.123456Z"
    assert datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() == pytest.approx(T0 + 0.123456)


def test_planned_event_is_a_value() -> None:
    assert PlannedEvent("Normal", "R", "n") == PlannedEvent("Normal", "R", "n")
