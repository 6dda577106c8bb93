"""Allocation and decision-cycle benchmark (issue 7): greedy vs exact (MILP) allocation on generated fleets,
and `engine.decide` at 1,000 VAs with V1, V2, and V2 with the GPU limiter (and exact mode; `-mixed`: models of two
variants sharing both over-full pools, `scale_snapshot`), and with the queueing model at 100 VAs (its filter
evaluates the queueing model per busy pod: ~10x the cost per VA).

Prints figures measured in this run (medians; the machine is shared and noisy); asserts nothing about time.
Each decide configuration runs in its own child process so its peak RSS is its own.

    python -m tests.bench_pipeline [--fleets 100] [--vas 1000] [--qm-vas 100] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from typing import Any

from adapter import engine
from adapter.config.configmaps import (
    DEFAULT_CONTROLLER_NAMESPACE,
    QUEUEING_CM,
    SATURATION_CM,
    AllocationMode,
    ConfigSet,
)
from adapter.config.engine import EngineConfig
from adapter.domain.capacity import CapacitySignal, CapacityUnit, GpuPools, VariantSupply
from adapter.domain.decision import AnalyzerName
from adapter.domain.ids import ModelKey, VariantKey
from adapter.domain.snapshot import (
    NodeGpus,
    PodMetrics,
    ScaleTarget,
    Snapshot,
    VariantSpec,
    VariantView,
)
from adapter.optimizer.allocate import allocate

ACCELERATORS = ("A100", "H100", "L4")


# ---- greedy vs MILP ----------------------------------------------------------------------------------------


def generated_fleet(rng: random.Random) -> tuple[list[CapacitySignal], GpuPools]:
    """2–8 models of 1–4 variants on three pools; each model requires 0.5–4 replicas' worth of capacity."""
    signals: list[CapacitySignal] = []
    used = dict.fromkeys(ACCELERATORS, 0)
    for m in range(rng.randint(2, 8)):
        variants = []
        for v in range(rng.randint(1, 4)):
            accelerator = rng.choice(ACCELERATORS)
            current = rng.randint(0, 3)
            gpr = rng.choice((1, 1, 2, 4))
            variants.append(
                VariantSupply(
                    name=f"v{v}",
                    cost=round(rng.uniform(1, 40), 2),
                    per_replica_capacity=float(rng.randint(1, 20) * 1000),
                    current_replicas=current,
                    min_replicas=0,
                    max_replicas=current + rng.randint(1, 8),
                    gpus_per_replica=gpr,
                    accelerator=accelerator,
                )
            )
            used[accelerator] += current * gpr
        mean_capacity = statistics.mean(v.per_replica_capacity for v in variants)
        signals.append(
            CapacitySignal(
                model=ModelKey("bench", f"model-{m}"),
                analyzer=AnalyzerName.SATURATION_TOKEN,
                unit=CapacityUnit.TOKENS,
                required=rng.uniform(0.5, 4) * mean_capacity,
                spare=0.0,
                variants=tuple(variants),
            )
        )
    pools = {a: used[a] + rng.randint(0, 16) for a in ACCELERATORS}
    return signals, GpuPools(pools, used)


def _cost(signals: list[CapacitySignal], targets: dict[ModelKey, Any]) -> float:
    return sum(v.cost * targets[s.model].targets[v.name] for s in signals for v in s.variants)


def _unmet(targets: dict[ModelKey, Any]) -> float:
    return sum(a.unmet for a in targets.values())


def bench_allocation(n_fleets: int) -> dict[str, Any]:
    rng = random.Random(20261124)
    rows = []
    for _ in range(n_fleets):
        signals, gpus = generated_fleet(rng)
        t0 = time.perf_counter()
        greedy = allocate(signals, mode=AllocationMode(limiter=True), gpus=gpus)
        t1 = time.perf_counter()
        exact = allocate(signals, mode=AllocationMode(limiter=True, exact=True), gpus=gpus)
        t2 = time.perf_counter()
        rows.append(
            {
                "greedy_ms": (t1 - t0) * 1e3,
                "exact_ms": (t2 - t1) * 1e3,
                "greedy_cost": _cost(signals, greedy),
                "exact_cost": _cost(signals, exact),
                "greedy_unmet": _unmet(greedy),
                "exact_unmet": _unmet(exact),
                "variants": sum(len(s.variants) for s in signals),
            }
        )
    both_met = [r for r in rows if r["greedy_unmet"] == 0 and r["exact_unmet"] == 0]
    ratios = [r["exact_cost"] / r["greedy_cost"] for r in both_met if r["greedy_cost"] > 0]
    return {
        "fleets": n_fleets,
        "median_variants_per_fleet": statistics.median(r["variants"] for r in rows),
        "greedy_ms_median": round(statistics.median(r["greedy_ms"] for r in rows), 3),
        "exact_ms_median": round(statistics.median(r["exact_ms"] for r in rows), 3),
        "exact_ms_max": round(max(r["exact_ms"] for r in rows), 3),
        "fleets_both_meet_demand": len(both_met),
        "exact_over_greedy_cost_median": round(statistics.median(ratios), 4) if ratios else None,
        "exact_over_greedy_cost_min": round(min(ratios), 4) if ratios else None,
        "fleets_exact_strictly_cheaper": sum(1 for x in ratios if x < 1 - 1e-9),
        "fleets_exact_costlier": sum(1 for x in ratios if x > 1 + 1e-9),
        "fleets_exact_meets_more_demand": sum(1 for r in rows if r["exact_unmet"] < r["greedy_unmet"] - 1e-6),
        "fleets_greedy_meets_more_demand": sum(1 for r in rows if r["greedy_unmet"] < r["exact_unmet"] - 1e-6),
    }


# ---- one decide cycle at scale ------------------------------------------------------------------------------


def _saturation_default(mode: str) -> str:
    lines = ["kvCacheThreshold: 0.80", "queueLengthThreshold: 5", "kvSpareTrigger: 0.1", "queueSpareTrigger: 3"]
    if mode != "v1":
        lines.append("analyzerName: saturation")
    if mode.startswith(("v2-limiter", "v2-exact")):
        lines.append("enableLimiter: true")
    if mode.startswith("v2-exact"):
        lines.append("optimizer: exact")
    return "\n".join(lines) + "\n"


def scale_snapshot(n_vas: int, *, seed: int = 7, mixed: bool = False) -> Snapshot:
    """n VAs, 1–4 pods each, with token-level metrics, on two pools of n GPUs each (fewer than the pods use).

    Default: n/2 model names of two variants (A100 and H100, alike: $15, 8,000 blocks, 1 GPU a replica) whose two
    VAs are in different namespaces, so every model has one variant (the exact mode's programs: one per pool).
    `mixed`: n/2 models of two variants each in one namespace, the H100 one with twice the blocks for $20 (cheaper
    per token), 1 or 2 GPUs a replica, so every model's program spans both pools and all of them are one
    component (issue 22's multi-variant stress fleet)."""
    rng = random.Random(seed)
    accelerators = ACCELERATORS[:2]
    views, pods = [], []
    for i in range(n_vas):
        ns = f"ns-{(i // 2) % 20}" if mixed else f"ns-{i % 20}"
        model = f"model-{i // 2}"
        name = f"va-{i}"
        accelerator = accelerators[i % 2]
        replicas = rng.randint(1, 4)
        gpus_per_replica = rng.choice((1, 1, 2)) if mixed else 1
        blocks = 16000 if mixed and accelerator == "H100" else 2000 if accelerator == "L4" else 8000
        spec = VariantSpec(
            key=VariantKey(ns, name),
            model_id=model,
            target_kind="Deployment",
            target_name=name,
            min_replicas=1,
            max_replicas=10,
            cost=20.0 if mixed and accelerator == "H100" else 5.0 if accelerator == "L4" else 15.0,
            accelerator=accelerator,
        )
        target = ScaleTarget("Deployment", ns, name, replicas, replicas, replicas, gpus_per_replica=gpus_per_replica)
        views.append(VariantView(spec=spec, target=target))
        for p in range(replicas):
            kv = rng.uniform(0.1, 0.95)
            pods.append(
                PodMetrics(
                    namespace=ns,
                    pod=f"{name}-{p}",
                    variant=name,
                    kv_cache_usage=kv,
                    queue_length=float(rng.randint(0, 8)),
                    num_gpu_blocks=blocks,
                    block_size=16,
                    tokens_in_use=kv * blocks * 16,
                    avg_input_tokens=rng.uniform(200, 2000),
                    avg_output_tokens=rng.uniform(50, 800),
                )
            )
    nodes = tuple(NodeGpus(f"node-{a}-{k}", a, 8) for a in accelerators for k in range(n_vas // 8))
    return Snapshot(taken_at_s=1_767_225_600.0, variants=tuple(views), pods=tuple(pods), nodes=nodes)


def with_latencies(snapshot: Snapshot, *, seed: int = 3) -> Snapshot:
    """The snapshot's pods busy, with the arrival rates and latencies the queueing model learns from."""
    rng = random.Random(seed)
    pods = tuple(
        replace(
            p,
            arrival_rate_rps=rng.uniform(0.5, 3.0),
            avg_ttft_s=rng.uniform(0.1, 0.5),
            avg_itl_s=rng.uniform(0.02, 0.05),
            max_batch_size=256,
        )
        for p in snapshot.pods
    )
    return replace(snapshot, pods=pods)


def with_headroom(snapshot: Snapshot, fraction: float) -> Snapshot:
    """The GPU pools sized to what the fleet holds plus `fraction` (scale_snapshot's nodes hold fewer GPUs than
    its pods use: every pool is over-full, the exact mode's worst case)."""
    held: dict[str, int] = {}
    for view in snapshot.variants:
        if view.target is not None:
            held[view.spec.accelerator] = held.get(view.spec.accelerator, 0) + view.target.replicas
    nodes = tuple(
        NodeGpus(f"node-{a}-{k}", a, 8)
        for a, n in sorted(held.items())
        for k in range(-(-int(n * (1 + fraction)) // 8))
    )
    return replace(snapshot, nodes=nodes)


def child_decide(mode: str, n_vas: int, runs: int) -> dict[str, Any]:
    snapshot = scale_snapshot(n_vas, mixed=mode.endswith("-mixed"))
    if mode.endswith("-headroom"):
        snapshot = with_headroom(snapshot, 1.0)
    raw = [(DEFAULT_CONTROLLER_NAMESPACE, SATURATION_CM, {"default": _saturation_default(mode)})]
    if mode == "qm":
        snapshot = with_latencies(snapshot)
        raw.append((DEFAULT_CONTROLLER_NAMESPACE, QUEUEING_CM, {"default": "sloMultiplier: 3\n"}))
    config = EngineConfig(configmaps=ConfigSet.from_raw(raw))
    state = engine.EngineState()
    times = []
    for r in range(runs):
        t0 = time.perf_counter()
        result, state = engine.decide(snapshot, state, config, snapshot.taken_at_s + 30 * r)
        times.append(time.perf_counter() - t0)
    costs = {v.key: v.spec.cost for v in snapshot.variants}
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "mode": mode,
        "vas": n_vas,
        "decide_ms_median": round(statistics.median(times) * 1e3, 1),
        "fleet_cost": round(sum(d.desired_replicas * costs[k] for k, d in result.decisions.items()), 1),
        "unproven": sum("node limit" in " ".join(d.notes) for d in result.decisions.values()),
        "unmet_capacity": round(
            sum(a.analysis.get("allocation", {}).get("unmet_capacity", 0.0) for a in result.analyses.values())
        ),
        "peak_rss_mb": round(rss_mb, 1),
    }


def bench_decide(n_vas: int, runs: int, qm_vas: int) -> list[dict[str, Any]]:
    rows = []
    modes = ("v1", "v2", "v2-limiter", "v2-exact", "v2-limiter-headroom", "v2-exact-headroom")
    for mode in (*modes, "v2-limiter-mixed", "v2-exact-mixed", "qm"):
        vas = qm_vas if mode == "qm" else n_vas
        out = subprocess.run(
            [sys.executable, "-m", "tests.bench_pipeline", "--child", mode, "--vas", str(vas), "--runs", str(runs)],
            check=True,
            capture_output=True,
            text=True,
        )
        rows.append(json.loads(out.stdout))
    base = rows[0]["decide_ms_median"]
    for row in rows:
        same_scale = row["vas"] == rows[0]["vas"]
        row["time_vs_v1"] = round(row["decide_ms_median"] / base, 2) if base and same_scale else None
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m tests.bench_pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("--fleets", type=int, default=100)
    parser.add_argument("--vas", type=int, default=1000)
    parser.add_argument("--qm-vas", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        row = child_decide(args.child, args.vas, args.runs)
        print(json.dumps(row))
        return row
    allocation = bench_allocation(args.fleets)
    print(json.dumps({"greedy_vs_exact": allocation}, indent=2), flush=True)
    rows = bench_decide(args.vas, args.runs, args.qm_vas)
    print(json.dumps({"decide_cycle": rows}, indent=2))
    print()
    print("| mode | VAs | decide median (ms) | vs V1 | fleet cost per hour | peak RSS (MB) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['mode']} | {r['vas']} | {r['decide_ms_median']} | {r['time_vs_v1']} | {r['fleet_cost']} "
            f"| {r['peak_rss_mb']} |"
        )
    return {"greedy_vs_exact": allocation, "decide_cycle": rows}


if __name__ == "__main__":
    main()
