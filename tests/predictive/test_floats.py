"""`Floats` (adapter/analyzers/predictive/floats.py) behaves as the tuple of its floats, packed."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.analyzers.predictive.floats import Floats

finite = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(finite, max_size=40), st.lists(finite, max_size=5), st.integers(-45, 45), st.integers(-45, 45))
def test_a_run_reads_as_the_tuple_of_its_floats(values: list[float], more: list[float], start: int, stop: int) -> None:
    run, plain = Floats.of(values), tuple(v + 0.0 for v in values)
    assert len(run) == len(plain)
    assert bool(run) == bool(plain)
    assert tuple(run) == plain
    assert run.tolist() == list(plain)
    assert [run[i] for i in range(-len(plain), len(plain))] == [plain[i] for i in range(-len(plain), len(plain))]
    assert tuple(run[start:stop]) == plain[start:stop]
    assert tuple(run[start:stop:2]) == plain[start:stop:2]
    assert tuple(run[::-1]) == plain[::-1]
    assert run + Floats.of(more) == Floats.of(values + more)
    assert np.array_equal(run.array, np.array(plain, dtype=np.float64))
    if plain:
        assert run.max() == max(plain)
    assert pickle.loads(pickle.dumps(run)) == run


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        pytest.param([1.0, 2.0], [1.0, 2.0], True, id="same-values"),
        pytest.param([1.0, 2.0], [2.0, 1.0], False, id="other-order"),
        pytest.param([1.0], [1.0, 1.0], False, id="other-length"),
        pytest.param([-0.0], [0.0], True, id="of-stores-zero-for-minus-zero"),
        pytest.param([], [], True, id="empty"),
    ],
)
def test_equal_and_hashed_by_value(a: list[float], b: list[float], equal: bool) -> None:
    assert (Floats.of(a) == Floats.of(b)) is equal
    if equal:
        assert hash(Floats.of(a)) == hash(Floats.of(b))


def test_a_run_is_never_equal_to_a_tuple_or_list() -> None:
    """Equal only to another run: a tuple compared with a run is a caller's mistake to surface, not to hide."""
    assert Floats.of([1.0]) != (1.0,)
    assert Floats.of([1.0]) != [1.0]


def test_a_run_cannot_change() -> None:
    run = Floats.of([1.0, 2.0])
    with pytest.raises(AttributeError, match="immutable"):
        run._data = b""  # type: ignore[misc]
    with pytest.raises(ValueError, match="read-only"):
        run.array[0] = 5.0
    assert run.tolist() == [1.0, 2.0]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        pytest.param(b"\x00" * 7, "not a whole number", id="seven-bytes"),
        pytest.param(b"\x00" * 9, "not a whole number", id="nine-bytes"),
    ],
)
def test_bytes_that_are_not_whole_doubles_are_refused(data: bytes, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Floats(data)


@pytest.mark.parametrize(
    ("index", "error"),
    [pytest.param(2, IndexError, id="past-the-end"), pytest.param(-3, IndexError, id="before-the-start")],
)
def test_an_index_out_of_range_raises_as_a_tuple_does(index: int, error: type[Exception]) -> None:
    with pytest.raises(error):
        Floats.of([1.0, 2.0])[index]


def test_max_of_nothing_raises_as_max_does() -> None:
    with pytest.raises(ValueError, match="no values"):
        Floats().max()
