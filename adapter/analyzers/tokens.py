"""Saturation analyzer, token-based (V2), as seed 001 and research §2 describe it.

Capacity and demand are counted in KV-cache tokens, so variants on different hardware compare directly.

Per replica (pod with metrics):

    k1     = floor(total_kv_tokens · kvCacheThreshold)                       memory bound
    k2     = observed tokens_in_use when the queue is saturated             compute bound, first of:
             → mean of the last 10 such observations (per model, accelerator, output-length bucket)
             → floor(N · (I + O/2)), N = min(B·O/(I+O), S)   from vLLM --max-num-batched-tokens B, --max-num-seqs S
             → k1
    capacity = min(k1, k2)
    demand   = tokens_in_use + queue_length · floor(avg_input_tokens)

Per variant: `per_replica_capacity` = median capacity of its reporting replicas; `total_capacity` = ready
replicas × per-replica capacity. Per model (or per P/D role):

    supply      = Σ total_capacity            anticipated = Σ (ready + pending) · per_replica_capacity
    demand      = Σ variant demand + EPP queue demand
    required    = max(0, demand / scaleUpThreshold - anticipated)
    spare       = max(0, supply - demand / scaleDownBoundary)

Worked example (thresholds 0.80 / 0.85 / 0.70): one L4 variant with 2 ready replicas, each with 1,000 blocks
of 16 tokens (16,000 tokens) and 6,000 + 5,000 tokens in use, no queue, no vLLM arguments known:
k1 = floor(16,000 · 0.80) = 12,800 = k2 (fallback); supply = 2 · 12,800 = 25,600; demand = 11,000;
required = max(0, 11,000 / 0.85 - 25,600) = 0; spare = max(0, 25,600 - 11,000 / 0.70) = 9,886, so
floor(9,886 / 12,800) = 0 replicas may go: the model holds at 2.

Where we differ from upstream (docs/deviations.md): a replica without `cache_config_info` is not dropped (which
zeroes demand under load on emulators) but sized from the variant's remembered capacity; a variant without
metrics is never "free" (its capacity stays unknown, so the optimizer never picks it blind); the EPP queue
demand is actually fed (upstream's engine never populates it); remembered capacities expire after
`CAPACITY_EVICTION_S` and k2 history after `HISTORY_EVICTION_S` (upstream declares but never calls eviction).

The analyzer (`ANALYZER`, adapter.analyzers.protocol) hands the allocation step a capacity signal in tokens; its
memory (`TokenMemory`: k2 history, each variant's last measured capacity) sizes replicas without KV data and
variants at zero replicas.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from adapter.analyzers import memory as state_json
from adapter.analyzers.protocol import Analysis, CapacityWording, ModelInput, Unprepared
from adapter.config.configmaps import SaturationConfig
from adapter.domain.accelerators import normalize_accelerator
from adapter.domain.capacity import CapacitySignal, CapacityUnit, NoSignal, Role, VariantSupply, supply_of
from adapter.domain.decision import AnalyzerName
from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.snapshot import ModelTraffic, PodMetrics, VariantView, VllmArgs

K = TypeVar("K")
V = TypeVar("V")

LABEL = "V2"
"""How reasons name this analyzer."""

ROLLING_WINDOW = 10
"""k2 observations kept per history key (upstream RollingAverageWindowSize)."""
HISTORY_EVICTION_S = 24 * 3600.0
CAPACITY_EVICTION_S = 7 * 24 * 3600.0
BYTES_PER_TOKEN = 4
SHORT_OUTPUT_TOKENS = 100
MEDIUM_OUTPUT_TOKENS = 500


def output_bucket(avg_output_tokens: float) -> str:
    """Workload bucket of the k2 history: short < 100 <= medium < 500 <= long output tokens."""
    if avg_output_tokens < SHORT_OUTPUT_TOKENS:
        return "short"
    if avg_output_tokens < MEDIUM_OUTPUT_TOKENS:
        return "medium"
    return "long"


@dataclass(frozen=True, slots=True)
class K2History:
    """The last observed compute-bound capacities for one (model, accelerator, output bucket)."""

    samples_tokens: tuple[int, ...]
    updated_s: float

    @property
    def mean_tokens(self) -> float:
        return sum(self.samples_tokens) / len(self.samples_tokens) if self.samples_tokens else 0.0


@dataclass(frozen=True, slots=True)
class CapacityRecord:
    """A variant's last measured per-replica capacity, kept so a variant at zero replicas still has a size."""

    per_replica_tokens: int
    total_kv_tokens: int
    """KV tokens of one replica (num_gpu_blocks · block_size); 0 = unknown."""
    measured_s: float


@dataclass(frozen=True, slots=True)
class TokenMemory:
    """What V2 remembers between cycles (in EngineState; serialised by the recorder)."""

    k2_history: Mapping[str, K2History] = field(default_factory=dict)
    capacity: Mapping[VariantKey, CapacityRecord] = field(default_factory=dict)

    def updated(self, updates: Sequence[TokenMemory], now_s: float) -> TokenMemory:
        """This memory with every model's updates applied, then entries past their eviction age dropped."""
        history = dict(self.k2_history)
        capacity = dict(self.capacity)
        for update in updates:
            history.update(update.k2_history)
            capacity.update(update.capacity)
        return TokenMemory(
            {k: h for k, h in history.items() if now_s - h.updated_s < HISTORY_EVICTION_S},
            {k: r for k, r in capacity.items() if now_s - r.measured_s < CAPACITY_EVICTION_S},
        )


@dataclass(frozen=True, slots=True)
class ReplicaCapacity:
    pod: str
    k1_tokens: int
    k2_tokens: int
    k2_source: str
    """observed | history | derived | k1 | remembered"""
    demand_tokens: float

    @property
    def capacity_tokens(self) -> int:
        return min(self.k1_tokens, self.k2_tokens)


def derived_k2(vllm: VllmArgs, avg_input_tokens: float, avg_output_tokens: float) -> int:
    """Steady-state batching bound: N = min(B·O/(I+O), S) concurrent sequences, each holding I + O/2 tokens.

    Example: B = 8192, S = 256, I = 1000, O = 200 → N = min(8192·200/1200, 256) = min(1365.3, 256) = 256,
    so k2 = floor(256 · (1000 + 200/2)) = 281,600 tokens.
    """
    b, s = vllm.effective_max_batched_tokens, vllm.max_num_seqs
    i, o = avg_input_tokens, avg_output_tokens
    if b <= 0 or o <= 0 or i < 0:
        return 0
    n = min(b * o / (i + o), float(s))
    return max(0, math.floor(n * (i + o / 2)))


def _history_key(model: ModelKey, accelerator: str, avg_output_tokens: float) -> str:
    return f"{model.model_id}|{accelerator}|{output_bucket(avg_output_tokens)}"


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) and value >= 0 else None


def replica_capacity(
    pod: PodMetrics,
    *,
    cfg: SaturationConfig,
    vllm: VllmArgs,
    history: K2History | None,
    remembered: CapacityRecord | None,
) -> tuple[ReplicaCapacity | None, int | None]:
    """One replica's capacity and demand; the second value is a new k2 observation to record, if any.

    Returns None for a replica whose size cannot be known at all (no KV total, nothing remembered)."""
    kv = _finite(pod.kv_cache_usage) or 0.0
    queue = _finite(pod.queue_length) or 0.0
    avg_in = math.floor(_finite(pod.avg_input_tokens) or 0.0)
    avg_out = _finite(pod.avg_output_tokens) or 0.0
    total = pod.total_kv_capacity_tokens
    queued_tokens = queue * avg_in
    if total <= 0:
        if remembered is None:
            return None, None
        total_est = remembered.total_kv_tokens or remembered.per_replica_tokens / max(cfg.kv_cache_threshold, 1e-9)
        tokens = _finite(pod.tokens_in_use)
        used = tokens if tokens is not None else kv * total_est
        cap = remembered.per_replica_tokens
        return ReplicaCapacity(pod.pod, cap, cap, "remembered", used + queued_tokens), None
    tokens = _finite(pod.tokens_in_use)
    used = tokens if tokens is not None else kv * total
    k1 = math.floor(total * cfg.kv_cache_threshold)
    observed: int | None = None
    if queue >= math.floor(cfg.queue_length_threshold) and used > 0:
        observed = math.floor(used)
        k2, source = observed, "observed"
    elif history is not None and history.mean_tokens > 0:
        k2, source = math.floor(history.mean_tokens), "history"
    elif (d := derived_k2(vllm, avg_in, avg_out)) > 0:
        k2, source = d, "derived"
    else:
        k2, source = k1, "k1"
    return ReplicaCapacity(pod.pod, k1, k2, source, used + queued_tokens), observed


def integer_median(values: Sequence[int]) -> int:
    """Upstream's median: the middle value, or the floor of the mean of the two middle values."""
    return math.floor(statistics.median(sorted(values)))


@dataclass(frozen=True, slots=True)
class _VariantResult:
    supply: VariantSupply
    total_capacity: float
    source: str


@dataclass(frozen=True, slots=True)
class TokenBased(Unprepared[SaturationConfig, TokenMemory]):
    """The token-based analyzer (V2) as the engine calls it."""

    name: AnalyzerName = AnalyzerName.SATURATION_TOKEN
    reads: frozenset[str] = frozenset(
        {
            "kv_cache_usage",
            "queue_length",
            "num_gpu_blocks",
            "block_size",
            "tokens_in_use",
            "avg_input_tokens",
            "avg_output_tokens",
            "prefix_cache_hit_rate",
            "epp_queue_size",
            "epp_queue_bytes",
        }
    )

    @property
    def memory(self) -> TokenMemoryKind:
        return TokenMemoryKind()

    def configure(self, model: ModelInput) -> tuple[SaturationConfig, tuple[str, ...]]:
        return model.saturation, model.saturation_warnings

    def analyze(
        self, model: ModelInput, config: SaturationConfig, memory: TokenMemory, now_s: float
    ) -> Analysis[TokenMemory]:
        roles = {v.key.name: Role(v.target.role) if v.target and v.target.role else Role.BOTH for v in model.views}
        outcome, update = measure(
            model.model,
            model.views,
            model.pods,
            cfg=config,
            traffic=model.traffic,
            roles=roles,
            memory=memory,
            now_s=now_s,
        )
        if isinstance(outcome, NoSignal):
            return Analysis.unmeasured(outcome.reason, memory=update)
        return Analysis.measured(outcome, CapacityWording(LABEL, outcome), notes=outcome.notes, memory=update)


def measure(
    model: ModelKey,
    views: Sequence[VariantView],
    pods_by_variant: Mapping[str, Sequence[PodMetrics]],
    *,
    cfg: SaturationConfig,
    traffic: ModelTraffic | None,
    roles: Mapping[str, Role],
    memory: TokenMemory,
    now_s: float,
) -> tuple[CapacitySignal | NoSignal, TokenMemory]:
    """The model's token capacity signal, and this model's update to V2's memory (`TokenMemory.updated`
    merges every model's update once per cycle)."""
    all_pods = [p for v in views for p in pods_by_variant.get(v.key.name, ())]
    averages = _Averages(
        _mean([p.avg_input_tokens for p in all_pods]),
        _mean([p.avg_output_tokens for p in all_pods]),
        _mean([p.prefix_cache_hit_rate for p in all_pods]),
    )
    history = _Overlay(memory.k2_history)
    capacity = _Overlay(memory.capacity)
    notes: list[str] = []
    results = [
        _measure_variant(
            model,
            view,
            pods_by_variant.get(view.key.name, ()),
            cfg=cfg,
            role=roles.get(view.key.name, Role.BOTH),
            averages=averages,
            history=history,
            capacity=capacity,
            notes=notes,
            now_s=now_s,
        )
        for view in views
    ]
    new_memory = TokenMemory(history.written, capacity.written)
    if not any(r.supply.per_replica_capacity > 0 for r in results):
        reason = "no variant's per-replica token capacity is known; " + ("; ".join(notes) or "no KV-cache data")
        return NoSignal(model, AnalyzerName.SATURATION_TOKEN, reason), new_memory
    return _signal(model, results, cfg, _queue_demand(traffic, averages), notes), new_memory


class _Overlay(Generic[K, V]):
    """Reads fall through to the previous cycle's memory; writes are collected as this model's update, so a
    cycle costs O(its own entries), not O(all models' memory) per model."""

    def __init__(self, base: Mapping[K, V]) -> None:
        self._base = base
        self.written: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        return self.written.get(key, self._base.get(key))

    def __setitem__(self, key: K, value: V) -> None:
        self.written[key] = value


@dataclass(frozen=True, slots=True)
class _Averages:
    """Model-level means over the reporting pods (for the EPP queue and for sizing unmeasured variants)."""

    input_tokens: float
    output_tokens: float
    prefix_hit_rate: float


def _measure_variant(
    model: ModelKey,
    view: VariantView,
    pods: Sequence[PodMetrics],
    *,
    cfg: SaturationConfig,
    role: Role,
    averages: _Averages,
    history: _Overlay[str, K2History],
    capacity: _Overlay[VariantKey, CapacityRecord],
    notes: list[str],
    now_s: float,
) -> _VariantResult:
    """One variant's supply; records k2 observations into `history` and measured sizes into `capacity`."""
    target = view.target
    vllm = target.vllm if target else VllmArgs()
    accelerator = normalize_accelerator(view.accelerator)
    remembered = capacity.get(view.key)
    replicas: list[ReplicaCapacity] = []
    for pod in pods:
        key = _history_key(model, accelerator, _finite(pod.avg_output_tokens) or 0.0)
        rc, observed = replica_capacity(pod, cfg=cfg, vllm=vllm, history=history.get(key), remembered=remembered)
        if observed is not None:
            prev = history.get(key)
            samples = ((prev.samples_tokens if prev else ()) + (observed,))[-ROLLING_WINDOW:]
            history[key] = K2History(samples, now_s)
        if rc is None:
            notes.append(f"{view.key.name}/{pod.pod}: no KV-cache size (cache_config_info) and none remembered")
            continue
        replicas.append(rc)
    if replicas:
        per_replica = integer_median([r.capacity_tokens for r in replicas])
        source = "+".join(sorted({r.k2_source for r in replicas}))
        kv_total = max((p.total_kv_capacity_tokens for p in pods), default=0)
        if per_replica > 0 and any(r.k2_source != "remembered" for r in replicas):
            capacity[view.key] = CapacityRecord(per_replica, kv_total, now_s)
    elif remembered is not None:
        per_replica, source = remembered.per_replica_tokens, "remembered"
    else:
        per_replica, source = _estimate(vllm, averages, cfg), "derived-from-args"
    supply = supply_of(
        view, per_replica_capacity=float(per_replica), demand=sum(r.demand_tokens for r in replicas), role=role
    )
    return _VariantResult(supply, supply.ready_replicas * per_replica, source)


def _signal(
    model: ModelKey,
    results: Sequence[_VariantResult],
    cfg: SaturationConfig,
    queue: tuple[float, float],
    notes: Sequence[str],
) -> CapacitySignal:
    """Supply, demand, required and spare per model (or per P/D role), and the replay `analysis` fields."""
    queue_in, queue_out = queue
    disaggregated = any(r.supply.role is not Role.BOTH for r in results)
    groups = sorted({r.supply.role for r in results}) if disaggregated else [Role.BOTH]
    role_signals: dict[Role, tuple[float, float]] = {}
    supply_total = demand_total = 0.0
    for role in groups:
        members = [r for r in results if not disaggregated or r.supply.role is role]
        supply = sum(r.total_capacity for r in members)
        anticipated = sum(
            (r.supply.ready_replicas + r.supply.pending_replicas) * r.supply.per_replica_capacity for r in members
        )
        queued = {Role.PREFILL: queue_in, Role.DECODE: queue_in + queue_out}.get(role, queue_in + queue_out)
        demand = sum(r.supply.demand for r in members) + queued
        role_signals[role] = (
            max(0.0, demand / cfg.scale_up_threshold - anticipated),
            max(0.0, supply - demand / cfg.scale_down_boundary),
        )
        supply_total += supply
        demand_total += demand
    required = sum(r for r, _ in role_signals.values())
    spare = sum(s for _, s in role_signals.values())
    analysis: dict[str, object] = {
        "total_supply": round(supply_total, 3),
        "total_demand": round(demand_total, 3),
        "utilization": round(demand_total / supply_total, 6) if supply_total > 0 else 0.0,
        "required_capacity": round(required, 3),
        "spare_capacity": round(spare, 3),
        "epp_queue_demand": round(queue_in + queue_out, 3),
        "variants": {
            r.supply.name: {
                "per_replica_capacity": r.supply.per_replica_capacity,
                "replica_count": r.supply.ready_replicas,
                "total_capacity": r.total_capacity,
                "total_demand": round(r.supply.demand, 3),
                "capacity_source": r.source,
                "role": str(r.supply.role),
            }
            for r in results
        },
    }
    if disaggregated:
        analysis["roles"] = {
            str(role): {"required_capacity": round(req, 3), "spare_capacity": round(sp, 3)}
            for role, (req, sp) in role_signals.items()
        }
    return CapacitySignal(
        model=model,
        analyzer=AnalyzerName.SATURATION_TOKEN,
        unit=CapacityUnit.TOKENS,
        required=required,
        spare=spare,
        variants=tuple(r.supply for r in results),
        priority=cfg.priority,
        analysis=analysis,
        roles=role_signals if disaggregated else None,
        notes=tuple(notes),
    )


def _mean(values: Sequence[float | None]) -> float:
    usable = [v for v in (_finite(x) for x in values) if v is not None]
    return sum(usable) / len(usable) if usable else 0.0


def _estimate(vllm: VllmArgs, averages: _Averages, cfg: SaturationConfig) -> int:
    """A variant nobody has measured: derived k2 from its vLLM arguments, bounded by k1 when
    `--num-gpu-blocks-override` fixes its KV size; 0 (unknown) when the token lengths are unknown."""
    k2 = derived_k2(vllm, math.floor(averages.input_tokens), averages.output_tokens)
    if vllm.num_gpu_blocks_override > 0:
        k1 = math.floor(vllm.num_gpu_blocks_override * vllm.block_size * cfg.kv_cache_threshold)
        return min(k1, k2) if k2 > 0 else k1
    return k2


def _queue_demand(traffic: ModelTraffic | None, averages: _Averages) -> tuple[float, float]:
    """Tokens waiting in the EPP flow-control queue: (input, output).

    input = max(bytes / 4, size · avg_in) · (1 - prefix hit rate); output = size · avg_out. Example: 10 queued
    requests, 40,000 bytes, avg_in 800, avg_out 200, hit 0.25 → input max(10,000, 8,000) · 0.75 = 7,500,
    output 2,000."""
    if traffic is None:
        return 0.0, 0.0
    size = _finite(traffic.epp_queue_size) or 0.0
    size_bytes = _finite(traffic.epp_queue_bytes) or 0.0
    if size == 0 and size_bytes == 0:
        return 0.0, 0.0
    hit = min(max(averages.prefix_hit_rate, 0.0), 1.0)
    return (
        max(size_bytes / BYTES_PER_TOKEN, size * averages.input_tokens) * (1 - hit),
        size * averages.output_tokens,
    )


@dataclass(frozen=True, slots=True)
class TokenMemoryKind:
    """Every model's update merged, then entries past their eviction age dropped (`TokenMemory.updated`).

    JSON (`engine_state.tokens`):
    {"k2_history": {"<model>|<accelerator>|<bucket>": {"samples_tokens": [..], "updated_s"}},
     "capacity":   {"ns/va": {"per_replica_tokens", "total_kv_tokens", "measured_s"}}}"""

    section: str = "tokens"

    def empty(self) -> TokenMemory:
        return TokenMemory()

    def next(
        self, previous: TokenMemory, updates: Sequence[TokenMemory], *, decided: AbstractSet[VariantKey], now_s: float
    ) -> TokenMemory:
        del decided  # keyed by model and accelerator; entries expire by age instead
        return previous.updated(updates, now_s)

    def to_json(self, memory: TokenMemory) -> dict[str, Any]:
        return {
            "k2_history": {
                k: {"samples_tokens": list(h.samples_tokens), "updated_s": h.updated_s}
                for k, h in sorted(memory.k2_history.items())
            },
            "capacity": {
                str(k): {
                    "per_replica_tokens": r.per_replica_tokens,
                    "total_kv_tokens": r.total_kv_tokens,
                    "measured_s": r.measured_s,
                }
                for k, r in sorted(memory.capacity.items())
            },
        }

    def from_json(self, doc: Any, path: str) -> TokenMemory:
        top = state_json.obj(doc, path, {"k2_history", "capacity"})
        history = {}
        for key, raw in state_json.obj(top.get("k2_history", {}), f"{path}.k2_history").items():
            where = f"{path}.k2_history[{key!r}]"
            entry = state_json.obj(raw, where, {"samples_tokens", "updated_s"})
            samples = entry.get("samples_tokens")
            if not isinstance(samples, list) or not all(type(x) is int and x >= 0 for x in samples):
                raise state_json.StateFormatError(f"{where}.samples_tokens", "must be a list of non-negative integers")
            history[key] = K2History(tuple(samples), state_json.number(entry, "updated_s", where))
        capacity = {}
        for key, raw in state_json.obj(top.get("capacity", {}), f"{path}.capacity").items():
            where = f"{path}.capacity[{key!r}]"
            entry = state_json.obj(raw, where, {"per_replica_tokens", "total_kv_tokens", "measured_s"})
            capacity[state_json.variant_key(key, f"{path}.capacity")] = CapacityRecord(
                state_json.count(entry, "per_replica_tokens", where),
                state_json.count(entry, "total_kv_tokens", where),
                state_json.number(entry, "measured_s", where),
            )
        return TokenMemory(history, capacity)


ANALYZER = TokenBased()
