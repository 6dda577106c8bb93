"""Fidelity: a static simulated replica under Poisson load agrees with the queueing model's mean TTFT and ITL
within 20 % up to 70 % utilisation (tests/sim/fidelity.py says how; the table is in docs/simulator.md)."""

from __future__ import annotations

import itertools

import pytest

from tests.sim.fidelity import UTILISATIONS, FidelityRow, fidelity_rows

TOLERANCE = 0.20


@pytest.fixture(scope="module")
def rows() -> list[FidelityRow]:
    return fidelity_rows(UTILISATIONS, duration_s=1200.0)


@pytest.mark.parametrize("index", range(len(UTILISATIONS)), ids=[f"u{u:.0%}" for u in UTILISATIONS])
def test_mean_ttft_and_itl_agree_with_the_queueing_model(rows: list[FidelityRow], index: int) -> None:
    row = rows[index]
    assert row.requests > 500, "enough requests for a mean"
    assert abs(row.ttft_error) <= TOLERANCE, f"TTFT: sim {row.sim_ttft_ms:.1f} ms, model {row.model_ttft_ms:.1f} ms"
    assert abs(row.itl_error) <= TOLERANCE, f"ITL: sim {row.sim_itl_ms:.2f} ms, model {row.model_itl_ms:.2f} ms"


def test_latency_grows_with_utilisation_in_both(rows: list[FidelityRow]) -> None:
    for a, b in itertools.pairwise(rows):
        assert b.sim_ttft_ms > a.sim_ttft_ms
        assert b.model_ttft_ms > a.model_ttft_ms
        assert b.sim_itl_ms > a.sim_itl_ms
        assert b.model_itl_ms > a.model_itl_ms
