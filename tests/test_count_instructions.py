"""tests/count_instructions.py's reading of callgrind's output and its digest of a cycle (the valgrind run itself
takes minutes and is a measurement, never a test)."""

from __future__ import annotations

import pytest

from adapter import engine
from tests.bench_collect import NOW_S
from tests.bench_default import configs, fleet_snapshot
from tests.count_instructions import _total, digest_of

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
    assert _total(text) == want


def test_total_without_a_summary_says_so() -> None:
    with pytest.raises(ValueError, match="no totals or summary line"):
        _total(HEADER)


def test_the_digest_tells_two_cycles_apart_and_repeats_for_the_same() -> None:
    snapshot, config = fleet_snapshot(4), configs()["v1"]
    first, state = engine.decide(snapshot, engine.EngineState(), config, NOW_S)
    again, state_again = engine.decide(snapshot, engine.EngineState(), config, NOW_S)
    later, later_state = engine.decide(snapshot, state, config, NOW_S + 600.0)
    assert digest_of(first, state) == digest_of(again, state_again)
    assert digest_of(first, state) != digest_of(later, later_state)
