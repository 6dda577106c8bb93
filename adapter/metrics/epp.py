"""Scrape EPP (endpoint picker) pods' `/metrics` directly for their flow-control queues.

Why directly and not through Prometheus: scale-from-zero (upstream polls every 100 ms) needs the queue *now*,
not after a scrape interval plus a query; and with no vLLM pod running, the EPP queue is the only evidence of
demand. Upstream does the same with its pod-scraping source (seed 001, "Pod scraping sources").

Names read (research/llm-autoscaling-anchors.md §2.2): `llm_d_epp_flow_control_queue_size` / `_queue_bytes`
(llm-d router) and the deprecated `inference_extension_flow_control_queue_size` / `_queue_bytes` (GAIE), which
the router still emits next to the new ones. Per endpoint, the new family wins when it has any sample, so an
EPP exposing both is counted once. A series' model is `target_model_name`, or `model_name` when the target is
empty; every series of a model is summed (over fairness ids and priorities), then over the pool's endpoints.
The text is parsed with `prometheus_client.parser` (a real parser, never string matching).

Failures are per endpoint: a refused connection, a timeout, a non-200 answer or unparsable text is reported
in `EppScrape.failures` (and logged) and the pool is listed in `EppScrape.partial_pools`; the other endpoints
are still summed. A pool none of whose endpoints answered contributes no keys at all, so a caller never reads
"no answer" as "queue empty".
"""

from __future__ import annotations

import asyncio
import logging
import math
import ssl
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import TracebackType

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from adapter.domain.cluster import Collection, EppEndpoint, InferencePoolInfo
from adapter.domain.errors import ConfigError
from adapter.domain.ids import ModelKey

log = logging.getLogger(__name__)

QUEUE_SIZE_NAMES = ("llm_d_epp_flow_control_queue_size", "inference_extension_flow_control_queue_size")
"""Current name first; the deprecated one is read only when an endpoint has no sample of the current one."""
QUEUE_BYTES_NAMES = ("llm_d_epp_flow_control_queue_bytes", "inference_extension_flow_control_queue_bytes")
ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
"""Ask for the classic text format (what `text_string_to_metric_families` parses), not OpenMetrics/protobuf."""
MAX_BODY_BYTES = 32 * 1024 * 1024

ModelQueues = dict[tuple[str, str], float]
"""(namespace, model_id) → value."""


@dataclass(frozen=True, slots=True)
class EndpointFailure:
    pool: str
    """namespace/name of the InferencePool."""
    endpoint: str
    """namespace/pod (address) of the EPP endpoint."""
    message: str


@dataclass(frozen=True, slots=True)
class EppScrape:
    """One round over every pool's EPP endpoints."""

    queue_size: Mapping[tuple[str, str], float] = field(default_factory=dict)
    queue_bytes: Mapping[tuple[str, str], float] = field(default_factory=dict)
    failures: tuple[EndpointFailure, ...] = ()
    partial_pools: frozenset[tuple[str, str]] = frozenset()
    """(namespace, name) of pools where at least one endpoint failed (their sums may be low)."""
    answered_pools: frozenset[tuple[str, str]] = frozenset()
    """(namespace, name) of pools whose every endpoint answered: a model of theirs without a key has an empty
    queue (an EPP exports a model's series only once it has queued something)."""
    endpoints_ok: int = 0


@dataclass(frozen=True, slots=True)
class EndpointQueues:
    """One endpoint's flow-control queue per model id."""

    size: dict[str, float]
    bytes: dict[str, float]


def parse_queues(text: str) -> EndpointQueues:
    """Per-model queue size and bytes of one endpoint's exposition. Raises ValueError, with a bounded message
    (the parser's own errors quote the offending line whole), on unparsable text."""
    try:
        return _parse_queues(text)
    except Exception as exc:
        detail = " ".join(str(exc).split())
        detail = detail if len(detail) <= 160 else detail[:160] + "…"
        raise ValueError(f"unparsable Prometheus exposition ({type(exc).__name__}: {detail})") from None


def _parse_queues(text: str) -> EndpointQueues:
    """Per-model queue size and bytes of one endpoint's exposition. Raises ValueError on unparsable text."""
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in QUEUE_SIZE_NAMES and family.name not in QUEUE_BYTES_NAMES:
            continue
        per_model = found.setdefault(family.name, {})
        for sample in family.samples:
            if sample.name != family.name:
                continue
            model = sample.labels.get("target_model_name") or sample.labels.get("model_name") or ""
            value = float(sample.value)
            if not model or not math.isfinite(value) or value < 0:
                continue
            per_model[model] = per_model.get(model, 0.0) + value

    def first(names: Iterable[str]) -> dict[str, float]:
        return next((found[n] for n in names if n in found), {})

    return EndpointQueues(size=first(QUEUE_SIZE_NAMES), bytes=first(QUEUE_BYTES_NAMES))


class EppScraper:
    """Scrapes the EPP endpoints of InferencePools. One instance per process; reuse it across rounds."""

    def __init__(
        self,
        *,
        timeout_s: float = 5.0,
        bearer_token: str | None = None,
        scheme: str = "http",
        metrics_path: str = "/metrics",
        ca_file: str | None = None,
        insecure_skip_verify: bool = False,
        max_concurrency: int = 8,
    ) -> None:
        if not (math.isfinite(timeout_s) and timeout_s > 0):
            raise ConfigError(f"epp timeout: {timeout_s!r} s must be a positive number of seconds")
        if scheme not in ("http", "https"):
            raise ConfigError(f"epp scheme: {scheme!r} must be 'http' or 'https'")
        if max_concurrency < 1:
            raise ConfigError(f"epp max_concurrency: {max_concurrency!r} must be >= 1")
        self.timeout_s = float(timeout_s)
        self.scheme = scheme
        self.metrics_path = metrics_path if metrics_path.startswith("/") else "/" + metrics_path
        self.max_concurrency = max_concurrency
        self._headers = {"Accept": ACCEPT}
        if bearer_token:
            self._headers["Authorization"] = f"Bearer {bearer_token}"
        self._ssl: ssl.SSLContext | bool = True
        if insecure_skip_verify:
            self._ssl = False
        elif ca_file:
            self._ssl = ssl.create_default_context(cafile=ca_file)
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> EppScraper:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                connector=aiohttp.TCPConnector(limit=self.max_concurrency, ssl=self._ssl),
                headers=self._headers,
            )
        return self._session

    async def queue_sizes(self, pools: Sequence[InferencePoolInfo]) -> dict[tuple[str, str], float]:
        """Flow-control queue size per (namespace, model_id), summed over each pool's EPP endpoints."""
        return dict((await self.scrape(pools)).queue_size)

    async def scrape(self, pools: Sequence[InferencePoolInfo]) -> EppScrape:
        """Scrape every endpoint of every pool concurrently; never raises for an endpoint's failure."""
        jobs = [(pool, ep) for pool in pools for ep in pool.endpoints]
        if not jobs:
            return EppScrape()
        session = self._client()
        results = await asyncio.gather(*(self._scrape_one(session, ep) for _, ep in jobs))
        sizes: ModelQueues = {}
        sizes_bytes: ModelQueues = {}
        failures: list[EndpointFailure] = []
        partial: set[tuple[str, str]] = set()
        ok = 0
        for (pool, ep), result in zip(jobs, results, strict=True):
            if isinstance(result, str):
                failures.append(EndpointFailure(f"{pool.namespace}/{pool.name}", _endpoint_name(ep), result))
                partial.add((pool.namespace, pool.name))
                continue
            ok += 1
            for model, value in result.size.items():
                sizes[(pool.namespace, model)] = sizes.get((pool.namespace, model), 0.0) + value
            for model, value in result.bytes.items():
                sizes_bytes[(pool.namespace, model)] = sizes_bytes.get((pool.namespace, model), 0.0) + value
        for failure in failures:
            log.warning("epp scrape of %s (pool %s) failed: %s", failure.endpoint, failure.pool, failure.message)
        answered = frozenset((p.namespace, p.name) for p in pools if p.endpoints) - partial
        return EppScrape(sizes, sizes_bytes, tuple(failures), frozenset(partial), answered, ok)

    async def _scrape_one(self, session: aiohttp.ClientSession, ep: EppEndpoint) -> EndpointQueues | str:
        url = f"{self.scheme}://{ep.address}{self.metrics_path}"
        try:
            async with session.get(url) as resp:
                if resp.status != 200:
                    return f"HTTP {resp.status} from {url}"
                chunks: list[bytes] = []
                size = 0
                async for chunk in resp.content.iter_chunked(1 << 16):
                    size += len(chunk)
                    if size > MAX_BODY_BYTES:
                        return f"exposition from {url} is larger than {MAX_BODY_BYTES} bytes"
                    chunks.append(chunk)
            text = b"".join(chunks).decode("utf-8", errors="replace")
            return await asyncio.to_thread(parse_queues, text)
        except TimeoutError:
            return f"no answer from {url} within {self.timeout_s:g} s"
        except aiohttp.ClientError as e:
            return f"{type(e).__name__} from {url}: {e}"
        except ValueError as e:  # prometheus_client's parser
            return f"unparsable exposition from {url}: {e}"


def _endpoint_name(ep: EppEndpoint) -> str:
    return f"{ep.namespace}/{ep.pod} ({ep.address})"


def apply_epp_queues(collection: Collection, scrape: EppScrape) -> Collection:
    """Overlay directly scraped EPP queues on a collection's model traffic (fresher than Prometheus').

    Only models the scrape answered for are touched; the others keep what Prometheus said (or None).
    """
    models = dict(collection.models)
    for (namespace, model_id), size in scrape.queue_size.items():
        key = ModelKey(namespace, model_id)
        if key in models:
            queue_bytes = scrape.queue_bytes.get((namespace, model_id), models[key].epp_queue_bytes)
            models[key] = replace(models[key], epp_queue_size=size, epp_queue_bytes=queue_bytes)
    return replace(collection, models=models)
