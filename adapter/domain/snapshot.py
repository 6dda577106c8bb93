"""The frozen snapshot the engine decides from: what Kubernetes and Prometheus said at one instant.

The k8s/ and metrics/ edges (or a replay fixture, or the simulator) build it; the pure core only reads it.
Times are seconds since the Unix epoch (`*_s`), so the core does plain arithmetic and never touches a clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from itertools import repeat
from operator import attrgetter
from typing import Any

from adapter.domain.frozen import fast_init
from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.latency import ModelLatency

DEFAULT_VARIANT_COST = 10.0
"""Cost of a variant whose `variantCost` is empty (upstream's default)."""


class ConditionType(StrEnum):
    TARGET_RESOLVED = "TargetResolved"
    METRICS_AVAILABLE = "MetricsAvailable"
    OPTIMIZATION_READY = "OptimizationReady"


@fast_init
@dataclass(frozen=True, slots=True)
class Condition:
    """A `metav1.Condition` without the bookkeeping fields the edge fills in."""

    type: ConditionType
    status: bool
    reason: str
    message: str
    last_transition_s: float | None = None


class DecisionPath(StrEnum):
    """Which rung of the seed-002 hierarchy produced a decision (persisted with it, so followers serve it)."""

    OPTIMIZER = "optimizer"
    FALLBACK = "fallback"
    LAST_RESORT = "last-resort"
    SCALE_FROM_ZERO = "scale-from-zero"
    UNKNOWN = "unknown"
    """Read from a status written without a path (an older release, or upstream WVA); the leader's next write
    records it."""


@fast_init
@dataclass(frozen=True, slots=True)
class DesiredAlloc:
    """`status.desiredOptimizedAlloc` of a VA: the engine's last decision, as persisted."""

    num_replicas: int
    reason: str
    last_run_time_s: float
    last_update_s: float | None
    """When `num_replicas` or the reason (its template, not its numbers) last changed; None = never set."""
    accelerator: str = ""
    path: DecisionPath = DecisionPath.UNKNOWN
    """How the decision was reached; what a follower serves as the decision's path."""


@fast_init
@dataclass(frozen=True, slots=True)
class Recommendation:
    """`status.recommendation`: the decaying-histogram recommender's replica bounds for the variant."""

    lower_bound: int
    target: int
    upper_bound: int


@dataclass(frozen=True, slots=True)
class VariantStatus:
    """The VA status as read from the API server (or carried over by replay)."""

    desired: DesiredAlloc | None = None
    applied: bool | None = None
    conditions: tuple[Condition, ...] = ()
    recommendation: Recommendation | None = None
    learned: Mapping[str, Any] = field(default_factory=dict)
    """`status.learned`: what the leader learned about this variant and a new leader must not lose (the
    queueing model's filter state, the recommender's checkpoint), one JSON section per owner. Each owner
    parses its own section strictly and starts afresh (with a note) when it is malformed."""

    def condition(self, kind: ConditionType) -> Condition | None:
        return next((c for c in self.conditions if c.type == kind), None)


@dataclass(frozen=True, slots=True)
class VariantSpec:
    """`spec` of a VariantAutoscaling, validated (see adapter.config.va)."""

    key: VariantKey
    model_id: str
    target_kind: str
    target_name: str
    target_api_version: str = "apps/v1"
    min_replicas: int = 1
    max_replicas: int = 2
    cost: float = DEFAULT_VARIANT_COST
    """Cost of one replica per hour, from `spec.variantCost`."""
    accelerator: str = ""
    """From the VA label `inference.optimization/acceleratorName`; the scale target may supply it instead."""

    @property
    def model(self) -> ModelKey:
        return ModelKey(self.key.namespace, self.model_id)


@dataclass(frozen=True, slots=True)
class VllmArgs:
    """Serving parameters parsed from the pod template's vLLM arguments (upstream defaults)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 0
    max_model_len: int = 0
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    tensor_parallel_size: int = 1
    num_gpu_blocks_override: int = 0
    kv_cache_dtype: str = "auto"
    enforce_eager: bool = False
    chunked_prefill: bool = True
    v1_engine: bool = True

    @property
    def effective_max_batched_tokens(self) -> int:
        """Upstream rule: explicit value; else 8192 (V1, chunked) or 2048 (V0, chunked);
        else max_model_len when > 2048; else 2048."""
        if self.max_num_batched_tokens > 0:
            return self.max_num_batched_tokens
        if self.chunked_prefill:
            return 8192 if self.v1_engine else 2048
        return self.max_model_len if self.max_model_len > 2048 else 2048


@dataclass(frozen=True, slots=True)
class ScaleTarget:
    """The Deployment / StatefulSet / LeaderWorkerSet a VA points at."""

    kind: str
    namespace: str
    name: str
    replicas: int
    """Current replicas: `status.replicas`, or `spec.replicas` when status reports 0."""
    ready_replicas: int
    spec_replicas: int | None = None
    """`spec.replicas` (None = unset, which Kubernetes treats as 1)."""
    gpus_per_replica: int = 1
    accelerator: str = ""
    """From nodeSelector / node affinity (`nvidia.com/gpu.product`, …), if any."""
    vllm: VllmArgs = field(default_factory=VllmArgs)
    role: str = ""
    """P/D disaggregation role from the pod label `llm-d.ai/role`: "prefill", "decode", or "" (both)."""
    startup_s: tuple[float, ...] = ()
    """Startup durations (pod creation → Ready, seconds) of the target's pods that are Ready now, ascending;
    () = none known (no ready pod, or timestamps missing). The inventory reads them from the pods
    (`PodInfo.startup_s`), the simulator from its pods' creation and ready times. A forecast's lead time (the
    p90 of these, issue 18) comes from here; a variant at zero replicas has none, so the caller needs a
    remembered value or a configured default."""

    @property
    def pending_replicas(self) -> int:
        return max(0, self.replicas - self.ready_replicas)

    @property
    def active(self) -> bool:
        """Upstream: a target is active when spec.replicas > 0 (unset counts as 1)."""
        return (1 if self.spec_replicas is None else self.spec_replicas) > 0


@dataclass(frozen=True, slots=True)
class PodMetrics:
    """Per-pod results of the collection queries. None = the query returned nothing for this pod."""

    namespace: str
    pod: str
    variant: str
    kv_cache_usage: float | None = None
    queue_length: float | None = None
    running_requests: float | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    tokens_in_use: float | None = None
    avg_input_tokens: float | None = None
    avg_output_tokens: float | None = None
    prefix_cache_hit_rate: float | None = None
    arrival_rate_rps: float | None = None
    avg_ttft_s: float | None = None
    avg_itl_s: float | None = None
    max_batch_size: int | None = None

    @property
    def total_kv_capacity_tokens(self) -> int:
        if self.num_gpu_blocks is None or self.block_size is None:
            return 0
        return max(0, self.num_gpu_blocks * self.block_size)

    @property
    def has_saturation_metrics(self) -> bool:
        """Upstream keeps a pod only if it has KV-cache or queue data."""
        return self.kv_cache_usage is not None or self.queue_length is not None


_POD_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(PodMetrics))
_POD_SLOT_SETTERS: dict[str, Any] = {name: getattr(PodMetrics, name).__set__ for name in _POD_FIELDS}
"""Each field's slot descriptor setter: stores into a frozen instance without `object.__setattr__`."""


def pod_metrics_from_columns(columns: Mapping[str, Sequence[Any]]) -> tuple[PodMetrics, ...]:
    """Many PodMetrics at once from one sequence per field (every field named, all of one length), equal to
    `PodMetrics(**{name: column[i] ...})` for each i.

    Why: the collector builds 100,000 of them a cycle at 10,000 VAs, and a frozen dataclass' `__init__` sets
    each of the 16 fields through `object.__setattr__` (2.1 µs a pod, ~210 ms a cycle). Here the objects are
    allocated without `__init__` and each field is stored column by column through its slot descriptor, in C
    (`map` over the objects and the column): ~1 µs a pod. No validation is skipped: PodMetrics has none.

    Example: {"namespace": ["ns", "ns"], "pod": ["a", "b"], "variant": ["v", "v"], "kv_cache_usage": [0.5, None],
    ...every other field...} -> (PodMetrics("ns", "a", "v", 0.5, ...), PodMetrics("ns", "b", "v", None, ...)).
    """
    if set(columns) != set(_POD_FIELDS):
        missing, unknown = sorted(set(_POD_FIELDS) - set(columns)), sorted(set(columns) - set(_POD_FIELDS))
        raise ValueError(f"pod_metrics_from_columns needs every PodMetrics field: missing {missing}, unknown {unknown}")
    lengths = {len(column) for column in columns.values()}
    if len(lengths) > 1:
        raise ValueError(f"pod_metrics_from_columns needs columns of one length, got lengths {sorted(lengths)}")
    count = lengths.pop()
    pods = list(map(object.__new__, repeat(PodMetrics, count)))
    for name in _POD_FIELDS:
        deque(map(_POD_SLOT_SETTERS[name], pods, columns[name]), maxlen=0)  # consumes the map: stores in C
    return tuple(pods)


@fast_init
@dataclass(frozen=True, slots=True)
class ModelTraffic:
    """Model-level signals: requests over the retention window, the EPP flow-control queue, latency histograms."""

    key: ModelKey
    request_count: float | None = None
    """`sum(increase(vllm:request_success_total[retention]))`; None = no answer (never read as zero)."""
    epp_queue_size: float | None = None
    epp_queue_bytes: float | None = None
    latency: ModelLatency | None = None
    """TTFT and per-request TPOT histograms summed over the model's pods (adapter.domain.latency); None = no
    latency series for the model (or the queries failed): no evidence."""


@dataclass(frozen=True, slots=True)
class NodeGpus:
    name: str
    accelerator: str
    allocatable_gpus: int


@dataclass(frozen=True, slots=True)
class VariantView:
    """Everything known about one VA this cycle."""

    spec: VariantSpec
    status: VariantStatus = field(default_factory=VariantStatus)
    target: ScaleTarget | None = None
    """None when the scale target was not found (TargetResolved=False)."""

    @property
    def key(self) -> VariantKey:
        return self.spec.key

    @property
    def accelerator(self) -> str:
        return (
            self.spec.accelerator
            or (self.target.accelerator if self.target else "")
            or (self.status.desired.accelerator if self.status.desired else "")
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One instant of the world, as the engine sees it."""

    taken_at_s: float
    variants: tuple[VariantView, ...]
    pods: tuple[PodMetrics, ...] = ()
    models: Mapping[ModelKey, ModelTraffic] = field(default_factory=dict)
    nodes: tuple[NodeGpus, ...] = ()
    metrics_available: bool = True
    """False when the collection failed this cycle (e.g. Prometheus unreachable)."""
    unavailable_models: frozenset[ModelKey] = frozenset()
    """Models whose collection failed or was partial even though others succeeded."""

    def metrics_ok(self, model: ModelKey) -> bool:
        return self.metrics_available and model not in self.unavailable_models

    def variants_by_model(self) -> dict[ModelKey, list[VariantView]]:
        return variants_by_model(self.variants)

    def pods_by_variant(self) -> dict[VariantKey, list[PodMetrics]]:
        """Pods by VA, each VA's pods in name order, the VAs in (namespace, name) order.

        Grouped first and sorted per VA (10 pods) rather than all pods at once (100,000 at 10,000 VAs), with one
        key object per VA: 3x faster than one sort of every pod by (namespace, variant, pod), same result. A VA
        whose pods arrived in name order (the collector's: it lists pods by (namespace, pod)) is not sorted again:
        the order is checked as the pods are grouped, while each pod is in the CPU's caches, where the sort, after
        the pass over every pod, read each one again (at 10,000 VAs from memory: docs/benchmarks/scale.md, item 15).
        """
        groups: dict[tuple[str, str], list[PodMetrics]] = {}
        unordered: set[tuple[str, str]] = set()
        group: list[PodMetrics] = []
        key: tuple[str, str] = ("", "")
        namespace = variant = None
        last_name = ""
        for pod in self.pods:  # a VA's pods mostly come one after the other: compared, not hashed as a tuple
            if pod.variant != variant or pod.namespace != namespace:
                namespace, variant = pod.namespace, pod.variant
                key = (namespace, variant)
                group = groups.setdefault(key, [])
                last_name = group[-1].pod if group else ""
            name = pod.pod
            if name < last_name:  # equal names keep their order, as the stable sort keeps them
                unordered.add(key)
            last_name = name
            group.append(pod)
        by_name = attrgetter("pod")
        return {
            VariantKey(*key): sorted(groups[key], key=by_name) if key in unordered else groups[key]
            for key in sorted(groups)
        }


def variants_by_model(variants: Iterable[VariantView]) -> dict[ModelKey, list[VariantView]]:
    """VAs by model, the models in the order of their first VA, each model's VAs in (namespace, name) order.

    Sorted on (namespace, name) tuples, which compare in C, rather than on the VariantKeys, whose generated
    `__lt__` builds two tuples a comparison (12 → 4 ms at 10,000 VAs); one ModelKey per model, not per VA."""
    groups: dict[tuple[str, str], list[VariantView]] = {}
    models: dict[tuple[str, str], ModelKey] = {}
    for view in sorted(variants, key=_namespace_and_name):
        spec = view.spec
        model = (spec.key.namespace, spec.model_id)
        group = groups.get(model)
        if group is None:
            group = groups[model] = []
            models[model] = ModelKey(*model)
        group.append(view)
    return {models[model]: views for model, views in groups.items()}


def _namespace_and_name(view: VariantView) -> tuple[str, str]:
    """A VA's sort key: its VariantKey's order, as a tuple."""
    key = view.spec.key
    return key.namespace, key.name
