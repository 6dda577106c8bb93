"""The pure decision engine. Stages: `analyze` (per model) → `adapter.optimizer.allocate` (all models) →
`enforce` (per model); `pipeline.decide` runs them. See pipeline.py for the picture. Between cycles,
`wake.wake` decides scale-from-zero."""

from adapter.engine.analyze import ENGINE_READS, reads
from adapter.engine.enforce import METRICS_FOUND_MESSAGE, METRICS_MISSING_MESSAGE
from adapter.engine.pipeline import decide, statuses
from adapter.engine.state import EngineState
from adapter.engine.wake import idle_models, wake

__all__ = [
    "ENGINE_READS",
    "METRICS_FOUND_MESSAGE",
    "METRICS_MISSING_MESSAGE",
    "EngineState",
    "decide",
    "idle_models",
    "reads",
    "statuses",
    "wake",
]
