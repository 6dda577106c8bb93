"""The analyzer protocol (issue 20): a new analyzer is a module plus a registration, with its own typed memory
slot, its JSON form in the flight recorder's engine state, and its own `status.learned` section, and the engine
dispatches to it unchanged.

The toy analyzer below counts the cycles it has seen each variant (memory), persists the count in VA status
(`learned.toy`), resumes from it after a restart, and sizes the model in requests/s (1 req/s per replica).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import pytest

from adapter.analyzers import memory as state_json
from adapter.analyzers import registry
from adapter.analyzers.protocol import Analysis, Analyzer, CapacityWording, ModelInput
from adapter.domain.capacity import CapacitySignal, CapacityUnit, supply_of
from adapter.domain.decision import AnalyzerName
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import ConditionType, DecisionPath, PodMetrics
from adapter.engine.state import StateFormatError, state_from_json, state_to_json

from .builders import T0, Fleet, condition, key, spec

Counts = Mapping[VariantKey, int]
TOY_NAME = AnalyzerName.QUEUEING_MODEL
"""The toy borrows a name from the closed vocabulary (a real analyzer adds its own member)."""


@dataclass(frozen=True, slots=True)
class CountsMemory:
    section: str = "toy"

    def empty(self) -> Counts:
        return {}

    def next(
        self, previous: Counts, updates: Sequence[Counts], *, decided: AbstractSet[VariantKey], now_s: float
    ) -> Counts:
        merged = {k: v for k, v in previous.items() if k in decided}
        for update in updates:
            merged.update(update)
        return merged

    def to_json(self, memory: Counts) -> dict[str, Any]:
        return {str(k): n for k, n in sorted(memory.items())}

    def from_json(self, doc: Any, path: str) -> Counts:
        out = {}
        for k, n in state_json.obj(doc, path).items():
            if type(n) is not int:
                raise StateFormatError(f"{path}[{k!r}]", "must be an integer")
            out[state_json.variant_key(k, path)] = n
        return out


@dataclass(frozen=True, slots=True)
class ToyAnalyzer:
    name: AnalyzerName = TOY_NAME
    memory: CountsMemory = field(default_factory=CountsMemory)

    def configure(self, model: ModelInput) -> tuple[float, tuple[str, ...]]:
        return 1.0, ("toy: per-replica capacity fixed at 1 req/s",)

    def analyze(self, model: ModelInput, config: float, memory: Counts, now_s: float) -> Analysis[Counts]:
        counts = {}
        for view in model.views:
            seen = memory.get(view.key)
            if seen is None:  # a new process resumes from what the previous leader persisted
                seen = int(view.status.learned.get("toy", {}).get("cycles", 0))
            counts[view.key] = seen + 1
        demand = sum(p.arrival_rate_rps or 0.0 for p in model.all_pods())
        variants = tuple(supply_of(v, per_replica_capacity=config) for v in model.views)
        supply = sum(v.current_replicas * config for v in variants)
        signal = CapacitySignal(
            model=model.model,
            analyzer=TOY_NAME,
            unit=CapacityUnit.REQUESTS_PER_S,
            required=max(0.0, demand - supply),
            spare=max(0.0, supply - demand),
            variants=variants,
            analysis={"demand_rps": demand},
        )
        return Analysis.measured(
            signal,
            CapacityWording("toy", signal),
            notes=("toy analyzed",),
            memory=counts,
            learned={k.name: {"toy": {"cycles": n}} for k, n in counts.items()},
        )


TOY = ToyAnalyzer()


@pytest.fixture
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> ToyAnalyzer:
    """The toy as the only analyzer: what adding a module and a registry entry amounts to."""
    monkeypatch.setattr(registry, "ANALYZERS", (TOY,))
    monkeypatch.setattr(registry, "choose", lambda *args: TOY)
    return TOY


def busy(name: str, rate: float) -> PodMetrics:
    return PodMetrics("llm", f"{name}-0", name, kv_cache_usage=0.1, queue_length=0, arrival_rate_rps=rate)


def test_the_toy_satisfies_the_protocol() -> None:
    analyzer: Analyzer[float, Counts] = TOY  # checked by mypy's structural typing when tests are type-checked
    assert analyzer.memory.section == "toy"


def test_the_engine_dispatches_to_a_registered_analyzer(toy_registered: ToyAnalyzer) -> None:
    fleet = Fleet([spec("a", max_replicas=10)], replicas={"a": 1})
    fleet.cycle(T0, [busy("a", 3.2)])
    decision = fleet.decision("a")
    assert decision.desired_replicas == 4  # 1 running + ceil(2.2 / 1)
    assert decision.reason == "toy scale-up (optimizer: cost-aware, required: 2.2 rps)"
    assert decision.analyzer is TOY_NAME
    assert decision.path is DecisionPath.OPTIMIZER
    assert "toy analyzed" in decision.notes
    assert fleet.last is not None
    assert fleet.last.analyses[spec("a").model].analysis["demand_rps"] == 3.2


def test_its_memory_slot_carries_over_and_its_section_is_persisted(toy_registered: ToyAnalyzer) -> None:
    fleet = Fleet([spec("a")], replicas={"a": 1})
    for cycle in range(3):
        fleet.cycle(T0 + 30 * cycle, [busy("a", 1.0)])
    assert fleet.state.memory(TOY) == {key("a"): 3}
    assert fleet.statuses[key("a")].learned["toy"] == {"cycles": 3}

    fleet.restart()  # memory gone, VA status kept: the analyzer resumes from its own section
    assert fleet.state.memory(TOY) == {}
    fleet.cycle(T0 + 90, [busy("a", 1.0)])
    assert fleet.state.memory(TOY) == {key("a"): 4}


def test_its_memory_is_a_section_of_the_recorded_engine_state(toy_registered: ToyAnalyzer) -> None:
    fleet = Fleet([spec("a"), spec("b")], replicas={"a": 1, "b": 1})
    fleet.cycle(T0, [busy("a", 1.0), busy("b", 1.0)])
    doc = json.loads(json.dumps(state_to_json(fleet.state)))
    assert doc["toy"] == {"llm/a": 1, "llm/b": 1}
    assert state_from_json(doc) == fleet.state
    with pytest.raises(StateFormatError, match=r"\$\.toy\['llm/a'\]: must be an integer"):
        state_from_json({**doc, "toy": {"llm/a": "one"}})


def test_its_config_warnings_reach_the_condition_even_without_metrics(toy_registered: ToyAnalyzer) -> None:
    fleet = Fleet([spec("a")], replicas={"a": 1})
    fleet.cycle(T0, [], metrics=False)
    ready = condition(fleet.decision("a"), ConditionType.OPTIMIZATION_READY)
    assert "toy: per-replica capacity fixed at 1 req/s" in ready.message
    assert fleet.decision("a").path is not DecisionPath.OPTIMIZER
