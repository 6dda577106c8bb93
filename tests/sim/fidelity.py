"""The simulator against the queueing model: one static replica under Poisson load, mean TTFT and ITL of the
simulated requests next to the model's (`adapter.analyzers.queueing.model`, what `wva-adapter capacity --rate`
prints) at the same α, β, γ, request size and batch limit. Used by tests/sim/test_fidelity.py and bench-sim.

Utilisation u = λ / λ_max, λ_max the model's largest sustainable rate (μ_N). The replica has KV to spare, so
its batch limit is `max_num_seqs` = the model's N; token lengths are lognormal (σ 0.6) around the means the
model is given, so the comparison also covers the size variability the model averages away.

`section()` (bench-sim) extends it to the benchmark's A100 replica at the request sizes of the three traces
(sizes drawn from the trace files themselves, the model given their means and the KV-bounded batch the oracle
uses), up to 95 % utilisation, with the per-request SLO attainment (TTFT 2 s and ITL 100 ms) beside the mean
latencies, and the model's mean-based capacity at the SLO λ* (the oracle's capacity) as a utilisation u* =
λ*/λ_max: the gap between meeting the targets on average and meeting them for 99 % of requests.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from adapter.analyzers.queueing.model import BeyondModel, QueueModel, RequestSize, ServiceParams
from adapter.sim import scenario as scenario_module
from adapter.sim.fleet import FleetConfig, SimulatedFleet, VariantConfig
from adapter.sim.oracle import effective_batch
from adapter.sim.replica import PerfParams
from adapter.sim.workload import PoissonArrivals, Request, RequestTable, SyntheticWorkload, TokenLengths, load_trace

ALPHA_MS, BETA_MS, GAMMA_MS = 20.0, 0.08, 0.0002
INPUT_TOKENS, OUTPUT_TOKENS = 512, 128
MAX_BATCH = 256
UTILISATIONS = (0.1, 0.3, 0.5, 0.7)


@dataclass(frozen=True, slots=True)
class FidelityRow:
    utilisation: float
    rate_rps: float
    model_ttft_ms: float
    sim_ttft_ms: float
    model_itl_ms: float
    sim_itl_ms: float
    requests: int

    @property
    def ttft_error(self) -> float:
        return self.sim_ttft_ms / self.model_ttft_ms - 1.0

    @property
    def itl_error(self) -> float:
        return self.sim_itl_ms / self.model_itl_ms - 1.0


def fidelity_rows(
    utilisations: tuple[float, ...] = UTILISATIONS, *, duration_s: float = 1800.0, seed: int = 1, sigma: float = 0.6
) -> list[FidelityRow]:
    perf = PerfParams(
        alpha_ms=ALPHA_MS,
        beta_ms=BETA_MS,
        gamma_ms=GAMMA_MS,
        kv_cache_tokens=10_000_000,
        max_num_seqs=MAX_BATCH,
        max_num_batched_tokens=2048,
    )
    model = QueueModel(
        ServiceParams(ALPHA_MS, BETA_MS, GAMMA_MS), RequestSize(INPUT_TOKENS, OUTPUT_TOKENS), max_batch=MAX_BATCH
    )
    rows = []
    for u in utilisations:
        rate = u * model.rate_range_rps.max_rps
        workload = SyntheticWorkload(
            PoissonArrivals(rate),
            TokenLengths(INPUT_TOKENS, OUTPUT_TOKENS, sigma, sigma),
            duration_s=duration_s,
            seed=seed,
        )
        variant = VariantConfig("replica", "X", 1.0, perf, initial_replicas=1)
        fleet = SimulatedFleet(FleetConfig(model_id="m", variants=(variant,)), workload)
        fleet.advance(duration_s + 600.0)
        outcomes = fleet.outcomes()
        predicted = model.analyze(rate)
        rows.append(
            FidelityRow(
                utilisation=u,
                rate_rps=rate,
                model_ttft_ms=predicted.ttft_ms,
                sim_ttft_ms=float(np.mean(outcomes.ttft_s)) * 1000.0,
                model_itl_ms=predicted.itl_ms,
                sim_itl_ms=float(np.nanmean(outcomes.itl_s)) * 1000.0,
                requests=outcomes.completed,
            )
        )
    return rows


def markdown(rows: list[FidelityRow]) -> list[str]:
    lines = [
        "| utilisation | rate (req/s) | TTFT model (ms) | TTFT sim (ms) | error | ITL model (ms) | ITL sim (ms) "
        "| error | requests |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.utilisation:.0%} | {r.rate_rps:.2f} | {r.model_ttft_ms:.1f} | {r.sim_ttft_ms:.1f} | "
            f"{r.ttft_error:+.1%} | {r.model_itl_ms:.2f} | {r.sim_itl_ms:.2f} | {r.itl_error:+.1%} | {r.requests:,} |"
        )
    return lines


# ------------------------------------------------------------------------------------------ the extended grid

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "examples" / "traces"
GRID_UTILISATIONS = (0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95)
GRID_DURATION_S = 900.0
SLO_TTFT_MS, SLO_ITL_MS = 2000.0, 100.0
PROFILES = {
    "synthetic 512/128 (α 20 ms replica)": None,
    "azure-code sizes": "azure_llm_2023_code.csv.gz",
    "azure-conv sizes": "azure_llm_2023_conv.csv.gz",
    "mooncake sizes": "mooncake_conversation_trace.jsonl.gz",
}


@dataclass(frozen=True, slots=True)
class GridRow:
    profile: str
    utilisation: float
    rate_rps: float
    model_ttft_ms: float
    sim_ttft_ms: float
    model_itl_ms: float
    sim_itl_ms: float
    attainment: float
    requests: int
    at_lambda_star: bool = False


@cache
def _sizes(trace: str) -> RequestTable:
    return RequestTable.of(load_trace(TRACES / trace))


@cache
def a100() -> PerfParams:
    """The benchmark's A100 replica (examples/scenarios/bench/steps.yaml)."""
    spec = scenario_module.load(REPO / "examples" / "scenarios" / "bench" / "steps.yaml").spec
    assert spec is not None
    return PerfParams(**spec.variants[0].perf.model_dump())


class _SizedPoisson:
    """Poisson arrivals at `rate_rps`; each request's sizes drawn (with replacement) from a trace."""

    def __init__(self, sizes: RequestTable, rate_rps: float, duration_s: float, seed: int) -> None:
        self.sizes, self.rate_rps, self.duration_s, self.seed = sizes, rate_rps, duration_s, seed

    def __iter__(self) -> Iterator[Request]:
        rng = np.random.default_rng(self.seed)
        t = 0.0
        n = len(self.sizes)
        while True:
            t += float(rng.exponential(1.0 / self.rate_rps))
            if t >= self.duration_s:
                return
            i = int(rng.integers(n))
            yield Request(t, int(self.sizes.input_tokens[i]), int(self.sizes.output_tokens[i]))


def _profile(profile: str) -> tuple[PerfParams, QueueModel, RequestTable | None]:
    trace = PROFILES[profile]
    if trace is None:
        perf = PerfParams(alpha_ms=ALPHA_MS, beta_ms=BETA_MS, gamma_ms=GAMMA_MS, kv_cache_tokens=10_000_000,
                          max_num_seqs=MAX_BATCH, max_num_batched_tokens=2048)  # fmt: skip
        model = QueueModel(
            ServiceParams(ALPHA_MS, BETA_MS, GAMMA_MS), RequestSize(INPUT_TOKENS, OUTPUT_TOKENS), max_batch=MAX_BATCH
        )
        return perf, model, None
    perf = a100()
    sizes = _sizes(trace)
    mean_in, mean_out = float(np.mean(sizes.input_tokens)), float(np.mean(sizes.output_tokens))
    model = QueueModel(
        ServiceParams(perf.alpha_ms, perf.beta_ms, perf.gamma_ms),
        RequestSize(mean_in, mean_out),
        max_batch=effective_batch(perf, mean_in, mean_out),
    )
    return perf, model, sizes


def lambda_star_utilisation(profile: str) -> float | None:
    """u* = λ*/λ_max: where the model's mean TTFT and ITL reach the SLO (None when no rate meets it)."""
    _, model, _ = _profile(profile)
    try:
        return float(model.max_rate(SLO_TTFT_MS, SLO_ITL_MS).rate_rps) / model.rate_range_rps.max_rps
    except BeyondModel:
        return None


def grid_row(task: tuple[str, float, bool]) -> GridRow:
    profile, u, at_star = task
    perf, model, sizes = _profile(profile)
    rate = u * model.rate_range_rps.max_rps
    workload = (
        SyntheticWorkload(
            PoissonArrivals(rate),
            TokenLengths(INPUT_TOKENS, OUTPUT_TOKENS, 0.6, 0.6),
            duration_s=GRID_DURATION_S,
            seed=1,
        )
        if sizes is None
        else _SizedPoisson(sizes, rate, GRID_DURATION_S, seed=1)
    )
    fleet = SimulatedFleet(
        FleetConfig(model_id="m", variants=(VariantConfig("replica", "X", 1.0, perf, initial_replicas=1),)), workload
    )
    fleet.advance(GRID_DURATION_S + 600.0)
    outcomes = fleet.outcomes()
    met = int(np.count_nonzero(outcomes.met(ttft_s=SLO_TTFT_MS / 1000.0, itl_s=SLO_ITL_MS / 1000.0)))
    total = outcomes.completed + outcomes.dropped + outcomes.in_flight
    predicted = model.analyze(rate)
    return GridRow(
        profile=profile,
        utilisation=u,
        rate_rps=rate,
        model_ttft_ms=predicted.ttft_ms,
        sim_ttft_ms=float(np.mean(outcomes.ttft_s)) * 1000.0 if outcomes.completed else float("nan"),
        model_itl_ms=predicted.itl_ms,
        sim_itl_ms=float(np.nanmean(outcomes.itl_s)) * 1000.0 if outcomes.completed else float("nan"),
        attainment=met / total if total else 1.0,
        requests=total,
        at_lambda_star=at_star,
    )


def section(*, jobs: int = 1) -> list[str]:
    """bench-sim's fidelity section: the original table (±20 % up to 70 %, asserted by the test) and the grid."""
    tasks: list[tuple[str, float, bool]] = []
    stars: dict[str, float | None] = {}
    for profile in PROFILES:
        stars[profile] = lambda_star_utilisation(profile)
        points = sorted({*GRID_UTILISATIONS, *([stars[profile]] if stars[profile] is not None else [])})
        tasks += [(profile, u, u == stars[profile]) for u in points]
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        rows = pool.map(grid_row, tasks)
    lines = [
        "## Fidelity",
        "",
        "A static replica (α 20 ms, β 0.08 ms, γ 0.0002 ms; 512/128 tokens, lognormal σ 0.6; batch 256) under",
        "Poisson load for 30 minutes, mean TTFT and ITL against the queueing model (`wva-adapter capacity`)",
        "at the same rate. tests/sim/test_fidelity.py asserts ±20 % up to 70 % utilisation.",
        "",
        *markdown(fidelity_rows(duration_s=1800.0)),
        "",
        "### Up to 95 % utilisation, at the traces' request sizes, with per-request attainment",
        "",
        "One replica, Poisson arrivals for 15 minutes (then 10 minutes to finish); sizes drawn from each trace (the",
        "benchmark's A100 replica; the model gets the traces' mean sizes and the KV-bounded batch the oracle uses).",
        r"Attainment = requests meeting TTFT 2 s and ITL 100 ms (unfinished count as misses). **u\*** (bold) is the",
        r"model's mean-based capacity at the SLO, λ*/λ_max: the oracle's capacity per replica. Where attainment at u\*",
        "is far below 99 %, a schedule sized by mean latency cannot meet a per-request target.",
        "",
        "| sizes | u | rate (req/s) | TTFT model (ms) | TTFT sim (ms) | ITL model (ms) | ITL sim (ms) | attainment "
        "| requests |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        u = rf"**{r.utilisation:.0%} (u\*)**" if r.at_lambda_star else f"{r.utilisation:.0%}"
        lines.append(
            f"| {r.profile} | {u} | {r.rate_rps:.2f} | {r.model_ttft_ms:,.0f} | {r.sim_ttft_ms:,.0f} | "
            f"{r.model_itl_ms:.1f} | {r.sim_itl_ms:.1f} | {r.attainment:.2%} | {r.requests:,} |"
        )
    lines += ["", "u* per sizes: " + ", ".join(
        f"{p} {'unreachable' if s is None else f'{s:.0%}'}" for p, s in stars.items()) + "."]  # fmt: skip
    return lines
