"""Every parser of outside input, fuzzed (issue 10): hypothesis-generated values plus a corpus of known-nasty
inputs (deep nesting, alias bombs, invalid UTF-8, 1 MB values, NaN/Inf, negative and huge numbers, wrong
types). The contract checked for each parser:

- no exception escapes except the parser's documented error type;
- that error names its source, and its message is bounded (a hostile input is never echoed whole);
- nothing else changes: the valid neighbours of a bad entry are still parsed.

Case counts are printed by `pytest -s tests/fuzz` (hypothesis `max_examples` per property below).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter.checkconfig import check_files
from adapter.config import podtemplate
from adapter.config.configmaps import QUEUEING_CM, SATURATION_CM, SCALE_TO_ZERO_CM, ConfigSet, parse_configmap
from adapter.config.safeload import InputError, load_json, load_yaml, load_yaml_all
from adapter.config.va import parse_va
from adapter.domain.errors import FixtureError, ManifestError, QueryError, ServeError
from adapter.domain.ids import ModelKey
from adapter.engine.state import StateFormatError, state_from_json
from adapter.k8s import objects
from adapter.metrics.answers import parse_vector
from adapter.metrics.epp import parse_queues
from adapter.replay import fixture
from adapter.servers.keda import resolve_target
from adapter.servers.selector import parse_selector

MAX_MESSAGE_CHARS = 2_000
"""No single error message may exceed this (a log line, a VA condition): inputs below are up to 1 MB."""

# ---- the corpus ---------------------------------------------------------------------------------------------


def _alias_bomb(levels: int = 9) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    lines.append("kvCacheThreshold: *a" + str(levels - 1))
    return "\n".join(lines)


NASTY_TEXT: dict[str, str | bytes] = {
    "deep-brackets": "a: " + "[" * 3000 + "]" * 3000,
    "deep-maps": "a: " + "{b: " * 200 + "1" + "}" * 200,
    "alias-bomb": _alias_bomb(),
    "invalid-utf8": b"kvCacheThreshold: \xff\xfe\x00",
    "one-megabyte": "kvCacheThreshold: '" + "x" * 1_048_576 + "'",
    "nan": "kvCacheThreshold: .nan",
    "inf": "kvCacheThreshold: .inf",
    "negative": "kvCacheThreshold: -1\nqueueLengthThreshold: -5",
    "huge-int": "queueLengthThreshold: " + "9" * 5000,
    "wrong-types": "kvCacheThreshold: [1, 2]\nenableLimiter: {a: b}\npriority: yes",
    "not-a-mapping": "- 1\n- 2",
    "tags": "!!python/object:os.system ['true']",
    "binary-tag": "a: !!binary AAAA",
    "unterminated": "a: [1, 2",
    "tabs-and-nul": "a:\t\x00b",
    "many-keys": "\n".join(f"k{i}: {i}" for i in range(20_000)),
}

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=30,
)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _raised(call: Callable[[], object], allowed: type[Exception]) -> Exception | None:
    """The documented error `call` raised, or None; any other exception propagates and fails the test."""
    try:
        call()
    except allowed as exc:
        return exc
    return None


def _bounded(message: str) -> None:
    assert len(message) <= MAX_MESSAGE_CHARS, f"{len(message)}-char message: {message[:200]}…"


# ---- YAML / JSON loaders ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(NASTY_TEXT))
def test_yaml_loader_corpus(name: str) -> None:
    exc = _raised(lambda: load_yaml(NASTY_TEXT[name], what="corpus"), InputError)
    if exc is not None:
        assert "corpus" in str(exc)
        _bounded(str(exc))


@FUZZ
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_yaml_and_json_loaders_raise_only_input_error(data: bytes) -> None:
    for load in (load_yaml, load_yaml_all, load_json):
        try:
            load(data, what="fuzz")
        except InputError as exc:
            _bounded(str(exc))


# ---- ConfigMap entries --------------------------------------------------------------------------------------

GOOD = "kvCacheThreshold: 0.75\n"


@pytest.mark.parametrize("name", list(NASTY_TEXT))
@pytest.mark.parametrize("configmap", [SATURATION_CM, SCALE_TO_ZERO_CM, QUEUEING_CM])
def test_configmap_corpus_hurts_only_its_entry(configmap: str, name: str) -> None:
    bad = NASTY_TEXT[name]
    text = bad.decode("utf-8", errors="surrogateescape") if isinstance(bad, bytes) else bad
    good = "model_id: m\n" + (GOOD if configmap == SATURATION_CM else "")
    parsed = parse_configmap(namespace="tenant", name=configmap, data={"bad": text, "zz-good": good})
    assert "zz-good" in parsed.entries  # the neighbour still applies
    for message in parsed.errors:
        assert f"ConfigMap tenant/{configmap}[bad]" in message
        _bounded(message)


@FUZZ
@given(st.dictionaries(st.text(max_size=20), json_values, max_size=6))
def test_configmap_entries_never_raise(doc: dict[str, Any]) -> None:
    for configmap in (SATURATION_CM, SCALE_TO_ZERO_CM, QUEUEING_CM):
        parsed = parse_configmap(namespace="ns", name=configmap, data={"default": json.dumps(doc), "raw": doc})  # type: ignore[dict-item]
        for message in parsed.errors:
            assert f"ConfigMap ns/{configmap}[" in message
            _bounded(message)


def test_poisoned_namespace_configmap_leaves_other_namespaces_their_config() -> None:
    configs = ConfigSet.from_raw(
        [
            ("workload-variant-autoscaler-system", SATURATION_CM, {"default": GOOD}),
            ("tenant-a", SATURATION_CM, {"default": str(NASTY_TEXT["deep-brackets"])}),
            ("tenant-b", SATURATION_CM, {"default": "kvCacheThreshold: 0.6\n"}),
        ]
    )
    a, a_warnings = configs.saturation(ModelKey("tenant-a", "m"))
    b, b_warnings = configs.saturation(ModelKey("tenant-b", "m"))
    assert a.kv_cache_threshold == 0.75  # the global default still applies to the poisoned namespace
    assert any("tenant-a" in w for w in a_warnings)
    assert b.kv_cache_threshold == 0.6
    assert not any("tenant-a" in w for w in b_warnings)


# ---- VA objects and other Kubernetes objects ----------------------------------------------------------------


@FUZZ
@given(json_values, json_values)
def test_va_parser_raises_only_manifest_error(spec: Any, status: Any) -> None:
    obj = {"apiVersion": "llmd.ai/v1alpha1", "kind": "VariantAutoscaling", "metadata": {"name": "x"}}
    obj |= {"spec": spec, "status": status}
    try:
        parse_va(obj)
    except ManifestError as exc:
        _bounded(str(exc))
    assert objects.project_va(obj) is None or objects.project_va(obj) is not None  # never raises


@FUZZ
@given(json_values)
def test_k8s_projections_never_raise(value: Any) -> None:
    for kind_obj in (
        {"metadata": {"name": "d", "namespace": "n"}, "spec": {"template": value, "replicas": value}},
        {"metadata": value, "status": value},
        value if isinstance(value, dict) else {"metadata": {"name": "x"}, "spec": value},
    ):
        for project in (
            objects.project_deployment,
            objects.project_statefulset,
            objects.project_node,
            objects.project_va,
        ):
            project(kind_obj)  # type: ignore[operator]


@FUZZ
@given(json_values)
def test_pod_template_parsers_never_raise(template: Any) -> None:
    templates = [template, {"spec": {"containers": [{"args": template, "command": template, "resources": template}]}}]
    for t in templates:
        if not isinstance(t, dict):
            continue
        podtemplate.gpus_per_replica(t)
        podtemplate.accelerator(t)
        podtemplate.vllm_args(t)
        podtemplate.role(t)


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--max-num-seqs", "9" * 5000], id="huge-int"),
        pytest.param(["--gpu-memory-utilization=nan"], id="nan"),
        pytest.param(["--max-num-batched-tokens=-5"], id="negative"),
        pytest.param(["sh", "-c", "vllm serve '" + "x" * 100_000], id="unterminated-quote-100k"),
        pytest.param(["--block-size=inf", "--tensor-parallel-size", "1e999"], id="inf"),
    ],
)
def test_vllm_args_corpus(args: list[str]) -> None:
    parsed = podtemplate.vllm_args({"spec": {"containers": [{"args": args}]}})
    assert parsed.max_num_seqs >= 0
    assert parsed.max_num_batched_tokens >= 0


# ---- Prometheus and EPP responses ---------------------------------------------------------------------------


@FUZZ
@given(json_values)
def test_prometheus_vector_parser_raises_only_query_error(result: Any) -> None:
    try:
        parse_vector(result)
    except QueryError as exc:
        _bounded(str(exc))


@FUZZ
@given(st.text(max_size=400))
def test_epp_exposition_parser_raises_only_value_error(text: str) -> None:
    try:
        parse_queues(text)
    except ValueError as exc:
        _bounded(str(exc))


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('inference_extension_flow_control_queue_size{target_model_name="m"} NaN\n', id="nan"),
        pytest.param('inference_extension_flow_control_queue_size{target_model_name="m"} -4\n', id="negative"),
        pytest.param('inference_extension_flow_control_queue_size{target_model_name="m"} 1e400\n', id="inf"),
        pytest.param("inference_extension_flow_control_queue_size{" + 'a="b",' * 5000 + "} 1\n", id="many-labels"),
        pytest.param("\xff" * 1000, id="garbage"),
    ],
)
def test_epp_corpus(text: str) -> None:
    try:
        queues = parse_queues(text)
    except ValueError as exc:
        _bounded(str(exc))
        return
    assert all(v >= 0 for v in queues.size.values())


# ---- replay fixtures, engine state, selectors, gRPC metadata ------------------------------------------------


@FUZZ
@given(json_values)
def test_fixture_parser_raises_only_fixture_error(raw: Any) -> None:
    for doc in (
        raw,
        {"schema": "wva-replay/v1", "cycles": raw},
        {"schema": "wva-replay/v1", "variant_autoscalings": raw, "cycles": []},
    ):
        exc = _raised(lambda d=doc: fixture.parse(d), FixtureError)
        if exc is not None:
            assert str(exc).startswith("$")
            _bounded(str(exc))


@FUZZ
@given(json_values)
def test_engine_state_parser_raises_only_state_format_error(doc: Any) -> None:
    for value in (doc, {"allocations": doc}, {"tokens": {"capacity": doc}}):
        exc = _raised(lambda v=value: state_from_json(v), StateFormatError)
        if isinstance(exc, StateFormatError):
            assert exc.path.startswith("$")
            _bounded(str(exc))


@FUZZ
@given(st.text(max_size=200))
def test_selector_parser_raises_only_serve_error(text: str) -> None:
    try:
        parse_selector(text)
    except ServeError as exc:
        _bounded(str(exc))


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("variant_name in (" + "a," * 10_000, id="20kB"),
        pytest.param("a" * 8000 + "=b", id="8k-key"),
        pytest.param("k=" + "v" * 8000, id="8k-value"),
        pytest.param("k in (" + "v" * 8000 + ")", id="8k-set-value"),
        pytest.param("!" + "x" * 8000, id="8k-not-exists"),
    ],
)
def test_long_selectors_are_bounded_bad_requests(text: str) -> None:
    with pytest.raises(ServeError) as err:
        parse_selector(text)
    _bounded(str(err.value))
    assert len(str(err.value)) < 600


@FUZZ
@given(
    st.text(max_size=80), st.text(max_size=80), st.dictionaries(st.text(max_size=30), st.text(max_size=300), max_size=4)
)
def test_grpc_metadata_raises_only_serve_error(name: str, namespace: str, metadata: dict[str, str]) -> None:
    try:
        resolve_target(name=name, namespace=namespace, metadata=metadata)
    except ServeError as exc:
        _bounded(str(exc))


# ---- CLI files ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(NASTY_TEXT))
def test_check_config_corpus_reports_instead_of_raising(tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.yaml"
    data = NASTY_TEXT[name]
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    report = check_files([path])
    for message in report.errors:
        assert str(path) in message
        _bounded(message)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=500))
def test_check_config_random_bytes(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("cc") / "x.yaml"
    path.write_bytes(data)
    report = check_files([path])
    for message in report.errors:
        _bounded(message)


LOADERS: dict[str, Callable[[Path], object]] = {"fixture": fixture.load}


@pytest.mark.parametrize("name", list(NASTY_TEXT))
def test_fixture_file_corpus(tmp_path: Path, name: str) -> None:
    path = tmp_path / "f.json"
    data = NASTY_TEXT[name]
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    with pytest.raises(FixtureError) as err:
        fixture.load(path)
    _bounded(str(err.value))


# ---- Lease records ------------------------------------------------------------------------------------------


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(["holderIdentity", "leaseDurationSeconds", "leaseTransitions", "renewTime"]),
        json_values,
        max_size=4,
    )
)
def test_lease_record_readers_never_raise_and_stay_in_range(spec: dict[str, Any]) -> None:
    from adapter.k8s.leader import MAX_LEASE_DURATION_S, lease_duration_s, lease_holder, lease_transitions

    duration = lease_duration_s(spec, default_s=15.0)
    assert 1 <= duration <= MAX_LEASE_DURATION_S
    assert isinstance(lease_holder(spec), str)
    assert lease_transitions(spec) >= 0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(float("inf"), 15.0, id="inf"),
        pytest.param(float("nan"), 15.0, id="nan"),
        pytest.param("60", 15.0, id="text"),
        pytest.param(10**9, 15.0, id="huge"),
        pytest.param(30, 30.0, id="valid"),
    ],
)
def test_lease_duration_corpus(value: Any, expected: float) -> None:
    from adapter.k8s.leader import lease_duration_s

    assert lease_duration_s({"leaseDurationSeconds": value}, default_s=15.0) == expected
