"""SLO resolution of the queueing-model analyzer (issue 11): explicit → inferred (k·α) → observed × 1.5 with caps,
and the arrival-weighted workload it is resolved against."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.analyzers.queueing import ekf
from adapter.analyzers.queueing.model import ServiceParams
from adapter.analyzers.queueing.slo import MAX_FALLBACK_ITL_MS, MAX_FALLBACK_TTFT_MS, Slo, resolve_slo
from adapter.analyzers.queueing.workload import VariantLoad, Workload, usable, workload
from adapter.config.configmaps import QueueingConfig
from adapter.domain.snapshot import PodMetrics


def _state(alpha: float, beta: float, gamma: float) -> ServiceParams:
    """Learned parameters, as the analyzer hands them over (`FilterState.params()`)."""
    return ServiceParams(alpha, beta, gamma)


A100 = _state(20.0, 0.08, 0.0002)
DEFAULTS = _state(*ekf.DEFAULT_PARAMS)
LOAD = Workload(10.0, 2, 512.0, 128.0, 400.0, 40.0)


@pytest.mark.parametrize(
    ("cfg", "learned", "load", "expected"),
    [
        pytest.param(
            QueueingConfig(target_ttft_ms=500, target_itl_ms=50), [A100], LOAD, Slo(500, 50, "explicit"), id="explicit"
        ),
        pytest.param(
            QueueingConfig(target_ttft_ms=500, target_itl_ms=50),
            [],
            Workload(),
            Slo(500, 50, "explicit"),
            id="explicit-needs-nothing-else",
        ),
        # k 3: TTFT* = 3·20 + (0.08 + 0.0002)·512 = 101.0624; ITL* = 60 + 0.08 + 0.0002·(512 + 64.5) = 60.1953
        pytest.param(QueueingConfig(), [A100], LOAD, Slo(101.0624, 60.1953, "inferred"), id="inferred-k3"),
        # k 2: TTFT* = 40 + 41.0624 = 81.0624; ITL* = 40 + 0.08 + 0.1153 = 40.1953
        pytest.param(
            QueueingConfig(slo_multiplier=2), [A100], LOAD, Slo(81.0624, 40.1953, "inferred"), id="inferred-k2"
        ),
        pytest.param(
            QueueingConfig(slo_multiplier=1), [A100], LOAD, Slo(101.0624, 60.1953, "inferred"), id="k-at-most-1-means-3"
        ),
        # the defaults give 15 + 25.6256 = 40.63 < 101.06: the A100-like variant dominates both targets
        pytest.param(
            QueueingConfig(), [DEFAULTS, A100], LOAD, Slo(101.0624, 60.1953, "inferred"), id="max-over-variants"
        ),
        # element-wise: a variant with the larger α but no token cost wins ITL, the other TTFT
        pytest.param(
            QueueingConfig(),
            [_state(30.0, 1e-5, 1e-8), _state(10.0, 0.2, 1e-8)],
            Workload(1, 1, 1000, 99, 0, 0),
            Slo(max(90.01, 30 + 200.00001), max(90.00001 + 1e-8 * 1050, 30.2 + 1e-8 * 1050), "inferred"),
            id="element-wise-max",
        ),
        pytest.param(
            QueueingConfig(target_ttft_ms=500),
            [A100],
            LOAD,
            Slo(101.0624, 60.1953, "inferred"),
            id="one-target-only-is-not-explicit",
        ),
        pytest.param(QueueingConfig(), [], LOAD, Slo(600, 60, "observed"), id="observed-times-1.5"),
        pytest.param(
            QueueingConfig(),
            [A100],
            Workload(1, 1, 0, 128, 400, 40),
            Slo(600, 60, "observed"),
            id="inferred-needs-request-sizes",
        ),
        pytest.param(
            QueueingConfig(),
            [],
            Workload(1, 1, 512, 128, 9000, 400),
            Slo(10_000, 500, "observed"),
            id="observed-capped",
        ),
        pytest.param(QueueingConfig(), [], Workload(1, 1, 512, 128, 400, 0), None, id="observed-needs-both"),
        pytest.param(QueueingConfig(), [], Workload(), None, id="nothing-to-go-on"),
    ],
)
def test_slo_resolution(
    cfg: QueueingConfig, learned: list[ServiceParams], load: Workload, expected: Slo | None
) -> None:
    slo = resolve_slo(cfg, learned, load)
    if expected is None:
        assert slo is None
        return
    assert slo is not None
    assert slo.source == expected.source
    assert slo.target_ttft_ms == pytest.approx(expected.target_ttft_ms, rel=1e-6)
    assert slo.target_itl_ms == pytest.approx(expected.target_itl_ms, rel=1e-6)


def test_slo_json_is_the_replay_shape() -> None:
    assert Slo(101.06241, 60.19531, "inferred").to_json() == {
        "target_ttft_ms": 101.062,
        "target_itl_ms": 60.195,
        "source": "inferred",
    }


def _pod(name: str, rate: float | None, i: float | None, o: float, ttft_s: float, itl_s: float) -> PodMetrics:
    return PodMetrics(
        "llm",
        name,
        "v",
        arrival_rate_rps=rate,
        avg_input_tokens=i,
        avg_output_tokens=o,
        avg_ttft_s=ttft_s,
        avg_itl_s=itl_s,
    )


def test_workload_is_arrival_weighted_over_busy_pods() -> None:
    pods = [
        _pod("a", 3, 100, 10, 0.1, 0.01),
        _pod("b", 1, 500, 50, 0.5, 0.05),
        _pod("idle", 0, 9999, 9999, 9, 9),  # no traffic: not counted
        _pod("unknown", None, 9999, 9999, 9, 9),  # no arrival rate reported
        _pod("nan", math.nan, 9999, 9999, 9, 9),
        _pod("negative", -2, 9999, 9999, 9, 9),
    ]
    load = workload(pods)
    # I = (3·100 + 1·500) / 4 = 200; O = (30 + 50) / 4 = 20; TTFT = (3·100 + 1·500) / 4 = 200 ms; ITL 20 ms
    assert (load.total_arrival_rps, load.busy_pods, load.input_tokens, load.output_tokens) == (4, 2, 200, 20)
    assert load.ttft_ms == pytest.approx(200)
    assert load.itl_ms == pytest.approx(20)


def test_missing_values_of_a_busy_pod_count_as_zero_not_nan() -> None:
    load = workload([_pod("a", 2, None, 100, math.nan, 0.02), _pod("b", 2, 400, 100, 0.3, 0.02)])
    assert load.input_tokens == 200  # (2·0 + 2·400) / 4
    assert load.ttft_ms == pytest.approx(150)  # NaN counted as 0
    assert all(math.isfinite(v) for v in (load.input_tokens, load.ttft_ms, load.itl_ms))


metric_values = st.one_of(
    st.none(), st.floats(allow_nan=True, allow_infinity=True), st.floats(0.0, 1e5), st.sampled_from([0.0, -0.0])
)


@settings(max_examples=300)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.floats(-1.0, 1e3)), metric_values, metric_values, metric_values, metric_values
        ),
        max_size=12,
    )
)
def test_workload_means_are_the_four_sums_bit_for_bit(
    rows: list[tuple[float | None, float | None, float | None, float | None, float | None]],
) -> None:
    """The one-pass means equal Σ λ_i·usable(x_i) / Σλ computed as four separate `sum`s over the busy pods, to the
    bit (the form before the pass was fused; `usable` is the definition of a counted value)."""
    pods = [_pod(f"p{k}", *row) for k, row in enumerate(rows)]
    busy = [(usable(p.arrival_rate_rps), p) for p in pods if usable(p.arrival_rate_rps) > 0]
    load = workload(pods)
    total = sum([rate for rate, _ in busy])
    if total <= 0:
        assert load == Workload()
        return

    def mean(field: str) -> float:
        return sum([rate * usable(getattr(p, field)) for rate, p in busy]) / total

    expected = (total, len(busy), mean("avg_input_tokens"), mean("avg_output_tokens"), mean("avg_ttft_s") * 1000.0)
    got = (load.total_arrival_rps, load.busy_pods, load.input_tokens, load.output_tokens, load.ttft_ms)
    assert [v.hex() if isinstance(v, float) else v for v in got] == [
        v.hex() if isinstance(v, float) else v for v in expected
    ]
    assert load.itl_ms.hex() == (mean("avg_itl_s") * 1000.0).hex()


@settings(max_examples=300)
@given(
    st.lists(
        st.tuples(st.floats(1e-3, 1e3), metric_values, metric_values, metric_values, metric_values),
        max_size=8,
    ),
    st.integers(1, 512),
)
def test_environments_are_the_usable_values_bit_for_bit(
    rows: list[tuple[float, float | None, float | None, float | None, float | None]], max_batch: int
) -> None:
    """`ekf.environments` writes `usable` out: each observation is `usable` of the pod's values, latencies in ms."""
    pods = tuple(_pod(f"p{k}", *row) for k, row in enumerate(rows))
    got = ekf.environments(VariantLoad("v", pods, max_batch, 0.0))
    expected = [
        (
            usable(p.arrival_rate_rps),
            usable(p.avg_input_tokens),
            usable(p.avg_output_tokens),
            max_batch,
            usable(p.avg_ttft_s) * 1000.0,
            usable(p.avg_itl_s) * 1000.0,
        )
        for p in pods
    ]
    as_bits = [tuple(v.hex() if isinstance(v, float) else v for v in dataclasses.astuple(e)) for e in got]
    assert as_bits == [tuple(v.hex() if isinstance(v, float) else v for v in row) for row in expected]


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(
            st.lists(st.tuples(metric_values, metric_values, metric_values, metric_values, metric_values), max_size=5),
            st.integers(1, 512),
        ),
        max_size=5,
    )
)
def test_the_lockstep_reads_each_load_as_its_environments_bit_for_bit(
    raw: list[tuple[list[tuple[float | None, ...]], int]],
) -> None:
    """`learn_many` reads every busy pod of every load straight into the filter's observation table, without an
    `Environment` a pod: the same numbers as `environments` of each load, load after load, to the bit."""
    loads = [
        VariantLoad(f"v{j}", tuple(_pod(f"p{k}", *row) for k, row in enumerate(rows)), max_batch, 0.0)  # type: ignore[arg-type]
        for j, (rows, max_batch) in enumerate(raw)
    ]
    got = ekf._observed(loads)
    expected = ekf._observations(env for load in loads for env in ekf.environments(load))
    assert got.shape == expected.shape == (sum(len(load.busy) for load in loads), 6)
    assert got.tobytes() == expected.tobytes()


def test_no_busy_pod_is_an_empty_workload() -> None:
    assert workload([_pod("idle", 0, 512, 128, 0.2, 0.02)]) == Workload()


@settings(max_examples=80, deadline=None)
@given(
    k1=st.floats(1.01, 20),
    k2=st.floats(1.01, 20),
    params=st.tuples(st.floats(0.1, 200), st.floats(1e-5, 1), st.floats(1e-8, 1e-2)),
    i=st.floats(1, 8000),
    o=st.floats(1, 4000),
)
def test_a_larger_multiplier_never_tightens_the_inferred_slo(
    k1: float, k2: float, params: tuple[float, float, float], i: float, o: float
) -> None:
    lo, hi = sorted((k1, k2))
    load = Workload(1, 1, i, o, 0, 0)
    tight = resolve_slo(QueueingConfig(slo_multiplier=lo), [_state(*params)], load)
    loose = resolve_slo(QueueingConfig(slo_multiplier=hi), [_state(*params)], load)
    assert tight is not None
    assert loose is not None
    assert tight.target_ttft_ms <= loose.target_ttft_ms
    assert tight.target_itl_ms <= loose.target_itl_ms


@settings(max_examples=80, deadline=None)
@given(ttft_ms=st.floats(0.01, 1e6), itl_ms=st.floats(0.01, 1e5))
def test_observed_slo_is_headroom_within_its_caps(ttft_ms: float, itl_ms: float) -> None:
    slo = resolve_slo(QueueingConfig(), [], Workload(1, 1, 512, 128, ttft_ms, itl_ms))
    assert slo is not None
    assert slo.source == "observed"
    assert slo.target_ttft_ms == pytest.approx(min(1.5 * ttft_ms, MAX_FALLBACK_TTFT_MS))
    assert slo.target_itl_ms == pytest.approx(min(1.5 * itl_ms, MAX_FALLBACK_ITL_MS))
    assert slo.target_ttft_ms >= min(ttft_ms, MAX_FALLBACK_TTFT_MS)  # never tighter than what is observed
