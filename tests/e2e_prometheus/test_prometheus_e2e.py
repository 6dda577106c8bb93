"""End to end with a real Prometheus: emulated vLLM and EPP pods → Prometheus (1 s scrapes) → PromQL → Collection.

The collector's queries run unmodified except for shorter windows (seconds instead of minutes), so a load
change is visible within a few scrapes. Every wait is a bounded poll that fails with the last mismatch.
Run with `-s` to see the transcript (what Prometheus scraped, what was collected at each step).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from adapter.domain.cluster import Collection, EppEndpoint, InferencePoolInfo, ModelQuery
from adapter.domain.ids import ModelKey
from adapter.metrics.collector import ACCEPT_ENCODING, PrometheusCollector
from adapter.metrics.epp import EppScraper
from adapter.metrics.queries import QueryWindows, build_queries
from tests.metrics.emulators import EppPod, MetricsServer, VllmPod

from .prom import PrometheusProcess, Target

LLAMA = ModelKey("ns-a", "meta/llama-3.1-8b")
QWEN = ModelKey("ns-b", "Qwen/Qwen2.5-7B-Instruct")
IDLE = ModelKey("ns-b", "org/idle-model")
NO_PODS = ModelKey("ns-a", "org/no-pods")
RETENTION_S = 6.0
MODELS = [ModelQuery(k, retention_s=RETENTION_S) for k in (LLAMA, QWEN, IDLE, NO_PODS)]
WINDOWS = QueryWindows(saturation_s=2, tokens_s=4, latency_s=4, dispatch_s=3)
BLOCKS, BLOCK_SIZE = 1024, 16

# pod -> (namespace, model, variant or None when no VA owns it, legacy metric names)
PODS: dict[str, tuple[ModelKey, str | None, bool]] = {
    "llama-a100-0": (LLAMA, "llama-a100", False),
    "llama-a100-1": (LLAMA, "llama-a100", False),
    "llama-l4-0": (LLAMA, "llama-l4", True),
    "stray-0": (LLAMA, None, False),
    "qwen-h100-0": (QWEN, "qwen-h100", False),
    "idle-0": (IDLE, "idle", False),
}
POD_VARIANTS = {(key.namespace, pod): variant for pod, (key, variant, _) in PODS.items() if variant}


@dataclass
class Fleet:
    pods: dict[str, VllmPod]
    epp_a: EppPod
    epp_b: EppPod
    servers: dict[str, MetricsServer]
    transcript: list[str]

    def say(self, line: str) -> None:
        self.transcript.append(line)
        print(line)

    def load(self, pod: str, **changes: float) -> None:
        self.pods[pod].set_load(**changes)

    def dispatch(self, pod: str, rps: float) -> None:
        key = PODS[pod][0]
        epp = self.epp_a if key.namespace == "ns-a" else self.epp_b
        epp.set_dispatch_rate(namespace=key.namespace, pod=pod, model=key.model_id, rps=rps)

    def pools(self) -> list[InferencePoolInfo]:
        return [
            InferencePoolInfo(
                "ns-a", "llama", {}, endpoints=(EppEndpoint("ns-a", "epp-a", self.servers["epp-a"].address),)
            ),
            InferencePoolInfo(
                "ns-b", "qwen", {}, endpoints=(EppEndpoint("ns-b", "epp-b", self.servers["epp-b"].address),)
            ),
        ]


@pytest.fixture
async def fleet() -> AsyncIterator[Fleet]:
    pods = {
        name: VllmPod(key.model_id, legacy=legacy, num_gpu_blocks=BLOCKS, block_size=BLOCK_SIZE)
        for name, (key, _, legacy) in PODS.items()
    }
    epp_a = EppPod(pool="llama")  # GAIE names only
    epp_b = EppPod(pool="qwen", both=True)  # llm-d router names and the deprecated ones, equal values
    servers = {name: await MetricsServer(p.render).start() for name, p in pods.items()}
    servers["epp-a"] = await MetricsServer(epp_a.render).start()
    servers["epp-b"] = await MetricsServer(epp_b.render).start()
    yield Fleet(pods, epp_a, epp_b, servers, [])
    for server in servers.values():
        await server.stop()


@pytest.fixture
async def prometheus(fleet: Fleet, tmp_path: Path) -> AsyncIterator[PrometheusProcess]:
    jobs = {
        "vllm": [Target(fleet.servers[p].address, key.namespace, p) for p, (key, _, _) in PODS.items()],
        "epp": [
            Target(fleet.servers["epp-a"].address, "ns-a", "epp-a"),
            Target(fleet.servers["epp-b"].address, "ns-b", "epp-b"),
        ],
    }
    prom = PrometheusProcess(tmp_path / "prometheus", jobs)
    prom.start()
    try:
        yield prom
    finally:
        prom.stop()


def near(got: float | None, want: float, *, rel: float, abs_: float = 0.0) -> bool:
    return got is not None and math.isclose(got, want, rel_tol=rel, abs_tol=abs_)


def describe(c: Collection) -> list[str]:
    if not c.available:
        return [f"  available=False in {c.duration_s:.2f}s; {len(c.errors)} errors, first: {c.errors[0]}"]
    lines = [
        f"  available=True in {c.duration_s * 1000:.0f} ms, unavailable={sorted(map(str, c.unavailable_models))}, "
        f"dropped={dict(c.dropped_samples)}"
    ]
    for p in c.pods:
        lines.append(
            f"  pod {p.namespace}/{p.pod} [{p.variant}]: kv={p.kv_cache_usage} queue={p.queue_length} "
            f"running={p.running_requests} arrival_rps={_f(p.arrival_rate_rps)} ttft_s={_f(p.avg_ttft_s)} "
            f"itl_s={_f(p.avg_itl_s)} in={_f(p.avg_input_tokens)} out={_f(p.avg_output_tokens)} "
            f"hit={_f(p.prefix_cache_hit_rate)} blocks={p.num_gpu_blocks}x{p.block_size} tokens={p.tokens_in_use}"
        )
    for key, t in sorted(c.models.items()):
        lines.append(
            f"  model {key}: request_count={_f(t.request_count)} epp_queue_size={t.epp_queue_size} "
            f"epp_queue_bytes={t.epp_queue_bytes}"
        )
    return lines


def _f(value: float | None) -> str:
    return "None" if value is None else f"{value:.3g}"


Check = Callable[[Collection], list[str]]


async def until(
    fleet: Fleet, collector: PrometheusCollector, step: str, check: Check, *, timeout_s: float
) -> Collection:
    """Collect every 0.5 s until `check` reports no mismatch; fail with the last ones after `timeout_s`."""
    started = time.monotonic()
    while True:
        got = await collector.collect(MODELS, POD_VARIANTS)
        problems = check(got)
        if not problems:
            fleet.say(f"[{step}] matched after {time.monotonic() - started:.1f}s:")
            for line in describe(got):
                fleet.say(line)
            return got
        if time.monotonic() - started > timeout_s:
            pytest.fail(f"[{step}] still wrong after {timeout_s}s: {problems}\n" + "\n".join(describe(got)))
        await asyncio.sleep(0.5)


def expect(
    *,
    kv: dict[str, float],
    queue: dict[str, float],
    arrival: dict[str, float],
    counts: dict[ModelKey, float | None] | None = None,
    epp: dict[ModelKey, float | None] | None = None,
    count_rel: float = 0.3,
) -> Check:
    def check(c: Collection) -> list[str]:
        if not c.available or c.unavailable_models:
            return [f"available={c.available} unavailable={sorted(map(str, c.unavailable_models))} {c.errors[:1]}"]
        pods = {p.pod: p for p in c.pods}
        out: list[str] = []
        if set(pods) != {p for _, p in POD_VARIANTS}:
            out.append(f"pods {sorted(pods)}")
            return out
        for name, want in kv.items():
            if not near(pods[name].kv_cache_usage, want, rel=1e-9):
                out.append(f"{name} kv {pods[name].kv_cache_usage} != {want}")
        for name, want in queue.items():
            if pods[name].queue_length != want:
                out.append(f"{name} queue {pods[name].queue_length} != {want}")
        for name, want in arrival.items():
            if not near(pods[name].arrival_rate_rps, want, rel=0.25, abs_=0.1):
                out.append(f"{name} arrival {pods[name].arrival_rate_rps} !~ {want}")
        for key, want_count in (counts or {}).items():
            got_count = c.models[key].request_count
            if (want_count is None) != (got_count is None) or (
                want_count is not None and not near(got_count, want_count, rel=count_rel, abs_=0.5)
            ):
                out.append(f"{key} request_count {got_count} !~ {want_count}")
        for key, want_queue in (epp or {}).items():
            if c.models[key].epp_queue_size != want_queue:
                out.append(f"{key} epp_queue_size {c.models[key].epp_queue_size} != {want_queue}")
        return out

    return check


def set_step(fleet: Fleet, loads: dict[str, dict[str, float]]) -> None:
    for pod, load in loads.items():
        rps = load.get("success_rps")
        fleet.load(pod, **load)
        if rps is not None and pod != "stray-0":
            fleet.dispatch(pod, rps)


async def test_collector_tracks_emulated_load_through_real_prometheus(
    fleet: Fleet, prometheus: PrometheusProcess
) -> None:
    t0 = time.monotonic()
    ready_s = await prometheus.wait_ready()
    fleet.say(f"prometheus {prometheus.url} ready in {ready_s:.2f}s (scrape_interval 1s, windows {WINDOWS})")
    collector = PrometheusCollector(prometheus.url, timeout_s=1.0, windows=WINDOWS)
    try:
        await _scenario(fleet, prometheus, collector)
    finally:
        collector.close()
        fleet.say(f"scenario took {time.monotonic() - t0:.1f}s")


async def _scenario(fleet: Fleet, prometheus: PrometheusProcess, collector: PrometheusCollector) -> None:
    # ---- A: low load -------------------------------------------------------------------------------------
    low = {
        "llama-a100-0": {"kv_cache_usage": 0.20, "waiting": 0, "running": 4, "success_rps": 2},
        "llama-a100-1": {"kv_cache_usage": 0.30, "waiting": 1, "running": 6, "success_rps": 2},
        "llama-l4-0": {"kv_cache_usage": 0.10, "waiting": 0, "running": 2, "success_rps": 1},
        "stray-0": {"kv_cache_usage": 0.50, "waiting": 9, "running": 9, "success_rps": 1},
        "qwen-h100-0": {"kv_cache_usage": 0.15, "waiting": 0, "running": 3, "success_rps": 1},
        "idle-0": {"kv_cache_usage": 0.0, "waiting": 0, "running": 0, "success_rps": 0},
    }
    set_step(fleet, low)
    fleet.epp_a.set_queue(LLAMA.model_id, 0)
    fleet.epp_b.set_queue(QWEN.model_id, 0)
    a = await until(
        fleet,
        collector,
        "A low load",
        expect(
            kv={"llama-a100-0": 0.2, "llama-a100-1": 0.3, "llama-l4-0": 0.1, "qwen-h100-0": 0.15, "idle-0": 0.0},
            queue={"llama-a100-0": 0, "llama-a100-1": 1, "llama-l4-0": 0, "qwen-h100-0": 0},
            arrival={"llama-a100-0": 2, "llama-a100-1": 2, "llama-l4-0": 1, "qwen-h100-0": 1},
            # the stray pod has no VA, but its requests are the model's: counted (2 + 2 + 1 + 1) x 6 s
            counts={LLAMA: 6 * RETENTION_S, QWEN: 1 * RETENTION_S, IDLE: 0.0, NO_PODS: None},
            epp={LLAMA: 0, QWEN: 0, IDLE: None, NO_PODS: None},
        ),
        timeout_s=25,
    )
    scraped = await collector.query('up{job=~"vllm|epp"}')
    fleet.say(
        "prometheus scraped: "
        + ", ".join(
            f"{s.labels['job']}:{s.labels['namespace']}/{s.labels['pod']}=up{s.value:g}"
            for s in sorted(scraped, key=lambda s: s.labels["pod"])
        )
    )
    assert len(scraped) == len(PODS) + 2
    assert all(s.value == 1 for s in scraped)
    pods = {p.pod: p for p in a.pods}
    llama0 = pods["llama-a100-0"]
    assert llama0.num_gpu_blocks == BLOCKS
    assert llama0.block_size == BLOCK_SIZE
    assert llama0.tokens_in_use == round(0.2 * BLOCKS * BLOCK_SIZE)
    assert near(llama0.avg_input_tokens, 200, rel=1e-6)
    assert near(llama0.avg_output_tokens, 50, rel=1e-6)
    assert near(llama0.avg_ttft_s, 0.1, rel=1e-6)
    assert near(llama0.avg_itl_s, 0.02, rel=1e-6)
    assert near(llama0.prefix_cache_hit_rate, 0.25, rel=1e-6)
    legacy = pods["llama-l4-0"]  # deprecated names, served through the `or` fall-backs
    assert near(legacy.avg_itl_s, 0.02, rel=1e-6)
    assert near(legacy.prefix_cache_hit_rate, 0.25, rel=1e-6)
    assert pods["idle-0"].avg_ttft_s is None  # 0/0 over the window: NaN, dropped, never 0
    assert a.dropped_samples.get("unknown-pod", 0) >= 1  # stray-0
    assert a.dropped_samples.get("nan", 0) >= 1  # idle-0's averages

    # ---- B: high load ------------------------------------------------------------------------------------
    high = {
        "llama-a100-0": {"kv_cache_usage": 0.90, "waiting": 6, "running": 40, "success_rps": 6},
        "llama-a100-1": {"kv_cache_usage": 0.85, "waiting": 8, "running": 38, "success_rps": 6},
        "llama-l4-0": {"kv_cache_usage": 0.95, "waiting": 3, "running": 12, "success_rps": 3},
        "qwen-h100-0": {"kv_cache_usage": 0.70, "waiting": 2, "running": 20, "success_rps": 4},
    }
    set_step(fleet, high)
    fleet.epp_a.set_queue(LLAMA.model_id, 5, 5000)
    fleet.epp_a.set_queue(LLAMA.model_id, 2, 2000, targeted=False)  # model_name only: counted too
    fleet.epp_b.set_queue(QWEN.model_id, 3, 3000, requested_model="qwen")  # both families: counted once
    b = await until(
        fleet,
        collector,
        "B high load",
        expect(
            kv={"llama-a100-0": 0.9, "llama-a100-1": 0.85, "llama-l4-0": 0.95, "qwen-h100-0": 0.7},
            queue={"llama-a100-0": 6, "llama-a100-1": 8, "llama-l4-0": 3, "qwen-h100-0": 2},
            arrival={"llama-a100-0": 6, "llama-a100-1": 6, "llama-l4-0": 3, "qwen-h100-0": 4},
            counts={LLAMA: 16 * RETENTION_S, QWEN: 4 * RETENTION_S},
            epp={LLAMA: 7, QWEN: 3},
            count_rel=0.35,
        ),
        timeout_s=12,
    )
    assert b.models[QWEN].epp_queue_bytes == 3000
    direct = await EppScraperCheck.run(fleet)
    fleet.say(f"[B] direct EPP scrape (no Prometheus): {direct}")
    assert direct == {("ns-a", LLAMA.model_id): 7, ("ns-b", QWEN.model_id): 3}

    # ---- C: load goes down -------------------------------------------------------------------------------
    down = {
        "llama-a100-0": {"kv_cache_usage": 0.05, "waiting": 0, "running": 1, "success_rps": 0.5},
        "llama-a100-1": {"kv_cache_usage": 0.05, "waiting": 0, "running": 1, "success_rps": 0.5},
        "llama-l4-0": {"kv_cache_usage": 0.0, "waiting": 0, "running": 0, "success_rps": 0},
        "qwen-h100-0": {"kv_cache_usage": 0.10, "waiting": 0, "running": 2, "success_rps": 1},
    }
    set_step(fleet, down)
    fleet.epp_a.set_queue(LLAMA.model_id, 0)
    fleet.epp_a.set_queue(LLAMA.model_id, 0, targeted=False)
    fleet.epp_b.set_queue(QWEN.model_id, 0, requested_model="qwen")
    await until(
        fleet,
        collector,
        "C load down",
        expect(
            kv={"llama-a100-0": 0.05, "llama-a100-1": 0.05, "llama-l4-0": 0.0, "qwen-h100-0": 0.1},
            queue={"llama-a100-0": 0, "llama-a100-1": 0, "llama-l4-0": 0, "qwen-h100-0": 0},
            arrival={"llama-a100-0": 0.5, "llama-a100-1": 0.5, "llama-l4-0": 0, "qwen-h100-0": 1},
            epp={LLAMA: 0, QWEN: 0},
        ),
        timeout_s=10,
    )

    # ---- D: Prometheus hangs (SIGSTOP): every query times out, the cycle is bounded ----------------------
    prometheus.freeze()
    try:
        frozen = await collector.collect(MODELS, POD_VARIANTS)
    finally:
        prometheus.thaw()
    fleet.say("[D] prometheus frozen (SIGSTOP):")
    for line in describe(frozen):
        fleet.say(line)
    assert not frozen.available
    assert frozen.unavailable_models == {m.key for m in MODELS}
    assert frozen.duration_s < 2 * (collector.timeout_s + 2.5)  # two waves of 8 concurrent queries at most
    await until(fleet, collector, "D thawed (SIGCONT)", lambda c: [] if c.available else ["unavailable"], timeout_s=10)

    # ---- E: Prometheus crashes (SIGKILL): unavailable at once, nothing raises ----------------------------
    prometheus.kill()
    killed = await collector.collect(MODELS, POD_VARIANTS)
    fleet.say("[E] prometheus killed (SIGKILL):")
    for line in describe(killed):
        fleet.say(line)
    assert not killed.available
    assert killed.unavailable_models == {m.key for m in MODELS}
    assert killed.pods == ()
    assert all(t.request_count is None for t in killed.models.values())
    assert all("Connection refused" in e for e in killed.errors), killed.errors
    assert killed.duration_s < 1.0

    # the world moves on while Prometheus is down
    fleet.load("llama-a100-0", kv_cache_usage=0.6, waiting=4)

    # ---- F: restart on the same port and TSDB: recovery ----------------------------------------------------
    prometheus.start()
    restart_s = await prometheus.wait_ready()
    fleet.say(f"[F] prometheus restarted, ready in {restart_s:.2f}s")
    kv_back = expect(
        kv={"llama-a100-0": 0.6, "llama-a100-1": 0.05}, queue={"llama-a100-0": 4, "llama-a100-1": 0}, arrival={}
    )
    await until(fleet, collector, "F recovered: gauges (first scrape after restart)", kv_back, timeout_s=20)

    def rates_back(c: Collection) -> list[str]:
        # Samples in the killed Prometheus' unflushed WAL page are lost: rates and increases need two
        # scrapes after the restart, and are None (never 0) until then.
        problems = kv_back(c) or expect(kv={}, queue={}, arrival={"llama-a100-0": 0.5, "qwen-h100-0": 1})(c)
        return problems + [f"{k} request_count None" for k in (LLAMA, QWEN) if c.models[k].request_count is None]

    await until(fleet, collector, "F recovered: rates and request counts", rates_back, timeout_s=10)


class EppScraperCheck:
    @staticmethod
    async def run(fleet: Fleet) -> dict[tuple[str, str], float]:
        async with EppScraper(timeout_s=2) as scraper:
            return await scraper.queue_sizes(fleet.pools())


async def test_every_query_parses_and_escaping_matches_exactly(tmp_path: Path) -> None:
    """Model ids with regex metacharacters, quotes and backslashes match themselves only, through real PromQL,
    and every query the builder makes (also the huge-fleet form without a model matcher) is valid."""
    names = {"dot": "org/a.b", "decoy-dot": "org/axb", "plus": "c+d", "decoy-plus": "c++d", "quote": 'q"u\\o'}
    pods = {pod: VllmPod(model) for pod, model in names.items()}
    for i, p in enumerate(pods.values()):
        p.set_load(kv_cache_usage=0.1 * (i + 1))
    async with _scraping(tmp_path, pods) as prom:
        wanted = [ModelQuery(ModelKey("ns", names[p])) for p in ("dot", "plus", "quote")]
        huge = [ModelQuery(ModelKey(f"ns-{i % 5}", f"org/model-{i:05d}")) for i in range(2000)]
        async with PrometheusCollector(prom.url, timeout_s=5, windows=WINDOWS) as collector:
            for query in (*build_queries(wanted), *build_queries(huge)):
                await collector.query(query.promql)  # raises QueryError on a 400 (bad PromQL)
            got, seen = await _every_kv(collector, wanted, pods, expected=3)
    assert seen == {"dot": 0.1, "plus": 0.30000000000000004, "quote": 0.5}
    assert got.dropped_samples.get("unknown-model", 0) == 0  # the decoys never matched the regex


@pytest.mark.parametrize("compression", [False, True], ids=["plain", "gzip"])
async def test_answers_come_as_the_collector_asks_and_read_the_same(tmp_path: Path, compression: bool) -> None:
    """A real Prometheus gzips an answer exactly when the client accepts gzip (`--prometheus-compression` relies on
    it, and its default asks for plain JSON), and the collector reads either form into the same values."""
    pods = {f"p{i}": VllmPod("org/m") for i in range(3)}
    for i, p in enumerate(pods.values()):
        p.set_load(kv_cache_usage=0.25 * (i + 1))
    async with _scraping(tmp_path, pods) as prom:
        model = [ModelQuery(ModelKey("ns", "org/m"))]
        promql = build_queries(model, windows=WINDOWS)[0].promql
        answer = await asyncio.to_thread(
            requests.get,
            f"{prom.url}/api/v1/query",
            params={"query": promql},
            headers={"Accept-Encoding": ACCEPT_ENCODING[compression]},
            stream=True,
            timeout=5,
        )
        encoding = answer.headers.get("Content-Encoding")
        answer.close()
        async with PrometheusCollector(prom.url, timeout_s=5, windows=WINDOWS, compression=compression) as collector:
            got, seen = await _every_kv(collector, model, pods, expected=3)
    assert encoding == ("gzip" if compression else None)
    assert seen == {"p0": 0.25, "p1": 0.5, "p2": 0.75}
    assert not got.errors


@contextlib.asynccontextmanager
async def _scraping(tmp_path: Path, pods: dict[str, VllmPod]) -> AsyncIterator[PrometheusProcess]:
    """A real Prometheus scraping each emulated pod (namespace "ns", the pod's name), ready; stopped after, with the
    pods' servers."""
    servers = {pod: await MetricsServer(p.render).start() for pod, p in pods.items()}
    prom = PrometheusProcess(tmp_path / "prom", {"vllm": [Target(s.address, "ns", pod) for pod, s in servers.items()]})
    prom.start()
    try:
        await prom.wait_ready()
        yield prom
    finally:
        prom.stop()
        for s in servers.values():
            await s.stop()


async def _every_kv(
    collector: PrometheusCollector, models: list[ModelQuery], pods: dict[str, VllmPod], *, expected: int
) -> tuple[Collection, dict[str, float | None]]:
    """Collections until `expected` pods show their KV usage (10 s at most), and the last one's usage by pod. A pod
    shows up with its first scrape in any query's answer; each query reads Prometheus at its own instant, so one
    whose answer came before that scrape still lacks it."""
    deadline = time.monotonic() + 10
    while True:
        got = await collector.collect(models, {("ns", pod): pod for pod in pods})
        seen = {p.pod: p.kv_cache_usage for p in got.pods}
        if (len(seen) == expected and None not in seen.values()) or time.monotonic() > deadline:
            return got, seen
        await asyncio.sleep(0.3)
