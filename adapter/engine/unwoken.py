"""A variant asked to leave zero replicas that nothing wakes: stop counting on it, say why, offer it again later.

The engine only publishes desired replicas; something else scales. KEDA wakes a target at zero (IsActive), and
so does an HPA with `minReplicas: 0` behind the HPAScaleToZero feature gate; a plain HPA does not — with the
target at 0 replicas it reports `ScalingDisabled` and never acts (Kubernetes' horizontal controller). Without
this module such a variant kept receiving the model's added capacity whenever it was the cheaper way to meet
the SLO, the published number grew cycle after cycle, and the variants that could scale stayed where they were:
a ramp whose A100 variant sat at zero behind a plain HPA drowned its one L40S replica
(examples/scenarios/zero-behind-hpa.yaml: 63–72 % attainment on seeds 0–2; 99.2–99.9 % with this module).

Per variant, each cycle (`advance`):

    target at 0 (spec and status) and this cycle asks ≥ 1 replica   → asked since the first such cycle
    asked for `WAKE_TIMEOUT_S` and still at 0                         → not woken: blocked until now + `RETRY_S`
    blocked                                                           → offered 0..0 to the allocation, with a note
                                                                        (and OptimizationReady `NotWokenFromZero`)
    the block runs out                                                → offered again (a fixed actuator wakes it)
    target above 0                                                    → forgotten

Worked example (30-s cycles): asked at t = 60 s, still at 0 at 150 s (90 s later) ⇒ blocked until 750 s; the
cycles from 180 s to 720 s allocate the model's capacity to its other variants; at 750 s it is offered again.

`WAKE_TIMEOUT_S` is generous against every actuator that can wake: KEDA polls every 30 s by default (`push`
acts within a second), an HPA syncs every 15 s. Pure: values in, values out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from adapter.analyzers import memory as state_json
from adapter.domain.capacity import CapacitySignal
from adapter.domain.decision import VariantDecision
from adapter.domain.ids import VARIANT_ORDER, VariantKey
from adapter.domain.snapshot import VariantView

WAKE_TIMEOUT_S = 90.0
"""How long a variant may be asked for replicas while its target stays at zero before it counts as not woken.
Only the scale target's spec has to move, not a pod become Ready: KEDA's default 30-s poll and one 30-s engine
cycle to see it leave 30 s to spare. Each second of it is a second in which the model's added capacity waits on
a variant that may never start: 180 s cost 2.4–3.1 points on zero-behind-hpa.yaml and 0.3–1.6 on a diurnal with
an H100 at zero behind a plain HPA (seeds 0–2; 13 scenarios with variants at zero, the others unchanged)."""
RETRY_S = 600.0
"""How long a variant that was not woken is left out of the allocation before it is offered again."""


@dataclass(frozen=True, slots=True)
class Unwoken:
    """One variant asked to leave zero replicas (module docstring)."""

    asked_since_s: float
    blocked_until_s: float | None = None
    """Set once it counts as not woken: until then the allocation offers it nothing."""


def blocked(state: Mapping[VariantKey, Unwoken], views: Iterable[VariantView], now_s: float) -> dict[str, Unwoken]:
    """The variants among `views` that are left out of this cycle's allocation, by name."""
    out: dict[str, Unwoken] = {}
    for view in views:
        entry = state.get(view.key)
        if entry is not None and entry.blocked_until_s is not None and now_s < entry.blocked_until_s:
            out[view.key.name] = entry
    return out


def restrict(signal: CapacitySignal, names: Mapping[str, Unwoken]) -> CapacitySignal:
    """`signal` with the named variants bounded to 0 replicas (and 0 in an analyzer's own proposal)."""
    if not names:
        return signal
    variants = tuple(replace(v, min_replicas=0, max_replicas=0) if v.name in names else v for v in signal.variants)
    proposal = signal.proposal
    if proposal is not None:
        proposal = {name: 0 if name in names else n for name, n in proposal.items()}
    return replace(signal, variants=variants, proposal=proposal)


def note(view: VariantView, entry: Unwoken, now_s: float) -> str:
    """Why the variant gets nothing this cycle, and what would wake it."""
    target = f"{view.spec.target_kind} {view.spec.target_name}"
    until = entry.blocked_until_s if entry.blocked_until_s is not None else now_s
    return (
        f"{view.key.name}: asked for replicas since {entry.asked_since_s:.0f}s but {target} stayed at 0 for "
        f"{WAKE_TIMEOUT_S:.0f}s: nothing scales it from zero (a plain HPA cannot — it needs minReplicas 0 with the "
        f"HPAScaleToZero feature gate — KEDA can); its share goes to the other variants until {until:.0f}s, "
        f"then it is offered again"
    )


def advance(
    state: Mapping[VariantKey, Unwoken],
    views: Iterable[VariantView],
    decisions: Mapping[VariantKey, VariantDecision],
    now_s: float,
) -> dict[VariantKey, Unwoken]:
    """The entries for the next cycle (module docstring), from this cycle's views and published decisions."""
    out: dict[VariantKey, Unwoken] = {}
    for view in views:
        target = view.target
        if target is None or target.replicas != 0 or target.spec_replicas != 0:
            continue
        entry = state.get(view.key)
        if entry is not None and entry.blocked_until_s is not None:
            if now_s < entry.blocked_until_s:
                out[view.key] = entry
            continue  # the block ran out: offered again, asked afresh
        decision = decisions.get(view.key)
        if decision is None or decision.desired_replicas < 1:
            continue
        since = entry.asked_since_s if entry is not None else now_s
        out[view.key] = Unwoken(since, now_s + RETRY_S if now_s - since >= WAKE_TIMEOUT_S else None)
    return out


# ---- JSON form: engine_state.unwoken = {"ns/va": {"asked_since_s": 60.0, "blocked_until_s": 840.0 | null}} ----


def to_json(state: Mapping[VariantKey, Unwoken]) -> dict[str, Any]:
    return {
        str(key): {"asked_since_s": entry.asked_since_s, "blocked_until_s": entry.blocked_until_s}
        for key, entry in sorted(state.items(), key=lambda item: VARIANT_ORDER(item[0]))
    }


def from_json(doc: Any, path: str) -> dict[VariantKey, Unwoken]:
    """The inverse of `to_json`; raises StateFormatError naming the JSON path."""
    out: dict[VariantKey, Unwoken] = {}
    for key, raw in state_json.obj(doc, path).items():
        where = f"{path}[{key[:60]!r}]"
        entry = state_json.obj(raw, where, {"asked_since_s", "blocked_until_s"})
        until = entry.get("blocked_until_s")
        out[state_json.variant_key(key, path)] = Unwoken(
            state_json.number(entry, "asked_since_s", where),
            None if until is None else state_json.number(entry, "blocked_until_s", where),
        )
    return out
