"""The fallback hierarchy of seed 002: what to decide when the optimizer has no solution for a model.

Two deliberate differences (docs/deviations.md #12): on a first run with the scale target *found* at 0 replicas
and scale-to-zero enabled, the last resort keeps 0 instead of the "safe default of 1"; scale-from-zero wakes it.
And when no variant of the model runs or is asked to, only its cheapest variant takes the safe default of 1
(`_safe_default_variant`); the others start at 0, the load handled by that one.

    1. optimizer solution  — `protect_zero` guards an optimizer/enforcer 0 with the retention period
    2. fallback allocation — this process decided the VA before: keep that intent until the retention
                             period since `lastUpdate` passes, then scenarios A/B/C
    3. last resort         — nothing decided in this process (new VA, or a restart or fail-over during an
                             outage): VA status and the scale target's replicas, with late-discovery and
                             first-run protection, then scenarios A/B/C after the retention period

    A  scale-to-zero on,  every variant minReplicas 0 → 0
    B  scale-to-zero off, every variant minReplicas 0 → cheapest 1, others 0
    C  some variant minReplicas > 0                   → each variant its minReplicas

The retention period is measured from `desiredOptimizedAlloc.lastUpdate`, which moves only when the replica
count or the reason's template changes, so "no metrics for >5m" really means five minutes without metrics.
Every path clamps to [minReplicas, maxReplicas]; the reason strings are seed 002's, verbatim.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from adapter.config.configmaps import ScaleToZeroConfig
from adapter.domain.frozen import fast_init
from adapter.domain.snapshot import DecisionPath, DesiredAlloc
from adapter.domain.timefmt import format_duration, format_duration_short
from adapter.enforcer.scale_to_zero import VariantBounds, cheapest

OPTIMIZER_REASON = "Optimizer solution: cost and latency optimized allocation"
FIRST_RUN_REASON = "First run: preserving current replicas for Prometheus discovery grace period"
FALLBACK_PRESERVE_REASON = "Fallback: preserving previous allocation (no optimizer solution)"
OTHERS_RUNNING_REASON = "Last resort: first run, other variants handling load, starting at 0"


@fast_init
@dataclass(frozen=True, slots=True)
class FallbackVariant:
    bounds: VariantBounds
    current_replicas: int
    target_resolved: bool
    previous: DesiredAlloc | None
    """The last allocation: from this process's memory (fallback) or from VA status (last resort)."""
    remembered: bool
    """True when `previous` is this process's own earlier decision (a fallback allocation exists)."""

    @property
    def name(self) -> str:
        return self.bounds.name


@fast_init
@dataclass(frozen=True, slots=True)
class Held:
    """A decision taken without an optimizer solution."""

    desired_replicas: int
    reason: str
    path: DecisionPath


def clamp(value: int, bounds: VariantBounds) -> int:
    return min(max(value, bounds.min_replicas), bounds.max_replicas)


def retention_exceeded(previous: DesiredAlloc | None, *, now_s: float, retention_s: float) -> bool:
    """True when a previous allocation exists and its lastUpdate is older than the retention period.

    A zero lastUpdate (first run) never exceeds: that is the first-run grace period.
    """
    if previous is None or previous.last_update_s is None:
        return False
    return now_s - previous.last_update_s > retention_s


def decide_without_solution(
    variants: Sequence[FallbackVariant],
    *,
    now_s: float,
    cfg: ScaleToZeroConfig,
) -> dict[str, Held]:
    """Paths 2 and 3 for every variant of one model (the optimizer did not run for it)."""
    all_min_zero = all(v.bounds.min_replicas == 0 for v in variants)
    cheapest_name = cheapest([v.bounds for v in variants]).name if variants else ""
    out: dict[str, Held] = {}
    for v in variants:
        exceeded = retention_exceeded(v.previous, now_s=now_s, retention_s=cfg.retention_period_s)
        if v.remembered and v.previous is not None:
            out[v.name] = (
                _scenario(v, cfg, all_min_zero, cheapest_name, DecisionPath.FALLBACK)
                if exceeded
                else _fallback_preserve(v)
            )
        else:
            out[v.name] = (
                _scenario(v, cfg, all_min_zero, cheapest_name, DecisionPath.LAST_RESORT)
                if exceeded
                else _last_resort(v, variants, cfg)
            )
    return out


def _fallback_preserve(v: FallbackVariant) -> Held:
    assert v.previous is not None
    baseline = v.current_replicas if v.previous.last_update_s is None else v.previous.num_replicas
    return Held(clamp(baseline, v.bounds), FALLBACK_PRESERVE_REASON, DecisionPath.FALLBACK)


def _last_resort(v: FallbackVariant, group: Sequence[FallbackVariant], cfg: ScaleToZeroConfig) -> Held:
    path = DecisionPath.LAST_RESORT
    prev = v.previous
    if prev is not None and v.current_replicas > prev.num_replicas:
        reason = (
            f"Last resort: deployment discovered late, using current={v.current_replicas} (was {prev.num_replicas})"
        )
        return Held(clamp(v.current_replicas, v.bounds), reason, path)
    if prev is not None:
        desired = clamp(prev.num_replicas, v.bounds)
        reason = (
            f"Last resort: maintaining controller intent: max(minReplicas={v.bounds.min_replicas}, "
            f"previousOptimized={prev.num_replicas}) = {desired}"
        )
        return Held(desired, reason, path)
    if v.current_replicas == 0 and v.bounds.min_replicas == 0:
        # "Running" includes a variant already asked to run (e.g. just woken by scale-from-zero).
        if any(o.name != v.name and (o.current_replicas > 0 or _intent(o) > 0) for o in group):
            return Held(0, OTHERS_RUNNING_REASON, path)
        if _deliberately_at_zero(v, cfg):
            # Ours: the target exists and is deliberately at zero, and scale-to-zero is on; waking it
            # is scale-from-zero's job, on a queued request.
            reason = "Last resort: first run, scale target is at 0 replicas and scale-to-zero is enabled"
            return Held(0, reason, path)
        first = _safe_default_variant(group, cfg)
        if first is not None and first.name != v.name:
            # Ours: the model's one safe replica goes to its cheapest variant, which then handles the load.
            return Held(0, OTHERS_RUNNING_REASON, path)
        reason = "Last resort: first run with current=0, using safe default of 1 (waiting for deployment discovery)"
        return Held(clamp(1, v.bounds), reason, path)
    desired = clamp(v.current_replicas, v.bounds)
    return Held(desired, f"Last resort: first run, using current deployment replicas={v.current_replicas}", path)


def _intent(v: FallbackVariant) -> int:
    return v.previous.num_replicas if v.previous is not None else 0


def _deliberately_at_zero(v: FallbackVariant, cfg: ScaleToZeroConfig) -> bool:
    return v.target_resolved and cfg.enabled


def _safe_default_variant(group: Sequence[FallbackVariant], cfg: ScaleToZeroConfig) -> FallbackVariant | None:
    """The one variant of a model that takes the first run's safe default of 1 when none runs or is asked to.

    Seed 002 gives every such variant 1 "unless other variants are handling load"; decided one VA at a time,
    every variant of a model found at zero starts (a model of four variants: four cold starts, for a load one
    replica of the cheapest meets until the analyzer has metrics). Decided per model, the cheapest candidate
    (a found target first: a replica of a Deployment not yet discovered may serve nothing) takes the 1 and the
    others count it as handling the load, as scenario B does after the retention period. Candidates: first run
    (no previous allocation), found at 0, minReplicas 0, not deliberately at zero (`_deliberately_at_zero`)."""
    candidates = [
        o
        for o in group
        if o.previous is None
        and o.current_replicas == 0
        and o.bounds.min_replicas == 0
        and not _deliberately_at_zero(o, cfg)
    ]
    if not candidates:
        return None
    found = [o for o in candidates if o.target_resolved] or candidates
    chosen = cheapest([o.bounds for o in found])
    return next(o for o in found if o.bounds is chosen)


def _scenario(
    v: FallbackVariant, cfg: ScaleToZeroConfig, all_min_zero: bool, cheapest_name: str, path: DecisionPath
) -> Held:
    period = format_duration_short(cfg.retention_period_s)
    fallback = path is DecisionPath.FALLBACK
    if all_min_zero and cfg.enabled:
        reason = (
            f"Fallback: scale-to-zero after retention period (no metrics for >{period})"
            if fallback
            else f"Last resort: retention period exceeded (>{period}), scale-to-zero enabled, scaling to 0"
        )
        return Held(0, reason, path)
    if all_min_zero:
        if v.name == cheapest_name:
            reason = (
                "Fallback: cheapest variant with 1 replica after retention period (no metrics, scaleToZero disabled)"
                if fallback
                else f"Last resort: retention period exceeded (>{period}), cheapest variant getting 1 replica "
                "(scaleToZero disabled)"
            )
            return Held(clamp(1, v.bounds), reason, path)
        reason = (
            "Fallback: non-cheapest variant scaled to 0 after retention period (no metrics, scaleToZero disabled)"
            if fallback
            else f"Last resort: retention period exceeded (>{period}), non-cheapest variant scaled to 0 "
            "(scaleToZero disabled)"
        )
        return Held(0, reason, path)
    minimum = v.bounds.min_replicas
    reason = (
        f"Fallback: using minReplicas={minimum} after retention period (no metrics for >{period})"
        if fallback
        else f"Last resort: retention period exceeded (>{period}), using minReplicas={minimum}"
    )
    return Held(clamp(minimum, v.bounds), reason, path)


def protect_zero(
    targets: Mapping[str, int],
    *,
    variants: Sequence[FallbackVariant],
    now_s: float,
    cfg: ScaleToZeroConfig,
    reasons: Mapping[str, str],
) -> dict[str, Held]:
    """Path 1's retention protection: an optimizer 0 is applied only once the retention period has passed.

    First run (no lastUpdate) keeps the current replicas; within the retention period the previous
    allocation is kept; after it, the 0 stands. Non-zero targets pass through with their reasons.
    """
    out: dict[str, Held] = {}
    for v in variants:
        if v.name not in targets:
            continue
        target = targets[v.name]
        reason = reasons.get(v.name, OPTIMIZER_REASON)
        prev = v.previous
        if target != 0 or (prev is not None and prev.num_replicas == 0):
            out[v.name] = Held(target, reason, DecisionPath.OPTIMIZER)
        elif prev is None or prev.last_update_s is None:
            out[v.name] = Held(clamp(v.current_replicas, v.bounds), FIRST_RUN_REASON, DecisionPath.OPTIMIZER)
        elif now_s - prev.last_update_s <= cfg.retention_period_s:
            elapsed = format_duration(now_s - prev.last_update_s)
            period = format_duration_short(cfg.retention_period_s)
            reason = (
                f"Optimizer returned 0 but retention period not exceeded ({elapsed} < {period}), preserving allocation"
            )
            out[v.name] = Held(clamp(prev.num_replicas, v.bounds), reason, DecisionPath.OPTIMIZER)
        else:
            out[v.name] = Held(0, reason, DecisionPath.OPTIMIZER)
    return out
