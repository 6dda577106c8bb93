"""The queueing-model SLO analyzer (seed 003; research §3.5–3.8): latency targets → requests/s per replica.

The engine calls `ANALYZER` (adapter.analyzers.protocol) once per model per cycle, after its `prepare` over every
model it decides (stages 1–2 for the whole fleet at once: every variant's filter in one lockstep). Read from the top:

    QueueingModel.prepare / analyze
                              each variant's filter: this process's memory, else VA status (`learned.queueingModel`,
                              so a new leader resumes); the filters after this cycle go back to both
      measure
        1. workload.observe     Σλ and the arrival-weighted request size and latencies over the busy pods
                                (arrival rate > 0) of all variants; each variant's busy pods and batch limit
        2. ekf.learn            (when `tuningEnabled`) each variant's filter takes one observation per busy pod:
                                a cold variant is bootstrapped from its pods, a lost filter is re-fitted (every
                                variant of the fleet in one lockstep, `ekf.learn_many`, by `prepare`)
        3. slo.resolve_slo      explicit targets → inferred from the learned parameters → observed × 1.5, capped
        4. _max_rate            per variant λ* = the throughput at the largest rate one replica sustains within
                                the SLO (`QueueModel.max_rate`, upstream's `Size`) with its learned parameters and
                                the model's request size; a variant without learned parameters, or whose
                                parameters cannot meet the SLO, is a zero-capacity placeholder (capacity unknown:
                                never chosen, never free)
        5. the signal, in requests/s, with ready_v = current_v − pending_v:

               supply = Σ ready_v · λ*_v        anticipated = Σ current_v · λ*_v        demand = Σλ
               required = max(0, demand − anticipated)          spare = max(0, supply − demand)

so that with one variant the allocation step ends at ceil(Σλ / λ*) replicas. Upstream computed each variant's
capacity from its *desired* count, which made `required` structurally 0; capacity here comes only from
replicas that exist. Worked example: λ* = 2.5 req/s, 2 replicas, demand 7 req/s: required = 7 − 5 = 2 →
ceil(2 / 2.5) = 1 more → 3 = ceil(7 / 2.5).

No signal (the fallback hierarchy decides), with the reason: no SLO can be resolved; no busy pod; no request
sizes; no variant's λ* known.

`analysis` (DESIGN §3.2): `slo{target_ttft_ms, target_itl_ms, source}`; per variant `alpha, beta, gamma`
(ms; null when nothing is learned), `max_rps_per_replica` (λ*), `total_arrival_rps` (Σλ of the variant's own
busy pods) and `required_replicas` (ceil(total_arrival_rps / λ*): what it needs for the traffic it carries;
null when λ* is unknown); and the model's `total_arrival_rps`, `total_supply_rps`, `required_capacity`,
`spare_capacity`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from adapter.analyzers import memory as state_json
from adapter.analyzers.protocol import Analysis, CapacityWording, ModelInput
from adapter.analyzers.queueing import ekf
from adapter.analyzers.queueing.model import QueueModel, RequestSize
from adapter.analyzers.queueing.slo import Slo, resolve_slo
from adapter.analyzers.queueing.workload import WORKLOAD_READS, Observed, Workload, observe
from adapter.config.configmaps import QueueingConfig
from adapter.domain.capacity import CapacitySignal, CapacityUnit, NoSignal, VariantSupply, supply_of
from adapter.domain.decision import AnalyzerName
from adapter.domain.errors import ModelError
from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.snapshot import PodMetrics, VariantView

LEARNED_SECTION = "queueingModel"
"""The `status.learned` section holding a variant's filter state."""
LABEL = "queueing-model"
"""How reasons name this analyzer."""

Filters = Mapping[VariantKey, ekf.FilterState]
"""The analyzer's memory: each variant's learned (α, β, γ) filter."""


@dataclass(frozen=True, slots=True)
class Learned:
    """Stages 1–2 of one model as `QueueingModel.prepare` did them: its workload, its variants' filters after this
    cycle, the notes of restoring them (`remembered`) and of learning (`_learned`)."""

    observed: Observed
    states: Mapping[str, ekf.FilterState]
    remembered_notes: tuple[str, ...]
    learn_notes: tuple[str, ...]


class PreparedFilters(Mapping[VariantKey, ekf.FilterState]):
    """The memory the analyses get after `prepare`: the filters as remembered, and stages 1–2 of every model
    `prepare` reached (`learned`). Never persisted: `FilterMemory.next` starts from the engine state's filters."""

    __slots__ = ("_filters", "learned")

    def __init__(self, filters: Filters, learned: Mapping[ModelKey, Learned]) -> None:
        self._filters = filters
        self.learned = learned

    def __getitem__(self, key: VariantKey) -> ekf.FilterState:
        return self._filters[key]

    def __iter__(self) -> Iterator[VariantKey]:
        return iter(self._filters)

    def __len__(self) -> int:
        return len(self._filters)


@dataclass(frozen=True, slots=True)
class QueueingModel:
    """The queueing-model analyzer as the engine calls it."""

    name: AnalyzerName = AnalyzerName.QUEUEING_MODEL
    reads: frozenset[str] = WORKLOAD_READS
    prepares: bool = True
    """The EKF learns every variant of the fleet in one lockstep (`prepare`)."""

    @property
    def memory(self) -> FilterMemory:
        return FilterMemory()

    def configure(self, model: ModelInput) -> tuple[QueueingConfig, tuple[str, ...]]:
        """The model's `wva-queueing-model-config` entry (the saturation ConfigMap does not decide this model)."""
        cfg, warnings = model.configmaps.queueing(model.model)
        return cfg, tuple(warnings)

    def prepare(
        self, models: Sequence[tuple[ModelInput, QueueingConfig]], memory: Filters, now_s: float
    ) -> PreparedFilters:
        """Stages 1–2 of every model at once: every variant's filter of the fleet in one lockstep
        (`ekf.learn_many`; variant by variant each step is a call of 7 model rows, mostly call overhead). A model
        whose own part raises (a bug) is left out: its `analyze` does the stages alone, where the error is its own."""
        started: list[tuple[ModelInput, QueueingConfig, dict[str, ekf.FilterState], list[str], Observed]] = []
        for model, config in models:
            try:
                learned, notes = remembered(model.views, memory)
                started.append((model, config, learned, notes, observe(model.views, model.pods)))
            except Exception:
                continue  # raised again by the model's own analysis, as its error
        after = _learn_many(
            [(model.views, observed, learned, config) for model, config, learned, _, observed in started], now_s=now_s
        )
        prepared = {
            model.model: Learned(observed, states, tuple(notes), tuple(learn_notes))
            for (model, _, _, notes, observed), (states, learn_notes) in zip(started, after, strict=True)
        }
        return PreparedFilters(memory, prepared)

    def analyze(self, model: ModelInput, config: QueueingConfig, memory: Filters, now_s: float) -> Analysis[Filters]:
        prepared = memory.learned.get(model.model) if isinstance(memory, PreparedFilters) else None
        if prepared is None:  # `prepare` was not called, failed, or left this model out: the stages alone
            learned, notes = remembered(model.views, memory)
            outcome, states = measure(model.model, model.views, model.pods, cfg=config, learned=learned, now_s=now_s)
        else:
            notes = list(prepared.remembered_notes)
            outcome, states = _signal(
                model.model,
                model.views,
                prepared.observed,
                dict(prepared.states),
                list(prepared.learn_notes),
                cfg=config,
            )
        update = {VariantKey(model.model.namespace, name): state for name, state in states.items()}
        persist = {name: {LEARNED_SECTION: state.to_json()} for name, state in states.items()}
        if isinstance(outcome, NoSignal):
            return Analysis.unmeasured(
                outcome.reason, figures=outcome.analysis, notes=tuple(notes), memory=update, learned=persist
            )
        return Analysis.measured(
            outcome, CapacityWording(LABEL, outcome), notes=(*notes, *outcome.notes), memory=update, learned=persist
        )


def remembered(views: Sequence[VariantView], memory: Filters) -> tuple[dict[str, ekf.FilterState], list[str]]:
    """Each variant's filter: this process's memory, else what a previous leader persisted in VA status (a
    restart or fail-over resumes there); an unreadable persisted state is noted and learning starts afresh."""
    learned: dict[str, ekf.FilterState] = {}
    notes: list[str] = []
    for view in views:
        state = memory.get(view.key)
        if state is None and LEARNED_SECTION in view.status.learned:
            try:
                state = ekf.FilterState.from_json(view.status.learned[LEARNED_SECTION])
            except ValueError as exc:
                notes.append(f"{view.key.name}: persisted filter state unreadable ({exc}); learning afresh")
        if state is not None:
            learned[view.key.name] = state
    return learned, notes


def measure(
    model: ModelKey,
    views: Sequence[VariantView],
    pods_by_variant: Mapping[str, Sequence[PodMetrics]],
    *,
    cfg: QueueingConfig,
    learned: Mapping[str, ekf.FilterState],
    now_s: float,
) -> tuple[CapacitySignal | NoSignal, dict[str, ekf.FilterState]]:
    """The model's signal in requests/s and every variant's filter state after this cycle (module docstring).
    Never raises on bad metrics: missing, NaN or negative values count as absent."""
    observed = observe(views, pods_by_variant)
    states, notes = _learn(views, observed, learned, cfg=cfg, now_s=now_s)
    return _signal(model, views, observed, states, notes, cfg=cfg)


def _signal(
    model: ModelKey,
    views: Sequence[VariantView],
    observed: Observed,
    states: dict[str, ekf.FilterState],
    notes: list[str],
    *,
    cfg: QueueingConfig,
) -> tuple[CapacitySignal | NoSignal, dict[str, ekf.FilterState]]:
    """Stages 3–5 on the workload and the filters after this cycle; `notes` (learning's) are added to."""
    load = observed.model
    slo = resolve_slo(cfg, [states[v.key.name].params() for v in views if v.key.name in states], load)
    if slo is None:
        reason = "no SLO targets: none configured, no learned parameters and no observed TTFT/ITL"
        return NoSignal(model, AnalyzerName.QUEUEING_MODEL, reason, {"busy_pods": load.busy_pods}), states
    if load.busy_pods == 0:
        reason = "no busy pod (arrival rate 0 or unknown everywhere): no request size to size replicas for"
        return NoSignal(model, AnalyzerName.QUEUEING_MODEL, reason, {"slo": slo.to_json()}), states
    if load.output_tokens < 1:
        reason = "no busy pod reports request sizes (avg output tokens)"
        return NoSignal(model, AnalyzerName.QUEUEING_MODEL, reason, {"slo": slo.to_json()}), states

    variants: list[VariantSupply] = []
    per_variant: dict[str, dict[str, object]] = {}
    for view in views:
        own = observed.variants[view.key.name]
        state = states.get(view.key.name)
        rate, why = _max_rate(state, load, slo, own.max_batch)
        if why:
            notes.append(f"{view.key.name}: {why}")
        variants.append(supply_of(view, per_replica_capacity=rate, demand=own.arrival_rps))
        per_variant[view.key.name] = {
            "alpha": round(state.alpha_ms, 6) if state else None,
            "beta": round(state.beta_ms, 8) if state else None,
            "gamma": round(state.gamma_ms, 10) if state else None,
            "max_rps_per_replica": round(rate, 6),
            "total_arrival_rps": round(own.arrival_rps, 6),
            "required_replicas": required_replicas(own.arrival_rps, rate),
        }
    if not any(v.per_replica_capacity > 0 for v in variants):
        reason = "no variant's capacity at the SLO is known: " + "; ".join(notes[:3])
        return NoSignal(model, AnalyzerName.QUEUEING_MODEL, reason[:400], {"slo": slo.to_json()}), states

    supply = sum(v.ready_replicas * v.per_replica_capacity for v in variants)
    anticipated = sum(v.current_replicas * v.per_replica_capacity for v in variants)
    demand = load.total_arrival_rps
    required, spare = max(0.0, demand - anticipated), max(0.0, supply - demand)
    analysis = {
        "slo": slo.to_json(),
        "variants": per_variant,
        "total_arrival_rps": round(demand, 6),
        "total_supply_rps": round(supply, 6),
        "required_capacity": round(required, 6),
        "spare_capacity": round(spare, 6),
    }
    signal = CapacitySignal(
        model=model,
        analyzer=AnalyzerName.QUEUEING_MODEL,
        unit=CapacityUnit.REQUESTS_PER_S,
        required=required,
        spare=spare,
        variants=tuple(variants),
        analysis=analysis,
        notes=tuple(notes),
    )
    return signal, states


def _learn(
    views: Sequence[VariantView],
    observed: Observed,
    learned: Mapping[str, ekf.FilterState],
    *,
    cfg: QueueingConfig,
    now_s: float,
) -> tuple[dict[str, ekf.FilterState], list[str]]:
    """Every variant's filter after this cycle's observations (stage 2; the model's variants in lockstep,
    `ekf.learn_many`), and a note per notable outcome; the filters as they were when tuning is off."""
    return _learn_many([(views, observed, learned, cfg)], now_s=now_s)[0]


def _learn_many(
    models: Sequence[tuple[Sequence[VariantView], Observed, Mapping[str, ekf.FilterState], QueueingConfig]],
    *,
    now_s: float,
) -> list[tuple[dict[str, ekf.FilterState], list[str]]]:
    """`_learn` for many models: the variants of every model whose tuning is on in one lockstep."""
    jobs = [
        (learned.get(v.key.name), observed.variants[v.key.name])
        for views, observed, learned, cfg in models
        if cfg.tuning_enabled
        for v in views
    ]
    outcomes = iter(ekf.learn_many(jobs, now_s=now_s))
    return [
        _learned(views, learned, [next(outcomes) for _ in views])
        if cfg.tuning_enabled
        else ({v.key.name: learned[v.key.name] for v in views if v.key.name in learned}, [])
        for views, _, learned, cfg in models
    ]


def _learned(
    views: Sequence[VariantView], learned: Mapping[str, ekf.FilterState], outcomes: Sequence[ekf.Outcome | None]
) -> tuple[dict[str, ekf.FilterState], list[str]]:
    """Each variant's filter from its outcome this cycle (a variant with none — no observation — has none), and a
    note per notable outcome."""
    states: dict[str, ekf.FilterState] = {}
    notes: list[str] = []
    for view, outcome in zip(views, outcomes, strict=True):
        name = view.key.name
        previous = learned.get(name)
        if outcome is None:
            continue
        states[name] = outcome.state
        if outcome.started == "re-fitted" and previous is not None:
            notes.append(f"{name}: filter lost for {previous.lost_cycles} cycles; re-fitted")
        elif outcome.rejected:
            notes.append(f"{name}: {outcome.rejected} observation(s) rejected ({outcome.reasons[0]})")
    return states, notes


def _max_rate(state: ekf.FilterState | None, load: Workload, slo: Slo, max_batch: int) -> tuple[float, str]:
    """λ* (throughput at the largest SLO-meeting rate), req/s per replica; 0 with a reason when unknown."""
    if state is None:
        return 0.0, "no learned parameters yet (capacity unknown)"
    try:
        model = QueueModel(
            state.params(),
            RequestSize(load.input_tokens, load.output_tokens),
            max_batch=max_batch,
            max_queue=ekf.QUEUE_TO_BATCH * max_batch,
        )
        return model.max_rate(slo.target_ttft_ms, slo.target_itl_ms).throughput_rps, ""
    except (ModelError, ValueError, ArithmeticError) as exc:
        return 0.0, f"the SLO is out of this variant's reach ({str(exc)[:160]})"


def required_replicas(arrival_rps: float, lambda_star_rps: float) -> int | None:
    """ceil(arrival / λ*), None when λ* is unknown (≤ 0). The 1e-9 keeps 6.0 / 2.0 at 3 despite rounding."""
    if lambda_star_rps <= 0:
        return None
    return max(0, math.ceil(arrival_rps / lambda_star_rps - 1e-9))


@dataclass(frozen=True, slots=True)
class FilterMemory:
    """The filters of every VA still decided carry over; this cycle's replace them.

    JSON (`engine_state.queueing`): {"ns/va": FilterState.to_json()}."""

    section: str = "queueing"

    def empty(self) -> Filters:
        return {}

    def next(
        self, previous: Filters, updates: Sequence[Filters], *, decided: AbstractSet[VariantKey], now_s: float
    ) -> Filters:
        del now_s  # a filter is kept as long as its VA is decided
        kept = {k: v for k, v in previous.items() if k in decided}
        for update in updates:
            kept.update(update)
        return kept

    def to_json(self, memory: Filters) -> dict[str, Any]:
        return {str(k): f.to_json() for k, f in sorted(memory.items())}

    def from_json(self, doc: Any, path: str) -> Filters:
        out: dict[VariantKey, ekf.FilterState] = {}
        for key, raw in state_json.obj(doc, path).items():
            try:
                out[state_json.variant_key(key, path)] = ekf.FilterState.from_json(raw)
            except ValueError as exc:  # the key's own error too, under the entry's path
                raise state_json.StateFormatError(f"{path}[{key[:60]!r}]", str(exc)) from None
        return out


ANALYZER = QueueingModel()
