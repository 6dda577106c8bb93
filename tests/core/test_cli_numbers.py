"""The CLI's number types (`adapter.cli.number`): ASCII digits with ASCII spaces around them, finite, in range;
everything else is argparse's usage error (exit 2), never an exception from `int` or `float`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import pytest

from adapter.cli import FINITE, PORT, SEED, number

SPEED = number(minimum=0, above=True, maximum=1e6)


@pytest.mark.parametrize(
    ("parse", "text", "expected"),
    [
        pytest.param(PORT, "8080", 8080, id="port"),
        pytest.param(PORT, " 80\n", 80, id="port-ascii-spaces-around"),
        pytest.param(PORT, "1\x0b", 1, id="port-vertical-tab-after"),
        pytest.param(SEED, "4294967295", 2**32 - 1, id="seed-max"),
        pytest.param(FINITE, "-1.5e3", -1500.0, id="finite-exponent"),
        pytest.param(SPEED, ".5", 0.5, id="speed-leading-point"),
    ],
)
def test_accepted(parse: Callable[[str], Any], text: str, expected: float) -> None:
    value = parse(text)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        pytest.param(FINITE, "0\x1f", id="unit-separator-after"),  # str.strip() takes it, float() does not
        pytest.param(PORT, "\x1c5", id="file-separator-before"),
        pytest.param(FINITE, "\u20031", id="unicode-em-space-before"),
        pytest.param(PORT, "١٢", id="arabic-indic-digits"),
        pytest.param(FINITE, "nan", id="nan"),
        pytest.param(FINITE, "1e999", id="overflow-to-infinity"),
        pytest.param(PORT, "65536", id="port-above-range"),
        pytest.param(SPEED, "0", id="speed-not-above-zero"),
        pytest.param(FINITE, "1_000", id="underscores"),
        pytest.param(PORT, "", id="empty"),
    ],
)
def test_refused_as_usage_errors(parse: Callable[[str], Any], text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="must be"):
        parse(text)
