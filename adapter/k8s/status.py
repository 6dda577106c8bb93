"""Writing a VA's status: render `VariantStatus` to the CRD's JSON and PATCH `/status` only when it changed.

Concurrency. We send a JSON merge patch (RFC 7386) of `status` that carries `metadata.resourceVersion` —
controller-runtime's `MergeFromWithOptimisticLock`. The resourceVersion turns the patch into a
compare-and-swap: if anyone changed the VA since the version our patch was computed from, the API server
answers 409 and we re-read and recompute (bounded). Without it, a merge patch is last-writer-wins, and the
`lastTransitionTime`s we carry over would be computed from a status we never saw (e.g. two leaders during
a fail-over). A JSON patch with a `test` op could guard the same thing, but only field by field; the
resourceVersion guards the whole object in one step, and a merge patch lets us send only the difference
(fields we no longer set are sent as null, so the stored status becomes exactly what we rendered).

Idempotence. The base we diff against is what the API holds (the inventory's watched copy, or a GET).
When the rendered status equals it, nothing is sent and `write` returns False.

Conditions follow `meta.SetStatusCondition`: `lastTransitionTime` stays as stored while a condition's
status does not change; otherwise it is the condition's own time, or now. Reasons are made to match the
CRD's pattern (CamelCase, non-empty); messages are cut to the CRD's 32768 characters.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from adapter.config.va import condition_reason, status_to_dict
from adapter.domain.errors import KubeConflict
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import VariantStatus
from adapter.k8s.client import KubeClient
from adapter.k8s.resources import VARIANT_AUTOSCALINGS

__all__ = [
    "StatusLookup",
    "StatusWriter",
    "StoredStatus",
    "condition_reason",
    "merge_patch",
    "status_to_dict",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StoredStatus:
    """A VA's `status` as the API holds it, and the object's resourceVersion when it was read."""

    resource_version: str
    status: Mapping[str, Any]


StatusLookup = Callable[[VariantKey], StoredStatus | None]
"""Where the writer finds the current status without a request (the inventory's watched VAs)."""


def merge_patch(base: Mapping[str, Any], target: Mapping[str, Any]) -> dict[str, Any]:
    """The RFC 7386 merge patch that turns `base` into `target` (removed keys → null; lists whole)."""
    patch: dict[str, Any] = {}
    for key in base:
        if key not in target:
            patch[key] = None
    for key, value in target.items():
        old = base.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            nested = merge_patch(old, value)
            if nested:
                patch[key] = nested
        elif key not in base or old != value:
            patch[key] = value
    return patch


@dataclass(slots=True)
class WriterStats:
    writes: int = 0
    skipped: int = 0
    conflicts: int = 0
    reads: int = 0


class StatusWriter:
    """Implements the reconciler's `StatusSink`: `await writer.write(key, status, current=...)`.

    `lookup` (normally `Inventory.stored_status`) supplies the stored status and resourceVersion without a
    request; without it, or when it does not know the VA, the writer GETs it. `clock` gives wall-clock
    seconds for condition times. `max_attempts` bounds the re-read-and-retry loop on 409 Conflict.
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        lookup: StatusLookup | None = None,
        clock: Callable[[], float] = time.time,
        max_attempts: int = 4,
    ) -> None:
        self._client = client
        self._lookup = lookup
        self._clock = clock
        self._max_attempts = max(1, max_attempts)
        self._written: dict[VariantKey, tuple[str, StoredStatus]] = {}
        """Per VA: (resourceVersion we patched from, what the PATCH returned) — covers the moment between
        our write and the watch delivering it, so a quick second write does not start from a stale base."""
        self.stats = WriterStats()

    async def write(self, key: VariantKey, status: VariantStatus, *, current: VariantStatus | None) -> bool:
        """Make the VA's stored status equal the rendering of `status`. Returns False when it already was
        (nothing sent), True after a successful PATCH. Raises KubeConflict when still conflicting after
        `max_attempts` re-reads, KubeNotFound when the VA is gone, other KubeErrors as they come.

        `current` (what the caller last saw) is used only when neither the lookup nor our own last write
        knows the VA, to decide without a request that nothing changed."""
        base = self._known(key)
        if base is None and current is not None:
            seen = status_to_dict(current, now_s=self._clock())
            if status_to_dict(status, previous=seen, now_s=self._clock()) == seen:
                self.stats.skipped += 1
                return False
        for _attempt in range(self._max_attempts):
            if base is None:
                base = await self._read(key)
            target = status_to_dict(status, previous=base.status, now_s=self._clock())
            diff = merge_patch(base.status, target)
            if not diff:
                self.stats.skipped += 1
                return False
            body = {"metadata": {"resourceVersion": base.resource_version}, "status": diff}
            try:
                result = await self._client.patch_status(VARIANT_AUTOSCALINGS, key.name, body, namespace=key.namespace)
            except KubeConflict:
                self.stats.conflicts += 1
                log.debug("status of %s changed since resourceVersion %s; re-reading", key, base.resource_version)
                base = None
                continue
            self.stats.writes += 1
            self._written[key] = (base.resource_version, _stored(result))
            return True
        raise KubeConflict(f"status of {key}: still conflicting after {self._max_attempts} attempts")

    def _known(self, key: VariantKey) -> StoredStatus | None:
        watched = self._lookup(key) if self._lookup is not None else None
        mine = self._written.get(key)
        if mine is not None and (watched is None or watched.resource_version == mine[0]):
            return mine[1]  # the watch has not caught up with our own last write yet
        if mine is not None:
            del self._written[key]
        return watched

    async def _read(self, key: VariantKey) -> StoredStatus:
        self.stats.reads += 1
        return _stored(await self._client.get(VARIANT_AUTOSCALINGS, key.name, namespace=key.namespace))


def _stored(obj: Mapping[str, Any]) -> StoredStatus:
    metadata = obj.get("metadata") or {}
    status = obj.get("status")
    return StoredStatus(str(metadata.get("resourceVersion") or ""), status if isinstance(status, Mapping) else {})
