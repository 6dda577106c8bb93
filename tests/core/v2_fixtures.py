"""V2 (token-based) replay fixtures, built here with the arithmetic beside each expectation and written to
`tests/core/fixtures/v2-*.json` by `python -m tests.core.v2_fixtures` (the test checks the files match).

Sizes used throughout: an L4 pod has 1,000 KV blocks of 16 tokens = 16,000 tokens, so
k1 = floor(16,000 · 0.80) = 12,800; an A100 pod has 4,000 blocks = 64,000 tokens, k1 = 51,200. No pod reports
output lengths, so k2 falls back to k1 unless the queue is saturated (>= 5).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

NS = "llm"
CONTROLLER_NS = "workload-variant-autoscaler-system"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
L4_BLOCKS, A100_BLOCKS = 1000, 4000


def _saturation(extra: str = "") -> dict[str, Any]:
    text = "analyzerName: saturation\nkvCacheThreshold: 0.80\nqueueLengthThreshold: 5\n" + extra
    return {"namespace": CONTROLLER_NS, "name": "wva-saturation-scaling-config", "data": {"default": text}}


def _va(name: str, model: str, *, cost: str, lo: int = 1, hi: int = 10, accelerator: str = "") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": NS}
    if accelerator:
        metadata["labels"] = {"inference.optimization/acceleratorName": accelerator}
    return {
        "apiVersion": "llmd.ai/v1alpha1",
        "kind": "VariantAutoscaling",
        "metadata": metadata,
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "modelID": model,
            "minReplicas": lo,
            "maxReplicas": hi,
            "variantCost": cost,
        },
    }


def _target(name: str, replicas: int) -> dict[str, Any]:
    return {"kind": "Deployment", "namespace": NS, "name": name, "replicas": replicas, "ready_replicas": replicas}


def _pod(variant: str, i: int, blocks: int, kv: float, queue: float = 0, avg_in: float = 0) -> dict[str, Any]:
    metrics: dict[str, Any] = {"kv_cache_usage": kv, "queue_length": queue, "num_gpu_blocks": blocks, "block_size": 16}
    if avg_in:
        metrics["avg_input_tokens"] = avg_in
    return {"namespace": NS, "name": f"{variant}-{i}", "variant": variant, "metrics": metrics}


def scale_up_and_down() -> dict[str, Any]:
    return {
        "schema": "wva-replay/v1",
        "name": "V2: one L4 variant scales up by required capacity, holds, then scales down by spare capacity",
        "controller_namespace": CONTROLLER_NS,
        "configmaps": [_saturation()],
        "variant_autoscalings": [_va("l4", "m", cost="1")],
        "cycles": [
            {
                # demand = 0.95 · 16,000 + 2 · 1,000 = 17,200; supply 12,800;
                # required = 17,200 / 0.85 − 12,800 = 7,435.3 → ceil(7,435.3 / 12,800) = 1 more → 2
                "now": "2026-01-01T00:00:00Z",
                "prometheus": "ok",
                "scale_targets": [_target("l4", 1)],
                "pods": [_pod("l4", 0, L4_BLOCKS, 0.95, queue=2, avg_in=1000)],
                "expect": {f"{NS}/l4": {"desired_replicas": 2}},
            },
            {
                # applied: demand 2 · 8,000 = 16,000; supply 25,600; required = 18,823.5 − 25,600 < 0;
                # spare = 25,600 − 16,000 / 0.70 = 2,742.9 < 12,800 → nothing to remove → 2
                "now": "2026-01-01T00:00:30Z",
                "prometheus": "ok",
                "scale_targets": [_target("l4", 2)],
                "pods": [_pod("l4", 0, L4_BLOCKS, 0.5), _pod("l4", 1, L4_BLOCKS, 0.5)],
                "expect": {f"{NS}/l4": {"desired_replicas": 2}},
            },
            {
                # load falls: demand 2 · 1,600 = 3,200; spare = 25,600 − 4,571.4 = 21,028.6 → floor(/12,800) = 1 → 1
                "now": "2026-01-01T00:01:00Z",
                "prometheus": "ok",
                "pods": [_pod("l4", 0, L4_BLOCKS, 0.1), _pod("l4", 1, L4_BLOCKS, 0.1)],
                "expect": {f"{NS}/l4": {"desired_replicas": 1}},
            },
        ],
    }


def limited_by_gpus() -> dict[str, Any]:
    # Two models, one A100 pod each (1 GPU per replica), 4 A100 GPUs on the nodes: 2 free.
    # Each: demand = 0.95 · 64,000 + 4 · 10,000 = 100,800; supply 51,200;
    # required = 100,800 / 0.85 − 51,200 = 67,388.2 → 2 more replicas wanted each (ceil(67,388.2 / 51,200)).
    # Fair share of 2 GPUs: x (score 1) +1, then y (score 1 > x's 16,188.2 / 67,388.2 = 0.24) +1 → 2 and 2, limited.
    pods = [
        _pod("x", 0, A100_BLOCKS, 0.95, queue=4, avg_in=10_000),
        _pod("y", 0, A100_BLOCKS, 0.95, queue=4, avg_in=10_000),
    ]
    return {
        "schema": "wva-replay/v1",
        "name": "V2 with the GPU limiter: two models compete for one A100 pool and get a fair share",
        "controller_namespace": CONTROLLER_NS,
        "configmaps": [_saturation("enableLimiter: true\n")],
        "variant_autoscalings": [
            _va("x", "model-x", cost="5", accelerator="A100"),
            _va("y", "model-y", cost="5", accelerator="A100"),
        ],
        "cycles": [
            {
                "now": "2026-01-01T00:00:00Z",
                "prometheus": "ok",
                "scale_targets": [_target("x", 1), _target("y", 1)],
                "pods": pods,
                "nodes": [{"name": "gpu-node", "accelerator": "NVIDIA-A100-SXM4-80GB", "allocatable_gpus": 4}],
                "expect": {f"{NS}/x": {"desired_replicas": 2}, f"{NS}/y": {"desired_replicas": 2}},
            }
        ],
    }


def variant_at_zero() -> dict[str, Any]:
    return {
        "schema": "wva-replay/v1",
        "name": "V2: a variant at zero replicas is scaled up from its remembered capacity (cheapest per token)",
        "controller_namespace": CONTROLLER_NS,
        "configmaps": [_saturation()],
        "variant_autoscalings": [_va("l4", "m", cost="1"), _va("a100", "m", cost="2", lo=0)],
        "cycles": [
            {
                # L4 8,000 + A100 6,400 = 14,400 demand; supply 12,800 + 51,200 = 64,000;
                # spare = 64,000 − 20,571.4 = 43,428.6: A100 (dearest) floor(43,428.6 / 51,200) = 0;
                # L4 floor(/12,800) = 3 but minReplicas 1 → nothing removed. The A100 size is remembered.
                "now": "2026-01-01T00:00:00Z",
                "prometheus": "ok",
                "scale_targets": [_target("l4", 1), _target("a100", 1)],
                "pods": [_pod("l4", 0, L4_BLOCKS, 0.5), _pod("a100", 0, A100_BLOCKS, 0.1)],
                "expect": {f"{NS}/l4": {"desired_replicas": 1}, f"{NS}/a100": {"desired_replicas": 1}},
            },
            {
                # A100 now at 0 (no pods). L4: 0.95 · 16,000 + 3 · 2,000 = 21,200 demand; supply 12,800;
                # required = 24,941.2 − 12,800 = 12,141.2. Per token A100 costs 2 / 51,200 < L4's 1 / 12,800,
                # so ceil(12,141.2 / 51,200) = 1 A100 replica, sized from memory.
                "now": "2026-01-01T00:00:30Z",
                "prometheus": "ok",
                "scale_targets": [_target("l4", 1), _target("a100", 0)],
                "pods": [_pod("l4", 0, L4_BLOCKS, 0.95, queue=3, avg_in=2000)],
                "expect": {f"{NS}/l4": {"desired_replicas": 1}, f"{NS}/a100": {"desired_replicas": 1}},
            },
        ],
    }


BUILDERS = {
    "v2-scale-up-and-down.json": scale_up_and_down,
    "v2-limited-by-gpus.json": limited_by_gpus,
    "v2-variant-at-zero.json": variant_at_zero,
}


def render(builder: Any) -> str:
    return json.dumps(builder(), indent=1) + "\n"


def main() -> int:
    for name, builder in BUILDERS.items():
        (FIXTURES / name).write_text(render(builder), encoding="utf-8")
        print(f"wrote {FIXTURES / name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
