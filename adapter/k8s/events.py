"""Kubernetes Events (`events.k8s.io/v1`) that say why a VariantAutoscaling's desired replicas changed.

`kubectl describe va NAME` lists them. Two parts:

`DecisionEvents` wraps the reconciler's status writer (its `StatusSink`): a VA's status is where a decision is
published, so the Events are derived from what a write changes there, compared with what the VA held before —
in the cluster (so a restarted or newly elected leader does not repeat what its predecessor reported) or, while
the watch has not delivered our own last write yet, with that write. Nothing is recorded for a cycle that
changes nothing, so a steady fleet writes no Events at all. What is reported:

| when | type | reason | note |
|---|---|---|---|
| a VA's first decision | Normal | `DesiredReplicasSet` | `desired replicas 2: <decision reason>` |
| the desired count rises | Normal | `DesiredReplicasIncreased` | `desired replicas 2 → 3: <decision reason>` |
| the desired count falls | Normal | `DesiredReplicasDecreased` | `desired replicas 3 → 2: <decision reason>` |
| OptimizationReady turns False (fallback) | Warning | `FallbackDecision` | `<condition reason>: <message>` |
| OptimizationReady turns True again | Normal | `FallbackEnded` | the condition's message |
| OptimizationReady becomes LimitedByGpus (scale-up limited by GPUs) | Warning | `LimitedByGpus` | the message |
| OptimizationReady becomes InvalidSpec | Warning | `InvalidSpec` | the message |
| OptimizationReady becomes NotWokenFromZero (adapter/engine/unwoken.py) | Warning | `NotWokenFromZero` | the message |

`EventRecorder` writes them as Kubernetes controllers do (client-go `tools/events`), so a flapping decision
cannot flood the API:

- An Event repeated while an earlier one of the same key is cached becomes a *series*: the second occurrence
  PATCHes `series {count: 2, lastObservedTime}` at once; later ones only count in memory, written every
  `refresh_s` (30 min) and once more when the series ends (`finish_s`, 6 min without a repeat). The key is
  client-go's (type, action, reason, reporting controller and instance, regarding, related) plus the note:
  client-go leaves the note out and keeps the first one, but a note is immutable once written, so a series
  would go on showing "2 → 3" for a later "3 → 4".
- New Events and series starts are rate-limited per regarding object by a token bucket (client-go's
  `record` spam filter: burst 25, one token per 5 min); what the bucket refuses is dropped and counted.
- The queue is bounded (1,000, as client-go's broadcaster); writes are retried on transport errors (a few
  times, spaced) and dropped with a log line when the API rejects them. Recording never blocks or fails a
  cycle: `record` only enqueues; `run` writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal, Protocol

from adapter.config import va
from adapter.domain.errors import AdapterError, KubeConflict, KubeNotFound
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import ConditionType, VariantStatus
from adapter.k8s.client import KubeClient, KubeUnavailable
from adapter.k8s.resources import EVENTS

__all__ = [
    "CONTROLLER",
    "DecisionEvents",
    "EventRecorder",
    "EventSink",
    "EventStats",
    "KubeEventSink",
    "ObjectRef",
    "PlannedEvent",
    "Published",
    "published",
    "transition_events",
]

log = logging.getLogger(__name__)

CONTROLLER: Final = "llm-d.ai/wva-adapter"
"""`reportingController` (a qualified name, as the API requires)."""
ACTION: Final = "Decide"
NOTE_MAX_BYTES: Final = 1024
"""The API refuses a note over 1 kB."""
EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """An Event's `regarding` (or `related`): an ObjectReference."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    def to_dict(self) -> dict[str, str]:
        ref = {"apiVersion": self.api_version, "kind": self.kind, "namespace": self.namespace, "name": self.name}
        if self.uid:
            ref["uid"] = self.uid
        return ref


def va_ref(key: VariantKey, uid: str | None) -> ObjectRef:
    return ObjectRef(f"{va.GROUP}/{va.VERSION}", va.KIND, key.namespace, key.name, uid or "")


# ---- what a status change is worth reporting ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Published:
    """The part of a VA's status Events are about: the desired count and the OptimizationReady condition."""

    replicas: int | None
    reason: str = ""
    ready: bool | None = None
    ready_reason: str = ""
    ready_message: str = ""

    def signature(self) -> tuple[int | None, bool | None, str]:
        """What must change for an Event: the count, or the condition's status or reason (not the texts, which
        quote numbers that move every cycle)."""
        return self.replicas, self.ready, self.ready_reason


def published(status: VariantStatus | None) -> Published | None:
    """None for a VA without a status (never decided)."""
    if status is None or (status.desired is None and not status.conditions):
        return None
    condition = status.condition(ConditionType.OPTIMIZATION_READY)
    return Published(
        replicas=status.desired.num_replicas if status.desired is not None else None,
        reason=status.desired.reason if status.desired is not None else "",
        ready=condition.status if condition is not None else None,
        ready_reason=condition.reason if condition is not None else "",
        ready_message=condition.message if condition is not None else "",
    )


@dataclass(frozen=True, slots=True)
class PlannedEvent:
    type: EventType
    reason: str
    note: str


def transition_events(before: Published | None, after: Published) -> list[PlannedEvent]:
    """The Events for one change of published status (table in the module docstring). Pure.

    >>> before = Published(2, "saturation-only mode: no-change", True, "SaturationOnlyMode")
    >>> after = Published(3, "saturation-only mode: scale-up (kv spare 0.05 < 0.10)", True, "SaturationOnlyMode")
    >>> [(e.reason, e.note) for e in transition_events(before, after)]
    [('DesiredReplicasIncreased', 'desired replicas 2 → 3: saturation-only mode: scale-up (kv spare 0.05 < 0.10)')]
    """
    events: list[PlannedEvent] = []
    old_replicas = before.replicas if before is not None else None
    if after.replicas is not None and after.replicas != old_replicas:
        if old_replicas is None:
            events.append(
                PlannedEvent("Normal", "DesiredReplicasSet", f"desired replicas {after.replicas}: {after.reason}")
            )
        else:
            reason = "DesiredReplicasIncreased" if after.replicas > old_replicas else "DesiredReplicasDecreased"
            note = f"desired replicas {old_replicas} → {after.replicas}: {after.reason}"
            events.append(PlannedEvent("Normal", reason, note))
    old_ready = (before.ready, before.ready_reason) if before is not None else (None, "")
    if after.ready is None or (after.ready, after.ready_reason) == old_ready:
        return events
    if after.ready is False and after.ready_reason == "InvalidSpec":
        events.append(PlannedEvent("Warning", "InvalidSpec", after.ready_message))
    elif after.ready is False and old_ready[0] is not False:
        events.append(PlannedEvent("Warning", "FallbackDecision", f"{after.ready_reason}: {after.ready_message}"))
    elif after.ready is True and old_ready[0] is False and old_ready[1] != "InvalidSpec":
        events.append(PlannedEvent("Normal", "FallbackEnded", after.ready_message))
    if after.ready is True and after.ready_reason in ("LimitedByGpus", "NotWokenFromZero"):
        events.append(PlannedEvent("Warning", after.ready_reason, after.ready_message))
    return events


# ---- the StatusSink wrapper --------------------------------------------------------------------------------


class StatusSink(Protocol):
    async def write(self, key: VariantKey, status: VariantStatus, *, current: VariantStatus | None) -> bool: ...


class DecisionEvents:
    """A `StatusSink` that writes through `inner` and records the Events of what each write changed.

    `uid_of(key)` names the VA's uid (the inventory's watched copy) so `kubectl describe` finds the Events.
    """

    def __init__(
        self, inner: StatusSink, recorder: EventRecorder, *, uid_of: Callable[[VariantKey], str | None]
    ) -> None:
        self._inner = inner
        self._recorder = recorder
        self._uid_of = uid_of
        self._mine: dict[VariantKey, tuple[Published | None, Published]] = {}
        """Per VA: (what the cluster held, what we wrote over it) at our last write."""

    def _baseline(self, key: VariantKey, current: Published | None) -> Published | None:
        mine = self._mine.get(key)
        if mine is not None and _same(current, mine[0]):
            return mine[1]  # the watch has not delivered our own last write yet
        return current

    async def write(self, key: VariantKey, status: VariantStatus, *, current: VariantStatus | None) -> bool:
        seen = published(current)
        before = self._baseline(key, seen)
        written = await self._inner.write(key, status, current=current)
        after = published(status)
        if after is None:
            return written
        self._mine[key] = (seen, after)
        if written:
            regarding = va_ref(key, self._uid_of(key))
            for event in transition_events(before, after):
                self._recorder.record(regarding, type=event.type, reason=event.reason, note=event.note)
        return written


def _same(a: Published | None, b: Published | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.signature() == b.signature()


# ---- writing Events ---------------------------------------------------------------------------------------


class EventSink(Protocol):
    """Where Events go (`KubeEventSink`; an in-memory one in tests)."""

    async def create(self, namespace: str, body: Mapping[str, Any]) -> None: ...

    async def patch(self, namespace: str, name: str, body: Mapping[str, Any]) -> None: ...


class KubeEventSink:
    """POST and merge-PATCH of `events.k8s.io/v1` Events (RBAC: `create`, `patch` on `events.k8s.io` events)."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    async def create(self, namespace: str, body: Mapping[str, Any]) -> None:
        await self._client.create(EVENTS, body, namespace=namespace)

    async def patch(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        await self._client.patch(EVENTS, name, body, namespace=namespace)


@dataclass(slots=True)
class EventStats:
    """Counters for tests and for our own /metrics."""

    created: int = 0
    series_patches: int = 0
    aggregated: int = 0
    """Repeats counted into a series without a write of their own."""
    rate_limited: int = 0
    queue_full: int = 0
    failed: int = 0


@dataclass(slots=True)
class _Cached:
    """A recorded Event and its series. `_m` times are monotonic, `_s` wall clock (what the API shows)."""

    body: dict[str, Any]
    namespace: str
    name: str
    first_m: float
    last_m: float
    last_observed_s: float
    count: int = 1
    written_count: int = 1
    written_m: float = 0.0


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at_s: float


@dataclass(slots=True)
class _Write:
    cached: _Cached
    series: bool
    attempts: int = 0


EventKey = tuple[str, str, str, ObjectRef, str]


def _micro_time(epoch_s: float) -> str:
    """metav1.MicroTime: RFC 3339 with microseconds, UTC."""
    return datetime.fromtimestamp(epoch_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _cut_note(note: str) -> str:
    data = note.encode("utf-8")
    if len(data) <= NOTE_MAX_BYTES:
        return note
    return data[: NOTE_MAX_BYTES - 4].decode("utf-8", errors="ignore") + "…"


@dataclass
class EventRecorder:
    """Records Events for `sink` (module docstring: series, rate limit, bounded queue, retries).

    `clock` is wall-clock seconds (eventTime, lastObservedTime), `monotonic` the clock of buckets, series
    windows and retries; both injected so tests run on virtual time. `record` is synchronous and cheap;
    `run()` is the writer task (run it until cancelled); `flush()` writes what is queued (tests).
    """

    sink: EventSink
    instance: str
    controller: str = CONTROLLER
    clock: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
    burst: int = 25
    refill_s: float = 300.0
    finish_s: float = 360.0
    refresh_s: float = 1800.0
    max_queued: int = 1000
    max_attempts: int = 3
    retry_s: float = 10.0
    stats: EventStats = field(default_factory=EventStats)
    _cache: dict[EventKey, _Cached] = field(default_factory=dict)
    _buckets: dict[ObjectRef, _Bucket] = field(default_factory=dict)
    _queue: deque[_Write] = field(default_factory=deque)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _last_nanos: int = 0

    def record(self, regarding: ObjectRef, *, type: EventType, reason: str, note: str) -> None:
        """Report one occurrence. Never raises, never blocks."""
        note = _cut_note(note)
        key: EventKey = (type, ACTION, reason, regarding, note)
        now_m = self.monotonic()
        cached = self._cache.get(key)
        if cached is not None:
            cached.count += 1
            cached.last_observed_s, cached.last_m = self.clock(), now_m
            if cached.count > 2:
                self.stats.aggregated += 1  # written by the next refresh or when the series finishes
                return
            if not self._take_token(regarding, now_m):
                cached.count -= 1
                return
            self._enqueue(_Write(cached, series=True))
            return
        if not self._take_token(regarding, now_m):
            return
        now_s = self.clock()
        # client-go names an Event <object>.<UnixNano hex>; a float clock repeats within a cycle, so never reuse one.
        self._last_nanos = max(int(now_s * 1e9), self._last_nanos + 1)
        name = f"{regarding.name}.{self._last_nanos:x}"
        body: dict[str, Any] = {
            "apiVersion": EVENTS.api_version,
            "kind": EVENTS.kind,
            "metadata": {"name": name, "namespace": regarding.namespace},
            "eventTime": _micro_time(now_s),
            "reportingController": self.controller,
            "reportingInstance": self.instance,
            "action": ACTION,
            "reason": reason,
            "type": type,
            "regarding": regarding.to_dict(),
            "note": note,
        }
        cached = _Cached(
            body, regarding.namespace, name, first_m=now_m, last_m=now_m, last_observed_s=now_s, written_m=now_m
        )
        self._cache[key] = cached
        self._enqueue(_Write(cached, series=False))

    def _take_token(self, regarding: ObjectRef, now_m: float) -> bool:
        bucket = self._buckets.get(regarding)
        if bucket is None:
            bucket = self._buckets[regarding] = _Bucket(float(self.burst), now_m)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now_m - bucket.at_s) / self.refill_s)
        bucket.at_s = now_m
        if bucket.tokens < 1.0:
            self.stats.rate_limited += 1
            log.debug("event for %s/%s dropped by the rate limit", regarding.namespace, regarding.name)
            return False
        bucket.tokens -= 1.0
        return True

    def _enqueue(self, write: _Write) -> None:
        if len(self._queue) >= self.max_queued:
            self.stats.queue_full += 1
            return
        self._queue.append(write)
        self._wake.set()

    # ---- the writer ----

    async def run(self) -> None:
        """Write queued Events and keep series current until cancelled. Never raises."""
        while True:
            try:
                await self.flush()
                self.sweep()
            except Exception:  # a bug here must not take serve down: Events are best effort
                log.exception("writing Events failed")
            self._wake.clear()
            # asyncio.timeout, not wait_for: on 3.11 wait_for returns a wait that finished in the same turn as a
            # cancellation and swallows the cancellation, and this loop has no other way out.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(self.retry_s, self.finish_s / 4)):
                    await self._wake.wait()

    async def flush(self) -> None:
        """Write everything queued now (a write whose transport failed is requeued up to `max_attempts`)."""
        retry: list[_Write] = []
        while self._queue:
            write = self._queue.popleft()
            if not await self._write(write):
                write.attempts += 1
                if write.attempts < self.max_attempts:
                    retry.append(write)
                else:
                    self.stats.failed += 1
                    log.warning("dropping Event %s/%s after %d attempts", write.cached.namespace, write.cached.name,
                                write.attempts)  # fmt: skip
        self._queue.extend(retry)

    def sweep(self) -> None:
        """Series housekeeping (client-go's finishSeries / refreshExistingEventSeries): write the count of a
        series that ended or has not been written for `refresh_s`; forget Events older than `finish_s`."""
        now_m = self.monotonic()
        for key, cached in list(self._cache.items()):
            if now_m - cached.last_m >= self.finish_s:
                if cached.count != cached.written_count:
                    self._enqueue(_Write(cached, series=True))  # the series' final count
                del self._cache[key]
            elif now_m - cached.written_m >= self.refresh_s and cached.count != cached.written_count:
                self._enqueue(_Write(cached, series=True))
        for ref, bucket in list(self._buckets.items()):
            if bucket.tokens + (now_m - bucket.at_s) / self.refill_s >= self.burst:
                del self._buckets[ref]  # full again: the same as no bucket

    async def _write(self, write: _Write) -> bool:
        """One write; False when it should be retried (no answer from the API)."""
        cached = write.cached
        try:
            if write.series:
                count = cached.count
                series = {"count": count, "lastObservedTime": _micro_time(cached.last_observed_s)}
                try:
                    await self.sink.patch(cached.namespace, cached.name, {"series": series})
                except KubeNotFound:
                    # Gone (Events expire, 1 h by default): create it again, with its series.
                    await self.sink.create(cached.namespace, {**cached.body, "series": series})
                cached.written_count = count
                cached.written_m = self.monotonic()
                self.stats.series_patches += 1
            else:
                await self.sink.create(cached.namespace, cached.body)
                self.stats.created += 1
        except KubeUnavailable as exc:
            log.info("writing Event %s/%s: %s (will retry)", cached.namespace, cached.name, exc)
            return False
        except KubeConflict:
            return True  # created twice in a race: it exists, which is what we wanted
        except AdapterError as exc:
            self.stats.failed += 1
            log.warning("Event %s/%s rejected, not retried: %s", cached.namespace, cached.name, exc)
        return True
