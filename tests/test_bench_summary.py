"""`make bench`'s summary: each row from the figures of its benchmark, with the ratio to its goal (<= 1 meets it)."""

from __future__ import annotations

import pytest

from tests import bench

SCALE = {
    "rounds": 9,
    "sizes": {
        "1000": {"median_cpu_ms": 80.0, "cpu_us_per_va": 80.0, "ratio_vs_1000": 1.0},
        "10000": {"median_cpu_ms": 850.0, "cpu_us_per_va": 85.0, "ratio_vs_1000": 10.6},
        "20000": {"median_cpu_ms": 1700.0, "cpu_us_per_va": 85.0, "ratio_vs_1000": 21.2},
    },
    "pairs": {"1000->10000": 10.71, "10000->20000": 2.03},
}


def _row(rows: list[bench.Row], what: str) -> bench.Row:
    return next(r for r in rows if r[0].strip().startswith(what))


@pytest.mark.parametrize(
    ("pair", "ratio_to_goal"), [pytest.param(10.71, 1.02, id="over"), pytest.param(10.0, 0.952, id="met")]
)
def test_paired_decide_row_is_the_median_pair_over_the_goal(pair: float, ratio_to_goal: float) -> None:
    figures = {"decide-scale": {**SCALE, "pairs": {**SCALE["pairs"], "1000->10000": pair}}}
    _what, measured, goal, ratio = _row(bench.summary(figures), "decide, 1k -> 10k VAs, paired")
    assert goal == "<= 10.5x (linear)"
    assert ratio == pytest.approx(ratio_to_goal, abs=1e-3)
    assert measured.startswith(f"{pair:.2f}x CPU")
    assert "1k 80.0, 10k 85.0, 20k 85.0" in measured


def test_linear_beyond_is_evidence_without_a_goal() -> None:
    _what, measured, goal, ratio = _row(bench.summary({"decide-scale": SCALE}), "decide, 10k -> 20k")
    assert (measured, goal, ratio) == ("2.03x CPU", "-", None)


def test_no_figures_no_rows() -> None:
    assert bench.summary({}) == []
