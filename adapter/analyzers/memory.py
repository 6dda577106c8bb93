"""What an analyzer remembers between cycles: the `Memory` protocol, and the strict JSON readers its form uses.

Each analyzer owns one typed memory `M` (V1: since when a variant's pods have not all reported; V2: k2 history
and per-variant capacities; the queueing model: each variant's filter). The engine keeps one slot per analyzer
in `EngineState`, never looks inside, and each cycle asks the analyzer's `Memory` for the next value:

    next(previous, [update of every model it analysed this cycle], decided=VAs decided this cycle, now_s)

The flight recorder saves every slot as one section of the fixture's `engine_state` (`section` is its key) and
replay reads it back with `from_json`, which is strict: anything but the shape `to_json` writes raises
`StateFormatError` naming the JSON path, e.g. `$.engine_state.tokens.capacity['ns/va'].measured_s`. Floats are
written with Python's shortest round-trip repr, so a memory read back equals the one written.

What must survive a restart or a fail-over goes into VA status instead (`Analysis.learned`, one section of
`status.learned` per analyzer), which the analyzer reads back from the views itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Protocol, TypeVar

from adapter.domain.ids import VariantKey

M = TypeVar("M")


class StateFormatError(ValueError):
    """An engine-state document (or one analyzer's section of it) that does not have the written shape; `path`
    is its JSON path."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


class Memory(Protocol[M]):
    """One analyzer's memory between cycles (module docstring)."""

    @property
    def section(self) -> str:
        """Its key in the engine-state JSON (`engine_state.<section>` of a recorded fixture)."""
        ...

    def empty(self) -> M:
        """The memory of a process that has just started."""
        ...

    def next(self, previous: M, updates: Sequence[M], *, decided: AbstractSet[VariantKey], now_s: float) -> M:
        """The memory for the next cycle: `previous` with this cycle's `updates` (one per model the analyzer
        analysed, in model order) applied; `decided` is every VA with a decision this cycle (a VA that is gone
        may be forgotten)."""
        ...

    def to_json(self, memory: M) -> Any: ...

    def from_json(self, doc: Any, path: str) -> M:
        """The inverse of `to_json`; raises StateFormatError at `path` (the section's JSON path)."""
        ...


# ---- strict readers for the JSON forms ------------------------------------------------------------------------


def obj(value: Any, path: str, allowed: AbstractSet[str] | None = None) -> dict[str, Any]:
    """`value` as a JSON object whose keys are within `allowed` (when given)."""
    if not isinstance(value, dict):
        raise StateFormatError(path, f"must be an object, got {type(value).__name__}")
    if allowed is not None and (unknown := sorted(set(value) - allowed)):
        raise StateFormatError(path, f"unknown field {unknown[0][:40]!r}")
    return value


def variant_key(text: str, path: str) -> VariantKey:
    try:
        return VariantKey.parse(text)
    except ValueError as exc:
        raise StateFormatError(path, str(exc)[:120]) from None


def count(value: Any, name: str, path: str) -> int:
    """`value[name]` as a non-negative integer."""
    got = value.get(name)
    if type(got) is not int or got < 0:
        raise StateFormatError(f"{path}.{name}", "must be a non-negative integer")
    return got


def number(value: Any, name: str, path: str) -> float:
    """`value[name]` as a finite number."""
    got = value.get(name)
    if not isinstance(got, int | float) or isinstance(got, bool) or not math.isfinite(got):
        raise StateFormatError(f"{path}.{name}", "must be a finite number")
    return float(got)


def text(value: Any, name: str, path: str) -> str:
    """`value[name]` as a string ("" when absent)."""
    got = value.get(name, "")
    if not isinstance(got, str):
        raise StateFormatError(f"{path}.{name}", "must be a string")
    return got
