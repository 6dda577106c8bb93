"""Stage 1: each model framed (configuration, the analyzer's choice, the model's input), each analyzer's work for
many models at once, then each model's analysis.

The engine only dispatches (adapter/analyzers/protocol.py): `frame_model` resolves the model's configuration, keeps
the usable pod samples (a sample with NaN, infinite or negative KV or queue readings is dropped with a note) and
asks the registry which analyzer decides the model; `prepare` hands an analyzer that `prepares` all of its models
at once (the queueing and predictive analyzers learn every variant's α, β, γ there, in one lockstep);
`measure_model` hands the analyzer the model's `ModelInput` and the memory `prepare` returned. The result is a
`ModelPlan`: the analysis (a capacity signal for the allocation step, or the reason there is none), or no analysis
at all when metrics are unavailable or no pod reports — then the fallback hierarchy decides.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from adapter.analyzers import registry
from adapter.analyzers.protocol import Analysis, Analyzer, ModelInput
from adapter.config.configmaps import ConfigSet, SaturationConfig, ScaleToZeroConfig
from adapter.config.engine import EngineConfig
from adapter.domain.capacity import CapacitySignal
from adapter.domain.decision import AnalyzerName
from adapter.domain.frozen import fast_init, replace
from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.snapshot import DesiredAlloc, PodMetrics, Snapshot, VariantView
from adapter.enforcer import fallback
from adapter.enforcer.scale_to_zero import VariantBounds
from adapter.engine.state import EngineState


@fast_init
@dataclass(frozen=True, slots=True)
class ModelPlan:
    model: ModelKey
    views: tuple[VariantView, ...]
    analyzer: Analyzer[Any, Any]
    """The analyzer the configuration selects for the model."""
    saturation: SaturationConfig
    """The model's saturation ConfigMap entry (its scaleDownFloor applies whatever the analyzer)."""
    scale_to_zero: ScaleToZeroConfig
    config_warnings: tuple[str, ...]
    fallback_variants: tuple[fallback.FallbackVariant, ...]
    metrics_reason: str
    """MetricsFound | MetricsMissing | PrometheusError (the MetricsAvailable condition)."""
    sample_notes: tuple[str, ...] = ()
    """One per dropped (invalid) pod sample."""
    result: Analysis[Any] | None = None
    """None: the analyzer did not run (metrics unavailable, or no pod reports)."""

    @property
    def signal(self) -> CapacitySignal | None:
        """None: no solution this cycle; the fallback hierarchy decides."""
        return self.result.signal if self.result is not None else None

    @property
    def analyzer_name(self) -> AnalyzerName:
        """The analyzer that produced the signal; NONE without one."""
        return self.analyzer.name if self.signal is not None else AnalyzerName.NONE

    @property
    def analysis(self) -> Mapping[str, object]:
        if self.result is not None:
            return self.result.figures
        return {
            "reason": "metrics unavailable" if self.metrics_reason == "PrometheusError" else "no pod reports metrics"
        }

    @property
    def notes(self) -> tuple[str, ...]:
        return (*self.sample_notes, *(self.result.notes if self.result is not None else ()))

    @property
    def no_signal_reason(self) -> str:
        return self.result.no_signal_reason if self.result is not None else ""


def previous_alloc(view: VariantView, state: EngineState) -> tuple[DesiredAlloc | None, bool]:
    """The newer of this process's memory and the VA status; True when memory is the source."""
    remembered = state.allocations.get(view.key)
    persisted = view.status.desired
    if remembered is not None and (persisted is None or remembered.last_run_time_s >= persisted.last_run_time_s):
        return remembered, True
    return persisted, remembered is not None


def bounds(view: VariantView) -> VariantBounds:
    spec = view.spec
    return VariantBounds(spec.key.name, spec.cost, spec.min_replicas, spec.max_replicas)


@fast_init
@dataclass(frozen=True, slots=True)
class Framed:
    """A model ready for its analysis: the plan without a result, the analyzer's input and configuration, and
    whether metrics allow an analysis this cycle (`frame_model`)."""

    plan: ModelPlan
    model_input: ModelInput
    analyzer_config: Any

    @property
    def model(self) -> ModelKey:
        return self.plan.model

    @property
    def analyzable(self) -> bool:
        """Metrics collected and some pod reports: the analyzer runs (else the fallback hierarchy decides)."""
        return self.plan.metrics_reason == "MetricsFound"


ENGINE_READS = frozenset({"kv_cache_usage", "queue_length", "request_count"})
"""What the engine reads of every model, whatever its analyzer: the KV and queue readings that make a pod sample
usable (`valid_samples`) and the request count of scale-to-zero (`adapter.engine.enforce`)."""


def reads(configmaps: ConfigSet, model: ModelKey) -> frozenset[str]:
    """The `PodMetrics` and `ModelTraffic` fields a decision for `model` reads under `configmaps`: the engine's own
    and those of the analyzer the configuration selects (as `frame_model` selects it). The reconciler asks the
    collector for these only (`ModelQuery.reads`), so a fleet of the shipped predictive analyzer never queries the
    running-request, KV-geometry and prefix-cache series that only the token-based analyzer reads."""
    saturation, _ = configmaps.saturation(model)
    return ENGINE_READS | registry.choose(configmaps, model, saturation).reads


def frame_model(
    model: ModelKey,
    views: Sequence[VariantView],
    *,
    snapshot: Snapshot,
    pods_by_variant: Mapping[VariantKey, list[PodMetrics]],
    state: EngineState,
    config: EngineConfig,
) -> Framed:
    """The model's configuration, the analyzer it selects, that analyzer's input and configuration."""
    saturation, saturation_warnings = config.configmaps.saturation(model)
    scale_to_zero, s2z_warnings = config.configmaps.scale_to_zero(model)
    previous = {view.key.name: previous_alloc(view, state) for view in views}
    pods, sample_notes, hold_reasons = valid_samples(views, pods_by_variant)
    model_input = ModelInput(
        model=model,
        views=tuple(views),
        pods=pods,
        traffic=snapshot.models.get(model),
        previous={name: alloc for name, (alloc, _) in previous.items()},
        configmaps=config.configmaps,
        saturation=saturation,
        saturation_warnings=tuple(saturation_warnings),
        hold_reasons=tuple(hold_reasons),
    )
    analyzer = registry.choose(config.configmaps, model, saturation)
    analyzer_config, analyzer_warnings = analyzer.configure(model_input)
    if not snapshot.metrics_ok(model):
        metrics_reason = "PrometheusError"
    elif not any(pods.values()):
        metrics_reason = "MetricsMissing"
    else:
        metrics_reason = "MetricsFound"
    plan = ModelPlan(
        model=model,
        views=tuple(views),
        analyzer=analyzer,
        saturation=saturation,
        scale_to_zero=scale_to_zero,
        config_warnings=tuple(dict.fromkeys((*analyzer_warnings, *s2z_warnings))),
        fallback_variants=tuple(
            fallback.FallbackVariant(
                bounds=bounds(view),
                current_replicas=view.target.replicas if view.target else 0,
                target_resolved=view.target is not None,
                previous=previous[view.key.name][0],
                remembered=previous[view.key.name][1],
            )
            for view in views
        ),
        metrics_reason=metrics_reason,
        sample_notes=tuple(sample_notes),
    )
    return Framed(plan, model_input, analyzer_config)


def prepare(
    framed: Sequence[Framed], state: EngineState, now_s: float
) -> tuple[dict[AnalyzerName, Any], list[tuple[AnalyzerName, Exception]]]:
    """Each analyzer's memory for this cycle's analyses: its `prepare` over every analysable model it decides, all
    at once (the queueing and predictive analyzers learn every variant's parameters there, in lockstep). An
    analyzer whose `prepare` raises (a bug) keeps its memory as it was, and each model then does that work alone in
    `analyze`: the failure is returned, never a model's error."""
    groups: dict[AnalyzerName, list[Framed]] = {}
    for f in framed:
        if f.analyzable:
            groups.setdefault(f.plan.analyzer.name, []).append(f)
    memories: dict[AnalyzerName, Any] = {}
    failures: list[tuple[AnalyzerName, Exception]] = []
    for name, members in groups.items():
        analyzer = members[0].plan.analyzer
        memory = state.memory(analyzer)
        try:
            memory = analyzer.prepare([(f.model_input, f.analyzer_config) for f in members], memory, now_s)
        except Exception as exc:  # the models are analysed one by one instead
            failures.append((name, exc))
        memories[name] = memory
    return memories, failures


def measure_model(
    framed: Framed, *, memories: Mapping[AnalyzerName, Any], state: EngineState, now_s: float
) -> ModelPlan:
    """The model's plan with its analysis when metrics allow (`Framed.analyzable`), from the analyzer's prepared
    memory (`prepare`; the engine state's when the analyzer is not in `memories`)."""
    if not framed.analyzable:
        return framed.plan
    analyzer = framed.plan.analyzer
    memory = memories[analyzer.name] if analyzer.name in memories else state.memory(analyzer)
    result = analyzer.analyze(framed.model_input, framed.analyzer_config, memory, now_s)
    return replace(framed.plan, result=result)


def valid_samples(
    views: Sequence[VariantView], pods_by_variant: Mapping[VariantKey, list[PodMetrics]]
) -> tuple[dict[str, tuple[PodMetrics, ...]], list[str], list[str]]:
    """The model's usable pod samples per variant, a note per dropped one, and a hold reason per variant left
    with none."""
    pods: dict[str, tuple[PodMetrics, ...]] = {}
    notes: list[str] = []
    hold_reasons: list[str] = []
    for view in views:
        valid: list[PodMetrics] = []
        invalid = 0
        for pod in pods_by_variant.get(view.key, []):
            if _usable(pod):
                valid.append(pod)
            elif pod.has_saturation_metrics:
                invalid += 1
                notes.append(
                    f"pod {pod.pod}: dropped invalid sample (kv_cache_usage={pod.kv_cache_usage}, "
                    f"queue_length={pod.queue_length})"
                )
        pods[view.key.name] = tuple(valid)
        if invalid and not valid:
            hold_reasons.append(f"{view.key.name}: all {invalid} pod samples invalid")
    return pods, notes, hold_reasons


def _usable(pod: PodMetrics) -> bool:
    """KV usage or queue length reported, and neither NaN, infinite nor negative (0 <= v < inf is false for
    NaN). Written out rather than with `all(...)` over a generator: it runs for every pod (100,000 at 10,000
    VAs)."""
    kv, queue = pod.kv_cache_usage, pod.queue_length
    return (
        (kv is not None or queue is not None)
        and (kv is None or 0.0 <= kv < math.inf)
        and (queue is None or 0.0 <= queue < math.inf)
    )
