"""The recommender inside the pipeline (seed 004): after the analyzers measured, before allocation.

Per model with a capacity signal, every variant of known capacity gets one sample of the model's demand in
replicas of that variant (`Σ demand / per_replica_capacity`); its long history gives the recommendation the
VA status and `wva_recommended_replicas` show. With `scaleDownFloor: recommender` on the model, the
allocation may not remove capacity below the short history's lower bound: the signal's spare capacity is cut
to `supply − floor` (V1: a −1 proposal that would go below the floor is withdrawn).

History lives in engine memory and, every `checkpoint_interval_s`, in VA status (`learned.recommender`), which
a new leader reads back — the counterpart of the VPA's VerticalPodAutoscalerCheckpoint objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapter.domain.capacity import CapacitySignal
from adapter.domain.frozen import replace
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import Recommendation, VariantView
from adapter.engine.analyze import ModelPlan
from adapter.recommender.recommender import RecommenderConfig, VariantHistory, floor_replicas, recommend

LEARNED_SECTION = "recommender"
CONFIG = RecommenderConfig()


@dataclass(frozen=True, slots=True)
class Recommended:
    histories: Mapping[VariantKey, VariantHistory]
    recommendations: Mapping[VariantKey, Recommendation]
    learned: Mapping[VariantKey, Mapping[str, Any]]
    """`status.learned` sections to write this cycle (checkpoints that are due)."""
    notes: Mapping[VariantKey, str]


def _history(
    view: VariantView, memory: Mapping[VariantKey, VariantHistory], now_s: float
) -> tuple[VariantHistory, str]:
    remembered = memory.get(view.key)
    if remembered is not None:
        return remembered, ""
    section = view.status.learned.get(LEARNED_SECTION)
    if section is not None:
        try:
            return VariantHistory.restore(section, now_s=now_s), ""
        except ValueError as exc:
            return VariantHistory.new(CONFIG, now_s), f"recommender checkpoint unreadable ({exc}); history restarts"
    return VariantHistory.new(CONFIG, now_s), ""


def observe(plans: Mapping[Any, ModelPlan], memory: Mapping[VariantKey, VariantHistory], now_s: float) -> Recommended:
    histories: dict[VariantKey, VariantHistory] = {}
    recommendations: dict[VariantKey, Recommendation] = {}
    learned: dict[VariantKey, Mapping[str, Any]] = {}
    notes: dict[VariantKey, str] = {}
    for plan in plans.values():
        signal = plan.signal
        demand = sum(v.demand for v in signal.variants) if signal is not None else None
        capacity = {v.name: v.per_replica_capacity for v in signal.variants} if signal is not None else {}
        for view in plan.views:
            history, note = _history(view, memory, now_s)
            if note:
                notes[view.key] = note
            per_replica = capacity.get(view.key.name, 0.0)
            if demand is not None and per_replica > 0:
                history = history.observe(demand / per_replica, now_s)
            due = history.samples > 0 and (
                history.checkpointed_s is None or now_s - history.checkpointed_s >= CONFIG.checkpoint_interval_s
            )
            if due:
                learned[view.key] = {LEARNED_SECTION: history.checkpoint()}
                history = replace(history, checkpointed_s=now_s)
            histories[view.key] = history
            rec = recommend(history, CONFIG)
            if rec is not None:
                recommendations[view.key] = rec
    return Recommended(histories, recommendations, learned, notes)


def with_floor(plan: ModelPlan, histories: Mapping[VariantKey, VariantHistory]) -> CapacitySignal | None:
    """The plan's signal, with the scale-down floor applied when the model asks for it."""
    signal = plan.signal
    if signal is None or plan.saturation.scale_down_floor != "recommender":
        return signal
    floors = {v.key.name: floor_replicas(h, CONFIG) for v in plan.views if (h := histories.get(v.key)) is not None}
    if signal.proposal is not None:  # V1: withdraw a −1 that would go below the floor
        floor = max(floors.values(), default=0)
        proposal = dict(signal.proposal)
        if sum(proposal.values()) < floor:
            for v in signal.variants:
                proposal[v.name] = max(proposal[v.name], v.current_replicas)
        return replace(signal, proposal=proposal)
    floor_capacity = max(
        (floors.get(v.name, 0) * v.per_replica_capacity for v in signal.variants if v.per_replica_capacity > 0),
        default=0.0,
    )
    supply = sum(v.ready_replicas * v.per_replica_capacity for v in signal.variants if v.per_replica_capacity > 0)
    return replace(signal, spare=max(0.0, min(signal.spare, supply - floor_capacity)))
