"""The predictive, attainment-aware analyzer (issue 18): capacity for the demand a startup ahead, sized for the
per-request SLO and corrected by the attainment actually delivered.

Per model, each cycle (read from the top; `Predictive.prepare` does the restore, steps 1–2, step 4's observation
and step 7's λ* for every model of the fleet at once, `_prepare`, and `Predictive.analyze` the rest, `_measure`):

    Predictive.prepare / analyze
      restore           the model's state (forecaster, controller, request size, startup samples) from memory,
                        else from VA status (`learned.predictive`, the newest copy among its VAs); each variant's
                        (α, β, γ) filter from memory, else `learned.queueingModel` (shared with the plain queueing
                        model, so switching analyzers keeps what was learned)
      measure
        1. workload.observe   Σλ (arrival rate of the busy pods) and the arrival-weighted request size
        2. ekf.learn          each variant without a profile: its filter takes one observation per busy pod
                              (every variant of the fleet in one lockstep, `ekf.learn_many`)
        3. backlog            B = Σ waiting requests of the pods + the EPP queue
        4. forecast           the forecaster takes Σλ (the period searches due, of every model of the fleet, in
                              one call: `with_periods`); its peak over [now, now + lead] (forecast.py), lead = the
                              largest p90 startup of the model's variants (learned from their pods; before 10
                              samples, the longest of them or the prior — a sibling's p90 of ≥ 10 samples, else
                              `startupTime` — whichever is longer)
        5. demand             D = max(Σλ, forecast peak) + B / backlogDrainTime                     (req/s)
        6. headroom           the controller (attainment.py) compares the attainment the latency histograms show
                              with `sloAttainmentTarget` and moves H
        7. capacity           per variant c_v = λ*(tightened targets) / H (capacity.py), with its accelerator's
                              profile (`acceleratorProfiles`), else its learned parameters, else unknown (a
                              zero-capacity placeholder: never chosen); λ* of every variant of the fleet in one
                              lockstep (`per_replica_rps`, `max_rates`)
        8. signal             supply = Σ ready_v·c_v, anticipated = Σ current_v·c_v
                              required = max(0, D − anticipated)
                              spare    = max(0, supply − held·(1 + SPARE_MARGIN)),
                              held     = max(D, Σλ + recurring rise + B / backlogDrainTime) (`_held`);
                              while a scale-down asked last cycle is pending, at least what it removes
                              if supply − held still covers it (`_pending_removal`)
        9. bridge             short now while only slow-starting replicas are in flight: the shortfall is bought
                              from the variants that start fast (`_bridge`)

Worked example: Σλ = 10 req/s, the forecast peak over 300 s 14 req/s, 30 requests waiting, drain 60 s ⇒
D = 14 + 0.5 = 14.5 req/s. One A100 with λ*(tightened) = 7.4 req/s and H = 1.2 ⇒ c = 6.17 req/s; 2 replicas
running ⇒ anticipated 12.3 ⇒ required 2.2 req/s ⇒ the allocation step adds ceil(2.2 / 6.17) = 1 replica.

The demand comes from arrivals and the backlog, never from what is served: an overloaded model whose pods
complete less than arrives still shows its arrival rate and a growing queue, so it is sized for both within one
cycle. Scale-down needs the demand to fit with `SPARE_MARGIN` to spare *and* covers the forecast over a startup:
a replica the forecast needs back before a new one could start is kept, and so is room for a rise the history
shows recurring from the present rate within a startup (`Forecaster.recurring_rise`: bursts before their period is
known, a load that bursts without one). A variant at zero replicas has the
capacity its profile (or remembered filter) gives it, so the allocation step can start it when it is the
cheaper way to meet the SLO.

Advice (prefill-heavy traffic): when one prefill chunk (`--max-num-batched-tokens` × β + α) alone exceeds the ITL
target, the analysis, the decision's notes and the OptimizationReady condition say so. Advice (measurement): when a
target lies between two bucket edges and the attainment the edges allow is on both sides of
`sloAttainmentTarget`, the analysis and the notes give that bracket and ask for an edge at the target.

`analysis` (replay, explain): `slo`, `demand{arrival_rps, backlog, backlog_rps, forecast{…}, lead_s, demand_rps}`,
`headroom{value, measured_attainment, target, hold, bucket_bracket}`, `held_rps` (when a recurring rise holds more
than D), per variant `alpha, beta, gamma, params_source,
max_rps_per_replica` (λ* at the tightened targets), `capacity_rps` (÷ H), `startup_p90_s`, `advice`, and the
model's `total_arrival_rps`, `total_supply_rps`, `required_capacity`, `spare_capacity`, `bridge_rps` (while
bridging), `pending_removal_rps` (while a scale-down asked last cycle exceeds what the margin releases: `_spare`).
"""

from __future__ import annotations

import functools
import math
import statistics
import zlib
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from adapter.analyzers import memory as state_json
from adapter.analyzers.predictive.attainment import CYCLE_S, Controller
from adapter.analyzers.predictive.capacity import ReplicaQuery, Targets, chunk_advice, per_replica_rps, tightened
from adapter.analyzers.predictive.forecast import ForecastConfig, Forecaster, with_periods
from adapter.analyzers.protocol import Analysis, CapacityWording, ModelInput
from adapter.analyzers.queueing import ekf
from adapter.analyzers.queueing.analyzer import LEARNED_SECTION as FILTER_SECTION
from adapter.analyzers.queueing.model import RequestSize, ServiceParams
from adapter.analyzers.queueing.slo import Slo, resolve_slo
from adapter.analyzers.queueing.workload import WORKLOAD_READS, Observed, observe, usable
from adapter.config.configmaps import QueueingConfig
from adapter.domain.accelerators import normalize_accelerator
from adapter.domain.capacity import CapacitySignal, CapacityUnit, VariantSupply, supply_of
from adapter.domain.decision import AnalyzerName
from adapter.domain.frozen import fast_init, replace
from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.snapshot import ModelTraffic, VariantView

LEARNED_SECTION = "predictive"
"""The `status.learned` section holding the model's forecaster, controller and startup samples."""
LABEL = "predictive"
SPARE_MARGIN = 0.10
"""Scale-down only when the demand fits with this share to spare (hysteresis against flapping)."""
STARTUP_SAMPLES = 20
"""Startup durations remembered per variant (their p90 is the variant's lead)."""
SIBLING_SAMPLES = 10
"""Below this many startup samples a variant's own p90 is not trusted under its prior (`_lead_s`), and its prior
is the p90 of a sibling with at least this many, before `startupTime`: a model's weights and image dominate its
startup, and they are the same on every variant. Why: an L40S never scaled kept the model's lead at the 5-minute
default while its A100 pods started in 20–40 s, and the replicas for a foreseen burst were held 5 minutes instead
of 40 s (a probe: 5–16 % cheaper at the same attainment). Fewer samples are not enough: the p90 of 3–5 is their
largest, below the true p90 three times in four, and borrowing it cost 2–4.5 points on fast diurnals."""
ENGINE_STEP_S = 30.0
UNSEEN_STEPS = 2.0
"""More than this many engine steps since the model's last analysis: the cycles between were unseen (`_unseen`)."""
CHECKPOINT_INTERVAL_S = 300.0
"""How often a model's state (`learned.predictive`, and each learning variant's `learned.queueingModel`) is written to
its VAs' status: at its first analysis, then every `CHECKPOINT_INTERVAL_S` (each model at its own phase within the
interval, `_checkpoint_phase_s`, so that the writes of a fleet spread over the interval's cycles). The state lives in
memory in between; the status copy is for a new leader (`_restore`), as the VPA's checkpoints are.

Why not every cycle: the forecast history is up to 480 values a model, so a status that carries it changes every
cycle, and every VA's status was rewritten every cycle — at 10,000 VAs, 10,000 PATCHes of ~5 KB every 30 s for the
API server and etcd to store, and 1.6 M floats made a cycle to render the histories (docs/benchmarks/scale.md, item
35). What a fail-over loses: up to one interval of the history (the restored forecaster holds its last value over
the steps it did not see, as over any gap) and of the filters' and the controller's updates."""
UNREPORTED_NOTE = "no pod reported an arrival rate this cycle: arrivals unknown, not 0; the forecast keeps its history"
"""The analysis note of a cycle whose arrivals are unknown (`_arrivals_reported`), shown by `explain`."""


@fast_init
@dataclass(frozen=True, slots=True)
class ModelState:
    """One model's memory (module docstring)."""

    forecaster: Forecaster
    controller: Controller = field(default_factory=Controller)
    input_tokens: float = 0.0
    output_tokens: float = 0.0
    ready: Mapping[str, int] = field(default_factory=dict)
    """Ready replicas per variant last cycle (did capacity change?)."""
    startup_s: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    saved_s: float = 0.0
    checkpointed_s: float | None = None
    """When this state was last written to its VAs' status (as that write's phase counts, `_checkpointed`); None: not
    yet by this leader. Not part of the status copy (`to_json`): a new leader writes its first checkpoint at once."""

    def to_json(self) -> dict[str, Any]:
        return {
            "savedS": self.saved_s,
            "forecast": self.forecaster.to_json(),
            "controller": self.controller.to_json(),
            "inputTokens": round(self.input_tokens, 3),
            "outputTokens": round(self.output_tokens, 3),
            "ready": dict(sorted(self.ready.items())),
            "startupS": {k: [round(x, 3) for x in v] for k, v in sorted(self.startup_s.items())},
        }

    @classmethod
    def from_json(cls, doc: Any, config: ForecastConfig) -> ModelState:
        """Strict: ValueError naming the field when `doc` is not what `to_json` writes."""
        if not isinstance(doc, dict):
            raise ValueError("predictive: expected an object")
        forecaster = Forecaster.from_json(doc.get("forecast") or {}, config)
        controller = Controller.from_json(doc.get("controller") or {})
        ready = doc.get("ready", {})
        if not isinstance(ready, dict) or not all(type(v) is int and v >= 0 for v in ready.values()):
            raise ValueError("predictive.ready: expected {variant: replicas}")
        startup = doc.get("startupS", {})
        if not isinstance(startup, dict) or not all(
            isinstance(v, list) and all(_finite(x) and x >= 0 for x in v) for v in startup.values()
        ):
            raise ValueError("predictive.startupS: expected {variant: [seconds]}")
        sizes = [doc.get("inputTokens", 0.0), doc.get("outputTokens", 0.0), doc.get("savedS", 0.0)]
        if not all(_finite(x) and x >= 0 for x in sizes):
            raise ValueError("predictive.inputTokens/outputTokens/savedS: expected finite numbers >= 0")
        return cls(
            forecaster,
            controller,
            float(sizes[0]),
            float(sizes[1]),
            {str(k): int(v) for k, v in ready.items()},
            {str(k): tuple(float(x) for x in v[-STARTUP_SAMPLES:]) for k, v in startup.items()},
            float(sizes[2]),
        )


@fast_init
@dataclass(frozen=True, slots=True)
class Prepared:
    """What `prepare` does for every model at once, one model's part: its state and filters as restored (memory,
    else VA status, with `restore_notes`), its workload (step 1), its variants' filters after this cycle's
    observations (step 2, with `learn_notes`), each variant's parameters and source, the SLO, the request size,
    and each variant's λ* at the tightened targets (step 7; all 0 without an SLO or a size)."""

    state: ModelState
    """As restored, its forecaster with this cycle's arrivals (step 3 up to the forecast itself)."""
    restore_notes: tuple[str, ...]
    observed: Observed
    reported: bool
    """Whether any pod reported an arrival rate (`_arrivals_reported`); if not, the forecaster did not observe."""
    learned: Mapping[str, ekf.FilterState]
    learn_notes: tuple[str, ...]
    params: Mapping[str, tuple[ServiceParams | None, str]]
    slo: Slo | None
    size: RequestSize | None
    at_slo: Mapping[str, float]


@fast_init
@dataclass(frozen=True, slots=True)
class PredictiveMemory:
    """The analyzer's memory: every model's state and every variant's filter."""

    models: Mapping[ModelKey, ModelState] = field(default_factory=dict)
    filters: Mapping[VariantKey, ekf.FilterState] = field(default_factory=dict)
    variants: Mapping[ModelKey, frozenset[str]] = field(default_factory=dict)
    """The VAs of each remembered model (a model is forgotten when none of them is decided)."""
    prepared: Mapping[ModelKey, Prepared] = field(default_factory=dict)
    """This cycle's restore, steps 1–2, step 4's observation and λ*, done for every model at once by
    `Predictive.prepare` (a model missing here does them alone in its `analyze`). Only in the memory the analyses
    get: never persisted, never carried to the next cycle (`MemoryKeeper.next` starts from the engine state's
    memory)."""


@dataclass(frozen=True, slots=True)
class MemoryKeeper:
    """`Memory` of the predictive analyzer. JSON (`engine_state.predictive`):
    {"models": {"ns/model": {...ModelState, "variants": [...]}}, "filters": {"ns/va": FilterState}}."""

    section: str = "predictive"

    def empty(self) -> PredictiveMemory:
        return PredictiveMemory()

    def next(
        self,
        previous: PredictiveMemory,
        updates: Sequence[PredictiveMemory],
        *,
        decided: AbstractSet[VariantKey],
        now_s: float,
    ) -> PredictiveMemory:
        del now_s
        models = dict(previous.models)
        variants = dict(previous.variants)
        filters = {k: v for k, v in previous.filters.items() if k in decided}
        for update in updates:
            models.update(update.models)
            variants.update(update.variants)
            filters.update(update.filters)
        keep = {m for m, names in variants.items() if any(VariantKey(m.namespace, name) in decided for name in names)}
        return PredictiveMemory(
            {m: s for m, s in models.items() if m in keep},
            filters,
            {m: v for m, v in variants.items() if m in keep},
        )

    def to_json(self, memory: PredictiveMemory) -> dict[str, Any]:
        return {
            "models": {
                _model_text(m): {
                    **state.to_json(),
                    "variants": sorted(memory.variants.get(m, ())),
                    "checkpointedS": state.checkpointed_s,
                }
                for m, state in sorted(memory.models.items())
            },
            "filters": {str(k): f.to_json() for k, f in sorted(memory.filters.items())},
        }

    def from_json(self, doc: Any, path: str) -> PredictiveMemory:
        root = state_json.obj(doc, path, {"models", "filters"})
        models: dict[ModelKey, ModelState] = {}
        variants: dict[ModelKey, frozenset[str]] = {}
        for key, raw in state_json.obj(root.get("models", {}), f"{path}.models").items():
            where = f"{path}.models[{key[:60]!r}]"
            namespace, sep, model_id = key.partition("/")
            if not sep or not namespace or not model_id:
                raise state_json.StateFormatError(where, "key must be 'namespace/modelID'")
            entry = state_json.obj(raw, where)
            names = entry.get("variants")
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise state_json.StateFormatError(f"{where}.variants", "must be a list of VA names")
            checkpointed = entry.get("checkpointedS")
            if checkpointed is not None and not _finite(checkpointed):
                raise state_json.StateFormatError(f"{where}.checkpointedS", "must be a finite number or null")
            try:
                state = ModelState.from_json(
                    {k: v for k, v in entry.items() if k not in ("variants", "checkpointedS")}, ForecastConfig()
                )
            except ValueError as exc:
                raise state_json.StateFormatError(where, str(exc)[:160]) from None
            if checkpointed is not None:
                state = replace(state, checkpointed_s=float(checkpointed))
            models[ModelKey(namespace, model_id)] = state
            variants[ModelKey(namespace, model_id)] = frozenset(names)
        filters: dict[VariantKey, ekf.FilterState] = {}
        for key, raw in state_json.obj(root.get("filters", {}), f"{path}.filters").items():
            try:
                filters[state_json.variant_key(key, path)] = ekf.FilterState.from_json(raw)
            except ValueError as exc:
                raise state_json.StateFormatError(f"{path}.filters[{key[:60]!r}]", str(exc)[:160]) from None
        return PredictiveMemory(models, filters, variants)


@dataclass(frozen=True, slots=True)
class Predictive:
    """The predictive analyzer as the engine calls it (adapter.analyzers.protocol)."""

    name: AnalyzerName = AnalyzerName.PREDICTIVE
    reads: frozenset[str] = WORKLOAD_READS | {"queue_length", "epp_queue_size", "latency"}
    """The queueing workload's, the backlog (the pods' and the EPP's queues) and the latency histograms."""
    prepares: bool = True
    """The EKF learns every variant of the fleet in one lockstep (`prepare`)."""
    step_s: float = ENGINE_STEP_S

    @property
    def memory(self) -> MemoryKeeper:
        return MemoryKeeper()

    def configure(self, model: ModelInput) -> tuple[QueueingConfig, tuple[str, ...]]:
        """The model's `wva-queueing-model-config` entry (SLO targets and the predictive settings), and the
        saturation ConfigMap's problems for this model (it selected the analyzer)."""
        cfg, warnings = model.configmaps.queueing(model.model)
        return cfg, (*model.saturation_warnings, *warnings)

    def prepare(
        self, models: Sequence[tuple[ModelInput, QueueingConfig]], memory: PredictiveMemory, now_s: float
    ) -> PredictiveMemory:
        """The restore, steps 1–2, step 4's observation and λ* of every model at once (`_prepare`): the filters of
        every variant that learns in one lockstep (`ekf.learn_many`), the forecasters' period searches due this
        cycle in one call (`with_periods`), every variant's λ* in another lockstep (`per_replica_rps`); one by one
        they are most of what a cycle of the shipped default costs (docs/benchmarks/scale.md). Each model's part
        reaches its `analyze` in `PredictiveMemory.prepared`."""
        return replace(memory, prepared=_prepare(models, memory, now_s, step_s=self.step_s))

    def analyze(
        self, model: ModelInput, config: QueueingConfig, memory: PredictiveMemory, now_s: float
    ) -> Analysis[PredictiveMemory]:
        prepared = memory.prepared.get(model.model)
        if prepared is None:  # `prepare` was not called, or failed: the same steps for this model alone
            prepared = _prepare([(model, config)], memory, now_s, step_s=self.step_s, alone=True)[model.model]
        cycle = _measure(model, config, prepared, now_s)
        notes = [*prepared.restore_notes, *cycle.notes]
        names = frozenset(v.key.name for v in model.views)
        state, persist = _checkpointed(model, cycle, now_s)
        update = PredictiveMemory(
            {model.model: state},
            {VariantKey(model.model.namespace, n): f for n, f in cycle.filters.items()},
            {model.model: names},
        )
        if cycle.signal is None:
            return Analysis.unmeasured(
                cycle.reason, figures=cycle.figures, notes=tuple(notes), memory=update, learned=persist
            )
        wording = CapacityWording(LABEL, cycle.signal, condition_prefix=cycle.advice)
        return Analysis.measured(
            cycle.signal, wording, notes=(*notes, *cycle.signal.notes), memory=update, learned=persist
        )


@fast_init
@dataclass(frozen=True, slots=True)
class _Cycle:
    state: ModelState
    filters: Mapping[str, ekf.FilterState]
    signal: CapacitySignal | None
    figures: Mapping[str, Any]
    reason: str = ""
    notes: tuple[str, ...] = ()
    advice: str = ""


class _Restored(NamedTuple):
    """One model as `_prepare` starts it: restored (with the notes), observed (its forecaster too, when any pod
    reported an arrival rate, but for the period search), and its variants that learn."""

    model: ModelInput
    config: QueueingConfig
    state: ModelState
    filters: dict[str, ekf.FilterState]
    notes: list[str]
    observed: Observed
    reported: bool
    learners: list[str]


def _prepare(
    models: Sequence[tuple[ModelInput, QueueingConfig]],
    memory: PredictiveMemory,
    now_s: float,
    *,
    step_s: float,
    alone: bool = False,
) -> dict[ModelKey, Prepared]:
    """Each model restored, observed (step 1), its variants' filters learned (step 2) and their λ* found at the
    tightened targets (step 7): the filters of all models in one lockstep, the λ* of all variants in another.

    A model whose own part raises (a bug, say an unexpected persisted state) is left out, not the others: its
    `analyze` then does these steps `alone`, where the error propagates and is that model's (engine/pipeline.py).
    An error in either lockstep fails the whole `prepare`, which the engine warns of before every model does its
    steps alone."""
    restored: list[_Restored] = []
    for model, cfg in models:
        try:
            restored.append(_restore_and_observe(model, cfg, memory, now_s=now_s, step_s=step_s))
        except Exception:
            if alone:
                raise
            continue  # raised again by the model's own analysis, as its error
    searched = with_periods([r.state.forecaster for r in restored])  # the period searches due, all at once
    restored = [
        r if f is r.state.forecaster else r._replace(state=replace(r.state, forecaster=f))
        for r, f in zip(restored, searched, strict=True)
    ]
    jobs = [(r.filters.get(name), r.observed.variants[name]) for r in restored for name in r.learners]
    outcomes = iter(ekf.learn_many(jobs, now_s=now_s))
    sized: list[tuple[ModelKey, Prepared, list[tuple[str, ReplicaQuery]]]] = []
    for r in restored:
        learned_now = {name: next(outcomes) for name in r.learners}
        try:
            sized.append((r.model.model, *_sized(r, learned_now)))
        except Exception:
            if alone:
                raise
            continue  # as above
    rates = iter(per_replica_rps([query for _, _, asked in sized for _, query in asked]))
    return {
        key: replace(done, at_slo={**done.at_slo, **{name: next(rates) for name, _ in asked}})
        for key, done, asked in sized
    }


def _restore_and_observe(
    model: ModelInput, cfg: QueueingConfig, memory: PredictiveMemory, *, now_s: float, step_s: float
) -> _Restored:
    """One model restored, its workload observed (step 1), and this cycle's arrivals in its forecaster (step 3,
    but for the period search it may make due: `_prepare` does those together)."""
    state, filters, notes = _restore(model, memory, ForecastConfig(step_s=step_s, quantile=cfg.forecast_quantile))
    learners = [v.key.name for v in model.views if _learns(v, cfg)]
    observed = observe(model.views, model.pods)
    reported = _arrivals_reported(model)
    if reported:
        state = replace(state, forecaster=state.forecaster.advance(now_s, observed.model.total_arrival_rps))
    return _Restored(model, cfg, state, filters, notes, observed, reported, learners)


def _sized(r: _Restored, outcomes: Mapping[str, ekf.Outcome | None]) -> tuple[Prepared, list[tuple[str, ReplicaQuery]]]:
    """One model's part after learning, its λ* all 0 for now, and the λ* its variants ask."""
    learned, learn_notes = _learned(r.model.views, r.filters, outcomes)
    size = _size(r.observed.model.input_tokens, r.observed.model.output_tokens, r.state)
    params = {v.key.name: _params(v, learned, r.config) for v in r.model.views}
    slo = resolve_slo(r.config, [p for p, _ in params.values() if p is not None], r.observed.model)
    asked = _capacity_queries(r.model.views, r.observed, params, slo=slo, size=size, cfg=r.config)
    at_zero = {v.key.name: 0.0 for v in r.model.views}
    prepared = Prepared(
        r.state, tuple(r.notes), r.observed, r.reported, learned, tuple(learn_notes), params, slo, size, at_zero
    )
    return prepared, asked


def _capacity_queries(
    views: Sequence[VariantView],
    observed: Observed,
    params: Mapping[str, tuple[ServiceParams | None, str]],
    *,
    slo: Slo | None,
    size: RequestSize | None,
    cfg: QueueingConfig,
) -> list[tuple[str, ReplicaQuery]]:
    """The λ* each variant with known parameters needs: one replica at the SLO's targets tightened for the tail
    (capacity.py); none without an SLO or a request size (the analysis then stops before capacity)."""
    if slo is None or size is None:
        return []
    asked = []
    for view in views:
        known, _ = params[view.key.name]
        if known is not None:
            targets = tightened(
                Targets(slo.target_ttft_ms, slo.target_itl_ms),
                known,
                size,
                attainment=cfg.slo_attainment_target,
                itl_cv=cfg.itl_spread,
            )
            asked.append(
                (view.key.name, ReplicaQuery(known, size, observed.variants[view.key.name].max_batch, targets))
            )
    return asked


def _restore(
    model: ModelInput, memory: PredictiveMemory, forecast_cfg: ForecastConfig
) -> tuple[ModelState, dict[str, ekf.FilterState], list[str]]:
    """Memory first; else what a previous leader persisted in VA status (the newest copy of the model state)."""
    notes: list[str] = []
    state = memory.models.get(model.model)
    if state is not None and state.forecaster.config != forecast_cfg:
        state = replace(state, forecaster=replace(state.forecaster, config=forecast_cfg))
    if state is None:
        best: ModelState | None = None
        for view in model.views:
            raw = view.status.learned.get(LEARNED_SECTION)
            if raw is None:
                continue
            try:
                restored = ModelState.from_json(raw, forecast_cfg)
            except ValueError as exc:
                notes.append(f"{view.key.name}: persisted predictive state unreadable ({str(exc)[:120]}); afresh")
                continue
            if best is None or restored.saved_s > best.saved_s:
                best = restored
        state = best or ModelState(Forecaster(forecast_cfg))
    filters, filter_notes = _restore_filters(model, memory)
    return state, filters, [*notes, *filter_notes]


def _restore_filters(model: ModelInput, memory: PredictiveMemory) -> tuple[dict[str, ekf.FilterState], list[str]]:
    """Each variant's filter: memory first, else what a previous leader persisted in its VA status."""
    notes: list[str] = []
    filters: dict[str, ekf.FilterState] = {}
    for view in model.views:
        remembered = memory.filters.get(view.key)
        if remembered is None and FILTER_SECTION in view.status.learned:
            try:
                remembered = ekf.FilterState.from_json(view.status.learned[FILTER_SECTION])
            except ValueError as exc:
                notes.append(f"{view.key.name}: persisted filter state unreadable ({str(exc)[:120]}); learning afresh")
        if remembered is not None:
            filters[view.key.name] = remembered
    return filters, notes


def _measure(model: ModelInput, cfg: QueueingConfig, prepared: Prepared, now_s: float) -> _Cycle:
    """Steps 3–8 of the module docstring for one model, on what `_prepare` did (the restore, steps 1–2, step 4's
    observation, λ*)."""
    views = model.views
    state, observed, learned, size = prepared.state, prepared.observed, prepared.learned, prepared.size
    params, slo, at_slo = prepared.params, prepared.slo, prepared.at_slo
    notes = list(prepared.learn_notes)
    startup = _startup_samples(views, state)
    leads = _leads(startup, cfg)
    lead_s = max(leads.values(), default=0.0)
    demand = _demand(model, observed, state.forecaster, prepared.reported, cfg, lead_s=lead_s, now_s=now_s)
    if not demand.reported:
        notes.append(UNREPORTED_NOTE)
    ready = {v.key.name: (v.target.ready_replicas if v.target else 0) for v in views}
    ready_before = state.ready
    saved_s = state.saved_s
    unseen = _unseen(saved_s, now_s, state.forecaster.config.step_s)
    state = replace(
        state,
        forecaster=demand.forecaster,
        input_tokens=size.input_tokens if size else state.input_tokens,
        output_tokens=size.output_tokens if size else state.output_tokens,
        ready=ready,
        startup_s=startup,
        saved_s=now_s,
    )
    if slo is None:
        reason = "no SLO targets: none configured, no learned parameters and no observed TTFT/ITL"
        return _Cycle(state, learned, None, {"demand": demand.figures}, reason, tuple(notes))
    if size is None:
        reason = "no request size known yet (no busy pod has reported avg input/output tokens)"
        return _Cycle(state, learned, None, {"slo": slo.to_json(), "demand": demand.figures}, reason, tuple(notes))
    measured, completions = _attainment(model.traffic, slo)
    bracket, bucket_tip = _bucket_bracket(model.traffic, slo, cfg.slo_attainment_target)
    controller = state.controller.update(
        target=cfg.slo_attainment_target,
        measured=measured,
        completions=completions,
        window_s=_window_s(model.traffic),
        in_flight=any(v.target is not None and v.target.pending_replicas > 0 for v in views),
        at_max=all(
            (v.target.replicas if v.target else 0) >= v.spec.max_replicas for v in views if at_slo[v.key.name] > 0
        ),
        capacity_change=_change(ready, ready_before, unseen=unseen),
        load=_load(demand.arrival, ready, at_slo, state.controller.headroom),
        backlog=demand.backlog,
        arrival_rps=demand.arrival,
        now_s=now_s,
        elapsed_s=now_s - saved_s if saved_s > 0 else CYCLE_S,
    )
    state = replace(state, controller=controller)
    variants, per_variant, advice = _supply(
        model,
        observed,
        params=params,
        at_slo=at_slo,
        slo=slo,
        headroom=controller.headroom,
        leads=leads,
        notes=notes,
    )
    if bucket_tip:
        advice.append(bucket_tip)
    figures: dict[str, Any] = {
        "slo": slo.to_json(),
        "demand": demand.figures,
        "headroom": {
            "value": round(controller.headroom, 4),
            "measured_attainment": None if controller.last_measured is None else round(controller.last_measured, 6),
            "completions_in_window": round(completions, 1),
            "target": cfg.slo_attainment_target,
            "hold": controller.hold,
            "bucket_bracket": bracket,
        },
        "variants": per_variant,
        "advice": advice,
    }
    if not any(v.per_replica_capacity > 0 for v in variants):
        reason = "no variant's capacity at the SLO is known: " + "; ".join(notes[:3])
        return _Cycle(state, learned, None, figures, reason[:400], tuple(notes))
    supply = sum(v.ready_replicas * v.per_replica_capacity for v in variants)
    anticipated = sum(v.current_replicas * v.per_replica_capacity for v in variants)
    required = max(0.0, demand.demand_rps - anticipated)
    bridge = _bridge(variants, _speeds(startup), demand.arrival + demand.backlog_rps)
    if bridge is not None:
        variants, shortfall, note = bridge
        required = max(required, shortfall)
        notes.append(note)
        figures["bridge_rps"] = round(shortfall, 6)
    held_rps = _held(demand, supply)
    pending = _pending_removal(model, variants, now_s=now_s, step_s=state.forecaster.config.step_s)
    spare = _spare(supply, held_rps, pending, figures)
    if held_rps > demand.demand_rps:
        figures["held_rps"] = round(held_rps, 6)
        notes.append(
            f"scale-down keeps room for {held_rps:.3g} req/s: from about {demand.arrival:.3g} req/s the load has "
            f"risen that far within a startup again and again"
        )
    figures |= {
        "total_arrival_rps": round(demand.arrival, 6),
        "total_supply_rps": round(supply, 6),
        "required_capacity": round(required, 6),
        "spare_capacity": round(spare, 6),
    }
    signal = CapacitySignal(
        model=model.model,
        analyzer=AnalyzerName.PREDICTIVE,
        unit=CapacityUnit.REQUESTS_PER_S,
        required=required,
        spare=spare,
        variants=tuple(variants),
        priority=model.saturation.priority,
        analysis=figures,
        notes=(*notes, *advice),
    )
    advice_text = f"advice: {advice[0]}" if advice else ""
    return _Cycle(state, learned, signal, figures, notes=(), advice=advice_text[:300])


@fast_init
@dataclass(frozen=True, slots=True)
class _Demand:
    arrival: float
    backlog: float
    backlog_rps: float
    """The backlog to drain, per second: backlog / `backlogDrainTime`."""
    lead_s: float
    """The lead the forecast covered (the variants' longest, else `startupTime`)."""
    demand_rps: float
    forecaster: Forecaster
    figures: Mapping[str, Any]
    reported: bool = True
    """Whether any pod reported an arrival rate (`_arrivals_reported`); if not, the forecaster did not observe."""


def _demand(
    model: ModelInput,
    observed: Observed,
    forecaster: Forecaster,
    reported: bool,
    cfg: QueueingConfig,
    *,
    lead_s: float,
    now_s: float,
) -> _Demand:
    """Steps 3–5: arrivals, their forecast over the lead, and the backlog to drain (req/s). The `forecaster` has
    observed this cycle's arrivals when any pod `reported` them (`_prepare`)."""
    arrival = observed.model.total_arrival_rps
    backlog = _backlog(model)
    lead_s = lead_s or cfg.startup_time_s
    forecast = forecaster.peak(now_s, lead_s)
    backlog_rps = backlog / cfg.backlog_drain_time_s
    demand = max(arrival, forecast.peak_rps) + backlog_rps
    figures = {
        "arrival_rps": round(arrival, 6),
        "backlog": round(backlog, 3),
        "backlog_rps": round(backlog_rps, 6),
        "forecast": forecast.as_dict(),
        "lead_s": round(lead_s, 3),
        "demand_rps": round(demand, 6),
    }
    return _Demand(arrival, backlog, backlog_rps, lead_s, demand, forecaster, figures, reported)


def _held(demand: _Demand, supply: float) -> float:
    """The demand scale-down must leave room for (req/s): D, or the present rate plus the rise that recurs from
    it within a lead (`Forecaster.recurring_rise`) plus the backlog's drain, whichever is higher. Only asked when
    the supply exceeds D at all: the history scan is the one per-model step that reads the whole history.

    Example: bursts to 30 req/s over 4, none foreseen by a season yet: D = 4.5 after a burst, the recurring rise
    26 ⇒ held 30 req/s, so the replicas the last burst brought stay for the next."""
    if supply <= demand.demand_rps * (1.0 + SPARE_MARGIN):
        return demand.demand_rps
    rise = demand.forecaster.recurring_rise(demand.lead_s)
    return max(demand.demand_rps, demand.arrival + rise + demand.backlog_rps)


def _spare(supply: float, held_rps: float, pending: float, figures: dict[str, Any]) -> float:
    """The capacity the allocation may release (req/s): what exceeds `held` with `SPARE_MARGIN` to spare, or,
    while a scale-down asked for last cycle is pending (`_pending_removal`), that scale-down as long as the fleet
    without it still holds `held` — never deeper than it (figure `pending_removal_rps` whenever one is pending
    beyond what the margin releases)."""
    spare = max(0.0, supply - held_rps * (1.0 + SPARE_MARGIN))
    if pending > spare:
        spare = max(spare, min(pending, supply - held_rps))
        figures["pending_removal_rps"] = round(pending, 6)
    return spare


def _pending_removal(model: ModelInput, variants: Sequence[VariantSupply], *, now_s: float, step_s: float) -> float:
    """The capacity a scale-down decided last cycle still has to remove (req/s): Σ_v (current_v − asked_v)⁺ · c_v
    over the variants whose previous decision (at most `UNSEEN_STEPS` engine steps old) asked for fewer replicas
    than they have. While it is pending, the scale-down stays asked for as long as the fleet without it still holds
    the demand (`held`, no `SPARE_MARGIN`); a new or deeper one still needs the margin. A Schmitt trigger: the
    margin to go down, none to stay down.

    Why: HPA and KEDA remove a replica only after every recommendation of the stabilization window (5 minutes by
    default) asked for fewer; one cycle in between whose estimate came back within the margin asks for the
    current count again and restarts the wait. On a steady 6 req/s whose estimates moved a few % around the
    margin, the engine asked 2 → 1 A100 and back 2 again and again, and the fleet kept a second A100 for most of
    the run (docs/predictive.md section 5: what this changes there, and what it cannot).

    Example: 2 A100s (5.0 req/s each) and an L40S (2.0), asked 1 A100 last cycle; held 6.8 req/s ⇒ with the
    margin the spare is 12 − 7.48 = 4.52 < 5.0 (the A100 would stay); pending 5.0, the fleet without it holds
    12 − 6.8 = 5.2 ≥ 5.0 ⇒ spare 5.0: the A100 is still asked away."""
    pending = 0.0
    for variant in variants:
        asked = model.previous.get(variant.name)
        if asked is None or now_s - asked.last_run_time_s > UNSEEN_STEPS * step_s:
            continue
        pending += max(0, variant.current_replicas - asked.num_replicas) * variant.per_replica_capacity
    return pending


def _load(arrival: float, ready: Mapping[str, int], at_slo: Mapping[str, float], headroom: float) -> float:
    """Arrivals / the ready replicas' capacity at the current headroom (the controller's anti-windup)."""
    capacity = sum(ready.get(name, 0) * rate for name, rate in at_slo.items()) / max(headroom, 1e-9)
    return arrival / capacity if capacity > 0 else math.inf


def _supply(
    model: ModelInput,
    observed: Observed,
    *,
    params: Mapping[str, tuple[ServiceParams | None, str]],
    at_slo: Mapping[str, float],
    slo: Slo,
    headroom: float,
    leads: Mapping[str, float],
    notes: list[str],
) -> tuple[list[VariantSupply], dict[str, dict[str, Any]], list[str]]:
    """Step 7: each variant's capacity per replica (λ* at the tightened targets ÷ H), its figures, and the
    prefill-chunk advice; a note per variant whose capacity is unknown."""
    variants: list[VariantSupply] = []
    per_variant: dict[str, dict[str, Any]] = {}
    advice: list[str] = []
    for view in model.views:
        name = view.key.name
        p, source = params[name]
        rate = at_slo[name]
        if p is None:
            notes.append(f"{name}: no learned parameters and no profile for {view.accelerator or 'its accelerator'}")
        else:
            if rate <= 0:
                notes.append(f"{name}: cannot meet the SLO at a useful rate with its parameters (capacity 0)")
            chunk = view.target.vllm.effective_max_batched_tokens if view.target is not None else 0
            tip = chunk_advice(p, chunk, slo.target_itl_ms)
            if tip:
                advice.append(f"{name}: {tip}")
        capacity = rate / headroom
        arrival = observed.variants[name].arrival_rps
        variants.append(supply_of(view, per_replica_capacity=capacity, demand=arrival))
        per_variant[name] = {
            "alpha": round(p.alpha_ms, 6) if p else None,
            "beta": round(p.beta_ms, 8) if p else None,
            "gamma": round(p.gamma_ms, 10) if p else None,
            "params_source": source,
            "max_rps_per_replica": round(rate, 6),
            "capacity_rps": round(capacity, 6),
            "total_arrival_rps": round(arrival, 6),
            "startup_p90_s": round(leads[name], 3),
        }
    return variants, per_variant, advice


BRIDGE_RATIO = 2.0
BRIDGE_GAP_S = 120.0
"""A variant is slow to start (`_bridge`) when its pods take over `BRIDGE_RATIO` × as long as the fastest variant's
(`_speeds`) and at least `BRIDGE_GAP_S` longer: apart from sampling noise between variants that start alike."""


def _speeds(samples: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """How long each variant's pods take to start, as `_bridge` compares them: the median startup its own pods
    have shown; a variant none of whose pods has been seen starting is left out (neither fast nor slow).

    Not the leads: below `SIBLING_SAMPLES` a variant's lead is its prior, and an L40S whose first pod started in
    30 s read as slow as the 5-minute default (the A100 beside it, whose pod took 10 minutes, only twice as slow:
    no bridge on the first rise). Not a prior for the unseen: it made a variant at zero "slow" beside one whose
    pods had started in 2 minutes. Not the longest: of two variants that start alike, the one scaled often had
    shown a 400-s tail and the other only its 120-s first pod (a bursts probe bridged for nothing)."""
    return {name: statistics.median(seen) for name, seen in samples.items() if seen}


def _bridge(
    variants: Sequence[VariantSupply], speeds_s: Mapping[str, float], now_rps: float
) -> tuple[list[VariantSupply], float, str] | None:
    """Capacity short *now* while only slow-starting replicas are on their way: buy the shortfall from the
    fast-starting variants this cycle (the slow ones get no more replicas), as a bridge. `speeds_s`: how long each
    variant's pods take to start (`_speeds`; a variant absent is neither fast nor slow).

        soon      = Σ_v ready_v · c_v + Σ_{v fast} pending_v · c_v       (what serves within a fast startup)
        shortfall = arrivals + backlog / backlogDrainTime − soon          (req/s, now; no forecast)
        shortfall > 0 and some variant slow ⇒ required ≥ shortfall, bought from the fast variants

    Why: the allocation buys the cheapest capacity per request, and counts replicas in flight as capacity; with an
    A100 starting in 10 minutes and an L40S in 30 s it ordered A100s on a diurnal rise, counted them, and the
    model missed every request for 8 minutes while they started (77 % attainment where a plain HPA on KV, which
    scales the L40S too, met 96 %; bridged, 99.8 %: docs/predictive.md section 1).

    Worked example: arrivals 26 req/s, no backlog, ready 2 A100 (11 req/s each) + 1 L40S (5.5), 2 A100s pending
    (starting in 600 s, the L40S in 30 s) ⇒ soon 27.5 ≥ 26: no bridge; at 30 req/s the shortfall is 2.5 req/s ⇒ one
    more L40S now. Variants that start alike (every benchmark) never bridge."""
    known = [
        v for v in variants if v.per_replica_capacity > 0 and v.max_replicas > v.current_replicas and v.name in speeds_s
    ]
    if not known:
        return None
    fast = min(speeds_s[v.name] for v in known)
    slow = {
        v.name
        for v in variants
        if v.name in speeds_s and speeds_s[v.name] > BRIDGE_RATIO * fast and speeds_s[v.name] - fast >= BRIDGE_GAP_S
    }
    if not slow or all(v.name in slow for v in known):
        return None
    soon = sum(
        (v.ready_replicas + (0 if v.name in slow else v.pending_replicas)) * v.per_replica_capacity
        for v in variants
        if v.per_replica_capacity > 0
    )
    shortfall = now_rps - soon
    if shortfall <= 0:
        return None
    bridged = [
        replace(v, max_replicas=max(v.current_replicas, v.min_replicas)) if v.name in slow else v for v in variants
    ]
    names = ", ".join(sorted(slow))
    note = (
        f"bridge: {shortfall:.3g} req/s short now while only {names} replicas are on their way (starting over "
        f"{BRIDGE_RATIO:g}× slower than the fastest variant); bought from the variants that start fast"
    )
    return bridged, shortfall, note


def _unseen(saved_s: float, now_s: float, step_s: float) -> bool:
    """Whether the model went unanalysed for more than two engine steps before this cycle: it had no pod (at zero,
    waking up), or its metrics were missing. The controller did not see the fleet that served the latency window's
    requests, so the window's misses are not evidence about the headroom (`_change`)."""
    return saved_s > 0 and now_s - saved_s > UNSEEN_STEPS * step_s


def _change(ready: Mapping[str, int], before: Mapping[str, int], *, unseen: bool = False) -> int:
    """+1 when the ready replicas grew since the last cycle (any variant more, none fewer), −1 when they shrank,
    0 when unchanged; a mix counts by the total. After cycles the analyzer did not see (`unseen`) with replicas
    ready now, +1: capacity came back (from zero replicas, typically) and the controller waits a window before it
    reads the window's attainment as its own — the cold start's misses (requests that waited for a pod) once
    raised H ×1.49 at every wake, and a small fleet seldom loaded to 70 % never brought it back down."""
    if unseen and sum(ready.values()) > 0:
        return 1
    if not before:
        return 0
    delta = sum(ready.values()) - sum(before.get(name, 0) for name in ready)
    if delta == 0 and dict(ready) != dict(before):
        return 0
    return (delta > 0) - (delta < 0)


def _learned(
    views: Sequence[VariantView],
    filters: Mapping[str, ekf.FilterState],
    outcomes: Mapping[str, ekf.Outcome | None],
) -> tuple[dict[str, ekf.FilterState], list[str]]:
    """Each variant's filter after this cycle's observations (the queueing model's step 2), from the outcome of
    each variant that learns (`ekf.learn_many`), and a note for each filter re-fitted after it was lost."""
    states: dict[str, ekf.FilterState] = {}
    notes: list[str] = []
    for view in views:
        name = view.key.name
        previous = filters.get(name)
        outcome = outcomes.get(name)
        if outcome is None:
            # nothing to learn (a profile sizes this variant: `_params`), or no observation this cycle (e.g. the
            # variant is at zero): the filter is kept as it was
            if previous is not None:
                states[name] = previous
            continue
        states[name] = outcome.state
        if outcome.started == "re-fitted" and previous is not None:
            notes.append(f"{name}: filter lost for {previous.lost_cycles} cycles; re-fitted")
    return states, notes


def _learns(view: VariantView, cfg: QueueingConfig) -> bool:
    """Whether the variant's filter learns this cycle: tuning is on and no accelerator profile sizes it."""
    return cfg.tuning_enabled and _profile(view, cfg) is None


def _params(
    view: VariantView, learned: Mapping[str, ekf.FilterState], cfg: QueueingConfig
) -> tuple[ServiceParams | None, str]:
    """The variant's (α, β, γ): its accelerator's profile when one is configured (the operator's measurement,
    stable where the filter's estimates swing with bursty traffic), else the filter's, else unknown. Either
    way the attainment controller corrects what the model gets wrong."""
    profile = _profile(view, cfg)
    if profile is not None:
        return profile, "profile"
    state = learned.get(view.key.name)
    if state is not None:
        return state.params(), "learned"
    return None, "none"


def _profile(view: VariantView, cfg: QueueingConfig) -> ServiceParams | None:
    profile = cfg.accelerator_profiles.get(normalize_accelerator(view.accelerator))
    return None if profile is None else _profile_params(profile.alpha, profile.beta, profile.gamma)


@functools.lru_cache(maxsize=256)
def _profile_params(alpha_ms: float, beta_ms: float, gamma_ms: float) -> ServiceParams:
    """A profile's (α, β, γ) as ServiceParams, validated once: asked twice a variant a cycle (`_learns`, `_params`),
    a new one each time cost ~1.5 µs (three checked fields), 2 % of a decide with profiles. Frozen, so shared.
    Keyed by value, so a β or γ written `-0` and one written `0` share one object: equal in every computation, only
    a figure's JSON could show the other sign of zero."""
    return ServiceParams(alpha_ms, beta_ms, gamma_ms)


def _size(input_tokens: float, output_tokens: float, state: ModelState) -> RequestSize | None:
    """This cycle's request size, else the last one seen (a model at zero replicas still needs one)."""
    if output_tokens >= 1:
        return RequestSize(max(input_tokens, 0.0), output_tokens)
    if state.output_tokens >= 1:
        return RequestSize(state.input_tokens, state.output_tokens)
    return None


def _arrivals_reported(model: ModelInput) -> bool:
    """Whether any pod of the model reported an arrival rate this cycle (0 included: an idle pod reports 0).

    When none did — the first cycle after pods start, a Prometheus that has fewer than two samples in the rate
    window, a scrape gap — the model's arrivals are unknown, not zero, and the forecaster keeps its history as it
    was. Read as zero, such a cycle is a drop to 0 and the next one a jump back, which the trend takes for a ramp:
    on a steady 120 req/s model started from a right-sized fleet (8 + 8 replicas), one zero at the first cycle
    made the forecast read 240 req/s at the sixth and ordered up to 23 A100 replicas, 15 without it (the run's
    cost 31.0 → 27.9 $; docs/predictive.md, section 2)."""
    return any(
        p.arrival_rate_rps is not None and math.isfinite(p.arrival_rate_rps) and p.arrival_rate_rps >= 0
        for p in model.all_pods()
    )


def _backlog(model: ModelInput) -> float:
    """Requests waiting: in the pods' queues and in the EPP's flow-control queue."""
    waiting = sum([usable(p.queue_length) for p in model.all_pods()])  # a list: ~10 pods a VA, every cycle
    epp = model.traffic.epp_queue_size if model.traffic is not None else None
    return waiting + (usable(epp) if epp is not None else 0.0)


def _startup_samples(views: Sequence[VariantView], state: ModelState) -> dict[str, tuple[float, ...]]:
    """The remembered startup durations of each variant with those its ready pods show now (newest last,
    at most `STARTUP_SAMPLES`)."""
    out: dict[str, tuple[float, ...]] = {}
    for view in views:
        name = view.key.name
        seen = list(state.startup_s.get(name, ()))
        for duration in _observed_startups(view):
            if duration not in seen:
                seen.append(duration)
        out[name] = tuple(seen[-STARTUP_SAMPLES:])
    return out


def _observed_startups(view: VariantView) -> tuple[float, ...]:
    """Creation → Ready of the variant's ready pods, seconds (`ScaleTarget.startup_s`, from the inventory)."""
    target = view.target
    samples = target.startup_s if target is not None else ()
    return tuple(float(x) for x in samples if _finite(x) and x >= 0)


def _leads(samples: Mapping[str, Sequence[float]], cfg: QueueingConfig) -> dict[str, float]:
    """Each variant's lead (`_lead_s`); the prior is the longest p90 among the variants with at least
    `SIBLING_SAMPLES`, else `startupTime`."""
    learned = [_p90(s) for s in samples.values() if len(s) >= SIBLING_SAMPLES]
    prior_s = max(learned) if learned else cfg.startup_time_s
    return {name: _lead_s(s, prior_s) for name, s in samples.items()}


def _lead_s(samples: Sequence[float], prior_s: float) -> float:
    """The p90 of a variant's startup durations (at least `SIBLING_SAMPLES`), else the prior or the longest startup
    seen, whichever is longer: one pod that took 12 minutes says a 5-minute default is short, and a few fast ones do
    not say it is long.

    Why the longest: with pods taking 7–12 minutes and the 5-minute default, the first rises of a diurnal load were
    forecast 5 minutes ahead and the replicas came after the peak (a probe: 88–93 % attainment on seeds 0–2, 92–98 %
    with the longest sample). Why not under the prior before 10 samples: the p90 of n < 10 is their largest, below
    the true p90 with probability 0.9ⁿ (n = 3: 73 %, n = 9: 39 %); with 3 samples trusted, an L40S alone on a
    30-minute diurnal (startup median 120 s, p90 300 s) read a lead of 131 s and ordered its second replica after
    the rise had begun: 97.0 → 99.3 % (seed 0; seeds 0–4 +0.6 point, +0.6 % cost). A lead too short costs the SLO,
    one too long costs replica-minutes: the first comes first. No other benchmark, development, held-out or probe
    scenario moved (31 scenarios, seeds 0–1)."""
    if len(samples) < SIBLING_SAMPLES:
        return max([prior_s, *samples])
    return _p90(samples)


def _p90(samples: Sequence[float]) -> float:
    """The 90th percentile, nearest rank: of 10 samples the 9th smallest, of 3 the largest."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]


def _attainment(traffic: ModelTraffic | None, slo: Slo) -> tuple[float | None, float]:
    """The share of the window's requests within both targets (the lower bound from the two marginals,
    adapter.domain.latency) and the completions behind it; (None, 0) without both histograms."""
    latency = traffic.latency if traffic is not None else None
    if latency is None or latency.ttft is None:
        return None, 0.0
    measured = latency.attainment_lower_bound(
        ttft_target_s=slo.target_ttft_ms / 1000.0, tpot_target_s=slo.target_itl_ms / 1000.0
    )
    return measured, latency.ttft.total_rps * latency.window_s


def _bucket_bracket(traffic: ModelTraffic | None, slo: Slo, target: float) -> tuple[list[float] | None, str]:
    """Where the window's attainment can lie given the bucket edges, and advice when that is on both sides of
    `target`; (None, "") when both targets are bucket edges (the reading is exact) or there is no evidence.

    Inside a bucket the measure assumes its requests spread evenly (adapter/domain/latency.py), so a target
    between two edges reads an estimate: the truth is anywhere between the lower bounds at the edges below and
    above it. Example: a 45-ms TPOT target between the 25- and 50-ms edges, every request at 30–40 ms: the
    buckets say 87 % to 100 %, the estimate 97.5 % (a fifth of the bucket counted above 45 ms), so the controller
    raised the headroom of a fleet that met its SLO. The bracket tells the reader how far to trust it."""
    latency = traffic.latency if traffic is not None else None
    if latency is None or latency.ttft is None or latency.tpot is None:
        return None, ""
    ttft_s, tpot_s = slo.target_ttft_ms / 1000.0, slo.target_itl_ms / 1000.0
    targets = (("TTFT", latency.ttft, ttft_s), ("TPOT", latency.tpot, tpot_s))
    off_edge = [(name, hist, t) for name, hist, t in targets if not hist.is_edge(t)]
    edges = latency.attainment_bracket(ttft_target_s=ttft_s, tpot_target_s=tpot_s)
    if not off_edge or edges is None:
        return None, ""
    low, high = edges
    bracket = [round(low, 6), round(high, 6)]
    if not low < target <= high:
        return bracket, ""
    where = "; ".join(
        f"{name} {t * 1000:g} ms is between the edges {_edge_ms(hist.edges_s, t, below=True)} and "
        f"{_edge_ms(hist.edges_s, t, below=False)} ms"
        for name, hist, t in off_edge
    )
    return bracket, (
        f"the latency buckets put attainment between {low:.1%} and {high:.1%}, either side of the "
        f"{target:.1%} target ({where}): add an edge at each target (vLLM --custom-histogram-buckets) to measure it"
    )


def _edge_ms(edges_s: Sequence[float], target_s: float, *, below: bool) -> str:
    """The bucket edge just below (or above) a target, in ms ("0" below the first, "+Inf" above the last)."""
    if below:
        return f"{max((e for e in edges_s if e < target_s), default=0.0) * 1000:g}"
    above = [e for e in edges_s if e > target_s]
    return f"{above[0] * 1000:g}" if above else "+Inf"


def _window_s(traffic: ModelTraffic | None) -> float:
    latency = traffic.latency if traffic is not None else None
    return latency.window_s if latency is not None else 300.0


def _finite(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _checkpointed(model: ModelInput, cycle: _Cycle, now_s: float) -> tuple[ModelState, dict[str, dict[str, Any]]]:
    """The model's state for memory, and the `status.learned` sections to write this cycle: every VA's copy of the
    state and each learning variant's filter when a checkpoint is due (`CHECKPOINT_INTERVAL_S`), else none (the VAs'
    status keeps the last checkpoint).

    Due at the model's first analysis by this leader, then whenever `CHECKPOINT_INTERVAL_S` has passed since the
    last. The first is counted as written `_checkpoint_phase_s` earlier than it was, so that a fleet seen at once
    checkpoints spread over the interval, not all in one cycle. Example: interval 300 s, a model whose phase is
    120 s, first analysed at t = 1,000 ⇒ written at 1,000 (counted 880), then at 1,180, 1,480, …"""
    state = cycle.state
    last = state.checkpointed_s
    if last is not None and now_s - last < CHECKPOINT_INTERVAL_S:
        return state, {}
    shared = state.to_json()
    persist = {
        v.key.name: {
            LEARNED_SECTION: shared,
            **({FILTER_SECTION: cycle.filters[v.key.name].to_json()} if v.key.name in cycle.filters else {}),
        }
        for v in model.views
    }
    counted_s = now_s - _checkpoint_phase_s(model.model) if last is None else now_s
    return replace(state, checkpointed_s=counted_s), persist


def _checkpoint_phase_s(model: ModelKey) -> float:
    """Where in the checkpoint interval the model's checkpoints fall: a fixed fraction of `CHECKPOINT_INTERVAL_S`
    from a CRC-32 of its name (the same in every process and every leader, unlike `hash`)."""
    return CHECKPOINT_INTERVAL_S * (zlib.crc32(_model_text(model).encode()) / 2**32)


def _model_text(model: ModelKey) -> str:
    return f"{model.namespace}/{model.model_id}"


ANALYZER = Predictive()
