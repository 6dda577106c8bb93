"""Writes the predictive analyzer's replay fixtures (tests/predictive/fixtures/*.json), so `wva-adapter replay` and
`explain` can be pointed at them: `python -m tests.predictive.make_fixtures`. The fixtures are committed; the
test (test_fixtures.py) replays them and checks that this script still writes the same bytes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "fixtures"
START = datetime(2026, 1, 1, tzinfo=UTC)
NS, CONTROLLER_NS, MODEL = "llm", "workload-variant-autoscaler-system", "meta/llama-3.1-8b"
QUEUEING = (
    "targetTTFT: 2000\ntargetITL: 100\nstartupTime: 5m\n"
    "acceleratorProfiles:\n  A100: {alpha: 9.5, beta: 0.066, gamma: 0.00008}\n"
)


def burst_a_lead_ahead() -> dict[str, Any]:
    """4 req/s with 2-minute bursts of 30 req/s every 15 minutes (cycles 10–13 and 40–43 of 30 s). The fleet is
    held at one replica (nothing actuates in a replay). At cycle 60 — 5 minutes (its lead) before the third
    burst, arrivals still at 4 req/s, where a reactive policy keeps one replica — it asks for three, the
    burst's capacity; at cycle 30, with one burst seen and no period, it keeps one."""
    return _bursts(61, {30: 1, 60: 3}, name="predictive: a periodic burst served a lead ahead")


def burst_onset_foreseen() -> dict[str, Any]:
    """The same load on to cycle 70, the third burst's first: arrivals jump 4 → 30 req/s, and the trend's slope
    alone would read ~50 req/s over the lead (five replicas). The season foresaw the rise, so the analyzer still
    asks for the burst's three replicas (docs/predictive.md §2, "A rise the season foresaw")."""
    return _bursts(71, {60: 3, 70: 3}, name="predictive: the onset of a foreseen burst is not extrapolated")


def _bursts(count: int, expect: dict[int, int], *, name: str) -> dict[str, Any]:
    cycles = []
    for i in range(count):
        rate = 30.0 if (i - 10) % 30 < 4 and i >= 10 else 4.0
        cycle: dict[str, Any] = {
            "now": (START + timedelta(seconds=30 * i)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "prometheus": "ok",
            "pods": [
                {
                    "namespace": NS,
                    "name": "llama-8b-a100-0",
                    "variant": "llama-8b-a100",
                    "metrics": {
                        "kv_cache_usage": 0.2,
                        "queue_length": 0,
                        "arrival_rate_rps": rate,
                        "avg_input_tokens": 800,
                        "avg_output_tokens": 200,
                        "max_batch_size": 256,
                    },
                }
            ],
        }
        if i == 0:
            cycle["scale_targets"] = [
                {"kind": "Deployment", "namespace": NS, "name": "llama-8b-a100", "replicas": 1, "ready_replicas": 1}
            ]
            cycle["models"] = [{"namespace": NS, "model_id": MODEL, "request_count": 1000}]
        if i in expect:
            cycle["expect"] = {f"{NS}/llama-8b-a100": {"desired_replicas": expect[i]}}
        cycles.append(cycle)
    return {
        "schema": "wva-replay/v1",
        "name": name,
        "controller_namespace": CONTROLLER_NS,
        "configmaps": [
            {
                "namespace": CONTROLLER_NS,
                "name": "wva-saturation-scaling-config",
                "data": {"default": "analyzerName: predictive\n"},
            },
            {"namespace": CONTROLLER_NS, "name": "wva-queueing-model-config", "data": {"default": QUEUEING}},
        ],
        "variant_autoscalings": [
            {
                "apiVersion": "llmd.ai/v1alpha1",
                "kind": "VariantAutoscaling",
                "metadata": {
                    "name": "llama-8b-a100",
                    "namespace": NS,
                    "labels": {"inference.optimization/acceleratorName": "A100"},
                },
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-8b-a100"},
                    "modelID": MODEL,
                    "minReplicas": 1,
                    "maxReplicas": 12,
                    "variantCost": "2.5",
                },
            }
        ],
        "cycles": cycles,
    }


FIXTURES = {"burst-a-lead-ahead.json": burst_a_lead_ahead, "burst-onset-foreseen.json": burst_onset_foreseen}


def render(build: Any) -> str:
    return json.dumps(build(), indent=1) + "\n"


def main() -> None:
    HERE.mkdir(parents=True, exist_ok=True)
    for name, build in FIXTURES.items():
        (HERE / name).write_text(render(build), encoding="utf-8")


if __name__ == "__main__":
    main()
