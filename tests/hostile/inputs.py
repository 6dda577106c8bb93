"""Hostile inputs, built on demand (files are written into a directory the caller owns): shared by the corpus
tests and the before/after probes so both feed the program exactly the same bytes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

NS = "llm"
CONTROLLER_NS = "workload-variant-autoscaler-system"


def va(name: str, *, namespace: str = NS, model: str = "m", target: str | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "llmd.ai/v1alpha1",
        "kind": "VariantAutoscaling",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": target if target is not None else name},
            "modelID": model,
            "minReplicas": 1,
            "maxReplicas": 4,
            "variantCost": "5",
            **spec,
        },
    }


def va_yaml(obj: dict[str, Any]) -> str:
    """A VA manifest as YAML text (JSON is YAML; json.dumps keeps control characters escaped as the YAML
    double-quoted style reads them)."""
    return json.dumps(obj, ensure_ascii=True)


def fixture(
    n_vas: int = 1,
    *,
    models: int = 1,
    target: dict[str, Any] | None = None,
    configmaps: list[dict[str, Any]] | None = None,
    cycles: int = 1,
    pods_every_cycle: bool = True,
) -> dict[str, Any]:
    """A valid wva-replay/v1 fixture: `n_vas` VAs over `models` models, one scale target and one pod each."""
    vas = [va(f"v{i}", model=f"model-{i % models}") for i in range(n_vas)]
    targets = [
        {"kind": "Deployment", "namespace": NS, "name": f"v{i}", "replicas": 2, "ready_replicas": 2}
        for i in range(n_vas)
    ]
    if target is not None:
        targets[0] = {**targets[0], **target}
    pods = [
        {"namespace": NS, "name": f"v{i}-0", "variant": f"v{i}", "metrics": {"kv_cache_usage": 0.5, "queue_length": 0}}
        for i in range(n_vas)
    ]
    first = {"now": "2026-01-01T00:00:00Z", "scale_targets": targets, "pods": pods}
    later = [{"now": _at(c * 30), **({"pods": pods} if pods_every_cycle else {})} for c in range(1, cycles)]
    return {
        "schema": "wva-replay/v1",
        "name": f"{n_vas} VAs",
        "configmaps": configmaps or [],
        "variant_autoscalings": vas,
        "cycles": [first, *later],
    }


def _at(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    days, hours = divmod(hours, 24)
    return f"2026-01-{1 + days:02d}T{hours:02d}:{rest // 60:02d}:{rest % 60:02d}Z"


def write_json(path: Path, document: Any) -> Path:
    path.write_text(json.dumps(document, separators=(",", ":")))
    return path


def sparse_file(path: Path, size_bytes: int) -> Path:
    """A file of `size_bytes` that takes no disk space (a hole)."""
    with path.open("wb") as handle:
        handle.truncate(size_bytes)
    return path


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def poisson_scenario(rate_rps: float, duration_s: float) -> str:
    return (
        f"name: flood\nmodel_id: m\nduration_s: {duration_s}\n"
        f"workload: {{kind: poisson, rate_rps: {rate_rps}, input_tokens: 100, output_tokens: 20}}\n"
        "variants:\n  - {name: a, accelerator: L4, cost: 1, min_replicas: 1, max_replicas: 2}\n"
    )


def many_va_documents(count: int) -> str:
    return "".join(
        f"---\napiVersion: llmd.ai/v1alpha1\nkind: VariantAutoscaling\nmetadata:\n  name: v{i}\n  namespace: llm\n"
        f"spec:\n  scaleTargetRef:\n    kind: Deployment\n    name: v{i}\n  modelID: meta/llama\n"
        "  minReplicas: 1\n  maxReplicas: 4\n  variantCost: '5'\n"
        for i in range(count)
    )


def configmap(name: str, default: str, *, namespace: str = CONTROLLER_NS) -> dict[str, Any]:
    return {"namespace": namespace, "name": name, "data": {"default": default}}
