"""One simulated vLLM replica: continuous batching with chunked prefill on a virtual clock.

Model (vLLM V1 scheduler, simplified; research/llm-autoscaling-anchors.md §3.1, §5)
--------------------------------------------------------------------------------
* A FCFS **waiting** queue and a **running** batch bounded by `max_num_seqs` sequences and by the KV cache
  (`kv_cache_tokens`). A waiting request is admitted when a slot is free and the free KV covers its whole
  prompt (vLLM allocates prompt blocks on admission); admission stops at the first request that does not fit
  (FCFS, no skipping).
* Every engine **iteration** processes one token per decoding sequence plus prefill chunks of the admitted,
  not yet prefilled requests, in admission order, within the token budget `max_num_batched_tokens`
  (decodes are scheduled first, as vLLM V1 does). The iteration in which a request's last prompt chunk is
  processed emits its first output token (TTFT); each later iteration emits one more token.
* KV grows by one token per decoding sequence per iteration. When the next iteration would overflow the
  cache, the newest running request is **preempted** (recompute mode): its KV is freed and it returns to
  the head of the waiting queue; on re-admission it re-prefills prompt + tokens generated so far.
* Requests longer than `max_model_len` (default: the KV capacity) are rejected on arrival, and
  `output_tokens` is capped to `max_model_len − input_tokens`, as vLLM does with `max_tokens`.

Iteration time (ms), the WVA form with an optional compute knee (anchors §3.1):

    t_iter = alpha_ms + beta_ms · max(0, T − knee_tokens) + gamma_ms · K

    T = tokens processed this iteration = (decoding sequences) + (prefill chunk tokens)
    K = KV tokens resident (already computed) at the start of the iteration, over the running batch

Worked example (alpha 20, beta 0.08, gamma 0.0002, knee 0; one 1000-token prompt, empty replica):
prefill iteration T = 1000, K = 0 ⇒ 20 + 80 + 0 = 100 ms = TTFT. First decode iteration T = 1, K = 1000 ⇒
20 + 0.08 + 0.2 = 20.28 ms = ITL, growing by gamma per token of context (0.0002 ms).
With 64 sequences decoding at ~1000 tokens of context each: T = 64, K = 64 000 ⇒ 20 + 5.12 + 12.8 ≈ 37.9 ms.

Performance: decode-only stretches between events (an arrival that can be admitted, a completion, the KV
cache filling up, the end of the tick) are aggregated analytically. With n decoders and K₀ resident tokens,
iteration j (1-based) takes c₀ + g·(j − 1) with c₀ = alpha + beta·max(0, n − knee) + gamma·K₀ and g = gamma·n,
so m iterations take D(m) = m·c₀ + g·m(m − 1)/2; the number of iterations that fit before an event comes
from solving that quadratic. Decoders are tracked implicitly by a global iteration counter (a request's
generated tokens = counter − its start), so a stretch costs O(log batch) no matter how many iterations it
spans (plus an O(batch) list removal per completion), and mixed (prefill) iterations cost O(prefilling
requests). Block granularity is ignored: KV is counted in tokens (≤ block_size − 1 tokens of rounding per
request), and `kv_cache_usage` = allocated tokens / kv_cache_tokens.

Per-request results are exact for the model: TTFT = first-token time − arrival; ITL = the request's mean
inter-token time (last token − first token) / (output_tokens − 1), including any preemption stall.

Latency histograms, as vLLM keeps them (research/predictive-scaling.md §3.1, §3.2), with vLLM's default bucket
edges (`adapter.domain.latency`): `vllm:time_to_first_token_seconds` observes each request's TTFT once, at its
first token (a preempted request is not observed again), and `vllm:request_time_per_output_token_seconds`
observes each finished request's ITL as defined above, 0 for a request of <= 1 output token (vLLM's
`update_from_finished_request`). Dropped requests are observed by neither. The counts are kept per bucket (one
`bisect` and one increment per observation) and made cumulative when the replica is scraped (`sample`). TTFT
counts from `arrival_s`, as `ttft_sum_s` does: for a request held in the EPP queue while no pod was ready that
includes the wait, which a real vLLM does not see (it only happens at scale-from-zero).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate

from adapter.domain.latency import VLLM_ITL_BUCKETS_S, VLLM_TTFT_BUCKETS_S
from adapter.sim.workload import Request

TTFT_BUCKETS_S = VLLM_TTFT_BUCKETS_S
"""Finite upper bounds of the replica's TTFT histogram (vLLM's defaults); `+Inf` follows them."""
TPOT_BUCKETS_S = VLLM_ITL_BUCKETS_S
"""Finite upper bounds of the per-request TPOT histogram (vLLM's `inter_token_latency` family)."""


@dataclass(frozen=True, slots=True)
class PerfParams:
    """Performance and serving parameters of one replica (one vLLM engine)."""

    alpha_ms: float = 20.0
    """Fixed cost of an iteration (weights read, launch overhead)."""
    beta_ms: float = 0.08
    """Cost per token processed in the iteration (above `knee_tokens`)."""
    gamma_ms: float = 0.0002
    """Cost per KV token resident (attention reads)."""
    kv_cache_tokens: int = 30000
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    block_size: int = 16
    knee_tokens: int = 0
    """Tokens per iteration that are free (memory-bound floor); 0 = the plain linear WVA form."""
    max_model_len: int = 0
    """Longest request (prompt + output); 0 = the KV capacity."""

    def __post_init__(self) -> None:
        if self.alpha_ms <= 0:
            raise ValueError("alpha_ms must be > 0 (an iteration cannot be free)")
        if self.beta_ms < 0 or self.gamma_ms < 0:
            raise ValueError("beta_ms and gamma_ms must be >= 0")
        if self.kv_cache_tokens < 1 or self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise ValueError("kv_cache_tokens, max_num_seqs and max_num_batched_tokens must be >= 1")
        if self.block_size < 1 or self.knee_tokens < 0 or self.max_model_len < 0:
            raise ValueError("block_size must be >= 1; knee_tokens and max_model_len >= 0")

    @property
    def effective_max_model_len(self) -> int:
        cap = self.kv_cache_tokens
        return min(self.max_model_len, cap) if self.max_model_len > 0 else cap

    @property
    def num_gpu_blocks(self) -> int:
        return self.kv_cache_tokens // self.block_size

    def iteration_ms(self, *, tokens: int, kv_tokens: float) -> float:
        """alpha + beta·max(0, tokens − knee) + gamma·kv_tokens (see module docstring)."""
        return self.alpha_ms + self.beta_ms * max(0, tokens - self.knee_tokens) + self.gamma_ms * kv_tokens


class SimRequest:
    """A request inside the fleet and a replica (mutable; one per offered request)."""

    __slots__ = (
        "arrival_s",
        "decode_from",
        "epoch",
        "finish_iter",
        "first_token_s",
        "input_tokens",
        "out_done",
        "output_tokens",
        "preemptions",
        "prefill_target",
        "prefilled",
        "ready_s",
        "rid",
    )

    def __init__(self, rid: int, request: Request, *, arrival_s: float) -> None:
        self.rid = rid
        self.arrival_s = arrival_s
        self.ready_s = arrival_s
        """When the replica may see it (arrival, or the moment the EPP queue released it)."""
        self.input_tokens = request.input_tokens
        self.output_tokens = request.output_tokens
        self.prefill_target = request.input_tokens
        self.prefilled = 0
        self.out_done = 0
        self.decode_from = 0
        self.finish_iter = 0
        self.first_token_s = math.nan
        self.epoch = 0
        self.preemptions = 0


CompletionSink = Callable[[SimRequest, float], None]
DropSink = Callable[[SimRequest, float, str], None]


@dataclass(frozen=True, slots=True)
class ScrapeSample:
    """What a Prometheus scrape of the replica's /metrics would read at `t_s` (gauges and counters)."""

    t_s: float
    kv_cache_usage: float
    queue_length: int
    running: int
    arrivals: int
    successes: int
    prompt_tokens: int
    generation_tokens: int
    ttft_sum_s: float
    ttft_count: int
    itl_sum_s: float
    itl_count: int
    ttft_buckets: tuple[int, ...]
    """Cumulative TTFT bucket counts, one per `TTFT_BUCKETS_S` edge, then `+Inf` (= the count)."""
    tpot_buckets: tuple[int, ...]
    """Cumulative per-request TPOT bucket counts, one per `TPOT_BUCKETS_S` edge, then `+Inf`."""


class ReplicaSim:
    """One vLLM engine. Feed it with `enqueue`, move it with `advance(until_s)`; read its gauges/counters.

    The replica's own clock (`clock_s`) may run slightly past `until_s`: an iteration that starts before
    `until_s` runs to its end (iterations are atomic, as on a GPU).
    """

    def __init__(
        self,
        perf: PerfParams,
        *,
        start_s: float,
        on_complete: CompletionSink | None = None,
        on_drop: DropSink | None = None,
    ) -> None:
        self.perf = perf
        self.clock_s = start_s
        self.start_s = start_s
        self._on_complete = on_complete
        self._on_drop = on_drop
        self._cap = perf.kv_cache_tokens
        self._inv_cap = 1.0 / perf.kv_cache_tokens
        self._inv_seqs = 1.0 / perf.max_num_seqs
        self._max_len = perf.effective_max_model_len
        self._inbox: deque[SimRequest] = deque()
        self._waiting: deque[SimRequest] = deque()
        self._running: list[SimRequest] = []
        self._prefilling: list[SimRequest] = []
        self._heap: list[tuple[int, int, int, SimRequest]] = []
        self._iter = 0
        self._n_decode = 0
        self._kv_alloc = 0
        self._prefill_pending = 0
        self._inbox_prompt_tokens = 0
        self._waiting_prompt_tokens = 0
        # counters (monotonic, like vLLM's)
        self.arrivals = 0
        self.successes = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.ttft_sum_s = 0.0
        self.ttft_count = 0
        self.itl_sum_s = 0.0
        self.itl_count = 0
        self.ttft_bucket_counts = [0] * (len(TTFT_BUCKETS_S) + 1)
        """Observations per bucket (not cumulative); the last is above the highest edge."""
        self.tpot_bucket_counts = [0] * (len(TPOT_BUCKETS_S) + 1)
        self.preemptions_total = 0
        self.iterations_total = 0
        self.busy_s = 0.0

    # ---------------------------------------------------------------- gauges

    @property
    def queue_length(self) -> int:
        """`vllm:num_requests_waiting`: requests the engine has accepted but not scheduled."""
        return len(self._waiting) + len(self._inbox)

    @property
    def running_requests(self) -> int:
        return len(self._running)

    @property
    def tokens_in_use(self) -> int:
        return self._kv_alloc

    @property
    def kv_cache_usage(self) -> float:
        return self._kv_alloc / self._cap

    @property
    def in_flight(self) -> int:
        return len(self._inbox) + len(self._waiting) + len(self._running)

    @property
    def idle(self) -> bool:
        return not (self._inbox or self._waiting or self._running)

    def load_score(self) -> float:
        """Fraction of the binding resource the replica would be using: max(sequence slots, KV tokens),
        counting queued work. Example: 128 running + 32 waiting of 256 slots = 0.625; KV 0.4 + queued prompts
        0.1 = 0.5 ⇒ 0.625."""
        seqs = (len(self._running) + len(self._waiting) + len(self._inbox)) * self._inv_seqs
        kv = (self._kv_alloc + self._waiting_prompt_tokens + self._inbox_prompt_tokens) * self._inv_cap
        return seqs if seqs > kv else kv

    def sample(self) -> ScrapeSample:
        return ScrapeSample(
            t_s=self.clock_s,
            kv_cache_usage=self.kv_cache_usage,
            queue_length=self.queue_length,
            running=len(self._running),
            arrivals=self.arrivals,
            successes=self.successes,
            prompt_tokens=self.prompt_tokens_total,
            generation_tokens=self.generation_tokens_total,
            ttft_sum_s=self.ttft_sum_s,
            ttft_count=self.ttft_count,
            itl_sum_s=self.itl_sum_s,
            itl_count=self.itl_count,
            ttft_buckets=tuple(accumulate(self.ttft_bucket_counts)),
            tpot_buckets=tuple(accumulate(self.tpot_bucket_counts)),
        )

    # ---------------------------------------------------------------- input

    def enqueue(self, req: SimRequest) -> bool:
        """Hand a request to the engine (visible from `req.ready_s`). Returns False when it is rejected
        because prompt + 1 exceeds max_model_len (the drop sink is told, reason `too_long`)."""
        if req.input_tokens + 1 > self._max_len:
            if self._on_drop is not None:
                self._on_drop(req, req.ready_s, "too_long")
            return False
        req.output_tokens = min(req.output_tokens, self._max_len - req.input_tokens)
        self.arrivals += 1
        self._inbox.append(req)
        self._inbox_prompt_tokens += req.input_tokens
        return True

    def drop_all(self, now_s: float, reason: str) -> int:
        """Abort everything queued or running (e.g. the pod was killed); returns how many were dropped."""
        dropped = [*self._inbox, *self._waiting, *self._running]
        for req in dropped:
            req.epoch += 1
            if self._on_drop is not None:
                self._on_drop(req, now_s, reason)
        self._inbox.clear()
        self._waiting.clear()
        self._running.clear()
        self._prefilling.clear()
        self._heap.clear()
        self._n_decode = self._kv_alloc = self._prefill_pending = 0
        self._inbox_prompt_tokens = self._waiting_prompt_tokens = 0
        self.clock_s = max(self.clock_s, now_s)
        return len(dropped)

    # ---------------------------------------------------------------- simulation

    def advance(self, until_s: float) -> None:
        """Run iterations until the clock reaches `until_s` (the last one may end after it)."""
        inbox = self._inbox
        while True:
            t = self.clock_s
            while inbox and inbox[0].ready_s <= t:
                req = inbox.popleft()
                self._inbox_prompt_tokens -= req.input_tokens
                self._waiting_prompt_tokens += req.prefill_target
                self._waiting.append(req)
            if not self._running and not self._waiting:
                nxt = inbox[0].ready_s if inbox else until_s
                if nxt >= until_s:
                    self.clock_s = max(t, until_s)
                    return
                self.clock_s = nxt
                continue
            if t >= until_s:
                return
            self._admit()
            if self._prefilling:
                self._mixed_iteration()
            elif self._n_decode > 0:
                limit = until_s
                if inbox and not self._waiting and inbox[0].ready_s < limit:
                    limit = inbox[0].ready_s
                self._decode_stretch(limit)
            elif self._waiting and not self._running:  # pragma: no cover - defensive, see _admit
                self._reject_head("unschedulable")

    def _admit(self) -> None:
        """Preempt while decodes would overflow KV, then admit waiting requests FCFS."""
        cap = self._cap
        while self._running and self._kv_alloc + self._n_decode > cap:
            self._preempt_newest()
        waiting = self._waiting
        budget = self.perf.max_num_batched_tokens - self._n_decode - self._prefill_pending
        max_seqs = self.perf.max_num_seqs
        while waiting and budget > 0 and len(self._running) < max_seqs:
            head = waiting[0]
            if self._kv_alloc + self._n_decode + head.prefill_target > cap:
                if not self._running:
                    self._reject_head("too_long")
                    continue
                break
            waiting.popleft()
            self._waiting_prompt_tokens -= head.prefill_target
            head.prefilled = 0
            self._running.append(head)
            self._prefilling.append(head)
            self._kv_alloc += head.prefill_target
            self._prefill_pending += head.prefill_target
            budget -= head.prefill_target

    def _reject_head(self, reason: str) -> None:
        req = self._waiting.popleft()
        self._waiting_prompt_tokens -= req.prefill_target
        if self._on_drop is not None:
            self._on_drop(req, self.clock_s, reason)

    def _preempt_newest(self) -> None:
        req = self._running.pop()
        self.preemptions_total += 1
        req.preemptions += 1
        req.epoch += 1
        if req in self._prefilling:
            self._prefilling.remove(req)
            self._kv_alloc -= req.prefill_target
            self._prefill_pending -= req.prefill_target - req.prefilled
        else:
            decoded = self._iter - req.decode_from
            self._kv_alloc -= req.prefill_target + decoded
            self._n_decode -= 1
            req.out_done += decoded
        req.prefill_target = req.input_tokens + req.out_done
        req.prefilled = 0
        self._waiting_prompt_tokens += req.prefill_target
        self._waiting.appendleft(req)

    def _mixed_iteration(self) -> None:
        """One iteration with prefill work: decodes (1 token each) + chunks in admission order."""
        perf = self.perf
        n_decode = self._n_decode
        budget = perf.max_num_batched_tokens - n_decode
        prefill_tokens = 0
        finished: list[SimRequest] = []
        for req in self._prefilling:
            if budget <= 0:
                break
            chunk = min(req.prefill_target - req.prefilled, budget)
            req.prefilled += chunk
            budget -= chunk
            prefill_tokens += chunk
            if req.prefilled == req.prefill_target:
                finished.append(req)
        kv_ctx = self._kv_alloc - self._prefill_pending
        dt_s = perf.iteration_ms(tokens=n_decode + prefill_tokens, kv_tokens=kv_ctx) / 1000.0
        self.clock_s += dt_s
        self.busy_s += dt_s
        self._iter += 1
        self.iterations_total += 1
        self._kv_alloc += n_decode
        self._prefill_pending -= prefill_tokens
        now = self.clock_s
        if finished:
            self._prefilling = [r for r in self._prefilling if r.prefilled < r.prefill_target]
            for req in finished:
                self._prefill_done(req, now)
        self._pop_completions(now)

    def _prefill_done(self, req: SimRequest, now: float) -> None:
        req.out_done += 1
        if req.out_done == 1:
            req.first_token_s = now
            ttft_s = now - req.arrival_s
            self.ttft_sum_s += ttft_s
            self.ttft_count += 1
            self.ttft_bucket_counts[bisect_left(TTFT_BUCKETS_S, ttft_s)] += 1
        remaining = req.output_tokens - req.out_done
        if remaining <= 0:
            self._running.remove(req)
            self._kv_alloc -= req.prefill_target
            self._complete(req, now)
            return
        req.decode_from = self._iter
        req.finish_iter = self._iter + remaining
        heapq.heappush(self._heap, (req.finish_iter, req.rid, req.epoch, req))
        self._n_decode += 1

    def _pop_completions(self, now: float) -> None:
        heap = self._heap
        it = self._iter
        while heap:
            finish, _, epoch, req = heap[0]
            if epoch != req.epoch:
                heapq.heappop(heap)
                continue
            if finish > it:
                return
            heapq.heappop(heap)
            self._running.remove(req)
            self._n_decode -= 1
            self._kv_alloc -= req.prefill_target + (it - req.decode_from)
            req.out_done = req.output_tokens
            self._complete(req, now)

    def _complete(self, req: SimRequest, now: float) -> None:
        req.epoch += 1
        self.successes += 1
        self.prompt_tokens_total += req.input_tokens
        self.generation_tokens_total += req.output_tokens
        tokens = req.output_tokens
        if tokens > 1:
            decode_s = now - req.first_token_s
            self.itl_sum_s += decode_s
            self.itl_count += tokens - 1
            self.tpot_bucket_counts[bisect_left(TPOT_BUCKETS_S, decode_s / (tokens - 1))] += 1
        else:
            self.tpot_bucket_counts[0] += 1  # vLLM records 0 for a request of <= 1 output token
        if self._on_complete is not None:
            self._on_complete(req, now)

    def _next_finish(self) -> int:
        heap = self._heap
        while heap and heap[0][2] != heap[0][3].epoch:
            heapq.heappop(heap)
        return heap[0][0]

    def _decode_stretch(self, limit_s: float) -> None:
        """Run m decode-only iterations at once, m = the first event: a completion, a full KV cache, or the
        first iteration boundary at or after `limit_s` (see module docstring for D(m))."""
        perf = self.perf
        n = self._n_decode
        free = self._cap - self._kv_alloc
        m_kv = free // n
        if m_kv == 0:
            self._preempt_newest()
            return
        m_done = self._next_finish() - self._iter
        c0 = perf.alpha_ms + perf.beta_ms * max(0, n - perf.knee_tokens) + perf.gamma_ms * self._kv_alloc
        g = perf.gamma_ms * n
        m_time = _iterations_to_reach(c0, g, (limit_s - self.clock_s) * 1000.0)
        m = max(1, min(m_done, m_kv, m_time))
        dt_s = (m * c0 + g * m * (m - 1) / 2.0) / 1000.0
        self.clock_s += dt_s
        self.busy_s += dt_s
        self._iter += m
        self.iterations_total += m
        self._kv_alloc += n * m
        self._pop_completions(self.clock_s)


def _iterations_to_reach(c0_ms: float, g_ms: float, span_ms: float) -> int:
    """Smallest m ≥ 1 with D(m) = m·c0 + g·m(m−1)/2 ≥ span (iterations are atomic: the one that crosses
    the limit runs to its end). Example: c0 = 20, g = 0, span = 50 ⇒ m = 3 (20, 40, 60 ms)."""
    if span_ms <= c0_ms:
        return 1
    # positive root of (g/2)·m² + (c0 − g/2)·m − span = 0, in the form that stays exact as g → 0
    a = g_ms / 2.0
    b = c0_ms - a
    m = max(1, math.ceil(2.0 * span_ms / (b + math.sqrt(b * b + 4.0 * a * span_ms))))

    def d(k: int) -> float:
        return k * c0_ms + g_ms * k * (k - 1) / 2.0

    while m > 1 and d(m - 1) >= span_ms:
        m -= 1
    while d(m) < span_ms:
        m += 1
    return m
