"""`tests.bench_decide_scale.pooled`: the paired figures of several processes' rounds taken together."""

from __future__ import annotations

import pytest

from tests.bench_decide_scale import pooled


@pytest.mark.parametrize(
    ("processes", "pair", "each"),
    [
        pytest.param([{"1": [1.0, 1.0], "10": [10.0, 11.0]}], 10.5, [10.5], id="one-process"),
        pytest.param(
            [{"1": [1.0, 1.0], "10": [10.0, 11.0]}, {"1": [2.0, 2.0], "10": [20.0, 22.0]}],
            10.5,
            [10.5, 10.5],
            id="the-docstring-example",
        ),
        pytest.param(
            [{"1": [1.0, 1.0, 1.0], "10": [10.0, 10.0, 10.0]}, {"1": [1.0, 1.0, 1.0], "10": [12.0, 12.0, 12.0]}],
            11.0,
            [10.0, 12.0],
            id="a-slower-process-moves-the-median-halfway",
        ),
        pytest.param(
            [
                {"1": [1.0], "10": [10.0]},
                {"1": [1.0], "10": [10.2]},
                {"1": [1.0], "10": [13.0]},
            ],
            10.2,
            [10.0, 10.2, 13.0],
            id="an-outlying-process-does-not-move-the-median",
        ),
    ],
)
def test_the_pooled_ratio_is_the_median_over_every_round_of_every_process(
    processes: list[dict[str, list[float]]], pair: float, each: list[float]
) -> None:
    figures = pooled((1, 10), processes)
    assert figures["pairs"]["1->10"] == pytest.approx(pair)
    assert figures["pairs_by_process"]["1->10"] == pytest.approx(each)
    assert figures["processes"] == len(processes)
    assert figures["rounds"] == sum(len(p["1"]) for p in processes)
    assert figures["sizes"]["10"]["ratio_vs_1"] == pytest.approx(pair)


def test_per_size_figures_pool_every_round() -> None:
    figures = pooled((2, 20), [{"2": [0.002, 0.004], "20": [0.02, 0.04]}, {"2": [0.006], "20": [0.06]}])
    assert figures["sizes"]["2"]["median_cpu_ms"] == pytest.approx(4.0)
    assert figures["sizes"]["2"]["cpu_us_per_va"] == pytest.approx(2000.0)
    assert figures["sizes"]["20"]["cpu_us_per_va"] == pytest.approx(2000.0)
