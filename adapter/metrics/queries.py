"""PromQL for one collection cycle: seed 001's registered queries, rendered for every model at once.

Why one query per metric for all models
---------------------------------------
Upstream WVA renders each template per model (`{namespace="ns",model_name="m"}`), so a cycle costs
models × 12 queries: 330 models make ~4,000 queries every 30 s. Here each metric is asked **once per cycle**
and grouped `by (namespace, model_name, pod)`; the collector splits the answer by model. The request count is
the exception: it is asked once per *distinct retention period*, because the window is part of the query.

Trade-offs, stated:

* + Query load is constant in the number of models (14 + one per retention period), so Prometheus load and
  cycle latency do not grow with the fleet; the answer grows linearly with the pods, as it must.
* − A failed query fails that metric for every model it covers at once (one 500 on the KV query makes every
  model unavailable this cycle, where upstream would lose one model). Prometheus errors are rarely
  per-model, so the coarser failure domain costs little, and the fallback hierarchy holds the models.
* − One large query is slower than each small one and its answer carries series of models we do not manage
  when the selector is left out (see below); the collector drops those ("unknown-model").

The selector: vLLM series are restricted with anchored regexes, `namespace=~"ns1|ns2",model_name=~"m1|m2"`,
built from the distinct namespaces and model ids. That matches the cross product (ns1 × m2 even if only ns2
serves m2); the collector drops the extra series. The query travels in the URL (prometheus_api_client
sends GET-style parameters even for POST), and proxies in front of Prometheus commonly cap a request line
at 8 KB (nginx's default header buffers, aiohttp's 8,190 bytes). So each query is built with the
narrowest selector whose URL-encoded text fits `max_query_bytes` (default 6,000): namespaces and models,
else namespaces only, else none, trading a larger answer for a request every proxy accepts. At 334
models (1,000 VAs) the model regex no longer fits and the queries select by namespace. EPP flow-control
series carry no usable namespace/model filter before their model label is normalised (below), and are few
(models × fairness ids × EPP replicas), so they are not filtered.

Metric names: current vLLM names first, the deprecated ones as `or` fall-backs (DESIGN §4):
`vllm:kv_cache_usage_perc` / `vllm:gpu_cache_usage_perc`; `vllm:inter_token_latency_seconds` /
`vllm:time_per_output_token_seconds`; counters with `_total` / without (llm-d-inference-sim and some
exporters), and `vllm:gpu_prefix_cache_*` (deprecated in vLLM 0.9). `A or B` keeps B's elements only where
A has none with the same labels (the metric name is ignored), so the fall-back must be applied at the
level where one element is one source: per pod for the per-pod queries, and per *series*, inside the sum,
for the model-level ones (request count, EPP queue, dispatch). `sum(A) or sum(B)` would silently drop the
pods still on the old names as soon as one pod of the model has the new ones (a rolling upgrade).
EPP metrics: `llm_d_epp_*` (llm-d router) first, `inference_extension_*` (GAIE) as the fall-back.

Label normalisation in PromQL (so `or` can deduplicate server-side):

* EPP series name the model in `target_model_name`, or only in `model_name` when no rewrite target is set
  (upstream's `... or ...{model_name=X,target_model_name=""}`). Two `label_replace` calls put the effective
  model (target, else model_name) into the synthetic label `wva_model_id`, and the sums group by it. Unlike
  upstream, a model's queue is the *sum* of both kinds of series (upstream ignores the untargeted ones as
  soon as one targeted series exists).
* `llm_d_epp_scheduler_attempts_total` names the vLLM endpoint `endpoint_name`; it is moved to `pod_name`,
  the legacy label, before the `or`.

Both `or` properties (the metric name is ignored; an EPP exposing both families counts once) are checked
against a real Prometheus in tests/e2e_prometheus.

Latency histograms (issue 18: attainment from bucket counts, research/predictive-scaling.md §3, §4) are asked
per *model*, never per pod: `sum by (namespace, model_name, le) (rate(<histogram>_bucket{…}[W]))`, W =
`QueryWindows.latency_histogram_s` (5 minutes, the practices doc's window; a 30 s loop sees a few requests per
pod per window otherwise). The answer is one series per model and bucket edge whatever the number of pods:
23 for TTFT (22 default edges + `+Inf`) and 20 for TPOT (19 + `+Inf`), so 43 per model per cycle, 14,362 at
334 models (1,000 VAs); more with `--custom-histogram-buckets` (one per extra edge) or where pods of one model
use different edges (their union). Prometheus reads pods × edges series to compute it, as for any `rate`.
The names, from vLLM's current metric list (research §3.1–§3.3):

* `vllm:time_to_first_token_seconds` (TTFT, from the request's arrival at the vLLM frontend to its first
  token: queueing in the pod included), never renamed.
* `vllm:request_time_per_output_token_seconds`: one observation per finished request, (last token − first
  token) / (output tokens − 1), 0 for a request of <= 1 output token. It matches an SLO on a request's mean
  inter-token latency ("this request's ITL <= x"), the way the simulator and DESIGN §3.3 score `itl_ms`.
  `vllm:inter_token_latency_seconds` is *not* used: it observes every gap between two tokens (a per-token
  fraction that weights long answers more).
* Fall-back, per source: `vllm:time_per_output_token_seconds`, the name of the per-token histogram before
  vLLM 0.11 (deprecated there, hidden in 0.12, removed after), for pods of releases that do not expose the
  per-request one. On such pods the fraction is per token, an approximation of the per-request one. The
  fall-back is `A or ignoring (le) B` inside the sum: B's series of a pod are dropped as soon as the pod has
  *any* A series, so a pod exposing both (0.11) counts once even if the two use different bucket edges, and a
  model whose pods are half upgraded counts all of them.

Escaping: label values are PromQL double-quoted strings (backslash, quote and control characters escaped);
regex alternatives are additionally RE2-escaped first, so a model id like `Qwen/Qwen2.5-7B` matches itself
only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import partial

from adapter.domain.cluster import ModelQuery
from adapter.domain.ids import ModelKey

POD_GROUP = "namespace, model_name, pod, pod_name"
"""Per-pod grouping of vLLM series. `pod` is added by the scrape (target label); `pod_name` is the fall-back."""
MODEL_GROUP = "namespace, model_name"
HISTOGRAM_GROUP = "namespace, model_name, le"
"""Model-level grouping of histogram buckets: one series per model and bucket edge."""
EPP_MODEL_LABEL = "wva_model_id"
"""Synthetic label holding an EPP series' effective model: `target_model_name`, else `model_name`."""
EPP_MODEL_GROUP = f"namespace, {EPP_MODEL_LABEL}"
DISPATCH_GROUP = f"namespace, pod_name, {EPP_MODEL_LABEL}"
DEFAULT_MAX_QUERY_BYTES = 6000
"""URL-encoded PromQL per request: under the 8 KB request-line limit of common proxies, with room for the rest."""


class QueryName(StrEnum):
    """Seed 001's query names, and ours (the two latency histograms); the collector reports failures under these."""

    KV_CACHE_USAGE = "kv_cache_usage"
    QUEUE_LENGTH = "queue_length"
    RUNNING_REQUESTS = "num_requests_running"
    CACHE_CONFIG_INFO = "cache_config_info"
    AVG_INPUT_TOKENS = "avg_input_tokens"
    AVG_OUTPUT_TOKENS = "avg_output_tokens"
    PREFIX_CACHE_HIT_RATE = "prefix_cache_hit_rate"
    AVG_TTFT = "avg_ttft"
    AVG_ITL = "avg_itl"
    TTFT_HISTOGRAM = "ttft_histogram"
    TPOT_HISTOGRAM = "tpot_histogram"
    DISPATCH_RATE = "scheduler_dispatch_rate"
    EPP_QUEUE_SIZE = "scheduler_queue_size"
    EPP_QUEUE_BYTES = "scheduler_queue_bytes"
    REQUEST_COUNT = "model_request_count"


ESSENTIAL_QUERIES = frozenset({QueryName.KV_CACHE_USAGE, QueryName.QUEUE_LENGTH})
"""A model whose essential query failed is unavailable this cycle (the saturation analyzer needs both)."""
ALL_QUERIES = frozenset(QueryName)
FIELDS: Mapping[QueryName, frozenset[str]] = {
    QueryName.KV_CACHE_USAGE: frozenset({"kv_cache_usage"}),
    QueryName.QUEUE_LENGTH: frozenset({"queue_length"}),
    QueryName.RUNNING_REQUESTS: frozenset({"running_requests"}),
    QueryName.CACHE_CONFIG_INFO: frozenset({"num_gpu_blocks", "block_size", "tokens_in_use"}),
    QueryName.AVG_INPUT_TOKENS: frozenset({"avg_input_tokens"}),
    QueryName.AVG_OUTPUT_TOKENS: frozenset({"avg_output_tokens"}),
    QueryName.PREFIX_CACHE_HIT_RATE: frozenset({"prefix_cache_hit_rate"}),
    QueryName.AVG_TTFT: frozenset({"avg_ttft_s"}),
    QueryName.AVG_ITL: frozenset({"avg_itl_s"}),
    QueryName.TTFT_HISTOGRAM: frozenset({"latency"}),
    QueryName.TPOT_HISTOGRAM: frozenset({"latency"}),
    QueryName.DISPATCH_RATE: frozenset({"arrival_rate_rps"}),
    QueryName.EPP_QUEUE_SIZE: frozenset({"epp_queue_size"}),
    QueryName.EPP_QUEUE_BYTES: frozenset({"epp_queue_bytes"}),
    QueryName.REQUEST_COUNT: frozenset({"request_count"}),
}
"""The `PodMetrics` and `ModelTraffic` fields each query fills (`tokens_in_use` with the KV usage, an essential
query); `ModelQuery.reads` names fields, `reading` turns them into queries."""


def reading(models: Iterable[ModelQuery]) -> frozenset[QueryName]:
    """The queries that fill some field a model reads (`ModelQuery.reads`), the essential ones always; every query
    when a model reads every field (reads None). Example: models reading {kv_cache_usage, queue_length,
    request_count} (V1) → KV_CACHE_USAGE, QUEUE_LENGTH and REQUEST_COUNT, three queries of fifteen."""
    fields: set[str] = set()
    for model in models:
        if model.reads is None:
            return ALL_QUERIES
        fields |= model.reads
    return frozenset(name for name, filled in FIELDS.items() if filled & fields) | ESSENTIAL_QUERIES


HISTOGRAM_QUERIES = frozenset({QueryName.TTFT_HISTOGRAM, QueryName.TPOT_HISTOGRAM})
"""Model-level latency histograms: what an attainment-aware analyzer reads (`ModelTraffic.latency`)."""


@dataclass(frozen=True, slots=True)
class QueryWindows:
    """Range-vector windows, seconds. Defaults are upstream's; tests shorten them to see changes quickly."""

    saturation_s: float = 60.0
    """`max_over_time` of KV usage and queue length."""
    tokens_s: float = 300.0
    """Average input/output tokens and prefix-cache hit rate."""
    latency_s: float = 60.0
    """Average TTFT and ITL."""
    dispatch_s: float = 60.0
    """EPP dispatch (arrival) rate."""
    latency_histogram_s: float = 300.0
    """`rate()` range of the TTFT and TPOT bucket queries (attainment per model)."""

    def __post_init__(self) -> None:
        for name in ("saturation_s", "tokens_s", "latency_s", "dispatch_s", "latency_histogram_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"QueryWindows.{name} must be a positive finite number of seconds, got {value!r}")


@dataclass(frozen=True, slots=True)
class Query:
    """One PromQL query of a cycle and the models whose answer it carries."""

    name: QueryName
    promql: str
    models: frozenset[ModelKey]
    retention_s: float | None = None
    """The window of a request-count query; None for the others."""
    window_s: float | None = None
    """The `rate()` range of a latency-histogram query (the histograms carry it); None for the others."""

    def __post_init__(self) -> None:
        if self.name in HISTOGRAM_QUERIES and not (self.window_s is not None and self.window_s > 0):
            raise ValueError(f"the {self.name} query needs its rate() window (window_s > 0), got {self.window_s!r}")

    @property
    def essential(self) -> bool:
        return self.name in ESSENTIAL_QUERIES


# ------------------------------------------------------------------------------------------ escaping


_RE2_META = frozenset("\\.+*?()|[]{}^$")
_STRING_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_label_value(value: str) -> str:
    """The body of a PromQL double-quoted string: `a"b\\c` → `a\\"b\\\\c` (upstream escapes `\\` and `"`;
    newline, CR and tab are escaped too, since a raw newline ends nothing and breaks the lexer)."""
    return "".join(_STRING_ESCAPES.get(ch, ch) for ch in value)


def escape_regex(value: str) -> str:
    """RE2-escape a literal so it matches itself only: `llama-3.1` → `llama-3\\.1`."""
    return "".join("\\" + ch if ch in _RE2_META else ch for ch in value)


def regex_alternatives(values: Iterable[str]) -> str:
    """Sorted, de-duplicated alternation of literals (PromQL anchors regex matchers on both ends)."""
    return "|".join(escape_regex(v) for v in sorted(set(values)))


def duration(seconds: float) -> str:
    """A PromQL duration: 600 → `10m`, 3600 → `1h`, 90 → `90s`, 0.5 → `500ms`."""
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"a PromQL duration must be positive and finite, got {seconds!r}")
    millis = round(seconds * 1000)
    if millis <= 0:
        raise ValueError(f"a PromQL duration must be at least 1ms, got {seconds!r}")
    if millis % 1000:
        return f"{millis}ms"
    whole = millis // 1000
    if whole % 3600 == 0:
        return f"{whole // 3600}h"
    if whole % 60 == 0:
        return f"{whole // 60}m"
    return f"{whole}s"


def selector(matchers: Sequence[str]) -> str:
    """`{a="b",c=~"d"}`, or the empty string when there are no matchers (the bare metric name)."""
    return "{" + ",".join(matchers) + "}" if matchers else ""


def _matcher(label: str, values: set[str]) -> list[str]:
    if not values:
        return []
    if len(values) == 1:
        return [f'{label}="{escape_label_value(next(iter(values)))}"']
    return [f'{label}=~"{escape_label_value(regex_alternatives(values))}"']


def model_matchers(models: Iterable[ModelKey]) -> list[str]:
    """Matchers restricting vLLM series to `models` (namespace and model_name regexes; see module doc).

    A single value is matched exactly (`=`), which Prometheus answers from its index without a regex.
    """
    keys = list(models)
    return _matcher("namespace", {k.namespace for k in keys}) + _matcher("model_name", {k.model_id for k in keys})


def namespace_matchers(models: Iterable[ModelKey]) -> list[str]:
    """The namespace matcher of `model_matchers` alone."""
    return _matcher("namespace", {k.namespace for k in models})


def encoded_length(promql: str) -> int:
    """Bytes the query takes in a URL (`query=` parameter value): `len(quote_plus(promql))`, counted instead of
    built (`quote_plus` quotes byte by byte in Python: 0.1 s a cycle at 10,000 VAs, whose model regexes are
    long). UTF-8 bytes; a space becomes "+", a byte outside `_URL_SAFE` "%XX". Example: 'a b{"x"}' ⇒ 3 safe
    bytes, 1 space, 4 quoted ⇒ 3 + 1 + 12 = 16."""
    raw = promql.encode()
    quoted = raw.translate(None, _URL_SAFE)  # the bytes quote_plus does not keep as they are
    return len(raw) + 2 * (len(quoted) - quoted.count(b" "))


_URL_SAFE = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~"
"""What `quote_plus` leaves unquoted (urllib.parse's always-safe set; `safe` is empty)."""


def fit(build: Callable[[Sequence[str]], str], candidates: Sequence[Sequence[str]], *, max_query_bytes: int) -> str:
    """The query built with the first (narrowest) matcher list whose URL-encoded form fits, else unfiltered."""
    for matchers in candidates:
        promql = build(matchers)
        if encoded_length(promql) <= max_query_bytes:
            return promql
    return build([])


# ------------------------------------------------------------------------------------------ builders


def _first_of(*alternatives: str) -> str:
    return " or ".join(alternatives)


def _with(matchers: Sequence[str], *extra: str) -> str:
    return selector([*extra, *matchers])


def kv_cache_usage(matchers: Sequence[str], *, window_s: float = 60.0) -> str:
    """Max KV-cache usage (0–1) per pod over the window; current name, then the pre-0.9 one."""
    sel, win = selector(matchers), duration(window_s)
    return _first_of(
        f"max by ({POD_GROUP}) (max_over_time(vllm:kv_cache_usage_perc{sel}[{win}]))",
        f"max by ({POD_GROUP}) (max_over_time(vllm:gpu_cache_usage_perc{sel}[{win}]))",
    )


def queue_length(matchers: Sequence[str], *, window_s: float = 60.0) -> str:
    """Max waiting requests per pod over the window."""
    return f"max by ({POD_GROUP}) (max_over_time(vllm:num_requests_waiting{selector(matchers)}[{duration(window_s)}]))"


def running_requests(matchers: Sequence[str]) -> str:
    """Requests in the running batch per pod, now (summed over data-parallel engines)."""
    return f"sum by ({POD_GROUP}) (vllm:num_requests_running{selector(matchers)})"


def cache_config_info(matchers: Sequence[str]) -> str:
    """The KV cache geometry, read from the info metric's `num_gpu_blocks` and `block_size` labels."""
    return f"max by ({POD_GROUP}, num_gpu_blocks, block_size) (vllm:cache_config_info{selector(matchers)})"


def _histogram_mean(metric: str, matchers: Sequence[str], window_s: float) -> str:
    sel, win = selector(matchers), duration(window_s)
    return f"max by ({POD_GROUP}) (rate({metric}_sum{sel}[{win}]) / rate({metric}_count{sel}[{win}]))"


def avg_input_tokens(matchers: Sequence[str], *, window_s: float = 300.0) -> str:
    return _histogram_mean("vllm:request_prompt_tokens", matchers, window_s)


def avg_output_tokens(matchers: Sequence[str], *, window_s: float = 300.0) -> str:
    return _histogram_mean("vllm:request_generation_tokens", matchers, window_s)


def avg_ttft(matchers: Sequence[str], *, window_s: float = 60.0) -> str:
    return _histogram_mean("vllm:time_to_first_token_seconds", matchers, window_s)


def avg_itl(matchers: Sequence[str], *, window_s: float = 60.0) -> str:
    """Mean inter-token latency; `time_per_output_token_seconds` is its deprecated alias (hidden in 0.12)."""
    return _first_of(
        _histogram_mean("vllm:inter_token_latency_seconds", matchers, window_s),
        _histogram_mean("vllm:time_per_output_token_seconds", matchers, window_s),
    )


def _bucket_rates(metric: str, matchers: Sequence[str], window_s: float) -> str:
    return f"rate({metric}_bucket{selector(matchers)}[{duration(window_s)}])"


def ttft_histogram(matchers: Sequence[str], *, window_s: float = 300.0) -> str:
    """Cumulative TTFT bucket rates per model and edge, summed over its pods (see module doc)."""
    rates = _bucket_rates("vllm:time_to_first_token_seconds", matchers, window_s)
    return f"sum by ({HISTOGRAM_GROUP}) ({rates})"


def tpot_histogram(matchers: Sequence[str], *, window_s: float = 300.0) -> str:
    """Cumulative per-request TPOT bucket rates per model and edge; the deprecated per-token histogram for the
    pods that lack it, chosen per source (`or ignoring (le)`, see module doc)."""
    current = _bucket_rates("vllm:request_time_per_output_token_seconds", matchers, window_s)
    deprecated = _bucket_rates("vllm:time_per_output_token_seconds", matchers, window_s)
    return f"sum by ({HISTOGRAM_GROUP}) ({current} or ignoring (le) {deprecated})"


def prefix_cache_hit_rate(matchers: Sequence[str], *, window_s: float = 300.0) -> str:
    """Hit tokens / queried tokens. Upstream queries the bare names, which vLLM (prometheus_client) never
    exposes: counters there always end in `_total`. The bare and the `gpu_` names are the fall-backs."""
    sel, win = selector(matchers), duration(window_s)
    return _first_of(
        *(
            f"max by ({POD_GROUP}) (rate({hits}{sel}[{win}]) / rate({queries}{sel}[{win}]))"
            for hits, queries in (
                ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
                ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries"),
                ("vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"),
            )
        )
    )


def request_count(matchers: Sequence[str], *, retention_s: float) -> str:
    """Successful requests per model over the retention window (scale-to-zero's input).

    The fall-back is applied per series, *inside* the sum: a model whose pods run different vLLM versions
    (one exposing `_total`, one the bare name) counts every pod, where `sum(A) or sum(B)` would drop B's pods.
    """
    sel, win = selector(matchers), duration(retention_s)
    return (
        f"sum by ({MODEL_GROUP}) (increase(vllm:request_success_total{sel}[{win}])"
        f" or increase(vllm:request_success{sel}[{win}]))"
    )


def _effective_model(expr: str) -> str:
    """Copy `model_name`, then overwrite with a non-empty `target_model_name`, into a *new* label: rewriting
    `model_name` in place would collide (and fail the query) when two aliases share one target."""
    inner = f'label_replace({expr}, "{EPP_MODEL_LABEL}", "$1", "model_name", "(.*)")'
    return f'label_replace({inner}, "{EPP_MODEL_LABEL}", "$1", "target_model_name", "(.+)")'


def epp_queue(kind: str) -> str:
    """EPP flow-control queue (`kind` = `size` or `bytes`) per namespace and effective model.

    `new or legacy` is taken per series before summing (`or` ignores the metric name), so an EPP exposing both
    families counts once and a pool whose replicas run different EPP versions counts every replica. No
    namespace label exists on the metric itself (GAIE #2309); `namespace` here is the scrape target's.
    """
    if kind not in ("size", "bytes"):
        raise ValueError(f"epp_queue kind must be 'size' or 'bytes', got {kind!r}")
    series = f"llm_d_epp_flow_control_queue_{kind} or inference_extension_flow_control_queue_{kind}"
    return f"sum by ({EPP_MODEL_GROUP}) ({_effective_model(series)})"


def dispatch_rate(namespace_matchers: Sequence[str], *, window_s: float = 60.0) -> str:
    """Successful scheduling decisions per second per vLLM endpoint pod: the per-pod arrival rate.

    The llm-d router's `endpoint_name` is moved to `pod_name` (and removed) before the per-series `or`, so the
    two families' series of one EPP have equal labels and count once.
    """
    sel = _with(namespace_matchers, 'status="success"')
    win = duration(window_s)
    rate_new = f"rate(llm_d_epp_scheduler_attempts_total{sel}[{win}])"
    moved = f'label_replace({rate_new}, "pod_name", "$1", "endpoint_name", "(.+)")'
    new = f'label_replace({moved}, "endpoint_name", "", "endpoint_name", ".*")'
    legacy = f"rate(inference_extension_scheduler_attempts_total{sel}[{win}])"
    return f"sum by ({DISPATCH_GROUP}) ({_effective_model(f'{new} or {legacy}')})"


def build_queries(
    models: Sequence[ModelQuery],
    *,
    windows: QueryWindows | None = None,
    max_query_bytes: int = DEFAULT_MAX_QUERY_BYTES,
    metrics: Iterable[QueryName] | None = None,
) -> tuple[Query, ...]:
    """The queries of one cycle for `models`: one per metric some model reads (`reading`: what its decision reads,
    `ModelQuery.reads`) and `metrics` admits (default: all 14), plus one request count per distinct retention
    period.

    `metrics` lets the caller restrict the queries further; the essential queries are always included. Empty
    `models` gives no queries. The order is stable (essential queries first), so logs and tests can rely on it.
    """
    if not models:
        return ()
    wanted = reading(models) & (ALL_QUERIES if metrics is None else frozenset(metrics) | ESSENTIAL_QUERIES)
    win = windows or QueryWindows()
    keys = frozenset(m.key for m in models)
    narrow = (model_matchers(keys), namespace_matchers(keys))
    vllm: tuple[tuple[QueryName, Callable[[Sequence[str]], str]], ...] = (
        (QueryName.KV_CACHE_USAGE, lambda m: kv_cache_usage(m, window_s=win.saturation_s)),
        (QueryName.QUEUE_LENGTH, lambda m: queue_length(m, window_s=win.saturation_s)),
        (QueryName.RUNNING_REQUESTS, running_requests),
        (QueryName.CACHE_CONFIG_INFO, cache_config_info),
        (QueryName.AVG_INPUT_TOKENS, lambda m: avg_input_tokens(m, window_s=win.tokens_s)),
        (QueryName.AVG_OUTPUT_TOKENS, lambda m: avg_output_tokens(m, window_s=win.tokens_s)),
        (QueryName.PREFIX_CACHE_HIT_RATE, lambda m: prefix_cache_hit_rate(m, window_s=win.tokens_s)),
        (QueryName.AVG_TTFT, lambda m: avg_ttft(m, window_s=win.latency_s)),
        (QueryName.AVG_ITL, lambda m: avg_itl(m, window_s=win.latency_s)),
    )
    out = [
        Query(name, fit(build, narrow, max_query_bytes=max_query_bytes), keys) for name, build in vllm if name in wanted
    ]
    histograms: tuple[tuple[QueryName, Callable[[Sequence[str]], str]], ...] = (
        (QueryName.TTFT_HISTOGRAM, partial(ttft_histogram, window_s=win.latency_histogram_s)),
        (QueryName.TPOT_HISTOGRAM, partial(tpot_histogram, window_s=win.latency_histogram_s)),
    )
    out += [
        Query(name, fit(build, narrow, max_query_bytes=max_query_bytes), keys, window_s=win.latency_histogram_s)
        for name, build in histograms
        if name in wanted
    ]
    if QueryName.DISPATCH_RATE in wanted:
        build = partial(dispatch_rate, window_s=win.dispatch_s)
        out.append(Query(QueryName.DISPATCH_RATE, fit(build, narrow[1:], max_query_bytes=max_query_bytes), keys))
    for name, kind in ((QueryName.EPP_QUEUE_SIZE, "size"), (QueryName.EPP_QUEUE_BYTES, "bytes")):
        if name in wanted:
            out.append(Query(name, epp_queue(kind), keys))
    if QueryName.REQUEST_COUNT not in wanted:
        return tuple(out)
    by_retention: dict[float, set[ModelKey]] = {}
    for m in models:
        by_retention.setdefault(m.retention_s, set()).add(m.key)
    for retention_s, group in sorted(by_retention.items()):
        promql = fit(
            partial(request_count, retention_s=retention_s),
            (model_matchers(group), namespace_matchers(group)),
            max_query_bytes=max_query_bytes,
        )
        out.append(Query(QueryName.REQUEST_COUNT, promql, frozenset(group), retention_s=retention_s))
    return tuple(out)
