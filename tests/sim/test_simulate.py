"""`wva-adapter simulate` (issue 8): the summary contract (DESIGN §3.3), policies, the oracle, the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adapter.domain.errors import ConfigError
from adapter.sim import scenario as scenario_module
from adapter.sim import simulate as sim
from tests.core.test_cli import wva

REPO = Path(__file__).resolve().parents[2]
STEPS = REPO / "examples" / "scenarios" / "bench" / "steps.yaml"
FIELDS = {
    "requests": int, "completed": int, "dropped": int, "slo_attainment": float, "ttft_p50_ms": float,
    "ttft_p99_ms": float, "itl_p50_ms": float, "itl_p99_ms": float, "gpu_hours": float, "cost": float,
    "oracle_cost": float, "cost_ratio_vs_oracle": float, "scale_events": int, "replicas_max": dict, "wall_s": float,
}  # fmt: skip


def _short(path: Path = STEPS, duration_s: float = 900) -> scenario_module.Scenario:
    scenario = scenario_module.load(path)
    raw = dict(scenario.raw)
    raw["duration_s"] = duration_s
    return scenario_module.parse(raw, base_dir=path.parent)


@pytest.fixture(scope="module")
def steps_v1() -> sim.Simulation:
    return sim.simulate(_short(), policy="wva-v1")


def test_summary_has_every_field_with_its_type(steps_v1: sim.Simulation) -> None:
    summary: dict[str, Any] = steps_v1.summary
    assert summary["schema"] == "wva-sim-summary/v1"
    for name, kind in FIELDS.items():
        assert isinstance(summary[name], kind), (name, summary[name])
    assert summary["requests"] >= summary["completed"] + summary["dropped"]
    assert 0 <= summary["slo_attainment"] <= 1
    assert set(summary["replicas_max"]) == {"llama-8b-l4", "llama-8b-a100"}
    assert summary["cost_ratio_vs_oracle"] == pytest.approx(summary["cost"] / summary["oracle_cost"], rel=1e-3)


def test_wva_v1_scales_up_under_the_step(steps_v1: sim.Simulation) -> None:
    # steps: 4 req/s, then 24 req/s at 10 min: the cheap variant gains replicas after the step
    before = max(p.spec[0] for p in steps_v1.fleet.timeline if p.t_s - sim.START_S < 600)
    after = max(p.spec[0] for p in steps_v1.fleet.timeline if p.t_s - sim.START_S >= 600)
    assert after > before


def test_oracle_grows_with_load_and_pays_startups() -> None:
    scenario = _short()
    cost, plan = sim.oracle(scenario, 900)
    low = sum(r for t, reps in plan if t < 600 for r in reps.values())
    high = sum(r for t, reps in plan if t >= 600 for r in reps.values())
    assert high / 10 > low / 20  # 24 req/s needs more replicas per bin than 4 req/s
    hourly = (
        sum(sum(reps[v.name] * v.cost for v in scenario.fleet_config(start_s=0).variants) for _, reps in plan)
        * 30
        / 3600
    )
    assert cost > hourly  # startup time is paid too


@pytest.mark.parametrize("policy", ["hpa-kv", "keda-queue", "static", "wva-v2", "wva-slo"])
def test_every_policy_runs_and_static_never_scales(policy: str) -> None:
    summary = sim.simulate(_short(duration_s=300), policy=policy).summary
    assert summary["policy"] == policy
    if policy == "static":
        assert summary["scale_events"] == 0


def test_unknown_policy_is_an_error() -> None:
    with pytest.raises(ConfigError, match="policy 'magic'"):
        sim.policy_configmaps(_short(), "magic")


def test_unimplemented_analyzer_is_an_error_never_a_silent_v1(monkeypatch: pytest.MonkeyPatch) -> None:
    from adapter import engine
    from adapter.domain.decision import AnalyzerName

    monkeypatch.setattr(engine, "IMPLEMENTED_ANALYZERS", frozenset({AnalyzerName.SATURATION_PERCENTAGE}))
    with pytest.raises(ConfigError, match="does not implement"):
        sim.policy_configmaps(_short(), "wva-slo")


def test_cli_prints_the_summary_and_writes_a_plot(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    text = STEPS.read_text().replace("duration_s: 1800", "duration_s: 300")
    scenario.write_text(text)
    result = wva("simulate", "--scenario", scenario, "--policy", "hpa-kv", "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["policy"] == "hpa-kv"
    assert (tmp_path / "out" / "steps-hpa-kv.png").stat().st_size > 10_000


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        pytest.param(("model_id: meta/llama-3.1-8b\n", ""), "model_id", id="missing-model"),
        pytest.param(("engine: {interval_s: 30}", "engine: {interval_s: 30}\nbogus: 1"), "bogus", id="unknown-key"),
        pytest.param(("kind: step,", "kind: wobble,"), "workload.kind", id="bad-workload-kind"),
    ],
)
def test_invalid_scenarios_exit_2_naming_the_key(tmp_path: Path, edit: tuple[str, str], key: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(STEPS.read_text().replace(*edit))
    result = wva("simulate", "--scenario", path)
    assert result.returncode == 2
    assert key in result.stderr
    assert "Traceback" not in result.stderr
