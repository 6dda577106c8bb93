"""The collector's parse path as it was before issue 22 (dicts from `json`, columns keyed by (namespace, pod)),
kept as the reference the optimised one must agree with (tests/metrics/test_collector_reference.py).

Copied from adapter/metrics/collector.py at the merge of issue-18-infra (latency histograms included); only the
imports and this docstring differ. Do not optimise it: its value is that it is the old, obviously-correct code.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from adapter.domain.cluster import Collection, ModelQuery
from adapter.domain.errors import QueryError, SourceError
from adapter.domain.ids import ModelKey
from adapter.domain.latency import LatencyHistogram, ModelLatency
from adapter.domain.snapshot import ModelTraffic, PodMetrics
from adapter.metrics.queries import EPP_MODEL_LABEL, Query, QueryName

ERROR_TEXT_LIMIT = 300
PodKey = tuple[str, str]
Column = dict[PodKey, float]


def _short(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    return text if len(text) <= ERROR_TEXT_LIMIT else text[: ERROR_TEXT_LIMIT - 1] + "…"


# ------------------------------------------------------------------------------------------ assembly


_POD_FIELD = {
    QueryName.KV_CACHE_USAGE: "kv_cache_usage",
    QueryName.QUEUE_LENGTH: "queue_length",
    QueryName.RUNNING_REQUESTS: "running_requests",
    QueryName.AVG_INPUT_TOKENS: "avg_input_tokens",
    QueryName.AVG_OUTPUT_TOKENS: "avg_output_tokens",
    QueryName.PREFIX_CACHE_HIT_RATE: "prefix_cache_hit_rate",
    QueryName.AVG_TTFT: "avg_ttft_s",
    QueryName.AVG_ITL: "avg_itl_s",
    QueryName.DISPATCH_RATE: "arrival_rate_rps",
}
_MODEL_FIELD = {
    QueryName.REQUEST_COUNT: "request_count",
    QueryName.EPP_QUEUE_SIZE: "epp_queue_size",
    QueryName.EPP_QUEUE_BYTES: "epp_queue_bytes",
}
_HISTOGRAM_FIELD = {QueryName.TTFT_HISTOGRAM: "ttft", QueryName.TPOT_HISTOGRAM: "tpot"}
_UPPER_BOUND = {QueryName.PREFIX_CACHE_HIT_RATE: 1.0}
_INF = math.inf
_MALFORMED = (AttributeError, IndexError, KeyError, TypeError, ValueError)
"""What reading a malformed vector element raises (a non-dict `metric`, a short `value`, a non-number)."""


def _value_problem(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    if value < 0:
        return "negative"
    return "out-of-range"


def _int_label(text: str | None) -> int | None:
    try:
        value = int(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and value >= 0 else None


@dataclass(frozen=True, slots=True)
class Digest:
    """One answer reduced to what the Collection needs. Built in the worker thread right after decoding, so
    the raw JSON (a few MB per query at 1,000 VAs) is freed at once instead of waiting for every answer."""

    query: Query
    column: Column | None = None
    """A per-pod metric by (namespace, pod)."""
    geometry: Mapping[PodKey, tuple[int, int]] | None = None
    """cache_config_info: (num_gpu_blocks, block_size) by (namespace, pod)."""
    traffic: Mapping[ModelKey, float] | None = None
    """A model-level value (request count, EPP queue) by model."""
    histograms: Mapping[ModelKey, LatencyHistogram] | None = None
    """A latency histogram (TTFT or TPOT buckets) by model."""
    dropped: Mapping[str, int] = field(default_factory=dict)


def digest(query: Query, result: Sequence[Any], pod_variants: Mapping[PodKey, str]) -> Digest:
    """Reduce one raw `data.result` list. All or nothing: a malformed element raises QueryError.

    Pure (no I/O); safe in any thread as long as `pod_variants` is not mutated meanwhile.
    """
    drops: Counter[str] = Counter()
    try:
        if query.name is QueryName.CACHE_CONFIG_INFO:
            return Digest(query, geometry=_geometry(query, result, pod_variants, drops), dropped=drops)
        if query.name in _MODEL_FIELD:
            return Digest(query, traffic=_model_values(query, result, drops), dropped=drops)
        if query.name in _HISTOGRAM_FIELD:
            return Digest(query, histograms=_histograms(query, result, drops), dropped=drops)
        return Digest(query, column=_column(query, result, pod_variants, drops), dropped=drops)
    except _MALFORMED as e:
        raise QueryError(f"malformed vector element in the answer: {_short(e)}") from e


def _column(query: Query, result: Sequence[Any], pod_variants: Mapping[PodKey, str], drops: Counter[str]) -> Column:
    """The hot loop (10,000 elements per query at 1,000 VAs): local names, tuples, no per-sample objects."""
    dispatch = query.name is QueryName.DISPATCH_RATE
    model_label = EPP_MODEL_LABEL if dispatch else "model_name"
    upper = _UPPER_BOUND.get(query.name, _INF)
    wanted = {(k.namespace, k.model_id) for k in query.models}
    column: Column = {}
    for item in result:
        get = item["metric"].get
        namespace = get("namespace", "")
        # Dispatch series belong to the EPP's pod; the vLLM endpoint is `pod_name` only.
        pod = get("pod_name", "") if dispatch else (get("pod") or get("pod_name", ""))
        model = get(model_label, "")
        value = float(item["value"][1])
        if not pod or not model:
            drops["missing-label"] += 1
        elif (namespace, model) not in wanted:
            drops["unknown-model"] += 1
        elif (key := (namespace, pod)) not in pod_variants:
            drops["unknown-pod"] += 1
        elif not 0.0 <= value < _INF or value > upper:
            drops[_value_problem(value)] += 1
        elif (old := column.get(key)) is None:
            column[key] = value
        else:  # several series of one pod (e.g. one per LoRA adapter's model_name): max, or sum for rates
            column[key] = old + value if dispatch else max(old, value)
    return column


def _geometry(
    query: Query, result: Sequence[Any], pod_variants: Mapping[PodKey, str], drops: Counter[str]
) -> dict[PodKey, tuple[int, int]]:
    """cache_config_info: the value is 1; the geometry is in the `num_gpu_blocks` / `block_size` labels."""
    out: dict[PodKey, tuple[int, int]] = {}
    wanted = {(k.namespace, k.model_id) for k in query.models}
    ints: dict[str | None, int | None] = {}  # the label values repeat ("16", "30000"): parse each once
    for item in result:
        labels = item["metric"]
        namespace = labels.get("namespace", "")
        pod = labels.get("pod") or labels.get("pod_name", "")
        model = labels.get("model_name", "")
        float(item["value"][1])
        if not pod or not model:
            drops["missing-label"] += 1
            continue
        if (namespace, model) not in wanted:
            drops["unknown-model"] += 1
            continue
        raw_blocks, raw_size = labels.get("num_gpu_blocks"), labels.get("block_size")
        if raw_blocks not in ints:
            ints[raw_blocks] = _int_label(raw_blocks)
        if raw_size not in ints:
            ints[raw_size] = _int_label(raw_size)
        blocks, size = ints[raw_blocks], ints[raw_size]
        if blocks is None or size is None:
            drops["invalid-label"] += 1
        elif (namespace, pod) not in pod_variants:
            drops["unknown-pod"] += 1
        else:
            old_blocks = out.get((namespace, pod), (0, 0))[0]
            out[(namespace, pod)] = (max(blocks, old_blocks), size)
    return out


def _model_values(query: Query, result: Sequence[Any], drops: Counter[str]) -> dict[ModelKey, float]:
    epp = query.name is not QueryName.REQUEST_COUNT
    by_model_id: dict[str, list[ModelKey]] = {}
    for key in sorted(query.models):
        by_model_id.setdefault(key.model_id, []).append(key)
    out: dict[ModelKey, float] = {}
    for item in result:
        labels = item["metric"]
        model = labels.get(EPP_MODEL_LABEL if epp else "model_name", "")
        namespace = labels.get("namespace", "")
        value = float(item["value"][1])
        if not model:
            drops["missing-label"] += 1
            continue
        if epp and not namespace:
            # EPP metrics carry no namespace of their own (GAIE #2309); without a scrape-target namespace
            # the queue applies to the model id in every namespace, as upstream's unfiltered query does.
            targets = by_model_id.get(model, [])
        else:
            key = ModelKey(namespace, model)
            targets = [key] if key in query.models else []
        if not targets:
            drops["unknown-model"] += 1
        elif not 0.0 <= value < _INF:
            drops[_value_problem(value)] += 1
        else:
            for key in targets:
                out[key] = out.get(key, 0.0) + value
    return out


def _histograms(query: Query, result: Sequence[Any], drops: Counter[str]) -> dict[ModelKey, LatencyHistogram]:
    """Bucket rates by model → one `LatencyHistogram` per model (sorted, coalesced, repaired by `from_pairs`).

    Example element: `{"metric": {"namespace": "ns", "model_name": "m", "le": "2.5"}, "value": [t, "9"]}`.
    """
    pairs: dict[ModelKey, list[tuple[float, float]]] = {}
    keys: dict[tuple[str, str], ModelKey | None] = {}  # one model's ~20 elements share their labels: parse once
    bounds: dict[str, float] = {}
    for item in result:
        labels = item["metric"]
        model, raw_le = labels.get("model_name", ""), labels.get("le")
        value = float(item["value"][1])
        if not model or raw_le is None:
            drops["missing-label"] += 1
            continue
        names = (labels.get("namespace", ""), model)
        if names not in keys:
            key = ModelKey(*names)
            keys[names] = key if key in query.models else None
        if (known := keys[names]) is None:
            drops["unknown-model"] += 1
            continue
        if (le := bounds.get(raw_le)) is None:
            try:
                le = bounds[raw_le] = float(raw_le)
            except ValueError:
                le = bounds[raw_le] = math.nan
        if not le >= 0:  # NaN too
            drops["invalid-label"] += 1
        elif not 0.0 <= value < _INF:
            drops[_value_problem(value)] += 1
        else:
            pairs.setdefault(known, []).append((le, value))
    out: dict[ModelKey, LatencyHistogram] = {}
    for key, buckets in pairs.items():
        if not any(le == _INF for le, _ in buckets):
            drops["incomplete-histogram"] += 1
            continue
        out[key] = LatencyHistogram.from_pairs(buckets)
    return out


def join(
    models: Sequence[ModelQuery],
    outcomes: Sequence[tuple[Query, Digest | SourceError]],
    pod_variants: Mapping[PodKey, str],
    *,
    duration_s: float = 0.0,
) -> Collection:
    """Join the digests (or errors) of one cycle's queries into a Collection. Pure: no I/O, no clock."""
    keys = frozenset(m.key for m in models)
    errors = tuple(f"{q.name}: {type(o).__name__}: {o}" for q, o in outcomes if isinstance(o, SourceError))
    if outcomes and len(errors) == len(outcomes):
        return Collection(
            models={key: ModelTraffic(key) for key in sorted(keys)},
            available=False,
            unavailable_models=keys,
            errors=errors,
            duration_s=duration_s,
        )
    unavailable = frozenset(m for q, o in outcomes if isinstance(o, SourceError) and q.essential for m in q.models)
    columns: dict[str, Column] = {}
    geometry: dict[PodKey, tuple[int, int]] = {}
    traffic: dict[ModelKey, dict[str, float]] = {}
    latency: dict[ModelKey, dict[str, LatencyHistogram]] = {}
    latency_window_s = 0.0
    dropped: Counter[str] = Counter()
    for query, outcome in outcomes:
        if isinstance(outcome, SourceError):
            continue
        dropped.update(outcome.dropped)
        if outcome.column is not None:
            columns[_POD_FIELD[query.name]] = outcome.column
        if outcome.geometry is not None:
            geometry.update(outcome.geometry)
        if outcome.traffic is not None:
            for key, value in outcome.traffic.items():
                traffic.setdefault(key, {})[_MODEL_FIELD[query.name]] = value
        if outcome.histograms is not None:
            latency_window_s = query.window_s or latency_window_s
            for key, histogram in outcome.histograms.items():
                latency.setdefault(key, {})[_HISTOGRAM_FIELD[query.name]] = histogram
    return Collection(
        pods=_pods(columns, geometry, pod_variants),
        models={
            key: ModelTraffic(
                key,
                **traffic.get(key, {}),
                latency=ModelLatency(latency_window_s, **latency[key]) if key in latency else None,
            )
            for key in sorted(keys)
        },
        available=True,
        unavailable_models=unavailable,
        dropped_samples=dict(sorted(dropped.items())),
        errors=errors,
        duration_s=duration_s,
    )


def _pods(
    columns: Mapping[str, Column], geometry: Mapping[PodKey, tuple[int, int]], pod_variants: Mapping[PodKey, str]
) -> tuple[PodMetrics, ...]:
    keys: set[PodKey] = set(geometry)
    for column in columns.values():
        keys.update(column)
    empty: Column = {}
    col = columns.get
    kv, queue, running = col("kv_cache_usage", empty), col("queue_length", empty), col("running_requests", empty)
    avg_in, avg_out = col("avg_input_tokens", empty), col("avg_output_tokens", empty)
    hit, arrival = col("prefix_cache_hit_rate", empty), col("arrival_rate_rps", empty)
    ttft, itl = col("avg_ttft_s", empty), col("avg_itl_s", empty)
    pods = []
    for key in sorted(keys):
        usage = kv.get(key)
        blocks, size = geometry.get(key, (None, None))
        tokens = None
        if usage is not None and blocks is not None and size is not None:
            total = blocks * size
            tokens = float(min(max(round(usage * total), 0), total))
        pods.append(
            PodMetrics(
                namespace=key[0],
                pod=key[1],
                variant=pod_variants[key],
                kv_cache_usage=usage,
                queue_length=queue.get(key),
                running_requests=running.get(key),
                num_gpu_blocks=blocks,
                block_size=size,
                tokens_in_use=tokens,
                avg_input_tokens=avg_in.get(key),
                avg_output_tokens=avg_out.get(key),
                prefix_cache_hit_rate=hit.get(key),
                arrival_rate_rps=arrival.get(key),
                avg_ttft_s=ttft.get(key),
                avg_itl_s=itl.get(key),
            )
        )
    return tuple(pods)


def assemble(
    models: Sequence[ModelQuery],
    outcomes: Sequence[tuple[Query, Sequence[Any] | SourceError]],
    pod_variants: Mapping[PodKey, str],
    *,
    duration_s: float = 0.0,
) -> Collection:
    """`digest` each raw answer (a malformed one becomes that query's QueryError), then `join`."""
    digested: list[tuple[Query, Digest | SourceError]] = []
    for query, outcome in outcomes:
        if isinstance(outcome, SourceError):
            digested.append((query, outcome))
            continue
        try:
            digested.append((query, digest(query, outcome, pod_variants)))
        except QueryError as e:
            digested.append((query, e))
    return join(models, digested, pod_variants, duration_s=duration_s)
