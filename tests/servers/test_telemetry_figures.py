"""/metrics for the leader's per-model capacity figures and per-pool GPU usage (issue 7), scraped over a
real socket and parsed with prometheus_client's parser."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapter.domain.decision import AnalyzerName, GpuPoolUsage, ModelAnalysis
from adapter.domain.ids import ModelKey
from adapter.store.decisions import EMPTY_FIGURES, CycleFigures

from .test_telemetry import TelemetryHarness, _harness, labels

MODEL = ModelKey("llm", "meta/llama-3.1-8b")
OTHER = ModelKey("team-b", "qwen")


@pytest.fixture
async def harness() -> AsyncIterator[TelemetryHarness]:
    async for h in _harness():
        yield h


async def test_required_spare_and_gpu_pools_follow_the_figures(harness: TelemetryHarness) -> None:
    harness.store.publish_figures(
        CycleFigures(
            models={
                MODEL: ModelAnalysis(MODEL, AnalyzerName.SATURATION_TOKEN, {}, 1882.0, 0.0, "tokens"),
                OTHER: ModelAnalysis(OTHER, AnalyzerName.NONE, {"reason": "no pod reports metrics"}),
            },
            gpu_pools={"A100": GpuPoolUsage(8, 6, 8), "L4": GpuPoolUsage(0, 2, 3)},
            errors={OTHER: "RuntimeError: boom"},
        )
    )
    scrape = await harness.scrape()
    model = labels(namespace="llm", model_id="meta/llama-3.1-8b", analyzer="saturation-token-based", unit="tokens")
    assert scrape["wva_model_required_capacity"] == {model: 1882.0}
    assert scrape["wva_model_spare_capacity"] == {model: 0.0}
    # A model without a signal this cycle exports no capacity series (absence, not a fake zero).
    assert scrape["wva_gpus_allocatable"] == {labels(accelerator_type="A100"): 8.0, labels(accelerator_type="L4"): 0.0}
    assert scrape["wva_gpus_used"] == {labels(accelerator_type="A100"): 6.0, labels(accelerator_type="L4"): 2.0}
    assert scrape["wva_gpus_desired"] == {labels(accelerator_type="A100"): 8.0, labels(accelerator_type="L4"): 3.0}
    assert scrape["wva_model_decision_failed"] == {labels(namespace="team-b", model_id="qwen"): 1.0}


async def test_figures_disappear_when_replaced(harness: TelemetryHarness) -> None:
    harness.store.publish_figures(
        CycleFigures({MODEL: ModelAnalysis(MODEL, AnalyzerName.SATURATION_TOKEN, {}, 5.0, 1.0, "tokens")}, {}, {})
    )
    assert "wva_model_required_capacity" in await harness.scrape()
    harness.store.publish_figures(EMPTY_FIGURES)  # a follower, or the model's VAs were deleted
    scrape = await harness.scrape()
    assert "wva_model_required_capacity" not in scrape
    assert "wva_gpus_used" not in scrape


async def test_queueing_model_parameters_and_lambda_star(harness: TelemetryHarness) -> None:
    analysis = {
        "slo": {"target_ttft_ms": 400, "target_itl_ms": 40, "source": "explicit"},
        "variants": {
            "v-h100": {"alpha": 20.1, "beta": 0.081, "gamma": 0.0002, "max_rps_per_replica": 7.3},
            "v-l4": {"alpha": None, "beta": None, "gamma": None, "max_rps_per_replica": 0.0},
        },
    }
    harness.store.publish_figures(
        CycleFigures({MODEL: ModelAnalysis(MODEL, AnalyzerName.QUEUEING_MODEL, analysis, 1.0, 0.0, "rps")}, {}, {})
    )
    scrape = await harness.scrape()
    params = scrape["wva_queueing_model_parameter_ms"]
    assert params[labels(namespace="llm", variant_name="v-h100", parameter="alpha")] == 20.1
    assert params[labels(namespace="llm", variant_name="v-h100", parameter="gamma")] == 0.0002
    assert not any(("variant_name", "v-l4") in k for k in params)  # nothing learned: no made-up series
    assert scrape["wva_queueing_model_max_rps_per_replica"][labels(namespace="llm", variant_name="v-h100")] == 7.3


@pytest.mark.parametrize("instance", ["", "ctrl-a"], ids=["no-instance-label", "instance-label"])
async def test_recorder_counters(instance: str) -> None:
    async for h in _harness(controller_instance=instance):
        h.telemetry.record_recorder_written()
        h.telemetry.record_recorder_written()
        h.telemetry.record_recorder_error("disk-full")
        scrape = await h.scrape()
        extra = {"controller_instance": instance} if instance else {}
        assert scrape["wva_recorder_cycles_written_total"] == {labels(**extra): 2.0}
        assert scrape["wva_recorder_errors_total"] == {labels(reason="disk-full", **extra): 1.0}


async def test_recommendation_bounds_per_variant(harness: TelemetryHarness) -> None:
    from dataclasses import replace

    from adapter.domain.snapshot import Recommendation

    from ._keda_support import decision

    harness.store.publish(
        {d.key: d for d in [replace(decision("a", desired=3), recommendation=Recommendation(2, 3, 6)), decision("b")]},
        now_s=0,
    )
    scrape = await harness.scrape()
    series = scrape["wva_recommendation_replicas"]
    base = {"variant_name": "a", "namespace": "llm", "model_id": "meta/llama-3.1-8b", "accelerator_type": "H100"}
    assert series == {
        labels(**base, bound="lower"): 2.0,
        labels(**base, bound="target"): 3.0,
        labels(**base, bound="upper"): 6.0,
    }
