"""A simulated fleet: several variants (Deployments) of one model behind an EPP-like router, on a virtual clock.

The fleet is the "world" the engine observes and the actuators change:

* `advance(until_s)` moves time: requests arrive from the workload, are routed, and every replica runs.
* `snapshot(now_s, statuses)` is what the collector and the inventory would report (a domain `Snapshot`).
* `set_replicas(variant, n, now_s)` is what HPA/KEDA do to `spec.replicas` of a Deployment.

Pods (one per replica) go UNSCHEDULED (no free GPU of their accelerator; only when `nodes` limit it) →
STARTING (GPU held, model loading: a lognormal startup time with the given median and p90) → READY (routed to,
scraped) → DRAINING (scale-down: no new requests, in-flight work continues for up to `drain_grace_s`, like a
terminationGracePeriod; whatever is left then is dropped with reason `drained`) → gone. Scale-down removes
not-ready pods first (newest first, as a ReplicaSet does), then the least-loaded ready pods. GPU time and cost
are charged from scheduling until the pod is gone (STARTING and DRAINING pods hold their GPU).

Router (EPP-like): the fleet moves in ticks (`tick_s`, also split at pod transitions and scrapes). At each tick
the arrivals of that tick are routed, in order, to the ready pod with the lowest load score (the larger of
slot use and KV use, queued work included — see `ReplicaSim.load_score`); each replica then runs to the end of
the tick, seeing every request at its own arrival time. Load is read at the tick start plus the requests
already routed in the tick (EPP's in-flight tracking), so it is at most one tick stale. When no pod of the
model is ready, requests wait in the EPP flow-control queue (`epp_queue_size`) and are released to the
first pod that becomes ready; a request that waited `epp_queue_timeout_s` is dropped (`epp_timeout`).

Metrics follow what the collector's PromQL would return (research/wva-upstream.md §6.6): gauges are
`max_over_time` of scraped samples over `gauge_window_s` (1m), rates and averages are Δcounter/Δt over
`rate_window_s` (1m; TTFT, ITL, dispatch rate), `token_window_s` (5m; average prompt/generation tokens) or
`latency_histogram_window_s` (5m; the TTFT and TPOT bucket rates of `ModelTraffic.latency`).
Replicas are scraped every `scrape_interval_s`, and the snapshot adds a sample taken at its own instant (as if
a scrape had just happened), so a pod that became ready a moment ago still reports values.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.latency import LatencyHistogram, ModelLatency
from adapter.domain.snapshot import (
    ModelTraffic,
    NodeGpus,
    PodMetrics,
    ScaleTarget,
    Snapshot,
    VariantSpec,
    VariantStatus,
    VariantView,
    VllmArgs,
)
from adapter.sim.replica import (
    TPOT_BUCKETS_S,
    TTFT_BUCKETS_S,
    CompletionSink,
    PerfParams,
    ReplicaSim,
    ScrapeSample,
    SimRequest,
)
from adapter.sim.workload import Request

_Z90 = 1.2815515655446004
"""Standard-normal 90th percentile: p90 = median·exp(σ·z₀.₉)."""
EPP_BYTES_PER_TOKEN = 4
"""Upstream WVA converts EPP queue bytes to tokens at 4 bytes per token; we go the other way."""


# --------------------------------------------------------------------------------------------------------
# configuration


@dataclass(frozen=True, slots=True)
class StartupTime:
    """Pod scheduled → ready, lognormal: σ = ln(p90/median)/z₀.₉.

    Example: median 120 s, p90 300 s ⇒ σ = ln(2.5)/1.2816 = 0.715; 10 % of pods take longer than 300 s.
    p90 == median gives a fixed delay.
    """

    median_s: float = 120.0
    p90_s: float = 300.0

    def __post_init__(self) -> None:
        if self.median_s < 0 or self.p90_s < self.median_s:
            raise ValueError(f"startup: need 0 <= median ({self.median_s}) <= p90 ({self.p90_s})")

    @property
    def sigma(self) -> float:
        if self.median_s <= 0 or self.p90_s <= self.median_s:
            return 0.0
        return math.log(self.p90_s / self.median_s) / _Z90

    def sample_s(self, rng: np.random.Generator) -> float:
        if self.median_s <= 0:
            return 0.0
        sigma = self.sigma
        return self.median_s if sigma == 0 else float(rng.lognormal(math.log(self.median_s), sigma))


@dataclass(frozen=True, slots=True)
class VariantConfig:
    """One VariantAutoscaling + its Deployment: a model on one hardware/serving configuration."""

    name: str
    accelerator: str
    cost: float
    """Per replica-hour."""
    perf: PerfParams = field(default_factory=PerfParams)
    min_replicas: int = 1
    max_replicas: int = 10
    initial_replicas: int = 1
    startup: StartupTime = field(default_factory=StartupTime)
    gpus_per_replica: int = 1
    target_name: str = ""
    """Deployment name; defaults to the variant name."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("variant name must not be empty")
        if self.cost < 0:
            raise ValueError(f"variant {self.name}: cost must be >= 0")
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise ValueError(f"variant {self.name}: need 0 <= min_replicas <= max_replicas")
        if self.initial_replicas < 0 or self.gpus_per_replica < 1:
            raise ValueError(f"variant {self.name}: initial_replicas >= 0 and gpus_per_replica >= 1 required")

    @property
    def deployment(self) -> str:
        return self.target_name or self.name

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> VariantConfig:
        """From a scenario's `variants[]` entry (DESIGN §3.3); unknown keys are an error."""
        known = {
            "name", "accelerator", "cost", "min_replicas", "max_replicas", "initial_replicas",
            "startup_s", "perf", "gpus_per_replica", "target_name",
        }  # fmt: skip
        extra = set(data) - known
        name = str(data.get("name", ""))
        if extra:
            raise ValueError(f"variant {name or '?'}: unknown keys {sorted(extra)}")
        startup = data.get("startup_s") or {}
        perf = dict(data.get("perf") or {})
        try:
            perf_params = PerfParams(**perf)
        except TypeError as exc:
            raise ValueError(f"variant {name}: perf: {exc}") from None
        return cls(
            name=name,
            accelerator=str(data.get("accelerator", "")),
            cost=float(data.get("cost", 10.0)),
            perf=perf_params,
            min_replicas=int(data.get("min_replicas", 1)),
            max_replicas=int(data.get("max_replicas", 10)),
            initial_replicas=int(data.get("initial_replicas", data.get("min_replicas", 1))),
            startup=StartupTime(median_s=float(startup.get("median", 120.0)), p90_s=float(startup.get("p90", 300.0))),
            gpus_per_replica=int(data.get("gpus_per_replica", 1)),
            target_name=str(data.get("target_name", "")),
        )


@dataclass(frozen=True, slots=True)
class MetricWindows:
    """Look-back windows of the collector's queries (upstream: 1m gauges/latency/rate, 5m token averages)."""

    gauge_window_s: float = 60.0
    rate_window_s: float = 60.0
    token_window_s: float = 300.0
    latency_histogram_window_s: float = 300.0
    """TTFT and TPOT bucket rates (`ModelTraffic.latency`; the collector's `latency_histogram_s`)."""


@dataclass(frozen=True, slots=True)
class FleetConfig:
    model_id: str
    variants: tuple[VariantConfig, ...]
    namespace: str = "default"
    tick_s: float = 0.5
    scrape_interval_s: float = 15.0
    windows: MetricWindows = field(default_factory=MetricWindows)
    retention_s: float = 600.0
    """Window of `ModelTraffic.request_count` (scale-to-zero retention period, upstream default 10m)."""
    epp_queue_timeout_s: float = 60.0
    drain_grace_s: float = 30.0
    nodes: tuple[NodeGpus, ...] = ()
    """GPU inventory; accelerators listed here cap scheduling, others are unlimited. Also passed to Snapshot."""
    start_s: float = 0.0
    """Clock origin: a workload request at offset x arrives at start_s + x."""
    seed: int = 0

    @classmethod
    def from_scenario(cls, data: Mapping[str, Any], *, seed: int = 0, **overrides: Any) -> FleetConfig:
        """From a simulation scenario (DESIGN §3.3): `model_id`, `namespace`, `variants[]`,
        `metrics.scrape_interval_s`; anything else (retention_s, epp_queue_timeout_s, nodes, …) via overrides."""
        variants = data.get("variants")
        if not isinstance(variants, list) or not variants:
            raise ValueError("scenario.variants: expected a non-empty list")
        parsed = []
        for i, item in enumerate(variants):
            if not isinstance(item, Mapping):
                raise ValueError(f"scenario.variants[{i}]: expected a mapping")
            try:
                parsed.append(VariantConfig.from_mapping(item))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"scenario.variants[{i}]: {exc}") from None
        metrics = data.get("metrics") or {}
        if "model_id" not in data:
            raise ValueError("scenario.model_id: required")
        kwargs: dict[str, Any] = {
            "model_id": str(data["model_id"]),
            "variants": tuple(parsed),
            "namespace": str(data.get("namespace", "default")),
            "scrape_interval_s": float(metrics.get("scrape_interval_s", 15.0)),
            "seed": seed,
        }
        kwargs.update(overrides)
        return cls(**kwargs)

    def __post_init__(self) -> None:
        if not self.variants:
            raise ValueError("a fleet needs at least one variant")
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"variant names must be unique, got {names}")
        if self.tick_s <= 0 or self.scrape_interval_s <= 0:
            raise ValueError("tick_s and scrape_interval_s must be > 0")
        if self.epp_queue_timeout_s <= 0 or self.drain_grace_s < 0 or self.retention_s <= 0:
            raise ValueError("epp_queue_timeout_s, retention_s must be > 0 and drain_grace_s >= 0")


# --------------------------------------------------------------------------------------------------------
# pods


class PodState(Enum):
    UNSCHEDULED = "unscheduled"
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    GONE = "gone"


class _Pod:
    __slots__ = (
        "created_s",
        "drain_deadline_s",
        "name",
        "ready_at_s",
        "removed_s",
        "replica",
        "ring",
        "scheduled_s",
        "seq",
        "state",
        "variant",
    )

    def __init__(self, *, name: str, variant: int, seq: int, created_s: float) -> None:
        self.name = name
        self.variant = variant
        self.seq = seq
        self.created_s = created_s
        self.state = PodState.UNSCHEDULED
        self.scheduled_s = math.nan
        self.ready_at_s = math.inf
        self.drain_deadline_s = math.inf
        self.removed_s = math.nan
        self.replica: ReplicaSim | None = None
        self.ring: deque[ScrapeSample] = deque()


@dataclass(frozen=True, slots=True)
class PodScrape:
    """One pod's /metrics as one scrape reads it (the sample's own `t_s` is the replica's clock; the scrape
    instant is passed separately, as Prometheus stamps samples with the scrape time)."""

    pod: str
    variant: str
    sample: ScrapeSample
    num_gpu_blocks: int
    block_size: int


class ScrapeSink(Protocol):
    """Receives every scrape round (e.g. `adapter.sim.metricspath.SeriesStore`, the simulated Prometheus).

    Ready and draining pods are scraped (a terminating vLLM still serves /metrics until it exits); starting
    pods are not (the server is not up yet). The EPP's flow-control queue is scraped in the same round.
    """

    def scrape(self, t_s: float, pods: Sequence[PodScrape], *, epp_queue_size: int, epp_queue_bytes: int) -> None: ...


@dataclass(frozen=True, slots=True)
class PodInfo:
    name: str
    variant: str
    state: PodState
    created_s: float
    ready_at_s: float
    """Planned or actual ready time (inf while unscheduled)."""


# --------------------------------------------------------------------------------------------------------
# results


@dataclass(frozen=True, slots=True)
class ScaleEvent:
    t_s: float
    variant: str
    from_replicas: int
    to_replicas: int


@dataclass(frozen=True, slots=True)
class VariantUsage:
    name: str
    accelerator: str
    replica_seconds: float
    gpu_seconds: float
    cost: float
    """replica_seconds/3600 · cost per replica-hour."""
    max_replicas: int
    """Most pods (starting + ready) at once."""
    scale_events: int


@dataclass(frozen=True, slots=True)
class FleetUsage:
    variants: tuple[VariantUsage, ...]
    arrived: int
    completed: int
    dropped: int
    dropped_by_reason: Mapping[str, int]
    in_flight: int
    preemptions: int
    cold_starts: int = 0
    """Pods started after the fleet's start (each waited its startup time before serving)."""

    @property
    def gpu_hours(self) -> float:
        return sum(v.gpu_seconds for v in self.variants) / 3600.0

    @property
    def cost(self) -> float:
        return sum(v.cost for v in self.variants)


FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class RequestOutcomes:
    """Per-request results for scoring. Latencies in seconds; `itl_s` is NaN for one-token answers."""

    arrival_s: FloatArray
    ttft_s: FloatArray
    itl_s: FloatArray
    e2e_s: FloatArray
    input_tokens: IntArray
    output_tokens: IntArray
    variant: IntArray
    """Index into the fleet's variants."""
    dropped_arrival_s: FloatArray
    dropped_reason: tuple[str, ...]
    in_flight: int

    @property
    def completed(self) -> int:
        return int(self.ttft_s.size)

    @property
    def dropped(self) -> int:
        return int(self.dropped_arrival_s.size)

    def met(self, *, ttft_s: float, itl_s: float) -> npt.NDArray[np.bool_]:
        """Per completed request, whether it met both targets (a NaN ITL, a one-token answer, counts as met): the
        one rule every attainment figure counts with."""
        return (self.ttft_s <= ttft_s) & (np.isnan(self.itl_s) | (self.itl_s <= itl_s))

    def slo_attainment(self, *, ttft_s: float, itl_s: float) -> float:
        """Fraction of finished requests (completed + dropped) meeting both targets; drops count as misses,
        a NaN ITL (one-token answer) as met, requests still in flight at the end are not counted.
        Example: 90 completed of which 80 meet both, 10 dropped ⇒ 80/100 = 0.8."""
        total = self.completed + self.dropped
        if total == 0:
            return 1.0
        return int(np.count_nonzero(self.met(ttft_s=ttft_s, itl_s=itl_s))) / total

    def percentile_ms(self, which: str, q: float) -> float:
        """Percentile (0–100) of `ttft` or `itl` over completed requests, in ms; NaN when none."""
        values = self.ttft_s if which == "ttft" else self.itl_s
        values = values[~np.isnan(values)]
        return float(np.percentile(values, q) * 1000.0) if values.size else math.nan


@dataclass(frozen=True, slots=True)
class TimelinePoint:
    """Fleet state at one scrape instant (for plots)."""

    t_s: float
    spec: tuple[int, ...]
    starting: tuple[int, ...]
    """Unscheduled + starting pods, per variant."""
    ready: tuple[int, ...]
    draining: tuple[int, ...]
    epp_queue: int
    arrived: int
    completed: int
    dropped: int
    queue_length: int
    running: int


# --------------------------------------------------------------------------------------------------------
# the fleet


class SimulatedFleet:
    """See the module docstring. All times are absolute seconds on the fleet's virtual clock."""

    def __init__(
        self, config: FleetConfig, workload: Iterable[Request] = (), *, scrape_sink: ScrapeSink | None = None
    ) -> None:
        self.config = config
        self._sink = scrape_sink
        self._cold_starts = 0
        self.model = ModelKey(config.namespace, config.model_id)
        self._variants = config.variants
        self._index = {v.name: i for i, v in enumerate(self._variants)}
        self._rng = np.random.default_rng(config.seed)
        self._now_s = config.start_s
        self._workload: Iterator[Request] = iter(workload)
        self._next_request: Request | None = None
        self._workload_done = False
        self._next_rid = 0
        self._pods: list[list[_Pod]] = [[] for _ in self._variants]
        self._pod_seq = [0] * len(self._variants)
        self._spec = [v.initial_replicas for v in self._variants]
        self._events: list[ScaleEvent] = []
        self._epp: deque[SimRequest] = deque()
        self._gpu_cap: dict[str, int] = {}
        for node in config.nodes:
            self._gpu_cap[node.accelerator] = self._gpu_cap.get(node.accelerator, 0) + node.allocatable_gpus
        # outcome log (parallel lists; converted to arrays on demand)
        self._arrived = 0
        self._c_arrival: list[float] = []
        self._c_first: list[float] = []
        self._c_done: list[float] = []
        self._c_in: list[int] = []
        self._c_out: list[int] = []
        self._c_var: list[int] = []
        self._d_arrival: list[float] = []
        self._d_reason: list[str] = []
        self._slo: tuple[float, float] | None = None
        self._misses = 0
        self._retired_preemptions = 0
        self._gone_replica_s = [0.0] * len(self._variants)
        self._max_live = [0] * len(self._variants)
        self._success_ring: deque[tuple[float, int]] = deque()
        self._timeline: list[TimelinePoint] = []
        self._next_scrape_s = config.start_s + config.scrape_interval_s
        windows = config.windows
        ring_len = max(
            windows.gauge_window_s, windows.rate_window_s, windows.token_window_s, windows.latency_histogram_window_s
        )
        self._ring_max = math.ceil(ring_len / config.scrape_interval_s) + 3
        for vi, variant in enumerate(self._variants):
            for _ in range(variant.initial_replicas):
                pod = self._new_pod(vi, config.start_s)
                self._start_pod(pod, config.start_s, startup_s=0.0)
                self._make_ready(pod, config.start_s)
                # Running before the fleet's clock starts: as if created a median startup earlier, so the
                # inventory's startup times (`ScaleTarget.startup_s`) are not zeros no real pod would show.
                pod.created_s = config.start_s - variant.startup.median_s
            self._max_live[vi] = variant.initial_replicas
        if scrape_sink is not None:  # Prometheus has been scraping the initial pods all along
            self._emit_scrape(config.start_s)

    # ---------------------------------------------------------------- read-only views

    @property
    def now_s(self) -> float:
        return self._now_s

    @property
    def variants(self) -> tuple[VariantConfig, ...]:
        return self._variants

    @property
    def epp_queue_size(self) -> int:
        return len(self._epp)

    @property
    def scale_events(self) -> tuple[ScaleEvent, ...]:
        return tuple(self._events)

    @property
    def timeline(self) -> tuple[TimelinePoint, ...]:
        return tuple(self._timeline)

    def spec_replicas(self, variant: str) -> int:
        return self._spec[self._vi(variant)]

    def pods(self, variant: str | None = None) -> list[PodInfo]:
        """Pods not yet gone (all variants, or one)."""
        out: list[PodInfo] = []
        for vi, pods in enumerate(self._pods):
            if variant is not None and vi != self._vi(variant):
                continue
            out.extend(
                PodInfo(p.name, self._variants[vi].name, p.state, p.created_s, p.ready_at_s)
                for p in pods
                if p.state is not PodState.GONE
            )
        return out

    def replica_counts(self, variant: str) -> dict[PodState, int]:
        counts = dict.fromkeys(PodState, 0)
        for pod in self._pods[self._vi(variant)]:
            counts[pod.state] += 1
        return counts

    def variant_spec(self, variant: str) -> VariantSpec:
        v = self._variants[self._vi(variant)]
        return VariantSpec(
            key=VariantKey(self.config.namespace, v.name),
            model_id=self.config.model_id,
            target_kind="Deployment",
            target_name=v.deployment,
            min_replicas=v.min_replicas,
            max_replicas=v.max_replicas,
            cost=v.cost,
            accelerator=v.accelerator,
        )

    def scale_target(self, variant: str) -> ScaleTarget:
        """The Deployment as the inventory reads it: status.replicas = non-terminating pods; `startup_s` = each
        ready pod's creation → ready time (waiting for a GPU included, as Kubernetes counts it)."""
        vi = self._vi(variant)
        v = self._variants[vi]
        live = [p for p in self._pods[vi] if p.state in _LIVE]
        ready = [p for p in live if p.state is PodState.READY]
        perf = v.perf
        return ScaleTarget(
            kind="Deployment",
            namespace=self.config.namespace,
            name=v.deployment,
            replicas=len(live),
            ready_replicas=len(ready),
            spec_replicas=self._spec[vi],
            gpus_per_replica=v.gpus_per_replica,
            accelerator=v.accelerator,
            vllm=VllmArgs(
                max_num_seqs=perf.max_num_seqs,
                max_num_batched_tokens=perf.max_num_batched_tokens,
                max_model_len=perf.effective_max_model_len,
                block_size=perf.block_size,
                num_gpu_blocks_override=perf.num_gpu_blocks,
            ),
            startup_s=tuple(sorted(p.ready_at_s - p.created_s for p in ready)),
        )

    # ---------------------------------------------------------------- actuation

    def set_replicas(self, variant: str, replicas: int, now_s: float) -> None:
        """Set `spec.replicas` of a variant's Deployment (what HPA/KEDA do). Advances the fleet to `now_s`.

        Up: new pods start (UNSCHEDULED → STARTING → READY). Down: unscheduled/starting pods go first
        (newest first), then the least-loaded ready pods start draining (see module docstring).
        """
        if replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {replicas}")
        self._sync_to(now_s)
        vi = self._vi(variant)
        now = self._now_s
        old = self._spec[vi]
        live = [p for p in self._pods[vi] if p.state in _LIVE]
        if replicas > len(live):
            for _ in range(replicas - len(live)):
                self._new_pod(vi, now)
            self._schedule(now)
        elif replicas < len(live):
            self._remove_pods(live, len(live) - replicas, now)
        self._spec[vi] = replicas
        self._max_live[vi] = max(self._max_live[vi], replicas)
        if replicas != old:
            self._events.append(ScaleEvent(now, self._variants[vi].name, old, replicas))
        self._transitions(now)  # a zero startup time makes a pod ready at once

    # ---------------------------------------------------------------- time

    def advance(self, until_s: float) -> None:
        """Run the world up to `until_s`."""
        if until_s < self._now_s - 1e-9:
            raise ValueError(f"cannot go back in time: now {self._now_s}, asked {until_s}")
        tick = self.config.tick_s
        while self._now_s < until_s:
            t0 = self._now_s
            self._transitions(t0)
            t1 = min(until_s, t0 + tick, self._next_scrape_s, self._next_transition_s(t0))
            self._route_until(t1)
            for pods in self._pods:
                for pod in pods:
                    if pod.replica is not None and (pod.state is PodState.READY or pod.state is PodState.DRAINING):
                        pod.replica.advance(t1)
            self._now_s = t1
            if t1 >= self._next_scrape_s:
                self._scrape(t1)
                self._next_scrape_s += self.config.scrape_interval_s
        self._transitions(self._now_s)

    def _sync_to(self, now_s: float) -> None:
        if now_s > self._now_s:
            self.advance(now_s)
        elif now_s < self._now_s - 1e-9:
            raise ValueError(f"cannot act in the past: now {self._now_s}, asked {now_s}")

    # ---------------------------------------------------------------- observation

    def snapshot(
        self,
        now_s: float,
        statuses: Mapping[str, VariantStatus] | None = None,
        *,
        metrics_available: bool = True,
    ) -> Snapshot:
        """The world at `now_s` as the engine would see it. `statuses` (by variant name) is the VA status the
        engine wrote last cycle; `metrics_available=False` emulates a Prometheus outage (no pods, no traffic)."""
        self._sync_to(now_s)
        now = self._now_s
        statuses = statuses or {}
        views = tuple(
            VariantView(
                spec=self.variant_spec(v.name),
                status=statuses.get(v.name, VariantStatus()),
                target=self.scale_target(v.name),
            )
            for v in self._variants
        )
        if not metrics_available:
            return Snapshot(taken_at_s=now, variants=views, nodes=self.config.nodes, metrics_available=False)
        pods = tuple(
            self._pod_metrics(pod, now)
            for pods in self._pods
            for pod in pods
            if pod.state is PodState.READY and pod.replica is not None
        )
        traffic = ModelTraffic(
            key=self.model,
            request_count=float(self._success_increase(now)),
            epp_queue_size=float(len(self._epp)),
            epp_queue_bytes=float(sum(r.input_tokens for r in self._epp) * EPP_BYTES_PER_TOKEN),
            latency=self._latency(now),
        )
        return Snapshot(
            taken_at_s=now, variants=views, pods=pods, models={self.model: traffic}, nodes=self.config.nodes
        )

    def _pod_metrics(self, pod: _Pod, now: float) -> PodMetrics:
        replica = pod.replica
        assert replica is not None
        win = self.config.windows
        current = replica.sample()
        samples = [*pod.ring, current]
        recent = [s for s in samples if s.t_s > now - win.gauge_window_s] or [current]
        rate_base = _base_sample(pod.ring, now - win.rate_window_s)
        token_base = _base_sample(pod.ring, now - win.token_window_s)
        elapsed_s = now - rate_base.t_s
        d_ttft = current.ttft_count - rate_base.ttft_count
        d_itl = current.itl_count - rate_base.itl_count
        d_done = current.successes - token_base.successes
        v = self._variants[pod.variant]
        return PodMetrics(
            namespace=self.config.namespace,
            pod=pod.name,
            variant=v.name,
            kv_cache_usage=max(s.kv_cache_usage for s in recent),
            queue_length=float(max(s.queue_length for s in recent)),
            running_requests=float(current.running),
            num_gpu_blocks=v.perf.num_gpu_blocks,
            block_size=v.perf.block_size,
            tokens_in_use=float(replica.tokens_in_use),
            avg_input_tokens=(current.prompt_tokens - token_base.prompt_tokens) / d_done if d_done > 0 else None,
            avg_output_tokens=(
                (current.generation_tokens - token_base.generation_tokens) / d_done if d_done > 0 else None
            ),
            # Prometheus' rate() needs two samples in its window: none before now means no rate, not 0
            arrival_rate_rps=(current.arrivals - rate_base.arrivals) / elapsed_s if elapsed_s > 0 else None,
            avg_ttft_s=(current.ttft_sum_s - rate_base.ttft_sum_s) / d_ttft if d_ttft > 0 else None,
            avg_itl_s=(current.itl_sum_s - rate_base.itl_sum_s) / d_itl if d_itl > 0 else None,
            max_batch_size=v.perf.max_num_seqs,
        )

    def _latency(self, now: float) -> ModelLatency | None:
        """TTFT and TPOT bucket rates summed over the ready pods: Δcounter/Δt over the window per pod, as the
        fleet's other rates (pods gone inside the window are not counted here, unlike in Prometheus)."""
        window_s = self.config.windows.latency_histogram_window_s
        ttft = [0.0] * (len(TTFT_BUCKETS_S) + 1)
        tpot = [0.0] * (len(TPOT_BUCKETS_S) + 1)
        seen = False
        for pods in self._pods:
            for pod in pods:
                if pod.state is not PodState.READY or pod.replica is None:
                    continue
                current, base = pod.replica.sample(), _base_sample(pod.ring, now - window_s)
                elapsed_s = now - base.t_s
                if elapsed_s <= 0:
                    continue
                seen = True
                for totals, now_counts, base_counts in (
                    (ttft, current.ttft_buckets, base.ttft_buckets),
                    (tpot, current.tpot_buckets, base.tpot_buckets),
                ):
                    for j, (a, b) in enumerate(zip(base_counts, now_counts, strict=True)):
                        totals[j] += (b - a) / elapsed_s
        if not seen:
            return None
        return ModelLatency(
            window_s=window_s,
            ttft=LatencyHistogram.from_pairs(zip((*TTFT_BUCKETS_S, math.inf), ttft, strict=True)),
            tpot=LatencyHistogram.from_pairs(zip((*TPOT_BUCKETS_S, math.inf), tpot, strict=True)),
        )

    def _success_increase(self, now: float) -> int:
        total = len(self._c_done)
        cutoff = now - self.config.retention_s
        base = 0
        for t_s, count in self._success_ring:
            if t_s <= cutoff:
                base = count
            else:
                break
        return total - base

    # ---------------------------------------------------------------- results

    def usage(self) -> FleetUsage:
        now = self._now_s
        variants = []
        preemptions = self._retired_preemptions
        for vi, v in enumerate(self._variants):
            replica_s = self._gone_replica_s[vi]
            for pod in self._pods[vi]:
                if not math.isnan(pod.scheduled_s):
                    replica_s += max(0.0, now - pod.scheduled_s)
                if pod.replica is not None:
                    preemptions += pod.replica.preemptions_total
            variants.append(
                VariantUsage(
                    name=v.name,
                    accelerator=v.accelerator,
                    replica_seconds=replica_s,
                    gpu_seconds=replica_s * v.gpus_per_replica,
                    cost=replica_s / 3600.0 * v.cost,
                    max_replicas=self._max_live[vi],
                    scale_events=sum(1 for e in self._events if e.variant == v.name),
                )
            )
        reasons: dict[str, int] = {}
        for reason in self._d_reason:
            reasons[reason] = reasons.get(reason, 0) + 1
        completed, dropped = len(self._c_done), len(self._d_reason)
        return FleetUsage(
            variants=tuple(variants),
            arrived=self._arrived,
            completed=completed,
            dropped=dropped,
            dropped_by_reason=reasons,
            in_flight=self._arrived - completed - dropped,
            preemptions=preemptions,
            cold_starts=self._cold_starts,
        )

    def outcomes(self) -> RequestOutcomes:
        arrival = np.asarray(self._c_arrival, dtype=np.float64)
        first = np.asarray(self._c_first, dtype=np.float64)
        done = np.asarray(self._c_done, dtype=np.float64)
        out = np.asarray(self._c_out, dtype=np.int64)
        with np.errstate(invalid="ignore", divide="ignore"):
            itl = np.where(out > 1, (done - first) / np.maximum(out - 1, 1), np.nan)
        return RequestOutcomes(
            arrival_s=arrival,
            ttft_s=first - arrival,
            itl_s=itl,
            e2e_s=done - arrival,
            input_tokens=np.asarray(self._c_in, dtype=np.int64),
            output_tokens=out,
            variant=np.asarray(self._c_var, dtype=np.int64),
            dropped_arrival_s=np.asarray(self._d_arrival, dtype=np.float64),
            dropped_reason=tuple(self._d_reason),
            in_flight=self._arrived - len(self._c_done) - len(self._d_reason),
        )

    # ---------------------------------------------------------------- internals: pods

    def _vi(self, variant: str) -> int:
        try:
            return self._index[variant]
        except KeyError:
            raise KeyError(f"unknown variant {variant!r}; known: {sorted(self._index)}") from None

    def _new_pod(self, vi: int, now: float) -> _Pod:
        seq = self._pod_seq[vi]
        self._pod_seq[vi] += 1
        pod = _Pod(name=f"{self._variants[vi].deployment}-{seq:05d}", variant=vi, seq=seq, created_s=now)
        self._pods[vi].append(pod)
        return pod

    def _gpus_in_use(self, accelerator: str) -> int:
        used = 0
        for vi, pods in enumerate(self._pods):
            v = self._variants[vi]
            if v.accelerator != accelerator:
                continue
            used += v.gpus_per_replica * sum(1 for p in pods if p.state in _HOLDS_GPU)
        return used

    def _schedule(self, now: float) -> None:
        """Start unscheduled pods, oldest first, while their accelerator has free GPUs."""
        for vi, pods in enumerate(self._pods):
            v = self._variants[vi]
            for pod in pods:
                if pod.state is not PodState.UNSCHEDULED:
                    continue
                cap = self._gpu_cap.get(v.accelerator)
                if cap is not None and self._gpus_in_use(v.accelerator) + v.gpus_per_replica > cap:
                    break
                self._start_pod(pod, now, startup_s=v.startup.sample_s(self._rng))
                self._cold_starts += 1

    def _start_pod(self, pod: _Pod, now: float, *, startup_s: float) -> None:
        pod.state = PodState.STARTING
        pod.scheduled_s = now
        pod.ready_at_s = now + startup_s

    def _make_ready(self, pod: _Pod, now: float) -> None:
        vi = pod.variant
        pod.state = PodState.READY
        pod.ready_at_s = now
        pod.replica = ReplicaSim(
            self._variants[vi].perf,
            start_s=now,
            on_complete=self._completion_sink(vi),
            on_drop=self._record_drop,
        )
        pod.ring.append(pod.replica.sample())

    def _completion_sink(self, vi: int) -> CompletionSink:
        def sink(req: SimRequest, done_s: float) -> None:
            self._record_completion(req, done_s, vi)

        return sink

    def _remove_pods(self, live: list[_Pod], count: int, now: float) -> None:
        not_ready = sorted((p for p in live if p.state is not PodState.READY), key=lambda p: -p.seq)
        ready = [p for p in live if p.state is PodState.READY]
        ready.sort(key=lambda p: (p.replica.load_score() if p.replica else 0.0, -p.seq))
        for pod in [*not_ready, *ready][:count]:
            if pod.state is PodState.READY:
                pod.state = PodState.DRAINING
                pod.drain_deadline_s = now + self.config.drain_grace_s
                if pod.replica is None or pod.replica.idle or self.config.drain_grace_s <= 0:
                    self._retire(pod, now, reason="drained")
            else:
                self._bury(pod, now)
        self._purge()
        self._schedule(now)

    def _retire(self, pod: _Pod, now: float, *, reason: str) -> None:
        if pod.replica is not None:
            pod.replica.drop_all(now, reason)
            self._retired_preemptions += pod.replica.preemptions_total
        self._bury(pod, now)

    def _bury(self, pod: _Pod, now: float) -> None:
        """Mark a pod gone and move its GPU time into the per-variant total (it is purged from the lists)."""
        if not math.isnan(pod.scheduled_s):
            self._gone_replica_s[pod.variant] += max(0.0, now - pod.scheduled_s)
        pod.state = PodState.GONE
        pod.removed_s = now
        pod.replica = None
        pod.ring.clear()

    def _purge(self) -> None:
        for vi, pods in enumerate(self._pods):
            if any(p.state is PodState.GONE for p in pods):
                self._pods[vi] = [p for p in pods if p.state is not PodState.GONE]

    def _transitions(self, now: float) -> None:
        freed = False
        for pods in self._pods:
            for pod in pods:
                if pod.state is PodState.STARTING and pod.ready_at_s <= now:
                    self._make_ready(pod, pod.ready_at_s)
                elif pod.state is PodState.DRAINING:
                    replica = pod.replica
                    if replica is None or replica.idle:
                        self._retire(pod, now, reason="drained")
                        freed = True
                    elif pod.drain_deadline_s <= now:
                        self._retire(pod, pod.drain_deadline_s, reason="drained")
                        freed = True
        if freed:
            self._purge()
            self._schedule(now)
        timeout = self.config.epp_queue_timeout_s
        epp = self._epp
        while epp and epp[0].arrival_s + timeout <= now:
            req = epp.popleft()
            self._record_drop(req, req.arrival_s + timeout, "epp_timeout")
        if epp and self._has_ready():
            released = list(epp)
            epp.clear()
            for req in released:
                req.ready_s = max(req.arrival_s, now)
                self._dispatch(req)

    def _next_transition_s(self, now: float) -> float:
        nxt = math.inf
        for pods in self._pods:
            for pod in pods:
                if pod.state is PodState.STARTING and pod.ready_at_s > now:
                    nxt = min(nxt, pod.ready_at_s)
                elif pod.state is PodState.DRAINING and pod.drain_deadline_s > now:
                    nxt = min(nxt, pod.drain_deadline_s)
        if self._epp:
            nxt = min(nxt, self._epp[0].arrival_s + self.config.epp_queue_timeout_s)
        return nxt

    def _has_ready(self) -> bool:
        return any(p.state is PodState.READY for pods in self._pods for p in pods)

    # ---------------------------------------------------------------- internals: requests

    def _peek(self) -> Request | None:
        if self._next_request is None and not self._workload_done:
            try:
                self._next_request = next(self._workload)
            except StopIteration:
                self._workload_done = True
        return self._next_request

    def _route_until(self, t1: float) -> None:
        ready = [p for pods in self._pods for p in pods if p.state is PodState.READY and p.replica is not None]
        origin = self.config.start_s
        while True:
            nxt = self._peek()
            if nxt is None or origin + nxt.arrival_s >= t1:
                return
            self._next_request = None
            arrival = max(origin + nxt.arrival_s, self._now_s)
            req = SimRequest(self._next_rid, nxt, arrival_s=arrival)
            self._next_rid += 1
            self._arrived += 1
            if ready:
                self._dispatch(req, ready)
            else:
                self._epp.append(req)

    def _dispatch(self, req: SimRequest, ready: list[_Pod] | None = None) -> None:
        if ready is None:
            ready = [p for pods in self._pods for p in pods if p.state is PodState.READY and p.replica is not None]
        best: ReplicaSim | None = None
        best_score = math.inf
        start = req.rid % len(ready)
        for k in range(len(ready)):
            replica = ready[(start + k) % len(ready)].replica
            assert replica is not None
            score = replica.load_score()
            if score < best_score:
                best, best_score = replica, score
        assert best is not None
        best.enqueue(req)

    def watch_slo(self, *, ttft_s: float, itl_s: float) -> None:
        """Count, from now on, the requests that miss either target as they finish or are dropped (`misses`):
        for a caller that stops a run as soon as it can no longer reach an attainment goal."""
        self._slo = (ttft_s, itl_s)

    @property
    def misses(self) -> int:
        """Finished requests that missed a target plus dropped ones, since `watch_slo` (0 without it)."""
        return self._misses

    def _record_completion(self, req: SimRequest, done_s: float, vi: int) -> None:
        if self._slo is not None:
            ttft_s, itl_s = self._slo
            tokens = req.output_tokens
            itl = (done_s - req.first_token_s) / (tokens - 1) if tokens > 1 else 0.0
            if req.first_token_s - req.arrival_s > ttft_s or itl > itl_s:
                self._misses += 1
        self._c_arrival.append(req.arrival_s)
        self._c_first.append(req.first_token_s)
        self._c_done.append(done_s)
        self._c_in.append(req.input_tokens)
        self._c_out.append(req.output_tokens)
        self._c_var.append(vi)

    def _record_drop(self, req: SimRequest, _t_s: float, reason: str) -> None:
        if self._slo is not None:
            self._misses += 1
        self._d_arrival.append(req.arrival_s)
        self._d_reason.append(reason)

    def _scrape(self, now: float) -> None:
        ring_max = self._ring_max
        queue = running = 0
        for pods in self._pods:
            for pod in pods:
                if pod.state is PodState.READY and pod.replica is not None:
                    sample = pod.replica.sample()
                    pod.ring.append(sample)
                    if len(pod.ring) > ring_max:
                        pod.ring.popleft()
                    queue += sample.queue_length
                    running += sample.running
        if self._sink is not None:
            self._emit_scrape(now)
        self._success_ring.append((now, len(self._c_done)))
        horizon = now - self.config.retention_s - 2 * self.config.scrape_interval_s
        while len(self._success_ring) > 1 and self._success_ring[1][0] <= horizon:
            self._success_ring.popleft()
        states = [[p.state for p in pods] for pods in self._pods]
        self._timeline.append(
            TimelinePoint(
                t_s=now,
                spec=tuple(self._spec),
                starting=tuple(sum(1 for s in st if s in _PENDING) for st in states),
                ready=tuple(sum(1 for s in st if s is PodState.READY) for st in states),
                draining=tuple(sum(1 for s in st if s is PodState.DRAINING) for st in states),
                epp_queue=len(self._epp),
                arrived=self._arrived,
                completed=len(self._c_done),
                dropped=len(self._d_reason),
                queue_length=queue,
                running=running,
            )
        )

    def _emit_scrape(self, now: float) -> None:
        assert self._sink is not None
        scraped = []
        for pods in self._pods:
            for pod in pods:
                replica = pod.replica
                if replica is not None and (pod.state is PodState.READY or pod.state is PodState.DRAINING):
                    perf = replica.perf
                    scraped.append(
                        PodScrape(
                            pod.name, self._variants[pod.variant].name, replica.sample(), perf.num_gpu_blocks,
                            perf.block_size,
                        )
                    )  # fmt: skip
        self._sink.scrape(
            now,
            scraped,
            epp_queue_size=len(self._epp),
            epp_queue_bytes=sum(r.input_tokens for r in self._epp) * EPP_BYTES_PER_TOKEN,
        )


_LIVE = frozenset({PodState.UNSCHEDULED, PodState.STARTING, PodState.READY})
_PENDING = frozenset({PodState.UNSCHEDULED, PodState.STARTING})
_HOLDS_GPU = frozenset({PodState.STARTING, PodState.READY, PodState.DRAINING})


def _base_sample(ring: deque[ScrapeSample], cutoff_s: float) -> ScrapeSample:
    """The newest sample at or before `cutoff_s`, else the oldest one (the pod is younger than the window)."""
    base = ring[0]
    for sample in ring:
        if sample.t_s <= cutoff_s:
            base = sample
        else:
            break
    return base
