"""Identifiers. A variant is one VariantAutoscaling; a model is every VA sharing `modelID` in a namespace."""

from __future__ import annotations

from dataclasses import dataclass


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


@dataclass(frozen=True, slots=True, order=True)
class ModelKey:
    """A variant group: every VA with the same `spec.modelID` in one namespace."""

    namespace: str
    model_id: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.model_id}"
