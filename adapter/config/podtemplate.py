"""Read what the engine needs from a PodTemplateSpec (as a plain dict): GPUs per replica, accelerator, vLLM args.

The vLLM argument rules follow upstream's ParseVLLMArgs (research §2.5), except that we tokenise shell
scripts with `shlex` (quotes, escapes and newlines handled), so a multi-line `bash -c` script parses.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from adapter.domain.snapshot import VllmArgs

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "intel.com/gpu")
ACCELERATOR_KEYS = ("nvidia.com/gpu.product", "amd.com/gpu.product-name", "cloud.google.com/gke-accelerator")
_SHELLS = {"sh", "bash", "/bin/sh", "/bin/bash"}
_INT_ARGS = {
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "block_size",
    "tensor_parallel_size",
    "num_gpu_blocks_override",
}


def _containers(template: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = template.get("spec") or {}
    return [c for c in spec.get("containers") or [] if isinstance(c, Mapping)]


def gpus_per_replica(template: Mapping[str, Any]) -> int:
    """Sum of GPU requests (falling back to limits) over containers; 0 counts as 1, as upstream does."""
    total = 0
    for container in _containers(template):
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        for name in GPU_RESOURCES:
            # Extended resources: a limit alone implies an equal request (Kubernetes defaulting).
            amount = requests.get(name, limits.get(name, 0))
            try:
                total += int(str(amount))
            except ValueError:
                continue
    return total or 1


ROLE_LABEL = "llm-d.ai/role"


def role_of(labels: Mapping[str, Any]) -> str:
    """The P/D role of pods with these labels: "prefill" or "decode"; anything else serves both ("")."""
    value = labels.get(ROLE_LABEL)
    return value if value in ("prefill", "decode") else ""


def role(template: Mapping[str, Any]) -> str:
    metadata = template.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    return role_of(labels) if isinstance(labels, Mapping) else ""


def accelerator(template: Mapping[str, Any]) -> str:
    """nodeSelector first, then required node-affinity terms with operator In (first value)."""
    spec = template.get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    for key in ACCELERATOR_KEYS:
        if selector.get(key):
            return str(selector[key])
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in affinity.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") in ACCELERATOR_KEYS and expr.get("operator") == "In" and expr.get("values"):
                return str(expr["values"][0])
    return ""


def _tokens(container: Mapping[str, Any]) -> list[str]:
    tokens = [str(t) for t in (container.get("command") or []) + (container.get("args") or [])]
    for i, token in enumerate(tokens[:-2]):
        if token in _SHELLS and tokens[i + 1] == "-c":
            try:
                return shlex.split(tokens[i + 2])
            except ValueError:
                return tokens[i + 2].split()
    return tokens


def vllm_args(template: Mapping[str, Any]) -> VllmArgs:
    args = VllmArgs()
    for container in _containers(template):
        for env in container.get("env") or []:
            if env.get("name") == "VLLM_USE_V1" and str(env.get("value")) == "0":
                args = replace(args, v1_engine=False, chunked_prefill=False)
        args = _parse(args, _tokens(container))
    if args.v1_engine:
        args = replace(args, chunked_prefill=True)
    return args


def _parse(args: VllmArgs, tokens: Sequence[str]) -> VllmArgs:
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("--"):
            continue
        key, eq, value = token[2:].partition("=")
        key = key.replace("-", "_")
        if not eq and i < len(tokens) and not tokens[i].startswith("--"):
            value = tokens[i]
            i += 1
        args = _apply(args, key, value)
    return args


def _apply(args: VllmArgs, key: str, value: str) -> VllmArgs:
    if key == "enforce_eager":
        return replace(args, enforce_eager=True)
    if key == "enable_chunked_prefill":
        return replace(args, chunked_prefill=value.lower() != "false")
    if key == "kv_cache_dtype" and value:
        return replace(args, kv_cache_dtype=value)
    try:
        if key in _INT_ARGS:
            return replace(args, **{key: int(value)})  # type: ignore[arg-type]
        if key == "gpu_memory_utilization":
            return replace(args, gpu_memory_utilization=float(value))
    except ValueError:
        return args
    return args
