"""The metrics every server serves (External Metrics API, KEDA scaler): one name table, one value mapping."""

from __future__ import annotations

from enum import StrEnum

from adapter.domain.decision import VariantDecision


class ServedMetric(StrEnum):
    """The names an HPA's `external.metric.name` or a KEDA trigger's `metricName` may ask for."""

    DESIRED_REPLICAS = "wva_desired_replicas"
    CURRENT_REPLICAS = "wva_current_replicas"
    DESIRED_RATIO = "wva_desired_ratio"
    RECOMMENDED_REPLICAS = "wva_recommended_replicas"
    """The recommender's target (seed 004): replicas the variant's long-term demand history supports."""

    def value_of(self, decision: VariantDecision) -> float | None:
        """The served value; None when this metric has no value for the variant yet (no recommendation)."""
        if self is ServedMetric.DESIRED_REPLICAS:
            return float(decision.desired_replicas)
        if self is ServedMetric.CURRENT_REPLICAS:
            return float(decision.current_replicas)
        if self is ServedMetric.RECOMMENDED_REPLICAS:
            rec = decision.recommendation
            return None if rec is None else float(rec.target)
        return decision.desired_ratio


DEFAULT_METRIC = ServedMetric.DESIRED_REPLICAS
