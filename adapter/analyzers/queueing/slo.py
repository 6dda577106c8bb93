"""SLO resolution for the queueing-model analyzer (seed 003; research §3.5, §3.7): which TTFT and ITL targets a
model is sized for this cycle, and from what (stage 3 of `analyzer.measure`). Pure.

The targets are resolved against the model's workload (`workload.Workload`: arrival-rate-weighted means over
its busy pods) and the variants' learned service parameters.

Resolution, first that applies (the replay's ``analysis.slo.source``):

1. ``explicit``: ``targetTTFT`` and ``targetITL`` (ms), both > 0, from the model's entry in
   ``wva-queueing-model-config`` (layered over ``default``).
2. ``inferred``, from every variant with learned (α, β, γ) and k = ``sloMultiplier`` (≤ 1 means 3): at the
   target utilisation ρ = 1 − 1/k the iteration time is k·α, so

       TTFT* = k·α + (β+γ)·I          ITL* = k·α + β + γ·(I + (O+1)/2)

   taking the element-wise maximum over variants (one SLO per model: all variants serve the same traffic).
   Example (k 3; α 20, β 0.08, γ 0.0002; I 512, O 128): TTFT* = 60 + 0.0802·512 = 101.06 ms,
   ITL* = 60 + 0.08 + 0.0002·576.5 = 60.195 ms.
3. ``observed`` (cold start: nothing learned yet): the observed TTFT and ITL × 1.5, capped at 10,000 ms and
   500 ms. Example: observed 400 ms / 40 ms → 600 ms / 60 ms.

None when none applies (no targets, nothing learned and no busy pod reporting latencies): the analyzer then
reports no signal, with that reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from adapter.analyzers.queueing.model import ServiceParams
from adapter.analyzers.queueing.workload import Workload
from adapter.config.configmaps import QueueingConfig
from adapter.domain.frozen import fast_init

DEFAULT_SLO_MULTIPLIER = 3.0
FALLBACK_HEADROOM = 1.5
MAX_FALLBACK_TTFT_MS = 10_000.0
MAX_FALLBACK_ITL_MS = 500.0


class SloSource(StrEnum):
    EXPLICIT = "explicit"
    INFERRED = "inferred"
    OBSERVED = "observed"


@fast_init
@dataclass(frozen=True, slots=True)
class Slo:
    target_ttft_ms: float
    target_itl_ms: float
    source: str
    """explicit | inferred | observed (a `SloSource` value)"""

    def to_json(self) -> dict[str, object]:
        """The replay's `analysis.slo` (DESIGN §3.2)."""
        return {
            "target_ttft_ms": round(self.target_ttft_ms, 3),
            "target_itl_ms": round(self.target_itl_ms, 3),
            "source": self.source,
        }


def resolve_slo(cfg: QueueingConfig, learned: Sequence[ServiceParams], load: Workload) -> Slo | None:
    """Explicit → inferred → observed (module docstring); None when none applies."""
    if cfg.explicit_slo:
        return Slo(cfg.target_ttft_ms, cfg.target_itl_ms, SloSource.EXPLICIT.value)
    k = cfg.slo_multiplier if cfg.slo_multiplier > 1 else DEFAULT_SLO_MULTIPLIER
    i, o = load.input_tokens, load.output_tokens
    inferred = [
        (k * s.alpha_ms + (s.beta_ms + s.gamma_ms) * i, k * s.alpha_ms + s.beta_ms + s.gamma_ms * (i + (o + 1) / 2))
        for s in learned
    ]
    if inferred and i > 0 and o > 0:
        return Slo(max(t for t, _ in inferred), max(t for _, t in inferred), SloSource.INFERRED.value)
    if load.ttft_ms > 0 and load.itl_ms > 0:
        return Slo(
            min(load.ttft_ms * FALLBACK_HEADROOM, MAX_FALLBACK_TTFT_MS),
            min(load.itl_ms * FALLBACK_HEADROOM, MAX_FALLBACK_ITL_MS),
            SloSource.OBSERVED.value,
        )
    return None
