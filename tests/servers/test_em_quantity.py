"""Quantity formatting: canonical apimachinery strings, rounded up to the milli."""

from __future__ import annotations

import math

import pytest

from adapter.servers.quantity import format_quantity, milli_units

CASES = [
    (3, "3"),
    (0, "0"),
    (0.0, "0"),
    (-0.0, "0"),
    (1, "1"),
    (10, "10"),
    (100, "100"),
    (1.5, "1500m"),
    (2.5, "2500m"),
    (0.5, "500m"),
    (0.001, "1m"),
    (0.0001, "1m"),  # rounded up to the next milli, never down to 0
    (1e-10, "1m"),
    (0.0015, "2m"),
    (2 / 3, "667m"),
    (1 / 3, "334m"),
    (1.1, "1100m"),  # via the float's shortest decimal form, not 1.10000000000000008…
    (0.30000000000000004, "301m"),  # what apimachinery makes of this exact text
    (3.0, "3"),
    (1000.5, "1000500m"),
    (1500, "1500"),
    (2000, "2k"),  # canonical: the largest exact SI suffix
    (1_000_000, "1M"),
    (2.5e9, "2500M"),
    (10**18, "1E"),
    (10**21, "1e21"),
    (-1.5, "-1500m"),
    (-0.0001, "-1m"),  # away from zero, as Quantity.RoundUp
    (-2, "-2"),
]


@pytest.mark.parametrize(("value", "expected"), CASES, ids=[f"{v!r}" for v, _ in CASES])
def test_format_quantity(value: float, expected: str) -> None:
    assert format_quantity(value) == expected


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_non_finite_values_are_refused(value: float) -> None:
    with pytest.raises(ValueError, match="Quantity"):
        format_quantity(value)


def test_bool_is_not_a_number() -> None:
    with pytest.raises(TypeError):
        format_quantity(True)


@pytest.mark.parametrize(("value", "milli"), [(2, 2000), (1.2345, 1235), (0.0004, 1), (-0.0004, -1)])
def test_milli_units(value: float, milli: int) -> None:
    assert milli_units(value) == milli
