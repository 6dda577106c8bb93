"""Collect one cycle's metrics from Prometheus into a `Collection`.

Contract
--------
`await PrometheusCollector(url).collect(models, pod_variants)` never raises for a source problem: every
failure of Prometheus or of the client library is wrapped into `adapter.domain.errors` (`PrometheusUnavailable`
when it cannot be reached or is not serving, `QueryError` when one query fails or answers something we cannot
use), recorded in `Collection.errors`, and reflected in the result:

* a failed essential query (KV usage, queue length) makes every model it covers unavailable
  (`Collection.unavailable_models`); the engine's fallback hierarchy decides for them;
* a failed non-essential query leaves its field `None` (never 0) for the models it covers: a failed request
  count can therefore never scale a model to zero;
* when no query succeeded (Prometheus down, connection refused, every query timing out) the collection says
  `available=False` and every model is unavailable.

Samples that cannot be used are dropped and counted in `Collection.dropped_samples` by reason: `nan`, `inf`,
`negative`, `out-of-range` (a hit rate above 1), `unknown-pod` (the pod is not behind any VA: e.g. deleted
but still inside the query window, or not ours), `unknown-model` (not a requested model; the regex selector
matches a cross product), `missing-label` (no pod, model or `le` label), `invalid-label` (cache geometry labels
that are not integers, a bucket bound `le` that is not a number >= 0), `incomplete-histogram` (a model's
latency buckets without their `+Inf` bucket: the total is unknown, so the histogram is dropped whole).

Latency histograms (`ttft_histogram`, `tpot_histogram`) are model-level: each answer element is one bucket
edge of one model, summed over its pods in PromQL; `le` is parsed as a float (`+Inf` included, and "1" and
"1.0" are one edge), and the buckets become `ModelTraffic.latency` (adapter.domain.latency). A model with no
series in either answer gets `latency=None`; one side missing or failed leaves that histogram None.

Concurrency: `prometheus_api_client.PrometheusConnect` is synchronous (requests). Queries run in a private
thread pool of `max_concurrency` threads, gated by a semaphore on the loop side so each query's timeout starts
when it is actually sent. A body is read only when fewer than `BODIES_HELD` answers wait for the digester: the
queries are still evaluated concurrently, but their bodies are not all held in memory at once. The pool is
private on purpose: the loop's default executor is shared with every other `to_thread` caller and has only
min(32, CPUs + 4) threads, so a hung Prometheus would starve them.
Every query carries a timeout three times over: Prometheus' own `timeout` parameter (it stops evaluating),
the HTTP client's socket timeout, and an asyncio deadline slightly later (a thread that outlives it is
abandoned, not waited for). No retries: the reconciler asks again next cycle, and a retry with back-off
would only make a down Prometheus take longer to report. For the same reason, once one query finds
Prometheus unavailable (refused, timed out, 503), the queries still waiting for a slot are not sent: a hung
Prometheus costs one timeout per cycle, not one per wave of `max_concurrency` queries, which keeps the
cycle inside the reconciler's own deadline.

Cost (issue 22, docs/benchmarks/scale.md): at 10,000 VAs (100,000 pods) one cycle reads ~140 MB of JSON,
~1.4 M answer elements. The bulk path therefore does not build a dict per element: the collector asks for the
raw answer with the same `requests` session and decodes it with msgspec straight into small typed structs
(`Element`: only the labels the digests read; every other label is skipped while decoding), at about half the
time and memory of `json` into dicts. Each answer is reduced (`digest`) as soon as it is decoded, one answer at
a time (the decoded elements of several answers never coexist), into a column indexed by pod number
(`PodIndex`: the pods behind VAs in (namespace, pod) order, built once and kept while the inventory's pods stay
the same), and the columns are joined into `PodMetrics` (`join`) off the event loop, reusing the inventory's
namespace and pod strings. A per-pod answer's labels are not even decoded once their series is known: the
`SeriesCache` recognises a series by its labels' bytes, from answer to answer and cycle to cycle. The cyclic GC
is paused meanwhile (`adapter.reconciler.gcpause`). A malformed element fails its query as a whole (`QueryError`,
naming the problem), never half-applied. `query()` (one ad-hoc query, all labels) still goes through
prometheus_api_client's `custom_query`. tests/bench_collect.py measures it; tests/metrics/test_collector_reference.py
keeps it equal to the previous dict-based path, tests/metrics/test_series_cache.py the cache to the typed path.

Answers come as plain JSON unless `compression` (`ACCEPT_ENCODING`): Prometheus gzips for any client that
accepts gzip, and decompressing ~156 MB a cycle at 10,000 VAs is CPU this process does not have to spend.

This module is the HTTP, the threads and the source's errors; the reading of a body (the typed decoding, the
digests, the series cache and the join) is `adapter.metrics.answers`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from types import TracebackType
from typing import Any, NamedTuple, TypeVar
from urllib.parse import urlparse

import requests
import urllib3
from prometheus_api_client.exceptions import PrometheusApiClientException
from prometheus_api_client.prometheus_connect import PrometheusConnect
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from adapter.domain.cluster import Collection, ModelQuery
from adapter.domain.errors import ConfigError, PrometheusUnavailable, QueryError, SourceError
from adapter.metrics.answers import (
    ERROR_TEXT_LIMIT,
    Digest,
    PodIndex,
    PodKey,
    SeriesCache,
    digest_body,
    error_text,
    join,
    parse_vector,
)
from adapter.metrics.queries import (
    DEFAULT_MAX_QUERY_BYTES,
    Query,
    QueryName,
    QueryWindows,
    build_queries,
)
from adapter.reconciler.gcpause import GcPause

log = logging.getLogger(__name__)

DEADLINE_GRACE_S = 2.0
"""How much later than the HTTP timeout the asyncio deadline fires."""
ACCEPT_ENCODING = {False: "identity", True: "gzip"}
"""What the collector asks Prometheus for, by `compression`. Prometheus gzips an answer for any client that accepts
gzip, and requests accepts it unless told otherwise: at 10,000 VAs a cycle's answers are ~156 MB of JSON (~6 MB
gzipped), and decompressing them cost the collect ~0.2 s of its ~1.1 s (`python -m tests.bench_collect`, whose fake
answers as Prometheus does: docs/benchmarks/scale.md, item 29). Plain JSON is the default: the bytes cross a
cluster's network, the CPU is this process' (and Prometheus' own, which compresses). gzip for a Prometheus behind
a slow link."""


_A = TypeVar("_A")
_R = TypeVar("_R")


class VectorSample(NamedTuple):
    """One element of an instant vector, as `PrometheusCollector.query` returns it."""

    labels: Mapping[str, str]
    value: float


# ------------------------------------------------------------------------------------------ client


BODIES_HELD = 2
"""Answers read and not yet digested, at most: one digesting, the next read and waiting. Up to `max_concurrency`
queries are evaluated at once (`_send`: Prometheus answers once it has evaluated), but a body is read only when
there is room for it: at 10,000 VAs a body is ~13 MB, and with every query's body read as soon as it came, the
three waiting for the digester were ~40 MB of the cycle's peak (docs/benchmarks/scale.md, item 23)."""


class PrometheusCollector:
    """Runs a cycle's queries (see `adapter.metrics.queries`) against one Prometheus-compatible endpoint."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 10.0,
        bearer_token: str | None = None,
        ca_file: str | None = None,
        insecure_skip_verify: bool = False,
        client_cert: str | tuple[str, str] | None = None,
        max_concurrency: int = 4,
        windows: QueryWindows | None = None,
        max_query_bytes: int = DEFAULT_MAX_QUERY_BYTES,
        metrics: Iterable[QueryName] | None = None,
        pause_gc: bool = True,
        compression: bool = False,
    ) -> None:
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(
                f"prometheus url: {url!r} is not an http(s) URL with a host (e.g. http://prometheus:9090)"
            )
        if not (math.isfinite(timeout_s) and timeout_s > 0):
            raise ConfigError(f"prometheus timeout: {timeout_s!r} s must be a positive number of seconds")
        if max_concurrency < 1:
            raise ConfigError(f"prometheus max_concurrency: {max_concurrency!r} must be >= 1")
        self.url = url.rstrip("/")
        self.timeout_s = float(timeout_s)
        self.max_concurrency = max_concurrency
        self.windows = windows or QueryWindows()
        self.max_query_bytes = max_query_bytes
        self.metrics = None if metrics is None else frozenset(metrics)
        """The metrics to ask for (None = all; the essential ones always)."""
        self.pause_gc = pause_gc
        """Pause the cyclic GC while answers are decoded and assembled (`adapter.reconciler.gcpause`)."""
        session = requests.Session()
        session.verify = False if insecure_skip_verify else (ca_file or True)
        if client_cert is not None:
            session.cert = client_cert
        self._headers = {"Accept-Encoding": ACCEPT_ENCODING[compression]}
        if bearer_token:
            self._headers["Authorization"] = f"Bearer {bearer_token}"
        no_retry = Retry(total=0, connect=0, read=0, status=0, redirect=3, raise_on_status=False)
        self._prom = PrometheusConnect(url=self.url, headers=self._headers, session=session, retry=no_retry)
        # Mounted after PrometheusConnect's own adapter so the pool holds one connection per worker thread.
        session.mount(self.url, HTTPAdapter(max_retries=no_retry, pool_maxsize=max_concurrency))
        self._session = session
        self._executor = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="prometheus-query")
        self._digester = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prometheus-digest")
        """Decoding, digests and the join: CPU work under the GIL, so one thread loses no speed, and the memory it
        churns (decoded answers, columns, lists of 100,000 values) stays in one malloc arena instead of eight."""
        self._closed = False
        self._index: tuple[dict[PodKey, str], PodIndex] | None = None
        self._series = SeriesCache()
        """Used on the digester thread only."""

    def _gc_pause(self) -> contextlib.AbstractContextManager[None]:
        return GcPause() if self.pause_gc else contextlib.nullcontext()

    # -------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Release the HTTP pool and the worker threads (a query still running is abandoned)."""
        if not self._closed:
            self._closed = True
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._digester.shutdown(wait=False, cancel_futures=True)
            self._session.close()

    async def __aenter__(self) -> PrometheusCollector:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -------------------------------------------------------------- queries

    async def query(self, promql: str) -> list[VectorSample]:
        """One instant query, every label. Raises `PrometheusUnavailable` or `QueryError` (never a library
        exception)."""
        raw = await self._in_thread(self._fetch, promql)
        return [VectorSample(labels, value) for labels, value in parse_vector(raw)]

    async def _in_thread(self, fn: Callable[[_A], _R], arg: _A) -> _R:
        """`fn(arg)` in a worker thread, bounded by the asyncio deadline."""
        if self._closed:
            raise PrometheusUnavailable("the Prometheus collector is closed")
        future = asyncio.get_running_loop().run_in_executor(self._executor, fn, arg)
        try:
            async with asyncio.timeout(self.timeout_s + DEADLINE_GRACE_S):  # not wait_for: it can swallow a cancel
                return await future
        except TimeoutError as e:
            raise PrometheusUnavailable(f"no answer from {self.url} within {self.timeout_s:g} s") from e

    def _fetch(self, promql: str) -> list[Any]:
        """`data.result` as prometheus_api_client decodes it (dicts); `parse_vector` reads and checks it."""
        try:
            result = self._prom.custom_query(
                promql,
                params={"timeout": f"{self.timeout_s:g}s"},
                timeout=self.timeout_s,  # type: ignore[arg-type]  # annotated int; requests takes float seconds
            )
        except requests.exceptions.JSONDecodeError as e:
            raise QueryError(f"answer from {self.url} is not JSON: {error_text(e)}") from e
        except (requests.ConnectionError, requests.Timeout) as e:
            raise PrometheusUnavailable(f"cannot reach {self.url}: {_root_cause(e)}") from e
        except requests.RequestException as e:
            raise PrometheusUnavailable(f"request to {self.url} failed: {_root_cause(e)}") from e
        except PrometheusApiClientException as e:
            match = _STATUS.search(str(e))
            raise _http_error(self.url, int(match.group(1)) if match else 0, str(e)) from e
        except (KeyError, TypeError, ValueError) as e:
            raise QueryError(f"answer from {self.url} has no data.result: {error_text(e)}") from e
        if not isinstance(result, list):
            raise QueryError(f"expected an instant vector (a list), got {type(result).__name__}")
        return result

    def _send(self, promql: str) -> requests.Response:
        """Worker thread: one instant query sent (the request `custom_query` makes, same session) and its answer's
        headers read, its body not yet: Prometheus answers once it has evaluated the query, so this is the wait."""
        try:
            return self._session.get(
                f"{self.url}/api/v1/query",
                params={"query": promql, "timeout": f"{self.timeout_s:g}s"},
                headers=self._headers,
                timeout=self.timeout_s,
                stream=True,
            )
        except (requests.ConnectionError, requests.Timeout) as e:
            raise PrometheusUnavailable(f"cannot reach {self.url}: {_root_cause(e)}") from e
        except requests.RequestException as e:
            raise PrometheusUnavailable(f"request to {self.url} failed: {_root_cause(e)}") from e

    def _receive(self, response: requests.Response) -> bytes:
        """Worker thread: the whole body of a `_send` answer, read at once (requests' `.content` joins 10 KB chunks:
        twice the memory), the response closed; or the error its status names. The body is read from urllib3's
        response, so its errors are urllib3's, which requests would otherwise translate: an answer that stops
        coming (a read timeout, a connection reset or cut short of its Content-Length) makes Prometheus
        unavailable this cycle, like one that never came; a body that does not decompress is this query's
        problem."""
        try:
            with response:
                body: bytes = response.raw.read(decode_content=True)
        except urllib3.exceptions.DecodeError as e:
            raise QueryError(f"answer from {self.url} does not decode: {_root_cause(e)}") from e
        except urllib3.exceptions.ReadTimeoutError as e:
            raise PrometheusUnavailable(
                f"{self.url} stopped sending its answer: no data within {self.timeout_s:g} s"
            ) from e
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise PrometheusUnavailable(f"reading the answer from {self.url} failed: {_root_cause(e)}") from e
        if response.status_code != 200:
            raise _http_error(self.url, response.status_code, f"HTTP Status Code {response.status_code} ({body!r})")
        return body

    def _digest(self, query: Query, body: bytes, index: PodIndex) -> Digest:
        """Worker thread: decode and reduce one answer; its elements are garbage as soon as this returns. A
        per-pod answer goes through the series cache (`SeriesCache`) when it can."""
        with self._gc_pause():
            return digest_body(self._series, query, body, index, self.url)

    def _join(
        self, models: Sequence[ModelQuery], outcomes: Sequence[tuple[Query, Digest | SourceError]], index: PodIndex
    ) -> Collection:
        with self._gc_pause():
            return join(models, outcomes, index)

    def pod_index(self, pod_variants: Mapping[PodKey, str]) -> PodIndex:
        """The index of these pods: the previous cycle's when the pods are the same (the common case)."""
        cached = self._index
        if cached is not None and cached[0] == pod_variants:
            return cached[1]
        index = PodIndex.of(pod_variants)
        self._index = (dict(pod_variants), index)
        return index

    async def collect(self, models: Sequence[ModelQuery], pod_variants: Mapping[tuple[str, str], str]) -> Collection:
        """One cycle: every query of `build_queries(models)`, assembled per pod and per model.

        `pod_variants` maps (namespace, pod) to the VA whose scale target owns the pod; samples of other
        pods are dropped as `unknown-pod`.
        """
        started = time.monotonic()
        queries = build_queries(
            models, windows=self.windows, max_query_bytes=self.max_query_bytes, metrics=self.metrics
        )
        if not queries:
            return Collection(duration_s=time.monotonic() - started)
        index = self.pod_index(pod_variants)
        if self._closed:
            closed = PrometheusUnavailable("the Prometheus collector is closed")
            return join(models, [(q, closed) for q in queries], index)
        loop = asyncio.get_running_loop()
        gate = asyncio.Semaphore(self.max_concurrency)
        held = asyncio.Semaphore(BODIES_HELD)
        down: list[PrometheusUnavailable] = []

        async def run(query: Query) -> Digest | SourceError:
            async with gate:
                if down:  # fail fast: do not queue more requests behind a dead or hung Prometheus
                    return PrometheusUnavailable(f"not sent, Prometheus is unavailable this cycle: {down[0]}")
                try:
                    response = await self._in_thread(self._send, query.promql)
                except PrometheusUnavailable as e:
                    down.append(e)
                    return e
                except SourceError as e:
                    return e
                handed = False
                try:
                    async with held:  # `BODIES_HELD`: a body is read when there is room for it
                        handed = True
                        return await receive_and_digest(query, response)
                finally:
                    if not handed:  # cancelled while waiting: its connection is not left checked out
                        response.close()

        async def receive_and_digest(query: Query, response: requests.Response) -> Digest | SourceError:
            try:
                body = await self._in_thread(self._receive, response)
            except PrometheusUnavailable as e:
                down.append(e)
                return e
            except SourceError as e:
                return e
            try:  # one at a time (`_digester`): one decoded answer alive at once
                return await loop.run_in_executor(self._digester, self._digest, query, body, index)
            except SourceError as e:
                return e

        outcomes = await asyncio.gather(*(run(q) for q in queries))
        # Joining is CPU work proportional to the pods (~0.1 s at 10,000): off the event loop the servers share.
        collection = await loop.run_in_executor(
            self._digester, self._join, models, list(zip(queries, outcomes, strict=True)), index
        )
        collection = replace(collection, duration_s=time.monotonic() - started)
        if collection.errors:
            log.warning(
                "prometheus collection: %d of %d queries failed (available=%s, %d models unavailable): %s",
                len(collection.errors),
                len(queries),
                collection.available,
                len(collection.unavailable_models),
                collection.errors[0],
            )
        return collection


def _root_cause(e: BaseException) -> str:
    """The innermost cause (e.g. `ConnectionRefusedError: [Errno 111] Connection refused`), not the
    `HTTPConnectionPool(...): Max retries exceeded with url: <the whole query>` wrapper text."""
    seen: list[BaseException] = [e]
    cur: BaseException | None = e
    while cur is not None and len(seen) < 10:
        nxt = cur.__cause__ or cur.__context__ or getattr(cur, "reason", None)
        if not isinstance(nxt, BaseException) or nxt in seen:
            break
        seen.append(nxt)
        cur = nxt
    root = seen[-1]
    return error_text(root).split(": Max retries exceeded")[0]


_STATUS = re.compile(r"HTTP Status Code (\d{3})")


def _http_error(url: str, status: int, text: str) -> SourceError:
    """A non-200 answer: 503 (not ready, overloaded) means Prometheus is unavailable; anything else is this
    query's problem (400/422 a bad query or a timeout Prometheus enforced, 500 an evaluation error)."""
    text = text if len(text) <= ERROR_TEXT_LIMIT else text[: ERROR_TEXT_LIMIT - 1] + "…"
    if status == 503:
        return PrometheusUnavailable(f"{url} answered {text}")
    return QueryError(f"{url} answered {text}")
