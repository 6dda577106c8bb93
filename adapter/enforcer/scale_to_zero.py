"""Scale-to-zero and the minimum-one rule (seed 001's enforcer stage).

    enabled  and no request over the retention window (count == 0, a real answer) → every variant to 0
    disabled and every target is 0                                               → the cheapest variant keeps 1
    any variant with minReplicas > 0                                             → scale-to-zero is skipped

A request count that could not be read (None) never counts as idle: an unanswered query is no evidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from adapter.config.configmaps import ScaleToZeroConfig
from adapter.domain.frozen import fast_init


@fast_init
@dataclass(frozen=True, slots=True)
class VariantBounds:
    name: str
    cost: float
    min_replicas: int
    max_replicas: int


@fast_init
@dataclass(frozen=True, slots=True)
class EnforcedTargets:
    targets: Mapping[str, int]
    applied: str | None = None
    """What the enforcer changed, in words; None when it left the targets alone."""


def cheapest(variants: Sequence[VariantBounds]) -> VariantBounds:
    """Lowest cost (a cost <= 0 counts as upstream's default 10), ties to the alphabetically first name."""
    return min(variants, key=lambda v: (v.cost if v.cost > 0 else 10.0, v.name))


def enforce(
    targets: Mapping[str, int],
    *,
    variants: Sequence[VariantBounds],
    request_count: float | None,
    cfg: ScaleToZeroConfig,
) -> EnforcedTargets:
    if not variants:
        return EnforcedTargets(dict(targets))
    out = dict(targets)
    if any(v.min_replicas > 0 for v in variants):
        return EnforcedTargets(out)
    if cfg.enabled:
        if request_count is not None and request_count == 0:
            return EnforcedTargets(
                {v.name: 0 for v in variants},
                f"scale-to-zero: no requests in the last {cfg.retention_text}",
            )
        return EnforcedTargets(out)
    if sum(out.get(v.name, 0) for v in variants) == 0:
        keep = cheapest(variants)
        out = {v.name: 0 for v in variants}
        out[keep.name] = 1
        return EnforcedTargets(out, f"minimum one replica on the cheapest variant {keep.name} (scale-to-zero off)")
    return EnforcedTargets(out)
