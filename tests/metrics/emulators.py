"""Emulated vLLM pods, EPP pods and a fake Prometheus HTTP API, on 127.0.0.1, for the metrics tests.

* `VllmPod` renders a vLLM pod's `/metrics` with `prometheus_client` (its own registry; real metric names,
  `model_name` and `engine` labels). Load is set with `set_load`; counters and histograms advance lazily at
  each scrape by rate × elapsed time, so no background task runs and a scrape always sees a consistent
  state. `legacy=True` exposes the deprecated names (`vllm:gpu_cache_usage_perc`,
  `vllm:time_per_output_token_seconds`, counters without `_total`, no per-request TPOT histogram) to exercise
  the `or` fall-backs; `also_deprecated_tpot=True` adds `vllm:time_per_output_token_seconds` beside the
  current names, as vLLM 0.11 does. Latency histograms observe `ttft_s` / `itl_s` / `tpot_s` of the load, or
  cycle through the values given to `set_latencies` (one per finished request), and `observed` keeps every
  value each histogram was given, to compare with what Prometheus answers.
  In a real cluster `namespace` and `pod` are target labels added by Prometheus' service discovery; the
  generated scrape config adds them with `static_configs` labels, so the pod never emits them itself.
* `EppPod` renders an EPP's flow-control queue gauges and scheduler-attempt counters, with the GAIE names
  (`inference_extension_*`, `pod_name`) or the llm-d router names (`llm_d_epp_*`, `endpoint_name`).
* `MetricsServer` serves any renderer on an ephemeral port, and can be told to fail, stall or require a
  bearer token.
* `FakePrometheus` answers `/api/v1/query` from a table of canned answers keyed by the exact PromQL string.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric, UnknownMetricFamily

from adapter.domain.latency import VLLM_ITL_BUCKETS_S, VLLM_TTFT_BUCKETS_S
from adapter.sim.replica import ReplicaSim

TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
TTFT_BUCKETS = VLLM_TTFT_BUCKETS_S
ITL_BUCKETS = VLLM_ITL_BUCKETS_S


# ------------------------------------------------------------------------------------------ vLLM pod


@dataclass
class PodLoad:
    """What a vLLM pod reports. Rates are per second; the counters integrate them."""

    kv_cache_usage: float = 0.0
    waiting: float = 0.0
    running: float = 0.0
    success_rps: float = 0.0
    input_tokens: float = 200.0
    output_tokens: float = 50.0
    ttft_s: float = 0.1
    itl_s: float = 0.02
    tpot_s: float = 0.02
    """Per-request time per output token (`vllm:request_time_per_output_token_seconds`)."""
    prefix_hit_ratio: float = 0.25


class _BareCounters:
    """Counters without `_total` (some exporters, e.g. llm-d-inference-sim): emitted as untyped series."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.values: dict[str, float] = {}

    def collect(self) -> Iterable[Metric]:
        for name, value in sorted(self.values.items()):
            family = UnknownMetricFamily(name, f"{name} (bare counter)", labels=["model_name", "engine"])
            family.add_metric([self.model_name, "0"], value)
            yield family


class VllmPod:
    """One emulated vLLM pod. `render()` is what `/metrics` returns."""

    def __init__(
        self,
        model_name: str,
        *,
        legacy: bool = False,
        also_deprecated_tpot: bool = False,
        deprecated_tpot_buckets: tuple[float, ...] = ITL_BUCKETS,
        num_gpu_blocks: int = 1024,
        block_size: int = 16,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.model_name = model_name
        self.legacy = legacy
        self._cycles: dict[str, tuple[float, ...]] = {}
        self.observed: dict[str, list[float]] = {"ttft": [], "itl": [], "tpot": []}
        """Every value each latency histogram observed, in order."""
        self.load = PodLoad()
        self._clock = clock
        self._last_s = clock()
        self._carry = 0.0
        self.completed = 0
        reg = self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        kv_name = "vllm:gpu_cache_usage_perc" if legacy else "vllm:kv_cache_usage_perc"
        self._kv = Gauge(kv_name, "KV-cache usage. 1 means 100 percent usage.", labels, registry=reg)
        self._waiting = Gauge("vllm:num_requests_waiting", "Requests waiting.", labels, registry=reg)
        self._running = Gauge("vllm:num_requests_running", "Requests running.", labels, registry=reg)
        info = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            [*labels, "block_size", "num_gpu_blocks", "cache_dtype", "enable_prefix_caching"],
            registry=reg,
        )
        info.labels(model_name, "0", str(block_size), str(num_gpu_blocks), "auto", "True").set(1)
        self._prompt = Histogram(
            "vllm:request_prompt_tokens", "Prompt tokens.", labels, buckets=TOKEN_BUCKETS, registry=reg
        )
        self._gen = Histogram(
            "vllm:request_generation_tokens", "Generation tokens.", labels, buckets=TOKEN_BUCKETS, registry=reg
        )
        self._ttft = Histogram("vllm:time_to_first_token_seconds", "TTFT.", labels, buckets=TTFT_BUCKETS, registry=reg)
        itl_name = "vllm:time_per_output_token_seconds" if legacy else "vllm:inter_token_latency_seconds"
        self._itl = Histogram(itl_name, "ITL.", labels, buckets=ITL_BUCKETS, registry=reg)
        self._latency = [self._ttft]
        self._tpot: Histogram | None = None
        self._itl_twin: Histogram | None = None
        if not legacy:
            self._tpot = Histogram(
                "vllm:request_time_per_output_token_seconds",
                "TPOT per request.",
                labels,
                buckets=ITL_BUCKETS,
                registry=reg,
            )
            self._latency.append(self._tpot)
            if also_deprecated_tpot:
                self._itl_twin = Histogram(
                    "vllm:time_per_output_token_seconds",
                    "ITL (deprecated name).",
                    labels,
                    buckets=deprecated_tpot_buckets,
                    registry=reg,
                )
                self._latency.append(self._itl_twin)
        self._bare: _BareCounters | None = None
        if legacy:
            self._bare = _BareCounters(model_name)
            self._bare.values.update(
                dict.fromkeys(("vllm:request_success", "vllm:prefix_cache_hits", "vllm:prefix_cache_queries"), 0.0)
            )
            reg.register(self._bare)
        else:
            self._success = Counter(
                "vllm:request_success", "Finished requests.", [*labels, "finished_reason"], registry=reg
            )
            self._hits = Counter("vllm:prefix_cache_hits", "Prefix cache hit tokens.", labels, registry=reg)
            self._queries = Counter("vllm:prefix_cache_queries", "Prefix cache queried tokens.", labels, registry=reg)
            for reason in ("stop", "length", "abort"):  # vLLM creates every child at start-up: series exist at 0
                self._success.labels(model_name, "0", reason)
            self._hits.labels(model_name, "0")
            self._queries.labels(model_name, "0")
        for histogram in (self._prompt, self._gen, self._itl, *self._latency):
            histogram.labels(model_name, "0")

    def set_latencies(
        self, *, ttft_s: Iterable[float] = (), itl_s: Iterable[float] = (), tpot_s: Iterable[float] = ()
    ) -> None:
        """From now on the n-th finished request observes `values[n % len(values)]` (empty: the load's value)."""
        self._advance()
        for name, values in (("ttft", ttft_s), ("itl", itl_s), ("tpot", tpot_s)):
            self._cycles[name] = tuple(float(v) for v in values)

    def _latency_value(self, name: str, index: int, default: float) -> float:
        values = self._cycles.get(name) or (default,)
        value = values[index % len(values)]
        self.observed[name].append(value)
        return value

    def set_load(self, **changes: float) -> None:
        """Advance the counters to now at the old rates, then switch to the new load."""
        self._advance()
        for name, value in changes.items():
            if not hasattr(self.load, name):
                raise AttributeError(f"PodLoad has no field {name!r}")
            setattr(self.load, name, float(value))

    def _advance(self) -> None:
        now = self._clock()
        dt, self._last_s = max(0.0, now - self._last_s), now
        self._carry += self.load.success_rps * dt
        done = math.floor(self._carry)
        self._carry -= done
        if done <= 0:
            return
        self.completed += done
        load, lab = self.load, (self.model_name, "0")
        for i in range(self.completed - done, self.completed):
            self._prompt.labels(*lab).observe(load.input_tokens)
            self._gen.labels(*lab).observe(load.output_tokens)
            self._ttft.labels(*lab).observe(self._latency_value("ttft", i, load.ttft_s))
            itl = self._latency_value("itl", i, load.itl_s)
            self._itl.labels(*lab).observe(itl)
            if self._itl_twin is not None:
                self._itl_twin.labels(*lab).observe(itl)
            if self._tpot is not None:
                self._tpot.labels(*lab).observe(self._latency_value("tpot", i, load.tpot_s))
        queried = done * load.input_tokens
        if self._bare is not None:
            values = self._bare.values
            values["vllm:request_success"] = values.get("vllm:request_success", 0.0) + done
            values["vllm:prefix_cache_hits"] = (
                values.get("vllm:prefix_cache_hits", 0.0) + queried * load.prefix_hit_ratio
            )
            values["vllm:prefix_cache_queries"] = values.get("vllm:prefix_cache_queries", 0.0) + queried
        else:
            self._success.labels(*lab, "stop").inc(done)
            self._hits.labels(*lab).inc(queried * load.prefix_hit_ratio)
            self._queries.labels(*lab).inc(queried)

    def render(self) -> bytes:
        self._advance()
        lab = (self.model_name, "0")
        self._kv.labels(*lab).set(self.load.kv_cache_usage)
        self._waiting.labels(*lab).set(self.load.waiting)
        self._running.labels(*lab).set(self.load.running)
        return generate_latest(self.registry)


class SimDrivenPod(VllmPod):
    """A `VllmPod` whose gauges come from an `adapter.sim.replica.ReplicaSim` advanced to wall-clock time.

    Feed requests with `sim.enqueue(...)`; each scrape advances the replica and reports its KV usage, queue and
    running batch (counters still follow `success_rps`, which the test sets).
    """

    def __init__(self, model_name: str, sim: ReplicaSim, **kwargs: Any) -> None:
        super().__init__(model_name, **kwargs)
        self.sim = sim
        self._origin = self._clock() - sim.clock_s

    def render(self) -> bytes:
        self.sim.advance(self._clock() - self._origin)
        self.load.kv_cache_usage = self.sim.kv_cache_usage
        self.load.waiting = float(self.sim.queue_length)
        self.load.running = float(self.sim.running_requests)
        return super().render()


# ------------------------------------------------------------------------------------------ EPP pod


class EppPod:
    """One emulated EPP pod: flow-control queue gauges and scheduler-attempt counters.

    `new_names=True` exposes the llm-d router family (`llm_d_epp_*`, `endpoint_name`); `both=True` exposes both
    families with equal values, as the router does while the GAIE names are deprecated.
    """

    def __init__(
        self, *, pool: str, new_names: bool = False, both: bool = False, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.pool = pool
        self._clock = clock
        self._last_s = clock()
        self._rates: dict[tuple[str, str, str], float] = {}
        families = (
            ("llm_d_epp", "inference_extension") if both else ("llm_d_epp",) if new_names else ("inference_extension",)
        )
        reg = self.registry = CollectorRegistry()
        queue_labels = ["fairness_id", "priority", "inference_pool", "model_name", "target_model_name"]
        self._size = [
            Gauge(f"{f}_flow_control_queue_size", "Requests in flow control.", queue_labels, registry=reg)
            for f in families
        ]
        self._bytes = [
            Gauge(f"{f}_flow_control_queue_bytes", "Bytes in flow control.", queue_labels, registry=reg)
            for f in families
        ]
        self._attempts = [
            Counter(
                f"{f}_scheduler_attempts",
                "Scheduling attempts.",
                [
                    "status",
                    "target_model_name",
                    "endpoint_name" if f == "llm_d_epp" else "pod_name",
                    "namespace",
                    "port",
                ],
                registry=reg,
            )
            for f in families
        ]

    def set_queue(
        self,
        model: str,
        size: float,
        queue_bytes: float = 0.0,
        *,
        targeted: bool = True,
        fairness_id: str = "default",
        priority: str = "0",
        requested_model: str = "",
    ) -> None:
        """Queue gauges for `model`. `targeted=False` puts the model in `model_name` with an empty target
        (no rewrite); otherwise the target is `model` and `model_name` is `requested_model` (an alias)."""
        if targeted:
            labels = (fairness_id, priority, self.pool, requested_model or model, model)
        else:
            labels = (fairness_id, priority, self.pool, model, "")
        for gauge in self._size:
            gauge.labels(*labels).set(size)
        for gauge in self._bytes:
            gauge.labels(*labels).set(queue_bytes)

    def set_dispatch_rate(self, *, namespace: str, pod: str, model: str, rps: float) -> None:
        self._advance()
        self._rates[(namespace, pod, model)] = rps

    def _advance(self) -> None:
        now = self._clock()
        dt, self._last_s = max(0.0, now - self._last_s), now
        for (namespace, pod, model), rps in self._rates.items():
            for counter in self._attempts:
                counter.labels("success", model, pod, namespace, "8000").inc(rps * dt)

    def render(self) -> bytes:
        self._advance()
        return generate_latest(self.registry)


# ------------------------------------------------------------------------------------------ HTTP


class MetricsServer:
    """Serves `render()` at `/metrics` on 127.0.0.1:<ephemeral>. `status` forces an error answer, `delay_s`
    stalls each answer, `required_token` demands `Authorization: Bearer <token>` (401 otherwise)."""

    def __init__(self, render: Callable[[], bytes], *, required_token: str | None = None) -> None:
        self.render = render
        self.required_token = required_token
        self.status: int | None = None
        self.delay_s = 0.0
        self.body_override: bytes | None = None
        self.requests = 0
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        if self.required_token is not None and request.headers.get("Authorization") != f"Bearer {self.required_token}":
            return web.Response(status=401, text="unauthorized")
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.status is not None:
            return web.Response(status=self.status, text="emulated failure")
        body = self.body_override if self.body_override is not None else self.render()
        return web.Response(body=body, content_type="text/plain", charset="utf-8")

    async def start(self) -> MetricsServer:
        app = web.Application()
        app.router.add_get("/metrics", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def vector(*items: tuple[Mapping[str, str], float | str]) -> list[dict[str, Any]]:
    """`data.result` of an instant vector: `vector(({"pod": "p"}, 0.5), ({"pod": "q"}, "NaN"))`."""
    return [{"metric": dict(labels), "value": [1_700_000_000.0, str(value)]} for labels, value in items]


@dataclass
class FakePrometheus:
    """`/api/v1/query` on 127.0.0.1:<ephemeral>. `answers[promql]` is a result list (200) or an int status
    (that error, with Prometheus' error body); unknown queries get an empty vector. `raw[promql]` sends bytes
    as they are (malformed answers); `broken[promql]` breaks the answer on the wire (`_broken`)."""

    answers: dict[str, list[dict[str, Any]] | int] = field(default_factory=dict)
    raw: dict[str, bytes] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)
    stall_s: float = 1.0
    """How long a "stall" answer stops mid-body before it sends the rest (bounded, so `stop` never waits long)."""
    delay_s: float = 0.0
    seen: list[str] = field(default_factory=list)
    authorization: list[str | None] = field(default_factory=list)
    accept_encoding: list[str | None] = field(default_factory=list)
    """Each request's Accept-Encoding; an answer is gzipped when it names gzip, as Prometheus' own handler does."""
    in_flight: int = 0
    max_in_flight: int = 0
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        params = dict(request.query)
        if request.method == "POST":
            params.update({k: str(v) for k, v in (await request.post()).items()})
        promql = params.get("query", "")
        self.seen.append(promql)
        self.authorization.append(request.headers.get("Authorization"))
        self.accept_encoding.append(request.headers.get("Accept-Encoding"))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
        finally:
            self.in_flight -= 1
        if promql in self.broken:
            return await self._broken(request, self.broken[promql])
        if promql in self.raw:
            return web.Response(body=self.raw[promql], content_type="application/json")
        answer = self.answers.get(promql, [])
        if isinstance(answer, int):
            error = {"status": "error", "errorType": "execution", "error": f"emulated {answer}"}
            return web.Response(status=answer, text=json.dumps(error), content_type="application/json")
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": answer}}).encode()
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            return web.Response(
                body=gzip.compress(body), headers={"Content-Encoding": "gzip"}, content_type="application/json"
            )
        return web.Response(body=body, content_type="application/json")

    async def _broken(self, request: web.Request, how: str) -> web.StreamResponse:
        """Headers and the first bytes of an answer, then: "stall" (nothing for `stall_s`), "cut" (the connection
        closed short of its Content-Length), or "bad-gzip" (a body that claims gzip and is not)."""
        if how == "bad-gzip":
            return web.Response(
                body=b"not gzip at all", headers={"Content-Encoding": "gzip"}, content_type="application/json"
            )
        if how not in ("stall", "cut"):
            raise ValueError(f"FakePrometheus.broken: unknown {how!r}")
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
        response = web.StreamResponse(headers={"Content-Type": "application/json", "Content-Length": str(len(body))})
        await response.prepare(request)
        await response.write(body[:10])
        if how == "cut":
            assert request.transport is not None
            request.transport.close()
            return response
        await asyncio.sleep(self.stall_s)
        with contextlib.suppress(ConnectionError):  # the client gave up meanwhile
            await response.write(body[10:])
        return response

    async def start(self) -> FakePrometheus:
        app = web.Application()
        app.router.add_route("*", "/api/v1/query", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
