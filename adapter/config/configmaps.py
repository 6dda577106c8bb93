"""The WVA ConfigMaps: saturation scaling, scale-to-zero, queueing model; parsing and layered resolution.

Each ConfigMap maps data keys to YAML documents. The key `default` holds the defaults; any other key is a
per-model entry identified by its `model_id` (and optional `namespace`) *fields*, not by the key name.

Resolution for one model (namespace N, model M), field by field, later layers winning:

    recommended defaults  <  global default  <  N-local default  <  global entry(M,N)  <  N-local entry(M,N)

Where we differ from upstream WVA, and why (see docs/deviations.md):
- upstream leaves thresholds at zero when the ConfigMap is missing, which marks every replica saturated; we
  fall back to seed 000's recommended thresholds and say so in a warning the VA status shows;
- upstream matches saturation overrides on a data key "{modelID}#{namespace}", which is not a legal
  ConfigMap key; we match on the entries' `model_id`/`namespace` fields, like the other two ConfigMaps;
- upstream's overrides replace the default wholesale; ours inherit every field they leave unset;
- a namespace-local ConfigMap layers over the global one instead of replacing it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from adapter.config.errors import describe
from adapter.config.safeload import InputError, load_yaml
from adapter.domain.accelerators import normalize_accelerator
from adapter.domain.ids import ModelKey
from adapter.domain.text import plain
from adapter.domain.timefmt import format_duration_short, parse_duration_s

SATURATION_CM = "wva-saturation-scaling-config"
SCALE_TO_ZERO_CM = "wva-model-scale-to-zero-config"
QUEUEING_CM = "wva-queueing-model-config"
KNOWN_CONFIGMAPS = (SATURATION_CM, SCALE_TO_ZERO_CM, QUEUEING_CM)
CONFIGMAP_LABEL = ("app.kubernetes.io/name", "workload-variant-autoscaler")
DEFAULT_KEY = "default"
DEFAULT_CONTROLLER_NAMESPACE = "workload-variant-autoscaler-system"


class _Entry(BaseModel):
    """Common shape: every field optional so that an entry can inherit what it leaves unset."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, allow_inf_nan=False)
    model_id: str | None = None
    namespace: str | None = None

    @model_validator(mode="after")
    def _namespace_needs_model(self) -> _Entry:
        if self.namespace is not None and self.model_id is None:
            raise ValueError("an entry with `namespace` must also set `model_id`")
        return self

    def set_fields(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump(exclude={"model_id", "namespace"}).items() if v is not None}


class SaturationEntry(_Entry):
    analyzer_name: (
        Literal["", "saturation", "saturation-percentage-based", "saturation-token-based", "predictive"] | None
    ) = Field(default=None, alias="analyzerName")
    """"predictive" (ours) selects the predictive, attainment-aware analyzer, whose settings live in the
    queueing-model ConfigMap beside the SLO targets."""
    kv_cache_threshold: float | None = Field(default=None, alias="kvCacheThreshold", ge=0, le=1)
    queue_length_threshold: float | None = Field(default=None, alias="queueLengthThreshold", ge=0)
    kv_spare_trigger: float | None = Field(default=None, alias="kvSpareTrigger", ge=0, le=1)
    queue_spare_trigger: float | None = Field(default=None, alias="queueSpareTrigger", ge=0)
    scale_up_threshold: float | None = Field(default=None, alias="scaleUpThreshold", gt=0, le=1)
    scale_down_boundary: float | None = Field(default=None, alias="scaleDownBoundary", gt=0, le=1)
    enable_limiter: bool | None = Field(default=None, alias="enableLimiter")
    optimizer: Literal["", "greedy", "exact"] | None = None
    """Ours: "exact" allocates with one MILP for all models instead of the greedy optimizers."""
    scale_down_floor: Literal["", "recommender"] | None = Field(default=None, alias="scaleDownFloor")
    """Ours: "recommender" never scales the model below the recommender's short-history lower bound."""
    priority: float | None = Field(default=None, ge=0)
    transition_timeout: str | None = Field(default=None, alias="transitionTimeout")
    """Ours: how long a requested transition may stay unapplied before it stops blocking the model."""

    @field_validator("transition_timeout")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None and parse_duration_s(value) <= 0:
            raise ValueError("must be a positive duration such as '5m'")
        return value


class ScaleToZeroEntry(_Entry):
    enable_scale_to_zero: bool | None = None
    retention_period: str | None = None

    @field_validator("retention_period")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None and parse_duration_s(value) <= 0:
            raise ValueError("must be a positive duration such as '10m'")
        return value


class AcceleratorProfile(BaseModel):
    """Prior service parameters of one accelerator type (ms), for a variant whose own are not learned yet —
    above all one at zero replicas, which reports nothing (seed 003's α, β, γ)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, allow_inf_nan=False)
    alpha: float = Field(gt=0, le=10_000)
    beta: float = Field(ge=0, le=1_000)
    gamma: float = Field(ge=0, le=1_000)
    max_batch: int | None = Field(default=None, alias="maxBatch", ge=1, le=1_000_000)


class QueueingEntry(_Entry):
    slo_multiplier: float | None = Field(default=None, alias="sloMultiplier")
    tuning_enabled: bool | None = Field(default=None, alias="tuningEnabled")
    target_ttft_ms: float | None = Field(default=None, alias="targetTTFT", ge=0)
    target_itl_ms: float | None = Field(default=None, alias="targetITL", ge=0)
    # the predictive analyzer's settings (ours; the plain queueing model ignores them)
    slo_attainment_target: float | None = Field(default=None, alias="sloAttainmentTarget", ge=0.5, lt=1)
    """Share of requests that must meet both targets (default 0.99)."""
    forecast_quantile: float | None = Field(default=None, alias="forecastQuantile", ge=0.5, lt=1)
    startup_time: str | None = Field(default=None, alias="startupTime")
    """The lead before pods have shown their own startup (creation → Ready p90); default 5m."""
    backlog_drain_time: str | None = Field(default=None, alias="backlogDrainTime")
    """How soon queued requests should be served: the backlog adds backlog / this to the demand; default 1m."""
    itl_spread: float | None = Field(default=None, alias="itlSpread", ge=0, le=5)
    """Coefficient of variation of a request's mean ITL, the prior of the tail (default 0.25)."""
    accelerator_profiles: dict[str, AcceleratorProfile] | None = Field(
        default=None, alias="acceleratorProfiles", max_length=64
    )

    @field_validator("startup_time", "backlog_drain_time")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None and not 0 < parse_duration_s(value) <= 3600:
            raise ValueError("must be a duration in (0, 1h], such as '5m'")
        return value

    @field_validator("slo_multiplier")
    @classmethod
    def _k(cls, value: float | None) -> float | None:
        if value is not None and value != 0 and value <= 1:
            raise ValueError("must be greater than 1 (target utilisation rho = 1 - 1/k)")
        return value

    @model_validator(mode="after")
    def _both_or_neither(self) -> QueueingEntry:
        ttft, itl = self.target_ttft_ms or 0, self.target_itl_ms or 0
        if (ttft > 0) != (itl > 0):
            raise ValueError("targetTTFT and targetITL must both be set (> 0) or both be omitted")
        return self


# ---- resolved, fully-populated values the pure core reads -------------------------------------------------


@dataclass(frozen=True, slots=True)
class SaturationConfig:
    """Thresholds for one model after layering. Defaults: seed 000's recommended values."""

    analyzer_name: str = ""
    kv_cache_threshold: float = 0.80
    queue_length_threshold: float = 5.0
    kv_spare_trigger: float = 0.10
    queue_spare_trigger: float = 3.0
    scale_up_threshold: float = 0.85
    scale_down_boundary: float = 0.70
    enable_limiter: bool = False
    optimizer: str = ""
    scale_down_floor: str = ""
    priority: float = 1.0
    transition_timeout_s: float = 300.0

    @property
    def token_based(self) -> bool:
        return self.analyzer_name in ("saturation", "saturation-token-based")


@dataclass(frozen=True, slots=True)
class AllocationMode:
    """How the allocation step buys capacity, cluster-wide (`ConfigSet.allocation`); the one type for the choice.

    enableLimiter  optimizer   scale-up                                          `optimizer` (in reasons)
    false          greedy      cheapest capacity first, GPUs unlimited             cost-aware
    true           greedy      fair share of the free GPUs, one replica per step    greedy-by-score
    either         exact       one MILP (with the GPU constraints when limited)     exact-milp
    """

    limiter: bool = False
    exact: bool = False

    @property
    def independent(self) -> bool:
        """Each model's allocation depends on its own signal alone (cost-aware, GPUs unlimited): models may be
        allocated in any grouping with the same result."""
        return not (self.limiter or self.exact)

    @property
    def optimizer(self) -> str:
        if self.exact:
            return "exact-milp"
        return "greedy-by-score" if self.limiter else "cost-aware"

    @property
    def greedy(self) -> AllocationMode:
        """The greedy mode with the same limiter: what the exact mode falls back to without a solution."""
        return AllocationMode(self.limiter)


@dataclass(frozen=True, slots=True)
class ScaleToZeroConfig:
    enabled: bool = False
    retention_period_s: float = 600.0
    enabled_source: str = "default (off)"
    """Which layer decided `enabled`: a ConfigMap entry, the global default, WVA_SCALE_TO_ZERO, or the default."""

    @property
    def retention_text(self) -> str:
        return format_duration_short(self.retention_period_s)


@dataclass(frozen=True, slots=True)
class QueueingConfig:
    slo_multiplier: float = 3.0
    tuning_enabled: bool = True
    target_ttft_ms: float = 0.0
    target_itl_ms: float = 0.0
    slo_attainment_target: float = 0.99
    forecast_quantile: float = 0.75
    startup_time_s: float = 300.0
    backlog_drain_time_s: float = 60.0
    itl_spread: float = 0.25
    accelerator_profiles: Mapping[str, AcceleratorProfile] = field(default_factory=dict)
    """Keyed by normalised accelerator name (adapter.domain.accelerators)."""

    @property
    def explicit_slo(self) -> bool:
        return self.target_ttft_ms > 0 and self.target_itl_ms > 0


# ---- parsing ----------------------------------------------------------------------------------------------

E = TypeVar("E", bound=_Entry)
_C = TypeVar("_C")

_ENTRY_TYPES: dict[str, type[_Entry]] = {
    SATURATION_CM: SaturationEntry,
    SCALE_TO_ZERO_CM: ScaleToZeroEntry,
    QUEUEING_CM: QueueingEntry,
}


@dataclass(frozen=True, slots=True)
class ParsedConfigMap(Generic[E]):
    """One ConfigMap's valid entries (by data key) and one message per invalid entry."""

    namespace: str
    name: str
    entries: Mapping[str, E]
    errors: tuple[str, ...] = ()

    @property
    def default(self) -> E | None:
        return self.entries.get(DEFAULT_KEY)

    def for_model(self, model: ModelKey) -> E | None:
        """The entry whose `model_id` (and `namespace`, if given) match; the first data key in sort order wins."""
        for key in sorted(self.entries):
            entry = self.entries[key]
            if key == DEFAULT_KEY or entry.model_id != model.model_id:
                continue
            if entry.namespace in (None, model.namespace):
                return entry
        return None


def parse_configmap(*, namespace: str, name: str, data: Mapping[str, Any]) -> ParsedConfigMap[Any]:
    """Parse every data entry of a known WVA ConfigMap. Invalid entries are dropped, each with a message."""
    entry_type = _ENTRY_TYPES.get(name)
    if entry_type is None:
        raise ValueError(f"{name!r} is not a WVA ConfigMap; expected one of {', '.join(KNOWN_CONFIGMAPS)}")
    entries: dict[str, _Entry] = {}
    errors: list[str] = []
    for key in sorted(data):
        source = f"ConfigMap {plain(namespace, 63)}/{plain(name, 253)}[{plain(str(key), 80)}]"
        text = data[key]
        if not isinstance(text, str):
            errors.append(f"{source}: value must be a YAML string, got {type(text).__name__}")
            continue
        try:
            doc = load_yaml(text, what=source)
        except InputError as exc:
            errors.append(str(exc))
            continue
        if doc is None:
            doc = {}
        if not isinstance(doc, dict):
            errors.append(f"{source}: must be a YAML mapping of fields, got {type(doc).__name__}")
            continue
        try:
            entry = entry_type.model_validate(doc)
        except ValidationError as exc:
            errors.extend(describe(exc, source=source))
            continue
        except (RecursionError, MemoryError, ValueError, TypeError) as exc:  # never let one entry stop the rest
            errors.append(f"{source}: could not be validated ({type(exc).__name__})")
            continue
        if key != DEFAULT_KEY and entry.model_id is None:
            errors.append(f"{source}: a per-model entry must set `model_id` (or use the key 'default')")
            continue
        entries[key] = entry
    return ParsedConfigMap(namespace=namespace, name=name, entries=entries, errors=tuple(errors))


# ---- layering ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigSet:
    """All WVA ConfigMaps known this cycle (global ones live in `controller_namespace`)."""

    controller_namespace: str = DEFAULT_CONTROLLER_NAMESPACE
    configmaps: Mapping[tuple[str, str], ParsedConfigMap[Any]] = field(default_factory=dict)
    scale_to_zero_env: str | None = None
    """The value of WVA_SCALE_TO_ZERO, read by the config edge (the core never reads env)."""
    sources: tuple[tuple[str, str, Mapping[str, Any]], ...] = ()
    """The raw (namespace, name, data) this set was parsed from (what the flight recorder saves)."""
    _resolved: dict[tuple[str, ModelKey], tuple[Any, tuple[str, ...]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Each model's layered config, resolved once per set (the engine asks for three of them per model per cycle:
    ~40 µs a model at 1,000 VAs); a new set starts empty, so a ConfigMap change is seen at once."""

    @classmethod
    def from_raw(
        cls,
        raw: Iterable[tuple[str, str, Mapping[str, Any]]],
        *,
        controller_namespace: str = DEFAULT_CONTROLLER_NAMESPACE,
        scale_to_zero_env: str | None = None,
    ) -> ConfigSet:
        """Build from (namespace, name, data) triples; unknown ConfigMap names are ignored."""
        kept = tuple((ns, name, data) for ns, name, data in raw if name in _ENTRY_TYPES)
        parsed = {(ns, name): parse_configmap(namespace=ns, name=name, data=data) for ns, name, data in kept}
        return cls(controller_namespace, parsed, scale_to_zero_env, kept)

    def errors(self) -> list[str]:
        return [e for key in sorted(self.configmaps) for e in self.configmaps[key].errors]

    def _layers(self, name: str, model: ModelKey) -> tuple[list[Any], list[str]]:
        """Entries from lowest to highest precedence, and the warnings that apply to this model."""
        scopes = [self.controller_namespace]
        if model.namespace != self.controller_namespace:
            scopes.append(model.namespace)
        maps = [self.configmaps[(ns, name)] for ns in scopes if (ns, name) in self.configmaps]
        layers: list[Any] = [cm.default for cm in maps if cm.default is not None]
        layers += [e for cm in maps if (e := cm.for_model(model)) is not None]
        warnings = [msg for cm in maps for msg in cm.errors]
        return layers, warnings

    def _memo(
        self, kind: str, model: ModelKey, resolve: Callable[[ModelKey], tuple[_C, list[str]]]
    ) -> tuple[_C, tuple[str, ...]]:
        """`resolve(model)`, computed once per set and model; the warnings are kept as a tuple (callers get a copy)."""
        key = (kind, model)
        found = self._resolved.get(key)
        if found is None:
            cfg, warnings = resolve(model)
            found = self._resolved[key] = (cfg, tuple(warnings))
        return cast(tuple[_C, tuple[str, ...]], found)

    def has_queueing_default(self, namespace: str) -> bool:
        """The queueing-model analyzer is selected when its ConfigMap has a `default` entry (global or local)."""
        for ns in {self.controller_namespace, namespace}:
            cm = self.configmaps.get((ns, QUEUEING_CM))
            if cm is not None and cm.default is not None:
                return True
        return False

    def saturation(self, model: ModelKey) -> tuple[SaturationConfig, list[str]]:
        cfg, warnings = self._memo("saturation", model, self._saturation)
        return cfg, list(warnings)

    def _saturation(self, model: ModelKey) -> tuple[SaturationConfig, list[str]]:
        layers, warnings = self._layers(SATURATION_CM, model)
        merged: dict[str, Any] = {}
        for entry in layers:
            merged.update(entry.set_fields())
        if not any(entry.model_id is None for entry in layers):
            warnings.append(
                f"no valid `default` entry in ConfigMap {SATURATION_CM}; using the recommended thresholds "
                "(kvCacheThreshold 0.80, queueLengthThreshold 5, kvSpareTrigger 0.10, queueSpareTrigger 3)"
            )
        timeout = merged.pop("transition_timeout", None)
        if timeout is not None:
            merged["transition_timeout_s"] = parse_duration_s(timeout)
        cfg = SaturationConfig(**merged)
        if cfg.kv_spare_trigger > cfg.kv_cache_threshold:
            warnings.append(
                f"{SATURATION_CM}: kvSpareTrigger {cfg.kv_spare_trigger} exceeds kvCacheThreshold "
                f"{cfg.kv_cache_threshold} for {model}; using the recommended thresholds"
            )
            cfg = SaturationConfig(analyzer_name=cfg.analyzer_name, enable_limiter=cfg.enable_limiter)
        if cfg.token_based and cfg.scale_up_threshold <= cfg.scale_down_boundary:
            warnings.append(
                f"{SATURATION_CM}: scaleUpThreshold {cfg.scale_up_threshold} must exceed scaleDownBoundary "
                f"{cfg.scale_down_boundary} for {model}; using 0.85 / 0.70"
            )
            cfg = replace(cfg, scale_up_threshold=0.85, scale_down_boundary=0.70)
        return cfg, warnings

    def allocation(self) -> AllocationMode:
        """The allocation mode, from the global saturation ConfigMap's `default` entry only: GPU pools are
        shared by every namespace, so no namespace-local ConfigMap may switch the limiter off (or on)."""
        cm = self.configmaps.get((self.controller_namespace, SATURATION_CM))
        entry = cm.default if cm is not None else None
        if entry is None:
            return AllocationMode()
        return AllocationMode(bool(entry.enable_limiter), entry.optimizer == "exact")

    def scale_to_zero(self, model: ModelKey) -> tuple[ScaleToZeroConfig, list[str]]:
        cfg, warnings = self._memo("scale_to_zero", model, self._scale_to_zero)
        return cfg, list(warnings)

    def _scale_to_zero(self, model: ModelKey) -> tuple[ScaleToZeroConfig, list[str]]:
        """Enabled: per-model entry > global/local default > WVA_SCALE_TO_ZERO env > off (seed 001)."""
        layers, warnings = self._layers(SCALE_TO_ZERO_CM, model)
        enabled, source = False, "default (off)"
        if self.scale_to_zero_env is not None and self.scale_to_zero_env.strip().lower() == "true":
            enabled, source = True, "env WVA_SCALE_TO_ZERO"
        retention = 600.0
        for entry in layers:
            where = "per-model entry" if entry.model_id is not None else "ConfigMap default"
            if entry.enable_scale_to_zero is not None:
                enabled, source = entry.enable_scale_to_zero, f"{SCALE_TO_ZERO_CM} {where}"
            if entry.retention_period is not None:
                retention = parse_duration_s(entry.retention_period)
        return ScaleToZeroConfig(enabled, retention, source), warnings

    def queueing(self, model: ModelKey) -> tuple[QueueingConfig, list[str]]:
        cfg, warnings = self._memo("queueing", model, self._queueing)
        return cfg, list(warnings)

    def _queueing(self, model: ModelKey) -> tuple[QueueingConfig, list[str]]:
        layers, warnings = self._layers(QUEUEING_CM, model)
        merged: dict[str, Any] = {}
        for entry in layers:
            merged.update(entry.set_fields())
        if merged.get("slo_multiplier", 0) == 0:
            merged.pop("slo_multiplier", None)
        for key in ("startup_time", "backlog_drain_time"):
            if key in merged:
                merged[f"{key}_s"] = parse_duration_s(merged.pop(key))
        if "accelerator_profiles" in merged:
            merged["accelerator_profiles"] = {
                normalize_accelerator(name): AcceleratorProfile(**profile) if isinstance(profile, dict) else profile
                for name, profile in merged["accelerator_profiles"].items()
            }
        return QueueingConfig(**merged), warnings
