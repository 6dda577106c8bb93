"""Cost-aware optimizer (seed 001; upstream research §4.1): buy required capacity cheapest-per-unit first.

Input is the analyzer's capacity signal in its own unit (tokens for the token-based analyzer, requests/s
for the queueing model): `required` capacity to add, or `spare` capacity that may be removed, plus each
variant's per-replica capacity and cost.

Scale-up (takes priority) walks variants by cost-efficiency `cost / per_replica_capacity`, cheapest per unit
first, adding `ceil(remaining / capacity)` replicas capped by maxReplicas, spilling the rest to the next
variant (with the GPU limiter on, `limiter.greedy_by_score` buys instead). Worked example: required 5000
tokens; variants A (cost 5, 2000 tok/replica → 0.0025/token) and B (cost 15, 8000 tok/replica →
0.001875/token): B first, ceil(5000/8000) = 1 replica of B.

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
from collections.abc import MutableMapping, Sequence

from adapter.domain.capacity import VariantSupply


def by_cost_efficiency(variants: Sequence[VariantSupply]) -> list[VariantSupply]:
    """Variants of known capacity, cheapest per unit of capacity first (ties: name)."""
    known = [v for v in variants if v.per_replica_capacity > 0]
    return sorted(known, key=lambda v: (v.cost / v.per_replica_capacity, v.name))


def scale_up(variants: Sequence[VariantSupply], targets: MutableMapping[str, int], required: float) -> float:
    """Add replicas for `required` capacity into `targets` (GPUs unlimited: with the limiter on, the fair share
    of `limiter.greedy_by_score` buys instead); returns the capacity left unmet (every variant at maxReplicas)."""
    remaining = required
    for v in by_cost_efficiency(variants):
        if remaining <= 0:
            break
        room = v.max_replicas - targets[v.name]
        if room <= 0:
            continue
        add = min(max(1, math.ceil(remaining / v.per_replica_capacity)), room)
        targets[v.name] += add
        remaining -= add * v.per_replica_capacity
    return max(0.0, remaining)


def scale_down(variants: Sequence[VariantSupply], targets: MutableMapping[str, int], spare: float) -> None:
    """Remove replicas worth at most `spare` capacity, most expensive variant first."""
    remaining = spare
    known = [v for v in variants if v.per_replica_capacity > 0]
    for v in sorted(known, key=lambda v: (v.cost, v.name), reverse=True):
        if remaining <= 0:
            break
        floor_replicas = v.min_replicas
        others_serving = any(targets[o.name] > 0 for o in variants if o.name != v.name)
        if not others_serving:
            floor_replicas = max(floor_replicas, 1)
        removable = targets[v.name] - floor_replicas
        take = min(math.floor(remaining / v.per_replica_capacity), removable)
        if take <= 0:
            continue
        targets[v.name] -= take
        remaining -= take * v.per_replica_capacity
