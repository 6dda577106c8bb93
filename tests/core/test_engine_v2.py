"""V2 through the whole pipeline (issue 7): the replay fixtures in tests/core/fixtures/v2-*.json (built with
their arithmetic in tests/core/v2_fixtures.py) played by the real `wva-adapter replay`, and one model's
failure isolated from the others."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapter import engine
from adapter.config.engine import EngineConfig
from adapter.domain.snapshot import DecisionPath
from adapter.engine import pipeline

from . import v2_fixtures
from .builders import MODEL_KEY, NS, T0, Fleet, condition, configset, same_pods, spec
from .test_cli import wva


@pytest.mark.parametrize("name", list(v2_fixtures.BUILDERS))
def test_committed_fixture_matches_its_builder(name: str) -> None:
    assert (v2_fixtures.FIXTURES / name).read_text(encoding="utf-8") == v2_fixtures.render(v2_fixtures.BUILDERS[name])


@pytest.mark.parametrize("name", list(v2_fixtures.BUILDERS))
def test_fixture_replays_to_its_expectations(name: str) -> None:
    result = wva("replay", v2_fixtures.FIXTURES / name)
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    for cycle in doc["cycles"]:
        for analysis in cycle["models"].values():
            assert analysis["analyzer"] in ("saturation-token-based", "none")
            if analysis["analyzer"] == "saturation-token-based":
                # DESIGN §3.2's fields for the token-based analyzer
                assert {
                    "total_supply",
                    "total_demand",
                    "utilization",
                    "required_capacity",
                    "spare_capacity",
                    "variants",
                } <= set(analysis["analysis"])


def test_limited_scale_up_says_so_in_reason_and_condition() -> None:
    result = wva("replay", v2_fixtures.FIXTURES / "v2-limited-by-gpus.json")
    decisions = json.loads(result.stdout)["cycles"][0]["decisions"]
    for decision in decisions.values():
        assert "limited: 16188 tokens required not allocated" in decision["reason"]


# ---- isolation ------------------------------------------------------------------------------------------------


def test_a_failure_in_one_models_analysis_holds_only_that_model(monkeypatch: pytest.MonkeyPatch) -> None:
    other_model = "qwen"
    fleet = Fleet(
        specs=[spec("llama-l4", cost=5), spec("qwen-l4", cost=5, model=other_model)],
        config=EngineConfig(configmaps=configset()),
        replicas={"llama-l4": 2, "qwen-l4": 2},
    )
    pods = same_pods("llama-l4", 2, 0.95, 0) + same_pods("qwen-l4", 2, 0.95, 0)
    fleet.cycle(T0, pods)  # first cycle: both decided, statuses written
    real = pipeline.measure_model

    def failing(framed: Any, *args: Any, **kwargs: Any) -> Any:
        if framed.model == MODEL_KEY:
            raise RuntimeError("injected analyzer bug")
        return real(framed, *args, **kwargs)

    monkeypatch.setattr(pipeline, "measure_model", failing)
    before = fleet.desired()
    result = fleet.cycle(T0 + 30, pods)
    broken, healthy = fleet.decision("llama-l4"), fleet.decision("qwen-l4")
    assert result.errors == {MODEL_KEY: "RuntimeError: injected analyzer bug"}
    assert broken.desired_replicas == before["llama-l4"]  # held at its previous allocation
    assert broken.path is DecisionPath.FALLBACK
    assert "internal error deciding this model (RuntimeError: injected analyzer bug)" in broken.reason
    opt = condition(broken, "OptimizationReady")
    assert (opt.status, opt.reason) == (False, "InternalError")
    assert healthy.path is DecisionPath.OPTIMIZER  # the other model is decided as usual
    assert healthy.desired_replicas == 3  # kv 0.95 saturates: +1 on its only variant
    assert broken.key.namespace == NS


@pytest.mark.parametrize(
    "saturation",
    [
        pytest.param("", id="framed-in-its-block"),
        pytest.param("analyzerName: predictive\n", id="framed-before-the-blocks"),
    ],
)
def test_a_failure_framing_one_model_holds_only_that_model(monkeypatch: pytest.MonkeyPatch, saturation: str) -> None:
    """Framing (configuration, analyzer, input) raises for one model, whether its analyzer prepares over the whole
    fleet first (predictive) or its model is framed block by block (V1): that model is held with the error, the
    other is decided."""
    fleet = Fleet(
        specs=[spec("llama-l4", cost=5), spec("qwen-l4", cost=5, model="qwen")],
        config=EngineConfig(configmaps=configset(saturation=saturation)),
        replicas={"llama-l4": 2, "qwen-l4": 2},
    )
    real = pipeline.frame_model

    def failing(model: Any, *args: Any, **kwargs: Any) -> Any:
        if model == MODEL_KEY:
            raise RuntimeError("injected framing bug")
        return real(model, *args, **kwargs)

    monkeypatch.setattr(pipeline, "frame_model", failing)
    result = fleet.cycle(T0, same_pods("llama-l4", 2, 0.95, 0) + same_pods("qwen-l4", 2, 0.95, 0))
    assert result.errors == {MODEL_KEY: "RuntimeError: injected framing bug"}
    broken, healthy = fleet.decision("llama-l4"), fleet.decision("qwen-l4")
    assert broken.path is DecisionPath.FALLBACK
    assert "internal error deciding this model (RuntimeError: injected framing bug)" in broken.reason
    assert "internal error" not in healthy.reason  # decided as usual (by its analyzer or its fallback)


def test_engine_reports_every_model_error_once_per_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline, "measure_model", lambda *a, **k: (_ for _ in ()).throw(ValueError("x" * 10_000)))
    fleet = Fleet(specs=[spec("a"), spec("b", model="other")], replicas={"a": 1, "b": 1})
    result = fleet.cycle(T0, same_pods("a", 1, 0.5, 0) + same_pods("b", 1, 0.5, 0))
    assert len(result.errors) == 2
    assert all(len(e) <= engine.pipeline.MAX_ERROR_CHARS for e in result.errors.values())
    assert all(d.desired_replicas == 1 for d in result.decisions.values())
