"""The simulated fleet (adapter/sim/fleet.py): pod lifecycle, routing, EPP queue, snapshots, accounting."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.snapshot import DesiredAlloc, NodeGpus, VariantStatus
from adapter.sim.fleet import (
    FleetConfig,
    MetricWindows,
    PodState,
    SimulatedFleet,
    StartupTime,
    VariantConfig,
)
from adapter.sim.replica import PerfParams
from adapter.sim.workload import PoissonArrivals, Request, TokenLengths, synthetic_requests

FIXED_60 = StartupTime(median_s=60.0, p90_s=60.0)


def variant(name: str = "a", **kw: Any) -> VariantConfig:
    base: dict[str, Any] = {"accelerator": "L4", "cost": 1.0, "startup": FIXED_60, "max_replicas": 10}
    base.update(kw)
    return VariantConfig(name=name, **base)


def fleet_of(*variants: VariantConfig, workload: Any = (), **kw: Any) -> SimulatedFleet:
    return SimulatedFleet(FleetConfig(model_id="meta/llama", variants=variants, **kw), workload)


def poisson(rate: float, duration: float, seed: int = 1, n_in: float = 500, n_out: float = 100) -> list[Request]:
    tokens = TokenLengths(n_in, n_out)
    return list(synthetic_requests(PoissonArrivals(rate), tokens=tokens, duration_s=duration, seed=seed))


def test_snapshot_describes_variants_targets_and_ready_pods() -> None:
    perf = PerfParams(kv_cache_tokens=32000, max_num_seqs=128, max_num_batched_tokens=4096, block_size=16)
    fleet = fleet_of(
        variant("l4", initial_replicas=2, perf=perf, cost=0.8, min_replicas=1, max_replicas=6),
        variant("h100", accelerator="H100", initial_replicas=1, cost=4.0, target_name="llama-h100"),
        namespace="llm",
    )
    status = VariantStatus(desired=DesiredAlloc(num_replicas=2, reason="r", last_run_time_s=0.0, last_update_s=None))
    snap = fleet.snapshot(10.0, {"l4": status})
    assert snap.taken_at_s == 10.0
    assert snap.metrics_available
    l4, h100 = snap.variants
    assert l4.spec.key == VariantKey("llm", "l4")
    assert l4.spec.model_id == "meta/llama"
    assert (l4.spec.min_replicas, l4.spec.max_replicas, l4.spec.cost, l4.spec.accelerator) == (1, 6, 0.8, "L4")
    assert l4.status is status
    assert h100.status == VariantStatus()
    assert h100.spec.target_name == "llama-h100"
    assert h100.target is not None
    assert h100.target.name == "llama-h100"
    assert l4.target is not None
    assert (l4.target.replicas, l4.target.ready_replicas, l4.target.spec_replicas) == (2, 2, 2)
    assert l4.target.vllm.max_num_seqs == 128
    assert l4.target.vllm.effective_max_batched_tokens == 4096
    assert l4.target.vllm.num_gpu_blocks_override == 2000
    assert sorted(p.pod for p in snap.pods) == ["l4-00000", "l4-00001", "llama-h100-00000"]
    pod = next(p for p in snap.pods if p.variant == "l4")
    assert (pod.num_gpu_blocks, pod.block_size, pod.max_batch_size) == (2000, 16, 128)
    assert pod.total_kv_capacity_tokens == 32000
    assert pod.kv_cache_usage == 0.0
    assert pod.queue_length == 0.0
    assert pod.has_saturation_metrics
    traffic = snap.models[ModelKey("llm", "meta/llama")]
    assert traffic.request_count == 0.0
    assert traffic.epp_queue_size == 0.0


@pytest.mark.parametrize(("startup_s", "at_s"), [(60.0, 100.0), (5.0, 0.0), (300.0, 12.3)], ids=["60s", "5s", "300s"])
def test_startup_delay_is_respected_and_pending_pods_report_nothing(startup_s: float, at_s: float) -> None:
    fleet = fleet_of(variant(startup=StartupTime(startup_s, startup_s)), workload=poisson(2.0, 1000.0))
    fleet.set_replicas("a", 2, at_s)
    just_before = fleet.snapshot(at_s + startup_s - 0.5)
    target = just_before.variants[0].target
    assert target is not None
    assert (target.replicas, target.ready_replicas, target.spec_replicas) == (2, 1, 2)
    assert target.pending_replicas == 1
    assert [p.pod for p in just_before.pods] == ["a-00000"]
    assert fleet.replica_counts("a")[PodState.STARTING] == 1
    at_ready = fleet.snapshot(at_s + startup_s)
    assert sorted(p.pod for p in at_ready.pods) == ["a-00000", "a-00001"]
    new_pod = next(p for p in fleet.pods("a") if p.name == "a-00001")
    assert new_pod.ready_at_s == pytest.approx(at_s + startup_s)
    # the new pod gets traffic once ready
    later = fleet.snapshot(at_s + startup_s + 60.0)
    rates = {p.pod: p.arrival_rate_rps for p in later.pods}
    assert rates["a-00001"] is not None
    assert rates["a-00001"] > 0.3


def test_a_pod_reports_no_arrival_rate_until_it_has_two_samples() -> None:
    """As Prometheus' rate() over a window with one sample: no series, not 0 (a new pod, the run's first
    instant); an idle pod with two samples reports 0."""
    fleet = fleet_of(variant(startup=StartupTime(5.0, 5.0)), workload=poisson(4.0, 1000.0))
    first = fleet.snapshot(0.0)
    assert [p.arrival_rate_rps for p in first.pods] == [None]
    later = fleet.snapshot(60.0)
    assert [p.arrival_rate_rps for p in later.pods] == [pytest.approx(4.0, rel=0.5)]
    idle = fleet_of(variant(startup=StartupTime(5.0, 5.0)), workload=poisson(0.0, 1000.0))
    idle.snapshot(0.0)
    assert [p.arrival_rate_rps for p in idle.snapshot(60.0).pods] == [0.0]


def test_startup_time_is_lognormal_with_the_given_median_and_p90() -> None:
    startup = StartupTime(median_s=120.0, p90_s=300.0)
    rng = np.random.default_rng(0)
    samples = np.array([startup.sample_s(rng) for _ in range(20000)])
    assert np.median(samples) == pytest.approx(120.0, rel=0.03)
    assert np.percentile(samples, 90) == pytest.approx(300.0, rel=0.04)
    assert StartupTime(30.0, 30.0).sample_s(rng) == 30.0


def test_scale_down_drains_in_flight_requests_without_routing_new_ones() -> None:
    # long answers so that requests are in flight when the scale-down happens
    reqs = poisson(4.0, 120.0, n_in=200, n_out=600)
    fleet = fleet_of(variant(initial_replicas=2), workload=reqs, drain_grace_s=600.0)
    fleet.advance(60.0)
    fleet.set_replicas("a", 1, 60.0)
    states = {p.name: p.state for p in fleet.pods("a")}
    assert sorted(states.values(), key=lambda s: s.value) == [PodState.DRAINING, PodState.READY]
    draining = next(name for name, s in states.items() if s is PodState.DRAINING)
    target = fleet.scale_target("a")
    assert (target.replicas, target.spec_replicas) == (1, 1)  # terminating pods are not counted
    snap = fleet.snapshot(61.0)
    assert [p.pod for p in snap.pods] != [draining]
    assert all(p.pod != draining for p in snap.pods)
    fleet.advance(400.0)
    assert all(p.name != draining for p in fleet.pods("a"))  # gone once empty
    usage = fleet.usage()
    assert usage.dropped == 0
    assert usage.completed == len(reqs)
    assert usage.variants[0].scale_events == 1


def test_drain_grace_period_drops_what_is_left() -> None:
    reqs = [Request(0.0, 200, 5000) for _ in range(4)]
    fleet = fleet_of(variant(initial_replicas=1), workload=reqs, drain_grace_s=5.0)
    fleet.advance(1.0)
    fleet.set_replicas("a", 0, 1.0)
    fleet.advance(10.0)
    usage = fleet.usage()
    assert usage.dropped == 4
    assert usage.dropped_by_reason == {"drained": 4}
    assert fleet.pods("a") == []
    assert usage.variants[0].replica_seconds == pytest.approx(6.0)  # 0 → 1 s, then 5 s of grace


def test_scale_down_removes_pending_pods_first_then_the_least_loaded() -> None:
    fleet = fleet_of(variant(initial_replicas=3), workload=[Request(0.0, 100, 10000), Request(0.2, 100, 10000)])
    fleet.advance(1.0)
    busy = {p.pod for p in fleet.snapshot(1.0).pods if (p.running_requests or 0) > 0}
    assert len(busy) == 2
    fleet.set_replicas("a", 4, 1.0)  # a fourth pod, still starting
    fleet.set_replicas("a", 2, 2.0)
    left = {p.name: p.state for p in fleet.pods("a")}
    # the starting pod and the idle ready pod went (the idle one at once, nothing to drain)
    assert left == dict.fromkeys(busy, PodState.READY)
    fleet.set_replicas("a", 1, 3.0)  # both busy: one drains
    assert sorted(s.value for s in [p.state for p in fleet.pods("a")]) == ["draining", "ready"]


def test_requests_wait_in_the_epp_queue_at_zero_and_are_served_after_scale_from_zero() -> None:
    reqs = poisson(2.0, 300.0)
    fleet = fleet_of(
        variant(initial_replicas=0, min_replicas=0, startup=StartupTime(20.0, 20.0)),
        workload=reqs,
        epp_queue_timeout_s=120.0,
    )
    snap = fleet.snapshot(30.0)
    traffic = snap.models[fleet.model]
    arrived = sum(1 for r in reqs if r.arrival_s < 30.0)
    assert snap.pods == ()
    assert traffic.epp_queue_size == arrived > 30
    assert traffic.epp_queue_bytes == 4 * sum(r.input_tokens for r in reqs if r.arrival_s < 30.0)
    assert traffic.request_count == 0.0
    fleet.set_replicas("a", 1, 30.0)
    assert fleet.snapshot(49.0).models[fleet.model].epp_queue_size > arrived  # still starting: queue grows
    assert fleet.snapshot(50.5).models[fleet.model].epp_queue_size == 0  # released on ready
    fleet.advance(900.0)
    out = fleet.outcomes()
    assert out.completed == len(reqs)
    assert out.dropped == 0
    first = out.ttft_s[out.arrival_s < 1.0]
    assert first.size
    assert first.min() >= 49.0


def test_epp_queue_times_out() -> None:
    reqs = poisson(1.0, 200.0)
    fleet = fleet_of(variant(initial_replicas=0, min_replicas=0), workload=reqs, epp_queue_timeout_s=30.0)
    fleet.advance(200.0)
    assert fleet.epp_queue_size <= 30 + 15
    fleet.advance(260.0)
    usage = fleet.usage()
    assert usage.dropped == len(reqs) == usage.dropped_by_reason["epp_timeout"]
    assert usage.cost == 0.0
    assert fleet.outcomes().slo_attainment(ttft_s=2.0, itl_s=0.1) == 0.0


def test_accounting_charges_starting_ready_and_draining_pods() -> None:
    fleet = fleet_of(
        variant("a", initial_replicas=2, cost=3.6, gpus_per_replica=2),
        variant("b", initial_replicas=0, cost=1.0),
    )
    fleet.set_replicas("b", 1, 50.0)  # starting 50 → 110 s, ready afterwards
    fleet.set_replicas("a", 1, 80.0)  # idle pod: gone at once
    fleet.advance(100.0)
    usage = fleet.usage()
    a, b = usage.variants
    assert a.replica_seconds == pytest.approx(2 * 80 + 20)
    assert a.gpu_seconds == pytest.approx(2 * a.replica_seconds)
    assert a.cost == pytest.approx(a.replica_seconds / 3600 * 3.6)
    assert b.replica_seconds == pytest.approx(50.0)
    assert (a.max_replicas, b.max_replicas) == (2, 1)
    assert usage.gpu_hours == pytest.approx((a.gpu_seconds + b.gpu_seconds) / 3600)
    assert usage.cost == pytest.approx(a.cost + b.cost)
    assert [(e.variant, e.from_replicas, e.to_replicas) for e in fleet.scale_events] == [("b", 0, 1), ("a", 2, 1)]


def test_request_count_covers_the_retention_window() -> None:
    reqs = poisson(2.0, 400.0)
    fleet = fleet_of(variant(initial_replicas=2), workload=reqs, retention_s=120.0)
    snap = fleet.snapshot(300.0)
    expected = fleet.outcomes()
    done = expected.arrival_s + expected.e2e_s
    in_window = int(np.count_nonzero(done > 300.0 - 120.0))
    # the base sample sits on the 15 s scrape grid, so the window is 120–135 s long
    assert in_window <= snap.models[fleet.model].request_count <= in_window + 2.0 * 15 * 2
    idle = fleet.snapshot(700.0)
    assert idle.models[fleet.model].request_count == 0.0  # nothing for longer than the retention


def test_prometheus_outage_yields_no_pods_and_no_traffic() -> None:
    fleet = fleet_of(variant(initial_replicas=1), workload=poisson(1.0, 100.0))
    snap = fleet.snapshot(50.0, metrics_available=False)
    assert not snap.metrics_available
    assert snap.pods == ()
    assert dict(snap.models) == {}
    assert snap.variants[0].target is not None
    assert snap.variants[0].target.ready_replicas == 1


def test_pod_metrics_agree_with_the_request_log() -> None:
    reqs = poisson(3.0, 600.0, seed=3)
    fleet = fleet_of(
        variant(initial_replicas=2),
        workload=reqs,
        windows=MetricWindows(gauge_window_s=60.0, rate_window_s=60.0, token_window_s=300.0),
    )
    snap = fleet.snapshot(600.0)
    out = fleet.outcomes()
    recent = out.arrival_s + out.e2e_s > 540.0
    total_rate = sum(p.arrival_rate_rps or 0.0 for p in snap.pods)
    arrived_last_minute = sum(1 for r in reqs if r.arrival_s >= 540.0)
    assert total_rate == pytest.approx(arrived_last_minute / 60.0, rel=0.15)
    for pod in snap.pods:
        assert pod.avg_ttft_s is not None
        assert pod.avg_itl_s is not None
        assert pod.avg_ttft_s == pytest.approx(float(np.mean(out.ttft_s[recent])), rel=0.5)
        assert pod.avg_itl_s == pytest.approx(float(np.nanmean(out.itl_s[recent])), rel=0.2)
        assert pod.avg_input_tokens == pytest.approx(500, rel=0.2)
        assert pod.avg_output_tokens == pytest.approx(100, rel=0.25)
        assert 0.0 <= (pod.kv_cache_usage or 0.0) <= 1.0
        assert pod.tokens_in_use is not None
        assert pod.running_requests is not None


def test_router_spreads_load_over_identical_replicas() -> None:
    reqs = poisson(4.0, 300.0)
    fleet = fleet_of(variant(initial_replicas=4), workload=reqs)
    fleet.advance(300.0)
    counts = [p.arrival_rate_rps for p in fleet.snapshot(300.0).pods]
    assert all(c is not None for c in counts)
    values = np.array(counts, dtype=float)
    assert values.min() > 0.6 * values.mean()


def test_gpu_inventory_keeps_extra_pods_unscheduled_until_gpus_free_up() -> None:
    fleet = fleet_of(
        variant("a", initial_replicas=1),
        variant("b", initial_replicas=1, startup=StartupTime(10.0, 10.0)),
        nodes=(NodeGpus("n1", "L4", 2),),
    )
    fleet.set_replicas("a", 2, 0.0)  # 2 of 2 GPUs used by a (1) and b (1): the new a pod cannot start
    fleet.advance(100.0)
    assert fleet.replica_counts("a")[PodState.UNSCHEDULED] == 1
    assert fleet.usage().variants[0].replica_seconds == pytest.approx(100.0)  # unscheduled pods cost nothing
    fleet.set_replicas("b", 0, 100.0)
    fleet.advance(161.0)
    assert fleet.replica_counts("a")[PodState.READY] == 2
    snap = fleet.snapshot(161.0)
    assert snap.nodes == (NodeGpus("n1", "L4", 2),)


def test_same_seed_same_world() -> None:
    def run() -> tuple[Any, ...]:
        fleet = fleet_of(
            variant(initial_replicas=1, startup=StartupTime(30.0, 90.0)),
            workload=poisson(3.0, 300.0),
            seed=9,
        )
        fleet.set_replicas("a", 3, 10.0)
        fleet.advance(300.0)
        out = fleet.outcomes()
        return tuple(out.ttft_s.tolist()), tuple(p.ready_at_s for p in fleet.pods())

    assert run() == run()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(lambda f: f.advance(5.0), "back in time", id="advance-backwards"),
        pytest.param(lambda f: f.set_replicas("a", 1, 5.0), "in the past", id="act-in-the-past"),
        pytest.param(lambda f: f.set_replicas("a", -1, 20.0), "replicas", id="negative"),
        pytest.param(lambda f: f.set_replicas("zz", 1, 20.0), "unknown variant", id="unknown-variant"),
    ],
)
def test_misuse_is_reported(call: Any, message: str) -> None:
    fleet = fleet_of(variant())
    fleet.advance(10.0)
    with pytest.raises((ValueError, KeyError), match=message):
        call(fleet)


def test_variant_from_the_design_scenario_example() -> None:
    v = VariantConfig.from_mapping(
        {
            "name": "l4", "accelerator": "L4", "cost": 0.8, "min_replicas": 1, "max_replicas": 10,
            "initial_replicas": 1, "startup_s": {"median": 120, "p90": 300},
            "perf": {"alpha_ms": 20, "beta_ms": 0.08, "gamma_ms": 0.0002, "kv_cache_tokens": 30000,
                     "max_num_seqs": 256, "max_num_batched_tokens": 2048},
        }
    )  # fmt: skip
    assert v.perf.kv_cache_tokens == 30000
    assert v.startup.p90_s == 300.0
    assert v.cost == 0.8
    with pytest.raises(ValueError, match="unknown keys"):
        VariantConfig.from_mapping({"name": "x", "gpu": "L4"})
    with pytest.raises(ValueError, match="perf"):
        VariantConfig.from_mapping({"name": "x", "perf": {"alpha": 3}})


def test_outcome_scoring() -> None:
    reqs = poisson(2.0, 200.0)
    fleet = fleet_of(variant(initial_replicas=1), workload=reqs)
    fleet.advance(400.0)
    out = fleet.outcomes()
    assert out.completed == len(reqs)
    assert out.in_flight == 0
    assert out.slo_attainment(ttft_s=100.0, itl_s=10.0) == 1.0
    assert out.slo_attainment(ttft_s=0.0, itl_s=10.0) == 0.0
    p50 = out.percentile_ms("ttft", 50)
    assert p50 == pytest.approx(float(np.median(out.ttft_s)) * 1000)
    assert out.slo_attainment(ttft_s=p50 / 1000, itl_s=10.0) == pytest.approx(0.5, abs=0.02)
    assert math.isnan(fleet_of(variant()).outcomes().percentile_ms("itl", 99))


def test_zero_startup_is_ready_at_once() -> None:
    fleet = fleet_of(variant(initial_replicas=0, min_replicas=0, startup=StartupTime(0.0, 0.0)))
    fleet.set_replicas("a", 2, 5.0)
    assert len(fleet.snapshot(5.0).pods) == 2


def test_fleet_config_from_the_design_scenario() -> None:
    scenario = {
        "name": "conv-two-variants", "model_id": "meta/llama-3.1-8b", "namespace": "default",
        "metrics": {"scrape_interval_s": 30},
        "variants": [
            {"name": "l4", "accelerator": "L4", "cost": 0.8, "min_replicas": 1, "max_replicas": 10,
             "initial_replicas": 1, "startup_s": {"median": 120, "p90": 300}, "perf": {"alpha_ms": 20}},
            {"name": "h100", "accelerator": "H100", "cost": 4.0},
        ],
    }  # fmt: skip
    cfg = FleetConfig.from_scenario(scenario, seed=3, retention_s=900.0)
    assert [v.name for v in cfg.variants] == ["l4", "h100"]
    assert (cfg.model_id, cfg.scrape_interval_s, cfg.seed, cfg.retention_s) == ("meta/llama-3.1-8b", 30.0, 3, 900.0)
    with pytest.raises(ValueError, match=r"scenario\.variants\[1\]"):
        FleetConfig.from_scenario({**scenario, "variants": [scenario["variants"][0], {"name": "x", "colour": 1}]})
    with pytest.raises(ValueError, match="model_id"):
        FleetConfig.from_scenario({"variants": scenario["variants"]})


def test_scale_targets_carry_the_startup_times_of_their_ready_pods() -> None:
    """Creation → Ready, as the inventory reads it from Kubernetes: waiting for a GPU counts; pods running at the
    start report the median startup; starting pods report nothing yet."""
    fleet = fleet_of(
        variant("a", initial_replicas=1),
        variant("b", initial_replicas=1, startup=StartupTime(10.0, 10.0)),
        nodes=(NodeGpus("n1", "L4", 2),),
    )
    assert fleet.scale_target("a").startup_s == (60.0,)  # the initial pod, as if created a median earlier
    fleet.set_replicas("a", 2, 0.0)  # no free GPU: the new pod waits
    fleet.advance(100.0)
    assert fleet.scale_target("a").startup_s == (60.0,)
    fleet.set_replicas("b", 0, 100.0)  # frees the GPU at 100 s: scheduled then, ready 60 s later
    fleet.advance(159.0)
    assert fleet.scale_target("a").startup_s == (60.0,)
    fleet.advance(161.0)
    assert fleet.scale_target("a").startup_s == (60.0, 160.0)  # created at 0, ready at 160
    assert fleet.scale_target("b").startup_s == ()
    created = {p.name: p.created_s for p in fleet.pods("a")}
    assert sorted(created.values()) == [-60.0, 0.0]
