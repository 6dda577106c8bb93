"""Seed 002, "Scaling Decision Hierarchy": `decide_without_solution` (fallback allocation, last resort, retention
scenarios A/B/C) and `protect_zero` (the optimizer path's retention protection). Reason strings are seed 002's,
verbatim; every example in the seed is here, with its arithmetic.
"""

from __future__ import annotations

import pytest

from adapter.domain.snapshot import DecisionPath
from adapter.enforcer.fallback import (
    FALLBACK_PRESERVE_REASON,
    FIRST_RUN_REASON,
    OPTIMIZER_REASON,
    decide_without_solution,
    protect_zero,
    retention_exceeded,
)

from .builders import T0, alloc, fvariant, s2z

NOW = T0 + 3600
RETENTION = 300.0  # "5m"

# Seed 002 status indicators, verbatim.
FALLBACK_A = "Fallback: scale-to-zero after retention period (no metrics for >5m)"
FALLBACK_B_CHEAPEST = (
    "Fallback: cheapest variant with 1 replica after retention period (no metrics, scaleToZero disabled)"
)
FALLBACK_B_OTHER = (
    "Fallback: non-cheapest variant scaled to 0 after retention period (no metrics, scaleToZero disabled)"
)
FALLBACK_C_MIN2 = "Fallback: using minReplicas=2 after retention period (no metrics for >5m)"
LAST_RESORT_LATE = "Last resort: deployment discovered late, using current=5 (was 0)"
LAST_RESORT_INTENT = "Last resort: maintaining controller intent: max(minReplicas=2, previousOptimized=10) = 10"
LAST_RESORT_OTHERS_RUNNING = "Last resort: first run, other variants handling load, starting at 0"
LAST_RESORT_SAFE_DEFAULT = (
    "Last resort: first run with current=0, using safe default of 1 (waiting for deployment discovery)"
)
LAST_RESORT_A = "Last resort: retention period exceeded (>5m), scale-to-zero enabled, scaling to 0"
LAST_RESORT_B_CHEAPEST = (
    "Last resort: retention period exceeded (>5m), cheapest variant getting 1 replica (scaleToZero disabled)"
)
OPTIMIZER_ZERO_WITHIN = "Optimizer returned 0 but retention period not exceeded (1m30s < 5m), preserving allocation"


def ago(seconds: float) -> float:
    return NOW - seconds


# ---- 2. fallback allocation --------------------------------------------------------------------------------


def test_seed_fallback_example_keeps_the_controller_intent_of_8_over_the_current_5():
    # Seed 002 "Fallback Allocation" example: current 5, desired 8 (lastUpdate 2 minutes ago), minReplicas 2,
    # retention 5m; 2m < 5m -> not exceeded -> "maintains 8 replicas (controller intent)".
    v = fvariant("a", min_replicas=2, max_replicas=10, current=5, previous=alloc(8, updated=ago(120)), remembered=True)
    held = decide_without_solution([v], now_s=NOW, cfg=s2z(False, RETENTION))
    assert held["a"].desired_replicas == 8
    assert held["a"].reason == FALLBACK_PRESERVE_REASON
    assert held["a"].reason == "Fallback: preserving previous allocation (no optimizer solution)"
    assert held["a"].path is DecisionPath.FALLBACK


def test_fallback_on_its_first_run_uses_the_current_deployment_replicas():
    # Seed 002 Stage 1: "First run: Uses current deployment replica count as baseline" (lastUpdate is zero).
    v = fvariant("a", current=5, previous=alloc(8, updated=None), remembered=True)
    held = decide_without_solution([v], now_s=NOW, cfg=s2z(False, RETENTION))
    assert (held["a"].desired_replicas, held["a"].reason) == (5, FALLBACK_PRESERVE_REASON)


@pytest.mark.parametrize(
    ("min_replicas", "max_replicas", "expected"),
    [
        pytest.param(2, 6, 6, id="max-lowered-below-the-previous-allocation"),
        pytest.param(9, 12, 9, id="min-raised-above-the-previous-allocation"),
        pytest.param(0, 8, 8, id="unchanged-bounds-keep-it"),
    ],
)
def test_fallback_re_applies_changed_bounds_immediately(min_replicas, max_replicas, expected):
    # Seed 002 Stage 2: "If admin changed minReplicas or maxReplicas, allocation is clamped immediately".
    v = fvariant(
        "a",
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        current=5,
        previous=alloc(8, updated=ago(120)),
        remembered=True,
    )
    held = decide_without_solution([v], now_s=NOW, cfg=s2z(False, RETENTION))
    assert held["a"].desired_replicas == expected


# ---- retention scenarios A / B / C on both paths ----------------------------------------------------------


def _two(min_a: int, min_b: int, *, remembered: bool, updated: float) -> list:
    return [
        fvariant(
            "cheap", cost=5, min_replicas=min_a, current=4, previous=alloc(4, updated=updated), remembered=remembered
        ),
        fvariant(
            "dear", cost=20, min_replicas=min_b, current=3, previous=alloc(3, updated=updated), remembered=remembered
        ),
    ]


@pytest.mark.parametrize(
    ("remembered", "enabled", "mins", "expected"),
    [
        pytest.param(
            True,
            True,
            (0, 0),
            {"cheap": (0, FALLBACK_A), "dear": (0, FALLBACK_A)},
            id="fallback-scenario-A-scale-to-zero-on-all-min-0",
        ),
        pytest.param(
            True,
            False,
            (0, 0),
            {"cheap": (1, FALLBACK_B_CHEAPEST), "dear": (0, FALLBACK_B_OTHER)},
            id="fallback-scenario-B-scale-to-zero-off-all-min-0",
        ),
        pytest.param(
            True,
            False,
            (0, 2),
            {
                "cheap": (0, "Fallback: using minReplicas=0 after retention period (no metrics for >5m)"),
                "dear": (2, FALLBACK_C_MIN2),
            },
            id="fallback-scenario-C-some-min-above-0",
        ),
        pytest.param(
            True,
            True,
            (2, 0),
            {
                "cheap": (2, FALLBACK_C_MIN2),
                "dear": (0, "Fallback: using minReplicas=0 after retention period (no metrics for >5m)"),
            },
            id="fallback-scenario-C-wins-over-scale-to-zero",
        ),
        pytest.param(
            False,
            True,
            (0, 0),
            {"cheap": (0, LAST_RESORT_A), "dear": (0, LAST_RESORT_A)},
            id="last-resort-scenario-A",
        ),
        pytest.param(
            False,
            False,
            (0, 0),
            {"cheap": (1, LAST_RESORT_B_CHEAPEST), "dear": (0, None)},
            id="last-resort-scenario-B",
        ),
        pytest.param(False, False, (0, 2), {"cheap": (0, None), "dear": (2, None)}, id="last-resort-scenario-C"),
    ],
)
def test_after_the_retention_period_the_seed_scenarios_apply(remembered, enabled, mins, expected):
    # lastUpdate 6 minutes ago; 6m > 5m -> retention exceeded.
    variants = _two(*mins, remembered=remembered, updated=ago(360))
    held = decide_without_solution(variants, now_s=NOW, cfg=s2z(enabled, RETENTION))
    path = DecisionPath.FALLBACK if remembered else DecisionPath.LAST_RESORT
    prefix = "Fallback: " if remembered else "Last resort: "
    for name, (replicas, reason) in expected.items():
        assert held[name].desired_replicas == replicas, name
        assert held[name].path is path
        assert held[name].reason.startswith(prefix)
        if reason is not None:
            assert held[name].reason == reason


def test_seed_last_resort_example_2_scales_to_zero_after_six_minutes_without_metrics():
    # Seed 002 Last Resort "Scenario 2": previousOptimized 10 (lastUpdate 6 minutes ago), minReplicas 0 on all
    # variants, scaleToZero enabled, retention 5m -> 0 replicas.
    v = fvariant("a", min_replicas=0, max_replicas=12, current=10, previous=alloc(10, updated=ago(360)))
    held = decide_without_solution([v], now_s=NOW, cfg=s2z(True, RETENTION))
    assert (held["a"].desired_replicas, held["a"].reason) == (0, LAST_RESORT_A)


@pytest.mark.parametrize(
    ("elapsed", "exceeded"),
    [
        pytest.param(299.0, False, id="before"),
        pytest.param(300.0, False, id="exactly-the-period-is-not-exceeded"),
        pytest.param(300.5, True, id="just-after"),
    ],
)
def test_the_retention_period_is_exceeded_only_strictly_after_it_elapses(elapsed, exceeded):
    # Seed 002 scenario conditions: "Time since last update > retention period".
    assert retention_exceeded(alloc(4, updated=ago(elapsed)), now_s=NOW, retention_s=RETENTION) is exceeded
    variants = [fvariant("a", min_replicas=0, current=4, previous=alloc(4, updated=ago(elapsed)), remembered=True)]
    held = decide_without_solution(variants, now_s=NOW, cfg=s2z(True, RETENTION))
    assert held["a"].desired_replicas == (0 if exceeded else 4)


def test_a_first_run_with_zero_last_update_never_exceeds_the_retention_period():
    # Seed 002 "First Run Grace Period": lastUpdate zero -> retention checks are skipped.
    assert retention_exceeded(alloc(4, updated=None), now_s=NOW, retention_s=RETENTION) is False
    assert retention_exceeded(None, now_s=NOW, retention_s=RETENTION) is False


# ---- 4. last resort ----------------------------------------------------------------------------------------


def test_seed_last_resort_example_1_maintains_the_previous_optimized_10_over_current_5():
    # Seed 002 Last Resort "Scenario 1": previousOptimized 10 (2 minutes ago), current 5, min 2, max 12,
    # retention 5m -> 10 (maintains controller intent, not current state); max(2, 10) = 10.
    v = fvariant("a", min_replicas=2, max_replicas=12, current=5, previous=alloc(10, updated=ago(120)))
    held = decide_without_solution([v], now_s=NOW, cfg=s2z(False, RETENTION))
    assert (held["a"].desired_replicas, held["a"].reason) == (10, LAST_RESORT_INTENT)
    assert held["a"].path is DecisionPath.LAST_RESORT


def test_last_resort_detects_a_deployment_discovered_late():
    # Stage 1: previousOptimized exists (0) and current 5 > 0 -> baseline = current = 5.
    v = fvariant("a", min_replicas=0, current=5, previous=alloc(0, updated=ago(60)))
    held = decide_without_solution([v], now_s=NOW, cfg=s2z(False, RETENTION))
    assert (held["a"].desired_replicas, held["a"].reason) == (5, LAST_RESORT_LATE)


def test_last_resort_intent_is_clamped_to_changed_bounds():
    # max(minReplicas=2, previousOptimized=10) clamped to maxReplicas 6 -> 6.
    v = fvariant("a", min_replicas=2, max_replicas=6, current=5, previous=alloc(10, updated=ago(120)))
    held = decide_without_solution([v], now_s=NOW, cfg=s2z(False, RETENTION))
    assert held["a"].desired_replicas == 6


def test_last_resort_first_run_starts_at_zero_when_other_variants_are_handling_load():
    # Stage 3: no previous, current 0, minReplicas 0, another variant of the model runs -> 0.
    variants = [fvariant("new", min_replicas=0, current=0), fvariant("busy", min_replicas=1, current=2)]
    held = decide_without_solution(variants, now_s=NOW, cfg=s2z(False, RETENTION))
    assert (held["new"].desired_replicas, held["new"].reason) == (0, LAST_RESORT_OTHERS_RUNNING)
    assert held["busy"].desired_replicas == 2


@pytest.mark.parametrize(
    ("enabled", "resolved"),
    [
        pytest.param(False, True, id="scale-to-zero-off"),
        pytest.param(True, False, id="scale-to-zero-on-but-the-deployment-is-not-discovered"),
        pytest.param(False, False, id="off-and-not-discovered"),
    ],
)
def test_last_resort_first_run_with_current_zero_and_nothing_else_running_uses_a_safe_default_of_one(enabled, resolved):
    # "idle" was decided before (its intent 0, remembered in VA status): it neither runs nor takes the safe default.
    variants = [
        fvariant("new", min_replicas=0, current=0, resolved=resolved),
        fvariant("idle", cost=1.0, min_replicas=0, current=0, previous=alloc(0, updated=ago(60))),
    ]
    held = decide_without_solution(variants, now_s=NOW, cfg=s2z(enabled, RETENTION))
    assert (held["new"].desired_replicas, held["new"].reason) == (1, LAST_RESORT_SAFE_DEFAULT)
    assert held["idle"].desired_replicas == 0


# One safe replica per model (deviation 12): (name, cost, resolved) of variants all found at 0 with
# minReplicas 0 on their first run, scale-to-zero off; which one takes the safe default of 1.
@pytest.mark.parametrize(
    ("variants", "enabled", "starts"),
    [
        pytest.param([("a100", 2.5, True), ("l40s", 1.5, True)], False, "l40s", id="the-cheapest-of-two"),
        pytest.param(
            [("a", 3.0, True), ("b", 1.0, True), ("c", 2.0, True), ("d", 4.0, True)], False, "b", id="of-four"
        ),
        pytest.param([("a", 1.0, True), ("b", 1.0, True)], False, "a", id="a-tie-goes-to-the-first-name"),
        pytest.param(
            [("cheap", 1.0, False), ("dear", 2.0, True)], False, "dear", id="a-found-target-before-an-undiscovered"
        ),
        pytest.param(
            [("cheap", 1.0, False), ("dear", 2.0, False)], False, "cheap", id="none-found-the-cheapest-anyway"
        ),
        pytest.param(
            [("cheap", 1.0, True), ("dear", 2.0, False)], True, "dear", id="s2z-on-the-found-one-stays-at-zero"
        ),
    ],
)
def test_last_resort_first_run_starts_one_variant_of_a_model_found_all_at_zero(variants, enabled, starts):
    group = [fvariant(name, cost=cost, min_replicas=0, current=0, resolved=found) for name, cost, found in variants]
    held = decide_without_solution(group, now_s=NOW, cfg=s2z(enabled, RETENTION))
    assert {name: h.desired_replicas for name, h in held.items()} == {
        name: int(name == starts) for name, _, _ in variants
    }
    assert held[starts].reason == LAST_RESORT_SAFE_DEFAULT
    assert all(h.path is DecisionPath.LAST_RESORT for h in held.values())


def test_last_resort_first_run_with_discovered_replicas_uses_them_within_bounds():
    variants = [
        fvariant("a", min_replicas=1, max_replicas=10, current=4),
        fvariant("b", min_replicas=1, max_replicas=3, current=7),
    ]
    held = decide_without_solution(variants, now_s=NOW, cfg=s2z(False, RETENTION))
    assert held["a"].desired_replicas == 4
    assert held["b"].desired_replicas == 3


# ---- 1. optimizer solution: retention protection of zeros -------------------------------------------------


def test_an_optimizer_zero_within_the_retention_period_preserves_the_allocation_with_the_seed_reason():
    # Seed 002: lastUpdate 90 s ago, retention 5m -> "(1m30s < 5m)", preserve the previous 3.
    v = fvariant("a", min_replicas=0, current=3, previous=alloc(3, updated=ago(90)))
    held = protect_zero({"a": 0}, variants=[v], now_s=NOW, cfg=s2z(True, RETENTION), reasons={})
    assert (held["a"].desired_replicas, held["a"].reason) == (3, OPTIMIZER_ZERO_WITHIN)
    assert held["a"].path is DecisionPath.OPTIMIZER


def test_an_optimizer_zero_on_the_first_run_preserves_current_replicas_for_the_discovery_grace_period():
    for previous in (None, alloc(3, updated=None)):
        v = fvariant("a", min_replicas=0, current=2, previous=previous)
        held = protect_zero({"a": 0}, variants=[v], now_s=NOW, cfg=s2z(True, RETENTION), reasons={})
        assert (held["a"].desired_replicas, held["a"].reason) == (2, FIRST_RUN_REASON)
    assert FIRST_RUN_REASON == "First run: preserving current replicas for Prometheus discovery grace period"


def test_an_optimizer_zero_after_the_retention_period_is_applied():
    v = fvariant("a", min_replicas=0, current=3, previous=alloc(3, updated=ago(301)))
    held = protect_zero({"a": 0}, variants=[v], now_s=NOW, cfg=s2z(True, RETENTION), reasons={"a": "why"})
    assert (held["a"].desired_replicas, held["a"].reason) == (0, "why")


def test_an_optimizer_zero_is_applied_when_the_previous_allocation_was_already_zero():
    v = fvariant("a", min_replicas=0, current=0, previous=alloc(0, updated=ago(10)))
    held = protect_zero({"a": 0}, variants=[v], now_s=NOW, cfg=s2z(True, RETENTION), reasons={})
    assert held["a"].desired_replicas == 0


def test_a_non_zero_optimizer_target_passes_through_with_its_reason():
    v = fvariant("a", current=2, previous=alloc(2, updated=ago(10)))
    held = protect_zero({"a": 3}, variants=[v], now_s=NOW, cfg=s2z(True, RETENTION), reasons={})
    assert (held["a"].desired_replicas, held["a"].reason) == (3, OPTIMIZER_REASON)
    assert OPTIMIZER_REASON == "Optimizer solution: cost and latency optimized allocation"


def test_the_preserved_allocation_is_clamped_to_a_lowered_max():
    v = fvariant("a", min_replicas=0, max_replicas=2, current=5, previous=alloc(5, updated=ago(90)))
    held = protect_zero({"a": 0}, variants=[v], now_s=NOW, cfg=s2z(True, RETENTION), reasons={})
    assert held["a"].desired_replicas == 2


def test_protect_zero_leaves_variants_without_a_target_out():
    variants = [fvariant("a", current=1), fvariant("b", current=1)]
    held = protect_zero({"a": 1}, variants=variants, now_s=NOW, cfg=s2z(True, RETENTION), reasons={})
    assert set(held) == {"a"}
