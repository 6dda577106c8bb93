"""The pure decision engine. Stages: `analyze` (per model) → `adapter.optimizer.allocate` (all models) →
`enforce` (per model); `pipeline.decide` runs them. See pipeline.py for the picture."""

from adapter.engine.enforce import METRICS_FOUND_MESSAGE, METRICS_MISSING_MESSAGE
from adapter.engine.pipeline import IMPLEMENTED_ANALYZERS, decide, statuses
from adapter.engine.state import EngineState

__all__ = [
    "IMPLEMENTED_ANALYZERS",
    "METRICS_FOUND_MESSAGE",
    "METRICS_MISSING_MESSAGE",
    "EngineState",
    "decide",
    "statuses",
]
