"""EngineState's JSON form (what the flight recorder writes and replay reads): exact round trip, strict parse."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.analyzers import saturation, tokens
from adapter.analyzers.queueing import analyzer as queueing
from adapter.analyzers.queueing import ekf
from adapter.analyzers.saturation import NotReportingSince
from adapter.analyzers.tokens import CapacityRecord, K2History, TokenMemory
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import DecisionPath, DesiredAlloc
from adapter.engine.state import EngineState, StateFormatError, state_from_json, state_to_json
from adapter.engine.unwoken import Unwoken

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
keys = st.builds(VariantKey, names, names)
times = st.floats(min_value=0, max_value=4e9, allow_nan=False)
allocs = st.builds(
    DesiredAlloc,
    num_replicas=st.integers(0, 1000),
    reason=st.text(max_size=60),
    last_run_time_s=times,
    last_update_s=st.none() | times,
    accelerator=st.sampled_from(["", "A100", "L4"]),
    path=st.sampled_from(list(DecisionPath)),
)
positive = st.floats(min_value=1e-6, max_value=1e3, allow_nan=False, allow_infinity=False)
filters = st.builds(
    lambda a, b, c, var, t: ekf.FilterState(
        a, b, c, ((var, 0.0, 0.0), (0.0, var, 0.0), (0.0, 0.0, var)), *ekf.STATE_LIMITS, t
    ),
    positive,
    positive,
    positive,
    st.floats(min_value=1e-3, max_value=10.0),
    times,
)


def _state(
    allocations: dict[VariantKey, DesiredAlloc],
    not_reporting: dict[VariantKey, NotReportingSince],
    token_memory: TokenMemory,
    filter_states: dict[VariantKey, ekf.FilterState],
    unwoken: dict[VariantKey, Unwoken],
) -> EngineState:
    """An engine state with a slot per analyzer that remembers something (empty slots are not kept)."""
    memories = {
        saturation.ANALYZER.name: not_reporting,
        tokens.ANALYZER.name: token_memory,
        queueing.ANALYZER.name: filter_states,
    }
    kept = {name: m for name, m in memories.items() if m not in ({}, TokenMemory())}
    return EngineState(allocations, kept, unwoken=unwoken)


states = st.builds(
    _state,
    st.dictionaries(keys, allocs, max_size=5),
    st.dictionaries(keys, st.builds(NotReportingSince, st.integers(0, 50), st.integers(0, 50), times), max_size=3),
    st.builds(
        TokenMemory,
        k2_history=st.dictionaries(
            names, st.builds(K2History, st.lists(st.integers(0, 10**7), max_size=10).map(tuple), times), max_size=3
        ),
        capacity=st.dictionaries(
            keys, st.builds(CapacityRecord, st.integers(0, 10**7), st.integers(0, 10**7), times), max_size=3
        ),
    ),
    st.dictionaries(keys, filters, max_size=3),
    st.dictionaries(keys, st.builds(Unwoken, times, st.none() | times), max_size=3),
)


@settings(max_examples=150, deadline=None)
@given(states)
def test_round_trip_through_json_text_is_exact(state: EngineState) -> None:
    text = json.dumps(state_to_json(state))
    assert state_from_json(json.loads(text)) == state


BASE: dict[str, Any] = {
    "allocations": {
        "llm/a": {"num_replicas": 2, "reason": "r", "last_run_time_s": 1.5, "last_update_s": None, "accelerator": ""}
    }
}


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        pytest.param([], "$", id="not-an-object"),
        pytest.param({"extra": {}}, "$", id="unknown-top-field"),
        pytest.param({"allocations": {"no-slash": BASE["allocations"]["llm/a"]}}, "$.allocations", id="bad-key"),
        pytest.param(
            {"allocations": {"llm/a": {**BASE["allocations"]["llm/a"], "num_replicas": -1}}},
            "$.allocations['llm/a'].num_replicas",
            id="negative-replicas",
        ),
        pytest.param(
            {"allocations": {"llm/a": {**BASE["allocations"]["llm/a"], "last_run_time_s": float("nan")}}},
            "$.allocations['llm/a'].last_run_time_s",
            id="nan-time",
        ),
        pytest.param(
            {"allocations": {"llm/a": {**BASE["allocations"]["llm/a"], "num_replicas": True}}},
            "$.allocations['llm/a'].num_replicas",
            id="bool-is-not-int",
        ),
        pytest.param(
            {"allocations": {"llm/a": {**BASE["allocations"]["llm/a"], "path": "sideways"}}},
            "$.allocations['llm/a'].path",
            id="unknown-path",
        ),
        pytest.param(
            {"queueing": {"llm/a": {"alpha_ms": -1}}},
            "$.queueing['llm/a']",
            id="bad-filter-state",
        ),
        pytest.param({"unwoken": {"llm/a": {}}}, "$.unwoken['llm/a'].asked_since_s", id="unwoken-without-since"),
        pytest.param(
            {"unwoken": {"llm/a": {"asked_since_s": 1.0, "blocked_until_s": "later"}}},
            "$.unwoken['llm/a'].blocked_until_s",
            id="unwoken-until-not-a-number",
        ),
        pytest.param(
            {"unwoken": {"llm/a": {"asked_since_s": 1.0, "retries": 2}}}, "$.unwoken['llm/a']", id="unwoken-extra"
        ),
        pytest.param(
            {"tokens": {"k2_history": {"m|A100|short": {"samples_tokens": [1, -2], "updated_s": 0}}}},
            "$.tokens.k2_history['m|A100|short'].samples_tokens",
            id="negative-sample",
        ),
    ],
)
def test_invalid_documents_name_their_path(doc: Any, path: str) -> None:
    with pytest.raises(StateFormatError) as err:
        state_from_json(doc)
    assert err.value.path == path


def test_empty_document_is_the_empty_state() -> None:
    assert state_from_json({}) == EngineState()


def test_an_allocation_recorded_before_paths_were_reads_as_unknown() -> None:
    state = state_from_json(BASE)
    assert state.allocations[VariantKey("llm", "a")].path is DecisionPath.UNKNOWN
