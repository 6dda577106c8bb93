"""The simulator against the queueing model: one static replica under Poisson load, mean TTFT and ITL of the
simulated requests next to the model's (`adapter.analyzers.queueing.model`, what `wva-adapter capacity --rate`
prints) at the same α, β, γ, request size and batch limit. Used by tests/sim/test_fidelity.py and bench-sim.

Utilisation u = λ / λ_max, λ_max the model's largest sustainable rate (μ_N). The replica has KV to spare, so
its batch limit is `max_num_seqs` = the model's N; token lengths are lognormal (σ 0.6) around the means the
model is given, so the comparison also covers the size variability the model averages away.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adapter.analyzers.queueing.model import QueueModel, RequestSize, ServiceParams
from adapter.sim.fleet import FleetConfig, SimulatedFleet, VariantConfig
from adapter.sim.replica import PerfParams
from adapter.sim.workload import PoissonArrivals, SyntheticWorkload, TokenLengths

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
