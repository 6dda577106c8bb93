"""The analyzer protocol: one shape for every analyzer, so the engine only dispatches.

    engine, per model ──► registry.choose(configuration)                        which analyzer
                     ──► analyzer.configure(model)                          → its config, config warnings
        all models   ──► analyzer.prepare(models, memory, now_s)           → the memory its analyses get
                                                                       (an analyzer that `prepares`)
                     ──► analyzer.analyze(model, config, memory, now_s)     → Analysis:
                             a CapacitySignal for the allocation step, or the reason there is none;
                             notes; this model's update to the analyzer's memory; the `status.learned`
                             sections to persist; the Wording of the decisions it leads to

`ModelInput` is everything an analyzer sees of one model this cycle: its variants (spec, VA status with
`status.learned`, scale target), its usable pod samples, its traffic (request count, EPP queue), the previous
allocation of each variant, and its configuration. The engine keeps one memory slot per analyzer
(`adapter.analyzers.memory.Memory`), writes the `status.learned` sections an analysis returns (so a new leader
resumes from them), hands the signal to the allocation step, and words each decision with the analysis's
`Wording`. It never looks inside an analyzer.

Adding an analyzer (the predictive policy of issue 18, say):
1. `adapter/analyzers/<name>.py` (or a package) with its config (`configure`), its memory type and `Memory`
   (how the models' updates merge each cycle, its JSON form for the flight recorder), its `analyze`, its
   `prepares` / `prepare` (from `Unprepared`, unless it has work to do for many models at once), and one object
   satisfying `Analyzer`;
2. one entry in `adapter/analyzers/registry.py`, and the rule that selects it there;
3. its `AnalyzerName` member (domain vocabulary) and, when an `analyzerName` value selects it, that value in
   the saturation ConfigMap's schema (`adapter/config/configmaps.py`).
Nothing in adapter/engine/ changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from adapter.analyzers.memory import Memory
from adapter.config.configmaps import ConfigSet, SaturationConfig
from adapter.domain.capacity import CapacitySignal
from adapter.domain.decision import Action, AnalyzerName
from adapter.domain.frozen import fast_init
from adapter.domain.ids import ModelKey
from adapter.domain.snapshot import DesiredAlloc, ModelTraffic, PodMetrics, VariantView

C = TypeVar("C")
M = TypeVar("M")


@fast_init
@dataclass(frozen=True, slots=True)
class ModelInput:
    """What an analyzer sees of one model (every VA sharing `modelID` in a namespace) this cycle."""

    model: ModelKey
    views: tuple[VariantView, ...]
    """The model's variants, sorted by name."""
    pods: Mapping[str, tuple[PodMetrics, ...]]
    """Usable pod samples per variant name (KV-cache or queue data, finite and non-negative); every variant has
    an entry, possibly empty. Samples the engine dropped are in its notes, not here."""
    traffic: ModelTraffic | None
    """Requests over the retention window and the EPP flow-control queue; None when nothing was collected."""
    previous: Mapping[str, DesiredAlloc | None]
    """Each variant's previous allocation: this process's memory when it is newer, else the VA status."""
    configmaps: ConfigSet
    """Every WVA ConfigMap, for an analyzer that reads its own (`configure`)."""
    saturation: SaturationConfig
    """The model's resolved `wva-saturation-scaling-config` entry: the percentage- and token-based thresholds
    and the model-wide settings (priority, scaleDownFloor, transitionTimeout)."""
    saturation_warnings: tuple[str, ...] = ()
    """Problems with that ConfigMap for this model (an analyzer that reads it reports them)."""
    hold_reasons: tuple[str, ...] = ()
    """One per variant whose every sample was invalid this cycle: its capacity is unknown."""

    def all_pods(self) -> list[PodMetrics]:
        """Every usable sample of the model, variant by variant in name order."""
        return [p for view in self.views for p in self.pods.get(view.key.name, ())]


class Wording(Protocol):
    """How the decisions an analysis leads to read: reasons per variant and the OptimizationReady condition."""

    @property
    def condition_reason(self) -> str:
        """OptimizationReady's reason on the optimizer path (e.g. OptimizationSucceeded)."""
        ...

    @property
    def condition_prefix(self) -> str:
        """Put before OptimizationReady's message on the optimizer path ("" for none)."""
        ...

    def reasons(self, targets: Mapping[str, int], limited: Mapping[str, str], optimizer: str) -> dict[str, str]:
        """The reason of each variant's target after allocation; `limited`: what the GPU limiter did, per variant."""
        ...

    def enforced(self, action: Action, applied: str, optimizer: str) -> str:
        """The reason of a target the enforcer changed (`applied` says what it did)."""
        ...


@fast_init
@dataclass(frozen=True, slots=True)
class Analysis(Generic[M]):
    """An analyzer's answer for one model this cycle. Build it with `measured` or `unmeasured`."""

    signal: CapacitySignal | None
    """For the allocation step; None: no signal this cycle, the fallback hierarchy decides."""
    wording: Wording | None
    figures: Mapping[str, Any]
    """The DESIGN §3.2 `analysis` fields `replay` prints (with no signal: `reason` and what was measured)."""
    no_signal_reason: str = ""
    notes: tuple[str, ...] = ()
    """Facts for the decisions' notes."""
    held: tuple[str, ...] = ()
    """Why the analyzer held the model (e.g. a transition in progress), for OptimizationReady's message."""
    memory: M | None = None
    """This model's update to the analyzer's memory (merged by its `Memory.next`); None: nothing to add."""
    learned: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per variant name, the `status.learned` sections to write (what a new leader must not lose)."""

    @classmethod
    def measured(
        cls,
        signal: CapacitySignal,
        wording: Wording,
        *,
        notes: tuple[str, ...] = (),
        held: tuple[str, ...] = (),
        memory: M | None = None,
        learned: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Analysis[M]:
        return cls(signal, wording, signal.analysis, "", notes, held, memory, learned or {})

    @classmethod
    def unmeasured(
        cls,
        reason: str,
        *,
        figures: Mapping[str, Any] | None = None,
        notes: tuple[str, ...] = (),
        memory: M | None = None,
        learned: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Analysis[M]:
        """No signal this cycle, and why (the reason is also the last note)."""
        return cls(
            None, None, {"reason": reason, **(figures or {})}, reason, (*notes, reason), (), memory, learned or {}
        )


class Analyzer(Protocol[C, M]):
    """One analyzer: its name, its memory, its configuration and its analysis (module docstring)."""

    @property
    def name(self) -> AnalyzerName: ...

    @property
    def memory(self) -> Memory[M]: ...

    @property
    def reads(self) -> frozenset[str]:
        """The `PodMetrics` and `ModelTraffic` fields its analyses read beyond the engine's own (the collector asks
        for no other: `adapter.engine.analyze.reads`). A field read but not listed here is None in production."""
        ...

    @property
    def prepares(self) -> bool:
        """Whether `prepare` does work for many models at once: the engine then frames this analyzer's models of the
        whole fleet and prepares them in one call before deciding block by block; otherwise it never calls it."""
        ...

    def configure(self, model: ModelInput) -> tuple[C, tuple[str, ...]]:
        """The analyzer's configuration for this model, and the problems found in it (the VA's
        OptimizationReady condition shows them, whether or not metrics arrive this cycle)."""
        ...

    def prepare(self, models: Sequence[tuple[ModelInput, C]], memory: M, now_s: float) -> M:
        """Work done for many models at once before each is analysed, returned in the memory `analyze` then gets
        (the queueing and predictive analyzers learn every variant's α, β, γ in lockstep here); the memory as it is
        for an analyzer without such work. Whatever `prepare` leaves out, `analyze` does for its model alone, so a
        failed `prepare` (the engine then passes the memory as it was) costs time, never a decision."""
        ...

    def analyze(self, model: ModelInput, config: C, memory: M, now_s: float) -> Analysis[M]:
        """The model's capacity signal, or the reason there is none. Pure; never raises on bad metrics."""
        ...


class Unprepared(Generic[C, M]):
    """`prepares` and `prepare` of an analyzer with no work for many models at once (V1 and V2; the queueing and
    predictive analyzers learn every variant of the fleet at once): the engine never calls `prepare` for it."""

    __slots__ = ()
    prepares = False

    def prepare(self, models: Sequence[tuple[ModelInput, C]], memory: M, now_s: float) -> M:
        """The memory as it is: each model's analysis does all of its work."""
        del models, now_s
        return memory


# ---- shared by the analyzers that measure capacity (the allocation step picks the replicas) ----------------


@fast_init
@dataclass(frozen=True, slots=True)
class CapacityWording:
    """Reasons for capacity-signal decisions, e.g. `V2 scale-up (optimizer: cost-aware, required: 1882 tokens)`."""

    label: str
    """The analyzer as reasons name it ("V2", "queueing-model")."""
    signal: CapacitySignal
    condition_reason: str = "OptimizationSucceeded"
    condition_prefix: str = ""

    def reasons(self, targets: Mapping[str, int], limited: Mapping[str, str], optimizer: str) -> dict[str, str]:
        signal, label = self.signal, self.label
        out: dict[str, str] = {}
        for variant in signal.variants:
            action = Action.of(target=targets[variant.name], current=variant.current_replicas)
            if action is Action.SCALE_UP:
                reason = f"{label} scale-up (optimizer: {optimizer}, required: {_num(signal.required)} {signal.unit})"
            elif action is Action.SCALE_DOWN:
                reason = f"{label} scale-down (optimizer: {optimizer}, spare: {_num(signal.spare)} {signal.unit})"
            elif signal.required > 0:
                reason = (
                    f"{label} no-change (required: {_num(signal.required)} {signal.unit} placed elsewhere or unmet)"
                )
            else:
                reason = f"{label} steady state"
            if variant.name in limited:
                reason += f"; {limited[variant.name]}"
            out[variant.name] = reason
        return out

    def enforced(self, action: Action, applied: str, optimizer: str) -> str:
        return f"{self.label} {action} (optimizer: {optimizer}, enforced: {applied})"


def _num(value: float) -> str:
    """Capacity in a reason: whole tokens, or three significant figures for small rates."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
