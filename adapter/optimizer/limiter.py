"""The GPU limiter: scale-ups share the GPUs the cluster's nodes offer, per accelerator pool.

    free[pool] = max(0, Σ node allocatable GPUs of the pool - Σ current replicas · GPUs per replica)

(`adapter.domain.capacity.GpuPools`, computed once per cycle). Both sides use normalised accelerator names
(adapter.domain.accelerators), so `NVIDIA-A100-SXM4-80GB` on a node and `A100` on a VA are one pool. A variant
whose accelerator is unknown ("") is not limited (we cannot tell which pool it draws from; the decision says
so); a known accelerator that no node offers has 0 free.

Two allocation policies (seed 001):
- `greedy_by_saturation` for the percentage-based analyzer, whose ±1 proposals are granted in whole replicas,
  most saturated model first (lowest spare KV), then cheapest;
- `greedy_by_score` for capacity signals: a fair share across models. Each step gives ONE replica to the
  active model with the highest `priority · remaining / required` (the share of its need still unmet), on its
  cheapest-per-unit variant whose pool has room; a model whose need is met, or which no pool can serve, drops
  out. Worked example: models A and B, priority 1, each requiring 3 replicas' worth, 4 free GPUs of one pool,
  1 GPU per replica: A, B, A, B → each gets 2; neither takes the whole pool first.

Ours, not upstream's (docs/deviations.md): upstream's greedy-by-score subtracted capacity (tokens) from a score
and mixed units across models; ours compares unit-free fractions and moves one replica per step.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass

from adapter.domain.capacity import VariantSupply
from adapter.optimizer.cost_aware import by_cost_efficiency


@dataclass(frozen=True, slots=True)
class Proposal:
    """A ±1 proposal of the percentage-based analyzer for one variant."""

    key: tuple[str, str, str]
    """(namespace, model_id, variant), for a deterministic order."""
    variant: VariantSupply
    target: int
    spare_fraction: float
    """The model's spare capacity (`CapacitySignal.spare_fraction`): the most saturated model is served first."""


@dataclass(frozen=True, slots=True)
class Grant:
    target: int
    limited: str
    """Empty when granted in full; otherwise what the limiter did, with its numbers."""


def greedy_by_saturation(
    proposals: Sequence[Proposal], gpus_free: MutableMapping[str, int]
) -> dict[tuple[str, str, str], Grant]:
    """Scale-ups in whole replicas from the free GPUs: lowest spare fraction first, then cheapest, then key."""
    grants: dict[tuple[str, str, str], Grant] = {}
    ups = [p for p in proposals if p.target > p.variant.current_replicas]
    for p in sorted(ups, key=lambda p: (p.spare_fraction, p.variant.cost, p.key)):
        v = p.variant
        needed = min(p.target, v.max_replicas) - v.current_replicas
        gpr = max(1, v.gpus_per_replica)
        if not v.accelerator or v.accelerator not in gpus_free:
            grants[p.key] = Grant(p.target, "" if v.accelerator else "accelerator unknown; not limited")
            if v.accelerator and v.accelerator not in gpus_free:
                grants[p.key] = Grant(v.current_replicas, f"limited: no node offers {v.accelerator} GPUs")
            continue
        replicas = min(needed, gpus_free[v.accelerator] // gpr)
        gpus_free[v.accelerator] -= replicas * gpr
        target = v.current_replicas + replicas
        if replicas < needed:
            grants[p.key] = Grant(
                target,
                f"limited: allocated {replicas * gpr} {v.accelerator} GPUs for +{replicas} of +{needed} replicas",
            )
        else:
            grants[p.key] = Grant(target, "")
    return grants


@dataclass
class ShareRequest:
    """One model's (or one P/D role's) scale-up need, as the fair share sees it."""

    key: tuple[str, ...]
    variants: Sequence[VariantSupply]
    required: float
    priority: float
    targets: dict[str, int]
    remaining: float = 0.0

    def __post_init__(self) -> None:
        self.remaining = self.required


def greedy_by_score(requests: Sequence[ShareRequest], gpus_free: MutableMapping[str, int]) -> None:
    """Fair share of the free GPUs, one replica per step (see the module docstring). Mutates `targets`,
    `remaining` and `gpus_free`. Bounded: every step adds a replica within maxReplicas and a finite pool, or
    retires a request."""
    active = sorted((r for r in requests if r.required > 0), key=lambda r: r.key)
    while active:
        # max() keeps the first of equal scores, and `active` is in key order: ties go to the smaller key.
        pick = max(active, key=lambda r: r.priority * r.remaining / r.required)
        variant = _next_variant(pick, gpus_free)
        if variant is None:
            active.remove(pick)
            continue
        pick.targets[variant.name] += 1
        pick.remaining -= variant.per_replica_capacity
        if variant.accelerator in gpus_free:
            gpus_free[variant.accelerator] -= max(1, variant.gpus_per_replica)
        if pick.remaining <= 0:
            active.remove(pick)


def _next_variant(request: ShareRequest, gpus_free: Mapping[str, int]) -> VariantSupply | None:
    for v in by_cost_efficiency(request.variants):
        if request.targets[v.name] >= v.max_replicas:
            continue
        if v.accelerator in gpus_free and gpus_free[v.accelerator] < max(1, v.gpus_per_replica):
            continue
        return v
    return None
