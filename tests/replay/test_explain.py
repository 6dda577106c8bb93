"""`wva-adapter explain` (issue 13): the account states the replay's facts; bad input exits 2 without a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.core.builders import CORE_FIXTURES
from tests.core.test_cli import wva

V2 = CORE_FIXTURES / "v2-scale-up-and-down.json"
LIMITED = CORE_FIXTURES / "v2-limited-by-gpus.json"


def test_explain_tells_inputs_analysis_path_rule_and_bounds() -> None:
    result = wva("explain", V2)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    replay = json.loads(wva("replay", V2).stdout)
    last = replay["cycles"][-1]["decisions"]["llm/l4"]
    # the same facts as the replay result: the rule that fired with its numbers, the move, the path
    assert f"l4: {last['current_replicas']} → {last['desired_replicas']}  [{last['path']}]  {last['reason']}" in text
    assert "bounds [1, 10]" in text
    assert "2 pod(s) reporting, KV 0.10–0.10" in text  # inputs that mattered
    assert "Analysis: supply 25,600, demand 3,200" in text
    assert "Allocation: cost-aware → {'l4': 1}" in text
    assert "Replay check: the replay reproduces the recorded decisions." in text


def test_explain_one_va() -> None:
    result = wva("explain", LIMITED, "--va", "llm/x")
    assert result.returncode == 0, result.stderr
    assert "x: 1 → 2" in result.stdout
    assert "y: 1 → 2" not in result.stdout
    assert "limited: 16188 tokens required not allocated" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--va", "nope"], "--va", id="bad-va-syntax"),
        pytest.param(["--va", "llm/absent"], "is not a VariantAutoscaling", id="unknown-va"),
    ],
)
def test_bad_arguments_exit_2(args: list[str], message: str) -> None:
    result = wva("explain", V2, *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_file_exits_2_naming_the_place(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"schema": "wva-replay/v1", "variant_autoscalings": [], "cycles": []}')
    result = wva("explain", path)
    assert result.returncode == 2
    assert "$.variant_autoscalings" in result.stderr
    assert "Traceback" not in result.stderr
