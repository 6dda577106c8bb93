"""`wva_recommended_replicas` (seed 004's recommender target) on both servers: served once a variant has a
recommendation, absent (External Metrics) or NOT_FOUND (KEDA) before, never a made-up zero."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from adapter.domain.snapshot import Recommendation
from adapter.servers.served import ServedMetric
from adapter.store.decisions import DecisionStore
from tests.servers._em_support import EM_BASE, EM_NS, EM_T0_S, em_decision
from tests.servers.conftest import EmServe
from tests.servers.test_em_server import get_json, metric_path


@pytest.mark.parametrize(
    ("recommendation", "expected"),
    [
        pytest.param(Recommendation(1, 3, 5), 3.0, id="target-served"),
        pytest.param(Recommendation(0, 0, 0), 0.0, id="zero-is-a-value"),
        pytest.param(None, None, id="none-yet"),
    ],
)
def test_value_of(recommendation: Recommendation | None, expected: float | None) -> None:
    decision = replace(em_decision("a", desired=4), recommendation=recommendation)
    assert ServedMetric.RECOMMENDED_REPLICAS.value_of(decision) == expected


async def test_external_metrics_serves_only_variants_with_a_recommendation(em_serve: EmServe) -> None:
    store = DecisionStore()
    with_rec = replace(em_decision("llama-a100", desired=4), recommendation=Recommendation(2, 3, 6))
    without = em_decision("llama-l4", desired=1, accelerator="L4")
    store.publish({d.key: d for d in (with_rec, without)}, now_s=EM_T0_S)
    server = await em_serve(store)
    document = await get_json(server, metric_path("wva_recommended_replicas"))
    assert [(i["metricLabels"]["variant_name"], i["value"]) for i in document["items"]] == [("llama-a100", "3")]
    names = [r["name"] for r in (await get_json(server, EM_BASE))["resources"]]
    assert "wva_recommended_replicas" in names
    assert json.dumps(document)  # a well-formed ExternalMetricValueList
    assert with_rec.key.namespace == EM_NS
