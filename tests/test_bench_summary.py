"""`make bench`'s summary: each row from the figures of its benchmark, with the ratio to its goal (<= 1 meets it)."""

from __future__ import annotations

import pytest

from tests import bench
from tests.count_instructions import counted_figures

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


def test_paired_decide_row_shows_each_processs_own_ratio() -> None:
    figures = {"decide-scale": {**SCALE, "pairs_by_process": {"1000->10000": [10.2, 10.71, 10.4]}}}
    _what, measured, _goal, _ratio = _row(bench.summary(figures), "decide, 1k -> 10k VAs, paired")
    assert measured.endswith("; each process 10.20/10.71/10.40x)")


def test_linear_beyond_is_evidence_without_a_goal() -> None:
    _what, measured, goal, ratio = _row(bench.summary({"decide-scale": SCALE}), "decide, 10k -> 20k")
    assert (measured, goal, ratio) == ("2.03x CPU", "-", None)


@pytest.mark.parametrize(
    ("counts", "measured", "ratio_to_goal"),
    [
        pytest.param(
            {1000: 470_326_445, 10000: 4_703_807_108},
            "10.0012x (470,326 / 470,381 instructions a VA, v1)",
            0.9525,
            id="linear",
        ),
        pytest.param(
            {1000: 100_000_000, 10000: 1_100_000_000},
            "11.0000x (100,000 / 110,000 instructions a VA, v1)",
            1.0476,
            id="superlinear",
        ),
    ],
)
def test_counted_decide_row_is_the_ratio_of_the_counts(
    counts: dict[int, int], measured: str, ratio_to_goal: float
) -> None:
    figures = {"decide-count": counted_figures("v1", 1, counts)}
    _what, got, goal, ratio = _row(bench.summary(figures), "decide, 1k -> 10k VAs, instructions counted")
    assert (got, goal) == (measured, "<= 10.5x (linear)")
    assert ratio == pytest.approx(ratio_to_goal, abs=1e-4)


def test_counted_figures_per_va_a_cycle_and_each_pair() -> None:
    figures = counted_figures("profiles", 2, {3000: 600, 300: 60, 30000: 6_600})
    assert list(figures["sizes"]) == ["300", "3000", "30000"]
    assert figures["sizes"]["300"] == {"instructions": 60, "per_va": 0.1}
    assert figures["pairs"] == {"300->3000": 10.0, "3000->30000": 11.0}
    assert "last_miss_pairs" not in figures


def test_counted_figures_with_simulated_misses_a_va_and_the_last_levels_pairs() -> None:
    misses = {10000: (26_500_000, 708_000), 1000: (2_650_000, 28_200)}
    figures = counted_figures("v1", 3, {1000: 1_416_000_000, 10000: 14_160_000_000}, misses)
    assert figures["sizes"]["1000"]["first_misses_per_va"] == pytest.approx(883.33, abs=0.01)
    assert figures["sizes"]["1000"]["last_misses_per_va"] == pytest.approx(9.4)
    assert figures["sizes"]["10000"]["last_misses_per_va"] == pytest.approx(23.6)
    assert figures["last_miss_pairs"] == {"1000->10000": pytest.approx(708_000 / 28_200)}


def test_the_queueing_analyzers_decide_is_evidence_without_a_goal() -> None:
    """The `qm` mode of the pipeline benchmark (the queueing analyzer learning, one variant a model) is printed with
    its time a VA, so that a slower learning path shows in the table (scale.md, item 10)."""
    qm = {"mode": "qm", "vas": 100, "decide_ms_median": 40.0, "fleet_cost": 1.0, "time_vs_v1": None}
    rows = bench.summary({"pipeline": {"decide_cycle": [qm]}})
    what, measured, goal, ratio = _row(rows, "decide, the queueing analyzer")
    assert what == "decide, the queueing analyzer (wva-slo, learning), 100 one-variant models"
    assert (measured, goal, ratio) == ("40 ms, 400 us a VA (median cycle)", "-", None)


def test_no_figures_no_rows() -> None:
    assert bench.summary({}) == []


DEFAULT = {
    "cycles": 3,
    "rows": [
        {"config": "v1", "vas": 1000, "first_cycle_cpu_s": 0.08, "median_cpu_ms": 75.0, "cpu_us_per_va": 75.0},
        {"config": "profiles", "vas": 1000, "first_cycle_cpu_s": 0.5, "median_cpu_ms": 300.0, "cpu_us_per_va": 300.0},
        {
            "config": "learning",
            "vas": 1000,
            "history": "first cycles",
            "first_cycle_cpu_s": 40.0,
            "median_cpu_ms": 1100.0,
            "cpu_us_per_va": 1100.0,
        },
        {
            "config": "learning",
            "vas": 1000,
            "history": "full",
            "first_cycle_cpu_s": 40.0,
            "median_cpu_ms": 1200.0,
            "cpu_us_per_va": 1200.0,
            "loop_stall_ms": 12.0,
            "decide_wall_ms": 1250.0,
        },
        {"config": "profiles", "vas": 10000, "first_cycle_cpu_s": 5.0, "median_cpu_ms": 3000.0, "cpu_us_per_va": 300.0},
    ],
}
"""Rows as `tests.bench_default` writes them: with a `history` (first cycles, or full forecast histories), and
without one as before it measured full histories (read as the first cycles')."""


@pytest.mark.parametrize(
    ("collect_s", "budget_us"),
    [pytest.param(2.0, 100, id="this-runs-collect"), pytest.param(None, 90, id="no-cycle-run")],
)
def test_the_shipped_default_is_held_to_what_the_10k_cycle_leaves_for_decide(
    collect_s: float | None, budget_us: float
) -> None:
    """3 s minus the 10,000-VA collect of this run (2.1 s without one), per VA: 100 us, or 90 us."""
    figures: dict[str, object] = {"default": DEFAULT}
    if collect_s is not None:
        figures["cycle"] = {
            "rows": [
                {
                    "vas": 10000,
                    "metrics": "all",
                    "median_s": {"collect": collect_s, "decide": 0.8, "total": 2.8},
                    "median_cpu_s": {"total": 2.8, "decide": 0.8},
                    "peak_rss_mb": 450,
                    "rss_growth_mb": 0,
                    "runs": 5,
                    "cycles": 50,
                }
            ]
        }
    rows = bench.summary(figures)  # type: ignore[arg-type]
    _what, measured, goal, ratio = _row(
        rows, "decide, the shipped default, learning alpha, beta, gamma (as shipped), 1,000"
    )
    assert goal == f"10,000 VAs in the 3-s cycle: <= {budget_us} us a VA"
    assert ratio == pytest.approx(1200 / budget_us)  # judged with full histories, the steady state
    assert measured.startswith("1200 ms CPU, 1200 us a VA (full histories); first cycles 1100")
    assert "V1 75" in measured
    assert "first cycle 40.0 s" in measured
    _what, measured, goal, ratio = _row(rows, "decide, the shipped default, acceleratorProfiles, 10,000")
    assert ratio == pytest.approx(300 / budget_us)
    assert measured.startswith("3000 ms CPU, 300 us a VA (first cycles)")
    _what, measured, goal, ratio = _row(rows, "event loop while a 1,000-VA cycle decides")
    assert (goal, ratio) == ("-", None)
    assert measured.startswith("longest stall 12 ms during a 1250-ms decide")
    assert not any("re-fits" in what for what, *_ in rows)  # not measured: no row


@pytest.mark.parametrize(
    ("collect_s", "per_va_ratio"),
    [pytest.param(2.0, 1200 / 100, id="collect-leaves-1s"), pytest.param(5.0, None, id="collect-alone-over-3s")],
)
def test_the_shipped_default_is_also_held_to_the_whole_3s_cycle(collect_s: float, per_va_ratio: float | None) -> None:
    """collect + decide at 10,000 VAs against 3 s: profiles measured there (3.0 s), learning as 10,000 × its 1,000-VA
    figure (1,200 us a VA: 12 s). Where the collect alone exceeds 3 s, the per-VA rows have no budget left (no
    ratio) and these rows still say how far the cycle is from its goal."""
    cycle = {
        "rows": [
            {
                "vas": 10000,
                "metrics": "all",
                "median_s": {"collect": collect_s, "decide": 0.8, "total": collect_s + 0.8},
                "median_cpu_s": {"total": collect_s + 0.8, "decide": 0.8},
                "peak_rss_mb": 450,
                "rss_growth_mb": 0,
                "runs": 5,
                "cycles": 50,
            }
        ]
    }
    rows = bench.summary({"default": DEFAULT, "cycle": cycle})  # type: ignore[dict-item]
    _what, measured, goal, ratio = _row(rows, "cycle with the shipped default (acceleratorProfiles), 10,000 VAs")
    assert goal == "< 3 s"
    assert ratio == pytest.approx((collect_s + 3.0) / 3.0)
    assert "measured at 10,000" in measured
    _what, measured, goal, ratio = _row(rows, "cycle with the shipped default (learning), 10,000 VAs")
    assert ratio == pytest.approx((collect_s + 12.0) / 3.0)
    assert "10,000 x its 1,000-VA figure" in measured
    _what, _measured, _goal, ratio = _row(
        rows, "decide, the shipped default, learning alpha, beta, gamma (as shipped), 1,000"
    )
    assert ratio == (None if per_va_ratio is None else pytest.approx(per_va_ratio))


def test_the_shipped_default_is_held_to_the_collect_of_what_it_reads_when_measured() -> None:
    """With the 10,000-VA cycle of the shipped ConfigMaps (`cycle-shipped`: the collector asks for what their
    analyzer reads, as `serve` does), its collect (1.5 s) is what the decide is left with: 150 us a VA, and the
    whole-cycle rows add it; the measured cycle is a row of its own."""
    every = {
        "vas": 10000,
        "metrics": "all",
        "median_s": {"collect": 2.0, "decide": 0.8, "total": 2.8},
        "median_cpu_s": {"total": 2.8, "decide": 0.8},
        "peak_rss_mb": 450,
        "rss_growth_mb": 0,
        "runs": 5,
        "cycles": 50,
    }
    shipped = {
        **every,
        "metrics": "config",
        "config": "shipped",
        "median_s": {"collect": 1.5, "decide": 2.5, "total": 4.2},
        "median_cpu_s": {"total": 4.1, "decide": 2.5, "collect": 1.6},
        "peak_rss_mb": 400,
    }
    rows = bench.summary({"default": DEFAULT, "cycle": {"rows": [every]}, "cycle-shipped": {"rows": [shipped]}})
    _what, measured, goal, ratio = _row(rows, "collect, the shipped ConfigMaps' queries")
    assert (goal, ratio) == ("-", None)
    assert measured == "1.50 s (CPU 1.60 s), peak RSS 400 MB; every query 2.00 s, 450 MB"
    _what, measured, goal, ratio = _row(rows, "cycle with the shipped default (learning), 10,000 VAs, measured")
    assert (goal, ratio) == ("< 3 s", pytest.approx(4.2 / 3.0))
    _what, measured, goal, ratio = _row(rows, "cycle with the shipped default (acceleratorProfiles), 10,000 VAs: this")
    assert ratio == pytest.approx((1.5 + 3.0) / 3.0)
    assert "collect (its queries)" in _what
    _what, _measured, goal, _ratio = _row(rows, "decide, the shipped default, acceleratorProfiles, 10,000")
    assert goal == "10,000 VAs in the 3-s cycle: <= 150 us a VA"


@pytest.mark.parametrize(
    ("total_s", "peak_rss_mb", "ratio"),
    [
        pytest.param(2.4, 450.0, 0.9, id="both-within-time-the-larger"),
        pytest.param(2.4, 600.0, 1.2, id="memory-over"),
        pytest.param(3.3, 450.0, 1.1, id="time-over"),
    ],
)
def test_the_shipped_default_with_full_histories_is_held_to_both_time_and_memory(
    total_s: float, peak_rss_mb: float, ratio: float
) -> None:
    """`cycle-shipped-full`: the steady state of the shipped default, one row against < 3 s and < 500 MB, its ratio
    the worse of the two."""
    steady = {
        "vas": 10000,
        "metrics": "config",
        "config": "shipped",
        "histories": "full",
        "median_s": {"collect": 1.0, "decide": total_s - 1.0, "total": total_s},
        "median_cpu_s": {"total": total_s, "decide": total_s - 1.0, "collect": 1.0},
        "peak_rss_mb": peak_rss_mb,
        "rss_growth_mb": 3.0,
        "runs": 3,
        "cycles": 8,
    }
    rows = bench.summary({"default": DEFAULT, "cycle-shipped-full": {"rows": [steady]}})
    _what, measured, goal, got = _row(rows, "cycle with the shipped default (learning), 10,000 VAs, full forecast")
    assert goal == "< 3 s, < 500 MB"
    assert got == pytest.approx(ratio)
    assert measured.endswith(f"peak RSS {peak_rss_mb:.0f} MB, growth +3 MB over 8 cycles")


def test_the_learning_default_is_also_held_to_its_mean_with_the_re_fits() -> None:
    """The mean of the cycles after the first, re-fits included, per VA, against the same budget (90 us without a
    cycle run): 2.4 s over 1,000 VAs = 2,400 us a VA, 26.7x."""
    refits = {"vas": 1000, "cycles": 8, "mean_cpu_s": 2.4, "max_cpu_s": 6.5}
    rows = bench.summary({"default": {**DEFAULT, "refits": refits}})
    _what, measured, goal, ratio = _row(rows, "decide, the shipped default, learning, 1,000 VAs, mean of 8 cycles")
    assert goal == "10,000 VAs in the 3-s cycle: <= 90 us a VA"
    assert ratio == pytest.approx(2400 / 90)
    assert measured.startswith("2400 ms CPU, 2400 us a VA; longest cycle 6.50 s")


@pytest.mark.parametrize(
    ("p99_ms", "ratio_to_goal"), [pytest.param(204.0, 0.68, id="met"), pytest.param(2465.0, 8.217, id="waits")]
)
def test_wakes_while_cycles_decide_are_held_to_the_wake_goal(p99_ms: float, ratio_to_goal: float) -> None:
    busy = {"wakes": 50, "median_ms": 97.0, "p99_ms": p99_ms, "decide_s": 1.5, "cycles_during": 4}
    _what, measured, goal, ratio = _row(bench.summary({"wake-busy": busy}), "the same while cycles decide")
    assert goal == "< 300 ms (median and p99)"
    assert ratio == pytest.approx(ratio_to_goal, abs=1e-3)
    assert measured == f"median 97 ms, p99 {p99_ms:.0f} ms over 50 wakes, each decide 1.5 s (4 cycles)"


def _em(p99_ms_rounds: list[float]) -> dict[str, object]:
    from tests.servers.em_bench import paced_figures

    rounds = [{"rps": 490.0 + i, "p50_ms": 0.4 + i / 100, "p99_ms": p99} for i, p99 in enumerate(p99_ms_rounds)]
    bare = [{"rps": 490.0, "p50_ms": 0.3, "p99_ms": 0.5}]
    return {
        "rps_ratio": 1.0,
        "cpu_ratio": 1.0,
        "adapter_cpu_us_per_request": 70.0,
        "bare_cpu_us_per_request": 70.0,
        "paced_500rps": paced_figures(rounds),
        "bare_paced_500rps": paced_figures(bare),
    }


@pytest.mark.parametrize(
    ("rounds", "p99_ms", "ratio_to_goal"),
    [
        pytest.param([0.6, 3.3, 0.7], 0.7, 0.35, id="one-round-paused"),
        pytest.param([2.5, 3.3, 0.7], 2.5, 1.25, id="two-rounds-over"),
        pytest.param([0.9], 0.9, 0.45, id="one-round"),
    ],
)
def test_paced_p99_row_is_the_median_round(rounds: list[float], p99_ms: float, ratio_to_goal: float) -> None:
    """A pause of the machine in one 5-s round moves that round's p99 several-fold: the row reads the median round
    and prints every round's p99 beside it."""
    _what, measured, goal, ratio = _row(bench.summary({"em-auth": _em(rounds)}), "p99 at 500 rps, with front-proxy")
    assert goal == "< 2 ms"
    assert ratio == pytest.approx(ratio_to_goal)
    assert measured.startswith(f"{p99_ms:.2f} ms (p50 ")
    assert "median of rounds " + "/".join(f"{p:.2f}" for p in rounds) + ";" in measured
    assert measured.endswith("bare aiohttp 0.50 ms)")
