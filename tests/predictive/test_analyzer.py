"""The predictive analyzer through the engine (adapter/analyzers/predictive/analyzer.py), on a virtual clock:
a periodic burst served a lead ahead, overload brought back within one cycle, a strong variant started from
zero replicas, the prefill-chunk advice, what it says when it cannot decide, its state across a restart or a
fail-over, and monotonicity in the load."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.analyzers.memory import StateFormatError
from adapter.analyzers.predictive import analyzer as predictive
from adapter.analyzers.predictive.analyzer import CHECKPOINT_INTERVAL_S, LEARNED_SECTION, ModelState
from adapter.analyzers.predictive.forecast import ForecastConfig
from adapter.config.configmaps import QUEUEING_CM
from adapter.config.engine import EngineConfig
from adapter.domain.capacity import VariantSupply
from adapter.domain.decision import AnalyzerName
from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.latency import LatencyHistogram, ModelLatency
from adapter.domain.snapshot import DesiredAlloc, ModelTraffic, PodMetrics, Snapshot, VariantStatus
from tests.core.builders import CONTROLLER_NS, T0, Fleet, assert_prepared_decides_as_alone, configset, key, spec

NS = "llm"
MODEL = ModelKey(NS, "llama-70b")
STEP_S = 30.0
A100 = "alpha: 9.5, beta: 0.066, gamma: 0.00008"
L4 = "alpha: 55, beta: 0.17, gamma: 0.0006"
H100 = "alpha: 6.5, beta: 0.022, gamma: 0.00005"


def predictive_config(profiles: dict[str, str], **settings_: object) -> EngineConfig:
    lines = ["targetTTFT: 2000", "targetITL: 100", "startupTime: 5m", "acceleratorProfiles:"]
    lines += [f"  {accelerator}: {{{params}}}" for accelerator, params in profiles.items()]
    lines += [f"{k}: {v}" for k, v in settings_.items()]
    return EngineConfig(
        configmaps=configset(
            saturation="analyzerName: predictive\n",
            extra=[(CONTROLLER_NS, QUEUEING_CM, {"default": "\n".join(lines) + "\n"})],
        )
    )


def busy_pods(variant: str, replicas: int, total_rps: float, *, queue: float = 0.0) -> list[PodMetrics]:
    each = total_rps / max(replicas, 1)
    return [
        PodMetrics(
            NS,
            f"{variant}-{i}",
            variant,
            kv_cache_usage=0.2,
            queue_length=queue / max(replicas, 1),
            arrival_rate_rps=each,
            avg_input_tokens=800.0,
            avg_output_tokens=200.0,
            max_batch_size=256,
        )
        for i in range(replicas)
    ]


class PredictiveFleet(Fleet):
    """Fleet whose snapshot can carry an EPP queue and latency histograms."""

    epp_queue: float | None = None
    latency: ModelLatency | None = None

    def snapshot(self, now_s: float, pods, *, metrics: bool = True) -> Snapshot:  # type: ignore[no-untyped-def, override]
        snap = super().snapshot(now_s, pods, metrics=metrics)
        traffic = ModelTraffic(key=MODEL, request_count=100.0, epp_queue_size=self.epp_queue, latency=self.latency)
        return Snapshot(
            taken_at_s=snap.taken_at_s,
            variants=snap.variants,
            pods=snap.pods,
            models={MODEL: traffic},
            metrics_available=snap.metrics_available,
        )


def one_variant_fleet(**settings_: object) -> PredictiveFleet:
    return PredictiveFleet(
        specs=[spec("a100", accelerator="A100", cost=2.5, max_replicas=20)],
        config=predictive_config({"A100": A100}, **settings_),
        replicas={"a100": 1},
    )


def play(fleet: PredictiveFleet, rates: list[float], *, start: int = 0) -> None:
    for i, rate in enumerate(rates):
        fleet.cycle(T0 + STEP_S * (start + i), busy_pods("a100", fleet.replicas["a100"], rate))


def bursts(cycles: int, *, period: int = 30, width: int = 4, first: int = 10, base: float = 4.0, peak: float = 30.0):
    return [peak if (i - first) % period < width and i >= first else base for i in range(cycles)]


# ---- a burst a lead ahead -------------------------------------------------------------------------------------


def test_a_periodic_burst_is_served_a_lead_ahead() -> None:
    """Bursts every 15 minutes (30 cycles), 2 minutes long. After two of them, 5 minutes (the lead) before the
    third, the analyzer asks for the burst's capacity while the arrival rate is still the base load."""
    fleet = one_variant_fleet()
    history = bursts(61)  # bursts at cycles 10 and 40; the next at 70
    play(fleet, history)  # the fleet holds one replica throughout (no actuation), like a frozen world
    analysis = fleet.last.analyses[MODEL].analysis if fleet.last else {}
    forecast = analysis["demand"]["forecast"]
    assert forecast["period_s"] == 30 * STEP_S
    assert analysis["demand"]["arrival_rps"] == pytest.approx(4.0)
    assert analysis["demand"]["demand_rps"] > 25.0
    assert fleet.desired()["a100"] >= 3  # ~30 req/s at ~8 req/s per A100 at the tightened SLO


def test_without_the_period_the_same_moment_is_not_scaled() -> None:
    fleet = one_variant_fleet()
    play(fleet, [4.0] * 61)
    assert fleet.desired()["a100"] == 1
    assert fleet.last is not None
    assert fleet.last.analyses[MODEL].analysis["demand"]["forecast"]["period_s"] is None


# ---- the lead ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("samples", "lead_s"),
    [
        pytest.param((), 300.0, id="none-the-prior"),
        pytest.param((120.0, 200.0), 300.0, id="two-short-the-prior"),
        pytest.param((720.0,), 720.0, id="one-longer-than-the-prior-wins"),
        pytest.param((100.0, 110.0, 120.0, 130.0, 900.0), 900.0, id="five-the-largest-over-the-prior"),
        pytest.param((*(float(x) for x in range(100, 200, 10)), 600.0), 190.0, id="p90-of-eleven-under-the-prior"),
        pytest.param(tuple(float(x) for x in range(100, 200, 10)), 180.0, id="p90-of-ten-under-the-prior"),
        pytest.param((100.0, 110.0, 120.0), 300.0, id="three-short-the-prior"),
        pytest.param(tuple(float(x) for x in range(100, 190, 10)), 300.0, id="nine-short-the-prior"),
    ],
)
def test_the_lead_is_the_p90_startup_or_before_ten_samples_the_longest_of_them_and_the_prior(
    samples: tuple[float, ...], lead_s: float
) -> None:
    assert predictive._lead_s(samples, 300.0) == lead_s


TEN_FAST = tuple(float(x) for x in range(20, 40, 2))  # 10 samples, p90 (the 9th smallest) 36 s
NINE_FAST = TEN_FAST[:9]


@pytest.mark.parametrize(
    ("samples", "leads"),
    [
        pytest.param({"a100": TEN_FAST, "l40s": ()}, {"a100": 36.0, "l40s": 36.0}, id="sibling-with-ten-lends-its-p90"),
        pytest.param({"a100": NINE_FAST, "l40s": ()}, {"a100": 300.0, "l40s": 300.0}, id="nine-are-not-enough"),
        pytest.param(
            {"a100": TEN_FAST, "l40s": (90.0,)}, {"a100": 36.0, "l40s": 90.0}, id="own-longer-sample-over-the-sibling"
        ),
        pytest.param(
            {"a100": TEN_FAST, "h100": (*TEN_FAST[1:], 50.0), "l40s": ()},
            {"a100": 36.0, "h100": 38.0, "l40s": 38.0},
            id="the-longest-sibling-p90",
        ),
        pytest.param({"a100": (), "l40s": ()}, {"a100": 300.0, "l40s": 300.0}, id="no-samples-startup-time"),
    ],
)
def test_a_variant_without_samples_borrows_a_reliable_siblings_lead(
    samples: dict[str, tuple[float, ...]], leads: dict[str, float]
) -> None:
    cfg, _ = predictive_config({"A100": A100}).configmaps.queueing(MODEL)
    assert predictive._leads(samples, cfg) == leads


class SlowStartFleet(PredictiveFleet):
    """The A100 target reports one pod that took 12 minutes from creation to Ready."""

    def snapshot(self, now_s: float, pods, *, metrics: bool = True) -> Snapshot:  # type: ignore[no-untyped-def, override]
        snap = super().snapshot(now_s, pods, metrics=metrics)
        views = tuple(
            replace(v, target=replace(v.target, startup_s=(720.0,))) if v.target is not None else v
            for v in snap.variants
        )
        return replace(snap, variants=views)


def test_a_startup_longer_than_the_default_is_the_lead_before_a_p90_exists() -> None:
    fleet = SlowStartFleet(
        specs=[spec("a100", accelerator="A100", cost=2.5, max_replicas=20)],
        config=predictive_config({"A100": A100}),
        replicas={"a100": 1},
    )
    play(fleet, [4.0, 4.0])
    assert fleet.last is not None
    assert fleet.last.analyses[MODEL].analysis["demand"]["lead_s"] == 720.0


# ---- arrivals unknown are not zero ------------------------------------------------------------------------------


def unreported(pods: list[PodMetrics]) -> list[PodMetrics]:
    """The same pods with no arrival rate (Prometheus had fewer than two samples in the window, a scrape gap)."""
    return [replace(p, arrival_rate_rps=None) for p in pods]


@pytest.mark.parametrize(
    ("rates", "expected"),
    [
        pytest.param([None, 10.0, 10.0], [10.0, 10.0], id="unknown-first-cycle-not-a-point"),
        pytest.param([10.0, None, 10.0], [10.0, 10.0, 10.0], id="unknown-gap-holds-the-last-value"),
        pytest.param([10.0, 0.0, 10.0], [10.0, 0.0, 10.0], id="reported-zero-is-a-zero"),
    ],
)
def test_a_cycle_without_arrival_rates_leaves_the_forecast_history_alone(
    rates: list[float | None], expected: list[float]
) -> None:
    """A cycle whose pods reported no rate is not an observation: the history's grid fills the skipped step with
    the last value, as for a cycle that did not run; a reported 0 (idle pods) is an observation."""
    fleet = one_variant_fleet()
    for i, rate in enumerate(rates):
        pods = busy_pods("a100", 1, rate or 0.0)
        fleet.cycle(T0 + STEP_S * i, unreported(pods) if rate is None else pods)
    forecaster = fleet.state.memory(predictive.ANALYZER).models[MODEL].forecaster
    assert list(forecaster.values) == pytest.approx(expected)


def test_a_scrape_gap_does_not_read_as_a_drop_and_a_ramp() -> None:
    """A steady 10 req/s with one cycle whose pods reported no rate: read as 0 it was a drop and the next cycle a
    rise, whose slope the trend extrapolated over the lead; unknown, the forecast stays at the steady level."""
    fleet = one_variant_fleet()
    play(fleet, [10.0] * 20)
    assert predictive.UNREPORTED_NOTE not in fleet.decision("a100").notes
    fleet.cycle(T0 + STEP_S * 20, unreported(busy_pods("a100", 1, 10.0)))
    assert predictive.UNREPORTED_NOTE in fleet.decision("a100").notes  # said in the decision and `explain`
    play(fleet, [10.0] * 2, start=21)
    assert fleet.last is not None
    forecast = fleet.last.analyses[MODEL].analysis["demand"]["forecast"]
    assert forecast["trend_rps"] < 11.0
    assert forecast["slope_rps_per_s"] == pytest.approx(0.0, abs=1e-6)


def test_after_a_burst_scale_down_keeps_room_for_the_next() -> None:
    """A burst (4 → 30 req/s for 2 minutes) brought 5 replicas. Back at 4 req/s, no season known yet, the load has
    risen from about 4 to 30 within a startup on most occasions seen: room for 30 req/s stays, and the decision says
    why. Once calm steps outnumber those occasions three to one, the spare replicas go."""
    fleet = one_variant_fleet()
    play(fleet, [4.0] * 12 + [30.0] * 4)
    fleet.replicas["a100"] = 5
    play(fleet, [4.0] * 6, start=16)
    per_replica = fleet.last.analyses[MODEL].analysis["variants"]["a100"]["capacity_rps"] if fleet.last else 0.0
    burst_replicas = math.ceil(30.0 / per_replica)
    assert burst_replicas >= 3
    assert fleet.desired()["a100"] >= burst_replicas  # room for the burst, not only for 4 req/s
    assert any(n.startswith("scale-down keeps room for") for n in fleet.decision("a100").notes)
    assert fleet.last is not None
    assert fleet.last.analyses[MODEL].analysis["held_rps"] > 25.0
    play(fleet, [4.0] * 40, start=22)
    assert fleet.desired()["a100"] < burst_replicas
    assert not any(n.startswith("scale-down keeps room for") for n in fleet.decision("a100").notes)


# ---- scale-down hysteresis -------------------------------------------------------------------------------------


def a100_capacity_rps() -> float:
    """One A100's capacity at the tightened SLO for `busy_pods`' requests (read from the analysis)."""
    fleet = one_variant_fleet()
    play(fleet, [1.0])
    assert fleet.last is not None
    return float(fleet.last.analyses[MODEL].analysis["variants"]["a100"]["capacity_rps"])


@pytest.mark.parametrize(
    ("replicas", "asked", "asked_ago_s", "load", "desired"),
    [
        pytest.param(2, None, 0.0, 0.95, 2, id="within-the-margin-nothing-asked-stays"),
        pytest.param(2, 1, STEP_S, 0.95, 1, id="asked-down-kept-while-the-rest-holds-the-demand"),
        pytest.param(2, 1, STEP_S, 1.05, 2, id="asked-down-withdrawn-when-the-rest-cannot-hold-it"),
        pytest.param(20, 16, STEP_S, 15.0, 16, id="asked-down-kept-not-deepened-without-the-margin"),
        pytest.param(20, None, 0.0, 15.0, 17, id="a-large-fleet-goes-down-by-the-margin"),
        pytest.param(2, 1, 10 * STEP_S, 0.95, 2, id="an-old-decision-is-not-pending"),
        pytest.param(2, 1, STEP_S, 0.5, 1, id="far-below-the-margin-goes-down-anyway"),
    ],
)
def test_a_scale_down_asked_for_stays_asked_while_the_fleet_without_it_holds_the_demand(
    replicas: int, asked: int | None, asked_ago_s: float, load: float, desired: int
) -> None:
    """The Schmitt trigger of `_pending_removal`: going down needs the demand to fit with `SPARE_MARGIN` (10 %) to
    spare; staying down, while HPA's stabilization window has not yet removed the replica, only that it fits. A
    constant load of `load` × one A100's capacity c on `replicas` A100s: with the margin a replica goes when
    (replicas − 1)·c ≥ 1.1·load·c; asked last cycle, when (replicas − 1)·c ≥ load·c, and never deeper than asked
    (20 A100s at 15·c: the margin frees 3.5·c, three replicas; asked for 16, the four asked for go, not the five
    that 20·c − 15·c would free)."""
    c = a100_capacity_rps()
    fleet = one_variant_fleet()
    fleet.replicas["a100"] = replicas
    if asked is not None:
        fleet.statuses[key("a100", NS)] = VariantStatus(desired=DesiredAlloc(asked, "", T0 - asked_ago_s, None))
    fleet.cycle(T0, busy_pods("a100", replicas, load * c))
    assert fleet.last is not None
    analysis = fleet.last.analyses[MODEL].analysis
    assert analysis["demand"]["demand_rps"] == pytest.approx(load * c)
    assert analysis["variants"]["a100"]["capacity_rps"] == pytest.approx(c)
    assert fleet.desired()["a100"] == desired


# ---- overload ----------------------------------------------------------------------------------------------------


def test_overload_is_sized_from_arrivals_and_the_backlog_in_one_cycle() -> None:
    """Two replicas drowning: 40 req/s arriving, 600 requests queued in the pods and 300 in the EPP. The demand is
    arrivals + backlog / 60 s = 40 + 15 = 55 req/s; the answer comes in this cycle, not over ten."""
    fleet = one_variant_fleet()
    fleet.replicas["a100"] = 2
    fleet.epp_queue = 300.0
    play(fleet, [10.0] * 5)  # a calm history
    fleet.cycle(T0 + STEP_S * 5, busy_pods("a100", 2, 40.0, queue=600.0))
    assert fleet.last is not None
    demand = fleet.last.analyses[MODEL].analysis["demand"]
    assert demand["backlog"] == pytest.approx(900.0)
    assert demand["backlog_rps"] == pytest.approx(15.0)
    assert demand["demand_rps"] >= 55.0
    per_replica = fleet.last.analyses[MODEL].analysis["variants"]["a100"]["capacity_rps"]
    assert fleet.desired()["a100"] >= math.ceil(55.0 / per_replica)


# ---- a variant at zero -----------------------------------------------------------------------------------------


def test_a_strong_variant_at_zero_is_started_when_the_cheap_one_cannot_serve_the_slo() -> None:
    """A cheap L4 (α 55 ms) cannot keep a 100-ms ITL under load; a dearer H100 at zero replicas, sized by its
    profile, can: the allocation starts the H100 and does not grow the L4."""
    fleet = PredictiveFleet(
        specs=[
            spec("l4", accelerator="L4", cost=0.8, min_replicas=1, max_replicas=12),
            spec("h100", accelerator="H100", cost=4.0, min_replicas=0, max_replicas=4),
        ],
        config=predictive_config({"L4": L4, "H100": H100}),
        replicas={"l4": 1, "h100": 0},
    )
    for i in range(3):
        fleet.cycle(T0 + STEP_S * i, busy_pods("l4", 1, 6.0))
    desired = fleet.desired()
    assert desired["h100"] >= 1
    assert desired["l4"] == 1
    assert fleet.last is not None
    variants = fleet.last.analyses[MODEL].analysis["variants"]
    assert variants["h100"]["params_source"] == "profile"
    assert variants["l4"]["capacity_rps"] == 0.0  # an SLO it meets only nearly idle: never scaled for it


def test_without_a_profile_a_variant_at_zero_is_unknown_and_said_so() -> None:
    fleet = PredictiveFleet(
        specs=[
            spec("a100", accelerator="A100", cost=2.5, max_replicas=8),
            spec("h100", accelerator="H100", cost=4.0, min_replicas=0, max_replicas=4),
        ],
        config=predictive_config({"A100": A100}),
        replicas={"a100": 1, "h100": 0},
    )
    fleet.cycle(T0, busy_pods("a100", 1, 4.0))
    assert fleet.last is not None
    analysis = fleet.last.analyses[MODEL]
    assert analysis.analysis["variants"]["h100"]["params_source"] == "none"
    assert any("h100: no learned parameters and no profile for H100" in n for n in fleet.decision("a100").notes)


# ---- advice ------------------------------------------------------------------------------------------------------


def test_a_prefill_chunk_over_the_itl_target_is_advice_in_the_analysis_and_the_condition() -> None:
    fleet = one_variant_fleet()
    fleet.cycle(T0, busy_pods("a100", 1, 4.0))
    assert fleet.last is not None
    advice = fleet.last.analyses[MODEL].analysis["advice"]
    assert advice
    assert "max-num-batched-tokens" in advice[0]
    ready = next(c for c in fleet.decision("a100").conditions if c.type == "OptimizationReady")
    assert "advice:" in ready.message


INF = float("inf")
TTFT_EDGES = LatencyHistogram(((1.0, 100.0), (2.5, 100.0), (INF, 100.0)))  # every first token within 1 s
ALL_30_TO_40_MS = LatencyHistogram(((0.025, 0.0), (0.05, 100.0), (INF, 100.0)))  # every request in (25, 50] ms
HALF_BELOW_25_MS = LatencyHistogram(((0.025, 99.5), (0.05, 100.0), (INF, 100.0)))


@pytest.mark.parametrize(
    ("itl_ms", "tpot", "bracket", "advice"),
    [
        pytest.param(50.0, ALL_30_TO_40_MS, None, "", id="targets-on-edges-exact"),
        pytest.param(
            45.0, ALL_30_TO_40_MS, [0.0, 1.0], "TPOT 45 ms is between the edges 25 and 50 ms", id="straddles-advice"
        ),
        pytest.param(45.0, HALF_BELOW_25_MS, [0.995, 1.0], "", id="off-edge-but-over-target-either-way"),
    ],
)
def test_a_target_between_bucket_edges_reads_a_bracket_and_advice_when_it_straddles_the_target(
    itl_ms: float, tpot: LatencyHistogram, bracket: list[float] | None, advice: str
) -> None:
    """The 45-ms case of the probe that found it: every request at 30–40 ms met the SLO, the interpolated
    measure read 80 % (a fifth of the (25, 50] bucket counted above 45 ms) and the headroom rose."""
    slo = predictive.Slo(1000.0, itl_ms, "explicit")
    latency = ModelLatency(window_s=300.0, ttft=TTFT_EDGES, tpot=tpot)
    got_bracket, got_advice = predictive._bucket_bracket(ModelTraffic(MODEL, latency=latency), slo, 0.99)
    assert got_bracket == bracket
    assert (advice in got_advice) if advice else got_advice == ""
    if advice:
        assert "--custom-histogram-buckets" in got_advice


def test_no_latency_evidence_no_bracket() -> None:
    slo = predictive.Slo(2000.0, 45.0, "explicit")
    assert predictive._bucket_bracket(ModelTraffic(MODEL), slo, 0.99) == (None, "")
    assert predictive._bucket_bracket(None, slo, 0.99) == (None, "")


# ---- no decision -------------------------------------------------------------------------------------------------


def test_without_request_sizes_there_is_no_signal_and_a_reason() -> None:
    fleet = one_variant_fleet()
    pods = [PodMetrics(NS, "a100-0", "a100", kv_cache_usage=0.1, queue_length=0.0)]
    fleet.cycle(T0, pods)
    assert fleet.last is not None
    assert fleet.last.analyses[MODEL].analyzer is AnalyzerName.NONE
    assert "no request size" in fleet.last.analyses[MODEL].analysis["reason"]


# ---- restart and fail-over ------------------------------------------------------------------------------------


def test_a_restart_resumes_the_forecast_and_the_headroom_from_va_status() -> None:
    """From the last checkpoint (`CHECKPOINT_INTERVAL_S`): the history continues over the steps it missed."""
    fleet = one_variant_fleet()
    fleet.latency = short_latency()
    play(fleet, bursts(70))
    before = fleet.state
    status = fleet.statuses[VariantKey(NS, "a100")]
    assert LEARNED_SECTION in status.learned
    persisted = ModelState.from_json(status.learned[LEARNED_SECTION], ForecastConfig())
    assert 0 <= T0 + STEP_S * 69 - persisted.saved_s < CHECKPOINT_INTERVAL_S  # the last checkpoint, at most one old
    assert len(persisted.forecaster.values) == round((persisted.saved_s - T0) / STEP_S) + 1
    assert persisted.forecaster.period_steps == 30
    fleet.restart()
    assert fleet.state != before
    fleet.cycle(T0 + STEP_S * 70, busy_pods("a100", fleet.replicas["a100"], 4.0))
    resumed = fleet.state.memory(predictive.ANALYZER).models[MODEL]
    assert len(resumed.forecaster.values) == 71  # continued over the steps since the checkpoint, not started afresh
    assert resumed.forecaster.period_steps == 30
    assert resumed.controller.headroom == pytest.approx(persisted.controller.headroom, rel=0.3)


def _checkpoint_cycles(fleet: PredictiveFleet, cycles: int) -> list[int]:
    """The cycles (0, 1, …) whose result writes the model's `learned.predictive` section."""
    written = []
    for i in range(cycles):
        fleet.cycle(T0 + STEP_S * i, busy_pods("a100", fleet.replicas["a100"], 4.0))
        assert fleet.last is not None
        if LEARNED_SECTION in fleet.last.learned.get(VariantKey(NS, "a100"), {}):
            written.append(i)
    return written


def test_the_state_is_written_at_the_first_analysis_then_once_an_interval_at_the_models_phase() -> None:
    """`CHECKPOINT_INTERVAL_S`: the first checkpoint at once, the next `interval − phase` later, then one an
    interval; the VA's status keeps the last one in between."""
    fleet = one_variant_fleet()
    steps = round(CHECKPOINT_INTERVAL_S / STEP_S)
    phase_s = predictive._checkpoint_phase_s(MODEL)
    first_next = math.ceil((CHECKPOINT_INTERVAL_S - phase_s) / STEP_S)
    written = _checkpoint_cycles(fleet, 3 * steps + first_next + 1)
    assert written == [0, first_next, first_next + steps, first_next + 2 * steps, first_next + 3 * steps]
    status = fleet.statuses[VariantKey(NS, "a100")]
    persisted = ModelState.from_json(status.learned[LEARNED_SECTION], ForecastConfig())
    assert persisted.saved_s == T0 + STEP_S * written[-1]


def test_a_new_leader_writes_its_first_checkpoint_at_once() -> None:
    fleet = one_variant_fleet()
    _checkpoint_cycles(fleet, 3)
    fleet.restart()
    fleet.cycle(T0 + STEP_S * 3, busy_pods("a100", fleet.replicas["a100"], 4.0))
    assert fleet.last is not None
    assert LEARNED_SECTION in fleet.last.learned[VariantKey(NS, "a100")]


def test_models_seen_at_once_checkpoint_in_different_cycles() -> None:
    """The phases of 200 models spread over the interval (a CRC-32 of each name): every tenth of it holds some, so a
    fleet's status writes do not all fall in one cycle."""
    phases = [predictive._checkpoint_phase_s(ModelKey("llm", f"model-{i}")) for i in range(200)]
    assert all(0.0 <= p < CHECKPOINT_INTERVAL_S for p in phases)
    assert {int(10 * p / CHECKPOINT_INTERVAL_S) for p in phases} == set(range(10))


@pytest.mark.parametrize(
    ("checkpointed", "problem"),
    [
        pytest.param("soon", "checkpointedS", id="text"),
        pytest.param(True, "checkpointedS", id="bool"),
        pytest.param(math.inf, "checkpointedS", id="infinite"),
    ],
)
def test_the_memory_json_refuses_a_checkpoint_time_that_is_not_a_number(checkpointed: object, problem: str) -> None:
    keeper = predictive.ANALYZER.memory
    fleet = one_variant_fleet()
    _checkpoint_cycles(fleet, 2)
    memory = fleet.state.memory(predictive.ANALYZER)
    doc = keeper.to_json(memory)
    checkpointed_s = memory.models[MODEL].checkpointed_s
    assert checkpointed_s is not None
    assert keeper.from_json(doc, "state").models[MODEL].checkpointed_s == checkpointed_s  # round-trips
    (entry,) = doc["models"].values()
    entry["checkpointedS"] = checkpointed
    with pytest.raises(StateFormatError, match=problem):
        keeper.from_json(doc, "state")


def test_an_unreadable_persisted_state_is_noted_and_learning_starts_afresh() -> None:
    fleet = one_variant_fleet()
    play(fleet, [4.0] * 3)
    key = VariantKey(NS, "a100")
    fleet.statuses[key] = type(fleet.statuses[key])(
        desired=fleet.statuses[key].desired,
        learned={LEARNED_SECTION: {"forecast": {"stepS": "x"}}},
    )
    fleet.restart()
    fleet.cycle(T0 + STEP_S * 3, busy_pods("a100", 1, 4.0))
    assert any("persisted predictive state unreadable" in n for n in fleet.decision("a100").notes)


def short_latency() -> ModelLatency:
    """Histograms of a window where 90 % of requests met both targets (TTFT 2 s, TPOT 100 ms)."""
    ttft = LatencyHistogram(((1.0, 4.0), (2.0, 4.5), (float("inf"), 5.0)))
    tpot = LatencyHistogram(((0.05, 4.0), (0.1, 5.0), (float("inf"), 5.0)))
    return ModelLatency(window_s=300.0, ttft=ttft, tpot=tpot)


def test_short_attainment_raises_the_headroom_and_the_replicas() -> None:
    fleet = one_variant_fleet()
    fleet.replicas["a100"] = 2
    play(fleet, [10.0] * 12)
    calm = fleet.desired()["a100"]
    fleet.latency = short_latency()  # 90 % attained against a 99 % target
    play(fleet, [10.0] * 12, start=12)
    assert fleet.last is not None
    headroom = fleet.last.analyses[MODEL].analysis["headroom"]
    assert headroom["measured_attainment"] == pytest.approx(0.9)
    assert headroom["value"] > 1.5
    assert fleet.desired()["a100"] > calm


@pytest.mark.parametrize(
    "at_zero_cycles", [pytest.param(0, id="no-gap-raises"), pytest.param(10, id="after-zero-holds")]
)
def test_misses_of_a_window_the_controller_did_not_see_do_not_raise_the_headroom(at_zero_cycles: int) -> None:
    """Scale from zero: while the model had no pod, its analyzer did not run; when the first replica is ready, the
    latency window holds the cold start's misses (requests that waited for a pod), not the headroom's. The
    controller counts the return as capacity grown and waits a window; without the gap the same misses raise H."""
    fleet = one_variant_fleet()
    fleet.replicas["a100"] = 2
    play(fleet, [10.0] * 12)
    fleet.replicas["a100"] = 0
    for i in range(at_zero_cycles):
        fleet.cycle(T0 + STEP_S * (12 + i), [])
    fleet.replicas["a100"] = 2
    fleet.latency = short_latency()  # 90 % attained against a 99 % target
    play(fleet, [10.0] * 3, start=12 + at_zero_cycles)
    assert fleet.last is not None
    headroom = fleet.last.analyses[MODEL].analysis["headroom"]
    assert headroom["measured_attainment"] == pytest.approx(0.9)
    if at_zero_cycles:
        assert headroom["value"] == pytest.approx(1.0)
        assert "capacity grew" in headroom["hold"]
    else:
        assert headroom["value"] > 1.2


# ---- properties --------------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(st.floats(0.5, 60.0), st.floats(0.0, 60.0), st.integers(1, 6))
def test_more_load_never_asks_for_fewer_replicas(rate: float, more: float, replicas: int) -> None:
    def desired(total: float) -> int:
        fleet = one_variant_fleet()
        fleet.replicas["a100"] = replicas
        play(fleet, [rate] * 4)
        fleet.cycle(T0 + STEP_S * 4, busy_pods("a100", replicas, total))
        return fleet.desired()["a100"]

    assert desired(rate + more) >= desired(rate)


# ---- the bridge: capacity short now while only slow-starting replicas are on their way ----------------------


def _sv(name: str, cap: float, current: int, pending: int = 0, hi: int = 16) -> VariantSupply:
    return VariantSupply(name, 1.0, cap, current, 0, hi, ready_replicas=current - pending, pending_replicas=pending)


@pytest.mark.parametrize(
    ("variants", "leads", "now_rps", "shortfall", "slow"),
    [
        pytest.param(
            # The docstring's example: 2 A100 ready (11) + 2 pending, 1 L40S (5.5): soon 27.5 ≥ 26.
            [_sv("a100", 11, 4, pending=2), _sv("l40s", 5.5, 1)],
            {"a100": 900, "l40s": 60},
            26.0,
            None,
            None,
            id="what-serves-soon-covers-the-present",
        ),
        pytest.param(
            [_sv("a100", 11, 4, pending=2), _sv("l40s", 5.5, 1)],
            {"a100": 900, "l40s": 60},
            30.0,
            2.5,
            "a100",
            id="short-now-with-only-slow-replicas-in-flight",
        ),
        pytest.param(
            # A pending L40S arrives within a fast startup: it counts (27.5 + 5.5 ≥ 30).
            [_sv("a100", 11, 2), _sv("l40s", 5.5, 2, pending=1)],
            {"a100": 900, "l40s": 60},
            30.0,
            None,
            None,
            id="fast-replicas-in-flight-count",
        ),
        pytest.param(
            # 300 s against 200 s: under 2x, alike (sampling noise between variants that start alike).
            [_sv("a100", 11, 4, pending=2), _sv("l40s", 5.5, 1)],
            {"a100": 300, "l40s": 200},
            30.0,
            None,
            None,
            id="variants-that-start-alike-never-bridge",
        ),
        pytest.param(
            # 150 s against 60 s: over 2x, but only 90 s apart.
            [_sv("a100", 11, 4, pending=2), _sv("l40s", 5.5, 1)],
            {"a100": 150, "l40s": 60},
            30.0,
            None,
            None,
            id="a-gap-under-two-minutes-never-bridges",
        ),
        pytest.param(
            # The fast variant is at its maximum: nothing to bridge with.
            [_sv("a100", 11, 4, pending=2), _sv("l40s", 5.5, 1, hi=1)],
            {"a100": 900, "l40s": 60},
            30.0,
            None,
            None,
            id="no-room-in-the-fast-variant",
        ),
    ],
)
def test_bridge_buys_the_shortfall_of_the_present_from_the_fast_variants(
    variants: list[VariantSupply], leads: dict[str, float], now_rps: float, shortfall: float | None, slow: str | None
) -> None:
    bridge = predictive._bridge(variants, leads, now_rps)
    if shortfall is None:
        assert bridge is None
        return
    assert bridge is not None
    bridged, short, note = bridge
    assert short == pytest.approx(shortfall)
    by_name = {v.name: v for v in bridged}
    assert by_name[slow].max_replicas == by_name[slow].current_replicas  # no more slow replicas this cycle
    assert all(v.max_replicas == 16 for v in bridged if v.name != slow)
    assert note.startswith("bridge:")
    assert f"only {slow} replicas are on their way" in note


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        pytest.param(
            # The first pods: an A100 that took 600 s, an L40S 30 s; below 10 samples both leads are at least the
            # 300-s prior, so the leads (600, 300) are only 2x apart; their own startups are 20x.
            {"a100": (600.0,), "l40s": (30.0,)},
            {"a100": 600.0, "l40s": 30.0},
            id="their-own-startups-not-the-prior",
        ),
        pytest.param(
            {"a100": (), "l40s": (30.0, 45.0)},
            {"l40s": 37.5},
            id="a-variant-never-seen-starting-is-left-out",
        ),
        pytest.param(
            # Alike (median 120 s, p90 300): the variant scaled often has shown its tail, the other its first pod.
            {"a100": (95.0, 120.0, 130.0, 410.0, 350.0), "l40s": (120.0,)},
            {"a100": 130.0, "l40s": 120.0},
            id="the-median-not-the-tail-of-the-variant-scaled-more",
        ),
    ],
)
def test_speeds_are_what_each_variant_s_own_pods_showed(
    samples: dict[str, tuple[float, ...]], expected: dict[str, float]
) -> None:
    assert predictive._speeds(samples) == expected


def test_a_variant_never_seen_starting_is_neither_fast_nor_slow() -> None:
    """An A100 whose pods started in 120 s and an L40S at zero, never seen starting: no bridge, whatever its prior."""
    variants = [_sv("a100", 11, 2), _sv("l40s", 5.5, 0)]
    assert predictive._bridge(variants, predictive._speeds({"a100": (120.0,), "l40s": ()}), 40.0) is None


# ---- learning every model's variants at once (`Predictive.prepare`) ---------------------------------------------


def _learning_fleet() -> Fleet:
    """Two models of two variants each, learning α, β, γ (no profiles), on one virtual clock."""
    specs = [
        spec(f"{model}-{gpu.lower()}", accelerator=gpu, cost=cost, max_replicas=20, model=model)
        for model in ("llama-70b", "qwen-7b")
        for gpu, cost in (("A100", 2.5), ("L4", 0.8))
    ]
    lines = "targetTTFT: 2000\ntargetITL: 100\nstartupTime: 5m\n"
    config = EngineConfig(
        configmaps=configset(
            saturation="analyzerName: predictive\n", extra=[(CONTROLLER_NS, QUEUEING_CM, {"default": lines})]
        )
    )
    return Fleet(specs=specs, config=config, replicas={s.key.name: 2 for s in specs})


def _timed_pods(fleet: Fleet, cycle: int) -> list[PodMetrics]:
    """Busy pods whose TTFT and ITL the queueing model gives at each GPU's true parameters (a little apart)."""
    from adapter.analyzers.queueing.model import QueueModel, RequestSize, ServiceParams

    true = {"A100": (9.5, 0.066, 8e-5), "L4": (55.0, 0.17, 6e-4)}
    pods = []
    for s in fleet.specs:
        for i in range(fleet.replicas[s.key.name]):
            rate = 0.5 + 0.1 * i + 0.05 * (cycle % 3)
            size = RequestSize(800.0 + 40 * i, 200.0)
            m = QueueModel(ServiceParams(*true[s.accelerator]), size, max_batch=256, max_queue=2560).analyze(rate)
            pods.append(
                PodMetrics(
                    s.key.namespace,
                    f"{s.key.name}-{i}",
                    s.key.name,
                    kv_cache_usage=0.2,
                    queue_length=0.0,
                    arrival_rate_rps=rate,
                    avg_input_tokens=size.input_tokens,
                    avg_output_tokens=size.output_tokens,
                    max_batch_size=256,
                    avg_ttft_s=m.ttft_ms * (1.0 + 0.01 * i) / 1000.0,
                    avg_itl_s=m.itl_ms / 1000.0,
                )
            )
    return pods


def _learned_run(monkeypatch: pytest.MonkeyPatch, prepare: object | None) -> tuple[list[object], Fleet]:
    with monkeypatch.context() as patch:
        if prepare is not None:
            patch.setattr(predictive.Predictive, "prepare", prepare)
        fleet = _learning_fleet()
        results = [fleet.cycle(T0 + STEP_S * c, _timed_pods(fleet, c)) for c in range(6)]
    return results, fleet


def _failing_prepare(self: object, models: object, memory: object, now_s: float) -> object:
    raise RuntimeError("injected prepare bug")


def _idle_prepare(self: object, models: object, memory: object, now_s: float) -> object:
    return memory


@pytest.mark.parametrize(
    "lockstep_from",
    [pytest.param(None, id="lambda-star-one-by-one"), pytest.param(1, id="lambda-star-in-lockstep")],
)
@pytest.mark.parametrize(
    ("prepare", "warned"),
    [
        pytest.param(_idle_prepare, False, id="prepare-does-nothing"),
        pytest.param(_failing_prepare, True, id="prepare-fails"),
    ],
)
def test_learning_prepared_for_every_model_at_once_decides_as_each_model_alone(
    monkeypatch: pytest.MonkeyPatch, prepare: object, warned: bool, lockstep_from: int | None
) -> None:
    """The lockstep over both models' variants gives each filter what its model's own analysis learns (and what
    a failed `prepare` leaves it to learn), and each variant the λ* its model finds alone — also with every λ*
    searched in lockstep (a query's answer there does not depend on its neighbours): the same decisions, analyses
    and filters, cycle after cycle; a failed `prepare` is a cycle warning, never a model's error."""
    if lockstep_from is not None:
        from adapter.analyzers.queueing import model as queue_model

        monkeypatch.setattr(queue_model, "LOCKSTEP_FROM", lockstep_from)
    prepared, fleet = _learned_run(monkeypatch, None)
    alone, other = _learned_run(monkeypatch, prepare)
    filters = fleet.state.memory(predictive.ANALYZER).filters
    assert len(filters) == 4  # every variant learned
    assert all(f.accepted > 0 for f in filters.values())
    assert other.state.memory(predictive.ANALYZER).filters == filters
    assert_prepared_decides_as_alone(prepared, alone, warned=warned)  # type: ignore[arg-type]
    if warned:
        assert any("RuntimeError: injected prepare bug" in w for r in alone for w in r.warnings)  # type: ignore[attr-defined]


def test_an_unreadable_persisted_filter_is_noted_when_learning_is_prepared() -> None:
    """After a restart the filters come from VA status, read once by `prepare`: one that cannot be read is noted on
    its model's decisions (as when the model learns alone) and its variant learns afresh (a cold start)."""
    from adapter.analyzers.predictive.analyzer import FILTER_SECTION

    fleet = _learning_fleet()
    for c in range(2):
        fleet.cycle(T0 + STEP_S * c, _timed_pods(fleet, c))
    key = VariantKey(NS, "llama-70b-a100")
    status = fleet.statuses[key]
    fleet.statuses[key] = type(status)(desired=status.desired, learned={**status.learned, FILTER_SECTION: {"x": 1}})
    fleet.restart()
    fleet.cycle(T0 + STEP_S * 2, _timed_pods(fleet, 2))
    assert any("persisted filter state unreadable" in n for n in fleet.decision("llama-70b-a100").notes)
    learned = fleet.state.memory(predictive.ANALYZER).filters
    assert learned[key].accepted == 0  # started afresh from this cycle's pods
    assert learned[VariantKey(NS, "llama-70b-l4")].accepted > 0  # read back from its status and updated


def test_a_model_whose_own_preparation_raises_is_that_models_error_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """`prepare` leaves out a model whose own part raises (a bug) and prepares the others: that model's analysis
    does the steps alone, where the error is its own; the other model decides as without the bug, and the cycle
    has no warning that preparing failed."""
    fleet = _learning_fleet()
    healthy = fleet.cycle(T0, _timed_pods(fleet, 0))
    restore = predictive._restore_and_observe

    def broken(model: object, *args: object, **kwargs: object) -> object:
        if model.model.model_id == "qwen-7b":  # type: ignore[attr-defined]
            raise RuntimeError("injected restore bug")
        return restore(model, *args, **kwargs)  # type: ignore[arg-type]

    with monkeypatch.context() as patch:
        patch.setattr(predictive, "_restore_and_observe", broken)
        fleet = _learning_fleet()
        result = fleet.cycle(T0, _timed_pods(fleet, 0))
    errors = result.errors  # type: ignore[attr-defined]
    assert list(errors) == [ModelKey(NS, "qwen-7b")]
    assert "RuntimeError: injected restore bug" in errors[ModelKey(NS, "qwen-7b")]
    assert not any("preparing" in w for w in result.warnings)  # type: ignore[attr-defined]
    llama = [k for k in result.decisions if k.name.startswith("llama")]  # type: ignore[attr-defined]
    assert llama
    assert all(result.decisions[k] == healthy.decisions[k] for k in llama)  # type: ignore[attr-defined]
