"""What the engine remembers between cycles beyond VA status."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from adapter.analyzers.saturation import NotReportingSince
from adapter.analyzers.tokens import TokenMemory
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import DesiredAlloc


@dataclass(frozen=True, slots=True)
class EngineState:
    """Empty after a restart or fail-over, except what is persisted in the cluster and read back."""

    allocations: Mapping[VariantKey, DesiredAlloc] = field(default_factory=dict)
    """This process's last allocation per VA: its presence makes a 'fallback allocation'."""
    not_reporting: Mapping[VariantKey, NotReportingSince] = field(default_factory=dict)
    """Percentage-based analyzer: since when a variant's pods have not all reported."""
    tokens: TokenMemory = field(default_factory=TokenMemory)
    """Token-based analyzer: k2 history and per-variant capacity (sizes variants at zero replicas)."""
