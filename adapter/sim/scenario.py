"""Simulation scenarios (DESIGN §3.3), shared by `demo --scenario` and `simulate`.

A scenario describes one model served by several variants, a workload, how replicas are actuated, and the
WVA ConfigMaps. Loading validates the top level (unknown keys are errors) and delegates each section to the
builder that owns it; every error names the file and the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapter.config.configmaps import DEFAULT_CONTROLLER_NAMESPACE, ConfigSet
from adapter.config.safeload import MAX_FILE_BYTES, load_yaml
from adapter.config.va import VariantAutoscaling, parse_va
from adapter.domain.errors import ConfigError, ManifestError
from adapter.sim.fleet import FleetConfig
from adapter.sim.workload import SyntheticWorkload, TraceWorkload, trace_duration_s, workload_from_spec

KNOWN_KEYS = {
    "name", "model_id", "namespace", "duration_s", "slo", "workload", "variants", "actuation", "metrics",
    "engine", "policy", "configmaps", "controller_namespace", "seed",
}  # fmt: skip


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

    def fleet_config(self, *, start_s: float, seed: int = 0) -> FleetConfig:
        return FleetConfig.from_scenario(self.raw, seed=seed, start_s=start_s)

    def workload(self) -> SyntheticWorkload | TraceWorkload:
        return workload_from_spec(self.raw["workload"], base_dir=self.base_dir, duration_s=self.duration_s)

    def effective_duration_s(self) -> float:
        """`duration_s`, else the trace's length; a synthetic workload without one runs an hour."""
        if self.duration_s is not None:
            return self.duration_s
        spec = self.raw["workload"]
        if "trace" in spec:
            path = Path(str(spec["trace"]))
            path = path if path.is_absolute() else self.base_dir / path
            return trace_duration_s(path, time_scale=float(spec.get("time_scale", 1.0)))
        return 3600.0


def load(path: Path) -> Scenario:
    try:
        raw = load_yaml(path.read_bytes(), what=str(path), max_bytes=MAX_FILE_BYTES)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return parse(raw, base_dir=path.parent)
    except (ValueError, ManifestError) as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _section(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = raw.get(key) or {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{key}: expected a mapping, got {type(value).__name__}")
    return value


def parse(raw: Any, *, base_dir: Path) -> Scenario:
    if not isinstance(raw, Mapping):
        raise ValueError("a scenario must be a YAML mapping")
    unknown = sorted(set(raw) - KNOWN_KEYS)
    if unknown:
        raise ValueError(f"unknown top-level keys {unknown}; expected some of {sorted(KNOWN_KEYS)}")
    for key in ("model_id", "workload", "variants"):
        if key not in raw:
            raise ValueError(f"{key}: required")
    namespace = str(raw.get("namespace", "default"))
    FleetConfig.from_scenario(raw)  # validates variants[] and metrics with key-naming errors
    if not isinstance(raw["workload"], Mapping):
        raise ValueError("workload: must be a mapping (a trace or a synthetic generator)")
    workload_from_spec(raw["workload"], base_dir=base_dir, duration_s=None)  # key-naming errors now, not mid-run
    vas = tuple(_va(v, model_id=str(raw["model_id"]), namespace=namespace) for v in raw["variants"])
    slo = _section(raw, "slo")
    duration = raw.get("duration_s")
    return Scenario(
        name=str(raw.get("name", base_dir.name)),
        raw=raw,
        base_dir=base_dir,
        duration_s=None if duration is None else float(duration),
        slo=Slo(ttft_ms=float(slo.get("ttft_ms", 2000.0)), itl_ms=float(slo.get("itl_ms", 100.0))),
        vas=vas,
        configmaps=_configmaps(raw),
        actuation=dict(_section(raw, "actuation")) or {"kind": "hpa"},
        engine_interval_s=float(_section(raw, "engine").get("interval_s", 30.0)),
        policy=str(raw.get("policy", "wva-v1")),
    )


def _va(variant: Mapping[str, Any], *, model_id: str, namespace: str) -> VariantAutoscaling:
    name = str(variant["name"])
    obj = {
        "apiVersion": "llmd.ai/v1alpha1",
        "kind": "VariantAutoscaling",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"inference.optimization/acceleratorName": str(variant.get("accelerator", ""))},
        },
        "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": str(variant.get("target_name") or name)},
            "modelID": model_id,
            "minReplicas": int(variant.get("min_replicas", 1)),
            "maxReplicas": int(variant.get("max_replicas", 10)),
            "variantCost": f"{float(variant.get('cost', 10.0)):g}",
        },
    }
    return parse_va(obj, source=f"variants[{name}]")


def _configmaps(raw: Mapping[str, Any]) -> ConfigSet:
    controller_ns = str(raw.get("controller_namespace", DEFAULT_CONTROLLER_NAMESPACE))
    value = raw.get("configmaps") or []
    triples: list[tuple[str, str, Mapping[str, Any]]] = []
    if isinstance(value, Mapping):  # {name: {key: yaml}} in the controller namespace
        triples = [(controller_ns, str(name), data) for name, data in value.items()]
    elif isinstance(value, list):  # [{namespace, name, data}] as in a replay fixture
        for i, cm in enumerate(value):
            if not isinstance(cm, Mapping) or "name" not in cm:
                raise ValueError(f"configmaps[{i}]: expected {{namespace, name, data}}")
            triples.append((str(cm.get("namespace", controller_ns)), str(cm["name"]), cm.get("data") or {}))
    else:
        raise ValueError("configmaps: expected a list of {namespace, name, data} or a mapping name -> data")
    configset = ConfigSet.from_raw(triples, controller_namespace=controller_ns)
    if configset.errors():
        raise ValueError("configmaps: " + "; ".join(configset.errors()))
    return configset
