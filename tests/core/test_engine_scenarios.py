"""`adapter.engine.decide` + `statuses` played forward on a virtual clock (30 s cycles).

Each test builds a Snapshot per cycle through `builders.Fleet`, which carries VA status (what the leader writes)
and EngineState (this process's memory) from cycle to cycle, and can play the external autoscaler (`apply`).
Load levels use seed 000's recommended thresholds (0.80 / 5, triggers 0.10 / 3).
"""

from __future__ import annotations

import math

import pytest

from adapter.config.engine import EngineConfig
from adapter.domain.decision import AnalyzerName
from adapter.domain.snapshot import ConditionType, DecisionPath
from adapter.enforcer.fallback import FALLBACK_PRESERVE_REASON

from .builders import (
    CONTROLLER_NS,
    MODEL,
    MODEL_KEY,
    NS,
    T0,
    Fleet,
    condition,
    configset,
    key,
    pod,
    pods,
    s2z_yaml,
    same_pods,
    spec,
)

# kv 0.75: spare 0.05 < 0.10 -> scale-up.
HOT = (0.75, 0.0)
# kv 0.6: spare 0.2 >= 0.1 (no scale-up); with N >= 2 the removal leaves < 0.1 (N=6: 0.6 x 6/5 = 0.72 -> 0.08)
STEADY = (0.6, 0.0)
# idle: scale-down safe with N >= 2
IDLE = (0.0, 0.0)
CYCLE = 30.0


def two_variants(**config) -> Fleet:
    return Fleet(
        specs=[spec("cheap", cost=5), spec("dear", cost=20)],
        config=EngineConfig(configmaps=configset(**config)),
        replicas={"cheap": 2, "dear": 2},
    )


def load(fleet: Fleet, level: tuple[float, float], reporting: dict[str, int] | None = None):
    """One pod per running replica of every variant (or `reporting[v]` pods), all at `level`."""
    counts = reporting or {s.key.name: fleet.replicas.get(s.key.name, 0) for s in fleet.specs}
    return tuple(p for name, n in counts.items() for p in same_pods(name, n, *level))


# ---- scale-up, hold during the transition, stable again --------------------------------------------------


def test_a_scale_up_is_held_while_the_new_replica_starts_and_the_model_is_stable_once_it_reports():
    fleet = two_variants()
    fleet.cycle(T0, load(fleet, HOT))
    assert fleet.desired() == {"cheap": 3, "dear": 2}  # cheapest +1
    first = fleet.statuses[key("cheap")].desired
    assert first is not None
    assert first.last_update_s == T0
    # The HPA applies: 3 replicas, one still loading (2 ready, 2 reporting). Saturation persists.
    fleet.replicas["cheap"], fleet.ready["cheap"] = 3, 2
    for i in (1, 2):
        now = T0 + i * CYCLE
        fleet.cycle(now, load(fleet, HOT, {"cheap": 2, "dear": 2}))
        assert fleet.desired() == {"cheap": 3, "dear": 2}, f"cycle {i}: blocked, no cascade to 4"
        held = fleet.statuses[key("cheap")].desired
        assert held is not None
        assert held.last_update_s == T0, "a held transition keeps its lastUpdate"
        assert held.last_run_time_s == now
    # All three pods report; load relieved to STEADY (N=5: 0.6 x 5/4 = 0.75 -> 0.05 < 0.1, unsafe): hold at 3.
    fleet.ready["cheap"] = 3
    fleet.cycle(T0 + 3 * CYCLE, load(fleet, STEADY))
    assert fleet.desired() == {"cheap": 3, "dear": 2}
    assert fleet.decision("cheap").reason == "saturation-only mode: no-change"
    # Still hot with everyone reporting: a new decision is allowed (cheap 3 -> 4).
    fleet.cycle(T0 + 4 * CYCLE, load(fleet, HOT))
    assert fleet.desired() == {"cheap": 4, "dear": 2}


def test_an_unapplied_scale_up_blocks_until_the_transition_timeout_then_the_model_re_decides():
    # Documented deviation: the transition timeout (default 5 min) unblocks a model whose requested
    # transition was never applied (e.g. swallowed by HPA tolerance). Nothing ever applies the 3.
    fleet = two_variants()
    fleet.cycle(T0, load(fleet, HOT))
    assert fleet.desired()["cheap"] == 3
    for i in range(1, 10):  # T0+30 .. T0+270 < 300: blocked at the sticky 3, whatever the load
        fleet.cycle(T0 + i * CYCLE, load(fleet, IDLE))
        assert fleet.desired() == {"cheap": 3, "dear": 2}, f"cycle {i}"
    # T0+300: age 300 >= 300 -> re-decide from current (2, 2): idle -> scale down the most expensive.
    fleet.cycle(T0 + 10 * CYCLE, load(fleet, IDLE))
    assert fleet.desired() == {"cheap": 2, "dear": 1}
    assert any("not applied" in note for note in fleet.decision("cheap").notes)


def test_a_lowered_max_replicas_clamps_a_held_transition_immediately():
    fleet = two_variants()
    fleet.cycle(T0, load(fleet, HOT))
    assert fleet.desired()["cheap"] == 3
    # The admin lowers cheap's maxReplicas to 2 while the 3 is still pending.
    fleet.specs = [spec("cheap", cost=5, max_replicas=2), spec("dear", cost=20)]
    fleet.cycle(T0 + CYCLE, load(fleet, HOT))
    assert fleet.desired()["cheap"] == 2


# ---- metrics outage, retention, recovery -------------------------------------------------------------------


def test_a_metrics_outage_preserves_the_allocation_then_applies_scenario_c_after_retention_then_recovers():
    fleet = Fleet(
        specs=[spec("cheap", cost=5), spec("dear", cost=20)],
        config=EngineConfig(configmaps=configset(scale_to_zero=s2z_yaml(False, "5m"))),
        replicas={"cheap": 3, "dear": 3},
    )
    # N=6 at 0.6: no scale-up (0.2 >= 0.1), removal leaves 0.8 - 0.72 = 0.08 < 0.1 -> hold 3/3.
    fleet.cycle(T0, load(fleet, STEADY))
    assert fleet.desired() == {"cheap": 3, "dear": 3}
    # Prometheus goes away at T0+30: the fallback allocation (this process's memory) is preserved.
    outage_start = T0 + CYCLE
    for now in [outage_start + i * CYCLE for i in range(11)]:  # T0+30 .. T0+330: 330 - 30 = 300, not > 300
        fleet.cycle(now, metrics=False)
        for name in ("cheap", "dear"):
            d = fleet.decision(name)
            assert (d.desired_replicas, d.reason, d.path) == (3, FALLBACK_PRESERVE_REASON, DecisionPath.FALLBACK)
            assert fleet.statuses[key(name)].desired.last_update_s == outage_start
    # T0+360: 330 s without metrics > 5m -> scenario C (minReplicas 1 > 0): each variant to its minReplicas.
    fleet.cycle(T0 + 12 * CYCLE, metrics=False)
    for name in ("cheap", "dear"):
        d = fleet.decision(name)
        assert d.desired_replicas == 1
        assert d.reason == "Fallback: using minReplicas=1 after retention period (no metrics for >5m)"
    fleet.apply()
    # Metrics return: the analyzer decides again (1 + 1 replicas, hot -> cheapest +1).
    fleet.cycle(T0 + 13 * CYCLE, load(fleet, HOT))
    assert fleet.desired() == {"cheap": 2, "dear": 1}
    recovered = fleet.decision("cheap")
    assert recovered.path is DecisionPath.OPTIMIZER
    assert recovered.analyzer is AnalyzerName.SATURATION_PERCENTAGE
    assert recovered.metrics_available is True
    assert condition(recovered, ConditionType.METRICS_AVAILABLE).status is True


def test_an_outage_with_every_min_zero_and_scale_to_zero_on_reaches_zero_after_retention():
    fleet = Fleet(
        specs=[spec("cheap", cost=5, min_replicas=0), spec("dear", cost=20, min_replicas=0)],
        config=EngineConfig(configmaps=configset(scale_to_zero=s2z_yaml(True, "5m"))),
        replicas={"cheap": 3, "dear": 3},
        request_count=100,
    )
    fleet.cycle(T0, load(fleet, STEADY))
    assert fleet.desired() == {"cheap": 3, "dear": 3}
    for i in range(1, 12):  # outage from T0+30; last preserved cycle T0+330
        fleet.cycle(T0 + i * CYCLE, metrics=False)
        assert fleet.desired() == {"cheap": 3, "dear": 3}
    fleet.cycle(T0 + 12 * CYCLE, metrics=False)
    assert fleet.desired() == {"cheap": 0, "dear": 0}
    assert fleet.decision("cheap").reason == "Fallback: scale-to-zero after retention period (no metrics for >5m)"


def test_an_outage_after_a_restart_takes_the_last_resort_path_with_the_va_status_as_previous():
    fleet = Fleet(
        specs=[spec("cheap", cost=5, min_replicas=2, max_replicas=12), spec("dear", cost=20)],
        replicas={"cheap": 3, "dear": 2},
    )
    fleet.cycle(T0, load(fleet, HOT))
    assert fleet.desired() == {"cheap": 4, "dear": 2}
    fleet.restart()  # new leader: memory gone, status kept; cheap's status says 4, its Deployment still 3
    fleet.cycle(T0 + CYCLE, metrics=False)
    d = fleet.decision("cheap")
    assert d.path is DecisionPath.LAST_RESORT
    assert (d.desired_replicas, d.reason) == (
        4,
        "Last resort: maintaining controller intent: max(minReplicas=2, previousOptimized=4) = 4",
    )


# ---- lastUpdate and the retention clock --------------------------------------------------------------------


def test_an_optimizer_zero_waits_the_retention_period_because_lastupdate_ignores_the_elapsed_time_in_the_reason():
    fleet = Fleet(
        specs=[spec("cheap", cost=5, min_replicas=0), spec("dear", cost=20, min_replicas=0)],
        config=EngineConfig(configmaps=configset(scale_to_zero=s2z_yaml(True, "5m"))),
        replicas={"cheap": 1, "dear": 1},
        request_count=10,
    )
    fleet.cycle(T0, load(fleet, IDLE))
    assert fleet.desired() == {"cheap": 1, "dear": 1}  # scale-down needs a variant above 1
    fleet.request_count = 0  # idle: the enforcer returns 0 for every variant from now on
    first_zero = T0 + CYCLE
    reasons = []
    for now in [first_zero + i * CYCLE for i in range(11)]:  # T0+30 .. T0+330
        fleet.cycle(now, load(fleet, IDLE))
        assert fleet.desired() == {"cheap": 1, "dear": 1}
        status = fleet.statuses[key("cheap")].desired
        assert status.last_update_s == first_zero, "only the numbers of the reason changed"
        reasons.append(fleet.decision("cheap").reason)
    # The elapsed time in the reason grows while lastUpdate stays put (retention measured from first_zero).
    assert reasons[3] == "Optimizer returned 0 but retention period not exceeded (1m30s < 5m), preserving allocation"
    assert len(set(reasons)) > 5
    # T0+360: 330 s since lastUpdate > 300 -> the zero is applied.
    fleet.cycle(T0 + 12 * CYCLE, load(fleet, IDLE))
    assert fleet.desired() == {"cheap": 0, "dear": 0}
    assert fleet.statuses[key("cheap")].desired.last_update_s == T0 + 12 * CYCLE


def test_status_and_memory_carry_one_allocation_when_a_status_write_was_lost():
    """The allocation is computed once per decision: VA status and this process's memory agree on lastUpdate
    even when the previous status write was lost (memory newer than status)."""
    fleet = two_variants()
    fleet.cycle(T0, load(fleet, STEADY))
    fleet.statuses.clear()  # the leader's status writes of that cycle never arrived
    result = fleet.cycle(T0 + CYCLE, load(fleet, STEADY))
    for name in ("cheap", "dear"):
        persisted = fleet.statuses[key(name)].desired
        assert persisted == fleet.state.allocations[key(name)] == result.allocations[key(name)]
        assert persisted is not None
        assert persisted.last_update_s == T0, "unchanged decision: lastUpdate from the first cycle, not the second"


def test_the_first_optimizer_zero_without_any_status_is_a_first_run_grace_period():
    fleet = Fleet(
        specs=[spec("cheap", cost=5, min_replicas=0)],
        config=EngineConfig(configmaps=configset(scale_to_zero=s2z_yaml(True, "5m"))),
        replicas={"cheap": 2},
        request_count=0,
    )
    fleet.cycle(T0, load(fleet, IDLE))
    d = fleet.decision("cheap")
    assert (d.desired_replicas, d.reason) == (
        2,
        "First run: preserving current replicas for Prometheus discovery grace period",
    )


# ---- conditions ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metrics", "with_pods", "metrics_reason", "opt_status", "opt_reason"),
    [
        pytest.param(True, True, "MetricsFound", True, "SaturationOnlyMode", id="metrics-ok"),
        pytest.param(False, True, "PrometheusError", False, "MetricsUnavailable", id="prometheus-unavailable"),
        pytest.param(True, False, "MetricsMissing", False, "MetricsUnavailable", id="no-pod-reports"),
    ],
)
def test_conditions_report_the_target_the_metrics_and_the_optimization(
    metrics, with_pods, metrics_reason, opt_status, opt_reason
):
    fleet = two_variants()
    fleet.cycle(T0, load(fleet, STEADY) if with_pods else (), metrics=metrics)
    d = fleet.decision("cheap")
    resolved = condition(d, ConditionType.TARGET_RESOLVED)
    assert (resolved.status, resolved.reason, resolved.message) == (
        True,
        "TargetFound",
        "Scale target Deployment cheap found",
    )
    available = condition(d, ConditionType.METRICS_AVAILABLE)
    assert (available.status, available.reason) == (metrics_reason == "MetricsFound", metrics_reason)
    expected_message = (
        "Saturation metrics data is available for scaling decisions"
        if metrics_reason == "MetricsFound"
        else "No saturation metrics available - pods may not be ready or metrics not yet scraped"
    )
    assert available.message == expected_message
    ready = condition(d, ConditionType.OPTIMIZATION_READY)
    assert (ready.status, ready.reason) == (opt_status, opt_reason)
    assert f"(target: {d.desired_replicas} replicas)" in ready.message


def test_a_condition_last_transition_time_moves_only_when_its_status_flips():
    fleet = two_variants()
    fleet.cycle(T0, load(fleet, STEADY))
    metrics_cond = fleet.statuses[key("cheap")].condition(ConditionType.METRICS_AVAILABLE)
    assert (metrics_cond.status, metrics_cond.last_transition_s) == (True, T0)
    fleet.cycle(T0 + CYCLE, load(fleet, STEADY))
    assert fleet.statuses[key("cheap")].condition(ConditionType.METRICS_AVAILABLE).last_transition_s == T0
    fleet.cycle(T0 + 2 * CYCLE, metrics=False)
    flipped = fleet.statuses[key("cheap")].condition(ConditionType.METRICS_AVAILABLE)
    assert (flipped.status, flipped.last_transition_s) == (False, T0 + 2 * CYCLE)
    target_cond = fleet.statuses[key("cheap")].condition(ConditionType.TARGET_RESOLVED)
    assert target_cond.last_transition_s == T0


@pytest.mark.parametrize("metrics", [pytest.param(True, id="metrics-ok"), pytest.param(False, id="outage")])
def test_a_va_whose_scale_target_is_missing_says_so_and_is_still_bounded(metrics):
    fleet = Fleet(
        specs=[spec("cheap", cost=5), spec("gone", cost=20, min_replicas=2, max_replicas=4)],
        replicas={"cheap": 2},
        missing_targets={"gone"},
    )
    fleet.cycle(T0, same_pods("cheap", 2, *STEADY), metrics=metrics)
    d = fleet.decision("gone")
    resolved = condition(d, ConditionType.TARGET_RESOLVED)
    assert (resolved.status, resolved.reason) == (False, "TargetNotFound")
    assert resolved.message == "Scale target Deployment gone not found"
    assert d.current_replicas == 0
    assert 2 <= d.desired_replicas <= 4
    assert fleet.decision("cheap").desired_replicas == 2


# ---- invalid samples --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kv", "queue"),
    [
        pytest.param(math.nan, 0.0, id="nan-kv"),
        pytest.param(0.5, math.nan, id="nan-queue"),
        pytest.param(-0.1, 0.0, id="negative-kv"),
        pytest.param(0.5, -1.0, id="negative-queue"),
        pytest.param(math.inf, 0.0, id="infinite-kv"),
    ],
)
def test_an_invalid_sample_is_dropped_with_a_note_and_the_model_holds(kv, queue):
    fleet = two_variants()
    # cheap's second pod reports garbage; the rest is hot (a stable model would scale cheap 2 -> 3).
    data = pods("cheap", HOT, (kv, queue)) + same_pods("dear", 2, *HOT)
    fleet.cycle(T0, data)
    assert fleet.desired() == {"cheap": 2, "dear": 2}
    for name in ("cheap", "dear"):
        notes = fleet.decision(name).notes
        assert any("cheap-1" in n and "dropped invalid sample" in n for n in notes), notes


@pytest.mark.parametrize(
    ("other_load", "unwanted"),
    [
        pytest.param(HOT, {"cheap": 2, "dear": 3}, id="hot-would-scale-up-the-other-variant"),
        pytest.param(IDLE, {"cheap": 2, "dear": 1}, id="idle-would-scale-down-the-other-variant"),
    ],
)
def test_a_variant_whose_every_sample_is_invalid_holds_the_whole_model(other_load, unwanted):
    # All of cheap's replicas report, but every sample is invalid (negative queue). Its load is unknown, so the
    # model must hold rather than size "dear" as if cheap's two replicas were not there (upstream: a NaN makes
    # the averages NaN and freezes the model, research §1.3; brief: invalid samples make the model hold).
    fleet = Fleet(specs=[spec("cheap", cost=5), spec("dear", cost=20)], replicas={"cheap": 2, "dear": 2})
    data = pods("cheap", (0.5, -1.0), (0.5, -2.0)) + same_pods("dear", 2, *other_load)
    fleet.cycle(T0, data)
    assert fleet.desired() == {"cheap": 2, "dear": 2}, f"must hold, not {unwanted}"


def test_a_model_whose_every_sample_is_invalid_holds_through_the_fallback_path():
    fleet = two_variants()
    fleet.cycle(T0, load(fleet, STEADY))
    fleet.cycle(T0 + CYCLE, pods("cheap", (math.nan, 0), (math.nan, 0)) + pods("dear", (math.nan, 0), (0.2, -3)))
    assert fleet.desired() == {"cheap": 2, "dear": 2}
    d = fleet.decision("cheap")
    assert d.path is DecisionPath.FALLBACK
    assert condition(d, ConditionType.METRICS_AVAILABLE).reason == "MetricsMissing"


def test_a_pod_that_reports_neither_kv_nor_queue_is_not_a_reporting_replica():
    # cheap's only pod answers no saturation query (upstream's collector drops such pods), so cheap has no
    # metrics: it gets no V1 target and cannot take the step. dear's two hot pods (spare 0.05 < 0.1) scale dear up.
    # Were the silent pod read as an idle replica (kv 0, queue 0): spares 0.8, 0.05, 0.05 -> mean 0.3 -> no step.
    fleet = Fleet(specs=[spec("cheap", cost=5), spec("dear", cost=20)], replicas={"cheap": 1, "dear": 2})
    silent = pod("cheap", "cheap-0", kv=None, queue=None)
    fleet.cycle(T0, (silent, *same_pods("dear", 2, *HOT)))
    assert fleet.desired() == {"cheap": 1, "dear": 3}
    assert "no metrics from this variant's pods" in fleet.decision("cheap").reason


# ---- configuration problems -------------------------------------------------------------------------------


def test_a_missing_saturation_configmap_uses_the_recommended_thresholds_and_says_so():
    # Documented deviation: missing ConfigMap -> recommended thresholds (upstream: zeros, all saturated).
    # kv 0.5 / queue 1 on 2+2 pods: spare 0.8 - 0.5 = 0.3 and 5 - 1 = 4, all 4 non-saturated.
    fleet = two_variants(saturation=None)
    fleet.cycle(T0, load(fleet, (0.5, 1.0)))
    analysis = fleet.last.analyses[MODEL_KEY].analysis
    assert analysis["non_saturated_count"] == 4
    assert analysis["avg_spare_kv"] == pytest.approx(0.3)
    assert analysis["avg_spare_queue"] == pytest.approx(4.0)
    message = condition(fleet.decision("cheap"), ConditionType.OPTIMIZATION_READY).message
    assert "wva-saturation-scaling-config" in message
    assert "recommended thresholds" in message
    assert any("recommended thresholds" in w for w in fleet.last.warnings)


def test_a_malformed_saturation_configmap_falls_back_to_the_recommended_thresholds_without_crashing():
    fleet = two_variants(saturation="kvCacheThreshold: [0.5,\nqueueLengthThreshold: 2\n")
    fleet.cycle(T0, load(fleet, (0.5, 1.0)))
    analysis = fleet.last.analyses[MODEL_KEY].analysis
    assert analysis["avg_spare_kv"] == pytest.approx(0.3)
    # Recommended thresholds, N=4: load kv 0.5 x 4/3 = 0.667 -> 0.133 >= 0.1; queue 1 x 4/3 -> 3.667 >= 3
    # -> safe: the most expensive variant steps down (with the malformed entry's 0.5 / 2 nothing would be spare).
    assert fleet.desired() == {"cheap": 2, "dear": 1}
    message = condition(fleet.decision("cheap"), ConditionType.OPTIMIZATION_READY).message
    assert "malformed YAML" in message
    assert "recommended thresholds" in message


def test_a_per_model_saturation_entry_changes_the_thresholds_the_engine_uses():
    # Global default kvCacheThreshold 0.8; the per-model entry (matched on model_id/namespace fields) lowers it
    # to 0.5, so kv 0.5 replicas are saturated: no non-saturated replica -> averages 0 -> scale-up.
    entry = f"model_id: {MODEL}\nnamespace: {NS}\nkvCacheThreshold: 0.5\n"
    extra = [(CONTROLLER_NS, "wva-saturation-scaling-config", {"default": "kvCacheThreshold: 0.8\n", "m": entry})]
    fleet = Fleet(
        specs=[spec("cheap", cost=5), spec("dear", cost=20)],
        config=EngineConfig(configmaps=configset(saturation=None, extra=extra)),
        replicas={"cheap": 2, "dear": 2},
    )
    fleet.cycle(T0, load(fleet, (0.5, 1.0)))
    assert fleet.last.analyses[MODEL_KEY].analysis["non_saturated_count"] == 0
    assert fleet.desired() == {"cheap": 3, "dear": 2}
