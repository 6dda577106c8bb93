"""Capacity per replica at a per-request SLO (adapter/analyzers/predictive/capacity.py): the tightened targets'
worked example, and λ* of many replicas at once with the cut below `MIN_USEFUL_UTILISATION`."""

from __future__ import annotations

import pytest

from adapter.analyzers.predictive.capacity import (
    MIN_USEFUL_UTILISATION,
    ReplicaQuery,
    Targets,
    per_replica_rps,
    tightened,
)
from adapter.analyzers.queueing.model import LOCKSTEP_FROM, QueueModel, RequestSize, ServiceParams

A100 = ServiceParams(9.5, 0.066, 0.00008)
L4 = ServiceParams(55.0, 0.17, 0.0006)
SIZE = RequestSize(1155.0, 230.0)


def test_tightened_targets_worked_example() -> None:
    """The module docstring: T 2000 ms, prefill 85.8 ms, ε 0.01 ⇒ T' = 447.1 ms; L' = L / 1.644."""
    targets = tightened(Targets(2000.0, 100.0), A100, SIZE, attainment=0.99, itl_cv=0.25)
    assert targets.ttft_ms == pytest.approx(447.1, abs=0.05)
    assert targets.itl_ms == pytest.approx(100.0 / 1.644, rel=1e-3)


def _query(params: ServiceParams, ttft_ms: float, itl_ms: float, *, input_tokens: float = 1155.0) -> ReplicaQuery:
    return ReplicaQuery(params, RequestSize(input_tokens, 230.0), 256, Targets(ttft_ms, itl_ms))


def _alone(query: ReplicaQuery) -> float:
    model = QueueModel(query.params, query.size, max_batch=query.max_batch)
    return model.max_rate(query.targets.ttft_ms, query.targets.itl_ms).rate_rps


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        pytest.param(_query(A100, 447.1, 60.8), "lambda-star", id="a100-at-tightened-targets"),
        pytest.param(_query(A100, 50.0, 60.8), 0.0, id="ttft-below-the-prefill-out-of-reach"),
        pytest.param(_query(L4, 2000.0, 61.0), "cut", id="l4-alpha-alone-near-the-itl-target-nearly-idle"),
        pytest.param(_query(A100, 1e9, 1e9), "top-of-range", id="targets-above-the-range"),
    ],
)
def test_one_replica_at_its_targets(query: ReplicaQuery, expected: object) -> None:
    (rate,) = per_replica_rps([query])
    model = QueueModel(query.params, query.size, max_batch=query.max_batch)
    if expected == "lambda-star":
        assert rate == _alone(query)
        assert rate >= MIN_USEFUL_UTILISATION * model.rate_range_rps.max_rps
    elif expected == "top-of-range":
        assert rate == model.rate_range_rps.max_rps
    elif expected == "cut":  # a λ* exists, at 6 % of the replica's throughput
        assert rate == 0.0
        assert 0 < _alone(query) < MIN_USEFUL_UTILISATION * model.rate_range_rps.max_rps
    else:
        assert rate == expected


def test_no_queries_no_rates() -> None:
    assert per_replica_rps([]) == []


def test_many_replicas_at_once_as_each_alone() -> None:
    """In lockstep (from `LOCKSTEP_FROM` queries) each rate agrees with its replica's own λ* to 1e-12 relative, the
    replicas out of reach or nearly idle at 0, whatever their order."""
    queries = [
        _query(params, ttft, itl, input_tokens=tokens)
        for params in (A100, L4)
        for ttft, itl in ((447.1, 60.8), (2000.0, 100.0), (50.0, 60.8))
        for tokens in (200.0, 1155.0, 4000.0)
    ]
    assert len(queries) >= LOCKSTEP_FROM
    rates = per_replica_rps(queries)
    assert any(r > 0 for r in rates)
    assert any(r == 0 for r in rates)
    for query, rate in zip(queries, rates, strict=True):
        (alone,) = per_replica_rps([query])
        assert rate == pytest.approx(alone, rel=1e-12)
    assert per_replica_rps(queries[::-1]) == rates[::-1]


def test_a_replica_the_model_cannot_hold_is_0_among_many() -> None:
    """A replica whose service rates overflow (no `QueueModel`) gets 0 and the others their own λ*, in lockstep."""
    overflowing = _query(ServiceParams(1e308, 0.066, 0.00008), 2000.0, 100.0)
    queries = [_query(A100, 447.1 + k, 60.8) for k in range(LOCKSTEP_FROM)]
    queries.insert(5, overflowing)
    rates = per_replica_rps(queries)
    assert rates[5] == 0.0
    assert per_replica_rps([overflowing]) == [0.0]
    for query, rate in zip(queries[:5] + queries[6:], rates[:5] + rates[6:], strict=True):
        assert rate == pytest.approx(_alone(query), rel=1e-12)
