"""Cost-aware optimizer (seed 001; upstream research §4.1): one model at a time, unlimited GPUs.

Input is the analyzer's capacity signal in its own unit (tokens for the token-based analyzer, requests/s
for the queueing model): `required` capacity to add, or `spare` capacity that may be removed, plus each
variant's per-replica capacity and cost.

Scale-up (takes priority) walks variants by cost-efficiency `cost / per_replica_capacity`, cheapest per unit
first, adding `ceil(remaining / capacity)` replicas capped by maxReplicas and spilling the rest to the next
variant. Worked example: required 5000 tokens; variants A (cost 5, 2000 tok/replica → 0.0025/token) and
B (cost 15, 8000 tok/replica → 0.001875/token): B first, ceil(5000/8000) = 1 replica of B.

Scale-down walks variants by absolute cost, most expensive first, removing `floor(remaining / capacity)`
replicas down to minReplicas; the last variant still serving keeps one replica (going to zero is the
enforcer's decision, made on evidence of no traffic, never the optimizer's).

Where we differ from upstream (docs/deviations.md): ties are broken by name, not by an unstable sort, so
the result never depends on input order; a variant with unknown capacity (no metrics, capacity <= 0) is
never chosen and never counted as free (upstream gave it cost 0, making it the "cheapest"); upstream protects
only the cheapest variant at one replica, so when only an expensive variant serves it can empty the model and
the enforcer then cold-starts the cheapest one; we keep the last serving variant at one instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class VariantCapacity:
    name: str
    cost: float
    """Cost of one replica per hour."""
    per_replica_capacity: float
    """Capacity one replica adds, in the analyzer's unit; <= 0 means unknown."""
    current_replicas: int
    min_replicas: int = 0
    max_replicas: int = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ScalingRequest:
    required: float
    """Capacity to add (> 0 means scale up)."""
    spare: float
    """Capacity that may be removed (> 0 means scale down, when nothing is required)."""
    variants: Sequence[VariantCapacity]


@dataclass(frozen=True, slots=True)
class Allocation:
    targets: Mapping[str, int]
    unmet: float
    """Required capacity no variant could take (every eligible variant at maxReplicas)."""


def optimize(request: ScalingRequest) -> Allocation:
    targets = {v.name: v.current_replicas for v in request.variants}
    if request.required > 0:
        return _scale_up(request, targets)
    if request.spare > 0:
        return _scale_down(request, targets)
    return Allocation(targets, 0.0)


def _scale_up(request: ScalingRequest, targets: dict[str, int]) -> Allocation:
    remaining = request.required
    known = [v for v in request.variants if v.per_replica_capacity > 0]
    for v in sorted(known, key=lambda v: (v.cost / v.per_replica_capacity, v.name)):
        if remaining <= 0:
            break
        room = v.max_replicas - targets[v.name]
        if room <= 0:
            continue
        add = min(max(1, math.ceil(remaining / v.per_replica_capacity)), room)
        targets[v.name] += add
        remaining -= add * v.per_replica_capacity
    return Allocation(targets, max(0.0, remaining))


def _scale_down(request: ScalingRequest, targets: dict[str, int]) -> Allocation:
    remaining = request.spare
    known = [v for v in request.variants if v.per_replica_capacity > 0]
    for v in sorted(known, key=lambda v: (v.cost, v.name), reverse=True):
        if remaining <= 0:
            break
        floor_replicas = v.min_replicas
        others_serving = any(targets[o.name] > 0 for o in request.variants if o.name != v.name)
        if not others_serving:
            floor_replicas = max(floor_replicas, 1)
        removable = targets[v.name] - floor_replicas
        take = min(math.floor(remaining / v.per_replica_capacity), removable)
        if take <= 0:
            continue
        targets[v.name] -= take
        remaining -= take * v.per_replica_capacity
    return Allocation(targets, 0.0)
