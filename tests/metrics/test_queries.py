"""PromQL builders: exact strings (seed 001 / research §6.6 templates, all models per query), escaping, windows."""

from __future__ import annotations

from urllib.parse import quote_plus

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.domain.cluster import ModelQuery
from adapter.domain.ids import ModelKey
from adapter.metrics import queries as q
from adapter.metrics.queries import QueryName, QueryWindows, build_queries
from tests.metrics import V1_QUERIES

LLAMA = ModelKey("ns-a", "meta/llama-3.1-8b")
QWEN = ModelKey("ns-b", "Qwen/Qwen2.5-7B")
ONE = ['namespace="ns-a"', 'model_name="meta/llama-3.1-8b"']
G = "namespace, model_name, pod, pod_name"


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        pytest.param("meta/llama-3.1-8b", "meta/llama-3.1-8b", id="plain"),
        pytest.param('a"b', 'a\\"b', id="quote"),
        pytest.param("a\\b", "a\\\\b", id="backslash"),
        pytest.param('\\"', '\\\\\\"', id="backslash-then-quote"),
        pytest.param("a\nb\tc\r", "a\\nb\\tc\\r", id="control-characters"),
        pytest.param("", "", id="empty"),
        pytest.param("modèle-é", "modèle-é", id="unicode-unchanged"),
    ],
)
def test_escape_label_value(raw: str, escaped: str) -> None:
    assert q.escape_label_value(raw) == escaped


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        pytest.param("llama-3.1-8b", "llama-3\\.1-8b", id="dot"),
        pytest.param("a+b*c?", "a\\+b\\*c\\?", id="quantifiers"),
        pytest.param("(x|y)[z]{2}^$", "\\(x\\|y\\)\\[z\\]\\{2\\}\\^\\$", id="groups-anchors"),
        pytest.param("a\\b", "a\\\\b", id="backslash"),
        pytest.param("org/name_v1-x", "org/name_v1-x", id="no-metacharacters"),
    ],
)
def test_escape_regex(raw: str, escaped: str) -> None:
    assert q.escape_regex(raw) == escaped


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(600, "10m", id="minutes"),
        pytest.param(3600, "1h", id="hour"),
        pytest.param(7200, "2h", id="hours"),
        pytest.param(60, "1m", id="one-minute"),
        pytest.param(90, "90s", id="seconds"),
        pytest.param(1, "1s", id="one-second"),
        pytest.param(0.5, "500ms", id="milliseconds"),
        pytest.param(1.25, "1250ms", id="fractional-seconds"),
        pytest.param(300.0, "5m", id="float-minutes"),
    ],
)
def test_duration(seconds: float, text: str) -> None:
    assert q.duration(seconds) == text


@pytest.mark.parametrize(
    "bad", [0, -1, float("nan"), float("inf"), 0.0001], ids=["zero", "negative", "nan", "inf", "sub-ms"]
)
def test_duration_rejects(bad: float) -> None:
    with pytest.raises(ValueError, match="duration"):
        q.duration(bad)


@pytest.mark.parametrize(
    ("models", "expected"),
    [
        pytest.param([LLAMA], ONE, id="single-model-exact-match"),
        pytest.param(
            [LLAMA, QWEN],
            ['namespace=~"ns-a|ns-b"', 'model_name=~"Qwen/Qwen2\\\\.5-7B|meta/llama-3\\\\.1-8b"'],
            id="regex-sorted-escaped",
        ),
        pytest.param(
            [ModelKey("ns", 'we"ird.m')],
            ['namespace="ns"', 'model_name="we\\"ird.m"'],
            id="exact-match-is-not-regex-escaped",
        ),
        pytest.param(
            [ModelKey("ns", "a"), ModelKey("ns", "a"), ModelKey("ns", "b")],
            ['namespace="ns"', 'model_name=~"a|b"'],
            id="deduplicated",
        ),
        pytest.param([], [], id="no-models"),
    ],
)
def test_model_matchers(models: list[ModelKey], expected: list[str]) -> None:
    assert q.model_matchers(models) == expected


def test_fit_takes_the_narrowest_selector_that_fits() -> None:
    narrow = (['namespace="a"', 'model_name=~"m1|m2"'], ['namespace="a"'])
    assert (
        q.fit(q.running_requests, narrow, max_query_bytes=10_000)
        == f"sum by ({G}) (vllm:num_requests_running{{{narrow[0][0]},{narrow[0][1]}}})"
    )
    only_ns = q.encoded_length(q.running_requests(narrow[1]))
    assert q.fit(q.running_requests, narrow, max_query_bytes=only_ns) == q.running_requests(narrow[1])
    assert q.fit(q.running_requests, narrow, max_query_bytes=only_ns - 1) == q.running_requests([])


def test_encoded_length_counts_url_escapes() -> None:
    assert q.encoded_length('a{b="c"}') == len("a%7Bb%3D%22c%22%7D")
    assert q.encoded_length('a b{"x"}') == 16  # the docstring's example


@settings(max_examples=300)
@given(st.text())
def test_encoded_length_is_the_length_quote_plus_builds(promql: str) -> None:
    assert q.encoded_length(promql) == len(quote_plus(promql))


@pytest.mark.parametrize(
    ("builder", "expected"),
    [
        pytest.param(
            lambda: q.kv_cache_usage(ONE),
            f"max by ({G}) (max_over_time(vllm:kv_cache_usage_perc"
            '{namespace="ns-a",model_name="meta/llama-3.1-8b"}[1m]))'
            f" or max by ({G}) (max_over_time(vllm:gpu_cache_usage_perc"
            '{namespace="ns-a",model_name="meta/llama-3.1-8b"}[1m]))',
            id="kv-current-or-deprecated",
        ),
        pytest.param(
            lambda: q.queue_length(ONE, window_s=5),
            f"max by ({G}) (max_over_time(vllm:num_requests_waiting"
            '{namespace="ns-a",model_name="meta/llama-3.1-8b"}[5s]))',
            id="queue-window",
        ),
        pytest.param(
            lambda: q.running_requests([]),
            f"sum by ({G}) (vllm:num_requests_running)",
            id="running-unfiltered",
        ),
        pytest.param(
            lambda: q.cache_config_info(ONE[:1]),
            f'max by ({G}, num_gpu_blocks, block_size) (vllm:cache_config_info{{namespace="ns-a"}})',
            id="cache-config-info-labels",
        ),
        pytest.param(
            lambda: q.avg_input_tokens([]),
            f"max by ({G}) (rate(vllm:request_prompt_tokens_sum[5m]) / rate(vllm:request_prompt_tokens_count[5m]))",
            id="avg-input-tokens",
        ),
        pytest.param(
            lambda: q.avg_output_tokens([]),
            f"max by ({G}) (rate(vllm:request_generation_tokens_sum[5m])"
            " / rate(vllm:request_generation_tokens_count[5m]))",
            id="avg-output-tokens",
        ),
        pytest.param(
            lambda: q.avg_ttft([]),
            f"max by ({G}) (rate(vllm:time_to_first_token_seconds_sum[1m])"
            " / rate(vllm:time_to_first_token_seconds_count[1m]))",
            id="avg-ttft",
        ),
        pytest.param(
            lambda: q.avg_itl([]),
            f"max by ({G}) (rate(vllm:inter_token_latency_seconds_sum[1m])"
            " / rate(vllm:inter_token_latency_seconds_count[1m]))"
            f" or max by ({G}) (rate(vllm:time_per_output_token_seconds_sum[1m])"
            " / rate(vllm:time_per_output_token_seconds_count[1m]))",
            id="avg-itl-current-or-deprecated",
        ),
        pytest.param(
            lambda: q.prefix_cache_hit_rate([]),
            f"max by ({G}) (rate(vllm:prefix_cache_hits_total[5m]) / rate(vllm:prefix_cache_queries_total[5m]))"
            f" or max by ({G}) (rate(vllm:prefix_cache_hits[5m]) / rate(vllm:prefix_cache_queries[5m]))"
            f" or max by ({G}) (rate(vllm:gpu_prefix_cache_hits_total[5m])"
            " / rate(vllm:gpu_prefix_cache_queries_total[5m]))",
            id="prefix-hit-rate-total-bare-gpu",
        ),
        pytest.param(
            lambda: q.ttft_histogram(ONE),
            "sum by (namespace, model_name, le) (rate(vllm:time_to_first_token_seconds_bucket"
            '{namespace="ns-a",model_name="meta/llama-3.1-8b"}[5m]))',
            id="ttft-histogram-per-model-and-edge",
        ),
        pytest.param(
            lambda: q.tpot_histogram([], window_s=120),
            "sum by (namespace, model_name, le) (rate(vllm:request_time_per_output_token_seconds_bucket[2m])"
            " or ignoring (le) rate(vllm:time_per_output_token_seconds_bucket[2m]))",
            id="tpot-histogram-per-request-or-deprecated-per-source",
        ),
        pytest.param(
            lambda: q.request_count(ONE, retention_s=600),
            "sum by (namespace, model_name) (increase(vllm:request_success_total"
            '{namespace="ns-a",model_name="meta/llama-3.1-8b"}[10m])'
            " or increase(vllm:request_success"
            '{namespace="ns-a",model_name="meta/llama-3.1-8b"}[10m]))',
            id="request-count-total-or-bare-per-series",
        ),
        pytest.param(
            lambda: q.epp_queue("size"),
            "sum by (namespace, wva_model_id) (label_replace(label_replace("
            "llm_d_epp_flow_control_queue_size or inference_extension_flow_control_queue_size, "
            '"wva_model_id", "$1", "model_name", "(.*)"), "wva_model_id", "$1", "target_model_name", "(.+)"))',
            id="epp-queue-size-new-or-legacy-per-series",
        ),
        pytest.param(
            lambda: q.dispatch_rate(['namespace="ns-a"'], window_s=60),
            "sum by (namespace, pod_name, wva_model_id) (label_replace(label_replace("
            "label_replace(label_replace("
            'rate(llm_d_epp_scheduler_attempts_total{status="success",namespace="ns-a"}[1m]), '
            '"pod_name", "$1", "endpoint_name", "(.+)"), "endpoint_name", "", "endpoint_name", ".*")'
            ' or rate(inference_extension_scheduler_attempts_total{status="success",namespace="ns-a"}[1m]), '
            '"wva_model_id", "$1", "model_name", "(.*)"), "wva_model_id", "$1", "target_model_name", "(.+)"))',
            id="dispatch-rate-endpoint-name-normalised",
        ),
    ],
)
def test_builder_strings(builder: object, expected: str) -> None:
    assert callable(builder)
    assert builder() == expected


def test_epp_queue_bytes_and_bad_kind() -> None:
    assert "llm_d_epp_flow_control_queue_bytes" in q.epp_queue("bytes")
    assert "inference_extension_flow_control_queue_bytes" in q.epp_queue("bytes")
    with pytest.raises(ValueError, match="size"):
        q.epp_queue("length")


def test_build_queries_one_query_per_metric_for_all_models() -> None:
    models = [
        ModelQuery(LLAMA),
        ModelQuery(QWEN, retention_s=300),
        ModelQuery(ModelKey("ns-b", "other"), retention_s=600),
    ]
    built = build_queries(models)
    names = [b.name for b in built]
    assert names[:2] == [QueryName.KV_CACHE_USAGE, QueryName.QUEUE_LENGTH]
    assert len(built) == 14 + 2  # two distinct retention periods
    assert names.count(QueryName.REQUEST_COUNT) == 2
    assert len({b.promql for b in built}) == len(built)
    per_metric = [b for b in built if b.name is not QueryName.REQUEST_COUNT]
    assert all(b.models == frozenset(m.key for m in models) for b in per_metric)
    counts = {b.retention_s: b for b in built if b.name is QueryName.REQUEST_COUNT}
    assert counts[300].models == {QWEN}
    assert "[5m]" in counts[300].promql
    assert 'model_name="Qwen/Qwen2.5-7B"' in counts[300].promql
    assert counts[600].models == {LLAMA, ModelKey("ns-b", "other")}
    assert "[10m]" in counts[600].promql
    assert [b.essential for b in built].count(True) == 2


def test_build_queries_windows_and_empty() -> None:
    assert build_queries([]) == ()
    built = {b.name: b.promql for b in build_queries([ModelQuery(LLAMA)], windows=QueryWindows(3, 5, 4, 2))}
    assert "[3s]" in built[QueryName.KV_CACHE_USAGE]
    assert "[3s]" in built[QueryName.QUEUE_LENGTH]
    assert "[5s]" in built[QueryName.AVG_INPUT_TOKENS]
    assert "[5s]" in built[QueryName.PREFIX_CACHE_HIT_RATE]
    assert "[4s]" in built[QueryName.AVG_TTFT]
    assert "[4s]" in built[QueryName.AVG_ITL]
    assert "[2s]" in built[QueryName.DISPATCH_RATE]
    assert "[5m]" in built[QueryName.TTFT_HISTOGRAM]  # latency_histogram_s defaults to 300 s
    assert "[5m]" in built[QueryName.TPOT_HISTOGRAM]
    windowed = build_queries([ModelQuery(LLAMA)], windows=QueryWindows(latency_histogram_s=90))
    histograms = {b.name: b for b in windowed if b.name in q.HISTOGRAM_QUERIES}
    assert {b.window_s for b in histograms.values()} == {90}
    assert all("[90s]" in b.promql for b in histograms.values())
    assert all(b.window_s is None for b in windowed if b.name not in q.HISTOGRAM_QUERIES)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_query_windows_reject_non_positive(bad: float) -> None:
    with pytest.raises(ValueError, match="saturation_s"):
        QueryWindows(saturation_s=bad)
    with pytest.raises(ValueError, match="latency_histogram_s"):
        QueryWindows(latency_histogram_s=bad)


@pytest.mark.parametrize(
    ("n_models", "model_filter", "namespace_filter"),
    [
        pytest.param(30, True, True, id="small-fleet-models-and-namespaces"),
        pytest.param(334, False, True, id="1000-VAs-namespaces-only"),
        pytest.param(3334, False, True, id="10000-VAs-namespaces-only"),
    ],
)
def test_every_query_fits_a_proxy_request_line(n_models: int, model_filter: bool, namespace_filter: bool) -> None:
    models = [ModelQuery(ModelKey(f"team-{i % 10:02d}", f"org/model-{i:05d}")) for i in range(n_models)]
    built = build_queries(models)
    assert len(built) == 15
    assert max(q.encoded_length(b.promql) for b in built) <= q.DEFAULT_MAX_QUERY_BYTES
    vllm = [b for b in built if b.name not in (QueryName.EPP_QUEUE_SIZE, QueryName.EPP_QUEUE_BYTES)]
    assert all(("model_name=~" in b.promql) == model_filter for b in vllm if b.name is not QueryName.DISPATCH_RATE)
    assert all(("namespace=~" in b.promql) == namespace_filter for b in vllm)


def test_many_namespaces_drop_every_matcher() -> None:
    models = [ModelQuery(ModelKey(f"namespace-number-{i:05d}", "m")) for i in range(2000)]
    built = build_queries(models)
    assert all("namespace=" not in b.promql and "=~" not in b.promql for b in built)
    assert max(q.encoded_length(b.promql) for b in built) <= q.DEFAULT_MAX_QUERY_BYTES


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [
        pytest.param(
            V1_QUERIES,
            [
                QueryName.KV_CACHE_USAGE,
                QueryName.QUEUE_LENGTH,
                QueryName.EPP_QUEUE_SIZE,
                QueryName.EPP_QUEUE_BYTES,
                QueryName.REQUEST_COUNT,
            ],
            id="saturation-v1",
        ),
        pytest.param(
            [QueryName.AVG_TTFT],
            [QueryName.KV_CACHE_USAGE, QueryName.QUEUE_LENGTH, QueryName.AVG_TTFT],
            id="essentials-added",
        ),
        pytest.param(None, list(QueryName), id="all"),
    ],
)
def test_metric_selection(metrics: frozenset[QueryName] | list[QueryName] | None, expected: list[QueryName]) -> None:
    built = build_queries([ModelQuery(LLAMA)], metrics=metrics)
    assert [b.name for b in built] == expected
