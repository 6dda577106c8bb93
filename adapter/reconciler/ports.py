"""What the reconciler needs from the edges. k8s/, metrics/ and servers/ satisfy these structurally."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from adapter.domain.cluster import ClusterView, Collection, InferencePoolInfo, ModelQuery
from adapter.domain.decision import CycleResult, VariantDecision
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import Snapshot, VariantStatus
from adapter.engine import EngineState


class ClusterSource(Protocol):
    def view(self) -> ClusterView: ...


class MetricsSource(Protocol):
    async def collect(
        self, models: Sequence[ModelQuery], pod_variants: Mapping[tuple[str, str], str]
    ) -> Collection: ...


class EppSource(Protocol):
    async def queue_sizes(self, pools: Sequence[InferencePoolInfo]) -> dict[tuple[str, str], float]: ...


class StatusSink(Protocol):
    async def write(self, key: VariantKey, status: VariantStatus, *, current: VariantStatus | None) -> bool: ...


class Leadership(Protocol):
    @property
    def is_leader(self) -> bool: ...


class CycleObserver(Protocol):
    def record_cycle(
        self,
        *,
        duration_s: float,
        decisions: Mapping[VariantKey, VariantDecision],
        previous: Mapping[VariantKey, VariantDecision],
    ) -> None: ...

    def record_cycle_error(self, *, duration_s: float) -> None: ...

    def record_collection(
        self, *, duration_s: float, source: str = ..., ok: bool = ..., dropped: Mapping[str, int] | None = ...
    ) -> None: ...

    def record_rejected(self, *, kind: str, reason: str) -> None:
        """One outside object newly rejected (counted once per object and message, not per cycle)."""
        ...


class CycleRecorder(Protocol):
    """The flight recorder: save one decided cycle (returns at once; never raises, never fails the cycle)."""

    def record(
        self,
        snapshot: Snapshot,
        result: CycleResult,
        *,
        state_before: EngineState,
        configmaps: Iterable[tuple[str, str, Mapping[str, str]]],
    ) -> None: ...


class AlwaysLeader:
    """Leadership when `--leader-elect` is off: this replica computes and writes."""

    @property
    def is_leader(self) -> bool:
        return True
