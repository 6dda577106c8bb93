"""The queueing-model analyzer (issue 11): λ* per variant, the capacity signal in requests/s, zero-capacity
placeholders, no-signal reasons, monotonicity properties, and learned state across a restart through the engine."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.analyzers.queueing import analyzer as qm
from adapter.analyzers.queueing import ekf
from adapter.analyzers.queueing.analyzer import LEARNED_SECTION
from adapter.analyzers.queueing.model import QueueModel, RequestSize, ServiceParams
from adapter.config.configmaps import QUEUEING_CM, QueueingConfig
from adapter.config.engine import EngineConfig
from adapter.domain.capacity import CapacitySignal, CapacityUnit, NoSignal
from adapter.domain.decision import AnalyzerName
from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.snapshot import PodMetrics, ScaleTarget, VariantSpec, VariantView
from tests.core.builders import CONTROLLER_NS, T0, Fleet, assert_prepared_decides_as_alone, configset
from tests.core.builders import spec as core_spec

from . import ekf_convergence as conv

TRUE = conv.TRUE
MODEL = ModelKey("llm", "m")
IDENTITY = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))
KNOWN_STATE = ekf.FilterState(*TRUE, IDENTITY, *ekf.STATE_LIMITS, 0.0)
KNOWN = {"v": KNOWN_STATE}
EXPLICIT = QueueingConfig(target_ttft_ms=400, target_itl_ms=40, tuning_enabled=False)
I_TOKENS, O_TOKENS, BATCH = 512, 128, 64


def _view(name: str, replicas: int, *, cost: float = 10.0, pending: int = 0) -> VariantView:
    spec = VariantSpec(VariantKey("llm", name), "m", "Deployment", name, min_replicas=1, max_replicas=50, cost=cost)
    target = ScaleTarget("Deployment", "llm", name, replicas, replicas - pending, replicas)
    return VariantView(spec=spec, target=target)


def _true_model(true: tuple[float, float, float] = TRUE) -> QueueModel:
    return QueueModel(ServiceParams(*true), RequestSize(I_TOKENS, O_TOKENS), max_batch=BATCH, max_queue=10 * BATCH)


def _pods(name: str, n: int, rate_each: float, true: tuple[float, float, float] = TRUE) -> list[PodMetrics]:
    m = _true_model(true).analyze(rate_each)
    return [
        PodMetrics(
            "llm",
            f"{name}-{i}",
            name,
            kv_cache_usage=0.3,
            queue_length=0,
            arrival_rate_rps=rate_each,
            avg_input_tokens=I_TOKENS,
            avg_output_tokens=O_TOKENS,
            avg_ttft_s=(m.ttft_ms - m.itl_ms) / 1000,
            avg_itl_s=m.itl_ms / 1000,
            max_batch_size=BATCH,
        )
        for i in range(n)
    ]


def _signal(rate_each: float, replicas: int, cfg: QueueingConfig = EXPLICIT) -> CapacitySignal:
    out, _ = qm.measure(
        MODEL, [_view("v", replicas)], {"v": _pods("v", replicas, rate_each)}, cfg=cfg, learned=KNOWN, now_s=T0
    )
    assert isinstance(out, CapacitySignal), out
    return out


def _allocated(signal: CapacitySignal) -> int:
    """What the allocation step does with one variant: current + ceil(required / λ*)."""
    (v,) = signal.variants
    extra = math.ceil(signal.required / v.per_replica_capacity - 1e-9) if signal.required > 0 else 0
    return v.current_replicas + extra


# ---- capacity and signal ------------------------------------------------------------------------------------------


def test_lambda_star_is_the_models_size_at_the_slo() -> None:
    signal = _signal(2.0, 2)
    (variant,) = signal.variants
    expected = _true_model().max_rate(400, 40).throughput_rps
    assert variant.per_replica_capacity == pytest.approx(expected, rel=1e-9)
    assert signal.unit is CapacityUnit.REQUESTS_PER_S
    assert signal.analysis["variants"]["v"]["max_rps_per_replica"] == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(
    ("rate_each", "replicas"),
    [
        pytest.param(2.0, 2, id="within-capacity"),
        pytest.param(6.0, 2, id="over-capacity"),
        # upstream sized capacity from the desired count, so required was 0 here: one overloaded replica
        pytest.param(7.0, 1, id="upstream-fault-required-not-structurally-zero"),
        pytest.param(0.3, 6, id="far-over-provisioned"),
    ],
)
def test_one_variant_ends_at_ceil_arrival_over_lambda_star(rate_each: float, replicas: int) -> None:
    signal = _signal(rate_each, replicas)
    (v,) = signal.variants
    total = rate_each * replicas
    needed = math.ceil(total / v.per_replica_capacity - 1e-9)
    assert signal.analysis["variants"]["v"]["required_replicas"] == needed
    assert signal.required == pytest.approx(max(0.0, total - replicas * v.per_replica_capacity))
    assert signal.spare == pytest.approx(max(0.0, replicas * v.per_replica_capacity - total))
    if needed > replicas:
        assert signal.required > 0
        assert _allocated(signal) == needed
    assert v.demand == pytest.approx(total)
    assert signal.analysis["slo"] == {"target_ttft_ms": 400, "target_itl_ms": 40, "source": "explicit"}
    assert set(signal.analysis["variants"]["v"]) == {
        "alpha",
        "beta",
        "gamma",
        "max_rps_per_replica",
        "total_arrival_rps",
        "required_replicas",
    }


def test_pending_replicas_count_as_anticipated_not_as_supply() -> None:
    out, _ = qm.measure(
        MODEL, [_view("v", 3, pending=1)], {"v": _pods("v", 2, 5.0)}, cfg=EXPLICIT, learned=KNOWN, now_s=T0
    )
    assert isinstance(out, CapacitySignal)
    (v,) = out.variants
    lam = v.per_replica_capacity
    assert (v.ready_replicas, v.pending_replicas) == (2, 1)
    assert out.required == pytest.approx(max(0.0, 10.0 - 3 * lam))
    assert out.spare == pytest.approx(max(0.0, 2 * lam - 10.0))


def test_variants_without_parameters_are_zero_capacity_placeholders() -> None:
    views = [_view("v", 2), _view("w", 0, cost=2.0)]
    out, states = qm.measure(MODEL, views, {"v": _pods("v", 2, 1.0)}, cfg=EXPLICIT, learned=KNOWN, now_s=T0)
    assert isinstance(out, CapacitySignal)
    by = {v.name: v for v in out.variants}
    assert by["v"].per_replica_capacity > 0
    assert (by["w"].per_replica_capacity, by["w"].demand, by["w"].current_replicas) == (0.0, 0.0, 0)
    assert by["w"].cost == 2.0  # the roster is complete: the allocation sees it, and never picks it blind
    assert out.analysis["variants"]["w"] == {
        "alpha": None,
        "beta": None,
        "gamma": None,
        "max_rps_per_replica": 0.0,
        "total_arrival_rps": 0.0,
        "required_replicas": None,
    }
    assert "w" not in states
    assert any(note.startswith("w: no learned parameters") for note in out.notes)


def test_each_variant_reports_its_own_arrival_and_the_model_the_total() -> None:
    cheap_state = ekf.FilterState(40.0, 0.16, 4e-4, IDENTITY, *ekf.STATE_LIMITS, 0.0)
    views = [_view("v", 2), _view("w", 1, cost=4.0)]
    pods = {"v": _pods("v", 2, 1.5), "w": _pods("w", 1, 0.5, (40.0, 0.16, 4e-4))}
    out, _ = qm.measure(MODEL, views, pods, cfg=EXPLICIT, learned={"v": KNOWN_STATE, "w": cheap_state}, now_s=T0)
    assert isinstance(out, CapacitySignal)
    assert out.analysis["total_arrival_rps"] == pytest.approx(3.5)
    assert out.analysis["variants"]["v"]["total_arrival_rps"] == pytest.approx(3.0)
    assert out.analysis["variants"]["w"]["total_arrival_rps"] == pytest.approx(0.5)
    lam = {v.name: v.per_replica_capacity for v in out.variants}
    assert lam["w"] < lam["v"]  # twice as slow per iteration and per token
    assert out.spare == pytest.approx(max(0.0, 2 * lam["v"] + lam["w"] - 3.5))


@pytest.mark.parametrize(
    ("cfg", "learned", "pods", "reason"),
    [
        pytest.param(
            QueueingConfig(tuning_enabled=False),
            {},
            [PodMetrics("llm", "v-0", "v", kv_cache_usage=0.1, queue_length=0)],
            "no SLO targets",
            id="no-slo-no-learning-no-latencies",
        ),
        pytest.param(
            EXPLICIT,
            KNOWN,
            [PodMetrics("llm", "v-0", "v", arrival_rate_rps=0.0, avg_input_tokens=512, avg_output_tokens=128)],
            "no busy pod",
            id="no-traffic",
        ),
        pytest.param(
            EXPLICIT,
            KNOWN,
            [PodMetrics("llm", "v-0", "v", arrival_rate_rps=2.0, avg_input_tokens=512)],
            "request sizes",
            id="no-output-tokens",
        ),
        pytest.param(
            QueueingConfig(target_ttft_ms=400, target_itl_ms=5, tuning_enabled=False),
            KNOWN,
            _pods("v", 1, 1.0),
            "capacity at the SLO is known",
            id="slo-out-of-reach",
        ),
        pytest.param(
            EXPLICIT,
            {},
            _pods("v", 1, 1.0),
            "no learned parameters",
            id="tuning-off-and-nothing-learned",
        ),
    ],
)
def test_no_signal_names_its_reason(
    cfg: QueueingConfig, learned: dict[str, ekf.FilterState], pods: list[PodMetrics], reason: str
) -> None:
    out, _ = qm.measure(MODEL, [_view("v", 1)], {"v": pods}, cfg=cfg, learned=learned, now_s=T0)
    assert isinstance(out, NoSignal)
    assert out.analyzer is AnalyzerName.QUEUEING_MODEL
    assert out.model == MODEL
    assert reason in out.reason


def test_cold_start_learns_and_sizes_in_the_same_cycle() -> None:
    cfg = QueueingConfig(target_ttft_ms=400, target_itl_ms=40)  # tuning on (the default)
    rng = random.Random(2)
    pods = [p for rate in (1.0, 2.5, 4.0) for p in _pods("v", 1, rate * rng.uniform(0.95, 1.05))]
    out, states = qm.measure(MODEL, [_view("v", 3)], {"v": pods}, cfg=cfg, learned={}, now_s=T0)
    assert isinstance(out, CapacitySignal)
    assert states["v"].updated_s == T0
    assert max(conv.errors(states["v"])) < 0.25
    lam_true = _true_model().max_rate(400, 40).throughput_rps
    assert out.variants[0].per_replica_capacity == pytest.approx(lam_true, rel=0.05)


def test_bad_pod_metrics_are_absent_not_fatal() -> None:
    good = _pods("v", 2, 2.0)
    bad = [
        PodMetrics("llm", "v-nan", "v", arrival_rate_rps=math.nan, avg_ttft_s=math.nan, avg_itl_s=-1.0),
        PodMetrics("llm", "v-neg", "v", arrival_rate_rps=-3.0, avg_input_tokens=-5, avg_output_tokens=math.inf),
        PodMetrics("llm", "v-inf", "v", arrival_rate_rps=2.0, avg_input_tokens=512, avg_output_tokens=128,
                   avg_ttft_s=math.inf, avg_itl_s=0.03),
    ]  # fmt: skip
    cfg = QueueingConfig(target_ttft_ms=400, target_itl_ms=40)
    out, states = qm.measure(MODEL, [_view("v", 5)], {"v": [*good, *bad]}, cfg=cfg, learned=KNOWN, now_s=T0)
    assert isinstance(out, CapacitySignal)
    assert out.analysis["total_arrival_rps"] == pytest.approx(6.0)  # the NaN and negative rates are not traffic
    assert all(math.isfinite(v) for v in (states["v"].alpha_ms, states["v"].beta_ms, states["v"].gamma_ms))


# ---- properties ---------------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.floats(0.2, 6.0), st.floats(0.2, 6.0), st.integers(1, 6))
def test_more_arrival_never_fewer_required_replicas(a: float, b: float, replicas: int) -> None:
    lo, hi = sorted((a, b))
    s_lo, s_hi = _signal(lo, replicas), _signal(hi, replicas)
    assert s_hi.analysis["variants"]["v"]["required_replicas"] >= s_lo.analysis["variants"]["v"]["required_replicas"]
    assert s_hi.required >= s_lo.required
    assert _allocated(s_hi) >= _allocated(s_lo)


@settings(max_examples=60, deadline=None)
@given(st.floats(150, 2000), st.floats(150, 2000), st.floats(30, 200), st.floats(30, 200))
def test_tighter_slo_never_higher_lambda_star(t1: float, t2: float, l1: float, l2: float) -> None:
    ttft = sorted((t1, t2))
    itl = sorted((l1, l2))
    lam = []
    for ttft_ms, itl_ms in ((ttft[0], itl[0]), (ttft[1], itl[1])):
        cfg = QueueingConfig(target_ttft_ms=ttft_ms, target_itl_ms=itl_ms, tuning_enabled=False)
        out, _ = qm.measure(MODEL, [_view("v", 1)], {"v": _pods("v", 1, 1.0)}, cfg=cfg, learned=KNOWN, now_s=T0)
        lam.append(out.variants[0].per_replica_capacity if isinstance(out, CapacitySignal) else 0.0)
    assert lam[0] <= lam[1] * (1 + 1e-6)


@settings(max_examples=60, deadline=None)
@given(st.floats(0.1, 8.0), st.integers(1, 8))
def test_replicas_never_below_what_the_model_needs_at_the_measured_rate(rate_each: float, replicas: int) -> None:
    """Independent of the analyzer's own arithmetic: the count the allocation reaches (current + ceil(required
    / λ*)) spreads the measured arrival so thinly that the model, at the learned parameters, meets the SLO;
    and one replica fewer would not (unless the count was already more than needed)."""
    signal = _signal(rate_each, replicas)
    n = _allocated(signal)
    total = rate_each * replicas
    assert _meets_slo(total / n)
    if n > replicas and n > 1:  # scaled up: the minimal count
        assert not _meets_slo(total / (n - 1))


def _meets_slo(rate_per_replica: float, ttft_ms: float = 400, itl_ms: float = 40) -> bool:
    model = _true_model()
    if rate_per_replica > model.rate_range_rps.max_rps:
        return False
    m = model.analyze(rate_per_replica)
    return m.ttft_ms <= ttft_ms * (1 + 1e-6) and m.itl_ms <= itl_ms * (1 + 1e-6)


# ---- through the engine: learning, persistence, restart -----------------------------------------------------------

MODEL_OF = ModelKey("llm", "llama-70b")


def _qm_fleet() -> Fleet:
    cms = configset(extra=[(CONTROLLER_NS, QUEUEING_CM, {"default": "sloMultiplier: 3\ntuningEnabled: true\n"})])
    return Fleet(specs=[core_spec("v", max_replicas=20)], config=EngineConfig(configmaps=cms), replicas={"v": 2})


def test_engine_learns_persists_and_a_restart_resumes_with_the_same_capacity() -> None:
    fleet = _qm_fleet()
    rng = random.Random(3)
    for cycle in range(12):
        rate = rng.uniform(1.0, 3.0)
        fleet.cycle(T0 + 30 * cycle, _pods("v", fleet.replicas["v"], rate))
        fleet.apply()
    assert fleet.last is not None
    lam_before = fleet.last.analyses[MODEL_OF].analysis["variants"]["v"]["max_rps_per_replica"]
    status = fleet.statuses[VariantKey("llm", "v")]
    assert LEARNED_SECTION in status.learned  # persisted where a new leader reads it
    persisted = ekf.FilterState.from_json(status.learned[LEARNED_SECTION])
    fleet.restart()  # engine memory gone; VA status kept (like a fail-over)
    assert fleet.state.memory(qm.ANALYZER) == {}
    fleet.cycle(T0 + 30 * 12, _pods("v", fleet.replicas["v"], 2.0))
    assert fleet.last is not None
    lam_after = fleet.last.analyses[MODEL_OF].analysis["variants"]["v"]["max_rps_per_replica"]
    assert lam_after == pytest.approx(lam_before, rel=0.01)
    resumed = fleet.state.memory(qm.ANALYZER)[VariantKey("llm", "v")]
    assert resumed.accepted >= persisted.accepted  # continued, not bootstrapped afresh
    assert fleet.decision("v").analyzer is AnalyzerName.QUEUEING_MODEL


# ---- learning every model's variants at once (`QueueingModel.prepare`) -----------------------------------------


def _two_model_fleet() -> Fleet:
    """Two models of two variants each, learning α, β, γ with the queueing analyzer, on one virtual clock."""
    cms = configset(extra=[(CONTROLLER_NS, QUEUEING_CM, {"default": "sloMultiplier: 3\ntuningEnabled: true\n"})])
    specs = [
        core_spec(f"{model}-{gpu}", model=model, accelerator=gpu.upper(), max_replicas=20)
        for model in ("llama-70b", "qwen-7b")
        for gpu in ("a100", "l4")
    ]
    return Fleet(specs=specs, config=EngineConfig(configmaps=cms), replicas={s.key.name: 2 for s in specs})


def _two_model_pods(fleet: Fleet, cycle: int) -> list[PodMetrics]:
    rate = 1.0 + 0.4 * (cycle % 3)
    return [pod for s in fleet.specs for pod in _pods(s.key.name, fleet.replicas[s.key.name], rate)]


def _run(monkeypatch: pytest.MonkeyPatch, prepare: object | None) -> tuple[list[object], Fleet]:
    with monkeypatch.context() as patch:
        if prepare is not None:
            patch.setattr(qm.QueueingModel, "prepare", prepare)
        fleet = _two_model_fleet()
        results = [fleet.cycle(T0 + 30 * c, _two_model_pods(fleet, c)) for c in range(6)]
    return results, fleet


def _idle_prepare(self: object, models: object, memory: object, now_s: float) -> object:
    return memory


def _failing_prepare(self: object, models: object, memory: object, now_s: float) -> object:
    raise RuntimeError("injected prepare bug")


@pytest.mark.parametrize(
    ("prepare", "warned"),
    [
        pytest.param(_idle_prepare, False, id="prepare-does-nothing"),
        pytest.param(_failing_prepare, True, id="prepare-fails"),
    ],
)
def test_learning_prepared_for_every_model_at_once_decides_as_each_model_alone(
    monkeypatch: pytest.MonkeyPatch, prepare: object, warned: bool
) -> None:
    """The lockstep over both models' variants gives each filter what its model's own analysis learns: the same
    decisions, analyses and filters, cycle after cycle; the memory kept is the filters alone (what `prepare` adds
    is never carried); a failed `prepare` is a cycle warning, never a model's error."""
    prepared, fleet = _run(monkeypatch, None)
    alone, other = _run(monkeypatch, prepare)
    filters = fleet.state.memory(qm.ANALYZER)
    assert type(filters) is dict
    assert len(filters) == 4
    assert all(f.accepted > 0 for f in filters.values())
    assert other.state.memory(qm.ANALYZER) == filters
    assert_prepared_decides_as_alone(prepared, alone, warned=warned)  # type: ignore[arg-type]
    if warned:
        assert any("RuntimeError: injected prepare bug" in w for r in alone for w in r.warnings)  # type: ignore[attr-defined]
    assert {d.analyzer for r in prepared for d in r.decisions.values()} == {AnalyzerName.QUEUEING_MODEL}  # type: ignore[attr-defined]


def test_a_model_whose_own_preparation_raises_is_that_models_error_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """`prepare` leaves out a model whose own part raises (a bug): its analysis does the stages alone, where the
    error is its own; the other model decides as without the bug, and no warning says preparing failed."""
    fleet = _two_model_fleet()
    healthy = fleet.cycle(T0, _two_model_pods(fleet, 0))
    restore = qm.remembered

    def broken(views: object, memory: object) -> object:
        if any(v.spec.model_id == "qwen-7b" for v in views):  # type: ignore[attr-defined]
            raise RuntimeError("injected restore bug")
        return restore(views, memory)  # type: ignore[arg-type]

    with monkeypatch.context() as patch:
        patch.setattr(qm, "remembered", broken)
        fleet = _two_model_fleet()
        result = fleet.cycle(T0, _two_model_pods(fleet, 0))
    errors = result.errors
    assert list(errors) == [ModelKey("llm", "qwen-7b")]
    assert "RuntimeError: injected restore bug" in errors[ModelKey("llm", "qwen-7b")]
    assert not any("preparing" in w for w in result.warnings)
    llama = [k for k in result.decisions if k.name.startswith("llama")]
    assert llama
    assert all(result.decisions[k] == healthy.decisions[k] for k in llama)
