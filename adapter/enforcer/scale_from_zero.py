"""Scale-from-zero (seed 001): wake a model whose every variant is at zero when its EPP queue holds requests.

    every variant of the model at 0 replicas  and  EPP flow-control queue > 0
        → the cheapest variant (that may run at least one replica) gets 1; the others stay at 0

Upstream scales *every* variant of the model to 1 (a TODO says "choose the lowest cost"); we wake only the
cheapest, which is what the rest of the pipeline would have chosen, and let the saturation analyzer add
capacity once the first replica reports metrics. A model with any variant still running is left alone:
the EPP routes to that variant, so there is nothing to wake.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from adapter.domain.snapshot import VariantView
from adapter.enforcer.scale_to_zero import VariantBounds, cheapest

WAKE_REASON = "scalefromzero mode: pending request - scale-up"


@dataclass(frozen=True, slots=True)
class Wake:
    variant: str
    reason: str


def is_idle(views: Sequence[VariantView]) -> bool:
    """True when no variant of the model has (or is asked to have) a replica."""
    for view in views:
        target = view.target
        if target is None:
            continue
        spec = 1 if target.spec_replicas is None else target.spec_replicas
        if spec > 0 or target.replicas > 0:
            return False
    return any(view.target is not None for view in views)


def wake(views: Sequence[VariantView], *, queue_size: float | None) -> Wake | None:
    """The variant to wake, or None. `queue_size` None (EPP not reachable) never wakes anything."""
    if queue_size is None or queue_size <= 0 or not is_idle(views):
        return None
    candidates = [
        VariantBounds(v.key.name, v.spec.cost, v.spec.min_replicas, v.spec.max_replicas)
        for v in views
        if v.target is not None and v.spec.max_replicas >= 1
    ]
    if not candidates:
        return None
    pick = cheapest(candidates)
    return Wake(pick.name, f"{WAKE_REASON} (EPP queue holds {queue_size:g} requests)")
