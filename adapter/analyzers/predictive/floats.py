"""`Floats`: an immutable run of doubles packed in one `bytes` object — a forecaster's history.

Why not a tuple of floats: a tuple holds a pointer to a float object per value, each 24 bytes somewhere in the heap.
A forecaster keeps `max_points` = 480 values twice (the history and its persisted rounding), so at 10,000 VAs (3,334
models) the shipped default's full histories were ~100 MB of live objects, 1.6 M floats each touched by every copy
(a copy increments every value's reference count) and by every search that reads them cold from memory
(docs/benchmarks/scale.md, item 35). Packed, a history is 3,840 bytes in one object: copying it is one `memcpy`, and
numpy reads it in place (`array`, no conversion of 480 objects).

Contract: a `Sequence[float]` that cannot change. `len`, iteration and indexing by an int answer Python floats; a
slice answers `Floats`; `+` joins two. Equal (and hashed) by their bytes: the same values in the same order, where
-0.0 differs from 0.0 (`of` stores 0.0 for both, so that a run made by `of` compares as its floats do; NaN values are
the caller's to keep out, as the forecaster does). `array` is a read-only float64 view of the same memory.

Example: Floats.of([1.0, 2.5]) + Floats.of([4.0]) == Floats.of([1.0, 2.5, 4.0]); its [-1] is 4.0, its [1:] is
Floats.of([2.5, 4.0]), its array.max() is 4.0.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

import numpy as np

_DOUBLE = struct.Struct("=d")
_SIZE = _DOUBLE.size


class Floats(Sequence[float]):
    """An immutable run of doubles (module docstring)."""

    __slots__ = ("_data",)
    _data: bytes

    def __init__(self, data: bytes = b"") -> None:
        if len(data) % _SIZE:
            raise ValueError(f"Floats: {len(data)} bytes is not a whole number of {_SIZE}-byte doubles")
        object.__setattr__(self, "_data", bytes(data))

    @classmethod
    def of(cls, values: Iterable[float]) -> Floats:
        """The values, each as a double (0.0 for -0.0, `x + 0.0`)."""
        return cls._packed(array("d", [float(v) + 0.0 for v in values]).tobytes())

    @classmethod
    def _packed(cls, data: bytes) -> Floats:
        """A run over `data` (whole doubles, already checked), without a copy."""
        out = object.__new__(cls)
        object.__setattr__(out, "_data", data)
        return out

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Floats is immutable: cannot set {name!r}")

    def __reduce__(self) -> tuple[type[Floats], tuple[bytes]]:
        return (Floats, (self._data,))

    # ---------------------------------------------------------------- Sequence

    def __len__(self) -> int:
        return len(self._data) // _SIZE

    def __bool__(self) -> bool:
        return bool(self._data)

    @overload
    def __getitem__(self, index: int) -> float: ...

    @overload
    def __getitem__(self, index: slice) -> Floats: ...

    def __getitem__(self, index: int | slice) -> float | Floats:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step == 1:
                return Floats._packed(self._data[start * _SIZE : max(start, stop) * _SIZE])
            return Floats._packed(memoryview(self._data).cast("d")[index].tobytes())
        n = len(self)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError(f"Floats index {index} out of range for {n} values")
        value: float = _DOUBLE.unpack_from(self._data, i * _SIZE)[0]
        return value

    def __iter__(self) -> Iterator[float]:
        return iter(memoryview(self._data).cast("d"))

    def __add__(self, other: Floats) -> Floats:
        if not isinstance(other, Floats):
            return NotImplemented
        return Floats._packed(self._data + other._data)

    # ---------------------------------------------------------------- value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Floats) and self._data == other._data

    def __hash__(self) -> int:
        return hash(self._data)

    def __repr__(self) -> str:
        return f"Floats({self.tolist()!r})"

    # ---------------------------------------------------------------- numpy and JSON

    @property
    def array(self) -> np.ndarray:
        """The values as a read-only float64 array over the same bytes (no copy)."""
        return np.frombuffer(self._data, dtype=np.float64)

    def tolist(self) -> list[float]:
        """The values as a list of Python floats (for JSON)."""
        values: list[float] = self.array.tolist()
        return values

    def max(self) -> float:
        """The largest value (ValueError when empty), as `max(list(self))` answers for values without NaN."""
        if not self._data:
            raise ValueError("Floats.max() of no values")
        return float(self.array.max())
