"""Pure joins: a ClusterView and a Collection into the engine's Snapshot; VA statuses into served decisions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from adapter import engine
from adapter.config.configmaps import ConfigSet
from adapter.domain.cluster import ClusterView, Collection, ModelQuery
from adapter.domain.decision import AnalyzerName, VariantDecision
from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.snapshot import ConditionType, ModelTraffic, Snapshot


def model_queries(view: ClusterView, configmaps: ConfigSet) -> list[ModelQuery]:
    """One query per model, with its scale-to-zero retention window and the fields its decision reads."""
    return [
        ModelQuery(model, configmaps.scale_to_zero(model)[0].retention_period_s, engine.reads(configmaps, model))
        for model in view.models()
    ]


def build_snapshot(view: ClusterView, collection: Collection, *, now_s: float) -> Snapshot:
    """The engine's input: the view's VAs and nodes, the collection's metrics, and only the pods of a VA the view
    holds, in the collection's order. The pods are matched by (namespace, name) pairs, which hash and compare in C,
    not by a VariantKey built for each pod: 41 → 6.5 ms a cycle at 100,000 pods (docs/benchmarks/scale.md, item 36)."""
    known = {(v.key.namespace, v.key.name) for v in view.variants}
    pods = tuple(p for p in collection.pods if (p.namespace, p.variant) in known)
    return Snapshot(
        taken_at_s=now_s,
        variants=view.variants,
        pods=pods,
        models=dict(collection.models),
        nodes=view.nodes,
        metrics_available=collection.available,
        unavailable_models=collection.unavailable_models,
    )


def wake_snapshot(
    view: ClusterView, queues: Mapping[tuple[str, str], float], models: Sequence[ModelKey], *, now_s: float
) -> Snapshot:
    """What a scale-from-zero poll decides from: the idle models' VAs and, per model, its EPP queue as scraped
    (absent: the EPP did not answer for it, which never wakes anything)."""
    wanted = set(models)
    return Snapshot(
        taken_at_s=now_s,
        variants=tuple(v for v in view.variants if v.spec.model in wanted),
        models={m: ModelTraffic(m, epp_queue_size=queues.get((m.namespace, m.model_id))) for m in sorted(wanted)},
    )


def decisions_from_status(view: ClusterView) -> dict[VariantKey, VariantDecision]:
    """What a follower serves: the leader's decisions as persisted in VA status (watched).

    Every replica therefore answers the same values, and a fail-over loses nothing: the new leader starts
    from the same statuses. A VA without a persisted decision is not served yet (the API answers 404 for it,
    KEDA NOT_FOUND), rather than inventing a number.
    """
    out: dict[VariantKey, VariantDecision] = {}
    for v in view.variants:
        desired = v.status.desired
        if desired is None:
            continue
        metrics = v.status.condition(ConditionType.METRICS_AVAILABLE)
        out[v.key] = VariantDecision(
            key=v.key,
            model_id=v.spec.model_id,
            desired_replicas=desired.num_replicas,
            current_replicas=v.target.replicas if v.target else 0,
            reason=desired.reason,
            path=desired.path,
            analyzer=AnalyzerName.NONE,
            accelerator=v.accelerator,
            cost=v.spec.cost,
            metrics_available=metrics.status if metrics else False,
            conditions=v.status.conditions,
            recommendation=v.status.recommendation,
        )
    return out
