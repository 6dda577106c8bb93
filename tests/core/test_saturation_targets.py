"""Seed 000, "Decision Logic": `calculate_targets` (cost-aware ±1, transition blocking, cascade prevention, bounds)
plus the documented deviations (transition and not-reporting timeouts, max/min-aware step selection).
"""

from __future__ import annotations

import pytest

from adapter.analyzers.saturation import (
    NotReportingSince,
    SaturationAnalysis,
    TargetResult,
    VariantReplicaState,
    calculate_targets,
    measure,
)

from .builders import EXACT, T0, rstate, same_pods

TIMEOUT = 300.0

# Load levels (EXACT thresholds 0.75 / 5, triggers 0.25 / 3):
HOT = (0.625, 0.0)  # spare kv 0.125 < 0.25 -> scale-up
IDLE = (0.0, 0.0)  # spare 0.75 / 5; with N >= 2 the removal simulation is safe -> scale-down
STEADY = (0.375, 0.0)  # spare 0.375 >= 0.25; N=4: load 0.375 x 4/3 = 0.5 -> remaining 0.25 -> still safe
MIDDLE = (0.4375, 0.0)  # spare 0.3125 >= 0.25; N=2: load 0.4375 x 2 = 0.875 -> remaining -0.125 -> unsafe


def run(
    reporting: dict[str, int],
    states: list[VariantReplicaState],
    load: tuple[float, float],
    *,
    now: float = T0,
    not_reporting: dict[str, NotReportingSince] | None = None,
) -> tuple[SaturationAnalysis, TargetResult]:
    """Analyse `reporting[v]` pods per variant, all at `load`, then compute targets."""
    data = tuple(p for name, n in reporting.items() for p in same_pods(name, n, *load))
    costs = {s.name: s.cost for s in states}
    analysis = measure(data, cfg=EXACT, costs=costs)
    result = calculate_targets(
        analysis, states, now_s=now, transition_timeout_s=TIMEOUT, not_reporting=not_reporting or {}
    )
    return analysis, result


# ---- seed 000's two example outputs -----------------------------------------------------------------------


def test_seed_example_stable_model_scales_up_the_cheapest_variant_by_one():
    # Seed 000 "Example Output (model stable)": v1-l4 ($5) current=2 ready=2 desired=0 -> 3 (cheapest, +1);
    # v2-a100 ($20) current=2 ready=2 desired=0 -> 2. Load: spare kv 0.125 < 0.25 -> scale-up.
    states = [rstate("v1-l4", cost=5, current=2), rstate("v2-a100", cost=20, current=2)]
    analysis, result = run({"v1-l4": 2, "v2-a100": 2}, states, HOT)
    assert analysis.should_scale_up is True
    assert result.blocked is False
    assert result.targets == {"v1-l4": 3, "v2-a100": 2}
    assert result.scaled == "v1-l4"


def test_seed_example_model_in_transition_blocks_every_variant_and_preserves_current():
    # Seed 000 "Example Output (model in transition)": v1-l4 current=2 ready=2 -> 2 (blocked);
    # v2-a100 current=4 but only 3 pods report -> metrics(3) != current(4) -> 4 (preserved current).
    # The load would scale up (spare 0.125 < 0.25) if the model were stable.
    states = [rstate("v1-l4", cost=5, current=2), rstate("v2-a100", cost=20, current=4)]
    analysis, result = run({"v1-l4": 2, "v2-a100": 3}, states, HOT)
    assert analysis.should_scale_up is True
    assert result.blocked is True
    assert result.targets == {"v1-l4": 2, "v2-a100": 4}
    assert result.scaled is None
    assert any("3 of 4" in r for r in result.block_reasons)


# ---- cost-aware selection ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("states", "load", "expected"),
    [
        pytest.param(
            [rstate("b-var", cost=5, current=2), rstate("a-var", cost=5, current=2)],
            HOT,
            {"a-var": 3, "b-var": 2},
            id="scale-up-cost-tie-goes-to-the-alphabetically-first",
        ),
        pytest.param(
            [rstate("a", cost=30, current=2), rstate("b", cost=5, current=2), rstate("c", cost=10, current=2)],
            HOT,
            {"a": 2, "b": 3, "c": 2},
            id="scale-up-goes-to-the-cheapest",
        ),
        pytest.param(
            [rstate("a-var", cost=20, current=2), rstate("b-var", cost=20, current=2)],
            IDLE,
            {"a-var": 2, "b-var": 1},
            id="scale-down-cost-tie-goes-to-the-alphabetically-last",
        ),
        pytest.param(
            [rstate("a", cost=30, current=2), rstate("b", cost=5, current=2), rstate("c", cost=10, current=2)],
            IDLE,
            {"a": 1, "b": 2, "c": 2},
            id="scale-down-goes-to-the-most-expensive",
        ),
        pytest.param(
            [rstate("a", cost=30, current=1), rstate("b", cost=5, current=2)],
            IDLE,
            {"a": 1, "b": 1},
            id="scale-down-skips-a-variant-at-one-replica",
        ),
        pytest.param(
            [rstate("a", cost=30, current=1), rstate("b", cost=5, current=1)],
            IDLE,
            {"a": 1, "b": 1},
            id="scale-down-never-goes-below-one-by-itself",
        ),
        pytest.param(
            [rstate("a", cost=5, current=2), rstate("b", cost=20, current=2)],
            MIDDLE,
            {"a": 2, "b": 2},
            id="neither-trigger-nor-safe-scale-down-holds",
        ),
    ],
)
def test_the_plus_or_minus_one_step_goes_to_the_variant_the_cost_rules_pick(states, load, expected):
    reporting = {s.name: s.current_replicas for s in states}
    _, result = run(reporting, states, load)
    assert result.blocked is False
    assert result.targets == expected


def test_scale_up_skips_a_variant_with_pending_replicas_for_cascade_prevention():
    # Stable model (every pod reports, desired 0) but the cheapest variant has a pod that is not Ready yet:
    # it is skipped, so the next cheapest gets the +1.
    states = [rstate("cheap", cost=5, current=3, pending=1), rstate("dear", cost=20, current=2)]
    _, result = run({"cheap": 3, "dear": 2}, states, HOT)
    assert result.blocked is False
    assert result.targets == {"cheap": 3, "dear": 3}


def test_scale_up_does_nothing_when_every_variant_has_pending_replicas():
    states = [rstate("cheap", cost=5, current=2, pending=1), rstate("dear", cost=20, current=2, pending=2)]
    _, result = run({"cheap": 2, "dear": 2}, states, HOT)
    assert result.targets == {"cheap": 2, "dear": 2}
    assert result.scaled is None


def test_scale_down_is_not_affected_by_pending_replicas():
    # Seed 000: "Scale-down operations are not affected by pending replicas".
    states = [rstate("cheap", cost=5, current=2), rstate("dear", cost=20, current=2, pending=1)]
    _, result = run({"cheap": 2, "dear": 2}, states, IDLE)
    assert result.targets == {"cheap": 2, "dear": 1}


def test_scale_up_skips_a_variant_already_at_max_replicas():
    # Documented deviation: the step goes to the next eligible variant instead of being clamped away.
    states = [rstate("cheap", cost=5, current=3, max_replicas=3), rstate("dear", cost=20, current=2)]
    _, result = run({"cheap": 3, "dear": 2}, states, HOT)
    assert result.targets == {"cheap": 3, "dear": 3}


def test_scale_down_skips_a_variant_already_at_min_replicas():
    states = [rstate("cheap", cost=5, current=3), rstate("dear", cost=20, current=2, min_replicas=2)]
    _, result = run({"cheap": 3, "dear": 2}, states, IDLE)
    assert result.targets == {"cheap": 2, "dear": 2}


@pytest.mark.parametrize(
    ("state", "load", "expected"),
    [
        pytest.param(rstate("a", current=2, min_replicas=3, max_replicas=5), MIDDLE, 3, id="raised-to-min"),
        pytest.param(rstate("a", current=7, min_replicas=1, max_replicas=5), STEADY, 5, id="lowered-to-max"),
        pytest.param(rstate("a", current=5, min_replicas=1, max_replicas=5), HOT, 5, id="scale-up-at-max-stays"),
    ],
)
def test_stable_targets_are_clamped_to_min_and_max_replicas(state, load, expected):
    _, result = run({"a": state.current_replicas}, [state], load)
    assert result.blocked is False
    assert result.targets == {"a": expected}


def test_a_variant_without_metrics_gets_no_target():
    states = [rstate("a", cost=5, current=2), rstate("silent", cost=1, current=3)]
    _, result = run({"a": 2}, states, HOT)
    # "silent" is cheapest but has no metrics: it gets no target and cannot take the scale-up.
    assert result.targets == {"a": 3}


def test_a_model_where_no_variant_has_a_state_gets_no_targets():
    _, result = run({"a": 2}, [], HOT)
    assert result.targets == {}


# ---- model-level transition blocking ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("states", "reporting", "blocked", "expected"),
    [
        pytest.param(
            [rstate("a", cost=5, current=2, desired=3), rstate("b", cost=20, current=2)],
            {"a": 2, "b": 2},
            True,
            {"a": 3, "b": 2},
            id="desired-not-current-blocks-and-keeps-desired",
        ),
        pytest.param(
            [rstate("a", cost=5, current=2), rstate("b", cost=20, current=3, desired=2)],
            {"a": 2, "b": 3},
            True,
            {"a": 2, "b": 2},
            id="a-pending-scale-down-blocks-scale-up-of-the-other-variant",
        ),
        pytest.param(
            [rstate("a", cost=5, current=2, desired=2), rstate("b", cost=20, current=2, desired=2)],
            {"a": 2, "b": 2},
            False,
            {"a": 3, "b": 2},
            id="desired-equal-to-current-is-stable",
        ),
        pytest.param(
            [rstate("a", cost=5, current=2, desired=0), rstate("b", cost=20, current=2, desired=0)],
            {"a": 2, "b": 2},
            False,
            {"a": 3, "b": 2},
            id="desired-zero-means-no-previous-decision",
        ),
        pytest.param(
            [rstate("a", cost=5, current=3), rstate("b", cost=20, current=2)],
            {"a": 2, "b": 2},
            True,
            {"a": 3, "b": 2},
            id="metrics-count-below-current-blocks-and-keeps-current",
        ),
        pytest.param(
            [rstate("a", cost=5, current=2), rstate("b", cost=20, current=2)],
            {"a": 3, "b": 2},
            True,
            {"a": 2, "b": 2},
            id="metrics-count-above-current-blocks-too",
        ),
    ],
)
def test_any_transitioning_variant_blocks_both_triggers_for_the_whole_model(states, reporting, blocked, expected):
    # Load is HOT, so a stable model would scale up the cheapest variant "a".
    _, result = run(reporting, states, HOT)
    assert result.blocked is blocked
    assert result.targets == expected


def test_transition_blocking_also_blocks_scale_down():
    states = [rstate("a", cost=5, current=2, desired=3), rstate("b", cost=20, current=3)]
    _, result = run({"a": 2, "b": 3}, states, IDLE)
    assert result.blocked is True
    assert result.targets == {"a": 3, "b": 3}


def test_transition_blocking_runs_before_cascade_prevention():
    # Seed 000: with the model in transition, pending checks never run; targets are the preserved ones.
    states = [rstate("a", cost=5, current=3, pending=1), rstate("b", cost=20, current=2)]
    _, result = run({"a": 2, "b": 2}, states, HOT)
    assert result.blocked is True
    assert result.targets == {"a": 3, "b": 2}


# ---- timeouts (documented deviation) ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("age", "blocked", "expected"),
    [
        pytest.param(0.0, True, {"a": 3, "b": 2}, id="fresh-transition-blocks"),
        pytest.param(TIMEOUT - 1, True, {"a": 3, "b": 2}, id="one-second-before-the-timeout-still-blocks"),
        # After the timeout the stale desired (3, never applied: current stays 2) stops blocking; the model
        # decides from current: HOT -> scale up the cheapest "a" from 2 to 3.
        pytest.param(TIMEOUT, False, {"a": 3, "b": 2}, id="at-the-timeout-it-re-decides-from-current"),
    ],
)
def test_an_unapplied_transition_blocks_only_until_the_transition_timeout(age, blocked, expected):
    states = [rstate("a", cost=5, current=2, desired=3, since=T0), rstate("b", cost=20, current=2)]
    _, result = run({"a": 2, "b": 2}, states, HOT, now=T0 + age)
    assert result.blocked is blocked
    assert result.targets == expected
    assert any("not applied" in n for n in result.notes) is (not blocked)


def test_after_the_transition_timeout_the_model_can_move_in_the_other_direction():
    # desired 3 was never applied (current 2) for 10 minutes; now the load is idle -> scale-down of the
    # most expensive variant "b"; "a" is re-decided from current (2), not from the stale 3.
    states = [rstate("a", cost=5, current=2, desired=3, since=T0), rstate("b", cost=20, current=2)]
    _, result = run({"a": 2, "b": 2}, states, IDLE, now=T0 + 600)
    assert result.blocked is False
    assert result.targets == {"a": 2, "b": 1}


def test_a_transition_with_unknown_age_blocks_like_upstream():
    states = [rstate("a", cost=5, current=2, desired=3, since=None), rstate("b", cost=20, current=2)]
    _, result = run({"a": 2, "b": 2}, states, HOT, now=T0 + 10_000)
    assert result.blocked is True


def test_not_reporting_pods_block_until_the_timeout_measured_from_the_first_sighting():
    states = [rstate("a", cost=5, current=2), rstate("b", cost=20, current=4)]
    # First sighting: b reports 3 of 4 -> remembered since now, blocked.
    _, first = run({"a": 2, "b": 3}, states, HOT, now=T0)
    assert first.blocked is True
    assert first.not_reporting == {"b": NotReportingSince(current=4, reporting=3, since_s=T0)}
    # Same counts 299 s later: the memory keeps the first sighting -> still blocked.
    _, later = run({"a": 2, "b": 3}, states, HOT, now=T0 + TIMEOUT - 1, not_reporting=dict(first.not_reporting))
    assert later.blocked is True
    assert later.not_reporting["b"].since_s == T0
    # At the timeout: decide from the reporting pods -> stable path -> cheapest "a" 2 -> 3; b keeps its 3
    # reporting replicas as base target (seed: target = readyReplicas).
    _, timed_out = run({"a": 2, "b": 3}, states, HOT, now=T0 + TIMEOUT, not_reporting=dict(later.not_reporting))
    assert timed_out.blocked is False
    assert timed_out.targets == {"a": 3, "b": 3}
    assert any("pods reporting" in n for n in timed_out.notes)


def test_not_reporting_memory_restarts_when_the_counts_change():
    states = [rstate("a", cost=5, current=2), rstate("b", cost=20, current=5)]
    stale = {"b": NotReportingSince(current=4, reporting=3, since_s=T0)}
    # Counts changed from (4, 3) to (5, 3): a new sighting at now, so it blocks although T0 is long ago.
    _, result = run({"a": 2, "b": 3}, states, HOT, now=T0 + 10 * TIMEOUT, not_reporting=stale)
    assert result.blocked is True
    assert result.not_reporting["b"] == NotReportingSince(current=5, reporting=3, since_s=T0 + 10 * TIMEOUT)


def test_a_variant_that_reports_fully_again_is_forgotten():
    states = [rstate("a", cost=5, current=2), rstate("b", cost=20, current=4)]
    stale = {"b": NotReportingSince(current=4, reporting=3, since_s=T0)}
    _, result = run({"a": 2, "b": 4}, states, HOT, now=T0 + 30, not_reporting=stale)
    assert result.blocked is False
    assert result.not_reporting == {}


# ---- seed 000 "Timeline Example (With Protection)" played forward -----------------------------------------


def test_seed_timeline_with_protection_blocks_until_all_new_pods_report():
    """T+0 scale up 2->3; T+30 current 3 but 2 pods report -> blocked; T+60 still; T+90 all 3 report -> stable.

    The load stays saturated throughout (spare kv 0.125 < 0.25): without protection it would go 3 -> 4 -> 5.
    """
    hot = (0.625, 0.0)

    def cycle(now: float, current: int, reporting: int, desired: int, load=hot) -> TargetResult:
        state = rstate("variant-1", cost=5, current=current, desired=desired, since=T0)
        analysis = measure(same_pods("variant-1", reporting, *load), cfg=EXACT, costs={"variant-1": 5})
        return calculate_targets(analysis, [state], now_s=now, transition_timeout_s=TIMEOUT, not_reporting={})

    t0 = cycle(T0, current=2, reporting=2, desired=0)
    assert t0.targets == {"variant-1": 3}
    # T+30: the Deployment has 3 replicas, one still loading: metrics(2) != current(3) -> blocked at 3, not 4.
    t30 = cycle(T0 + 30, current=3, reporting=2, desired=3)
    assert (t30.blocked, t30.targets) == (True, {"variant-1": 3})
    t60 = cycle(T0 + 60, current=3, reporting=2, desired=3)
    assert (t60.blocked, t60.targets) == (True, {"variant-1": 3})
    # T+90: all 3 report, desired == current -> stable; still saturated, so a *new* decision (4) is allowed.
    t90 = cycle(T0 + 90, current=3, reporting=3, desired=3)
    assert (t90.blocked, t90.targets) == (False, {"variant-1": 4})
    # With the load relieved by the third replica (kv 0.4375: spare 0.3125, N=3 removal unsafe) it holds at 3.
    t90_relieved = cycle(T0 + 90, current=3, reporting=3, desired=3, load=(0.4375, 0.0))
    assert (t90_relieved.blocked, t90_relieved.targets) == (False, {"variant-1": 3})
