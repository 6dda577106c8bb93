"""Scenario files (adapter/sim/scenario.py): bounded, strict, every problem named by its key."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapter.domain.errors import ConfigError
from adapter.sim import scenario as scenario_module

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "examples" / "scenarios"
BENCH = SCENARIOS / "bench"

BASE: dict[str, Any] = {
    "name": "s",
    "model_id": "meta/llama",
    "namespace": "llm",
    "duration_s": 600,
    "workload": {"kind": "poisson", "rate_rps": 2},
    "variants": [{"name": "l4", "accelerator": "L4", "cost": 0.8}],
}


def parse(raw: Any, base_dir: Path = REPO) -> scenario_module.Scenario:
    return scenario_module.parse(raw, base_dir=base_dir)


def edited(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    node: Any = raw
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return raw


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        pytest.param(("model_id",), KeyError, "scenario.model_id: required", id="missing-model-id"),
        pytest.param(("workload",), KeyError, "scenario.workload: required", id="missing-workload"),
        pytest.param(("bogus",), 1, "scenario.bogus: unknown field", id="unknown-top-level-key"),
        pytest.param(("duration_s",), -5, "scenario.duration_s", id="negative-duration"),
        pytest.param(("duration_s",), 10**9, "scenario.duration_s", id="duration-over-a-week"),
        pytest.param(("duration_s",), "1h", "scenario.duration_s", id="duration-not-a-number"),
        pytest.param(("slo",), {"ttft_ms": 0}, "scenario.slo.ttft_ms", id="zero-ttft-slo"),
        pytest.param(("namespace",), "Not_DNS", "scenario.namespace", id="namespace-not-dns"),
        pytest.param(("policy",), "magic", "scenario.policy", id="unknown-policy"),
        pytest.param(("seed",), True, "scenario.seed", id="bool-seed"),
        pytest.param(("variants",), [], "scenario.variants", id="no-variants"),
        pytest.param(("variants",), [{"name": f"v{i}"} for i in range(17)], "scenario.variants", id="17-variants"),
        pytest.param(("variants", 0, "name"), "L4_Upper", "scenario.variants[0].name", id="variant-name-not-dns"),
        pytest.param(("variants", 0, "cost"), -1, "scenario.variants[0].cost", id="negative-cost"),
        pytest.param(("variants", 0, "max_replicas"), 5000, "scenario.variants[0].max_replicas", id="huge-max"),
        pytest.param(("variants", 0, "min_replicas"), 11, "min_replicas (11) must be <= max_replicas", id="min-gt-max"),
        pytest.param(("variants", 0, "initial_replicas"), 20, "initial_replicas (20)", id="initial-above-max"),
        pytest.param(("variants", 0, "perf"), {"alpha_ms": 0}, "scenario.variants[0].perf.alpha_ms", id="alpha-zero"),
        pytest.param(("variants", 0, "perf"), {"kv": 1}, "scenario.variants[0].perf.kv: unknown", id="perf-typo"),
        pytest.param(("variants", 0, "startup_s"), {"median": 9, "p90": 1}, "p90 (1) must be >= median", id="p90-lt"),
        pytest.param(("workload", "kind"), "wobble", "scenario.workload.kind", id="unknown-workload-kind"),
        pytest.param(("workload", "rate_rps"), KeyError, "kind 'poisson' needs rate_rps", id="poisson-without-rate"),
        pytest.param(("workload", "rate_rps"), -1, "scenario.workload.rate_rps", id="negative-rate"),
        pytest.param(("workload", "trace"), "x.csv", "give either `trace`", id="trace-and-kind"),
        pytest.param(("workload",), {"trace": "absent.csv"}, "scenario.workload.trace", id="absent-trace"),
        pytest.param(("workload",), {"trace": "x.parquet"}, "unknown trace format", id="unknown-trace-format"),
        pytest.param(("workload",), {"kind": "diurnal", "base_rps": 5, "peak_rps": 1}, "peak_rps", id="peak-lt-base"),
        pytest.param(("actuation",), {"kind": "hpa", "tolerance": 2}, "scenario.actuation.tolerance", id="tolerance"),
        pytest.param(("actuation",), {"kind": "cron"}, "scenario.actuation", id="unknown-actuation-kind"),
        pytest.param(("actuation",), {"polling_interval_s": 5}, "polling_interval_s: unknown", id="keda-key-on-hpa"),
        pytest.param(("engine",), {"interval_s": 0.1}, "scenario.engine.interval_s", id="engine-interval-below-1s"),
        pytest.param(("metrics",), {"scrape_interval_s": 0}, "scenario.metrics.scrape_interval_s", id="scrape-0"),
        pytest.param(("configmaps",), [{"name": 3}], "scenario.configmaps[0].name", id="configmap-name-not-string"),
        pytest.param(
            ("configmaps",),
            {"wva-saturation-scaling-config": {"default": "kvCacheThreshold: 7"}},
            "kvCacheThreshold",
            id="configmap-value-out-of-range",
        ),
        pytest.param(("configmaps",), {"wva-saturation-scaling-config": {"default": 3}}, "data.default", id="cm-int"),
    ],
)
def test_invalid_scenarios_name_the_key(path: tuple[Any, ...], value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(edited(path, value))
    assert message in str(info.value)


def test_too_many_engine_cycles_is_refused() -> None:
    raw = edited(("duration_s",), 7 * 24 * 3600)
    raw["engine"] = {"interval_s": 1}
    with pytest.raises(ConfigError, match="engine cycles; the limit is 20160"):
        parse(raw)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("a: [" * 40 + "]" * 40, "nest", id="too-deep"),
        pytest.param("x: &a [1]\n" + "".join(f"y{i}: *a\n" for i in range(100)), "alias", id="too-many-aliases"),
        pytest.param("model_id: [unclosed", "malformed YAML", id="not-yaml"),
        pytest.param("- just\n- a list\n", "must be a YAML mapping", id="not-a-mapping"),
    ],
)
def test_files_are_bounded(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        scenario_module.load(path)
    assert str(path) in str(info.value)


def test_a_file_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * scenario_module.MAX_SCENARIO_BYTES)
    with pytest.raises(ConfigError, match="the limit is"):
        scenario_module.load(path)


def test_a_valid_scenario_and_its_defaults() -> None:
    s = parse(BASE)
    assert (s.name, s.policy, s.seed, s.engine_interval_s) == ("s", "wva-v1", 0, 30.0)
    assert s.actuation["kind"] == "hpa"
    assert s.actuation["scale_down_stabilization_s"] == 300.0
    (variant,) = s.fleet_config(start_s=0.0).variants
    assert (variant.min_replicas, variant.max_replicas, variant.initial_replicas) == (1, 10, 1)
    assert s.vas[0].key.name == "l4"
    assert s.vas[0].to_spec().accelerator == "L4"
    assert s.effective_duration_s() == 600.0
    assert s.model.model_id == "meta/llama"


def test_the_mapping_form_of_configmaps_lands_in_the_controller_namespace() -> None:
    raw = {**BASE, "configmaps": {"wva-queueing-model-config": {"default": "targetTTFT: 500\ntargetITL: 50\n"}}}
    s = parse(raw)
    assert s.configmaps.has_queueing_default("llm")


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.yaml")), ids=lambda p: p.stem)
def test_the_benchmark_scenarios_load(path: Path) -> None:
    s = scenario_module.load(path)
    assert s.effective_duration_s() <= 3600
    assert len(s.vas) == 2
    assert yaml.safe_load(path.read_text())["name"] == s.name


@pytest.mark.parametrize("path", sorted(SCENARIOS.rglob("*.yaml")), ids=lambda p: str(p.relative_to(SCENARIOS)))
def test_every_scenario_in_the_repository_loads_under_its_file_name(path: Path) -> None:
    """The development, held-out and example scenarios are played by hand and in closing notes, not by the
    benchmark: a key renamed in the schema would otherwise break them unseen."""
    s = scenario_module.load(path)
    assert s.name == path.stem
    assert 0 < s.effective_duration_s() <= 4 * 3600
    assert s.vas


def test_the_workload_seed_adds_the_run_seed() -> None:
    s = parse(BASE)
    first = [r.arrival_s for r, _ in zip(s.workload(), range(5), strict=False)]
    same = [r.arrival_s for r, _ in zip(s.workload(run_seed=0), range(5), strict=False)]
    other = [r.arrival_s for r, _ in zip(s.workload(run_seed=1), range(5), strict=False)]
    assert first == same != other


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        pytest.param([{"name": "n", "accelerator": "A100"}], "scenario.nodes[0].allocatable_gpus", id="no-gpus"),
        pytest.param([{"name": "n", "accelerator": "A100", "allocatable_gpus": -1}], "allocatable_gpus", id="neg"),
        pytest.param([{"name": "N_1", "accelerator": "A100", "allocatable_gpus": 1}], "nodes[0].name", id="name"),
        pytest.param([{"name": "n", "accelerator": "", "allocatable_gpus": 1}], "nodes[0].accelerator", id="acc"),
        pytest.param([{"name": "n", "accelerator": "A", "allocatable_gpus": 1, "gpu": 1}], "gpu: unknown", id="typo"),
        pytest.param({"name": "n"}, "scenario.nodes", id="not-a-list"),
    ],
)
def test_invalid_nodes_name_the_key(nodes: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse({**BASE, "nodes": nodes})
    assert message in str(info.value)


def test_without_nodes_each_accelerator_has_room_for_its_variants_at_their_maximum_twice() -> None:
    raw = {
        **BASE,
        "variants": [
            {"name": "a", "accelerator": "A100", "max_replicas": 12},
            {"name": "b", "accelerator": "A100", "max_replicas": 4, "gpus_per_replica": 2},
            {"name": "c", "accelerator": "L40S", "max_replicas": 3},
            {"name": "d", "max_replicas": 5},
        ],
    }
    nodes = parse(raw).fleet_config(start_s=0.0).nodes
    assert sorted((n.accelerator, n.allocatable_gpus) for n in nodes) == [("A100", 40), ("L40S", 6)]
    given = [{"name": "gpu-a", "accelerator": "A100", "allocatable_gpus": 3}]
    (node,) = parse({**raw, "nodes": given}).fleet_config(start_s=0.0).nodes
    assert (node.name, node.accelerator, node.allocatable_gpus) == ("gpu-a", "A100", 3)
