"""A queueing-model replay fixture in which learning changes the decision: `python -m tests.queueing.qm_fixture`
writes tests/queueing/fixtures/qm-learning.json (the test checks the committed file matches).

Story: the variant moved to faster GPUs. Its VA status still carries the filter state learned on the old ones
(α = 40 ms, twice the new α = 20 ms), so the first cycles size capacity too low and ask for too many replicas.
The pods report what the new hardware does (latencies from the queueing model at α 20, β 0.08, γ 0.0002,
±3 % noise); the filter rejects what contradicts its confident old state until it declares itself lost and
re-fits, then tracks the new parameters. Expectations are set only on the last five cycles, from an oracle
that knows the true parameters: desired = ceil(total arrival / λ*_true), λ*_true the throughput at the largest
rate meeting the explicit SLO (TTFT 400 ms, ITL 40 ms) — never from the engine's own output.
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path
from typing import Any

from adapter.analyzers.queueing import ekf
from adapter.analyzers.queueing.model import QueueModel, RequestSize, ServiceParams
from adapter.domain.timefmt import format_rfc3339

TRUE = (20.0, 0.08, 0.0002)
OLD = (40.0, 0.08, 0.0002)
I_TOKENS, O_TOKENS, BATCH = 512, 128, 64
SLO_TTFT_MS, SLO_ITL_MS = 400.0, 40.0
REPLICAS = 3
CYCLES = 40
T0_S = 1_767_225_600.0
PATH = Path(__file__).resolve().parent / "fixtures" / "qm-learning.json"


def true_model() -> QueueModel:
    return QueueModel(ServiceParams(*TRUE), RequestSize(I_TOKENS, O_TOKENS), max_batch=BATCH, max_queue=10 * BATCH)


def lambda_star_true() -> float:
    return true_model().max_rate(SLO_TTFT_MS, SLO_ITL_MS).throughput_rps


def oracle_replicas(total_rps: float) -> int:
    return max(1, math.ceil(total_rps / lambda_star_true() - 1e-9))


def _old_state() -> dict[str, Any]:
    p = 0.02**2  # confident: it was learned over days on the old hardware
    state = ekf.FilterState(
        *OLD,
        ((p, 0, 0), (0, p, 0), (0, 0, p)),
        (OLD[0] / 100, OLD[1] / 100, OLD[2] / 100),
        (OLD[0] * 100, OLD[1] * 100, OLD[2] * 100),
        T0_S - 3600,
        500,
        3,
    )
    return state.to_json()


def build() -> dict[str, Any]:
    rng = random.Random(11)
    model = true_model()
    cycles = []
    for c in range(CYCLES):
        total = rng.uniform(0.55, 0.9) * REPLICAS * lambda_star_true()
        if c >= CYCLES - 5:  # expectations: half-way between replica counts, so ±10 % of learning error is moot
            total = (rng.choice((1, 2)) + 0.5) * lambda_star_true()
        per_pod = total / REPLICAS
        m = model.analyze(per_pod)
        pods = []
        for i in range(REPLICAS):
            ttft_ms = (m.ttft_ms - m.itl_ms) * (1 + rng.uniform(-0.03, 0.03))
            itl_ms = m.itl_ms * (1 + rng.uniform(-0.03, 0.03))
            pods.append(
                {
                    "namespace": "llm",
                    "name": f"v-{i}",
                    "variant": "v",
                    "metrics": {
                        "kv_cache_usage": 0.4,
                        "queue_length": 0,
                        "arrival_rate_rps": round(per_pod, 6),
                        "avg_input_tokens": I_TOKENS,
                        "avg_output_tokens": O_TOKENS,
                        "max_batch_size": BATCH,
                        "avg_ttft_s": round(ttft_ms / 1000, 7),
                        "avg_itl_s": round(itl_ms / 1000, 7),
                    },
                }
            )
        cycle: dict[str, Any] = {"now": format_rfc3339(T0_S + 30 * c), "prometheus": "ok", "pods": pods}
        if c == 0:
            cycle["scale_targets"] = [
                {
                    "kind": "Deployment",
                    "namespace": "llm",
                    "name": "v",
                    "replicas": REPLICAS,
                    "ready_replicas": REPLICAS,
                }
            ]
        if c >= CYCLES - 5:
            cycle["expect"] = {"llm/v": {"desired_replicas": oracle_replicas(total)}}
        cycles.append(cycle)
    return {
        "schema": "wva-replay/v1",
        "name": "queueing model: a variant on new hardware; the learned state catches up and the decision follows",
        "controller_namespace": "workload-variant-autoscaler-system",
        "configmaps": [
            {
                "namespace": "workload-variant-autoscaler-system",
                "name": "wva-queueing-model-config",
                "data": {"default": f"targetTTFT: {SLO_TTFT_MS:g}\ntargetITL: {SLO_ITL_MS:g}\n"},
            }
        ],
        "variant_autoscalings": [
            {
                "apiVersion": "llmd.ai/v1alpha1",
                "kind": "VariantAutoscaling",
                "metadata": {"name": "v", "namespace": "llm"},
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "v"},
                    "modelID": "m",
                    "minReplicas": 1,
                    "maxReplicas": 20,
                    "variantCost": "10",
                },
                "status": {"learned": {"queueingModel": _old_state()}},
            }
        ],
        "cycles": cycles,
    }


def render() -> str:
    return json.dumps(build(), indent=1) + "\n"


def main() -> int:
    PATH.parent.mkdir(exist_ok=True)
    PATH.write_text(render(), encoding="utf-8")
    print(f"wrote {PATH}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
