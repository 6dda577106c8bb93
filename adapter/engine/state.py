"""What the engine remembers between cycles beyond VA status.

    allocations   this process's last allocation per VA (its presence makes a "fallback allocation")
    analyzers     one slot per analyzer, typed by the analyzer (`Analyzer.memory`), opaque to the engine
    recommender   the recommender's demand history per variant
    unwoken       variants asked to leave zero replicas that nothing woke (adapter/engine/unwoken.py)

All of it is empty after a restart or fail-over, except what the analyzers and the recommender persist in VA
status (`status.learned`) and read back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from adapter.analyzers import memory as state_json
from adapter.analyzers import registry
from adapter.analyzers.memory import StateFormatError
from adapter.analyzers.protocol import Analyzer
from adapter.domain.decision import AnalyzerName
from adapter.domain.ids import VARIANT_ORDER, VariantKey
from adapter.domain.snapshot import DecisionPath, DesiredAlloc
from adapter.engine import unwoken
from adapter.recommender.recommender import VariantHistory

__all__ = ["EngineState", "StateFormatError", "state_from_json", "state_to_json"]

M = TypeVar("M")


@dataclass(frozen=True, slots=True)
class EngineState:
    """Empty after a restart or fail-over, except what is persisted in the cluster and read back."""

    allocations: Mapping[VariantKey, DesiredAlloc] = field(default_factory=dict)
    """This process's last allocation per VA: its presence makes a 'fallback allocation'."""
    analyzers: Mapping[AnalyzerName, Any] = field(default_factory=dict)
    """Each analyzer's memory (its own type), absent while empty; read it with `memory(analyzer)`."""
    recommender: Mapping[VariantKey, VariantHistory] = field(default_factory=dict)
    """The recommender's demand history per variant (checkpointed in VA status `learned.recommender`)."""
    unwoken: Mapping[VariantKey, unwoken.Unwoken] = field(default_factory=dict)
    """Variants asked to leave zero replicas, since when, and whether they count as not woken."""

    def memory(self, analyzer: Analyzer[Any, M]) -> M:
        """The analyzer's memory (empty when it has none yet)."""
        found: M | None = self.analyzers.get(analyzer.name)
        return analyzer.memory.empty() if found is None else found


# ---- JSON form (flight recorder fixtures; replay) ----------------------------------------------------------
#
# {"allocations": {"ns/va": {"num_replicas", "reason", "last_run_time_s", "last_update_s", "accelerator", "path"}},
#  "<each analyzer's Memory.section>": Memory.to_json(...),    (not_reporting, tokens, queueing)
#  "recommender": {"ns/va": VariantHistory.checkpoint() + {"checkpointed_s"}},
#  "unwoken": {"ns/va": {"asked_since_s", "blocked_until_s"}}}          (only when a variant is in it)
# Floats are written with Python's shortest round-trip repr, so a state read back is equal to the one written.

_ALLOCATION_FIELDS = {"num_replicas", "reason", "last_run_time_s", "last_update_s", "accelerator", "path"}


def state_to_json(state: EngineState) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "allocations": {
            str(k): {
                "num_replicas": a.num_replicas,
                "reason": a.reason,
                "last_run_time_s": a.last_run_time_s,
                "last_update_s": a.last_update_s,
                "accelerator": a.accelerator,
                "path": str(a.path),
            }
            for k, a in sorted(state.allocations.items(), key=_by_variant)
        }
    }
    for analyzer in registry.ANALYZERS:
        doc[analyzer.memory.section] = analyzer.memory.to_json(state.memory(analyzer))
    doc["recommender"] = {
        str(k): {**h.checkpoint(), "checkpointed_s": h.checkpointed_s}
        for k, h in sorted(state.recommender.items(), key=_by_variant)
    }
    if state.unwoken:
        doc["unwoken"] = unwoken.to_json(state.unwoken)
    return doc


def state_from_json(doc: Any, path: str = "$") -> EngineState:
    """Parse `state_to_json`'s form; any deviation raises StateFormatError naming the JSON path."""
    sections = {a.memory.section: a for a in registry.ANALYZERS}
    top = state_json.obj(doc, path, {"allocations", "recommender", "unwoken", *sections})
    allocations = {}
    for key, raw in state_json.obj(top.get("allocations", {}), f"{path}.allocations").items():
        where = f"{path}.allocations[{key!r}]"
        entry = state_json.obj(raw, where, _ALLOCATION_FIELDS)
        allocations[state_json.variant_key(key, f"{path}.allocations")] = DesiredAlloc(
            num_replicas=state_json.count(entry, "num_replicas", where),
            reason=state_json.text(entry, "reason", where),
            last_run_time_s=state_json.number(entry, "last_run_time_s", where),
            last_update_s=None
            if entry.get("last_update_s") is None
            else state_json.number(entry, "last_update_s", where),
            accelerator=state_json.text(entry, "accelerator", where),
            path=_path(entry, where),
        )
    memories = {
        analyzer.name: memory
        for section, analyzer in sections.items()
        if section in top
        and (memory := analyzer.memory.from_json(top[section], f"{path}.{section}")) != analyzer.memory.empty()
    }
    recommender = {}
    for key, raw in state_json.obj(top.get("recommender", {}), f"{path}.recommender").items():
        where = f"{path}.recommender[{key[:60]!r}]"
        entry = state_json.obj(raw, where)
        try:
            restored = VariantHistory.restore(entry, now_s=0.0)
        except ValueError as exc:
            raise StateFormatError(where, str(exc)) from None
        checkpointed = entry.get("checkpointed_s")
        recommender[state_json.variant_key(key, f"{path}.recommender")] = replace(
            restored, checkpointed_s=None if checkpointed is None else state_json.number(entry, "checkpointed_s", where)
        )
    return EngineState(allocations, memories, recommender, unwoken.from_json(top.get("unwoken", {}), f"{path}.unwoken"))


def _path(entry: dict[str, Any], where: str) -> DecisionPath:
    """A recorded allocation's path; absent (recorded before paths were) reads as unknown."""
    try:
        return DecisionPath(entry.get("path", DecisionPath.UNKNOWN))
    except ValueError:
        raise StateFormatError(f"{where}.path", f"must be one of {', '.join(DecisionPath)}") from None


def _by_variant(item: tuple[VariantKey, object]) -> tuple[str, str]:
    """Items keyed by VariantKey in the keys' order (VARIANT_ORDER: tuples compared in C)."""
    return VARIANT_ORDER(item[0])
