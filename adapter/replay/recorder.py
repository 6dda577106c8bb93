"""The flight recorder: every cycle the leader decides, and every scale-from-zero wake between cycles, saved as a
`wva-replay/v1` fixture that `replay` plays back to the same decisions.

A recorded fixture holds the cycle's complete engine input — the VAs with the status the engine read, the scale
targets (with a pod template that parses back to the same GPU count, accelerator, role and vLLM arguments, and
their pods' startup times), the pod metrics, model traffic (with its latency histograms), nodes, the ConfigMaps
in force, whether Prometheus answered (and which models it did not), the exact `now` — the engine's memory
before the cycle (`engine_state`, so one fixture replays on its own), and the decisions taken as `expect`
(desired replicas and reason). No secrets: no tokens, certificates or kubeconfigs, only object names, specs,
statuses and metrics.

Files go into a ring in one directory, `cycle-<epoch ms>-<seq>.json`, oldest deleted first once the directory
holds more than `max_bytes`; each is written to a temporary name, flushed and renamed, so a reader never sees
half a file. Writing never blocks or fails a cycle: the write runs in a worker thread, at most one at a time
(a cycle that arrives while one is still being written is skipped and counted), and any error (full disk,
read-only directory) is counted by reason and logged once per distinct message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapter.config.configmaps import DEFAULT_CONTROLLER_NAMESPACE
from adapter.config.podtemplate import ROLE_LABEL
from adapter.config.va import status_to_dict
from adapter.domain.decision import CycleKind, CycleResult
from adapter.domain.latency import LatencyHistogram
from adapter.domain.snapshot import ModelTraffic, NodeGpus, PodMetrics, ScaleTarget, Snapshot, VariantView
from adapter.domain.timefmt import format_rfc3339
from adapter.engine.state import EngineState, state_to_json

log = logging.getLogger(__name__)

ACCELERATOR_LABEL = "inference.optimization/acceleratorName"
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
FILE_PREFIX = "cycle-"
METRIC_FIELDS = (
    "kv_cache_usage", "queue_length", "running_requests", "num_gpu_blocks", "block_size", "tokens_in_use",
    "avg_input_tokens", "avg_output_tokens", "prefix_cache_hit_rate", "arrival_rate_rps", "avg_ttft_s",
    "avg_itl_s", "max_batch_size",
)  # fmt: skip


# ---- the fixture (pure) ---------------------------------------------------------------------------------------


def va_object(view: VariantView) -> dict[str, Any]:
    """The VA as the API server returns it (spec and status), from what the engine read."""
    spec = view.spec
    metadata: dict[str, Any] = {"name": spec.key.name, "namespace": spec.key.namespace}
    if spec.accelerator:
        metadata["labels"] = {ACCELERATOR_LABEL: spec.accelerator}
    status = status_to_dict(view.status, now_s=0.0)
    obj: dict[str, Any] = {
        "apiVersion": "llmd.ai/v1alpha1",
        "kind": "VariantAutoscaling",
        "metadata": metadata,
        "spec": {
            "scaleTargetRef": {
                "apiVersion": spec.target_api_version,
                "kind": spec.target_kind,
                "name": spec.target_name,
            },
            "modelID": spec.model_id,
            "minReplicas": spec.min_replicas,
            "maxReplicas": spec.max_replicas,
            "variantCost": _cost(spec.cost),
        },
    }
    if status:
        obj["status"] = status
    return obj


def _cost(value: float) -> str:
    text = repr(float(value))
    return text if "e" not in text else f"{value:.12f}".rstrip("0").rstrip(".")


def pod_template(target: ScaleTarget) -> dict[str, Any]:
    """A template that `adapter.config.podtemplate` parses back to the target's GPUs, accelerator, role and
    vLLM arguments."""
    v = target.vllm
    args = [
        f"--max-num-seqs={v.max_num_seqs}",
        f"--max-num-batched-tokens={v.max_num_batched_tokens}",
        f"--max-model-len={v.max_model_len}",
        f"--block-size={v.block_size}",
        f"--gpu-memory-utilization={v.gpu_memory_utilization!r}",
        f"--tensor-parallel-size={v.tensor_parallel_size}",
        f"--num-gpu-blocks-override={v.num_gpu_blocks_override}",
        f"--kv-cache-dtype={v.kv_cache_dtype}",
        f"--enable-chunked-prefill={'true' if v.chunked_prefill else 'false'}",
    ]
    if v.enforce_eager:
        args.append("--enforce-eager")
    container: dict[str, Any] = {
        "name": "vllm",
        "args": args,
        "resources": {"limits": {"nvidia.com/gpu": str(target.gpus_per_replica)}},
    }
    if not v.v1_engine:
        container["env"] = [{"name": "VLLM_USE_V1", "value": "0"}]
    template: dict[str, Any] = {"spec": {"containers": [container]}}
    if target.accelerator:
        template["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": target.accelerator}
    if target.role:
        template["metadata"] = {"labels": {ROLE_LABEL: target.role}}
    return template


def _target(target: ScaleTarget) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": target.kind,
        "namespace": target.namespace,
        "name": target.name,
        "replicas": target.replicas,
        "ready_replicas": target.ready_replicas,
        "pod_template": pod_template(target),
    }
    if target.spec_replicas is not None:
        out["spec_replicas"] = target.spec_replicas
    if target.startup_s:
        out["startup_s"] = list(target.startup_s)
    return out


def _pod(pod: PodMetrics) -> dict[str, Any]:
    metrics = {name: value for name in METRIC_FIELDS if (value := getattr(pod, name)) is not None}
    return {"namespace": pod.namespace, "name": pod.pod, "variant": pod.variant, "metrics": metrics}


def _traffic(t: ModelTraffic) -> dict[str, Any]:
    out: dict[str, Any] = {
        "namespace": t.key.namespace,
        "model_id": t.key.model_id,
        "request_count": t.request_count,
        "epp_queue_size": t.epp_queue_size,
        "epp_queue_bytes": t.epp_queue_bytes,
    }
    if t.latency is not None:
        out["latency"] = {
            "window_s": t.latency.window_s,
            "ttft": _buckets(t.latency.ttft),
            "tpot": _buckets(t.latency.tpot),
        }
    return out


def _buckets(histogram: LatencyHistogram | None) -> list[list[float | str]] | None:
    """[[le, rate], …, ["+Inf", total]]: JSON has no infinity, so the last bound is written as Prometheus does."""
    if histogram is None:
        return None
    return [["+Inf" if math.isinf(le) else le, rate] for le, rate in histogram.buckets]


def _node(n: NodeGpus) -> dict[str, Any]:
    return {"name": n.name, "accelerator": n.accelerator, "allocatable_gpus": n.allocatable_gpus}


def build_fixture(
    snapshot: Snapshot,
    result: CycleResult,
    *,
    state_before: EngineState,
    configmaps: Iterable[tuple[str, str, Mapping[str, str]]],
    controller_namespace: str = DEFAULT_CONTROLLER_NAMESPACE,
    scale_to_zero_env: str | None = None,
    name: str = "",
) -> dict[str, Any]:
    """One recorded cycle as a `wva-replay/v1` document."""
    now_s = result.now_s
    cycle: dict[str, Any] = {
        "now": format_rfc3339(now_s),
        "now_s": now_s,
        "prometheus": "ok" if snapshot.metrics_available else "unavailable",
        "scale_targets": [_target(v.target) for v in sorted(snapshot.variants, key=lambda v: v.key) if v.target],
        "pods": [_pod(p) for p in sorted(snapshot.pods, key=lambda p: (p.namespace, p.variant, p.pod))],
        "models": [_traffic(t) for _, t in sorted(snapshot.models.items())],
        "nodes": [_node(n) for n in snapshot.nodes],
        "expect": {
            str(key): {"desired_replicas": d.desired_replicas, "reason": d.reason}
            for key, d in sorted(result.decisions.items())
        },
    }
    if result.kind is not CycleKind.DECIDE:
        cycle["kind"] = str(result.kind)
    if snapshot.unavailable_models:
        cycle["unavailable_models"] = [
            {"namespace": m.namespace, "model_id": m.model_id} for m in sorted(snapshot.unavailable_models)
        ]
    doc: dict[str, Any] = {
        "schema": "wva-replay/v1",
        "name": name or f"recorded cycle at {format_rfc3339(now_s)}",
        "controller_namespace": controller_namespace,
        "configmaps": [
            {"namespace": ns, "name": cm, "data": dict(sorted(data.items()))}
            for ns, cm, data in sorted(configmaps, key=lambda c: (c[0], c[1]))
        ],
        "variant_autoscalings": [va_object(v) for v in sorted(snapshot.variants, key=lambda v: v.key)],
        "cycles": [cycle],
        "engine_state": state_to_json(state_before),
    }
    if scale_to_zero_env is not None:
        doc["scale_to_zero_env"] = scale_to_zero_env
    return doc


# ---- the ring (edge: files) -----------------------------------------------------------------------------------


@dataclass
class RecorderStats:
    written: int = 0
    skipped_busy: int = 0
    errors: dict[str, int] = field(default_factory=dict)


class FlightRecorder:
    """Implements the reconciler's `CycleRecorder` port."""

    def __init__(
        self,
        directory: Path,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        controller_namespace: str = DEFAULT_CONTROLLER_NAMESPACE,
        scale_to_zero_env: str | None = None,
        on_error: Callable[[str], None] | None = None,
        on_written: Callable[[], None] | None = None,
    ) -> None:
        if max_bytes <= 0:
            raise ValueError(f"record max bytes must be > 0, got {max_bytes}")
        self.directory = directory
        self.max_bytes = max_bytes
        self.controller_namespace = controller_namespace
        self.scale_to_zero_env = scale_to_zero_env
        self.stats = RecorderStats()
        self._on_error = on_error
        self._on_written = on_written
        self._busy = threading.Lock()
        self._seq = 0
        self._logged: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    def record(
        self,
        snapshot: Snapshot,
        result: CycleResult,
        *,
        state_before: EngineState,
        configmaps: Iterable[tuple[str, str, Mapping[str, str]]],
    ) -> None:
        """Queue one cycle for writing and return at once (never raises). Without a running event loop (a virtual
        clock, a test) the file is written before this returns."""
        try:
            doc = build_fixture(
                snapshot,
                result,
                state_before=state_before,
                configmaps=list(configmaps),
                controller_namespace=self.controller_namespace,
                scale_to_zero_env=self.scale_to_zero_env,
            )
            payload = json.dumps(doc, indent=1, allow_nan=False).encode()
        except Exception as exc:  # a recorder bug must never fail the cycle
            self._error("encode", f"could not encode cycle: {type(exc).__name__}: {exc}")
            return
        if not self._busy.acquire(blocking=False):
            self.stats.skipped_busy += 1
            self._error("busy", "the previous cycle is still being written; this one is skipped")
            return
        self._seq += 1
        name = f"{FILE_PREFIX}{int(result.now_s * 1000):015d}-{self._seq:06d}.json"
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._write_locked(name, payload)
            return
        self._task = loop.create_task(asyncio.to_thread(self._write_locked, name, payload))

    async def drain(self) -> None:
        """Wait for the write in flight, if any (shutdown, tests)."""
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task

    def _write_locked(self, name: str, payload: bytes) -> None:
        try:
            self._write(name, payload)
        finally:
            self._busy.release()

    def _write(self, name: str, payload: bytes) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            temporary = self.directory / f".{name}.tmp"
            with open(temporary, "wb") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.directory / name)
            self.stats.written += 1
            self._notify(self._on_written)
            self._trim()
        except OSError as exc:
            with contextlib.suppress(OSError):
                (self.directory / f".{name}.tmp").unlink(missing_ok=True)
            reason = {28: "disk-full", 13: "permission", 30: "read-only"}.get(exc.errno or 0, "io")
            self._error(reason, f"could not write {self.directory / name}: {exc.strerror or exc}")

    def _trim(self) -> None:
        """Delete the oldest files until the ring fits in max_bytes (the newest file always stays)."""
        files = sorted(p for p in self.directory.glob(f"{FILE_PREFIX}*.json") if p.is_file())
        sizes = {p: p.stat().st_size for p in files}
        total = sum(sizes.values())
        for path in files[:-1]:
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= sizes[path]

    def _notify(self, callback: Callable[[], None] | None) -> None:
        """Telemetry callbacks run in the writer thread; their failure is logged, never raised there."""
        if callback is None:
            return
        try:
            callback()
        except Exception:
            log.exception("flight recorder: a telemetry callback failed")

    def _error(self, reason: str, message: str) -> None:
        self.stats.errors[reason] = self.stats.errors.get(reason, 0) + 1
        on_error = self._on_error
        if on_error is not None:
            self._notify(lambda: on_error(reason))
        if message not in self._logged:
            self._logged.add(message)
            log.warning("flight recorder: %s (not failing the cycle; logged once)", message)
