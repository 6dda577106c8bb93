"""Queueing-model analyzer: the state-dependent M/M/1/K model of one vLLM replica (seed 003, upstream §3.1–3.4)."""

from adapter.analyzers.queueing.model import (
    BeyondModel,
    InvalidInput,
    Metrics,
    QueueModel,
    RateRange,
    RequestSize,
    ServiceParams,
)

__all__ = ["BeyondModel", "InvalidInput", "Metrics", "QueueModel", "RateRange", "RequestSize", "ServiceParams"]
