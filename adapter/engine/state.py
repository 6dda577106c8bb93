"""What the engine remembers between cycles beyond VA status."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from adapter.analyzers.queueing.ekf import FilterState
from adapter.analyzers.saturation import NotReportingSince
from adapter.analyzers.tokens import CapacityRecord, K2History, TokenMemory
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import DesiredAlloc
from adapter.recommender.recommender import VariantHistory


@dataclass(frozen=True, slots=True)
class EngineState:
    """Empty after a restart or fail-over, except what is persisted in the cluster and read back."""

    allocations: Mapping[VariantKey, DesiredAlloc] = field(default_factory=dict)
    """This process's last allocation per VA: its presence makes a 'fallback allocation'."""
    not_reporting: Mapping[VariantKey, NotReportingSince] = field(default_factory=dict)
    """Percentage-based analyzer: since when a variant's pods have not all reported."""
    tokens: TokenMemory = field(default_factory=TokenMemory)
    """Token-based analyzer: k2 history and per-variant capacity (sizes variants at zero replicas)."""
    queueing: Mapping[VariantKey, FilterState] = field(default_factory=dict)
    recommender: Mapping[VariantKey, VariantHistory] = field(default_factory=dict)
    """The recommender's demand history per variant (checkpointed in VA status `learned.recommender`)."""
    """Queueing-model analyzer: each variant's learned (α, β, γ) filter. Also persisted in VA status
    (`learned.queueingModel`), which a new leader reads when this memory is empty."""


# ---- JSON form (flight recorder fixtures; replay) ----------------------------------------------------------
#
# {"allocations":   {"ns/va": {"num_replicas", "reason", "last_run_time_s", "last_update_s", "accelerator"}},
#  "not_reporting": {"ns/va": {"current", "reporting", "since_s"}},
#  "tokens": {"k2_history": {"<model>|<accelerator>|<bucket>": {"samples_tokens": [..], "updated_s"}},
#             "capacity":   {"ns/va": {"per_replica_tokens", "total_kv_tokens", "measured_s"}}},
#  "queueing": {"ns/va": FilterState.to_json()}}
# Floats are written with Python's shortest round-trip repr, so a state read back is equal to the one written.


class StateFormatError(ValueError):
    """An engine-state document that does not have the shape above; `path` is its JSON path."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


def state_to_json(state: EngineState) -> dict[str, Any]:
    return {
        "allocations": {
            str(k): {
                "num_replicas": a.num_replicas,
                "reason": a.reason,
                "last_run_time_s": a.last_run_time_s,
                "last_update_s": a.last_update_s,
                "accelerator": a.accelerator,
            }
            for k, a in sorted(state.allocations.items())
        },
        "not_reporting": {
            str(k): {"current": n.current, "reporting": n.reporting, "since_s": n.since_s}
            for k, n in sorted(state.not_reporting.items())
        },
        "tokens": {
            "k2_history": {
                k: {"samples_tokens": list(h.samples_tokens), "updated_s": h.updated_s}
                for k, h in sorted(state.tokens.k2_history.items())
            },
            "capacity": {
                str(k): {
                    "per_replica_tokens": r.per_replica_tokens,
                    "total_kv_tokens": r.total_kv_tokens,
                    "measured_s": r.measured_s,
                }
                for k, r in sorted(state.tokens.capacity.items())
            },
        },
        "queueing": {str(k): f.to_json() for k, f in sorted(state.queueing.items())},
        "recommender": {
            str(k): {**h.checkpoint(), "checkpointed_s": h.checkpointed_s} for k, h in sorted(state.recommender.items())
        },
    }


def state_from_json(doc: Any, path: str = "$") -> EngineState:
    """Parse `state_to_json`'s form; any deviation raises StateFormatError naming the JSON path."""
    top = _obj(doc, path, {"allocations", "not_reporting", "tokens", "queueing", "recommender"})
    allocations = {
        _key(k, f"{path}.allocations"): DesiredAlloc(
            num_replicas=_int(v, "num_replicas", p),
            reason=_str(v, "reason", p),
            last_run_time_s=_num(v, "last_run_time_s", p),
            last_update_s=None if v.get("last_update_s") is None else _num(v, "last_update_s", p),
            accelerator=_str(v, "accelerator", p),
        )
        for k, raw in _obj(top.get("allocations", {}), f"{path}.allocations").items()
        for p in [f"{path}.allocations[{k!r}]"]
        for v in [_obj(raw, p, {"num_replicas", "reason", "last_run_time_s", "last_update_s", "accelerator"})]
    }
    not_reporting = {
        _key(k, f"{path}.not_reporting"): NotReportingSince(
            _int(v, "current", p), _int(v, "reporting", p), _num(v, "since_s", p)
        )
        for k, raw in _obj(top.get("not_reporting", {}), f"{path}.not_reporting").items()
        for p in [f"{path}.not_reporting[{k!r}]"]
        for v in [_obj(raw, p, {"current", "reporting", "since_s"})]
    }
    tokens_doc = _obj(top.get("tokens", {}), f"{path}.tokens", {"k2_history", "capacity"})
    history = {}
    for k, raw in _obj(tokens_doc.get("k2_history", {}), f"{path}.tokens.k2_history").items():
        p = f"{path}.tokens.k2_history[{k!r}]"
        v = _obj(raw, p, {"samples_tokens", "updated_s"})
        samples = v.get("samples_tokens")
        if not isinstance(samples, list) or not all(type(x) is int and x >= 0 for x in samples):
            raise StateFormatError(f"{p}.samples_tokens", "must be a list of non-negative integers")
        history[k] = K2History(tuple(samples), _num(v, "updated_s", p))
    capacity = {
        _key(k, f"{path}.tokens.capacity"): CapacityRecord(
            _int(v, "per_replica_tokens", p), _int(v, "total_kv_tokens", p), _num(v, "measured_s", p)
        )
        for k, raw in _obj(tokens_doc.get("capacity", {}), f"{path}.tokens.capacity").items()
        for p in [f"{path}.tokens.capacity[{k!r}]"]
        for v in [_obj(raw, p, {"per_replica_tokens", "total_kv_tokens", "measured_s"})]
    }
    queueing = {}
    for k, raw in _obj(top.get("queueing", {}), f"{path}.queueing").items():
        try:
            queueing[_key(k, f"{path}.queueing")] = FilterState.from_json(raw)
        except ValueError as exc:
            raise StateFormatError(f"{path}.queueing[{k[:60]!r}]", str(exc)) from None
    recommender = {}
    for k, raw in _obj(top.get("recommender", {}), f"{path}.recommender").items():
        where = f"{path}.recommender[{k[:60]!r}]"
        entry = _obj(raw, where)
        try:
            restored = VariantHistory.restore(entry, now_s=0.0)
        except ValueError as exc:
            raise StateFormatError(where, str(exc)) from None
        checkpointed = entry.get("checkpointed_s")
        recommender[_key(k, f"{path}.recommender")] = replace(
            restored, checkpointed_s=None if checkpointed is None else _num(entry, "checkpointed_s", where)
        )
    return EngineState(allocations, not_reporting, TokenMemory(history, capacity), queueing, recommender)


def _obj(value: Any, path: str, allowed: set[str] | None = None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise StateFormatError(path, f"must be an object, got {type(value).__name__}")
    if allowed is not None and (unknown := sorted(set(value) - allowed)):
        raise StateFormatError(path, f"unknown field {unknown[0][:40]!r}")
    return value


def _key(text: str, path: str) -> VariantKey:
    try:
        return VariantKey.parse(text)
    except ValueError as exc:
        raise StateFormatError(path, str(exc)[:120]) from None


def _int(obj: dict[str, Any], name: str, path: str) -> int:
    value = obj.get(name)
    if type(value) is not int or value < 0:
        raise StateFormatError(f"{path}.{name}", "must be a non-negative integer")
    return value


def _num(obj: dict[str, Any], name: str, path: str) -> float:
    value = obj.get(name)
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise StateFormatError(f"{path}.{name}", "must be a finite number")
    return float(value)


def _str(obj: dict[str, Any], name: str, path: str) -> str:
    value = obj.get(name, "")
    if not isinstance(value, str):
        raise StateFormatError(f"{path}.{name}", "must be a string")
    return value
