"""`make bench`: every benchmark, one after the other; each prints its own figures, then a summary prints every
row of issue 22's table with the figure measured in this run and its ratio to the goal.

Benchmarks print figures measured in one run; they never assert on time (the machine is shared and noisy).
`python -m tests.bench WORD...` runs only the benchmarks whose module name contains a WORD (the summary then
shows the rows it has figures for).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

BENCHMARKS: tuple[tuple[str, str, str, list[str]], ...] = (
    ("em", "External Metrics API vs bare aiohttp (no authentication)", "tests.servers.em_bench", []),
    (
        "em-auth",
        "External Metrics API vs bare aiohttp (front-proxy authentication)",
        "tests.servers.em_bench",
        ["--auth"],
    ),
    ("keda", "KEDA GetMetrics vs bare gRPC servicer", "tests.servers.keda_bench", []),
    (
        "cycle",
        "One cycle at 100 / 1,000 / 10,000 VAs, all metrics: collect -> decide -> publish; 50 cycles each (RSS growth)",
        "tests.bench_collect",
        ["--metrics", "all", "--cycles", "50"],
    ),
    (
        "cycle-shipped",
        "One cycle at 10,000 VAs with the shipped ConfigMaps, collecting what they read (as serve asks)",
        "tests.bench_collect",
        ["--scales", "10000", "--metrics", "config", "--config", "shipped", "--runs", "3", "--cycles", "6"],
    ),
    (
        "cycle-shipped-full",
        "The same with full forecast histories (4 h of serving): the shipped default's steady state",
        "tests.bench_collect",
        [
            *("--scales", "10000", "--metrics", "config", "--config", "shipped", "--histories", "full"),
            *("--runs", "3", "--cycles", "8"),
        ],
    ),
    (
        "pipeline",
        "Allocation greedy vs exact; decide at 1,000 VAs (V1, V2, limiter, exact)",
        "tests.bench_pipeline",
        [],
    ),
    (
        "decide-scale",
        "decide at 1,000 / 10,000 / 20,000 VAs, paired (sizes alternating in each round; three processes pooled)",
        "tests.bench_decide_scale",
        [],
    ),
    (
        "decide-count",
        "decide at 1,000 / 10,000 VAs (V1), instructions counted by valgrind: the work, without noise or caches",
        "tests.count_instructions",
        ["--vas", "1000,10000", "--config", "v1", "--cycles", "1"],
    ),
    (
        "default",
        "The shipped default (predictive) vs V1: decide at 1,000 / 10,000 VAs; the event loop while it decides",
        "tests.bench_default",
        [],
    ),
    ("wake", "Scale from zero: EPP queue > 0 -> StreamIsActive true, 100 wakes", "tests.bench_wake", []),
    (
        "wake-busy",
        "Scale from zero while cycles decide back to back, 1.5 s each (the shipped default at 1,000 VAs), 50 wakes",
        "tests.bench_wake",
        ["--wakes", "50", "--decide-s", "1.5"],
    ),
)


def _cycle_row(figures: dict[str, Any], vas: int) -> dict[str, Any] | None:
    rows = figures.get("cycle", {}).get("rows", [])
    return next((r for r in rows if r["vas"] == vas and r["metrics"] == "all"), None)


def _shipped_cycle(figures: dict[str, Any], benchmark: str = "cycle-shipped") -> dict[str, Any] | None:
    """The 10,000-VA cycle with the shipped ConfigMaps, collecting what they read (`cycle-shipped`; with full forecast
    histories, `cycle-shipped-full`)."""
    rows = figures.get(benchmark, {}).get("rows", [])
    return next((r for r in rows if r["vas"] == 10000 and r["metrics"] == "config"), None)


def _decide_mode(figures: dict[str, Any], mode: str) -> dict[str, Any] | None:
    rows = figures.get("pipeline", {}).get("decide_cycle", [])
    return next((r for r in rows if r["mode"] == mode), None)


Row = tuple[str, str, str, float | None]
"""(what, measured, goal, ratio to the goal: <= 1 meets it)."""


def summary(figures: dict[str, Any]) -> list[Row]:
    """Issue 22's table: each row's figure from this run and its ratio to the goal (measured / goal, or goal /
    measured for a floor such as a throughput ratio), so <= 1.0 meets the goal everywhere."""
    rows: list[Row] = []
    small, large = _cycle_row(figures, 1000), _cycle_row(figures, 10000)
    if small is not None:
        total_ms = small["median_s"]["total"] * 1e3
        detail = f"collect {small['median_s']['collect'] * 1e3:.0f}, decide {small['median_s']['decide'] * 1e3:.0f}"
        rows.append(
            (
                "cycle, all metrics, 1,000 VAs / 10,000 pods",
                f"{total_ms:.0f} ms ({detail}; CPU {small['median_cpu_s']['total'] * 1e3:.0f} ms), "
                f"{small['peak_rss_mb']:.0f} MB",
                "< 300 ms",
                total_ms / 300,
            )
        )
    if large is not None:
        total_s = large["median_s"]["total"]
        detail = f"collect {large['median_s']['collect']:.2f} s, decide {large['median_s']['decide']:.2f} s"
        rows.append(
            (
                "cycle, all metrics, 10,000 VAs / 100,000 pods",
                f"{total_s:.2f} s ({detail}; CPU {large['median_cpu_s']['total']:.2f} s)",
                "< 3 s",
                total_s / 3,
            )
        )
        rows.append(
            (
                "  peak RSS over the cycles, growth over them",
                f"{large['peak_rss_mb']:.0f} MB, {large['rss_growth_mb']:+.0f} MB over cycles "
                f"{large['runs'] + 2}..{large['cycles']}",
                "< 500 MB, steady",
                large["peak_rss_mb"] / 500,
            )
        )
    if small is not None and large is not None:
        ratio = large["median_s"]["decide"] / small["median_s"]["decide"]
        cpu_ratio = large["median_cpu_s"]["decide"] / small["median_cpu_s"]["decide"]
        rows.append(
            ("decide, 1k -> 10k VAs", f"{ratio:.1f}x (CPU {cpu_ratio:.1f}x)", "<= 10.5x (linear)", ratio / 10.5)
        )
    scale = figures.get("decide-scale")
    if scale:
        sizes = scale["sizes"]
        per_va = ", ".join(f"{int(n) // 1000}k {row['cpu_us_per_va']:.1f}" for n, row in sizes.items())
        paired = scale["pairs"].get("1000->10000")
        if paired is not None:
            each = "/".join(f"{r:.2f}" for r in scale.get("pairs_by_process", {}).get("1000->10000", []))
            rows.append(
                (
                    "  decide, 1k -> 10k VAs, paired (sizes alternating)",
                    f"{paired:.2f}x CPU (us a VA: {per_va}" + (f"; each process {each}x)" if each else ")"),
                    "<= 10.5x (linear)",
                    paired / 10.5,
                )
            )
        beyond = scale["pairs"].get("10000->20000")
        if beyond is not None:
            rows.append(("  decide, 10k -> 20k VAs, paired (evidence: linear beyond)", f"{beyond:.2f}x CPU", "-", None))
    count = figures.get("decide-count")
    if count and "1000->10000" in count["pairs"]:
        counted = count["pairs"]["1000->10000"]
        per_va = " / ".join(f"{row['per_va']:,.0f}" for row in count["sizes"].values())
        rows.append(
            (
                "  decide, 1k -> 10k VAs, instructions counted (valgrind: no noise, no caches)",
                f"{counted:.4f}x ({per_va} instructions a VA, {count['config']})",
                "<= 10.5x (linear)",
                counted / 10.5,
            )
        )
    rows.extend(_default_rows(figures, large))
    exact_modes = (
        ("v2-exact", "pools over-full"),
        ("v2-exact-headroom", "pools with room"),
        ("v2-exact-mixed", "two-variant models, pools over-full"),
    )
    for mode, label in exact_modes:
        exact, greedy = _decide_mode(figures, mode), _decide_mode(figures, mode.replace("exact", "limiter"))
        if exact is not None:
            cost = f", fleet cost {exact['fleet_cost']:.0f} vs greedy {greedy['fleet_cost']:.0f}" if greedy else ""
            if greedy and "unmet_capacity" in exact and "unmet_capacity" in greedy:
                cost += f", unmet {exact['unmet_capacity']:.3g} vs {greedy['unmet_capacity']:.3g}"
            rows.append(
                (
                    f"exact MILP mode, decide at 1,000 VAs ({label})",
                    f"{exact['decide_ms_median']:.0f} ms ({exact['time_vs_v1'] or 0:.1f}x V1{cost})",
                    "< 300 ms",
                    exact["decide_ms_median"] / 300,
                )
            )
    learning = _decide_mode(figures, "qm")
    if learning is not None:  # no goal: evidence (the regression of scale.md item 10 showed only here)
        per_va_us = learning["decide_ms_median"] * 1000 / learning["vas"]
        rows.append(
            (
                f"decide, the queueing analyzer (wva-slo, learning), {learning['vas']:,} one-variant models",
                f"{learning['decide_ms_median']:.0f} ms, {per_va_us:.0f} us a VA (median cycle)",
                "-",
                None,
            )
        )
    allocation = figures.get("pipeline", {}).get("greedy_vs_exact")
    if allocation is not None:
        rows.append(
            (
                "  exact vs greedy cost, generated fleets (median)",
                f"{allocation['exact_over_greedy_cost_median']:.3f}x (cheaper in "
                f"{allocation['fleets_exact_strictly_cheaper']} of {allocation['fleets_both_meet_demand']} that both "
                f"cover, dearer in {allocation['fleets_exact_costlier']}; covers more in "
                f"{allocation['fleets_exact_meets_more_demand']} of {allocation['fleets']}), exact "
                f"{allocation['exact_ms_median']:.0f} ms",
                "cheaper than greedy (< 1)",
                allocation["exact_over_greedy_cost_median"],
            )
        )
    wake = figures.get("wake")
    if wake:
        rows.append(
            (
                "scale from zero: EPP queue > 0 -> StreamIsActive true",
                f"median {wake['median_ms']:.0f} ms, p99 {wake['p99_ms']:.0f} ms over {wake['wakes']} wakes",
                "< 300 ms (median and p99)",
                wake["p99_ms"] / 300,
            )
        )
    busy = figures.get("wake-busy")
    if busy:
        rows.append(
            (
                "  the same while cycles decide back to back",
                f"median {busy['median_ms']:.0f} ms, p99 {busy['p99_ms']:.0f} ms over {busy['wakes']} wakes, each "
                f"decide {busy['decide_s']:g} s ({busy['cycles_during']} cycles)",
                "< 300 ms (median and p99)",
                busy["p99_ms"] / 300,
            )
        )
    for key, label in (("em", "without auth"), ("em-auth", "with front-proxy auth")):
        em = figures.get(key)
        if em:
            rows.append(
                (
                    f"External Metrics GET vs bare aiohttp, {label}",
                    f"{em['rps_ratio']:.2f}x requests/s, CPU per request {em['adapter_cpu_us_per_request']:.0f} vs "
                    f"{em['bare_cpu_us_per_request']:.0f} us ({em['cpu_ratio']:.2f}x)",
                    ">= 0.9x" + (" with auth" if key == "em-auth" else ""),
                    0.9 / max(em["rps_ratio"], em["cpu_ratio"], 1e-9),
                )
            )
            paced = em["paced_500rps"]
            rows.append(
                (
                    f"  p99 at 500 rps, {label}",
                    f"{paced['p99_ms']:.2f} ms (p50 {paced['p50_ms']:.2f}; median of rounds "
                    + "/".join(f"{p:.2f}" for p in paced["p99_ms_rounds"])
                    + f"; bare aiohttp {em['bare_paced_500rps']['p99_ms']:.2f} ms)",
                    "< 2 ms",
                    paced["p99_ms"] / 2,
                )
            )
    return rows


def _default_rows(figures: dict[str, Any], large: dict[str, Any] | None) -> list[Row]:
    """The shipped default's decide against the 10,000-VA / 3-s cycle: what is left of the 3 s after this run's
    10,000-VA collect (2.1 s when the cycle benchmark did not run), per VA. Judged with full forecast histories
    (`tests.bench_default.full_histories`: the steady state of a `serve` that has run for hours) where measured,
    the first cycles' figure beside it."""
    default = figures.get("default")
    if not default:
        return []
    by = {(r["config"], r["vas"], r.get("history", "first cycles")): r for r in default["rows"]}
    shipped = _shipped_cycle(figures)
    if shipped is not None:  # what `serve` collects for the shipped ConfigMaps: the queries their analyzer reads
        collect_s, collected = shipped["median_s"]["collect"], "its queries"
    else:
        collect_s, collected = (large["median_s"]["collect"] if large is not None else 2.1), "all metrics"
    budget_us = max(3.0 - collect_s, 0.0) / 10000 * 1e6
    rows: list[Row] = []
    if shipped is not None:
        every = f"; every query {large['median_s']['collect']:.2f} s, {large['peak_rss_mb']:.0f} MB" if large else ""
        rows.append(
            (
                "collect, the shipped ConfigMaps' queries (what serve asks), 10,000 VAs",
                f"{collect_s:.2f} s (CPU {shipped['median_cpu_s']['collect']:.2f} s), peak RSS "
                f"{shipped['peak_rss_mb']:.0f} MB{every}",
                "-",
                None,
            )
        )
        rows.append(
            (
                "cycle with the shipped default (learning), 10,000 VAs, measured (first cycles, re-fits included)",
                f"{shipped['median_s']['total']:.2f} s (collect {collect_s:.2f}, decide "
                f"{shipped['median_s']['decide']:.2f}; CPU {shipped['median_cpu_s']['total']:.2f} s)",
                "< 3 s",
                shipped["median_s"]["total"] / 3.0,
            )
        )
    steady = _shipped_cycle(figures, "cycle-shipped-full")
    if steady is not None:
        rows.append(
            (
                "cycle with the shipped default (learning), 10,000 VAs, full forecast histories (steady state)",
                f"{steady['median_s']['total']:.2f} s (collect {steady['median_s']['collect']:.2f}, decide "
                f"{steady['median_s']['decide']:.2f}), peak RSS {steady['peak_rss_mb']:.0f} MB, growth "
                f"{steady['rss_growth_mb']:+.0f} MB over {steady['cycles']} cycles",
                "< 3 s, < 500 MB",
                max(steady["median_s"]["total"] / 3.0, steady["peak_rss_mb"] / 500.0),
            )
        )
    learning = by.get(("learning", 1000, "full")) or by.get(("learning", 1000, "first cycles"))
    v1 = by.get(("v1", 1000, "first cycles"))
    for name, label in (("learning", "learning alpha, beta, gamma (as shipped)"), ("profiles", "acceleratorProfiles")):
        for vas in (1000, 10000):
            first, full = by.get((name, vas, "first cycles")), by.get((name, vas, "full"))
            row = full or first
            if row is None:
                continue
            history = "full histories" if full is not None else "first cycles"
            earlier = f"; first cycles {first['cpu_us_per_va']:.0f}" if full is not None and first is not None else ""
            cold = f"; first cycle {row['first_cycle_cpu_s']:.1f} s" if name == "learning" else ""
            base = f"; V1 {v1['cpu_us_per_va']:.0f}" if v1 is not None and name == "learning" else ""
            rows.append(
                (
                    f"decide, the shipped default, {label}, {vas:,} VAs",
                    f"{row['median_cpu_ms']:.0f} ms CPU, {row['cpu_us_per_va']:.0f} us a VA ({history})"
                    f"{earlier}{base}{cold}",
                    f"10,000 VAs in the 3-s cycle: <= {budget_us:.0f} us a VA",
                    row["cpu_us_per_va"] / budget_us if budget_us else None,
                )
            )
    if large is not None:  # the same goal as a whole cycle: meaningful also where the collect alone exceeds 3 s
        for name, label in (("learning", "learning"), ("profiles", "acceleratorProfiles")):
            at_10k = by.get((name, 10000, "full")) or by.get((name, 10000, "first cycles"))
            at_1k = by.get((name, 1000, "full")) or by.get((name, 1000, "first cycles"))
            if at_10k is not None:
                decide_s, how = at_10k["median_cpu_ms"] / 1e3, "measured at 10,000"
            elif at_1k is not None:
                decide_s, how = at_1k["cpu_us_per_va"] * 10000 / 1e6, "10,000 x its 1,000-VA figure"
            else:
                continue
            cycle_s = collect_s + decide_s
            rows.append(
                (
                    f"cycle with the shipped default ({label}), 10,000 VAs: this run's collect ({collected}) + decide",
                    f"{cycle_s:.2f} s (collect {collect_s:.2f} s + decide {decide_s:.2f} s CPU, {how})",
                    "< 3 s",
                    cycle_s / 3.0,
                )
            )
    refits = default.get("refits")
    if refits:
        per_va_us = refits["mean_cpu_s"] / refits["vas"] * 1e6
        rows.append(
            (
                f"decide, the shipped default, learning, {refits['vas']:,} VAs, mean of {refits['cycles']} cycles with "
                "the re-fits of its lost filters",
                f"{refits['mean_cpu_s'] * 1e3:.0f} ms CPU, {per_va_us:.0f} us a VA; longest cycle "
                f"{refits['max_cpu_s']:.2f} s (a re-fit of ~90 % of the variants)",
                f"10,000 VAs in the 3-s cycle: <= {budget_us:.0f} us a VA",
                per_va_us / budget_us if budget_us else None,
            )
        )
    if learning is not None and "loop_stall_ms" in learning:
        rows.append(
            (
                "  event loop while a 1,000-VA cycle decides (servers share it)",
                f"longest stall {learning['loop_stall_ms']:.0f} ms during a {learning['decide_wall_ms']:.0f}-ms "
                "decide (the decide thread)",
                "-",
                None,
            )
        )
    return rows


def print_summary(rows: list[Row]) -> None:
    print("\n== Issue 22's table, this run (ratio = measured / goal; <= 1.00 meets it)")
    print("| what | measured | goal | ratio to goal |")
    print("|---|---|---|---|")
    for what, measured, goal, ratio in rows:
        print(f"| {what} | {measured} | {goal} | {'-' if ratio is None else f'{ratio:.2f}'} |")


def main() -> int:
    only = sys.argv[1:]
    figures: dict[str, Any] = {}
    for key, title, module, argv in BENCHMARKS:
        if only and not any(word in module for word in only):
            continue
        print(f"== {title}", flush=True)
        run: Callable[[list[str]], Any] = importlib.import_module(module).main
        result = run(list(argv))
        if isinstance(result, dict):
            figures[key] = result
    print_summary(summary(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
