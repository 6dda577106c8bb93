"""The pure decision pipeline: `decide(snapshot, state, config, now_s) -> (CycleResult, EngineState)`.

    first:       the models of an analyzer that `prepares` (the queueing and predictive ones) framed, and its work
                 for all of them done at once (the EKF over every variant of the fleet in one lockstep, the
                 predictive analyzer's λ* in another: engine/analyze.py)
    per model:   configuration ─► the analyzer it selects (adapter/analyzers/registry.py) ─► capacity signal,
                 or "no signal" with a reason
    all models:  allocation (cost-aware | GPU-limited fair share | exact MILP) over the shared GPU pools, without
                 the variants asked to leave zero replicas that nothing woke (adapter/engine/unwoken.py)
    per model:   enforcer (scale-to-zero / minimum one) ─► retention protection ─► bounds ─► decision + status
                 (no signal: the seed-002 fallback hierarchy instead)
    then:        each analyzer's memory for the next cycle (its `Memory.next` over the models it analysed), the
                 `status.learned` sections the analyses return, the recommender's histories, the variants at zero
                 asked for replicas

When every model's allocation is its own (cost-aware, GPUs unlimited), the three per-model steps run block by
block of models (`BLOCK_VAS`), so that each block is still in the CPU's caches from its first step to its last;
the result is the one a single block gives. The first step is not blocked: a lockstep of 64 VAs' variants paid
its fixed cost once a block (learning at 1,000 VAs 387 µs a VA against 274 over the whole fleet), and framing
only the models of an analyzer that prepares leaves the others' framing in their blocks.

Models are decided in isolation: an exception while deciding one model (a bug) holds that model at its
previous allocation with the error in its reason and condition, and the others are decided as usual. The
engine reads no clock, file, environment or network: `now_s` and everything else come in as values, and the
next `EngineState` goes out as a value. Results never depend on the order of variants, pods or models.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from adapter.analyzers import registry
from adapter.config.engine import EngineConfig
from adapter.domain.accelerators import normalize_accelerator
from adapter.domain.capacity import GpuPools
from adapter.domain.decision import AnalyzerName, CycleResult, GpuPoolUsage, ModelAnalysis, VariantDecision
from adapter.domain.ids import MODEL_ORDER, ModelKey, VariantKey
from adapter.domain.snapshot import (
    Condition,
    DesiredAlloc,
    PodMetrics,
    Recommendation,
    Snapshot,
    VariantStatus,
    VariantView,
)
from adapter.engine import recommend, unwoken
from adapter.engine.analyze import Framed, ModelPlan, frame_model, measure_model, prepare
from adapter.engine.enforce import ModelOutcome, failsafe, finish, outcome_of
from adapter.engine.state import EngineState
from adapter.optimizer.allocate import allocate
from adapter.recommender.recommender import VariantHistory

MAX_ERROR_CHARS = 200


def decide(
    snapshot: Snapshot, state: EngineState, config: EngineConfig, now_s: float
) -> tuple[CycleResult, EngineState]:
    models = snapshot.variants_by_model()
    pods_by_variant = snapshot.pods_by_variant()
    mode = config.configmaps.allocation()
    gpus = GpuPools.of(snapshot.nodes, snapshot.variants)
    plans: dict[ModelKey, ModelPlan] = {}
    finish_errors: dict[ModelKey, str] = {}
    histories: dict[VariantKey, VariantHistory] = {}
    recommendations: dict[VariantKey, Recommendation] = {}
    recommended_learned: dict[VariantKey, Mapping[str, Any]] = {}
    decisions: dict[VariantKey, VariantDecision] = {}
    analyses: dict[ModelKey, ModelAnalysis] = {}
    new_allocations: dict[VariantKey, DesiredAlloc] = {}

    ordered = sorted(models.items(), key=_by_model)
    # 1a. the models of the analyzers that do work for many models at once (`Analyzer.prepares`: the queueing and
    #     predictive analyzers' learning), framed and prepared over the whole fleet: one batch, not one a block
    cycle = _Cycle(snapshot, pods_by_variant, state, config, now_s)
    early = _prepared(ordered, cycle)
    measure_errors, warnings = dict(early.errors), list(early.warnings)

    for block in _blocks(ordered, independent=mode.independent):
        # 1b. measure: one plan per model (the other models framed here, block by block)
        block_plans = _measure(block, early, measure_errors, cycle)
        plans.update(block_plans)

        # 1c. remember: the recommender's histories; its optional floor on scale-down
        recommended = recommend.observe(block_plans, state.recommender, now_s)
        histories.update(recommended.histories)
        recommendations.update(recommended.recommendations)
        recommended_learned.update(recommended.learned)
        floored = {m: recommend.with_floor(p, recommended.histories) for m, p in block_plans.items()}

        # 2. allocate: the block's signals (every model's at once when GPU pools or the exact program couple them),
        #    without the variants that nothing wakes from zero
        shut = {m: unwoken.blocked(state.unwoken, views, now_s) for m, views in block} if state.unwoken else {}
        allocations = allocate(
            [unwoken.restrict(s, shut.get(m, {})) for m, s in floored.items() if s is not None], mode=mode, gpus=gpus
        )

        # 3. enforce and finish, per model
        for model, views in block:
            plan = block_plans.get(model)
            try:
                if plan is None:
                    raise _Failed(measure_errors[model])
                outcome = outcome_of(plan, allocations.get(model), snapshot.models.get(model), now_s=now_s)
                asleep = shut.get(model)
                wake_notes = (
                    tuple(unwoken.note(v, asleep[v.key.name], now_s) for v in views if v.key.name in asleep)
                    if asleep
                    else ()
                )
                finished = [
                    finish(
                        view,
                        outcome.held[view.key.name],
                        outcome=outcome,
                        config_warnings=plan.config_warnings,
                        state=state,
                        now_s=now_s,
                        recommendation=recommendations.get(view.key),
                        not_woken=wake_notes,
                    )
                    for view in views
                ]
                warnings.extend(plan.config_warnings + wake_notes)
            except Exception as exc:
                error = measure_errors.get(model) or finish_errors.setdefault(model, _describe(exc))
                outcome, finished = _failed(views, state, error, now_s, recommendations)
            failed = model in measure_errors or model in finish_errors
            signal = plan.signal if plan is not None and not failed else None
            analyses[model] = ModelAnalysis(
                model,
                outcome.analyzer,
                outcome.analysis,
                signal.required if signal else None,
                signal.spare if signal else None,
                str(signal.unit) if signal else "",
            )
            for decision, alloc in finished:
                decisions[decision.key] = decision
                new_allocations[decision.key] = alloc

    measure_errors = {m: measure_errors[m] for m, _ in ordered if m in measure_errors}  # in the models' order
    errors = {**measure_errors, **finish_errors}  # as one pass would order them: measuring's, then finishing's
    learned: dict[VariantKey, dict[str, Any]] = {k: dict(v) for k, v in recommended_learned.items()}
    for model, plan in plans.items():
        for name, sections in (plan.result.learned if plan.result is not None else {}).items():
            learned.setdefault(VariantKey(model.namespace, name), {}).update(sections)
    result = CycleResult(
        now_s,
        decisions,
        analyses,
        tuple(dict.fromkeys(warnings)),
        errors,
        _pool_usage(gpus, snapshot, decisions),
        learned,
        dict(recommendations),
        new_allocations,
    )
    kept = {k: h for k, h in histories.items() if k in decisions}
    asked = unwoken.advance(state.unwoken, snapshot.variants, decisions, now_s)
    return result, EngineState(new_allocations, _memories(plans, state, set(decisions), now_s), kept, asked)


class _Early(NamedTuple):
    """Stage 1a (`_prepared`): the models framed before the blocks, the errors of those whose framing raised, each
    analyzer's memory for the analyses, and a warning per analyzer whose `prepare` failed."""

    framed: dict[ModelKey, Framed]
    errors: dict[ModelKey, str]
    memories: dict[AnalyzerName, Any]
    warnings: list[str]


class _Cycle(NamedTuple):
    """What every model's measuring reads: the snapshot, its pods by variant, the engine state, the config, now."""

    snapshot: Snapshot
    pods_by_variant: Mapping[VariantKey, list[PodMetrics]]
    state: EngineState
    config: EngineConfig
    now_s: float


def _prepared(models: Sequence[tuple[ModelKey, Sequence[VariantView]]], cycle: _Cycle) -> _Early:
    """The models whose analyzer `prepares`, framed, and their analyzers' `prepare` over all of them at once. A
    failed `prepare` (a bug) leaves that analyzer's memory as it was, and each of its models then does that work
    alone in its analysis: a warning, never a model's error."""
    framed, errors = _frame([(m, v) for m, v in models if _prepares(m, cycle.config)], cycle)
    memories, failures = prepare(list(framed.values()), cycle.state, cycle.now_s)
    warnings = [
        f"{name}: preparing the models at once failed ({_describe(exc)}); each analysed alone" for name, exc in failures
    ]
    return _Early(framed, errors, memories, warnings)


def _prepares(model: ModelKey, config: EngineConfig) -> bool:
    """Whether the analyzer the model's configuration selects prepares for many models at once; False when that
    cannot be told (the model's framing then reports the error)."""
    try:
        saturation, _ = config.configmaps.saturation(model)
        return registry.choose(config.configmaps, model, saturation).prepares
    except Exception:  # framing raises it again, as the model's error
        return False


def _measure(
    block: Sequence[tuple[ModelKey, Sequence[VariantView]]], early: _Early, errors: dict[ModelKey, str], cycle: _Cycle
) -> dict[ModelKey, ModelPlan]:
    """Each model's plan (`measure_model`): framed before the blocks (`_prepared`) or here. A model whose framing or
    analysis raises (a bug) gets its error in `errors` instead, and the others are measured as usual."""
    framed, frame_errors = _frame([(m, v) for m, v in block if m not in early.framed and m not in errors], cycle)
    errors.update(frame_errors)
    plans: dict[ModelKey, ModelPlan] = {}
    for model, _ in block:
        ready = early.framed.get(model) or framed.get(model)
        if ready is not None:
            try:
                plans[model] = measure_model(ready, memories=early.memories, state=cycle.state, now_s=cycle.now_s)
            except Exception as exc:  # a bug for one model must not stop the others (issue 10)
                errors[model] = _describe(exc)
    return plans


def _frame(
    models: Sequence[tuple[ModelKey, Sequence[VariantView]]], cycle: _Cycle
) -> tuple[dict[ModelKey, Framed], dict[ModelKey, str]]:
    """Each model framed (`frame_model`), and the error of each model whose framing raised (a bug)."""
    errors: dict[ModelKey, str] = {}
    framed: dict[ModelKey, Framed] = {}
    for model, views in models:
        try:
            framed[model] = frame_model(
                model,
                views,
                snapshot=cycle.snapshot,
                pods_by_variant=cycle.pods_by_variant,
                state=cycle.state,
                config=cycle.config,
            )
        except Exception as exc:  # a bug for one model must not stop the others (issue 10)
            errors[model] = _describe(exc)
    return framed, errors


BLOCK_VAS = 64
"""Models are decided in blocks of at least this many VAs — measured, remembered, allocated, enforced and finished
before the next block starts — so that a block's views, pods, plans and histories are still in the CPU's caches
when its decisions are written. Why: one pass per stage over 10,000 VAs no longer fits them, and each VA cost ~7 %
more than at 1,000 VAs, in every stage alike, while a 1,000-VA subset of the same fleet decided alone in the same
process did not (docs/benchmarks/scale.md). Measured paired (tests/bench_decide_scale.py), 1k → 10k VAs: 10.8× in
one block, 10.6× / 10.4× / 10.4× / 10.2× with blocks of 256 / 128 / 32 / 64 VAs. Only when each model's allocation
depends on its own signal alone (`AllocationMode.independent`); otherwise one block holds every model, as the GPU
limiter and the exact program need. The result is the same either way (tests/core/test_decide_blocks.py)."""


def _blocks(
    models: Sequence[tuple[ModelKey, Sequence[VariantView]]], *, independent: bool
) -> list[Sequence[tuple[ModelKey, Sequence[VariantView]]]]:
    """Consecutive runs of `models` (in their order) of at least `BLOCK_VAS` VAs each, the last one shorter; one
    run of them all unless `independent`."""
    if not independent:
        return [models]
    blocks: list[Sequence[tuple[ModelKey, Sequence[VariantView]]]] = []
    start = count = 0
    for i, (_, views) in enumerate(models):
        count += len(views)
        if count >= BLOCK_VAS:
            blocks.append(models[start : i + 1])
            start, count = i + 1, 0
    if start < len(models):
        blocks.append(models[start:])
    return blocks


def _memories(
    plans: Mapping[ModelKey, ModelPlan], state: EngineState, decided: set[VariantKey], now_s: float
) -> dict[AnalyzerName, Any]:
    """Every analyzer's memory for the next cycle: its `Memory.next` over the updates of the models it analysed
    (each analyzer's memory moves every cycle, e.g. to expire old entries); empty memories are not kept."""
    out: dict[AnalyzerName, Any] = {}
    for analyzer in registry.ANALYZERS:
        updates = [
            p.result.memory
            for p in plans.values()
            if p.analyzer.name is analyzer.name and p.result is not None and p.result.memory is not None
        ]
        memory = analyzer.memory.next(state.memory(analyzer), updates, decided=decided, now_s=now_s)
        if memory != analyzer.memory.empty():
            out[analyzer.name] = memory
    return out


class _Failed(Exception):
    pass


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if not isinstance(exc, _Failed) else str(exc)
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def _failed(
    views: Sequence[VariantView],
    state: EngineState,
    error: str,
    now_s: float,
    recommendations: Mapping[VariantKey, Recommendation],
) -> tuple[ModelOutcome, list[tuple[VariantDecision, DesiredAlloc]]]:
    held = failsafe(views, state, error)
    outcome = ModelOutcome(
        held,
        AnalyzerName.NONE,
        {"error": error},
        "MetricsFound",
        (f"internal error: {error}",),
        unavailable_reason="InternalError",
    )
    return outcome, [
        finish(
            view,
            held[view.key.name],
            outcome=outcome,
            config_warnings=(),
            state=state,
            now_s=now_s,
            recommendation=recommendations.get(view.key),
        )
        for view in views
    ]


def _pool_usage(
    gpus: GpuPools, snapshot: Snapshot, decisions: Mapping[VariantKey, VariantDecision]
) -> dict[str, GpuPoolUsage]:
    """Per pool: allocatable and used (this cycle's `GpuPools`), and what the decisions ask for."""
    desired: dict[str, int] = {}
    for v in snapshot.variants:
        accelerator = normalize_accelerator(v.accelerator)
        d = decisions.get(v.key)
        if accelerator and d is not None:
            gpr = max(1, v.target.gpus_per_replica) if v.target else 1
            desired[accelerator] = desired.get(accelerator, 0) + d.desired_replicas * gpr
    return {a: GpuPoolUsage(gpus.allocatable.get(a, 0), gpus.used.get(a, 0), desired.get(a, 0)) for a in gpus.names}


def statuses(result: CycleResult, snapshot: Snapshot) -> dict[VariantKey, VariantStatus]:
    """The VA statuses a cycle (or a scale-from-zero poll) implies (what the leader writes), keyed by VA."""
    previous = {v.key: v.status for v in snapshot.variants}
    out: dict[VariantKey, VariantStatus] = {}
    for key, decision in result.decisions.items():
        prev = previous.get(key, VariantStatus())
        learned = {**prev.learned, **result.learned.get(key, {})}
        out[key] = VariantStatus(
            desired=result.allocations[key],
            applied=decision.current_replicas == decision.desired_replicas,
            # a decision that states no conditions (a scale-from-zero wake) leaves the VA's as they are
            conditions=_merge_conditions(prev.conditions, decision.conditions, result.now_s)
            if decision.conditions
            else prev.conditions,
            recommendation=result.recommendations.get(key, prev.recommendation),
            learned=learned,
        )
    return out


def _merge_conditions(old: Sequence[Condition], new: Sequence[Condition], now_s: float) -> tuple[Condition, ...]:
    """metav1 semantics: lastTransitionTime changes only when a condition's status flips."""
    old_by_type = {c.type: c for c in old}
    merged = []
    for cond in new:
        prev = old_by_type.get(cond.type)
        since = prev.last_transition_s if prev is not None and prev.status == cond.status else now_s
        merged.append(replace(cond, last_transition_s=since))
    return tuple(merged)


def _by_model(item: tuple[ModelKey, Sequence[VariantView]]) -> tuple[str, str]:
    """Model groups in the ModelKeys' order (MODEL_ORDER: tuples compared in C)."""
    return MODEL_ORDER(item[0])
