"""HPA / KEDA emulation (adapter/sim/actuators.py), plus one closed loop with the fleet."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.domain.snapshot import ScaleTarget
from adapter.sim.actuators import (
    DirectActuator,
    HpaConfig,
    HpaController,
    HpaEmulator,
    KedaConfig,
    KedaEmulator,
    ScalingPolicy,
    actuator_from_spec,
    average_value_proposal,
)
from adapter.sim.fleet import FleetConfig, SimulatedFleet, StartupTime, VariantConfig
from adapter.sim.workload import StepArrivals, SyntheticWorkload, TokenLengths


def target(spec: int, status: int | None = None, ready: int | None = None) -> ScaleTarget:
    status = spec if status is None else status
    return ScaleTarget(
        kind="Deployment", namespace="ns", name="d", replicas=status,
        ready_replicas=status if ready is None else ready, spec_replicas=spec,
    )  # fmt: skip


# ------------------------------------------------------------------------------------------- tolerance


@pytest.mark.parametrize(
    ("status", "metric", "mode", "expected"),
    [
        # float64 exactness (research/wva-upstream.md §7.1): |1 − 1.1| = 0.10000000000000009 > 0.1
        pytest.param(10, 11, "abs", 11, id="abs-10to11-scales"),
        pytest.param(10, 9, "abs", 10, id="abs-10to9-swallowed"),
        # k8s ≥ 1.33 inclusive bounds: 1.1 <= 1 + 0.1 holds exactly
        pytest.param(10, 11, "bounds", 10, id="bounds-10to11-swallowed"),
        pytest.param(10, 9, "bounds", 10, id="bounds-10to9-swallowed"),
        # research/k8s-metrics-keda-hpa.md §2.4 table
        pytest.param(20, 21, "bounds", 20, id="20to21-within"),
        pytest.param(20, 22, "bounds", 20, id="20to22-inclusive"),
        pytest.param(20, 23, "bounds", 23, id="20to23"),
        pytest.param(9, 10, "bounds", 10, id="9to10"),
        pytest.param(20, 18, "bounds", 20, id="20to18-within"),
        pytest.param(20, 17, "bounds", 17, id="20to17"),
        pytest.param(100, 109, "abs", 100, id="100to109"),
        pytest.param(11, 12, "abs", 11, id="abs-11to12-swallowed"),
        pytest.param(11, 10, "abs", 11, id="abs-11to10-swallowed"),
        pytest.param(3, 1, "abs", 1, id="3to1"),
        pytest.param(0, 3, "abs", 3, id="from-zero"),
        pytest.param(0, 0, "abs", 0, id="zero-over-zero-is-nan"),
        pytest.param(2, 0, "abs", 0, id="to-zero"),
        pytest.param(2, 2.2, "abs", 3, id="fractional-rounds-up"),
    ],
)
def test_average_value_proposal(status: int, metric: float, mode: str, expected: int) -> None:
    cfg = HpaConfig(tolerance_mode=mode)  # type: ignore[arg-type]
    assert average_value_proposal(metric, status_replicas=status, config=cfg) == expected


def test_tolerance_zero_follows_every_step() -> None:
    cfg = HpaConfig(tolerance=0.0)
    assert [average_value_proposal(d, status_replicas=20, config=cfg) for d in (19, 20, 21)] == [19, 20, 21]


def test_per_direction_tolerances() -> None:
    cfg = HpaConfig(scale_up_tolerance=0.0, scale_down_tolerance=0.5, tolerance_mode="bounds")
    assert average_value_proposal(21, status_replicas=20, config=cfg) == 21
    assert average_value_proposal(11, status_replicas=20, config=cfg) == 20


@settings(max_examples=300, deadline=None)
@given(status=st.integers(1, 500), desired=st.integers(0, 600), mode=st.sampled_from(["abs", "bounds"]))
def test_proposal_is_either_status_or_the_metric(status: int, desired: int, mode: str) -> None:
    cfg = HpaConfig(tolerance_mode=mode)  # type: ignore[arg-type]
    got = average_value_proposal(desired, status_replicas=status, config=cfg)
    assert got in (status, desired)
    if abs(desired - status) > 0.11 * status:
        assert got == desired


# ------------------------------------------------------------------------------------------- controller


def run_hpa(
    cfg: HpaConfig, metric_at: Any, *, start: int, until: float, step_s: float = 1.0
) -> list[tuple[float, int]]:
    """Drive one HPA every `step_s` against a Deployment that follows it at once; returns the changes."""
    emu = HpaEmulator({"v": cfg})
    spec = start
    changes: list[tuple[float, int]] = []
    t = 0.0
    while t <= until:
        out = emu.step(t, desired={"v": metric_at(t)}, targets={"v": target(spec)})
        if "v" in out:
            spec = out["v"]
            changes.append((t, spec))
        t += step_s
    return changes


def test_scale_down_waits_for_the_stabilization_window() -> None:
    changes = run_hpa(HpaConfig(max_replicas=20), lambda t: 10 if t < 60 else 5, start=10, until=600.0)
    # the last recommendation of 10 was at t = 45 s; it leaves the 300 s window at t = 345 s
    assert changes == [(345.0, 5)]  # k8s keeps a recommendation while its time is *after* now − window


def test_scale_down_stabilization_takes_the_highest_recent_recommendation() -> None:
    def metric(t: float) -> int:
        return 10 if t < 60 else (7 if t < 200 else 4)

    changes = run_hpa(HpaConfig(max_replicas=20), metric, start=10, until=900.0)
    # 10 until 45 s; 7 from 60 s to 195 s; 4 after: drop to 7 once 45 s is out of the window, to 4 once 195 s is
    assert changes == [(345.0, 7), (495.0, 4)]


def test_scale_up_is_immediate_but_rate_limited() -> None:
    changes = run_hpa(HpaConfig(max_replicas=50), lambda t: 2 if t < 30 else 20, start=2, until=120.0)
    # policies: max(+4 pods, +100 %) per 15 s ⇒ 2 → 6 → 12 → 20
    assert changes == [(30.0, 6), (45.0, 12), (60.0, 20)]


def test_sync_period_is_respected() -> None:
    cfg = HpaConfig(max_replicas=50, sync_period_s=15.0)
    changes = run_hpa(cfg, lambda t: 2 if t < 7 else 3, start=2, until=40.0, step_s=0.5)
    assert changes == [(15.0, 3)]  # metric changed at 7 s; the next sync is at 15 s
    emu = HpaEmulator({"v": cfg}, start_s=100.0)
    assert emu.next_event_s() == 100.0
    emu.step(100.0, desired={"v": 2}, targets={"v": target(2)})
    assert emu.next_event_s() == 115.0
    assert emu.step(110.0, desired={"v": 9}, targets={"v": target(2)}) == {}
    emu.step(140.0, desired={"v": 2}, targets={"v": target(2)})  # late: one sync, next on the grid
    assert emu.next_event_s() == 145.0


@pytest.mark.parametrize(
    ("cfg", "spec", "metric", "expected"),
    [
        pytest.param(HpaConfig(min_replicas=2, max_replicas=5), 3, 9, 5, id="clamp-max"),
        pytest.param(HpaConfig(min_replicas=2, max_replicas=5), 3, 0, 2, id="first-sync-has-no-history"),
        pytest.param(HpaConfig(min_replicas=2, max_replicas=5, scale_down_stabilization_s=0), 3, 0, 2, id="clamp-min"),
        pytest.param(HpaConfig(min_replicas=2, max_replicas=5), 7, 3, 5, id="above-max-rescales"),
        pytest.param(HpaConfig(min_replicas=2, max_replicas=5), 1, 1, 2, id="below-min-rescales"),
        pytest.param(HpaConfig(min_replicas=0, max_replicas=5), 0, 3, 0, id="zero-without-gate-disabled"),
        pytest.param(
            HpaConfig(min_replicas=0, max_replicas=5, scale_down_stabilization_s=0), 1, 0, 1, id="min0-means-1"
        ),
        pytest.param(HpaConfig(min_replicas=0, max_replicas=5, scale_to_zero=True), 0, 3, 3, id="scale-from-zero-gate"),
        pytest.param(
            HpaConfig(min_replicas=0, max_replicas=5, scale_to_zero=True, scale_down_stabilization_s=0),
            1,
            0,
            0,
            id="scale-to-zero-gate",
        ),
        pytest.param(HpaConfig(max_replicas=5), 3, None, 3, id="missing-metric-freezes"),
        pytest.param(HpaConfig(max_replicas=5), 3, math.nan, 3, id="nan-metric-freezes"),
    ],
)
def test_single_sync(cfg: HpaConfig, spec: int, metric: float | None, expected: int) -> None:
    assert HpaController(cfg).sync(0.0, metric=metric, spec_replicas=spec, status_replicas=spec) == expected


def test_status_replicas_not_spec_set_the_tolerance_base() -> None:
    """AverageValue divides by status.replicas: a surge pod (status 11, spec 10) and metric 10 ⇒ ratio 0.909,
    inside the band, so the HPA proposes status.replicas = 11 (kubernetes#138505)."""
    ctl = HpaController(HpaConfig(max_replicas=20))
    assert ctl.sync(0.0, metric=10, spec_replicas=10, status_replicas=11) == 11


def test_custom_policies() -> None:
    cfg = HpaConfig(
        max_replicas=100,
        scale_up_policies=(ScalingPolicy("pods", 1, 60.0),),
        scale_down_policies=(ScalingPolicy("pods", 1, 60.0),),
        scale_down_stabilization_s=0,
    )
    up = run_hpa(cfg, lambda t: 10, start=1, until=200.0)
    # +1 per 60 s: an event at t counts while it is after now − 60 s, so the next step is at t + 60 s
    assert up == [(0.0, 2), (60.0, 3), (120.0, 4), (180.0, 5)]


# ------------------------------------------------------------------------------------------- KEDA


def run_keda(
    cfg: KedaConfig, metric_at: Any, *, start: int, until: float, step_s: float = 1.0
) -> list[tuple[float, int]]:
    emu = KedaEmulator({"v": cfg})
    spec = start
    changes: list[tuple[float, int]] = []
    t = 0.0
    while t <= until:
        out = emu.step(t, desired={"v": metric_at(t)}, targets={"v": target(spec)})
        if "v" in out:
            spec = out["v"]
            changes.append((t, spec))
        t += step_s
    return changes


def test_keda_activates_from_zero_at_the_next_poll() -> None:
    cfg = KedaConfig(polling_interval_s=30.0, max_replica_count=10)
    changes = run_keda(cfg, lambda t: 0 if t < 40 else 1, start=0, until=100.0)
    assert changes == [(60.0, 1)]


def test_keda_push_activates_immediately() -> None:
    cfg = KedaConfig(polling_interval_s=30.0, push=True, max_replica_count=10)
    changes = run_keda(cfg, lambda t: 0 if t < 40 else 1, start=0, until=100.0)
    assert changes == [(40.0, 1)]


def test_keda_scales_to_zero_after_the_cooldown() -> None:
    cfg = KedaConfig(polling_interval_s=30.0, cooldown_s=300.0, max_replica_count=10)
    changes = run_keda(cfg, lambda t: 1 if t < 100 else 0, start=1, until=800.0)
    # last active poll at 90 s; inactive polls from 120 s; zero at the first poll ≥ 90 + 300 s
    assert changes == [(390.0, 0)]


def test_keda_hpa_handles_one_to_n_and_keeps_at_least_one() -> None:
    cfg = KedaConfig(
        polling_interval_s=30.0, cooldown_s=120.0, max_replica_count=10, hpa=HpaConfig(scale_down_stabilization_s=60)
    )

    def metric(t: float) -> int:
        return 4 if t < 200 else (0 if t >= 400 else 1)

    changes = run_keda(cfg, metric, start=1, until=700.0)
    # HPA up to 4 at once; down to 1 after its 60 s window; KEDA takes it to 0 once inactive for 120 s
    assert changes[0] == (0.0, 4)
    assert (255.0, 1) in changes
    assert changes[-1] == (510.0, 0)
    assert all(n >= 1 for _, n in changes[:-1])


def test_keda_never_active_uses_the_initial_cooldown() -> None:
    cfg = KedaConfig(polling_interval_s=10.0, initial_cooldown_s=60.0, max_replica_count=3)
    assert run_keda(cfg, lambda t: 0, start=1, until=100.0) == [(60.0, 0)]


def test_keda_with_min_replica_count_never_goes_to_zero() -> None:
    cfg = KedaConfig(min_replica_count=1, polling_interval_s=10.0, cooldown_s=30.0, max_replica_count=3)
    assert run_keda(cfg, lambda t: 0, start=1, until=400.0) == []


def test_keda_scaler_error_changes_nothing() -> None:
    cfg = KedaConfig(polling_interval_s=10.0, cooldown_s=0.0, max_replica_count=3)
    assert run_keda(cfg, lambda t: None, start=0, until=100.0) == []
    assert run_keda(cfg, lambda t: None, start=2, until=100.0) == []


# ------------------------------------------------------------------------------------------- building


def test_actuator_from_spec() -> None:
    bounds = {"a": (1, 4), "b": (0, 6)}
    hpa = actuator_from_spec(
        {"kind": "hpa", "sync_period_s": 15, "tolerance": 0.0, "scale_down_stabilization_s": 120}, bounds=bounds
    )
    assert isinstance(hpa, HpaEmulator)
    assert hpa.controllers["b"].config.effective_min_replicas == 1
    assert hpa.controllers["a"].config.scale_down_stabilization_s == 120.0
    keda = actuator_from_spec(
        {"kind": "keda", "polling_interval_s": 5, "cooldown_s": 60}, bounds=bounds, scale_to_zero=True
    )
    assert isinstance(keda, KedaEmulator)
    assert keda.states["a"].config.min_replica_count == 0
    assert keda.states["a"].hpa.config.min_replicas == 1
    assert keda.states["b"].hpa.config.max_replicas == 6
    assert isinstance(actuator_from_spec({"kind": "direct"}, bounds=bounds), DirectActuator)
    with pytest.raises(ValueError, match="unknown keys"):
        actuator_from_spec({"kind": "hpa", "sync": 15}, bounds=bounds)
    with pytest.raises(ValueError, match=r"actuation\.kind"):
        actuator_from_spec({"kind": "vpa"}, bounds=bounds)
    with pytest.raises(ValueError, match="tolerance_mode"):
        actuator_from_spec({"kind": "hpa", "tolerance_mode": "fuzzy"}, bounds=bounds)


def test_direct_actuator_applies_and_clamps() -> None:
    direct = DirectActuator({"v": (1, 5)}, period_s=10.0)
    assert direct.step(0.0, desired={"v": 7.2}, targets={"v": target(2)}) == {"v": 5}
    assert direct.step(5.0, desired={"v": 3}, targets={"v": target(5)}) == {}
    assert direct.step(10.0, desired={"v": 0}, targets={"v": target(5)}) == {"v": 1}


# ------------------------------------------------------------------------------------------- closed loop


def test_closed_loop_fleet_and_hpa_follow_a_step_in_load() -> None:
    """A toy policy (desired = ⌈arrival rate / 1.5 rps per replica⌉) through the HPA emulator scales the fleet
    up after the step and back down after the stabilization window once the load drops."""
    variant = VariantConfig(
        name="v", accelerator="L4", cost=1.0, min_replicas=1, max_replicas=8, startup=StartupTime(60.0, 60.0)
    )
    workload = SyntheticWorkload(
        StepArrivals(((0.0, 1.0), (300.0, 8.0), (1200.0, 1.0))), TokenLengths(500, 100), duration_s=2400.0, seed=2
    )
    fleet = SimulatedFleet(FleetConfig(model_id="m", variants=(variant,)), workload)
    hpa = HpaEmulator({"v": HpaConfig(min_replicas=1, max_replicas=8)})
    desired: dict[str, float | None] = {"v": 1.0}
    t = 0.0
    while t < 2400.0:
        t = min(hpa.next_event_s(), t + 30.0)
        fleet.advance(t)
        if t % 30.0 == 0.0:  # the "engine", every 30 s
            snap = fleet.snapshot(t)
            rate = (
                sum(p.arrival_rate_rps or 0.0 for p in snap.pods) + (snap.models[fleet.model].epp_queue_size or 0) / 30
            )
            desired = {"v": float(max(1, math.ceil(rate / 1.5)))}
        targets = {"v": fleet.scale_target("v")}
        for name, n in hpa.step(t, desired=desired, targets=targets).items():
            fleet.set_replicas(name, n, t)
    events = fleet.scale_events
    peak = max(e.to_replicas for e in events)
    assert 5 <= peak <= 8
    up = next(e for e in events if e.to_replicas > 1)
    assert 300.0 <= up.t_s <= 400.0
    down = [e for e in events if e.to_replicas < e.from_replicas]
    # after the drop at 1200 s the 300 s scale-down window holds the fleet (the engine runs every 30 s, so
    # the last high recommendation may be up to 30 s after the drop)
    after_drop = [e for e in down if e.t_s > 1200.0]
    assert after_drop
    assert after_drop[0].t_s >= 1200.0 + 300.0
    assert fleet.spec_replicas("v") == 1
    usage = fleet.usage()
    assert usage.dropped == 0
    assert usage.variants[0].max_replicas == peak
