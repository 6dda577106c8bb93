"""Saturation V2 (token-based): every formula against a worked example, the arithmetic written above each
assertion (seed 001; research §2)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from adapter.analyzers import tokens as v2
from adapter.config.configmaps import SaturationConfig
from adapter.domain.capacity import CapacitySignal, NoSignal, Role
from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.snapshot import (
    ModelTraffic,
    PodMetrics,
    ScaleTarget,
    VariantSpec,
    VariantView,
    VllmArgs,
)

CFG = SaturationConfig(analyzer_name="saturation")  # 0.80 / 5 / 0.85 / 0.70
MODEL = ModelKey("llm", "m")
NOW = 1_767_225_600.0


def pod(variant: str, i: int = 0, **metrics: float) -> PodMetrics:
    base = {"kv_cache_usage": 0.0, "queue_length": 0.0, "num_gpu_blocks": 1000, "block_size": 16}
    base.update(metrics)
    return PodMetrics(namespace="llm", pod=f"{variant}-{i}", variant=variant, **base)  # type: ignore[arg-type]


def view(
    name: str, *, replicas: int, ready: int | None = None, cost: float = 10.0, vllm: VllmArgs | None = None
) -> VariantView:
    spec = VariantSpec(
        VariantKey("llm", name), "m", "Deployment", name, min_replicas=0, max_replicas=10, cost=cost, accelerator="L4"
    )
    target = ScaleTarget(
        "Deployment", "llm", name, replicas, replicas if ready is None else ready, replicas, vllm=vllm or VllmArgs()
    )
    return VariantView(spec=spec, target=target)


def analyze(
    views: list[VariantView],
    pods: list[PodMetrics],
    *,
    memory: v2.TokenMemory | None = None,
    traffic: ModelTraffic | None = None,
    roles: dict[str, Role] | None = None,
    cfg: SaturationConfig = CFG,
) -> tuple[CapacitySignal | NoSignal, v2.TokenMemory]:
    by_variant = {v.key.name: [p for p in pods if p.variant == v.key.name] for v in views}
    return v2.measure(
        MODEL,
        views,
        by_variant,
        cfg=cfg,
        traffic=traffic,
        roles=roles or {},
        memory=memory or v2.TokenMemory(),
        now_s=NOW,
    )


# ---- per replica --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metrics", "vllm", "history", "k1", "k2", "source", "demand"),
    [
        # total = 1000 · 16 = 16,000 tokens; k1 = floor(16,000 · 0.80) = 12,800; queue 0 < 5, no history,
        # no output length → derived impossible → k2 = k1. demand = kv 0.5 · 16,000 = 8,000.
        pytest.param({"kv_cache_usage": 0.5}, VllmArgs(), None, 12_800, 12_800, "k1", 8_000.0, id="fallback-k1"),
        # queue 5 >= floor(5) and 9,000 tokens in use → observed k2 = 9,000;
        # demand = 9,000 + 5 · floor(300.7) = 10,500.
        pytest.param(
            {"queue_length": 5, "tokens_in_use": 9000, "avg_input_tokens": 300.7},
            VllmArgs(),
            None,
            12_800,
            9_000,
            "observed",
            10_500.0,
            id="observed-when-queue-saturated",
        ),
        # history mean (8,000 + 10,001) / 2 = 9,000.5 → floor 9,000.
        pytest.param(
            {"kv_cache_usage": 0.25},
            VllmArgs(),
            v2.K2History((8000, 10001), NOW),
            12_800,
            9_000,
            "history",
            4_000.0,
            id="rolling-history",
        ),
        # derived: B = 2048, S = 256, I = 1000, O = 200: N = min(2048 · 200 / 1200, 256) = min(341.3, 256) = 256;
        # k2 = floor(256 · (1000 + 100)) = 281,600 > k1, so capacity = k1 = 12,800.
        pytest.param(
            {"avg_input_tokens": 1000, "avg_output_tokens": 200},
            VllmArgs(max_num_batched_tokens=2048),
            None,
            12_800,
            281_600,
            "derived",
            0.0,
            id="derived-from-vllm-args",
        ),
        # vLLM defaults: V1 engine with chunked prefill → B = 8192; S = 4: N = min(8192 · 50/100, 4) = 4;
        # k2 = floor(4 · (50 + 25)) = 300.
        pytest.param(
            {"avg_input_tokens": 50, "avg_output_tokens": 50},
            VllmArgs(max_num_seqs=4),
            None,
            12_800,
            300,
            "derived",
            0.0,
            id="derived-with-vllm-defaults",
        ),
    ],
)
def test_replica_capacity(
    metrics: dict[str, float],
    vllm: VllmArgs,
    history: v2.K2History | None,
    k1: int,
    k2: int,
    source: str,
    demand: float,
) -> None:
    rc, _ = v2.replica_capacity(pod("a", **metrics), cfg=CFG, vllm=vllm, history=history, remembered=None)
    assert rc is not None
    assert (rc.k1_tokens, rc.k2_tokens, rc.k2_source) == (k1, k2, source)
    assert rc.capacity_tokens == min(k1, k2)
    assert rc.demand_tokens == pytest.approx(demand)


def test_observed_k2_is_recorded_into_a_rolling_window_of_ten() -> None:
    memory = v2.TokenMemory()
    views = [view("a", replicas=1)]
    for i in range(12):
        _, update = analyze(views, [pod("a", queue_length=6, tokens_in_use=1000 + i)], memory=memory)
        memory = memory.updated([update], NOW)
    (history,) = memory.k2_history.values()
    # 12 observations 1000..1011; the window keeps the last 10: 1002..1011.
    assert history.samples_tokens == tuple(range(1002, 1012))


def test_replica_without_cache_config_falls_back_to_remembered_capacity() -> None:
    remembered = v2.CapacityRecord(per_replica_tokens=10_000, total_kv_tokens=16_000, measured_s=NOW - 60)
    bare = PodMetrics(namespace="llm", pod="a-0", variant="a", kv_cache_usage=0.5, queue_length=2, avg_input_tokens=100)
    rc, _ = v2.replica_capacity(bare, cfg=CFG, vllm=VllmArgs(), history=None, remembered=remembered)
    assert rc is not None
    # capacity 10,000 (remembered); demand = 0.5 · 16,000 + 2 · 100 = 8,200 — not dropped (upstream zeroed it).
    assert (rc.capacity_tokens, rc.k2_source, rc.demand_tokens) == (10_000, "remembered", 8_200.0)
    rc_none, _ = v2.replica_capacity(bare, cfg=CFG, vllm=VllmArgs(), history=None, remembered=None)
    assert rc_none is None


@pytest.mark.parametrize(
    ("values", "median"),
    [
        pytest.param([5], 5, id="one"),
        pytest.param([3, 1, 2], 2, id="odd"),
        pytest.param([1, 2, 3, 6], 2, id="even-floor"),
    ],
)
def test_integer_median(values: list[int], median: int) -> None:
    assert v2.integer_median(values) == median


# ---- model level --------------------------------------------------------------------------------------------


def test_docstring_worked_example_holds() -> None:
    # 2 ready L4 replicas, each k1 = k2 = 12,800; 6,000 + 5,000 tokens in use. supply 25,600, demand 11,000:
    # required = max(0, 11,000/0.85 − 25,600) = 0; spare = max(0, 25,600 − 11,000/0.70) = 9,885.7.
    signal, _ = analyze([view("l4", replicas=2)], [pod("l4", 0, tokens_in_use=6000), pod("l4", 1, tokens_in_use=5000)])
    assert isinstance(signal, CapacitySignal)
    assert signal.required == 0
    assert signal.spare == pytest.approx(25_600 - 11_000 / 0.70)
    assert signal.analysis["total_supply"] == 25_600
    assert signal.analysis["utilization"] == pytest.approx(11_000 / 25_600, abs=1e-6)


def test_required_uses_anticipated_supply_including_pending() -> None:
    # 3 replicas, 1 pending (2 ready) at 12,800 each: anticipated 38,400, supply 25,600.
    # demand 2 · 0.8 · 16,000 = 25,600 → required = max(0, 25,600/0.85 − 38,400) = 0 (the pending one covers it)
    pods = [pod("a", i, kv_cache_usage=0.8) for i in range(2)]
    signal, _ = analyze([view("a", replicas=3, ready=2)], pods)
    assert isinstance(signal, CapacitySignal)
    assert signal.required == 0
    # without the pending replica: required = 30,117.6 − 25,600 = 4,517.6
    signal2, _ = analyze([view("a", replicas=2)], pods)
    assert isinstance(signal2, CapacitySignal)
    assert signal2.required == pytest.approx(25_600 / 0.85 - 25_600)


def test_epp_queue_demand_is_added() -> None:
    # 10 queued, 40,000 bytes, avg_in 800, avg_out 200, hit 0.25:
    # input = max(40,000/4, 10·800) · 0.75 = 7,500; output = 10 · 200 = 2,000 → 9,500 more demand.
    pods = [pod("a", kv_cache_usage=0.5, avg_input_tokens=800, avg_output_tokens=200, prefix_cache_hit_rate=0.25)]
    traffic = ModelTraffic(MODEL, epp_queue_size=10, epp_queue_bytes=40_000)
    with_queue, _ = analyze([view("a", replicas=1)], pods, traffic=traffic)
    without, _ = analyze([view("a", replicas=1)], pods)
    assert isinstance(with_queue, CapacitySignal)
    assert isinstance(without, CapacitySignal)
    assert with_queue.analysis["total_demand"] - without.analysis["total_demand"] == pytest.approx(9_500)
    assert with_queue.analysis["epp_queue_demand"] == pytest.approx(9_500)


def test_variant_at_zero_uses_remembered_capacity_and_is_never_free() -> None:
    memory = v2.TokenMemory(capacity={VariantKey("llm", "b"): v2.CapacityRecord(20_000, 25_000, NOW - 3600)})
    views = [view("a", replicas=1, cost=1.0), view("b", replicas=0, cost=5.0), view("c", replicas=0, cost=0.0)]
    signal, _ = analyze(views, [pod("a", kv_cache_usage=0.9)], memory=memory)
    assert isinstance(signal, CapacitySignal)
    by_name = {v.name: v for v in signal.variants}
    assert by_name["b"].per_replica_capacity == 20_000  # remembered: a scale-up can pick it
    assert by_name["c"].per_replica_capacity == 0  # nobody measured it and no token lengths: unknown
    assert by_name["c"].cost == 0.0  # its own cost, never invented — and capacity 0 keeps it out of allocation


def test_no_sizable_variant_is_no_signal() -> None:
    bare = PodMetrics(namespace="llm", pod="a-0", variant="a", kv_cache_usage=0.5)
    signal, _ = analyze([view("a", replicas=1)], [bare])
    assert isinstance(signal, NoSignal)
    assert "no KV-cache size" in signal.reason


def test_prefill_decode_roles_get_their_own_signals() -> None:
    # prefill: 1 replica at kv 0.9 (demand 14,400 vs 12,800 capacity) → required = 14,400/0.85 − 12,800 = 4,141.2
    # decode: 2 replicas at kv 0.1 (demand 3,200 vs 25,600) → spare = 25,600 − 3,200/0.70 = 21,028.6
    views = [view("pre", replicas=1), view("dec", replicas=2)]
    pods = [pod("pre", 0, kv_cache_usage=0.9), pod("dec", 0, kv_cache_usage=0.1), pod("dec", 1, kv_cache_usage=0.1)]
    signal, _ = analyze(views, pods, roles={"pre": Role.PREFILL, "dec": Role.DECODE})
    assert isinstance(signal, CapacitySignal)
    assert signal.roles is not None
    assert signal.roles[Role.PREFILL][0] == pytest.approx(14_400 / 0.85 - 12_800)
    assert signal.roles[Role.DECODE][1] == pytest.approx(25_600 - 3_200 / 0.70)
    assert set(signal.analysis["roles"]) == {"prefill", "decode"}


def test_memory_eviction() -> None:
    old = v2.TokenMemory(
        k2_history={"m|L4|short": v2.K2History((1,), NOW - v2.HISTORY_EVICTION_S - 1)},
        capacity={VariantKey("llm", "x"): v2.CapacityRecord(1, 1, NOW - v2.CAPACITY_EVICTION_S - 1)},
    )
    assert old.updated([], NOW) == v2.TokenMemory()


@pytest.mark.parametrize(
    ("out", "bucket"), [(0, "short"), (99.9, "short"), (100, "medium"), (499, "medium"), (500, "long")]
)
def test_output_buckets(out: float, bucket: str) -> None:
    assert v2.output_bucket(out) == bucket


def test_thresholds_from_config_change_the_signal() -> None:
    pods = [pod("a", kv_cache_usage=0.7)]
    strict, _ = analyze(
        [view("a", replicas=1)], pods, cfg=replace(CFG, scale_up_threshold=0.5, scale_down_boundary=0.4)
    )
    assert isinstance(strict, CapacitySignal)
    # demand 11,200 / 0.5 − 12,800 = 9,600 required
    assert strict.required == pytest.approx(11_200 / 0.5 - 12_800)
    assert math.isclose(strict.spare, 0.0)
