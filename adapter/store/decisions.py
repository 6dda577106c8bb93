"""DecisionStore: one writer (the reconciler or the status watcher), many readers (the servers).

Readers never block and never do I/O: a read is a dict lookup under a lock held for microseconds. Every
change bumps a store-wide `version` and calls the subscribed listeners with the keys that changed, so the
KEDA stream can push a change the moment it is published instead of polling.

The store is deliberately free of asyncio: listeners are plain callables, and the async servers bridge them
into their loop (`loop.call_soon_threadsafe`). That keeps it usable from replay, the simulator and tests.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from adapter.domain.decision import GpuPoolUsage, ModelAnalysis, VariantDecision
from adapter.domain.frozen import fast_init
from adapter.domain.ids import ModelKey, VariantKey

Listener = Callable[[frozenset[VariantKey]], None]


@fast_init
@dataclass(frozen=True, slots=True)
class StoredDecision:
    """A decision as served: what was decided, when, and the store version it arrived with."""

    decision: VariantDecision
    version: int
    decided_at_s: float
    """When the engine produced it (the cycle's `now`)."""
    changed_at_s: float
    """When the desired replica count last changed for this VA."""

    @property
    def key(self) -> VariantKey:
        return self.decision.key

    @property
    def desired_replicas(self) -> int:
        return self.decision.desired_replicas


@dataclass(frozen=True, slots=True)
class CycleFigures:
    """The leader's last cycle, per model and per GPU pool, for /metrics (followers have none)."""

    models: Mapping[ModelKey, ModelAnalysis]
    gpu_pools: Mapping[str, GpuPoolUsage]
    errors: Mapping[ModelKey, str]


EMPTY_FIGURES = CycleFigures({}, {}, {})


class DecisionReader(Protocol):
    """The read-only port the servers depend on."""

    @property
    def version(self) -> int: ...

    @property
    def writes(self) -> int:
        """Counts every write (a publish, an upsert, a removal), even one that only refreshes a decision's time
        and reason: what a reader's cache of rendered answers is valid for."""
        ...

    def get(self, key: VariantKey) -> StoredDecision | None: ...

    def list(self, namespace: str | None = None) -> list[StoredDecision]: ...

    def subscribe(self, listener: Listener) -> Callable[[], None]: ...

    @property
    def figures(self) -> CycleFigures: ...


class DecisionStore:
    """Thread-safe latest-decision-per-VA map. Implements DecisionReader."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[VariantKey, StoredDecision] = {}
        self._version = 0
        self._writes = 0
        self._listeners: builtins.list[Listener] = []
        self._figures = EMPTY_FIGURES

    @property
    def version(self) -> int:
        return self._version

    @property
    def writes(self) -> int:
        return self._writes

    @property
    def figures(self) -> CycleFigures:
        return self._figures

    def publish_figures(self, figures: CycleFigures) -> None:
        """Replace the per-model and per-pool figures (one reference swap: readers see old or new, whole)."""
        self._figures = figures

    def get(self, key: VariantKey) -> StoredDecision | None:
        return self._entries.get(key)

    def list(self, namespace: str | None = None) -> builtins.list[StoredDecision]:
        entries = list(self._entries.values())
        if namespace is not None:
            entries = [e for e in entries if e.key.namespace == namespace]
        return sorted(entries, key=lambda e: e.key)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(changed_keys)` after every change; returns the function that unsubscribes."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def publish(self, decisions: Mapping[VariantKey, VariantDecision], *, now_s: float) -> frozenset[VariantKey]:
        """Replace the whole set: VAs absent from `decisions` are removed (a deleted VA stops being served).

        Returns the keys whose served values changed (added, removed, or different desired/current).
        """
        with self._lock:
            self._writes += 1
            changed = set(self._entries) - set(decisions)
            for key in changed:
                del self._entries[key]
                self._version += 1
            for key, decision in decisions.items():
                if self._put(key, decision, now_s):
                    changed.add(key)
            listeners = list(self._listeners)
        return self._notify(frozenset(changed), listeners)

    def upsert(self, decisions: Iterable[VariantDecision], *, now_s: float) -> frozenset[VariantKey]:
        """Add or replace some decisions, leaving the rest (scale-from-zero publishes one VA at once)."""
        with self._lock:
            self._writes += 1
            changed = {d.key for d in decisions if self._put(d.key, d, now_s)}
            listeners = list(self._listeners)
        return self._notify(frozenset(changed), listeners)

    def remove(self, key: VariantKey) -> bool:
        with self._lock:
            if self._entries.pop(key, None) is None:
                return False
            self._writes += 1
            self._version += 1
            listeners = list(self._listeners)
        self._notify(frozenset({key}), listeners)
        return True

    def _put(self, key: VariantKey, decision: VariantDecision, now_s: float) -> bool:
        old = self._entries.get(key)
        same_value = old is not None and (
            old.decision.desired_replicas,
            old.decision.current_replicas,
            old.decision.accelerator,
        ) == (decision.desired_replicas, decision.current_replicas, decision.accelerator)
        if old is not None and same_value:
            # Refresh the evidence (reason, time) without announcing a change.
            self._entries[key] = StoredDecision(decision, old.version, now_s, old.changed_at_s)
            return False
        self._version += 1
        changed_at = now_s
        if old is not None and old.decision.desired_replicas == decision.desired_replicas:
            changed_at = old.changed_at_s
        self._entries[key] = StoredDecision(decision, self._version, now_s, changed_at)
        return True

    @staticmethod
    def _notify(changed: frozenset[VariantKey], listeners: builtins.list[Listener]) -> frozenset[VariantKey]:
        if changed:
            for listener in listeners:
                listener(changed)
        return changed
