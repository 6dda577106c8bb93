"""Every analyzer the engine can dispatch to, and the rule that chooses one per model.

    `analyzerName: predictive` in the model's wva-saturation-scaling-config entry         → predictive (issue 18)
    else a `default` entry in wva-queueing-model-config (global or the model's namespace) → queueing model (seed 001)
    else `analyzerName` of the model's wva-saturation-scaling-config entry:
        "saturation", "saturation-token-based"                                         → token-based (V2)
        unset, "", "saturation-percentage-based"                                       → percentage-based (V1)

The config schema (adapter/config/configmaps.py) admits only these values, so an unknown name is an invalid
entry with a message, never a silent V1. A new analyzer is one more entry in `ANALYZERS` and, if a value of
`analyzerName` selects it, one more in `SELECTED_BY_NAME` (see adapter/analyzers/protocol.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapter.analyzers import saturation, tokens
from adapter.analyzers.predictive import analyzer as predictive
from adapter.analyzers.protocol import Analyzer
from adapter.analyzers.queueing import analyzer as queueing
from adapter.config.configmaps import ConfigSet, SaturationConfig
from adapter.domain.ids import ModelKey

ANALYZERS: tuple[Analyzer[Any, Any], ...] = (
    saturation.ANALYZER,
    tokens.ANALYZER,
    queueing.ANALYZER,
    predictive.ANALYZER,
)
"""In the order their memories appear in the engine state's JSON."""
SELECTED_BY_NAME: Mapping[str, Analyzer[Any, Any]] = {
    "saturation": tokens.ANALYZER,
    "saturation-token-based": tokens.ANALYZER,
    "saturation-percentage-based": saturation.ANALYZER,
}
DEFAULT: Analyzer[Any, Any] = saturation.ANALYZER


def choose(configmaps: ConfigSet, model: ModelKey, saturation_config: SaturationConfig) -> Analyzer[Any, Any]:
    """The analyzer for `model` this cycle (module docstring)."""
    if saturation_config.analyzer_name == "predictive":
        return predictive.ANALYZER
    if configmaps.has_queueing_default(model.namespace):
        return queueing.ANALYZER
    return SELECTED_BY_NAME.get(saturation_config.analyzer_name, DEFAULT)
