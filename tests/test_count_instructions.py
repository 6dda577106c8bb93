"""tests/count_instructions.py's reading of callgrind's output and its digest of a cycle (the valgrind run itself
takes minutes and is a measurement, never a test)."""

from __future__ import annotations

import pytest

from adapter import engine
from tests.bench_collect import NOW_S
from tests.bench_default import configs, fleet_snapshot
from tests.count_instructions import _data_misses, _totals, digest_of

HEADER = "version: 1\ncreator: callgrind-3.19.0\npid: 21231\ncmd: python\npart: 1\n\npositions: line\nevents: Ir\n"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param(HEADER + "summary: 3829802072\n\nfl=(1)\n", 3_829_802_072, id="summary"),
        pytest.param(HEADER + "fl=(1)\n0 5\ntotals: 1234\n", 1234, id="totals-at-the-end"),
        pytest.param(
            HEADER + "summary: 0\n\nfl=(1)\n0 5\ntotals: 1043133098\n", 1_043_133_098, id="counting-off-at-start"
        ),
    ],
)
def test_total_reads_the_summary(text: str, want: int) -> None:
    assert _totals(text) == {"Ir": want}


def test_total_without_a_summary_says_so() -> None:
    with pytest.raises(ValueError, match="no totals or summary line"):
        _totals(HEADER)


SIMULATED = HEADER.replace("events: Ir\n", "events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\n")


@pytest.mark.parametrize(
    ("totals", "want"),
    [
        pytest.param(
            "totals: 14171659529 4175333995 2429556708 157401497 57605037 21890564 16849 235878 470701",
            (57_605_037 + 21_890_564, 235_878 + 470_701),
            id="every-event",
        ),
        # the format lets a line end early, the rest zero: no write missed the last level
        pytest.param("totals: 900 300 200 10 40 7 1 5", (47, 5), id="trailing-zero-dropped"),
    ],
)
def test_data_misses_add_reads_and_writes_at_each_level(totals: str, want: tuple[int, int]) -> None:
    assert _data_misses(_totals(SIMULATED + "summary: 0\n\nfl=(1)\n" + totals + "\n")) == want


def test_data_misses_without_the_simulation_says_so() -> None:
    with pytest.raises(ValueError, match="without the cache simulation's events"):
        _data_misses(_totals(HEADER + "totals: 1234\n"))


def test_the_digest_tells_two_cycles_apart_and_repeats_for_the_same() -> None:
    snapshot, config = fleet_snapshot(4), configs()["v1"]
    first, state = engine.decide(snapshot, engine.EngineState(), config, NOW_S)
    again, state_again = engine.decide(snapshot, engine.EngineState(), config, NOW_S)
    later, later_state = engine.decide(snapshot, state, config, NOW_S + 600.0)
    assert digest_of(first, state) == digest_of(again, state_again)
    assert digest_of(first, state) != digest_of(later, later_state)
