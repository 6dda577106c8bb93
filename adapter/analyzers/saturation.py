"""Saturation analyzer, percentage-based (V1), as seed 000 specifies it.

A replica is *saturated* when `kv_cache_usage >= kvCacheThreshold` or `queue_length >= queueLengthThreshold`.
Over the non-saturated replicas of the whole model we average the spare capacity

    spare_kv_i = kvCacheThreshold - kv_i          spare_queue_i = queueLengthThreshold - queue_i

and scale up when `avg_spare_kv < kvSpareTrigger` or `avg_spare_queue < queueSpareTrigger` (strict). Scale-down
is safe when at least 2 replicas are non-saturated and, after removing one of the N, the load redistributed
by the factor N/(N-1) still leaves `>=` the triggers. Worked example (thresholds 0.80/5, triggers 0.10/3),
four replicas at kv 0.2 and queue 0:

    avg_spare_kv = 0.6, avg_spare_queue = 5
    load_kv = 0.8 - 0.6 = 0.2 → 0.2 · 4/3 = 0.267 → remaining spare 0.533 >= 0.10
    load_q  = 5 - 5 = 0       → 0                → remaining spare 5     >= 3     → safe

Targets (`calculate_targets`) move one replica at a time: the cheapest variant without pending replicas
gains one, or the most expensive variant above one replica loses one (ties: alphabetically first for
up, last for down). The whole model is frozen while any variant is in transition (a previous desired not
yet reached, or pods not all reporting), so the analyzer never decides on half-started capacity.

Ours, not upstream's (docs/deviations.md): a transition that stays unapplied longer than
`transition_timeout_s` (an HPA tolerance band can swallow a ±1 step forever) stops blocking the model;
scale-up skips a variant already at maxReplicas and scale-down skips one at minReplicas, so the step goes to
the next eligible variant instead of being clamped away.

The analyzer (`ANALYZER`, adapter.analyzers.protocol) reads the model's usable pods, the previous allocation of
each variant (its pending transition) and its memory of pods not reporting, and hands the allocation step a
`proposal` — the ±1 targets — in replicas; the GPU limiter may only cut its scale-ups. Reasons are seed 000's
(`saturation-only mode: scale-up (KV spare (0.050 < 0.100) low)`); a held transition keeps the reason it was
decided with, so its `lastUpdate` measures how long the transition has been pending.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from adapter.analyzers import memory as state_json
from adapter.analyzers.protocol import Analysis, ModelInput, Unprepared
from adapter.config.configmaps import SaturationConfig
from adapter.domain.capacity import CapacitySignal, CapacityUnit, supply_of
from adapter.domain.decision import Action, AnalyzerName
from adapter.domain.frozen import fast_init
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import DesiredAlloc, PodMetrics, VariantView
from adapter.domain.timefmt import format_duration

LABEL = "saturation-only mode"
"""How reasons name this analyzer (upstream's words)."""


NotReporting = Mapping[VariantKey, "NotReportingSince"]
"""The analyzer's memory: since when each variant's pods have not all reported (`calculate_targets`)."""


@dataclass(frozen=True, slots=True)
class SaturationPercentage(Unprepared[SaturationConfig, NotReporting]):
    """The percentage-based analyzer (V1) as the engine calls it."""

    name: AnalyzerName = AnalyzerName.SATURATION_PERCENTAGE
    reads: frozenset[str] = frozenset({"kv_cache_usage", "queue_length"})

    @property
    def memory(self) -> NotReportingMemory:
        return NotReportingMemory()

    def configure(self, model: ModelInput) -> tuple[SaturationConfig, tuple[str, ...]]:
        return model.saturation, model.saturation_warnings

    def analyze(
        self, model: ModelInput, config: SaturationConfig, memory: NotReporting, now_s: float
    ) -> Analysis[NotReporting]:
        pods = model.all_pods()
        analysis = measure(pods, cfg=config, costs={v.key.name: v.spec.cost for v in model.views})
        states = {view.key.name: _replica_state(view, model.previous.get(view.key.name)) for view in model.views}
        namespace = model.model.namespace
        result = calculate_targets(
            analysis,
            list(states.values()),
            now_s=now_s,
            transition_timeout_s=config.transition_timeout_s,
            not_reporting={k.name: seen for k, seen in memory.items() if k.namespace == namespace},
            hold_reasons=model.hold_reasons,
        )
        proposal = dict(result.targets)
        for name, state in states.items():  # a variant without metrics holds its previous desired, else current
            if name not in proposal:
                prev = model.previous.get(name)
                proposal[name] = (
                    prev.num_replicas if prev is not None and prev.num_replicas > 0 else state.current_replicas
                )
        loads = {v.name: v.load_replicas for v in analysis.variants}
        signal = CapacitySignal(
            model=model.model,
            analyzer=AnalyzerName.SATURATION_PERCENTAGE,
            unit=CapacityUnit.REPLICAS,
            required=float(analysis.should_scale_up),
            spare=float(analysis.scale_down_safe),
            variants=tuple(
                supply_of(view, per_replica_capacity=1.0, demand=loads.get(view.key.name, 0.0)) for view in model.views
            ),
            priority=config.priority,
            proposal=proposal,
            spare_fraction=analysis.avg_spare_kv,
            analysis=analysis.as_dict(),
        )
        return Analysis.measured(
            signal,
            Wording(result, states, analysis.scale_up_reason, model.previous),
            notes=result.notes,
            held=result.block_reasons,
            memory={VariantKey(namespace, name): seen for name, seen in result.not_reporting.items()},
        )


def _replica_state(view: VariantView, previous: DesiredAlloc | None) -> VariantReplicaState:
    target = view.target
    return VariantReplicaState(
        name=view.key.name,
        cost=view.spec.cost,
        current_replicas=target.replicas if target else 0,
        desired_replicas=previous.num_replicas if previous else 0,
        pending_replicas=target.pending_replicas if target else 0,
        min_replicas=view.spec.min_replicas,
        max_replicas=view.spec.max_replicas,
        desired_since_s=previous.last_update_s if previous else None,
    )


@fast_init
@dataclass(frozen=True, slots=True)
class Wording:
    """Seed 000's reasons for the ±1 decisions, after the GPU limiter had its say."""

    result: TargetResult
    states: Mapping[str, VariantReplicaState]
    scale_up_reason: str
    previous: Mapping[str, DesiredAlloc | None]
    condition_reason: str = "SaturationOnlyMode"
    condition_prefix: str = "saturation-only decision: "

    def reasons(self, targets: Mapping[str, int], limited: Mapping[str, str], optimizer: str) -> dict[str, str]:
        del optimizer  # V1 proposes its own targets; no optimizer to name
        result = self.result
        reasons: dict[str, str] = {}
        for name, s in self.states.items():
            prev = self.previous.get(name)
            if name not in result.targets:
                reasons[name] = f"{LABEL}: holding {targets[name]} (no metrics from this variant's pods)"
                continue
            action = Action.of(target=targets[name], current=s.current_replicas)
            if result.blocked and prev is not None and targets[name] == prev.num_replicas and prev.reason:
                reasons[name] = prev.reason  # a held transition keeps its reason (and its lastUpdate)
            elif result.blocked:
                reasons[name] = f"{LABEL}: {action} (model in transition)"
            elif name == result.scaled and action is Action.SCALE_UP:
                reasons[name] = f"{LABEL}: {action} ({self.scale_up_reason})"
            elif name == result.scaled and name in limited:
                reasons[name] = f"{LABEL}: {action} ({self.scale_up_reason}; {limited[name]})"
            else:
                reasons[name] = f"{LABEL}: {action}"
        return reasons

    def enforced(self, action: Action, applied: str, optimizer: str) -> str:
        del optimizer  # V1 proposes its own targets; no optimizer to name
        return f"{LABEL}: {action} (enforced: {applied})"


@fast_init
@dataclass(frozen=True, slots=True)
class NotReportingMemory:
    """Only this cycle's observations carry over: a variant whose pods all report again is forgotten.

    JSON (`engine_state.not_reporting`): {"ns/va": {"current", "reporting", "since_s"}}."""

    section: str = "not_reporting"

    def empty(self) -> NotReporting:
        return {}

    def next(
        self, previous: NotReporting, updates: Sequence[NotReporting], *, decided: AbstractSet[VariantKey], now_s: float
    ) -> NotReporting:
        del previous, decided, now_s  # only what this cycle observed carries over
        merged: dict[VariantKey, NotReportingSince] = {}
        for update in updates:
            merged.update(update)
        return merged

    def to_json(self, memory: NotReporting) -> dict[str, Any]:
        return {
            str(k): {"current": n.current, "reporting": n.reporting, "since_s": n.since_s}
            for k, n in sorted(memory.items())
        }

    def from_json(self, doc: Any, path: str) -> NotReporting:
        out: dict[VariantKey, NotReportingSince] = {}
        for key, raw in state_json.obj(doc, path).items():
            where = f"{path}[{key!r}]"
            entry = state_json.obj(raw, where, {"current", "reporting", "since_s"})
            out[state_json.variant_key(key, path)] = NotReportingSince(
                state_json.count(entry, "current", where),
                state_json.count(entry, "reporting", where),
                state_json.number(entry, "since_s", where),
            )
        return out


# ---- seed 000: the analysis of the model's pods ---------------------------------------------------------------

MIN_NON_SATURATED_FOR_SCALE_DOWN = 2


@fast_init
@dataclass(frozen=True, slots=True)
class VariantSaturation:
    """Per-variant breakdown of the analysis."""

    name: str
    cost: float
    replica_count: int
    """Pods reporting metrics (upstream: 'ready replicas')."""
    non_saturated_count: int
    saturated_pods: tuple[str, ...]
    avg_spare_kv: float
    avg_spare_queue: float
    max_kv_cache_usage: float
    max_queue_length: float
    load_replicas: float = 0.0
    """The variant's demand in replicas' worth (what the recommender samples): each pod counts
    max(kv_cache_usage / kvCacheThreshold, queue_length / queueLengthThreshold), so a pod exactly at its
    saturation threshold is one replica of demand. Example (0.80 / 5): kv 0.4, queue 5 → max(0.5, 1.0) = 1.0.
    Summed in the same pass over the pods as the rest (one pass over 100,000 pods at 10,000 VAs, not two)."""


@fast_init
@dataclass(frozen=True, slots=True)
class SaturationAnalysis:
    total_replicas: int
    non_saturated_count: int
    avg_spare_kv: float
    avg_spare_queue: float
    should_scale_up: bool
    scale_down_safe: bool
    scale_up_reason: str
    variants: tuple[VariantSaturation, ...]

    def as_dict(self) -> dict[str, object]:
        """The `analysis` object of a replay result (DESIGN §3.2)."""
        return {
            "total_replicas": self.total_replicas,
            "non_saturated_count": self.non_saturated_count,
            "avg_spare_kv": round(self.avg_spare_kv, 6),
            "avg_spare_queue": round(self.avg_spare_queue, 6),
            "should_scale_up": self.should_scale_up,
            "scale_down_safe": self.scale_down_safe,
        }


def measure(pods: Iterable[PodMetrics], *, cfg: SaturationConfig, costs: Mapping[str, float]) -> SaturationAnalysis:
    """Analyse the model's reporting pods. `pods` must hold only finite, non-negative kv/queue values."""
    by_variant: dict[str, list[PodMetrics]] = {}
    for pod in pods:
        by_variant.setdefault(pod.variant, []).append(pod)

    variants: list[VariantSaturation] = []
    sum_spare_kv = sum_spare_queue = 0.0
    non_saturated_total = 0
    kv_threshold, queue_threshold = cfg.kv_cache_threshold, cfg.queue_length_threshold
    by_pod = attrgetter("pod")
    for name in sorted(by_variant):
        members = sorted(by_variant[name], key=by_pod)
        saturated: list[str] = []
        spare_kv = spare_queue = 0.0
        max_kv = max_queue = load = 0.0
        for pod in members:  # 100,000 pods at 10,000 VAs: locals and comparisons, no max() call
            kv, queue = pod.kv_cache_usage or 0.0, pod.queue_length or 0.0  # missing counts 0, as upstream
            kv_load = kv / kv_threshold if kv_threshold > 0 else 0.0
            queue_load = queue / queue_threshold if queue_threshold > 0 else 0.0
            load += kv_load if kv_load >= queue_load else queue_load
            if kv > max_kv:  # noqa: PLR1730 (a max() call per pod costs ~20 ms a cycle at 10,000 VAs)
                max_kv = kv
            if queue > max_queue:  # noqa: PLR1730
                max_queue = queue
            if kv >= kv_threshold or queue >= queue_threshold:
                saturated.append(pod.pod)
                continue
            spare_kv += kv_threshold - kv
            spare_queue += queue_threshold - queue
        non_saturated = len(members) - len(saturated)
        non_saturated_total += non_saturated
        sum_spare_kv += spare_kv
        sum_spare_queue += spare_queue
        variants.append(
            VariantSaturation(
                name=name,
                cost=costs.get(name, 0.0),
                replica_count=len(members),
                non_saturated_count=non_saturated,
                saturated_pods=tuple(saturated),
                avg_spare_kv=spare_kv / non_saturated if non_saturated else 0.0,
                avg_spare_queue=spare_queue / non_saturated if non_saturated else 0.0,
                max_kv_cache_usage=max_kv,
                max_queue_length=max_queue,
                load_replicas=load,
            )
        )

    avg_kv = sum_spare_kv / non_saturated_total if non_saturated_total else 0.0
    avg_queue = sum_spare_queue / non_saturated_total if non_saturated_total else 0.0
    kv_low = avg_kv < cfg.kv_spare_trigger
    queue_low = avg_queue < cfg.queue_spare_trigger
    total = sum(v.replica_count for v in variants)
    return SaturationAnalysis(
        total_replicas=total,
        non_saturated_count=non_saturated_total,
        avg_spare_kv=avg_kv,
        avg_spare_queue=avg_queue,
        should_scale_up=total > 0 and (kv_low or queue_low),
        scale_down_safe=_scale_down_safe(non_saturated_total, avg_kv, avg_queue, cfg),
        scale_up_reason=_scale_up_reason(kv_low, queue_low, avg_kv, avg_queue, cfg) if total else "",
        variants=tuple(variants),
    )


def _scale_down_safe(n: int, avg_kv: float, avg_queue: float, cfg: SaturationConfig) -> bool:
    if n < MIN_NON_SATURATED_FOR_SCALE_DOWN:
        return False
    factor = n / (n - 1)
    remaining_kv = cfg.kv_cache_threshold - (cfg.kv_cache_threshold - avg_kv) * factor
    remaining_queue = cfg.queue_length_threshold - (cfg.queue_length_threshold - avg_queue) * factor
    return remaining_kv >= cfg.kv_spare_trigger and remaining_queue >= cfg.queue_spare_trigger


def _scale_up_reason(kv_low: bool, queue_low: bool, kv: float, q: float, cfg: SaturationConfig) -> str:
    kv_text = f"KV spare ({kv:.3f} < {cfg.kv_spare_trigger:.3f})"
    q_text = f"queue spare ({q:.1f} < {cfg.queue_spare_trigger:.1f})"
    if kv_low and queue_low:
        return f"both {kv_text} and {q_text}"
    if kv_low:
        return f"{kv_text} low"
    if queue_low:
        return f"{q_text} low"
    return ""


# ---- targets ----------------------------------------------------------------------------------------------


@fast_init
@dataclass(frozen=True, slots=True)
class VariantReplicaState:
    """What the targets step needs to know about one variant besides its metrics."""

    name: str
    cost: float
    current_replicas: int
    desired_replicas: int
    """The previous decision (VA status); 0 = none."""
    pending_replicas: int
    min_replicas: int
    max_replicas: int
    desired_since_s: float | None = None
    """When the previous decision was made (status lastUpdate); None = unknown."""


@dataclass(frozen=True, slots=True)
class NotReportingSince:
    """First time we saw `reporting != current` for a variant, with the counts that were seen."""

    current: int
    reporting: int
    since_s: float


@fast_init
@dataclass(frozen=True, slots=True)
class TargetResult:
    targets: Mapping[str, int]
    """One target per variant that has metrics; variants without metrics are absent (no decision)."""
    blocked: bool
    block_reasons: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    scaled: str | None = None
    """The variant the ±1 step went to, if any."""
    not_reporting: Mapping[str, NotReportingSince] = field(default_factory=dict)


def calculate_targets(
    analysis: SaturationAnalysis,
    states: Sequence[VariantReplicaState],
    *,
    now_s: float,
    transition_timeout_s: float,
    not_reporting: Mapping[str, NotReportingSince],
    hold_reasons: Sequence[str] = (),
) -> TargetResult:
    """Seed 000's CalculateSaturationTargets with transition blocking, cascade prevention and bounds.

    `hold_reasons` block the model like a transition does (the engine passes one per variant whose samples
    were all invalid: its capacity is unknown, so no other variant may move on its behalf).
    """
    state_of = {s.name: s for s in states}
    analysed = [v for v in analysis.variants if v.name in state_of]
    if not analysed:
        return TargetResult(targets={}, blocked=False)

    block_reasons: list[str] = list(hold_reasons)
    notes: list[str] = []
    still_not_reporting: dict[str, NotReportingSince] = {}
    pending_desired: dict[str, int] = {}
    for v in analysed:
        s = state_of[v.name]
        if s.desired_replicas not in (0, s.current_replicas):
            age = None if s.desired_since_s is None else now_s - s.desired_since_s
            if age is not None and age >= transition_timeout_s:
                notes.append(
                    f"{v.name}: transition to {s.desired_replicas} not applied after {format_duration(age)} "
                    f"(current {s.current_replicas}); re-deciding from current"
                )
            else:
                pending_desired[v.name] = s.desired_replicas
                block_reasons.append(f"{v.name}: desired {s.desired_replicas} != current {s.current_replicas}")
        if v.replica_count != s.current_replicas:
            seen = not_reporting.get(v.name)
            if seen is None or (seen.current, seen.reporting) != (s.current_replicas, v.replica_count):
                seen = NotReportingSince(s.current_replicas, v.replica_count, now_s)
            still_not_reporting[v.name] = seen
            if now_s - seen.since_s >= transition_timeout_s:
                notes.append(
                    f"{v.name}: {v.replica_count} of {s.current_replicas} pods reporting for "
                    f"{format_duration(now_s - seen.since_s)}; deciding from the reporting pods"
                )
            else:
                block_reasons.append(f"{v.name}: {v.replica_count} of {s.current_replicas} pods reporting metrics")

    if block_reasons:
        targets = {v.name: pending_desired.get(v.name, state_of[v.name].current_replicas) for v in analysed}
        return TargetResult(targets, True, tuple(block_reasons), tuple(notes), None, still_not_reporting)

    targets = {v.name: v.replica_count for v in analysed}
    scaled: str | None = None
    if analysis.should_scale_up:
        eligible = [
            v
            for v in analysed
            if state_of[v.name].pending_replicas == 0 and targets[v.name] < state_of[v.name].max_replicas
        ]
        if eligible:
            pick = min(eligible, key=lambda v: (state_of[v.name].cost, v.name))
            targets[pick.name] += 1
            scaled = pick.name
        else:
            notes.append("scale-up needed but every variant has pending replicas or is at maxReplicas")
    elif analysis.scale_down_safe:
        eligible = [v for v in analysed if targets[v.name] > max(1, state_of[v.name].min_replicas)]
        if eligible:
            pick = max(eligible, key=lambda v: (state_of[v.name].cost, v.name))
            targets[pick.name] -= 1
            scaled = pick.name

    for name, target in targets.items():
        s = state_of[name]
        targets[name] = min(max(target, s.min_replicas), s.max_replicas)
    return TargetResult(targets, False, (), tuple(notes), scaled, still_not_reporting)


ANALYZER = SaturationPercentage()
