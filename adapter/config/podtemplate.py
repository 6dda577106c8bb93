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


MAX_INT_ARG = 2**31 - 1


def _m(value: Any) -> Mapping[str, Any]:
    """A mapping, or an empty one: a template of the wrong shape reads as "nothing set", never a crash."""
    return value if isinstance(value, Mapping) else {}


def _l(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _containers(template: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in _l(_m(template.get("spec")).get("containers")) if isinstance(c, Mapping)]


def gpus_per_replica(template: Mapping[str, Any]) -> int:
    """Sum of GPU requests (falling back to limits) over containers; 0 counts as 1, as upstream does."""
    total = 0
    for container in _containers(template):
        resources = _m(container.get("resources"))
        requests, limits = _m(resources.get("requests")), _m(resources.get("limits"))
        for name in GPU_RESOURCES:
            # Extended resources: a limit alone implies an equal request (Kubernetes defaulting).
            amount = _count(requests.get(name, limits.get(name, 0)))
            total += amount
    return min(total, MAX_INT_ARG) or 1


def _count(value: Any) -> int:
    """A GPU quantity: a non-negative whole number (int or ASCII digit string) up to 2^31-1; else 0."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value if 0 <= value <= MAX_INT_ARG else 0
    number = _whole(value) if isinstance(value, str) else None
    return 0 if number is None else number


def _whole(text: str) -> int | None:
    """ "12" → 12; anything else (sign, decimal point, non-ASCII digits, more than 10 digits) → None."""
    text = text.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 10):
        return None
    number = int(text)
    return number if number <= MAX_INT_ARG else None


ROLE_LABEL = "llm-d.ai/role"


def role_of(labels: Mapping[str, Any]) -> str:
    """The P/D role of pods with these labels: "prefill" or "decode"; anything else serves both ("")."""
    value = labels.get(ROLE_LABEL)
    return value if value in ("prefill", "decode") else ""


def role(template: Mapping[str, Any]) -> str:
    return role_of(_m(_m(template.get("metadata")).get("labels")))


def accelerator(template: Mapping[str, Any]) -> str:
    """nodeSelector first, then required node-affinity terms with operator In (first value)."""
    spec = _m(template.get("spec"))
    selector = _m(spec.get("nodeSelector"))
    for key in ACCELERATOR_KEYS:
        if isinstance(selector.get(key), str) and selector[key]:
            return str(selector[key])[:MAX_NAME_CHARS]
    affinity = _m(
        _m(_m(spec.get("affinity")).get("nodeAffinity")).get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    for term in _l(affinity.get("nodeSelectorTerms")):
        for raw_expr in _l(_m(term).get("matchExpressions")):
            expr = _m(raw_expr)
            values = _l(expr.get("values"))
            if expr.get("key") in ACCELERATOR_KEYS and expr.get("operator") == "In" and values:
                return str(values[0])[:MAX_NAME_CHARS]
    return ""


MAX_NAME_CHARS = 253
MAX_SCRIPT_CHARS = 64 * 1024
"""A `bash -c` script longer than this is not tokenised (vLLM arguments are never that long)."""


def _tokens(container: Mapping[str, Any]) -> list[str]:
    tokens = [t for t in _l(container.get("command")) + _l(container.get("args")) if isinstance(t, str)]
    for i, token in enumerate(tokens[:-2]):
        if token in _SHELLS and tokens[i + 1] == "-c":
            script = tokens[i + 2]
            if len(script) > MAX_SCRIPT_CHARS:
                return []
            try:
                return shlex.split(script)
            except ValueError:
                return script.split()
    return tokens


def vllm_args(template: Mapping[str, Any]) -> VllmArgs:
    args = VllmArgs()
    for container in _containers(template):
        for raw_env in _l(container.get("env")):
            env = _m(raw_env)
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
    """One argument; a value out of range (negative, huge, NaN, not a number) is ignored, as upstream ignores
    unparsable numbers: vLLM itself would refuse to start with it."""
    if key == "enforce_eager":
        return replace(args, enforce_eager=True)
    if key == "enable_chunked_prefill":
        return replace(args, chunked_prefill=value.lower() != "false")
    if key == "kv_cache_dtype" and value:
        return replace(args, kv_cache_dtype=value[:MAX_NAME_CHARS])
    if key in _INT_ARGS:
        number = _whole(value)
        return args if number is None else replace(args, **{key: number})  # type: ignore[arg-type]
    if key == "gpu_memory_utilization":
        try:
            fraction = float(value)
        except ValueError:
            return args
        return replace(args, gpu_memory_utilization=fraction) if 0 < fraction <= 1 else args
    return args
