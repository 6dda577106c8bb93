"""Engine settings that are not per-model ConfigMap data (flags/env/file layer, see issue 4)."""

from __future__ import annotations

from dataclasses import dataclass, field

from adapter.config.configmaps import ConfigSet


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """What `engine.decide` needs besides the snapshot and its own state."""

    configmaps: ConfigSet = field(default_factory=ConfigSet)
    interval_s: float = 30.0
    """Seconds between engine cycles (upstream: a fixed 30 s)."""
    first_run_grace: bool = True
