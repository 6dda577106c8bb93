"""`make bench-sim` from a fresh clone with nothing beside it (issue 17): the tracked files alone (no ../shared)
run a smoke benchmark — frontier search, seeds, the default policy's goal table — and write the page."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import bench_sim

REPO = Path(__file__).resolve().parents[2]


def test_default_policy_is_what_the_shipped_configmaps_select() -> None:
    """The shipped saturation ConfigMap says `analyzerName: predictive`: the engine selects the predictive
    analyzer, i.e. wva-predictive (pinned: a change of default shows here)."""
    assert bench_sim.default_policy() == "wva-predictive"
    scenario = bench_sim.load("steps")
    names = {(ns, name) for ns, name, _ in scenario.configmaps.sources}
    assert names == {(e["namespace"], e["name"]) for e in bench_sim.shipped_configmaps()}


@pytest.mark.parametrize(
    ("values", "mean", "half"),
    [
        pytest.param([0.90, 0.92, 0.94, 0.91, 0.93], 0.92, 2.776 * 0.015811 / 5**0.5, id="five-seeds"),
        pytest.param([1.0, 1.0], 1.0, 0.0, id="no-spread"),
    ],
)
def test_interval_is_student_t(values: list[float], mean: float, half: float) -> None:
    interval = bench_sim.Interval.of(values)
    assert interval.mean == pytest.approx(mean)
    assert interval.half == pytest.approx(half, rel=1e-3, abs=1e-12)


def test_separation_needs_disjoint_intervals() -> None:
    a, b = bench_sim.Interval(0.95, 0.01, 5), bench_sim.Interval(0.93, 0.005, 5)
    assert a.separated_above(b)
    assert not bench_sim.Interval(0.94, 0.01, 5).separated_above(b)


def test_bench_sim_runs_from_a_clean_copy_without_shared(tmp_path: Path) -> None:
    tracked = (
        subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True).stdout.decode().split("\0")
    )
    clone = tmp_path / "clone"
    for name in filter(None, tracked):
        if (REPO / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, clone / name)
    assert not (tmp_path / "shared").exists()
    out = tmp_path / "page"
    env = {**os.environ, "PYTHONPATH": str(clone), "MPLBACKEND": "Agg"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.bench_sim", "--workloads", "steps,azure-conv", "--seeds", "2", "--jobs", "1",
         "--policies", "static,oracle,wva-v1", "--max-duration-s", "420", "--no-speed", "--no-fidelity",
         "--out", str(out)],
        cwd=clone, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    page = (out / "decision-quality.md").read_text(encoding="utf-8")
    assert "Smoke run" in page
    assert "| azure-conv |" in page
    assert "| steps |" in page
    assert "## The default configuration against the goals" in page
    assert "## Where the misses are" in page
    assert "±" in page
