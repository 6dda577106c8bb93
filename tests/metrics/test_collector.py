"""PrometheusCollector against a fake `/api/v1/query` on loopback: the real client and parse path, canned answers."""

from __future__ import annotations

import asyncio
import math
import re
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
import requests

from adapter.domain.cluster import ModelQuery
from adapter.domain.errors import ConfigError, PrometheusUnavailable, QueryError
from adapter.domain.ids import ModelKey
from adapter.domain.snapshot import ModelTraffic
from adapter.metrics.answers import Digest, PodIndex, assemble, parse_vector
from adapter.metrics.collector import BODIES_HELD, PrometheusCollector, VectorSample
from adapter.metrics.queries import Query, QueryName, build_queries
from tests.metrics import V1_QUERIES
from tests.ports import free_port

from .emulators import FakePrometheus, vector

LLAMA = ModelKey("ns-a", "meta/llama-3.1-8b")
QWEN = ModelKey("ns-b", "Qwen/Qwen2.5-7B")
MODELS = [ModelQuery(LLAMA), ModelQuery(QWEN, retention_s=300)]
POD_VARIANTS = {
    ("ns-a", "llama-0"): "llama-a100",
    ("ns-a", "llama-1"): "llama-a100",
    ("ns-a", "llama-l4-0"): "llama-l4",
    ("ns-b", "qwen-0"): "qwen-h100",
}


def promql(name: QueryName, models: list[ModelQuery] = MODELS, *, retention_s: float | None = None) -> str:
    return next(b.promql for b in build_queries(models) if b.name is name and b.retention_s == retention_s)


def pod(ns: str, name: str, model: str, **extra: str) -> dict[str, str]:
    return {"namespace": ns, "model_name": model, "pod": name, **extra}


def healthy_answers() -> dict[str, list[dict[str, object]] | int]:
    llama, qwen = LLAMA.model_id, QWEN.model_id
    return {
        promql(QueryName.KV_CACHE_USAGE): vector(
            (pod("ns-a", "llama-0", llama), 0.5),
            (pod("ns-a", "llama-1", llama), 0.25),
            (pod("ns-a", "llama-l4-0", llama), 0.75),
            (pod("ns-b", "qwen-0", qwen), 0.125),
        ),
        promql(QueryName.QUEUE_LENGTH): vector(
            (pod("ns-a", "llama-0", llama), 3),
            (pod("ns-a", "llama-1", llama), 0),
            (pod("ns-a", "llama-l4-0", llama), 1),
            (pod("ns-b", "qwen-0", qwen), 0),
        ),
        promql(QueryName.RUNNING_REQUESTS): vector((pod("ns-a", "llama-0", llama), 12)),
        promql(QueryName.CACHE_CONFIG_INFO): vector(
            (pod("ns-a", "llama-0", llama, num_gpu_blocks="1000", block_size="16"), 1),
            (pod("ns-b", "qwen-0", qwen, num_gpu_blocks="2048", block_size="32"), 1),
        ),
        promql(QueryName.AVG_INPUT_TOKENS): vector((pod("ns-a", "llama-0", llama), 512)),
        promql(QueryName.AVG_OUTPUT_TOKENS): vector((pod("ns-a", "llama-0", llama), 128)),
        promql(QueryName.PREFIX_CACHE_HIT_RATE): vector((pod("ns-a", "llama-0", llama), 0.4)),
        promql(QueryName.AVG_TTFT): vector((pod("ns-a", "llama-0", llama), 0.2)),
        promql(QueryName.AVG_ITL): vector((pod("ns-a", "llama-0", llama), 0.02)),
        promql(QueryName.DISPATCH_RATE): vector(
            ({"namespace": "ns-a", "pod_name": "llama-0", "wva_model_id": llama}, 4.5),
            ({"namespace": "ns-b", "pod_name": "qwen-0", "wva_model_id": qwen}, 1.5),
        ),
        promql(QueryName.EPP_QUEUE_SIZE): vector(({"namespace": "ns-a", "wva_model_id": llama}, 7)),
        promql(QueryName.EPP_QUEUE_BYTES): vector(({"namespace": "ns-a", "wva_model_id": llama}, 7000)),
        promql(QueryName.REQUEST_COUNT, retention_s=600): vector(({"namespace": "ns-a", "model_name": llama}, 42)),
        promql(QueryName.REQUEST_COUNT, retention_s=300): vector(({"namespace": "ns-b", "model_name": qwen}, 0)),
    }


@pytest.fixture
async def fake() -> AsyncIterator[FakePrometheus]:
    server = await FakePrometheus().start()
    yield server
    await server.stop()


@pytest.fixture
async def collector(fake: FakePrometheus) -> AsyncIterator[PrometheusCollector]:
    c = PrometheusCollector(fake.url, timeout_s=2)
    yield c
    c.close()


# ------------------------------------------------------------------------------------------ happy path


async def test_collect_joins_pods_to_variants_and_models(fake: FakePrometheus, collector: PrometheusCollector) -> None:
    fake.answers = healthy_answers()
    got = await collector.collect(MODELS, POD_VARIANTS)

    assert got.available
    assert not got.unavailable_models
    assert not got.errors
    pods = {(p.namespace, p.pod): p for p in got.pods}
    assert sorted(pods) == sorted(POD_VARIANTS)
    p0 = pods[("ns-a", "llama-0")]
    assert p0.variant == "llama-a100"
    assert (p0.kv_cache_usage, p0.queue_length, p0.running_requests) == (0.5, 3, 12)
    assert (p0.num_gpu_blocks, p0.block_size, p0.tokens_in_use) == (1000, 16, 8000.0)
    assert (p0.avg_input_tokens, p0.avg_output_tokens, p0.prefix_cache_hit_rate) == (512, 128, 0.4)
    assert (p0.avg_ttft_s, p0.avg_itl_s, p0.arrival_rate_rps) == (0.2, 0.02, 4.5)
    p1 = pods[("ns-a", "llama-1")]
    assert (p1.kv_cache_usage, p1.queue_length, p1.running_requests, p1.tokens_in_use) == (0.25, 0, None, None)
    assert pods[("ns-b", "qwen-0")].tokens_in_use == round(0.125 * 2048 * 32)
    assert got.models == {
        LLAMA: ModelTraffic(LLAMA, request_count=42, epp_queue_size=7, epp_queue_bytes=7000),
        QWEN: ModelTraffic(QWEN, request_count=0.0),
    }
    assert got.dropped_samples == {}
    assert got.duration_s > 0


async def test_one_query_per_metric_per_cycle_not_per_model(
    fake: FakePrometheus, collector: PrometheusCollector
) -> None:
    many = [ModelQuery(ModelKey(f"ns-{i % 3}", f"model-{i}"), retention_s=600 if i % 2 else 300) for i in range(50)]
    got = await collector.collect(many, {})
    assert got.available
    assert len(fake.seen) == 14 + 2
    assert sorted(fake.seen) == sorted(b.promql for b in build_queries(many))


async def test_empty_model_list_sends_nothing(fake: FakePrometheus, collector: PrometheusCollector) -> None:
    got = await collector.collect([], POD_VARIANTS)
    assert got.available
    assert got.pods == ()
    assert dict(got.models) == {}
    assert fake.seen == []


async def test_request_count_is_none_when_the_query_returned_nothing(
    fake: FakePrometheus, collector: PrometheusCollector
) -> None:
    fake.answers = healthy_answers()
    fake.answers[promql(QueryName.REQUEST_COUNT, retention_s=300)] = []
    got = await collector.collect(MODELS, POD_VARIANTS)
    assert got.models[QWEN].request_count is None  # never read as "no requests"
    assert got.models[LLAMA].request_count == 42


# ------------------------------------------------------------------------------------------ bad samples


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        pytest.param("NaN", "nan", id="nan"),
        pytest.param("+Inf", "inf", id="plus-inf"),
        pytest.param("-Inf", "inf", id="minus-inf"),
        pytest.param("-0.5", "negative", id="negative"),
    ],
)
async def test_unusable_values_are_dropped_and_counted(
    fake: FakePrometheus, collector: PrometheusCollector, value: str, reason: str
) -> None:
    llama = LLAMA.model_id
    fake.answers = healthy_answers()
    fake.answers[promql(QueryName.KV_CACHE_USAGE)] = vector(
        (pod("ns-a", "llama-0", llama), value), (pod("ns-a", "llama-1", llama), 0.3)
    )
    fake.answers[promql(QueryName.AVG_TTFT)] = vector((pod("ns-a", "llama-0", llama), value))
    fake.answers[promql(QueryName.REQUEST_COUNT, retention_s=600)] = vector(
        ({"namespace": "ns-a", "model_name": llama}, value)
    )
    got = await collector.collect(MODELS, POD_VARIANTS)
    pods = {p.pod: p for p in got.pods}
    assert pods["llama-0"].kv_cache_usage is None
    assert pods["llama-0"].avg_ttft_s is None
    assert pods["llama-0"].queue_length == 3  # the pod is kept with its other metrics
    assert pods["llama-1"].kv_cache_usage == 0.3
    assert got.models[LLAMA].request_count is None
    assert got.dropped_samples == {reason: 3}
    assert got.available
    assert not got.unavailable_models


async def test_hit_rate_above_one_is_out_of_range(fake: FakePrometheus, collector: PrometheusCollector) -> None:
    fake.answers = healthy_answers()
    fake.answers[promql(QueryName.PREFIX_CACHE_HIT_RATE)] = vector((pod("ns-a", "llama-0", LLAMA.model_id), 1.5))
    got = await collector.collect(MODELS, POD_VARIANTS)
    assert next(p for p in got.pods if p.pod == "llama-0").prefix_cache_hit_rate is None
    assert got.dropped_samples == {"out-of-range": 1}


async def test_labels_pod_name_fallback_missing_unknown(fake: FakePrometheus, collector: PrometheusCollector) -> None:
    llama = LLAMA.model_id
    fake.answers = {
        promql(QueryName.KV_CACHE_USAGE): vector(
            ({"namespace": "ns-a", "model_name": llama, "pod_name": "llama-0"}, 0.5),  # `pod` absent: pod_name
            ({"namespace": "ns-a", "model_name": llama, "pod": "llama-1", "pod_name": "ignored"}, 0.6),  # pod wins
            ({"namespace": "ns-a", "model_name": llama}, 0.7),  # no pod label at all
            ({"namespace": "ns-a", "pod": "llama-0"}, 0.7),  # no model label
            (pod("ns-a", "deleted-pod", llama), 0.9),  # still in the 1m window, gone from the inventory
            (pod("ns-b", "qwen-0", llama), 0.9),  # cross-product match: ns-b does not serve llama
        ),
        promql(QueryName.DISPATCH_RATE): vector(
            ({"namespace": "ns-a", "pod": "epp-0", "wva_model_id": llama}, 1.0),  # `pod` is the EPP's own pod
        ),
        promql(QueryName.CACHE_CONFIG_INFO): vector(
            (pod("ns-a", "llama-0", llama, num_gpu_blocks="None", block_size="16"), 1),
        ),
    }
    got = await collector.collect(MODELS, POD_VARIANTS)
    assert {p.pod: p.kv_cache_usage for p in got.pods} == {"llama-0": 0.5, "llama-1": 0.6}
    assert got.dropped_samples == {"invalid-label": 1, "missing-label": 3, "unknown-model": 1, "unknown-pod": 1}


async def test_duplicate_series_per_pod_take_max_and_dispatch_sums(
    fake: FakePrometheus, collector: PrometheusCollector
) -> None:
    llama = LLAMA.model_id
    fake.answers = {
        promql(QueryName.KV_CACHE_USAGE): vector(
            (pod("ns-a", "llama-0", llama), 0.2),
            ({"namespace": "ns-a", "model_name": llama, "pod_name": "llama-0"}, 0.4),
        ),
        promql(QueryName.DISPATCH_RATE): vector(
            ({"namespace": "ns-a", "pod_name": "llama-0", "wva_model_id": llama}, 1.0),
            ({"namespace": "ns-a", "pod_name": "llama-0", "wva_model_id": llama, "extra": "x"}, 2.0),
        ),
    }
    got = await collector.collect(MODELS, POD_VARIANTS)
    (p0,) = got.pods
    assert (p0.kv_cache_usage, p0.arrival_rate_rps) == (0.4, 3.0)


async def test_epp_queue_without_namespace_applies_to_every_namespace_of_the_model(
    fake: FakePrometheus, collector: PrometheusCollector
) -> None:
    shared = [ModelQuery(ModelKey("ns-a", "m")), ModelQuery(ModelKey("ns-b", "m")), ModelQuery(ModelKey("ns-c", "x"))]
    fake.answers = {
        promql(QueryName.EPP_QUEUE_SIZE, shared): vector(
            ({"wva_model_id": "m"}, 2),
            ({"namespace": "ns-a", "wva_model_id": "m"}, 3),
            ({"namespace": "ns-z", "wva_model_id": "m"}, 5),
            ({"wva_model_id": "unmanaged"}, 1),
        ),
    }
    got = await collector.collect(shared, {})
    assert {str(k): t.epp_queue_size for k, t in got.models.items()} == {"ns-a/m": 5, "ns-b/m": 2, "ns-c/x": None}
    assert got.dropped_samples == {"unknown-model": 2}


# ------------------------------------------------------------------------------------------ failures


async def test_failed_essential_query_makes_its_models_unavailable(
    fake: FakePrometheus, collector: PrometheusCollector
) -> None:
    fake.answers = healthy_answers()
    fake.answers[promql(QueryName.QUEUE_LENGTH)] = 500
    got = await collector.collect(MODELS, POD_VARIANTS)
    assert got.available
    assert got.unavailable_models == {LLAMA, QWEN}
    assert len(got.errors) == 1
    assert got.errors[0].startswith("queue_length: QueryError:")
    assert "500" in got.errors[0]
    assert {p.pod: p.queue_length for p in got.pods} == dict.fromkeys(("llama-0", "llama-1", "llama-l4-0", "qwen-0"))
    assert got.models[LLAMA].request_count == 42  # the rest of the cycle is still delivered


async def test_failed_non_essential_query_leaves_fields_unknown(
    fake: FakePrometheus, collector: PrometheusCollector
) -> None:
    fake.answers = healthy_answers()
    fake.answers[promql(QueryName.REQUEST_COUNT, retention_s=600)] = 500
    fake.answers[promql(QueryName.AVG_TTFT)] = 422
    got = await collector.collect(MODELS, POD_VARIANTS)
    assert got.available
    assert not got.unavailable_models
    assert got.models[LLAMA].request_count is None
    assert got.models[QWEN].request_count == 0
    assert all(p.avg_ttft_s is None for p in got.pods)
    assert sorted(e.split(":")[0] for e in got.errors) == ["avg_ttft", "model_request_count"]


async def test_all_queries_failing_means_unavailable(fake: FakePrometheus, collector: PrometheusCollector) -> None:
    fake.answers = {b.promql: 503 for b in build_queries(MODELS)}
    got = await collector.collect(MODELS, POD_VARIANTS)
    assert not got.available
    assert got.unavailable_models == {LLAMA, QWEN}
    assert got.pods == ()
    assert got.models == {LLAMA: ModelTraffic(LLAMA), QWEN: ModelTraffic(QWEN)}
    assert len(got.errors) == 16
    assert all("PrometheusUnavailable" in e for e in got.errors)


async def test_connection_refused_is_unavailable_not_an_exception() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with PrometheusCollector(url, timeout_s=2) as collector:
        started = time.monotonic()
        got = await collector.collect(MODELS, POD_VARIANTS)
        elapsed = time.monotonic() - started
        with pytest.raises(PrometheusUnavailable, match="Connection refused") as info:
            await collector.query("up")
    assert not got.available
    assert got.unavailable_models == {LLAMA, QWEN}
    assert "Connection refused" in got.errors[0]
    assert all(len(e) < 500 for e in got.errors)  # no 8 KB query URL in the messages
    assert elapsed < 2.0  # no retries with back-off
    assert not isinstance(info.value, OSError)  # the library's exception is the cause, never the type
    assert info.value.__cause__ is not None


async def test_stalled_prometheus_times_out_per_query(fake: FakePrometheus) -> None:
    fake.delay_s = 1.0
    async with PrometheusCollector(fake.url, timeout_s=0.2, max_concurrency=16) as collector:
        started = time.monotonic()
        got = await collector.collect(MODELS, POD_VARIANTS)
        elapsed = time.monotonic() - started
    assert not got.available
    assert all("PrometheusUnavailable" in e and "timed out" in e.lower() for e in got.errors), got.errors
    assert elapsed < 1.0


@pytest.mark.parametrize(
    ("how", "error"),
    [
        pytest.param("stall", "PrometheusUnavailable: .* stopped sending its answer: no data within 0.3 s", id="stall"),
        pytest.param("cut", "PrometheusUnavailable: reading the answer from .* failed", id="cut-short"),
        pytest.param("bad-gzip", "QueryError: answer from .* does not decode", id="bad-gzip"),
    ],
)
async def test_an_answer_broken_mid_body_is_that_query_s_error(fake: FakePrometheus, how: str, error: str) -> None:
    """Headers came, then the body did not (or not whole, or not readable): before, urllib3's own exception escaped
    `collect` and the reconciler lost the cycle as a bug; now it is the query's error, as for an answer that never
    came, and the other answers still count."""
    fake.answers = healthy_answers()
    fake.broken[promql(QueryName.AVG_TTFT)] = how
    async with PrometheusCollector(fake.url, timeout_s=0.3, max_concurrency=1) as collector:
        got = await collector.collect(MODELS, POD_VARIANTS)
    ttft = [e for e in got.errors if e.startswith("avg_ttft:")]
    assert len(ttft) == 1, got.errors
    assert re.search(error, ttft[0]), ttft
    assert {p.pod: p.kv_cache_usage for p in got.pods}["llama-0"] == 0.5  # sent before: applied
    assert all(p.avg_ttft_s is None for p in got.pods)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        pytest.param(b"<html>proxy error</html>", "not JSON", id="not-json"),
        pytest.param(b'{"status": "success", "data": {}}', "data.result", id="no-result"),
        pytest.param(b'{"status": "success", "data": {"result": {"a": 1}}}', "instant vector", id="not-a-list"),
        pytest.param(
            b'{"status": "success", "data": {"result": [{"metric": {}, "value": [1, "x"]}]}}',
            "malformed vector element",
            id="value-not-a-number",
        ),
        pytest.param(
            b'{"status": "success", "data": {"result": [{"metric": {}}]}}', "malformed vector element", id="no-value"
        ),
        pytest.param(
            b'{"status": "success", "data": {"result": [{"metric": [], "value": [1, "1"]}]}}',
            "metric is not an object",
            id="metric-not-object",
        ),
    ],
)
async def test_malformed_answers_are_query_errors(
    fake: FakePrometheus, collector: PrometheusCollector, body: bytes, match: str
) -> None:
    fake.raw["up"] = body
    with pytest.raises(QueryError, match=match):
        await collector.query("up")


async def test_bad_query_is_a_query_error(fake: FakePrometheus, collector: PrometheusCollector) -> None:
    fake.answers["sum("] = 400
    with pytest.raises(QueryError, match="400") as info:
        await collector.query("sum(")
    assert not isinstance(info.value, PrometheusUnavailable)


# ------------------------------------------------------------------------------------------ client options


async def test_bearer_token_and_concurrency_bound(fake: FakePrometheus) -> None:
    fake.delay_s = 0.05
    async with PrometheusCollector(fake.url, bearer_token="s3cret", max_concurrency=3) as collector:
        got = await collector.collect(MODELS, POD_VARIANTS)
    assert got.available
    assert fake.authorization == ["Bearer s3cret"] * 16
    assert fake.max_in_flight == 3


@pytest.mark.parametrize(
    ("compression", "asked"), [(False, "identity"), (True, "gzip")], ids=["plain-by-default", "gzip-when-asked"]
)
async def test_compression_asks_prometheus_for_what_it_sends(
    fake: FakePrometheus, compression: bool, asked: str
) -> None:
    """Prometheus gzips an answer for a client that accepts gzip (the emulator too): the collector accepts only
    plain JSON unless `compression`, on the bulk path and on `query`, and reads either into the same values."""
    fake.answers = healthy_answers()
    fake.answers["up"] = [{"metric": {"job": "x"}, "value": [0, "1"]}]
    async with PrometheusCollector(fake.url) as plain:
        reference = await plain.collect(MODELS, POD_VARIANTS)
    fake.accept_encoding.clear()
    async with PrometheusCollector(fake.url, compression=compression) as collector:
        got = await collector.collect(MODELS, POD_VARIANTS)
        samples = await collector.query("up")
    assert fake.accept_encoding == [asked] * 17
    assert replace(got, duration_s=0.0) == replace(reference, duration_s=0.0)
    assert reference.pods
    assert not got.errors
    assert samples == [VectorSample({"job": "x"}, 1.0)]


async def test_closed_collector_reports_unavailable(fake: FakePrometheus) -> None:
    collector = PrometheusCollector(fake.url)
    collector.close()
    got = await collector.collect(MODELS, POD_VARIANTS)
    assert not got.available
    assert got.errors


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        pytest.param({"url": "prometheus:9090"}, "http", id="no-scheme"),
        pytest.param({"url": "ftp://p:21"}, "http", id="wrong-scheme"),
        pytest.param({"url": "http://p:9090", "timeout_s": 0}, "timeout", id="zero-timeout"),
        pytest.param({"url": "http://p:9090", "timeout_s": math.nan}, "timeout", id="nan-timeout"),
        pytest.param({"url": "http://p:9090", "max_concurrency": 0}, "max_concurrency", id="no-concurrency"),
    ],
)
def test_invalid_settings_are_config_errors(kwargs: dict[str, object], match: str) -> None:
    url = kwargs.pop("url")
    assert isinstance(url, str)
    with pytest.raises(ConfigError, match=match):
        PrometheusCollector(url, **kwargs)  # type: ignore[arg-type]


def test_tls_options_reach_the_session(tmp_path: object) -> None:
    c = PrometheusCollector("https://p:9091/", ca_file="/etc/ssl/ca.pem", client_cert=("c.pem", "k.pem"))
    assert c.url == "https://p:9091"
    assert c._session.verify == "/etc/ssl/ca.pem"
    assert c._session.cert == ("c.pem", "k.pem")
    c.close()
    c = PrometheusCollector("https://p:9091", insecure_skip_verify=True, ca_file="/ignored")
    assert c._session.verify is False
    c.close()


# ------------------------------------------------------------------------------------------ pure parts


def test_parse_vector_keeps_special_values() -> None:
    samples = parse_vector(vector(({"a": "1"}, "NaN"), ({"a": "2"}, "+Inf"), ({"a": "3"}, "0.25")))
    assert [labels["a"] for labels, _ in samples] == ["1", "2", "3"]
    assert math.isnan(samples[0][1])
    assert samples[1][1] == math.inf
    assert samples[2][1] == 0.25


async def test_query_returns_named_samples(fake: FakePrometheus, collector: PrometheusCollector) -> None:
    fake.answers["up"] = vector(({"job": "vllm"}, 1))
    assert await collector.query("up") == [VectorSample({"job": "vllm"}, 1.0)]


def test_assemble_partial_failure_marks_only_the_covered_models() -> None:
    llama_only = Query(QueryName.KV_CACHE_USAGE, "kv-a", frozenset({LLAMA}))
    qwen_only = Query(QueryName.QUEUE_LENGTH, "q-b", frozenset({QWEN}))
    answer = vector((pod("ns-b", "qwen-0", QWEN.model_id), 2.0))
    got = assemble(MODELS, [(llama_only, QueryError("boom")), (qwen_only, answer)], POD_VARIANTS)
    assert got.available
    assert got.unavailable_models == {LLAMA}
    assert [(p.pod, p.queue_length) for p in got.pods] == [("qwen-0", 2.0)]


class _CountingBodies(PrometheusCollector):
    """Counts the bodies read and not yet digested; each digest takes 20 ms longer, so that bodies would pile up."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self.held = self.most_held = 0
        self._lock = threading.Lock()

    def _receive(self, response: requests.Response) -> bytes:
        body = super()._receive(response)
        with self._lock:
            self.held += 1
            self.most_held = max(self.most_held, self.held)
        return body

    def _digest(self, query: Query, body: bytes, index: PodIndex) -> Digest:
        time.sleep(0.02)
        try:
            return super()._digest(query, body, index)
        finally:
            with self._lock:
                self.held -= 1


async def test_bodies_held_are_bounded_while_queries_evaluate_concurrently(fake: FakePrometheus) -> None:
    fake.answers = healthy_answers()
    fake.delay_s = 0.05
    async with _CountingBodies(fake.url, max_concurrency=4) as collector:
        got = await collector.collect(MODELS, POD_VARIANTS)
    assert got.available
    assert not got.errors
    assert fake.max_in_flight == 4  # Prometheus still evaluates four at once
    assert collector.most_held == BODIES_HELD == 2  # but only two bodies are in memory at once
    assert collector.held == 0


async def test_collect_runs_concurrently(fake: FakePrometheus) -> None:
    fake.delay_s = 0.2
    async with PrometheusCollector(fake.url, max_concurrency=16) as collector:
        started = time.monotonic()
        got, _ = await asyncio.gather(collector.collect(MODELS, POD_VARIANTS), asyncio.sleep(0))
        elapsed = time.monotonic() - started
    assert got.available
    assert elapsed < 16 * 0.2 / 2  # 16 queries of 0.2 s did not run one after another


async def test_metric_selection_sends_only_those_queries(fake: FakePrometheus) -> None:
    fake.answers = healthy_answers()
    async with PrometheusCollector(fake.url, metrics=V1_QUERIES) as collector:
        got = await collector.collect(MODELS, POD_VARIANTS)
    assert len(fake.seen) == 2 + 2 + 2  # kv, queue, EPP size/bytes, two retention periods
    p0 = next(p for p in got.pods if p.pod == "llama-0")
    assert (p0.kv_cache_usage, p0.queue_length, p0.avg_ttft_s, p0.arrival_rate_rps) == (0.5, 3, None, None)
    assert got.models[LLAMA] == ModelTraffic(LLAMA, request_count=42, epp_queue_size=7, epp_queue_bytes=7000)


@pytest.mark.parametrize(
    "bad_element",
    [
        pytest.param({"metric": {"pod": "llama-1"}}, id="no-value"),
        pytest.param({"metric": ["pod"], "value": [1, "1"]}, id="metric-not-object"),
        pytest.param({"metric": {}, "value": [1, "one"]}, id="value-not-a-number"),
        pytest.param({"metric": {}, "value": []}, id="value-too-short"),
    ],
)
async def test_malformed_element_fails_its_query_all_or_nothing(
    fake: FakePrometheus, collector: PrometheusCollector, bad_element: dict[str, object]
) -> None:
    fake.answers = healthy_answers()
    queue = promql(QueryName.QUEUE_LENGTH)
    good = fake.answers[queue]
    assert isinstance(good, list)
    fake.answers[queue] = [*good, bad_element]  # the good elements come first: none of them may be applied
    fake.answers[promql(QueryName.AVG_TTFT)] = [bad_element]
    got = await collector.collect(MODELS, POD_VARIANTS)
    assert got.available
    assert got.unavailable_models == {LLAMA, QWEN}
    assert all(p.queue_length is None and p.avg_ttft_s is None for p in got.pods)
    assert {p.pod: p.kv_cache_usage for p in got.pods}["llama-0"] == 0.5
    assert sorted(e.split(":")[0] for e in got.errors) == ["avg_ttft", "queue_length"]
    assert all("malformed vector element" in e for e in got.errors)


async def test_unavailable_prometheus_fails_the_rest_of_the_cycle_fast(fake: FakePrometheus) -> None:
    fake.delay_s = 1.0
    async with PrometheusCollector(fake.url, timeout_s=0.2, max_concurrency=2) as collector:
        started = time.monotonic()
        got = await collector.collect(MODELS, POD_VARIANTS)
        elapsed = time.monotonic() - started
    assert not got.available
    assert len(fake.seen) == 2  # one wave was sent; the other 14 queries were not queued behind it
    assert len(got.errors) == 16
    assert sum("not sent" in e for e in got.errors) == 14
    assert elapsed < 0.2 * 3


def test_edges_satisfy_the_reconciler_ports() -> None:
    """Structural typing, checked by mypy on this file; at run time the methods exist with these names."""
    from adapter.metrics.epp import EppScraper
    from adapter.reconciler.ports import EppSource, MetricsSource

    metrics: MetricsSource = PrometheusCollector("http://127.0.0.1:9")
    epp: EppSource = EppScraper()
    assert callable(metrics.collect)
    assert callable(epp.queue_sizes)
    assert isinstance(metrics, PrometheusCollector)
    metrics.close()
