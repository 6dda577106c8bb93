"""`wva-adapter recommend` (issue 12): the table from replay fixtures; clear errors for bad input."""

from __future__ import annotations

import json

from tests.core.builders import CORE_FIXTURES
from tests.core.test_cli import wva

V2 = CORE_FIXTURES / "v2-scale-up-and-down.json"


def test_table_from_a_fixture_matches_the_replay() -> None:
    result = wva("recommend", "--fixture", V2)
    assert result.returncode == 0, result.stderr
    header, row = result.stdout.strip().splitlines()
    assert header.split() == ["VARIANT", "MODEL", "LOWER", "TARGET", "UPPER", "DESIRED"]
    last = json.loads(wva("replay", V2).stdout)["cycles"][-1]["decisions"]["llm/l4"]
    rec = last["recommendation"]
    assert row.split() == ["llm/l4", "m", str(rec["lower_bound"]), str(rec["target"]), str(rec["upper_bound"]),
                           str(last["desired_replicas"])]  # fmt: skip
    assert rec["lower_bound"] <= rec["target"] <= rec["upper_bound"]


def test_bad_fixture_exits_2(tmp_path: object) -> None:
    result = wva("recommend", "--fixture", "/nonexistent.json")
    assert result.returncode == 2
    assert "cannot read" in result.stderr


def test_unreachable_cluster_exits_2_without_traceback(tmp_path: object) -> None:
    from pathlib import Path

    kubeconfig = Path(str(tmp_path)) / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    result = wva("recommend", "--kubeconfig", kubeconfig)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
