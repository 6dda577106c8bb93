"""The policies `simulate` compares: the project's analyzers, selected the way an operator selects them, and
the baselines a user would otherwise configure.

| policy       | how                                                                                           |
|--------------|-----------------------------------------------------------------------------------------------|
| `wva-v1`     | `analyzerName: saturation-percentage-based` in every wva-saturation-scaling-config entry, and no |
|              | `default` entry in wva-queueing-model-config (which would select the queueing model)          |
| `wva-v2`     | the same with `analyzerName: saturation` (token-based)                                        |
| `wva-slo`    | a `default` entry in wva-queueing-model-config; every entry of it carries the scenario's SLO   |
|              | as `targetTTFT`/`targetITL` (explicit targets)                                                |
| `hpa-kv`     | an HPA per variant on the pods' KV-cache utilisation, AverageValue target 0.7                  |
| `keda-queue` | a KEDA ScaledObject per variant on the pods' waiting requests, AverageValue target 5          |
| `static`     | nothing scales: the initial replicas stay                                                     |
| `oracle`     | the clairvoyant schedule (adapter.sim.oracle) set on spec.replicas, each replica requested its |
|              | variant's p90 startup ahead (adapter.sim.actuators.ScheduleActuator): measured, not assumed   |

The ConfigMaps the `wva-*` policies produce are checked with the engine's own selection
(`adapter.analyzers.registry.choose`): a policy the engine would not honour is a `PolicyError` (exit 2), never
a silent V1.

Baselines read the simulated Prometheus the way their adapters do — the latest scraped sample of each pod that
is still scraped (an instant query): `Σ_pods kv_cache_usage` for the HPA (proposal ⌈Σ / 0.7⌉, i.e. ⌈replicas ·
mean / 0.7⌉, as the HPA's Pods-metric AverageValue computes it; no pod reporting ⇒ no metric ⇒ the HPA holds),
`Σ_pods num_requests_waiting` for KEDA (⌈Σ / 5⌉; an empty result reads as 0, KEDA's `ignoreNullValues`).
Both act through the same HPA/KEDA emulation, with the scenario's behaviour settings (sync period, tolerance,
stabilization windows, polling interval, cooldown).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from enum import StrEnum
from typing import Any

import yaml

from adapter.analyzers import registry
from adapter.config.configmaps import QUEUEING_CM, SATURATION_CM, ConfigSet
from adapter.config.safeload import MAX_DOCUMENT_BYTES, load_yaml
from adapter.domain.decision import AnalyzerName
from adapter.domain.errors import ConfigError
from adapter.domain.ids import ModelKey
from adapter.sim.actuators import HpaEmulator, KedaEmulator, actuator_from_spec
from adapter.sim.metricspath import SeriesStore


class PolicyError(ConfigError):
    """A policy that cannot run here (unknown, or the engine would select another analyzer for it)."""


class Policy(StrEnum):
    WVA_V1 = "wva-v1"
    WVA_V2 = "wva-v2"
    WVA_SLO = "wva-slo"
    WVA_PREDICTIVE = "wva-predictive"
    HPA_KV = "hpa-kv"
    KEDA_QUEUE = "keda-queue"
    STATIC = "static"
    ORACLE = "oracle"


POLICIES: tuple[str, ...] = tuple(p.value for p in Policy)
POLICY_ANALYZER: Mapping[Policy, AnalyzerName] = {
    Policy.WVA_V1: AnalyzerName.SATURATION_PERCENTAGE,
    Policy.WVA_V2: AnalyzerName.SATURATION_TOKEN,
    Policy.WVA_SLO: AnalyzerName.QUEUEING_MODEL,
    Policy.WVA_PREDICTIVE: AnalyzerName.PREDICTIVE,
}
_ANALYZER_NAME_VALUE = {Policy.WVA_V1: "saturation-percentage-based", Policy.WVA_V2: "saturation"}
HPA_KV_TARGET = 0.7
"""AverageValue target of the hpa-kv baseline: mean KV-cache utilisation per pod."""
KEDA_QUEUE_TARGET = 5.0
"""AverageValue target of the keda-queue baseline: waiting requests per pod."""


def parse_policy(name: str) -> Policy:
    """The policy called `name`; a PolicyError when it is unknown."""
    try:
        return Policy(name)
    except ValueError:
        raise PolicyError(f"policy {name!r}: expected one of {', '.join(POLICIES)}") from None


def is_wva(policy: Policy) -> bool:
    return policy in POLICY_ANALYZER


def _entry(text: Any, *, where: str) -> dict[str, Any]:
    value = load_yaml(str(text or ""), what=where, max_bytes=MAX_DOCUMENT_BYTES) if text else {}
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PolicyError(f"{where}: expected a mapping of settings")
    return dict(value)


def _dump(entry: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(entry), sort_keys=True, default_flow_style=False)


def policy_configmaps(
    configmaps: ConfigSet,
    policy: Policy,
    *,
    model: ModelKey,
    slo_ttft_ms: float,
    slo_itl_ms: float,
    profiles: Mapping[str, Mapping[str, float]] | None = None,
) -> tuple[tuple[str, str, dict[str, str]], ...]:
    """The scenario's ConfigMaps edited so that the engine selects `policy`'s analyzer for `model` (module
    docstring), as (namespace, name, data) triples for the simulated cluster. Baselines get them unchanged.
    `profiles` (accelerator → {alpha, beta, gamma} ms): what a user measured for each accelerator, given to the
    predictive policy as `acceleratorProfiles`."""
    triples = [(ns, name, {str(k): str(v) for k, v in data.items()}) for ns, name, data in configmaps.sources]
    if not is_wva(policy):
        return tuple(triples)
    ns = configmaps.controller_namespace
    targets = {"targetTTFT": float(slo_ttft_ms), "targetITL": float(slo_itl_ms)}
    edits: dict[str, dict[str, Any]]
    if policy in (Policy.WVA_V1, Policy.WVA_V2):
        edits = {SATURATION_CM: {"analyzerName": _ANALYZER_NAME_VALUE[policy]}}
    elif policy is Policy.WVA_SLO:
        edits = {SATURATION_CM: {"analyzerName": ""}, QUEUEING_CM: targets}
    else:
        queueing = {
            **targets,
            **({"acceleratorProfiles": {k: dict(v) for k, v in profiles.items()}} if profiles else {}),
        }
        edits = {SATURATION_CM: {"analyzerName": "predictive"}, QUEUEING_CM: queueing}
    for edit_name in edits:
        if not any(n == ns and name == edit_name for n, name, _ in triples):
            triples.append((ns, edit_name, {}))
    triples = [(n, name, _edited(n, name, data, edits=edits, global_ns=ns)) for n, name, data in triples]
    _check_selection(triples, configmaps, policy, model=model, slo=(slo_ttft_ms, slo_itl_ms))
    return tuple(triples)


def _edited(
    namespace: str, name: str, data: Mapping[str, str], *, edits: Mapping[str, Mapping[str, Any]], global_ns: str
) -> dict[str, str]:
    """One ConfigMap's data after the policy's edits: each edited ConfigMap gets its settings merged into every
    entry (a `default` entry is added to the global one); for V1/V2 the queueing-model `default` entries are
    removed (a queueing default would select the queueing model)."""
    settings = edits.get(name)
    if settings is not None:
        entries = dict(data)
        if namespace == global_ns and "default" not in entries:
            entries["default"] = ""
        return {
            key: _dump({**_entry(text, where=f"{namespace}/{name}[{key}]"), **settings})
            for key, text in entries.items()
        }
    if name == QUEUEING_CM and QUEUEING_CM not in edits:
        return {key: text for key, text in data.items() if key != "default"}
    return dict(data)


def _check_selection(
    triples: list[tuple[str, str, dict[str, str]]],
    original: ConfigSet,
    policy: Policy,
    *,
    model: ModelKey,
    slo: tuple[float, float],
) -> None:
    """The engine's own analyzer choice on the edited ConfigMaps must be the policy's."""
    edited = ConfigSet.from_raw(
        triples, controller_namespace=original.controller_namespace, scale_to_zero_env=original.scale_to_zero_env
    )
    if edited.errors():
        raise PolicyError(f"policy {policy}: the edited ConfigMaps are invalid: {'; '.join(edited.errors()[:3])}")
    sat_cfg, _ = edited.saturation(model)
    chosen = registry.choose(edited, model, sat_cfg).name
    if chosen is not POLICY_ANALYZER[policy]:
        raise PolicyError(
            f"policy {policy}: the engine would select {chosen} for {model}, not {POLICY_ANALYZER[policy]}"
        )
    if policy in (Policy.WVA_SLO, Policy.WVA_PREDICTIVE):
        queueing, _ = edited.queueing(model)
        if (queueing.target_ttft_ms, queueing.target_itl_ms) != slo:
            raise PolicyError(f"policy {policy}: the engine would use SLO {queueing} for {model}, not {slo}")


# ------------------------------------------------------------------------------------------ baselines


def baseline_actuator(
    policy: Policy,
    actuation: Mapping[str, Any],
    *,
    bounds: Mapping[str, tuple[int, int]],
    start_s: float,
) -> HpaEmulator | KedaEmulator:
    """The HPA (hpa-kv) or KEDA (keda-queue) a user would configure, with the scenario's behaviour settings:
    an `actuation` of the other kind contributes its shared HPA keys only."""
    hpa_keys = {
        "sync_period_s",
        "tolerance",
        "tolerance_mode",
        "scale_down_stabilization_s",
        "scale_up_stabilization_s",
    }
    keda_keys = hpa_keys | {"polling_interval_s", "cooldown_s", "initial_cooldown_s", "push"}
    if policy is Policy.HPA_KV:
        spec = {k: v for k, v in actuation.items() if k in hpa_keys} | {"kind": "hpa"}
        built = actuator_from_spec(spec, bounds=bounds, start_s=start_s)
        assert isinstance(built, HpaEmulator)
        return HpaEmulator(
            {n: replace(c.config, target_average_value=HPA_KV_TARGET) for n, c in built.controllers.items()},
            start_s=start_s,
        )
    if policy is Policy.KEDA_QUEUE:
        spec = {k: v for k, v in actuation.items() if k in keda_keys} | {"kind": "keda"}
        built_keda = actuator_from_spec(spec, bounds=bounds, start_s=start_s)
        assert isinstance(built_keda, KedaEmulator)
        return KedaEmulator(
            {
                n: replace(s.config, hpa=replace(s.config.hpa, target_average_value=KEDA_QUEUE_TARGET))
                for n, s in built_keda.states.items()
            },
            start_s=start_s,
        )
    raise ValueError(f"{policy} is not a baseline with an actuator")


def baseline_metric(
    policy: Policy, store: SeriesStore, variants: tuple[str, ...], *, now_s: float
) -> dict[str, float | None]:
    """Per variant, the external metric value the baseline's HPA/KEDA reads (see the module docstring)."""
    field = "kv_cache_usage" if policy is Policy.HPA_KV else "queue_length"
    totals: dict[str, float] = {}
    for variant, value in store.latest(field, now_s).values():
        totals[variant] = totals.get(variant, 0.0) + value
    if policy is Policy.HPA_KV:
        return {v: totals.get(v) for v in variants}
    return {v: totals.get(v, 0.0) for v in variants}
