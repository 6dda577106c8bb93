"""tests/profile_parts.py's timing wrapper: every call of a part is charged to it (a part includes the parts it calls),
functions and methods alike, and everything is put back on leaving the block, also when it raises."""

from __future__ import annotations

import itertools

import pytest

from tests.profile_parts import Part, table, timed_parts

HERE = __name__


def _inner(x: int) -> int:
    return x + 1


def _outer(x: int) -> int:
    return _inner(x) * 2  # looked up in this module at call time: the wrapped `_inner` when parts are timed


class _Thing:
    def method(self, x: int) -> int:
        return _inner(x) - 1


PARTS = (
    Part("outer", 0, f"{HERE}:_outer"),
    Part("inner", 1, f"{HERE}:_inner"),
    Part("method", 0, f"{HERE}:_Thing.method"),
)


def _ticks() -> itertools.count[float]:
    """A clock that moves 1 a reading: a wrapped call spans 1 plus 2 a wrapped call inside it."""
    return itertools.count(0.0)


def test_each_call_is_charged_to_its_part_and_a_part_includes_the_parts_it_calls() -> None:
    clock = _ticks()
    with timed_parts(PARTS, clock=lambda: next(clock)) as spent:
        assert _outer(1) == 4
        assert _Thing().method(5) == 5
        assert _inner(0) == 1
    # outer: one call spanning 1 + 2 (the inner call inside it); inner: three calls of 1; method: 1 + 2
    assert spent == {"outer": 3.0, "inner": 3.0, "method": 3.0}


def test_the_functions_are_put_back_after_the_block_and_when_it_raises() -> None:
    originals = (_outer, _inner, _Thing.__dict__["method"])
    with timed_parts(PARTS):
        assert (_outer, _inner) != originals[:2]
    assert (_outer, _inner, _Thing.__dict__["method"]) == originals
    with pytest.raises(RuntimeError, match="inside"), timed_parts(PARTS):
        raise RuntimeError("inside")
    assert (_outer, _inner, _Thing.__dict__["method"]) == originals


def test_an_unknown_target_is_an_error_and_leaves_nothing_wrapped() -> None:
    parts = (PARTS[0], Part("missing", 0, f"{HERE}:_nowhere"))
    with pytest.raises(AttributeError), timed_parts(parts):
        pass
    assert _outer.__name__ == "_outer"


def test_the_table_reads_as_a_tree_with_shares_of_the_decide() -> None:
    text = table(PARTS, {"outer": 0.05, "inner": 0.02, "method": 0.01}, decide_s=0.1)
    rows = text.splitlines()
    assert rows[2] == "| outer | 50.0 | 50% |"
    assert rows[3] == "| &nbsp;&nbsp;inner | 20.0 | 20% |"
    assert rows[-1] == "| **decide** | **100.0** | 100% |"
