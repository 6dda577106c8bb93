"""What the engine decides, per variant, and why.

A decision always has a reason. "No new decision" is also a value: the engine then holds a previous or
safe allocation and says so in `reason` and `path`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from adapter.domain.frozen import fast_init
from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.snapshot import Condition, DecisionPath, DesiredAlloc, Recommendation


class Action(StrEnum):
    SCALE_UP = "scale-up"
    SCALE_DOWN = "scale-down"
    NO_CHANGE = "no-change"

    @classmethod
    def of(cls, *, target: int, current: int) -> Action:
        if target > current:
            return cls.SCALE_UP
        if target < current:
            return cls.SCALE_DOWN
        return cls.NO_CHANGE


class CycleKind(StrEnum):
    """What produced a cycle's decisions."""

    DECIDE = "decide"
    """A full engine cycle: every VA decided (`engine.decide`)."""
    SCALE_FROM_ZERO = "scale-from-zero"
    """A scale-from-zero poll between cycles: only woken VAs (`engine.wake`)."""


class AnalyzerName(StrEnum):
    SATURATION_PERCENTAGE = "saturation-percentage-based"
    SATURATION_TOKEN = "saturation-token-based"
    QUEUEING_MODEL = "queueing-model"
    PREDICTIVE = "predictive"
    NONE = "none"
    """No analyzer ran (fallback, last resort, scale-from-zero)."""


_NUMBER = r"\d+(?:\.\d+)?"
_UNIT = r"(?:ms|µs|ns|h|m|s)"
_NUMBERS = re.compile(rf"{_NUMBER}(?:{_UNIT}(?:{_NUMBER}{_UNIT})*)?")
"""A number, or a duration of number-unit pairs (`1m30s`). Written to begin with the number: the same matches as
`(?:N U)+|N`, whose leading group the regex engine tries at every position of the text (3× slower, ~3 % of a
decide with the predictive analyzer, two reasons a VA a cycle: `engine.enforce.alloc_for`)."""


def reason_family(reason: str) -> str:
    """The template of a reason: its text with every number and duration replaced by `#`.

    `lastUpdate` moves only when the replica count or the reason's family changes, so a reason that
    quotes a growing elapsed time ("… (1m30s < 5m) …") cannot keep resetting the retention clock.
    >>> reason_family("Optimizer returned 0 but retention period not exceeded (1m30s < 5m), preserving allocation")
    'Optimizer returned # but retention period not exceeded (# < #), preserving allocation'
    """
    return _NUMBERS.sub("#", reason)


@fast_init
@dataclass(frozen=True, slots=True)
class VariantDecision:
    """The desired replica count for one VA, with the evidence a user needs to trust it."""

    key: VariantKey
    model_id: str
    desired_replicas: int
    current_replicas: int
    reason: str
    path: DecisionPath
    analyzer: AnalyzerName
    accelerator: str = ""
    cost: float = 0.0
    metrics_available: bool = True
    conditions: tuple[Condition, ...] = ()
    notes: tuple[str, ...] = ()
    """Extra, human-readable facts (e.g. "transition to 11 not applied after 5m0s; re-deciding")."""
    recommendation: Recommendation | None = None
    """The recommender's bounds for this variant (served as `wva_recommended_replicas`), once it has one."""

    @property
    def action(self) -> Action:
        return Action.of(target=self.desired_replicas, current=self.current_replicas)

    @property
    def desired_ratio(self) -> float:
        """desired/current, or desired when current is 0 (upstream's rule)."""
        if self.current_replicas == 0:
            return float(self.desired_replicas)
        return self.desired_replicas / self.current_replicas


@fast_init
@dataclass(frozen=True, slots=True)
class ModelAnalysis:
    """An analyzer's report for one model, as shown by `replay` (DESIGN §3.2 `analysis` fields)."""

    model: ModelKey
    analyzer: AnalyzerName
    analysis: Mapping[str, Any] = field(default_factory=dict)
    required_capacity: float | None = None
    """The capacity signal's required capacity, in `unit` (None: no signal this cycle)."""
    spare_capacity: float | None = None
    unit: str = ""


@dataclass(frozen=True, slots=True)
class GpuPoolUsage:
    """One accelerator pool this cycle: what nodes offer, what VAs hold now, what the decisions ask for."""

    allocatable_gpus: int
    used_gpus: int
    desired_gpus: int


@dataclass(frozen=True, slots=True)
class CycleResult:
    """Everything one engine cycle produced."""

    now_s: float
    decisions: Mapping[VariantKey, VariantDecision]
    analyses: Mapping[ModelKey, ModelAnalysis]
    warnings: tuple[str, ...] = ()
    errors: Mapping[ModelKey, str] = field(default_factory=dict)
    """Models whose decision raised (a bug): held at their previous allocation, the error in their reason."""
    gpu_pools: Mapping[str, GpuPoolUsage] = field(default_factory=dict)
    """Per normalised accelerator (nodes with GPUs, or VAs that name one)."""
    learned: Mapping[VariantKey, Mapping[str, Any]] = field(default_factory=dict)
    """Sections of `status.learned` this cycle rewrites, per VA (other sections are kept)."""
    recommendations: Mapping[VariantKey, Recommendation] = field(default_factory=dict)
    allocations: Mapping[VariantKey, DesiredAlloc] = field(default_factory=dict)
    """Each decision as persisted (`status.desiredOptimizedAlloc`) and remembered (`EngineState.allocations`):
    computed once, so the two never disagree on `lastUpdate`."""
    kind: CycleKind = CycleKind.DECIDE
