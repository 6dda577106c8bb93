"""Identifiers. A variant is one VariantAutoscaling; a model is every VA sharing `modelID` in a namespace."""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from adapter.domain.frozen import fast_init


@fast_init
@dataclass(frozen=True, slots=True, order=True)
class VariantKey:
    """One VariantAutoscaling, `namespace/name`; the unit the servers answer for."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> VariantKey:
        namespace, sep, name = text.partition("/")
        if not sep or not namespace or not name:
            raise ValueError(f"variant key must be 'namespace/name', got {text!r}")
        return cls(namespace, name)


@fast_init
@dataclass(frozen=True, slots=True, order=True)
class ModelKey:
    """A variant group: every VA with the same `spec.modelID` in one namespace."""

    namespace: str
    model_id: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.model_id}"


MODEL_ORDER = attrgetter("namespace", "model_id")
"""Sort key giving ModelKeys their own order, as tuples compared in C: `sorted(keys, key=MODEL_ORDER)` ==
`sorted(keys)`, 5x faster on an unordered set of 3,000 models (10 → 2 ms), where the generated `__lt__` builds two
tuples a comparison. For the per-cycle sorts over every model."""
VARIANT_ORDER = attrgetter("namespace", "name")
"""The same for VariantKeys."""
