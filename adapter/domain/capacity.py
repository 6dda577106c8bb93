"""The capacity signal: what every analyzer hands to the allocation step (seed 001's pipeline).

An analyzer never chooses replica counts for the token-based and queueing-model paths; it measures. Per
model it says how much capacity is *required* on top of what runs (> 0 means scale up), how much is
*spare* (> 0 means some may be removed), and, per variant, what one replica of it supplies, in the
analyzer's own unit: tokens for saturation-token-based, requests/s for the queueing model, replicas for
the percentage-based analyzer (whose ±1 rule picks its targets itself and hands them over as a
`proposal`). The allocation step then buys or releases capacity for all models at once, so that the
cheapest capacity is bought first and shared GPU pools are split fairly.

Worked example (token-based): two L4 replicas, each supplying min(k1, k2) = 12,000 tokens, carry a demand
of 22,000 tokens. Supply 24,000; `required = 22,000 / 0.85 - 24,000 = 1,882` tokens (> 0: scale up);
`spare = 24,000 - 22,000 / 0.70 = -7,429` (no scale-down). The optimizer then adds ceil(1,882 / 12,000) = 1
replica of whichever variant is cheapest per token.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from adapter.domain.accelerators import normalize_accelerator
from adapter.domain.decision import AnalyzerName
from adapter.domain.frozen import fast_init
from adapter.domain.ids import ModelKey
from adapter.domain.snapshot import NodeGpus, VariantView


class Role(StrEnum):
    """A variant's part in prefill/decode disaggregation (`llm-d.ai/role` label); BOTH when not split."""

    BOTH = "both"
    PREFILL = "prefill"
    DECODE = "decode"


class CapacityUnit(StrEnum):
    TOKENS = "tokens"
    REQUESTS_PER_S = "rps"
    REPLICAS = "replicas"


@fast_init
@dataclass(frozen=True, slots=True)
class VariantSupply:
    """One variant as the allocation step sees it."""

    name: str
    cost: float
    """Cost of one replica per hour (`spec.variantCost`)."""
    per_replica_capacity: float
    """What one replica supplies, in the signal's unit; <= 0 means unknown (never chosen, never free)."""
    current_replicas: int
    min_replicas: int = 0
    max_replicas: int = 2**31 - 1
    ready_replicas: int = 0
    pending_replicas: int = 0
    gpus_per_replica: int = 1
    accelerator: str = ""
    """Normalised accelerator type (see adapter.optimizer.accelerators); "" = unknown pool."""
    role: Role = Role.BOTH
    demand: float = 0.0
    """Demand attributed to this variant's replicas, in the signal's unit."""


def supply_of(
    view: VariantView, *, per_replica_capacity: float, demand: float = 0.0, role: Role = Role.BOTH
) -> VariantSupply:
    """A variant as the allocation step sees it: bounds and cost from its VA, replicas (ready = current −
    pending) and GPUs from its scale target (none found: 0 replicas, 1 GPU), its pool's normalised name."""
    target = view.target
    current = target.replicas if target else 0
    pending = target.pending_replicas if target else 0
    return VariantSupply(
        name=view.key.name,
        cost=view.spec.cost,
        per_replica_capacity=per_replica_capacity,
        current_replicas=current,
        min_replicas=view.spec.min_replicas,
        max_replicas=view.spec.max_replicas,
        ready_replicas=max(0, current - pending),
        pending_replicas=pending,
        gpus_per_replica=max(1, target.gpus_per_replica) if target else 1,
        accelerator=normalize_accelerator(view.accelerator),
        role=role,
        demand=demand,
    )


@fast_init
@dataclass(frozen=True, slots=True)
class CapacitySignal:
    """One model's analysis, ready for allocation."""

    model: ModelKey
    analyzer: AnalyzerName
    unit: CapacityUnit
    required: float
    """Capacity to add (> 0: scale up)."""
    spare: float
    """Capacity that may be removed (> 0 and nothing required: scale down)."""
    variants: tuple[VariantSupply, ...]
    priority: float = 1.0
    """Model priority for the GPU limiter's fair share (ConfigMap `priority`)."""
    proposal: Mapping[str, int] | None = None
    """Targets chosen by the analyzer itself (percentage-based ±1 rule); the allocation step then only
    checks them against the GPUs available."""
    spare_fraction: float = 0.0
    """With a proposal: how much of the model's capacity is spare (V1: the average spare KV-cache fraction);
    the GPU limiter grants the most saturated model (lowest) first."""
    analysis: Mapping[str, Any] = field(default_factory=dict)
    """The DESIGN §3.2 `analysis` fields, as `replay` prints them."""
    roles: Mapping[Role, tuple[float, float]] | None = None
    """P/D disaggregation: (required, spare) per role; allocation then stays within each role's variants."""
    notes: tuple[str, ...] = ()
    """Facts the analyzer wants in the decision's notes (e.g. a replica it could not size)."""


@dataclass(frozen=True, slots=True)
class NoSignal:
    """An analyzer that could not measure this model this cycle, and why (the engine then holds or falls back)."""

    model: ModelKey
    analyzer: AnalyzerName
    reason: str
    analysis: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GpuPools:
    """The cluster's GPUs this cycle, per normalised accelerator (one pool per name, whether a node label, a
    nodeSelector or a VA label spelled it): what the nodes offer, and what the VAs' scale targets hold now.
    Computed once per cycle; the GPU limiter and the reported pool usage read the same numbers.

        used[pool] = Σ current replicas · GPUs per replica          free[pool] = max(0, allocatable − used)

    A variant whose accelerator is unknown ("") is in no pool."""

    allocatable: Mapping[str, int] = field(default_factory=dict)
    used: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, nodes: Iterable[NodeGpus], variants: Iterable[VariantView]) -> GpuPools:
        allocatable: dict[str, int] = {}
        for node in nodes:
            pool = normalize_accelerator(node.accelerator)
            if pool:
                allocatable[pool] = allocatable.get(pool, 0) + max(0, node.allocatable_gpus)
        used: dict[str, int] = {}
        for view in variants:
            pool = normalize_accelerator(view.accelerator)
            if pool:
                held = view.target.replicas * max(1, view.target.gpus_per_replica) if view.target else 0
                used[pool] = used.get(pool, 0) + held
        return cls(allocatable, used)

    @property
    def names(self) -> list[str]:
        """Every pool a node offers or a VA holds, sorted."""
        return sorted(set(self.allocatable) | set(self.used))

    def free(self) -> dict[str, int]:
        return {pool: max(0, self.allocatable.get(pool, 0) - self.used.get(pool, 0)) for pool in self.names}
