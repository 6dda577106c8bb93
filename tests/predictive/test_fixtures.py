"""The predictive analyzer's replay fixtures (tests/predictive/fixtures): each replays with every expectation met,
`explain` shows the forecast, the lead and the headroom, and make_fixtures.py still writes the same bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapter.replay import explain as explain_module
from tests.core.test_cli import wva
from tests.predictive import make_fixtures

FIXTURES = sorted(make_fixtures.HERE.glob("*.json"))


def test_every_fixture_is_written_by_the_script() -> None:
    assert {p.name for p in FIXTURES} == set(make_fixtures.FIXTURES)
    for path in FIXTURES:
        assert path.read_text(encoding="utf-8") == make_fixtures.render(make_fixtures.FIXTURES[path.name]), path.name


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_fixture_replays(path: Path) -> None:
    done = wva("replay", str(path))
    assert done.returncode == 0, done.stderr


def test_explain_tells_the_forecast_the_lead_and_the_headroom() -> None:
    done = wva("explain", str(make_fixtures.HERE / "burst-a-lead-ahead.json"))
    assert done.returncode == 0, done.stderr
    last = done.stdout.split("Cycle 61")[1]
    assert "Demand: 30 req/s = max(arrivals 4, forecast peak 30 over the lead 300 s)" in last
    assert "period 900 s" in last
    assert "Headroom: 1 (attainment measured –" in last
    assert "llama-8b-a100: 1 → 3" in last


def test_explain_tells_when_the_season_foresaw_a_rise() -> None:
    done = wva("explain", str(make_fixtures.HERE / "burst-onset-foreseen.json"))
    assert done.returncode == 0, done.stderr
    onset = done.stdout.split("Cycle 71")[1]  # explain counts from 1: the fixture's cycle 70, the burst's first
    assert "Demand: 30 req/s = max(arrivals 30, forecast peak 30 over the lead 300 s)" in onset
    assert "the season foresaw the present rise" in onset
    assert "llama-8b-a100: 1 → 3" in onset


@pytest.mark.parametrize(
    ("bracket", "expected"),
    [
        pytest.param(
            [0.871, 1.0], "Headroom: 1.6 (attainment measured 97.50 %, between 87.10 and 100.00 % by", id="bracket"
        ),
        pytest.param(None, "Headroom: 1.6 (attainment measured 97.50 % over 900 requests", id="exact"),
    ],
)
def test_explain_tells_the_bucket_bracket_of_the_attainment(bracket: list[float] | None, expected: str) -> None:
    headroom = {"value": 1.6, "measured_attainment": 0.975, "completions_in_window": 900.0, "target": 0.99}
    lines = explain_module._predictive_lines({"headroom": {**headroom, "bucket_bracket": bracket}})
    assert any(expected in line for line in lines), lines


@pytest.mark.parametrize(
    ("analysis", "expected"),
    [
        pytest.param(
            {"demand": {"forecast": {"seen_rise_rps": 33.0, "points": 60}}},
            "(a rise seen before: the trend extrapolated to at most 33 req/s, where it went)",
            id="seen-rise",
        ),
        pytest.param({"held_rps": 30.0}, "Scale-down keeps room for 30 req/s: from about the present rate", id="held"),
        pytest.param(
            {"pending_removal_rps": 5.0},
            "Scale-down asked last cycle, not applied yet: 5 req/s of replicas, still asked while",
            id="pending-removal",
        ),
    ],
)
def test_explain_tells_the_recurring_rise_and_a_pending_scale_down(analysis: dict[str, object], expected: str) -> None:
    lines = explain_module._predictive_lines(analysis)
    assert any(expected in line for line in lines), lines
    unrelated = explain_module._predictive_lines({})
    assert not any(
        "rise seen before" in line or "keeps room" in line or "not applied yet" in line for line in unrelated
    )
