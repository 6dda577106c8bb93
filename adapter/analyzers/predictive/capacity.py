"""Capacity per replica at a per-request SLO: the queueing model at targets tightened for the tail.

The queueing model (adapter/analyzers/queueing/model.py) gives λ*, the largest rate at which one replica's *mean*
TTFT and ITL meet the targets. Attainment counts every request, so the predictive analyzer asks the model for the
rate at which the means sit far enough below the targets that, under a stated shape of the tail, only a share
ε = 1 − sloAttainmentTarget of requests miss (split evenly: ε/2 for TTFT, ε/2 for ITL):

* **TTFT** = prefill + queue wait. The wait of an M/M/·-like queue is (near) exponential, so
  P(wait > t) = e^(−t/W̄) ≤ ε/2 ⇔ W̄ ≤ t / ln(2/ε). With t = T − prefill:

      T' = prefill + (T − prefill) / ln(2/ε),      prefill = α + (β + γ)·I

  Example: T 2000 ms, α 9.5, β+γ 0.06608, I 1155 ⇒ prefill 85.8 ms; ε 0.01 ⇒ ln 200 = 5.298 ⇒
  T' = 85.8 + 1914.2/5.298 = 447.1 ms.
* **ITL** (a request's mean inter-token latency) spreads around the replica's mean with a coefficient of variation
  `itl_cv` (from batch changes and prefill chunks landing in its decode); with a normal approximation,
  P(ITL > L) ≤ ε/2 ⇔ mean ≤ L / (1 + z_(1−ε/2)·cv):

      L' = L / (1 + z·cv)          ε 0.01, cv 0.25 ⇒ z 2.576 ⇒ L' = L / 1.644 = 0.608·L

Both are priors on the tail's shape, not measurements; the attainment controller (attainment.py) corrects what
they get wrong, workload by workload, from the latency histograms.

Also here: the advice for prefill-heavy traffic. A decoding request waits for every iteration its replica runs,
and one iteration carrying a full prefill chunk of `max_num_batched_tokens` takes about α + β·C; when that alone
exceeds the ITL target, no replica count fixes the ITL of the requests it lands on: the chunk must shrink.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from adapter.analyzers.predictive.forecast import normal_quantile
from adapter.analyzers.queueing.model import InvalidInput, Metrics, QueueModel, RequestSize, ServiceParams, max_rates
from adapter.domain.errors import ModelError
from adapter.domain.frozen import fast_init

DEFAULT_ITL_CV = 0.25
MIN_USEFUL_UTILISATION = 0.2


@fast_init
@dataclass(frozen=True, slots=True)
class Targets:
    ttft_ms: float
    itl_ms: float


def prefill_ms(params: ServiceParams, input_tokens: float) -> float:
    """One request's prefill alone: α + (β + γ)·I (the queueing model's PrefillTime at a batch of 0)."""
    return params.alpha_ms + (params.beta_ms + params.gamma_ms) * max(input_tokens, 0.0)


def tightened(
    slo: Targets, params: ServiceParams, size: RequestSize, *, attainment: float, itl_cv: float = DEFAULT_ITL_CV
) -> Targets:
    """The mean targets at which, under the module docstring's tail shapes, `attainment` of requests meet `slo`.
    A TTFT target below the prefill itself is left as it is (the model then finds no rate: capacity 0)."""
    if not 0.5 <= attainment < 1.0:
        raise ValueError(f"attainment must be in [0.5, 1), got {attainment}")
    share = (1.0 - attainment) / 2.0
    prefill = prefill_ms(params, size.input_tokens)
    ttft = slo.ttft_ms
    if ttft > prefill:
        ttft = prefill + (ttft - prefill) / math.log(1.0 / share)
    z = normal_quantile(1.0 - share)
    return Targets(ttft, slo.itl_ms / (1.0 + z * max(itl_cv, 0.0)))


class ReplicaQuery(NamedTuple):
    """One replica's λ* to find: its service parameters, request size, batch limit and (tightened) targets."""

    params: ServiceParams
    size: RequestSize
    max_batch: int
    targets: Targets


def per_replica_rps(queries: Sequence[ReplicaQuery]) -> list[float]:
    """λ* of one replica at its targets for each query (req/s); 0 when no rate meets them, or only a rate below
    `MIN_USEFUL_UTILISATION` of the replica's throughput: such a variant serves this SLO only nearly idle, every
    replica of it a waste beside a variant that can (an L4 with α 55 ms under a 100-ms ITL target). The queries are
    searched together (`max_rates`: in lockstep from 16 of them, each alone below)."""
    rates = [0.0] * len(queries)
    built: list[tuple[int, QueueModel, Targets]] = []
    for index, (params, size, max_batch, targets) in enumerate(queries):
        try:
            built.append((index, QueueModel(params, size, max_batch=max(1, max_batch)), targets))
        except (InvalidInput, ModelError):
            continue
    answers = max_rates([(model, targets.ttft_ms, targets.itl_ms) for _, model, targets in built])
    for (index, model, _), answer in zip(built, answers, strict=True):
        if isinstance(answer, Metrics):
            rate = float(answer.rate_rps)
            rates[index] = rate if rate >= MIN_USEFUL_UTILISATION * model.rate_range_rps.max_rps else 0.0
    return rates


def chunk_ms(params: ServiceParams, chunk_tokens: int) -> float:
    """One iteration carrying a full prefill chunk: α + β·C."""
    return params.alpha_ms + params.beta_ms * max(chunk_tokens, 0)


def chunk_advice(params: ServiceParams, chunk_tokens: int, itl_target_ms: float) -> str | None:
    """Advice when one prefill chunk alone exceeds the ITL target (module docstring), else None.
    Example: α 9.5, β 0.066, C 2048 ⇒ 144.7 ms > 100 ms ⇒ lower --max-num-batched-tokens to ≤ 1371."""
    if chunk_tokens <= 0 or itl_target_ms <= 0:
        return None
    took = chunk_ms(params, chunk_tokens)
    if took <= itl_target_ms:
        return None
    fits = math.floor((itl_target_ms - params.alpha_ms) / params.beta_ms) if params.beta_ms > 0 else 0
    bound = f"≤ {fits}" if fits > 0 else "smaller (α alone exceeds the target)"
    return (
        f"one prefill chunk of {chunk_tokens} tokens takes {took:.0f} ms (α + β·C), above the ITL target "
        f"{itl_target_ms:g} ms for every request decoding beside it; no replica count fixes that: lower "
        f"--max-num-batched-tokens to {bound}"
    )
