"""The replica model (adapter/sim/replica.py): latency at light load, saturation, KV, Little's law, and an
iteration-by-iteration reference that the aggregated fast path must reproduce exactly."""

from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from adapter.sim.replica import TPOT_BUCKETS_S, TTFT_BUCKETS_S, PerfParams, ReplicaSim, SimRequest, _iterations_to_reach
from adapter.sim.workload import PoissonArrivals, Request, TokenLengths, synthetic_requests


@dataclass
class Run:
    replica: ReplicaSim
    done: dict[int, tuple[SimRequest, float]] = field(default_factory=dict)
    dropped: dict[int, str] = field(default_factory=dict)


def make(perf: PerfParams, start_s: float = 0.0) -> Run:
    run = Run(ReplicaSim(perf, start_s=start_s))
    run.replica = ReplicaSim(
        perf,
        start_s=start_s,
        on_complete=lambda r, t: run.done.__setitem__(r.rid, (r, t)),
        on_drop=lambda r, t, why: run.dropped.__setitem__(r.rid, why),
    )
    return run


def feed(run: Run, requests: list[Request], *, tick_s: float | None = None, until_s: float = 1e9) -> list[SimRequest]:
    """Enqueue requests at their arrival times, advancing in ticks (or straight to the end)."""
    sims = [SimRequest(i, r, arrival_s=r.arrival_s) for i, r in enumerate(requests)]
    if tick_s is None:
        for req in sims:
            run.replica.enqueue(req)
        run.replica.advance(until_s)
        return sims
    t = 0.0
    pending = deque(sims)
    while t < until_s and (pending or not run.replica.idle):
        t += tick_s
        while pending and pending[0].arrival_s < t:
            run.replica.enqueue(pending.popleft())
        run.replica.advance(t)
    return sims


PERFS = {
    "l4-like": PerfParams(
        alpha_ms=20, beta_ms=0.08, gamma_ms=0.0002, kv_cache_tokens=30000, max_num_batched_tokens=2048
    ),
    "h100-knee": PerfParams(
        alpha_ms=6.5,
        beta_ms=0.022,
        gamma_ms=0.00005,
        kv_cache_tokens=440000,
        max_num_seqs=1024,
        max_num_batched_tokens=8192,
        knee_tokens=128,
    ),
    "small-chunks": PerfParams(
        alpha_ms=10, beta_ms=0.1, gamma_ms=0.001, kv_cache_tokens=20000, max_num_batched_tokens=512
    ),
}


@pytest.mark.parametrize("perf_id", list(PERFS))
@pytest.mark.parametrize(("n_in", "n_out"), [(1000, 100), (3000, 20), (100, 2), (700, 1)], ids=str)
def test_single_request_latency_matches_the_equation(perf_id: str, n_in: int, n_out: int) -> None:
    """Alone on a replica: TTFT = Σ prefill chunks, ITL = mean of alpha + beta·(1−knee)⁺ + gamma·context."""
    perf = PERFS[perf_id]
    run = make(perf)
    feed(run, [Request(0.0, n_in, n_out)])
    req, done_s = run.done[0]
    # prefill: chunks of max_num_batched_tokens, each reading the KV already computed
    expected_ttft_ms, computed = 0.0, 0
    while computed < n_in:
        chunk = min(perf.max_num_batched_tokens, n_in - computed)
        expected_ttft_ms += perf.iteration_ms(tokens=chunk, kv_tokens=computed)
        computed += chunk
    assert req.first_token_s * 1000 == pytest.approx(expected_ttft_ms, rel=1e-9)
    if n_out > 1:
        # decode step j (1-based) reads n_in + j − 1 tokens: mean context n_in + (n_out − 2)/2
        itl_ms = perf.alpha_ms + perf.beta_ms * max(0, 1 - perf.knee_tokens) + perf.gamma_ms * (n_in + (n_out - 2) / 2)
        assert (done_s - req.first_token_s) / (n_out - 1) * 1000 == pytest.approx(itl_ms, rel=1e-9)
    else:
        assert done_s == req.first_token_s
    assert run.replica.idle
    assert run.replica.tokens_in_use == 0
    assert run.replica.successes == 1


def test_worked_example_in_the_docstring() -> None:
    run = make(PerfParams(alpha_ms=20, beta_ms=0.08, gamma_ms=0.0002))
    feed(run, [Request(0.0, 1000, 2)])
    req, done_s = run.done[0]
    assert req.first_token_s == pytest.approx(0.100)
    assert done_s - req.first_token_s == pytest.approx(0.02028)


def _poisson(rate: float, duration: float, seed: int = 1, n_in: float = 1000, n_out: float = 200) -> list[Request]:
    return list(
        synthetic_requests(PoissonArrivals(rate), tokens=TokenLengths(n_in, n_out), duration_s=duration, seed=seed)
    )


def test_light_load_latency_is_close_to_the_unloaded_values() -> None:
    perf = PERFS["l4-like"]
    run = make(perf)
    feed(run, _poisson(0.2, 1800.0), tick_s=1.0)
    ttft = np.array([r.first_token_s - r.arrival_s for r, _ in run.done.values()])
    prefill_s = np.array([perf.iteration_ms(tokens=r.input_tokens, kv_tokens=0) / 1000 for r, _ in run.done.values()])
    # mostly alone: the median TTFT is within 25 % of the bare prefill time
    assert np.median(ttft / prefill_s) == pytest.approx(1.0, abs=0.25)
    itl = np.array([(t - r.first_token_s) / (r.output_tokens - 1) for r, t in run.done.values() if r.output_tokens > 1])
    assert np.median(itl) == pytest.approx((perf.alpha_ms + perf.beta_ms + perf.gamma_ms * 1100) / 1000, rel=0.15)


def _throughput(perf: PerfParams, rate: float, duration: float = 600.0) -> tuple[float, float, float, float]:
    """(completions/s, arrivals/s, mean sampled KV usage, mean sampled queue length) over the second half."""
    run = make(perf)
    reqs = _poisson(rate, duration, seed=2)
    sims = [SimRequest(i, r, arrival_s=r.arrival_s) for i, r in enumerate(reqs)]
    pending = deque(sims)
    kv, queue = [], []
    t = 0.0
    while t < duration:
        t += 1.0
        while pending and pending[0].arrival_s < t:
            run.replica.enqueue(pending.popleft())
        run.replica.advance(t)
        if t > duration / 2:
            kv.append(run.replica.kv_cache_usage)
            queue.append(run.replica.queue_length)
    done_late = sum(1 for _, d in run.done.values() if d > duration / 2)
    arrived_late = sum(1 for r in reqs if r.arrival_s > duration / 2)
    half = duration / 2
    return done_late / half, arrived_late / half, float(np.mean(kv)), float(np.mean(queue))


def test_throughput_saturates_and_kv_usage_rises_with_load() -> None:
    perf = PERFS["l4-like"]
    rates = [0.5, 1.5, 3.0, 6.0, 12.0]
    results = [_throughput(perf, r) for r in rates]
    served = [s for s, _, _, _ in results]
    offered = [a for _, a, _, _ in results]
    kv = [k for _, _, k, _ in results]
    # below capacity everything offered is served (the same requests, give or take the ones in flight)
    assert served[0] == pytest.approx(offered[0], rel=0.05)
    assert served[1] == pytest.approx(offered[1], rel=0.05)
    # above capacity (~3.2 rps for this config, KV-bound) throughput plateaus: 2x the offered load
    # serves at most a few % more, and far less than offered
    assert served[4] == pytest.approx(served[3], rel=0.08)
    assert served[4] < 0.5 * rates[4]
    # KV usage rises with load and plateaus near full once saturated
    assert all(later >= earlier - 0.01 for earlier, later in itertools.pairwise(kv))
    assert kv[0] < kv[1] < kv[2]
    assert kv[0] < 0.2 < 0.9 < kv[4]
    # the waiting queue only builds up once saturated
    assert results[0][3] < 0.1
    assert results[4][3] > 100


def test_littles_law_holds_for_sampled_occupancy() -> None:
    """L (time-average of requests in the replica, sampled) ≈ λ·W (arrival rate × mean time in system)."""
    perf = PERFS["l4-like"]
    duration = 1200.0
    reqs = _poisson(2.0, duration, seed=4)
    run = make(perf)
    sims = [SimRequest(i, r, arrival_s=r.arrival_s) for i, r in enumerate(reqs)]
    pending = deque(sims)
    occupancy = []
    t, dt = 0.0, 0.25
    while t < duration:
        t += dt
        while pending and pending[0].arrival_s < t:
            run.replica.enqueue(pending.popleft())
        run.replica.advance(t)
        occupancy.append(run.replica.in_flight)
    run.replica.advance(1e9)
    w = np.mean([d - r.arrival_s for r, d in run.done.values()])
    lam = len(reqs) / duration
    assert np.mean(occupancy) == pytest.approx(lam * w, rel=0.1)


def test_preemption_recomputes_and_everything_still_completes() -> None:
    """A KV cache too small for the batch's outputs forces preemptions; no token is lost or invented."""
    perf = PerfParams(alpha_ms=10, beta_ms=0.05, gamma_ms=0.0001, kv_cache_tokens=4000, max_num_seqs=64)
    reqs = [Request(i * 0.01, 300, 400) for i in range(20)]
    run = make(perf)
    feed(run, reqs, tick_s=0.5)
    assert run.replica.preemptions_total > 0
    assert len(run.done) == 20
    assert not run.dropped
    assert run.replica.generation_tokens_total == 20 * 400
    assert run.replica.tokens_in_use == 0
    assert run.replica.idle
    # preempted requests paid for it in ITL
    preempted = [(r, d) for r, d in run.done.values() if r.preemptions > 0]
    calm = [(r, d) for r, d in run.done.values() if r.preemptions == 0]
    assert preempted
    assert calm


def test_too_long_requests_are_rejected_and_outputs_capped() -> None:
    perf = PerfParams(kv_cache_tokens=5000, max_model_len=4096)
    run = make(perf)
    sims = feed(run, [Request(0.0, 5000, 10), Request(0.0, 4000, 500), Request(0.0, 4095, 3)])
    assert run.dropped == {0: "too_long"}
    assert sims[1].output_tokens == 96  # 4096 − 4000
    assert sims[2].output_tokens == 1
    assert set(run.done) == {1, 2}


def test_max_num_seqs_bounds_the_running_batch() -> None:
    perf = PerfParams(max_num_seqs=4, kv_cache_tokens=100000)
    run = make(perf)
    for i in range(10):
        run.replica.enqueue(SimRequest(i, Request(0.0, 100, 1000), arrival_s=0.0))
    run.replica.advance(1.0)
    assert run.replica.running_requests == 4
    assert run.replica.queue_length == 6


# ------------------------------------------------------------------------------------- reference check


def reference(perf: PerfParams, requests: list[Request]) -> dict[int, tuple[float, float]]:
    """Iteration-by-iteration implementation of the documented model (no preemption: KV must be ample).
    Returns {index: (first_token_s, done_s)}."""
    inbox = deque(sorted(enumerate(requests), key=lambda p: p[1].arrival_s))
    waiting: deque[dict[str, float]] = deque()
    running: list[dict[str, float]] = []
    out: dict[int, tuple[float, float]] = {}
    clock = kv = pending = 0.0
    while inbox or waiting or running:
        while inbox and inbox[0][1].arrival_s <= clock:
            i, r = inbox.popleft()
            waiting.append(
                {"i": i, "in": r.input_tokens, "out": r.output_tokens, "done_pf": 0, "gen": 0, "first": -1.0}
            )
        if not running and not waiting:
            clock = max(clock, inbox[0][1].arrival_s)
            continue
        decoders = [r for r in running if r["done_pf"] == r["in"]]
        budget = perf.max_num_batched_tokens - len(decoders) - pending
        while waiting and budget > 0 and len(running) < perf.max_num_seqs:
            head = waiting[0]
            assert kv + len(decoders) + head["in"] <= perf.kv_cache_tokens, "reference has no preemption"
            waiting.popleft()
            running.append(head)
            kv += head["in"]
            pending += head["in"]
            budget -= head["in"]
        budget = perf.max_num_batched_tokens - len(decoders)
        tokens, chunked, finished = len(decoders), 0, []
        for r in running:
            if r["done_pf"] < r["in"] and budget > 0:
                c = min(r["in"] - r["done_pf"], budget)
                r["done_pf"] += c
                budget -= c
                chunked += c
                if r["done_pf"] == r["in"]:
                    finished.append(r)
        dt_ms = (
            perf.alpha_ms + perf.beta_ms * max(0, tokens + chunked - perf.knee_tokens) + perf.gamma_ms * (kv - pending)
        )
        clock += dt_ms / 1000
        kv += len(decoders)
        pending -= chunked
        for r in decoders:
            r["gen"] += 1
            if r["gen"] == r["out"]:
                out[int(r["i"])] = (r["first"], clock)
                running.remove(r)
                kv -= r["in"] + r["out"] - 1
        for r in finished:
            r["gen"] = 1
            r["first"] = clock
            if r["out"] == 1:
                out[int(r["i"])] = (clock, clock)
                running.remove(r)
                kv -= r["in"]
    return out


NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)
"""The simulation properties are costly to shrink (minutes); a failure still prints its failing example."""


@settings(max_examples=30, deadline=None, phases=NO_SHRINK)
@given(
    seed=st.integers(0, 10_000),
    rate=st.floats(0.5, 30.0),
    max_seqs=st.integers(1, 64),
    budget=st.sampled_from([256, 512, 2048]),
    knee=st.sampled_from([0, 64]),
    tick=st.sampled_from([None, 0.37, 1.0]),
)
def test_fast_path_matches_the_iteration_by_iteration_reference(
    seed: int, rate: float, max_seqs: int, budget: int, knee: int, tick: float | None
) -> None:
    perf = PerfParams(
        alpha_ms=8, beta_ms=0.05, gamma_ms=0.0003, kv_cache_tokens=10**7,
        max_num_seqs=max_seqs, max_num_batched_tokens=budget, knee_tokens=knee,
    )  # fmt: skip
    reqs = _poisson(rate, 20.0, seed=seed, n_in=600, n_out=60)
    expected = reference(perf, reqs)
    run = make(perf)
    feed(run, reqs, tick_s=tick)
    assert set(run.done) == set(expected)
    for i, (first, done) in expected.items():
        req, done_s = run.done[i]
        assert req.first_token_s == pytest.approx(first, abs=1e-6)
        assert done_s == pytest.approx(done, abs=1e-6)


@settings(max_examples=40, deadline=None, phases=NO_SHRINK)
@given(
    seed=st.integers(0, 10_000),
    rate=st.floats(0.5, 40.0),
    kv=st.integers(2000, 40000),
    max_seqs=st.integers(1, 128),
    n_out=st.floats(5, 400),
)
def test_invariants_under_random_load(seed: int, rate: float, kv: int, max_seqs: int, n_out: float) -> None:
    """Whatever the load: KV never overflows, every request completes or is rejected, KV returns to 0,
    and latencies respect the physical floor (TTFT ≥ alpha, ITL ≥ alpha)."""
    perf = PerfParams(alpha_ms=5, beta_ms=0.05, gamma_ms=0.0002, kv_cache_tokens=kv, max_num_seqs=max_seqs)
    reqs = _poisson(rate, 10.0, seed=seed, n_in=800, n_out=n_out)
    run = make(perf)
    sims = [SimRequest(i, r, arrival_s=r.arrival_s) for i, r in enumerate(reqs)]
    pending = deque(sims)
    t = 0.0
    while pending or not run.replica.idle:
        t += 0.5
        while pending and pending[0].arrival_s < t:
            run.replica.enqueue(pending.popleft())
        run.replica.advance(t)
        assert 0 <= run.replica.tokens_in_use <= kv
        assert run.replica.running_requests <= max_seqs
    assert len(run.done) + len(run.dropped) == len(reqs)
    assert run.replica.tokens_in_use == 0
    for req, done_s in run.done.values():
        assert req.first_token_s - req.arrival_s >= perf.alpha_ms / 1000 - 1e-12
        if req.output_tokens > 1:
            assert (done_s - req.first_token_s) / (req.output_tokens - 1) >= perf.alpha_ms / 1000 - 1e-12
    assert run.replica.successes == len(run.done)
    assert run.replica.generation_tokens_total == sum(r.output_tokens for r, _ in run.done.values())


@pytest.mark.parametrize(
    ("c0", "g", "span", "expected"),
    [
        pytest.param(20.0, 0.0, 50.0, 3, id="docstring-example"),
        pytest.param(20.0, 0.0, 60.0, 3, id="exact-boundary"),
        pytest.param(20.0, 0.0, 5.0, 1, id="shorter-than-one"),
        pytest.param(10.0, 1.0, 100.0, 8, id="growing"),  # D(8) = 80 + 28 = 108 ≥ 100 > D(7) = 91
    ],
)
def test_iterations_to_reach(c0: float, g: float, span: float, expected: int) -> None:
    m = _iterations_to_reach(c0, g, span)

    def d(k: int) -> float:
        return k * c0 + g * k * (k - 1) / 2

    assert m == expected
    assert d(m) >= span
    assert m == 1 or d(m - 1) < span


@settings(max_examples=200, deadline=None)
@given(c0=st.floats(0.01, 100.0), g=st.floats(0.0, 10.0), span=st.floats(0.0, 1e6))
def test_iterations_to_reach_is_the_smallest_crossing(c0: float, g: float, span: float) -> None:
    m = _iterations_to_reach(c0, g, span)
    assert m >= 1
    assert m * c0 + g * m * (m - 1) / 2 >= span
    assert m == 1 or (m - 1) * c0 + g * (m - 1) * (m - 2) / 2 < span


def test_perf_params_validation() -> None:
    with pytest.raises(ValueError, match="alpha_ms"):
        PerfParams(alpha_ms=0)
    with pytest.raises(ValueError, match="kv_cache_tokens"):
        PerfParams(kv_cache_tokens=0)
    assert PerfParams(kv_cache_tokens=30000, block_size=16).num_gpu_blocks == 1875
    assert PerfParams(kv_cache_tokens=30000, max_model_len=8192).effective_max_model_len == 8192
    assert math.isclose(PerfParams().iteration_ms(tokens=64, kv_tokens=64000), 20 + 5.12 + 12.8)


def _cumulative(values: list[float], edges: tuple[float, ...]) -> tuple[int, ...]:
    return (*(sum(1 for v in values if v <= le) for le in edges), len(values))


@pytest.mark.parametrize(
    ("rate", "kv_tokens"),
    [
        pytest.param(0.5, 30_000, id="light"),
        pytest.param(8.0, 30_000, id="queueing"),
        pytest.param(4.0, 6_000, id="preempting"),
    ],
)
def test_latency_histograms_count_every_observation(rate: float, kv_tokens: int) -> None:
    """vLLM's TTFT and per-request TPOT histograms (default edges): each finished request observed once in
    each; TPOT = (last − first token) / (n − 1), and 0 for a one-token answer."""
    perf = PerfParams(alpha_ms=20, beta_ms=0.08, gamma_ms=0.0002, kv_cache_tokens=kv_tokens, max_num_seqs=64)
    reqs = _poisson(rate, 300.0, seed=5, n_in=800, n_out=150)
    reqs += [Request(301.0 + i, 200, 1) for i in range(5)]  # one-token answers
    run = make(perf)
    feed(run, reqs, tick_s=0.5)
    assert len(run.done) == len(reqs)
    sample = run.replica.sample()
    ttft = [r.first_token_s - r.arrival_s for r, _ in run.done.values()]
    tpot = [(t - r.first_token_s) / (r.output_tokens - 1) if r.output_tokens > 1 else 0.0 for r, t in run.done.values()]
    assert sample.ttft_buckets == _cumulative(ttft, TTFT_BUCKETS_S)
    assert sample.tpot_buckets == _cumulative(tpot, TPOT_BUCKETS_S)
    assert sample.ttft_buckets[-1] == sample.ttft_count == len(reqs)
    assert sample.tpot_buckets[0] >= 5  # the one-token answers sit in the lowest bucket
    assert len(sample.ttft_buckets) == 23
    assert len(sample.tpot_buckets) == 20
    if rate >= 8.0:  # a queue forms: some first tokens take longer than the first edges
        assert sample.ttft_buckets[TTFT_BUCKETS_S.index(0.25)] < len(reqs)
    if kv_tokens < 10_000:  # preempted requests are observed once, at their first first token
        assert run.replica.preemptions_total > 0
