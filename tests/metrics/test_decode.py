"""Reading an answer's sample values: the lax typed decoder and its text fallback give what `float` gives.

`decode_answer` reads each `[t, "0.5"]` as a number inside msgspec (lax mode); an answer holding a spelling that
reading refuses (Prometheus' `+Inf`, and `+1`, `.5`, `1_0`, `1e400`, which `float` accepts) is read again with
the values as strings and converted by `float`, so every answer reads as the string-then-`float` path it replaced.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.domain.errors import QueryError
from adapter.metrics.answers import decode_answer, elements


def _answer(*values: object) -> bytes:
    result = [{"metric": {"namespace": "ns", "pod": f"p{i}"}, "value": [1.5, v]} for i, v in enumerate(values)]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


def _same(got: float, want: float) -> bool:
    return (math.isnan(got) and math.isnan(want)) or got == want


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("0.5", id="decimal"),
        pytest.param("1e3", id="exponent"),
        pytest.param("0.30000000000000004", id="seventeen-digits"),
        pytest.param("4.9e-324", id="subnormal"),
        pytest.param("NaN", id="nan"),
        pytest.param("-Inf", id="minus-inf"),
        pytest.param("+Inf", id="plus-inf-text-reading"),
        pytest.param("+1", id="plus-sign-text-reading"),
        pytest.param(".5", id="no-leading-digit-text-reading"),
        pytest.param("1_0", id="underscore-text-reading"),
        pytest.param("1e400", id="overflow-text-reading"),
    ],
)
def test_a_value_reads_as_float_reads_it(text: str) -> None:
    (element,) = decode_answer(_answer(text), "http://prometheus")
    assert _same(element.value.number, float(text))
    assert element.value.at_s == 1.5
    assert element.metric.pod == "p0"


def test_one_refused_spelling_sends_the_whole_answer_to_the_text_reading() -> None:
    got = decode_answer(_answer("0.25", "+Inf", "NaN", "7"), "http://prometheus")
    assert [e.value.number for e in got[:2]] == [0.25, math.inf]
    assert math.isnan(got[2].value.number)
    assert got[3].value.number == 7.0
    assert [e.metric.pod for e in got] == ["p0", "p1", "p2", "p3"]


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        pytest.param(("0.5", "abc"), "malformed vector element in the answer", id="unreadable-value"),
        pytest.param(("0.5", ["1"]), "malformed vector element in the answer", id="value-not-a-string"),
    ],
)
def test_an_unreadable_value_fails_the_whole_answer(values: tuple[object, ...], problem: str) -> None:
    with pytest.raises(QueryError, match=problem):
        decode_answer(_answer(*values), "http://prometheus")


def test_the_simulators_decoded_answers_read_alike() -> None:
    result = json.loads(_answer("0.5", "+Inf"))["data"]["result"]
    assert [e.value.number for e in elements(result)] == [0.5, math.inf]
    with pytest.raises(QueryError, match="malformed vector element"):
        elements(json.loads(_answer("zero"))["data"]["result"])


@given(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["{!r}", "{:.3g}", "{:.17g}", "{:.6e}", "{:.12f}", "{:g}"]),
)
def test_any_decimal_spelling_reads_as_float_reads_it(x: float, form: str) -> None:
    text = form.format(x)
    (element,) = decode_answer(_answer(text), "http://prometheus")
    # "-0" is the one spelling both read as zero with different signs (lax: 0.0, float: -0.0); equal as numbers
    assert element.value.number == float(text)
