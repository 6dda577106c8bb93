"""Simulation scenarios (DESIGN §3.3), shared by `demo --scenario` and `simulate`.

A scenario describes one model served by several variants, a workload, how replicas are actuated, and the
WVA ConfigMaps. A scenario file is outside input, so loading is bounded and strict:

* the YAML itself: at most `MAX_SCENARIO_BYTES`, nesting depth `MAX_DEPTH`, `MAX_ALIASES` aliases
  (`adapter.config.safeload`: a billion-laughs document is refused before it is built);
* every key is validated by the pydantic schema below (unknown keys, wrong types and values out of range are
  errors), with ranges that keep a run bounded: at most `MAX_VARIANTS` variants of at most
  `MAX_REPLICAS_PER_VARIANT` replicas, at most `MAX_DURATION_S` of simulated time, at most `MAX_BINS` engine
  intervals;
* then what the schema cannot say: the workload builds (`peak_rps ≥ base_rps`, steps in order), the trace
  file can be opened and has a known format, the VAs and ConfigMaps parse.

Every problem is a `ConfigError` whose message names the file and the key (e.g.
`s.yaml: scenario.variants[0].perf.alpha_ms: -1 — input should be greater than 0`); the CLI exits 2 on it.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from adapter.config.configmaps import DEFAULT_CONTROLLER_NAMESPACE, ConfigSet
from adapter.config.errors import describe
from adapter.config.files import MAX_SCENARIO_BYTES, MAX_TRACE_BYTES, check_file, read_bounded
from adapter.config.safeload import load_yaml, size_text
from adapter.config.va import VariantAutoscaling, parse_va
from adapter.domain.errors import ConfigError, ManifestError
from adapter.domain.ids import ModelKey
from adapter.domain.snapshot import NodeGpus
from adapter.domain.text import plain
from adapter.sim.fleet import FleetConfig, StartupTime, VariantConfig
from adapter.sim.replica import PerfParams
from adapter.sim.workload import (
    BurstArrivals,
    DiurnalArrivals,
    PoissonArrivals,
    RequestTable,
    StepArrivals,
    SyntheticWorkload,
    TraceFormatError,
    TraceWorkload,
    trace_duration_s,
    trace_format,
    workload_from_spec,
)

MAX_DEPTH = 16
MAX_ALIASES = 64
MAX_VARIANTS = 16
MAX_REPLICAS_PER_VARIANT = 1000
MAX_DURATION_S = 7 * 24 * 3600.0
MAX_BINS = 20_160
"""Engine intervals per run (a week at 30 s): bounds the run and the oracle's program."""
MAX_STEPS = 10_000
MAX_CONFIGMAPS = 32
MAX_NODES = 1024
MAX_TRACE_TEXT_BYTES = 2 * 1024 * 1024 * 1024
"""Text a trace may hold once decompressed: about 40 million rows, far above any request limit."""
MAX_REQUESTS_OVERRIDE = 1_000_000_000
"""The largest `simulate --max-requests`."""
MAX_REQUESTS = 2_000_000
"""Requests a run may generate, estimated before it starts (`expected_requests`); `simulate --max-requests`
raises it. Measured on the 2-core reference machine: about 150,000 simulated requests per second of wall time
and 250 bytes of memory per request (3,000,000 requests: 22 s, 775 MB), so the default keeps a run under about
15 s and 600 MB (the frontier search of `simulate` plays up to 15 more runs, each stopped once it cannot reach
its target)."""
POLICY_NAMES = ("wva-v1", "wva-v2", "wva-slo", "wva-predictive", "hpa-kv", "keda-queue", "static", "oracle")
"""`adapter.sim.policies.Policy` (repeated here so the schema does not import the engine)."""
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

KNOWN_KEYS = {
    "name", "model_id", "namespace", "duration_s", "slo", "workload", "variants", "actuation", "metrics",
    "engine", "policy", "configmaps", "controller_namespace", "seed",
}  # fmt: skip

PositiveS = Annotated[float, Field(gt=0, le=MAX_DURATION_S)]
NonNegativeS = Annotated[float, Field(ge=0, le=MAX_DURATION_S)]
Rate = Annotated[float, Field(ge=0, le=100_000)]
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class SloSpec(_Strict):
    ttft_ms: float = Field(default=2000.0, gt=0, le=3_600_000)
    itl_ms: float = Field(default=100.0, gt=0, le=60_000)


class StartupSpec(_Strict):
    median: float = Field(default=120.0, ge=0, le=86_400)
    p90: float = Field(default=300.0, ge=0, le=86_400)

    @model_validator(mode="after")
    def _ordered(self) -> StartupSpec:
        if self.p90 < self.median:
            raise ValueError(f"p90 ({self.p90:g}) must be >= median ({self.median:g})")
        return self


class PerfSpec(_Strict):
    alpha_ms: float = Field(default=20.0, gt=0, le=10_000)
    beta_ms: float = Field(default=0.08, ge=0, le=1_000)
    gamma_ms: float = Field(default=0.0002, ge=0, le=1_000)
    kv_cache_tokens: int = Field(default=30_000, ge=1, le=100_000_000)
    max_num_seqs: int = Field(default=256, ge=1, le=65_536)
    max_num_batched_tokens: int = Field(default=2048, ge=1, le=1_000_000)
    block_size: int = Field(default=16, ge=1, le=1024)
    knee_tokens: int = Field(default=0, ge=0, le=1_000_000)
    max_model_len: int = Field(default=0, ge=0, le=100_000_000)


class VariantSpec(_Strict):
    name: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL)
    accelerator: str = Field(default="", max_length=63)
    cost: float = Field(default=10.0, ge=0, le=1_000_000)
    min_replicas: int = Field(default=1, ge=0, le=MAX_REPLICAS_PER_VARIANT)
    max_replicas: int = Field(default=10, ge=1, le=MAX_REPLICAS_PER_VARIANT)
    initial_replicas: int | None = Field(default=None, ge=0, le=MAX_REPLICAS_PER_VARIANT)
    startup_s: StartupSpec = Field(default_factory=StartupSpec)
    perf: PerfSpec = Field(default_factory=PerfSpec)
    gpus_per_replica: int = Field(default=1, ge=1, le=64)
    target_name: str = Field(default="", max_length=253, pattern=r"^$|^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")

    @model_validator(mode="after")
    def _bounds(self) -> VariantSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) must be <= max_replicas ({self.max_replicas})")
        initial = self.initial
        if not self.min_replicas <= initial <= self.max_replicas:
            raise ValueError(f"initial_replicas ({initial}) must be within [min_replicas, max_replicas]")
        return self

    @property
    def initial(self) -> int:
        return self.min_replicas if self.initial_replicas is None else self.initial_replicas


class TraceSpec(_Strict):
    trace: str = Field(min_length=1, max_length=4096)
    rate_scale: float = Field(default=1.0, gt=0, le=1000)
    time_scale: float = Field(default=1.0, gt=0, le=1000)
    start_s: NonNegativeS = 0.0
    max_requests: int | None = Field(default=None, ge=1, le=100_000_000)
    seed: Seed = 0


class SyntheticSpec(_Strict):
    kind: Literal["poisson", "diurnal", "step", "burst"]
    rate_rps: Rate | None = None
    base_rps: Rate | None = None
    peak_rps: Rate | None = None
    period_s: PositiveS | None = None
    steps: list[Annotated[list[float], Field(min_length=2, max_length=2)]] | None = Field(
        default=None, min_length=1, max_length=MAX_STEPS
    )
    burst_rps: Rate | None = None
    burst_start_s: NonNegativeS | None = None
    burst_duration_s: PositiveS | None = None
    burst_every_s: NonNegativeS | None = None
    input_tokens: float | None = Field(default=None, ge=1, le=10_000_000)
    output_tokens: float | None = Field(default=None, ge=1, le=10_000_000)
    input_sigma: float | None = Field(default=None, ge=0, le=5)
    output_sigma: float | None = Field(default=None, ge=0, le=5)
    seed: Seed = 0

    @model_validator(mode="after")
    def _required(self) -> SyntheticSpec:
        needed = {
            "poisson": ("rate_rps",),
            "diurnal": ("base_rps", "peak_rps"),
            "step": ("steps",),
            "burst": ("base_rps", "burst_rps"),
        }[self.kind]
        missing = [key for key in needed if getattr(self, key) is None]
        if missing:
            raise ValueError(f"kind {self.kind!r} needs {', '.join(missing)}")
        return self


class HpaActuation(_Strict):
    kind: Literal["hpa"] = "hpa"
    sync_period_s: float = Field(default=15.0, gt=0, le=3600)
    tolerance: float = Field(default=0.1, ge=0, le=1)
    tolerance_mode: Literal["abs", "bounds"] = "bounds"
    scale_down_stabilization_s: float = Field(default=300.0, ge=0, le=3600)
    scale_up_stabilization_s: float = Field(default=0.0, ge=0, le=3600)


class KedaActuation(HpaActuation):
    kind: Literal["keda"] = "keda"  # type: ignore[assignment]
    polling_interval_s: float = Field(default=30.0, gt=0, le=3600)
    cooldown_s: float = Field(default=300.0, ge=0, le=86_400)
    initial_cooldown_s: float = Field(default=0.0, ge=0, le=86_400)
    push: bool = False


class DirectActuation(_Strict):
    kind: Literal["direct"]
    period_s: float = Field(default=15.0, gt=0, le=3600)


class MetricsSpec(_Strict):
    scrape_interval_s: float = Field(default=15.0, gt=0, le=600)


class EngineSpec(_Strict):
    interval_s: float = Field(default=30.0, ge=1, le=3600)


class NodeSpec(_Strict):
    name: str = Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    accelerator: str = Field(min_length=1, max_length=63)
    allocatable_gpus: int = Field(ge=0, le=1_000_000)


class ConfigMapSpec(_Strict):
    namespace: str | None = Field(default=None, max_length=63, pattern=DNS_LABEL)
    name: str = Field(min_length=1, max_length=253)
    data: dict[str, str] = Field(default_factory=dict, max_length=256)


class ScenarioSpec(_Strict):
    name: str | None = Field(default=None, min_length=1, max_length=253)
    model_id: str = Field(min_length=1, max_length=256)
    namespace: str = Field(default="default", max_length=63, pattern=DNS_LABEL)
    controller_namespace: str = Field(default=DEFAULT_CONTROLLER_NAMESPACE, max_length=63, pattern=DNS_LABEL)
    duration_s: PositiveS | None = None
    seed: Seed = 0
    slo: SloSpec = Field(default_factory=SloSpec)
    workload: dict[str, Any]
    """Validated on its own as a TraceSpec (has `trace`) or a SyntheticSpec (has `kind`), see `parse`."""
    variants: list[VariantSpec] = Field(min_length=1, max_length=MAX_VARIANTS)
    actuation: Annotated[HpaActuation | KedaActuation | DirectActuation, Field(discriminator="kind")] = Field(
        default_factory=HpaActuation
    )
    metrics: MetricsSpec = Field(default_factory=MetricsSpec)
    engine: EngineSpec = Field(default_factory=EngineSpec)
    policy: Literal["wva-v1", "wva-v2", "wva-slo", "wva-predictive", "hpa-kv", "keda-queue", "static", "oracle"] = (
        "wva-v1"
    )
    configmaps: list[ConfigMapSpec] = Field(default_factory=list, max_length=MAX_CONFIGMAPS)
    """The mapping form `{name: data}` (controller namespace) is turned into this list form before validation."""
    nodes: list[NodeSpec] | None = Field(default=None, max_length=MAX_NODES)
    """The cluster's GPU nodes (ours, optional): they cap scheduling (pods wait UNSCHEDULED for a free GPU of
    their accelerator) and are what the GPU limiter (`enableLimiter: true`) shares. Absent: one node per
    accelerator with room for every variant of it at maxReplicas, twice (`sim_nodes`), so scheduling never waits and
    the limiter sees the room the simulated cluster has (without nodes it saw none and froze every scale-up)."""

    @model_validator(mode="after")
    def _consistent(self) -> ScenarioSpec:
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"variant names must be unique, got {names}")
        if self.duration_s is not None and self.duration_s / self.engine.interval_s > MAX_BINS:
            raise ValueError(
                f"duration_s / engine.interval_s = {self.duration_s / self.engine.interval_s:.0f} engine cycles; "
                f"the limit is {MAX_BINS}"
            )
        return self


REQUEST_CACHE = 8
_REQUESTS: dict[tuple[str, str, float | None, int], RequestTable] = {}


@dataclass(frozen=True, slots=True)
class Slo:
    ttft_ms: float = 2000.0
    itl_ms: float = 100.0


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    raw: Mapping[str, Any]
    base_dir: Path
    duration_s: float | None
    slo: Slo
    vas: tuple[VariantAutoscaling, ...]
    configmaps: ConfigSet
    actuation: Mapping[str, Any] = field(default_factory=lambda: {"kind": "hpa"})
    engine_interval_s: float = 30.0
    policy: str = "wva-v1"
    seed: int = 0
    spec: ScenarioSpec | None = None

    @property
    def model(self) -> ModelKey:
        return ModelKey(str(self.raw.get("namespace", "default")), str(self.raw["model_id"]))

    def fleet_config(self, *, start_s: float, seed: int = 0) -> FleetConfig:
        if self.spec is None:
            return FleetConfig.from_scenario(self.raw, seed=seed, start_s=start_s)
        return FleetConfig(
            model_id=self.spec.model_id,
            variants=tuple(_variant_config(v) for v in self.spec.variants),
            namespace=self.spec.namespace,
            scrape_interval_s=self.spec.metrics.scrape_interval_s,
            nodes=sim_nodes(self.spec),
            start_s=start_s,
            seed=seed,
        )

    def workload(self, *, run_seed: int = 0) -> SyntheticWorkload | TraceWorkload:
        """The workload; `run_seed` is added to the workload's own seed (0 = the file's stream)."""
        spec = dict(self.raw["workload"])
        spec["seed"] = int(spec.get("seed", 0)) + run_seed
        return workload_from_spec(spec, base_dir=self.base_dir, duration_s=self.duration_s)

    def requests(self, *, run_seed: int = 0) -> RequestTable:
        """The workload of `run_seed`, read once into arrays and kept (the last `REQUEST_CACHE` distinct
        (scenario, seed) pairs): `simulate` feeds the same requests to the fleet and the oracle, and the
        frontier search replays them many times."""
        key = (json.dumps(self.raw, sort_keys=True, default=str), str(self.base_dir), self.duration_s, run_seed)
        table = _REQUESTS.get(key)
        if table is None:
            table = RequestTable.of(self.workload(run_seed=run_seed))
            _REQUESTS[key] = table
            while len(_REQUESTS) > REQUEST_CACHE:
                _REQUESTS.pop(next(iter(_REQUESTS)))
        return table

    def effective_duration_s(self) -> float:
        """`duration_s`, else the trace's length; a synthetic workload without one runs an hour."""
        if self.duration_s is not None:
            return self.duration_s
        spec = self.raw["workload"]
        if "trace" in spec:
            return trace_duration_s(self._trace_path(), time_scale=float(spec.get("time_scale", 1.0)))
        return 3600.0

    def _trace_path(self) -> Path:
        path = Path(str(self.raw["workload"]["trace"]))
        return path if path.is_absolute() else self.base_dir / path


def expected_requests(scenario: Scenario) -> tuple[int, str]:
    """The number of requests the scenario's workload will generate over its duration, before anything runs,
    and how it was estimated (for the message). Synthetic workloads: the integral of the rate over the run
    (Poisson's count has that mean; its spread is √n, negligible at the limit). Traces: the rows of the file
    (counted, not parsed) times `rate_scale`, at most `max_requests`; an upper bound, as the duration window may
    cut it shorter."""
    duration_s = scenario.effective_duration_s()
    workload = scenario.workload()
    if isinstance(workload, TraceWorkload):
        rows = _count_rows(workload.path, enough=math.ceil(MAX_REQUESTS_OVERRIDE / workload.rate_scale) + 1)
        count = rows * workload.rate_scale
        if workload.max_requests is not None:
            count = min(count, workload.max_requests)
        return math.ceil(count), f"{rows:,} trace rows × rate_scale {workload.rate_scale:g}"
    process = workload.process
    integral = _rate_integral(process, duration_s)
    if isinstance(process, PoissonArrivals):
        return math.ceil(integral), f"Poisson at {process.rate_rps:,g} req/s × {duration_s:,g} s"
    kind = type(process).__name__.removesuffix("Arrivals").lower()
    return math.ceil(integral), f"{kind} arrivals averaging {integral / duration_s:,.4g} req/s × {duration_s:,g} s"


def peak_rate_rps(scenario: Scenario) -> float:
    """The highest arrival rate the workload reaches (a trace's mean rate, its peak being unknown before it is
    read): what one step of the demo's world may have to simulate per virtual second."""
    workload = scenario.workload()
    if isinstance(workload, TraceWorkload):
        count, _ = expected_requests(scenario)
        return count / max(scenario.effective_duration_s(), 1.0)
    return float(workload.process.peak_rps)


def _rate_integral(process: Any, duration_s: float) -> float:
    """∫₀ᵈ λ(t) dt, exactly, for each synthetic arrival process (adapter.sim.workload)."""
    d = duration_s
    if isinstance(process, PoissonArrivals):
        return process.rate_rps * d
    if isinstance(process, DiurnalArrivals):
        # λ = base + (peak − base)(1 − cos(2πt/P))/2  ⇒  ∫ = base·d + (peak − base)/2 · (d − P/(2π)·sin(2πd/P))
        swing = (process.peak_rps - process.base_rps) / 2.0
        period = process.period_s
        return process.base_rps * d + swing * (d - period / (2 * math.pi) * math.sin(2 * math.pi * d / period))
    if isinstance(process, StepArrivals):
        total = 0.0
        for i, (start_s, rps) in enumerate(process.steps):
            end_s = process.steps[i + 1][0] if i + 1 < len(process.steps) else d
            total += rps * max(0.0, min(end_s, d) - max(start_s, 0.0))
        return total
    if isinstance(process, BurstArrivals):
        burst_time = 0.0
        start = process.burst_start_s
        every = process.burst_every_s
        if every > 0 and d > start:
            whole = math.floor((d - start) / every)
            burst_time = whole * process.burst_duration_s + min(process.burst_duration_s, d - start - whole * every)
        elif d > start:
            burst_time = min(process.burst_duration_s, d - start)
        return process.base_rps * d + (process.burst_rps - process.base_rps) * burst_time
    raise TypeError(f"no request estimate for {type(process).__name__}")


def _count_rows(path: Path, *, enough: int) -> int:
    """Lines of a trace (through gzip for `.gz`), in 1 MB blocks, stopping once there are `enough` (the caller
    only needs to know the count is above any limit) or once `MAX_TRACE_TEXT_BYTES` of text were read (a small
    `.gz` can decompress to far more than its file size)."""
    lines = read = 0
    opener: Any = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            while (block := handle.read(1 << 20)) and lines <= enough:
                read += len(block)
                lines += block.count(b"\n")
                if read > MAX_TRACE_TEXT_BYTES:
                    raise ConfigError(
                        f"scenario.workload.trace: {plain(str(path))} holds more than {size_text(MAX_TRACE_TEXT_BYTES)}"
                        f" of text; the limit is {size_text(MAX_TRACE_TEXT_BYTES)}"
                    )
    except (OSError, EOFError, zlib.error) as exc:
        raise ConfigError(f"scenario.workload.trace: {plain(str(path))}: unreadable ({type(exc).__name__})") from None
    return lines


def check_work(scenario: Scenario, *, max_requests: int | None = None) -> int:
    """The expected request count, or ConfigError when it exceeds the limit (MAX_REQUESTS unless given)."""
    limit = MAX_REQUESTS if max_requests is None else max_requests
    count, how = expected_requests(scenario)
    if count > limit:
        raise ConfigError(
            f"the scenario would generate about {count:,} requests ({how}); the limit is {limit:,} "
            "(a shorter duration_s or a lower rate, or simulate --max-requests N)"
        )
    return count


def sim_nodes(spec: ScenarioSpec) -> tuple[NodeGpus, ...]:
    """The scenario's GPU nodes, or (none given) one node per accelerator with 2 · Σ maxReplicas · GPUs per replica
    of its variants — every variant at its maximum, and as many pods again draining after a scale-down (they hold
    their GPUs until gone): e.g. A100 variants of max 12 × 1 and 4 × 2 GPUs ⇒ one node of 40 A100 GPUs."""
    if spec.nodes is not None:
        return tuple(NodeGpus(n.name, n.accelerator, n.allocatable_gpus) for n in spec.nodes)
    room: dict[str, int] = {}
    for v in spec.variants:
        if v.accelerator:
            room[v.accelerator] = room.get(v.accelerator, 0) + 2 * v.max_replicas * v.gpus_per_replica
    return tuple(NodeGpus(f"sim-node-{i}", a, gpus) for i, (a, gpus) in enumerate(room.items()))


def _variant_config(v: VariantSpec) -> VariantConfig:
    return VariantConfig(
        name=v.name,
        accelerator=v.accelerator,
        cost=v.cost,
        perf=PerfParams(**v.perf.model_dump()),
        min_replicas=v.min_replicas,
        max_replicas=v.max_replicas,
        initial_replicas=v.initial,
        startup=StartupTime(median_s=v.startup_s.median, p90_s=v.startup_s.p90),
        gpus_per_replica=v.gpus_per_replica,
        target_name=v.target_name,
    )


def load(path: Path) -> Scenario:
    """Read, bound and validate a scenario file (module docstring); ConfigError naming file and key."""
    data = read_bounded(path, what="scenario", max_bytes=MAX_SCENARIO_BYTES)
    raw = load_yaml(data, what=str(path), max_bytes=MAX_SCENARIO_BYTES, max_depth=MAX_DEPTH, max_aliases=MAX_ALIASES)
    try:
        return parse(raw, base_dir=path.parent)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def parse(raw: Any, *, base_dir: Path) -> Scenario:
    """Validate an already loaded scenario document; ConfigError naming the key."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"scenario: a scenario must be a YAML mapping, got {type(raw).__name__}")
    raw = dict(raw)
    if isinstance(raw.get("actuation"), Mapping) and "kind" not in raw["actuation"]:
        raw["actuation"] = {**raw["actuation"], "kind": "hpa"}
    if isinstance(raw.get("configmaps"), Mapping):
        raw["configmaps"] = [{"name": name, "data": data} for name, data in raw["configmaps"].items()]
    try:
        spec = ScenarioSpec.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError("; ".join(_describe_spec(exc))) from None
    workload_raw = spec.workload
    if "trace" in workload_raw and "kind" in workload_raw:
        raise ConfigError("scenario.workload: give either `trace` (a trace file) or `kind` (a generator), not both")
    model: type[TraceSpec] | type[SyntheticSpec] = TraceSpec if "trace" in workload_raw else SyntheticSpec
    try:
        model.model_validate(workload_raw)
    except ValidationError as exc:
        raise ConfigError("; ".join(describe(exc, source="scenario.workload"))) from None
    try:
        built = workload_from_spec(workload_raw, base_dir=base_dir, duration_s=spec.duration_s)
    except ValueError as exc:
        raise ConfigError(f"scenario.workload: {exc}") from None
    if isinstance(built, TraceWorkload):
        _check_trace(built.path)
    try:
        vas = tuple(_va(v, model_id=spec.model_id, namespace=spec.namespace) for v in spec.variants)
    except ManifestError as exc:
        raise ConfigError(f"scenario.variants: {exc}") from None
    return Scenario(
        name=spec.name or base_dir.name,
        raw=raw,
        base_dir=base_dir,
        duration_s=spec.duration_s,
        slo=Slo(ttft_ms=spec.slo.ttft_ms, itl_ms=spec.slo.itl_ms),
        vas=vas,
        configmaps=_configmaps(spec),
        actuation=spec.actuation.model_dump(),
        engine_interval_s=spec.engine.interval_s,
        policy=spec.policy,
        seed=spec.seed,
        spec=spec,
    )


def _describe_spec(exc: ValidationError) -> list[str]:
    """pydantic's messages, with the actuation kind (the union's tag) taken out of the key path."""
    kept = []
    for message in describe(exc, source="scenario"):
        text = message
        for kind in ("hpa", "keda", "direct"):
            text = text.replace(f".actuation.{kind}.", ".actuation.")
        kept.append(text)
    return kept or [f"scenario: {exc.error_count()} problems"]


_TRACE_SUFFIXES = (".csv", ".jsonl", ".json", ".ndjson")


def _check_trace(path: Path) -> None:
    if Path(path.name.lower().removesuffix(".gz")).suffix in _TRACE_SUFFIXES:
        check_file(path, what="scenario.workload.trace:", max_bytes=MAX_TRACE_BYTES)  # before its header is read
    try:
        trace_format(path)  # an unknown suffix: refused by name, nothing read
    except TraceFormatError as exc:
        raise ConfigError(f"scenario.workload.trace: {exc}") from None
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise ConfigError(f"scenario.workload.trace: cannot open {path}: {exc.strerror or exc}") from None


def _va(variant: VariantSpec, *, model_id: str, namespace: str) -> VariantAutoscaling:
    obj = {
        "apiVersion": "llmd.ai/v1alpha1",
        "kind": "VariantAutoscaling",
        "metadata": {
            "name": variant.name,
            "namespace": namespace,
            "labels": {"inference.optimization/acceleratorName": variant.accelerator},
        },
        "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": variant.target_name or variant.name},
            "modelID": model_id,
            "minReplicas": variant.min_replicas,
            "maxReplicas": variant.max_replicas,
            "variantCost": format(Decimal(repr(variant.cost)), "f"),  # 1e6 is "1000000.0", never "1e+06"
        },
    }
    return parse_va(obj, source=f"variants[{variant.name}]")


def _configmaps(spec: ScenarioSpec) -> ConfigSet:
    controller_ns = spec.controller_namespace
    triples = [(cm.namespace or controller_ns, cm.name, cm.data) for cm in spec.configmaps]
    configset = ConfigSet.from_raw(triples, controller_namespace=controller_ns)
    if configset.errors():
        raise ConfigError("scenario.configmaps: " + "; ".join(configset.errors()))
    return configset
