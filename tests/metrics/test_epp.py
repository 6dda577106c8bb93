"""Direct EPP scraping: both metric families, model label fall-back, per-endpoint failures, tokens."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from adapter.domain.cluster import Collection, EppEndpoint, InferencePoolInfo
from adapter.domain.errors import ConfigError
from adapter.domain.ids import ModelKey
from adapter.domain.snapshot import ModelTraffic
from adapter.metrics.epp import EppScrape, EppScraper, apply_epp_queues, parse_queues

from .emulators import EppPod, MetricsServer

Serve = Callable[..., Awaitable[MetricsServer]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    started: list[MetricsServer] = []

    async def start(epp: EppPod, **kwargs: str) -> MetricsServer:
        server = await MetricsServer(epp.render, **kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        await server.stop()


def pool(namespace: str, name: str, *servers: MetricsServer | str) -> InferencePoolInfo:
    endpoints = tuple(
        EppEndpoint(namespace, f"{name}-epp-{i}", s if isinstance(s, str) else s.address) for i, s in enumerate(servers)
    )
    return InferencePoolInfo(namespace, name, {"app": name}, endpoints=endpoints)


def closed_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


# ------------------------------------------------------------------------------------------ parsing


def series(name: str, value: str, model: str, target: str | None, fairness: str = "a", priority: str = "0") -> str:
    labels = f'fairness_id="{fairness}",priority="{priority}",inference_pool="p",model_name="{model}"'
    if target is not None:
        labels += f',target_model_name="{target}"'
    return f"{name}{{{labels}}} {value}"


SIZE, BYTES = "inference_extension_flow_control_queue_size", "inference_extension_flow_control_queue_bytes"
NEW_SIZE = "llm_d_epp_flow_control_queue_size"
LEGACY_TEXT = "\n".join(
    [
        f"# HELP {SIZE} Requests in flow control.",
        f"# TYPE {SIZE} gauge",
        series(SIZE, "2", "alias", "m1"),  # target wins over the requested name
        series(SIZE, "3", "other", "m1", fairness="b", priority="1"),  # summed over fairness and priority
        series(SIZE, "4", "m2", ""),  # no rewrite: model_name
        series(SIZE, "1", "m3", None),  # no target label at all: model_name
        series(SIZE, "9", "", ""),  # no model: ignored
        series(SIZE, "NaN", "m4", "", fairness="c"),  # unusable values: ignored
        series(SIZE, "-1", "m4", "", fairness="d"),
        f"# TYPE {BYTES} gauge",
        series(BYTES, "2048", "alias", "m1"),
        "# TYPE go_goroutines gauge",
        "go_goroutines 42",
        "",
    ]
)
BOTH_FAMILIES_TEXT = "\n".join(
    [
        f"# TYPE {NEW_SIZE} gauge",
        series(NEW_SIZE, "5", "m1", "m1"),
        f"# TYPE {SIZE} gauge",
        series(SIZE, "5", "m1", "m1"),
        f"# TYPE {BYTES} gauge",
        series(BYTES, "640", "m1", "m1"),  # only the legacy family has bytes: read from it
        "",
    ]
)


@pytest.mark.parametrize(
    ("text", "sizes", "queue_bytes"),
    [
        pytest.param(LEGACY_TEXT, {"m1": 5, "m2": 4, "m3": 1}, {"m1": 2048}, id="legacy-target-then-model-name"),
        pytest.param(BOTH_FAMILIES_TEXT, {"m1": 5}, {"m1": 640}, id="new-family-wins-not-double-counted"),
        pytest.param("", {}, {}, id="empty"),
        pytest.param("# TYPE go_goroutines gauge\ngo_goroutines 42\n", {}, {}, id="no-flow-control"),
    ],
)
def test_parse_queues(text: str, sizes: dict[str, float], queue_bytes: dict[str, float]) -> None:
    parsed = parse_queues(text)
    assert parsed.size == sizes
    assert parsed.bytes == queue_bytes


def test_parse_queues_rejects_garbage() -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - prometheus_client's parser raises a bare ValueError
        parse_queues("inference_extension_flow_control_queue_size{model_name= 3 x y\n")


# ------------------------------------------------------------------------------------------ scraping


async def test_sums_over_a_pools_endpoints_and_keys_by_namespace(serve: Serve) -> None:
    a0, a1, b0 = EppPod(pool="llama"), EppPod(pool="llama"), EppPod(pool="qwen", new_names=True)
    a0.set_queue("meta/llama-3.1-8b", 2, 200)
    a1.set_queue("meta/llama-3.1-8b", 3, 300, fairness_id="tenant-b")
    a1.set_queue("meta/llama-3.1-8b", 1, 100, targeted=False)
    b0.set_queue("Qwen/Qwen2.5-7B", 4, 4096, requested_model="qwen")
    b0.set_queue("meta/llama-3.1-8b", 6)  # same model id, other namespace: kept apart
    pools = [
        pool("ns-a", "llama", await serve(a0), await serve(a1)),
        pool("ns-b", "qwen", await serve(b0)),
    ]
    async with EppScraper(timeout_s=2) as scraper:
        got = await scraper.scrape(pools)
        sizes = await scraper.queue_sizes(pools)
    assert got.queue_size == {
        ("ns-a", "meta/llama-3.1-8b"): 6,
        ("ns-b", "Qwen/Qwen2.5-7B"): 4,
        ("ns-b", "meta/llama-3.1-8b"): 6,
    }
    assert got.queue_bytes[("ns-a", "meta/llama-3.1-8b")] == 600
    assert got.queue_bytes[("ns-b", "Qwen/Qwen2.5-7B")] == 4096
    assert got.failures == ()
    assert got.partial_pools == frozenset()
    assert got.answered_pools == {("ns-a", "llama"), ("ns-b", "qwen")}
    assert got.endpoints_ok == 3
    assert sizes == dict(got.queue_size)


async def test_a_broken_endpoint_does_not_fail_the_others(serve: Serve) -> None:
    good, failing, stalled, garbage = (EppPod(pool="llama") for _ in range(4))
    good.set_queue("m", 2)
    s_good, s_fail, s_stall, s_garbage = [await serve(e) for e in (good, failing, stalled, garbage)]
    s_fail.status = 500
    s_stall.delay_s = 2.0
    s_garbage.body_override = b"inference_extension_flow_control_queue_size{model_name= 3 x y\n"
    other = EppPod(pool="other")
    other.set_queue("m", 7)
    pools = [
        pool("ns-a", "llama", s_good, s_fail, s_stall, s_garbage, closed_address()),
        pool("ns-c", "other", await serve(other)),
        pool("ns-d", "dead", closed_address()),
    ]
    started = time.monotonic()
    async with EppScraper(timeout_s=0.5) as scraper:
        got = await scraper.scrape(pools)
    assert time.monotonic() - started < 1.5  # concurrent, each bounded by the timeout
    assert got.queue_size == {("ns-a", "m"): 2, ("ns-c", "m"): 7}
    assert got.endpoints_ok == 2
    assert got.partial_pools == {("ns-a", "llama"), ("ns-d", "dead")}
    assert got.answered_pools == {("ns-c", "other")}
    messages = sorted(f.message.split(" ")[0] for f in got.failures)
    assert len(got.failures) == 5
    assert "HTTP" in messages
    assert "no" in messages
    assert "unparsable" in messages
    assert sum("ClientConnectorError" in f.message for f in got.failures) == 2
    assert all(f.pool in ("ns-a/llama", "ns-d/dead") for f in got.failures)
    # a pool where nothing answered has no key at all: "unknown", never "empty queue"
    assert not any(ns == "ns-d" for ns, _ in got.queue_size)


async def test_bearer_token(serve: Serve) -> None:
    epp = EppPod(pool="p")
    epp.set_queue("m", 1)
    server = await serve(epp, required_token="t0ken")
    pools = [pool("ns", "p", server)]
    async with EppScraper(timeout_s=2) as anonymous:
        denied = await anonymous.scrape(pools)
    async with EppScraper(timeout_s=2, bearer_token="t0ken") as scraper:
        allowed = await scraper.scrape(pools)
    assert denied.queue_size == {}
    assert "HTTP 401" in denied.failures[0].message
    assert allowed.queue_size == {("ns", "m"): 1}
    assert allowed.failures == ()


async def test_no_endpoints_no_requests() -> None:
    async with EppScraper() as scraper:
        assert await scraper.scrape([InferencePoolInfo("ns", "p", {})]) == EppScrape()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        pytest.param({"timeout_s": 0}, "timeout", id="timeout"),
        pytest.param({"scheme": "ftp"}, "scheme", id="scheme"),
        pytest.param({"max_concurrency": 0}, "max_concurrency", id="concurrency"),
    ],
)
def test_invalid_settings(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EppScraper(**kwargs)  # type: ignore[arg-type]


def test_apply_epp_queues_overlays_only_answered_models() -> None:
    a, b = ModelKey("ns", "a"), ModelKey("ns", "b")
    collection = Collection(
        models={
            a: ModelTraffic(a, request_count=3, epp_queue_size=1, epp_queue_bytes=10),
            b: ModelTraffic(b, request_count=None, epp_queue_size=2, epp_queue_bytes=20),
        }
    )
    scrape = EppScrape(queue_size={("ns", "a"): 5, ("ns", "zz"): 9}, queue_bytes={})
    got = apply_epp_queues(collection, scrape)
    assert got.models[a] == ModelTraffic(a, request_count=3, epp_queue_size=5, epp_queue_bytes=10)
    assert got.models[b] == collection.models[b]
    assert ModelKey("ns", "zz") not in got.models
