"""Hypothesis over every parser of outside input, with issue 19's stricter contract on top of issue 10's
(tests/fuzz/test_parsers.py): besides "only the documented error escapes, bounded", every message is
*printable* (outside text is quoted and escaped, never echoed raw) and short, and every accepted value is one
Kubernetes would accept. Parsers: label selectors, Quantity rendering, the YAML/JSON loaders, Go durations,
CLI numbers, VA manifests, replay fixtures, scenarios, KEDA gRPC metadata, the HTTPS gate's request heads,
the bounded file reader. Each property has a fixed example budget (`BUDGET`).
"""

from __future__ import annotations

import argparse
import math
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter.cli import PORT, SEED, number
from adapter.config.files import FileRefused, read_bounded
from adapter.config.names import is_dns1123_label, is_dns1123_subdomain, is_label_value, is_qualified_name
from adapter.config.safeload import InputError, load_json, load_yaml, load_yaml_all
from adapter.config.va import parse_va
from adapter.domain.errors import ConfigError, FixtureError, ManifestError, ServeError
from adapter.domain.text import escape, excerpt, quote
from adapter.domain.timefmt import MAX_DURATION_S, parse_duration_s
from adapter.replay import fixture
from adapter.servers.gate import GateLimits, HeadRefused, vet_head
from adapter.servers.keda import resolve_target
from adapter.servers.quantity import format_quantity, milli_units
from adapter.servers.selector import parse_selector
from adapter.sim import scenario
from tests.hostile import inputs

BUDGET = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SMALL_BUDGET = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MAX_LINE = 2_000

# text that reaches terminals and logs: control, format, bidi and separator characters, and plain ASCII
nasty_chars = st.sampled_from(list("\x00\x07\x1b\n\r\t\x7f\u0085\u200b\u200e\u202a\u202e\u2028\u2029\ufeff"))
nasty_text = st.lists(st.one_of(nasty_chars, st.characters(), st.sampled_from("aZ09-._/:= ")), max_size=120).map(
    "".join
)


def _clear(message: str) -> None:
    """A message we print or send: printable (nothing raw from the input) and bounded."""
    assert message.isprintable(), f"unprintable: {message[:300]!r}"
    assert len(message) <= MAX_LINE, f"{len(message)} characters: {message[:200]!r}…"


# ---- the message helpers themselves ----------------------------------------------------------------------


@BUDGET
@given(nasty_text, st.integers(min_value=1, max_value=200))
def test_quote_and_excerpt_are_printable_and_bounded(text: str, limit: int) -> None:
    for shown in (quote(text, limit), excerpt(text, limit), escape(text[:limit])):
        _clear(shown)
    assert len(quote(text, limit)) <= limit + 20


# ---- label selectors (HTTP) --------------------------------------------------------------------------------


@BUDGET
@given(nasty_text)
def test_selector_errors_are_printable(text: str) -> None:
    try:
        parse_selector(text)
    except ServeError as exc:
        _clear(str(exc))


# ---- Quantity rendering ------------------------------------------------------------------------------------

_QUANTITY = re.compile(r"-?[0-9]+(m|k|M|G|T|P|E|e[0-9]+)?")


@BUDGET
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**80), 2**80), st.booleans()))
def test_quantities_are_canonical_and_never_below_the_value(value: Any) -> None:
    try:
        text = format_quantity(value)
    except (ValueError, TypeError):
        assert isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value))
        return
    assert _QUANTITY.fullmatch(text), text
    # the wire value (milli precision, rounded away from zero) is never smaller in magnitude than the value
    assert abs(Decimal(milli_units(value))) >= abs(Decimal(repr(value)) * 1000) - Decimal("1e-9")


# ---- YAML and JSON loaders ---------------------------------------------------------------------------------


def _utf8(text: str) -> bytes:
    """The text's UTF-8 bytes; a lone surrogate (which `st.characters()` may draw) is written as its three bytes
    anyway (`surrogatepass`), so the loader sees that invalid UTF-8 instead of the strategy failing to encode it."""
    return text.encode("utf-8", "surrogatepass")


@BUDGET
@given(st.one_of(st.binary(max_size=400), nasty_text.map(_utf8)))
def test_loader_messages_are_printable(data: bytes) -> None:
    for load in (load_yaml, load_yaml_all, load_json):
        try:
            load(data, what="fuzz")
        except InputError as exc:
            _clear(str(exc))


@SMALL_BUDGET
@given(st.integers(min_value=1, max_value=60), st.integers(min_value=1, max_value=9))
def test_alias_budget_is_per_document(documents: int, width: int) -> None:
    """Ordinary documents never trip the alias budget, however many there are."""
    one = "a: &a [" + ", ".join(["x"] * width) + "]\nb: *a\n"
    loaded = load_yaml_all("".join(f"---\n{one}" for _ in range(documents)), what="fuzz")
    assert len(loaded) == documents


# ---- Go durations (settings, ConfigMaps) ----------------------------------------------------------------------


@BUDGET
@given(st.one_of(nasty_text, st.from_regex(r"[0-9]{1,400}(\.[0-9]{1,5})?(ns|us|ms|s|m|h|d)", fullmatch=True)))
def test_durations_are_finite_and_within_go_range(text: str) -> None:
    try:
        seconds = parse_duration_s(text)
    except ValueError as exc:
        _clear(str(exc))
        return
    assert math.isfinite(seconds)
    assert 0 <= seconds <= MAX_DURATION_S


# ---- CLI numbers ------------------------------------------------------------------------------------------


@BUDGET
@given(st.one_of(nasty_text, st.floats().map(repr), st.integers(-(10**6), 10**6).map(str)))
def test_cli_numbers_are_finite_ranged_or_refused(text: str) -> None:
    for parse, low, high in ((number(minimum=0, above=True, maximum=1e6), 0.0, 1e6), (PORT, 0, 65535),
                             (SEED, 0, 2**32 - 1)):  # fmt: skip
        try:
            value = parse(text)
        except argparse.ArgumentTypeError as exc:
            _clear(str(exc))
            continue
        assert math.isfinite(value)
        assert low <= value <= high


# ---- VariantAutoscaling manifests (check-config, fixtures, the live inventory) -------------------------------


names = st.one_of(nasty_text, st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,70}[a-z0-9])?", fullmatch=True))


@BUDGET
@given(names, names, names, names, st.one_of(st.integers(-(2**40), 2**40), st.booleans(), st.text(max_size=5)))
def test_an_accepted_va_is_one_kubernetes_accepts(
    name: str, namespace: str, target: str, model: str, max_replicas: Any
) -> None:
    obj = inputs.va(name, namespace=namespace, target=target, model=model, maxReplicas=max_replicas)
    try:
        va = parse_va(obj)
    except ManifestError as exc:
        _clear(str(exc))
        return
    assert is_dns1123_subdomain(va.metadata.name)
    assert is_dns1123_label(va.metadata.namespace)
    assert is_dns1123_subdomain(va.spec.scale_target_ref.name)
    assert type(max_replicas) is int
    assert 1 <= max_replicas <= 2**31 - 1
    assert va.spec.model_id.isprintable()


@BUDGET
@given(st.dictionaries(nasty_text, nasty_text, max_size=4))
def test_accepted_labels_are_kubernetes_labels(labels: dict[str, str]) -> None:
    obj = inputs.va("a")
    obj["metadata"] = {"name": "a", "namespace": "llm", "labels": labels}
    try:
        va = parse_va(obj)
    except ManifestError as exc:
        _clear(str(exc))
        return
    assert all(is_qualified_name(k) and is_label_value(v) for k, v in va.metadata.labels.items())


# ---- replay fixtures --------------------------------------------------------------------------------------

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), nasty_text)


@BUDGET
@given(st.sampled_from(["replicas", "ready_replicas", "spec_replicas", "name", "namespace", "kind"]), scalars)
def test_fixture_scale_target_values_are_strict(field: str, value: Any) -> None:
    document = inputs.fixture(target={field: value})
    try:
        loaded, _ = fixture.parse(document)
    except FixtureError as exc:
        _clear(str(exc))
        return
    target = loaded.cycles[0].scale_targets[0]  # type: ignore[index]
    assert type(target.replicas) is int
    assert 0 <= target.ready_replicas <= target.replicas <= 2**31 - 1
    assert is_dns1123_subdomain(target.name)
    assert is_dns1123_label(target.namespace)


@BUDGET
@given(st.sampled_from(["kv_cache_usage", "queue_length", "num_gpu_blocks", "max_batch_size", "avg_ttft_s"]), scalars)
def test_fixture_pod_metrics_are_strict(field: str, value: Any) -> None:
    document = inputs.fixture()
    document["cycles"][0]["pods"][0]["metrics"] = {field: value}  # type: ignore[index]
    try:
        loaded, _ = fixture.parse(document)
    except FixtureError as exc:
        _clear(str(exc))
        return
    got = getattr(loaded.cycles[0].pods[0].metrics, field)
    assert got is None or (not isinstance(got, bool) and math.isfinite(got) and got >= 0)


# ---- scenarios --------------------------------------------------------------------------------------------

scenario_values = st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(nasty_text, scalars, max_size=3))


@SMALL_BUDGET
@given(
    st.sampled_from(["name", "model_id", "namespace", "duration_s", "seed", "workload", "variants", "policy",
                     "slo", "engine", "actuation"]),
    scenario_values,
)  # fmt: skip
def test_scenario_fields_raise_only_config_error(
    tmp_path_factory: pytest.TempPathFactory, key: str, value: Any
) -> None:
    raw = {
        "name": "s", "model_id": "m", "duration_s": 60,
        "workload": {"kind": "poisson", "rate_rps": 1},
        "variants": [{"name": "a", "max_replicas": 2}],
    }  # fmt: skip
    raw[key] = value
    try:
        loaded = scenario.parse(raw, base_dir=tmp_path_factory.getbasetemp())
    except ConfigError as exc:
        _clear(str(exc))
        return
    count, _ = scenario.expected_requests(loaded)
    assert count >= 0


@SMALL_BUDGET
@given(st.floats(min_value=0, max_value=100_000), st.floats(min_value=1, max_value=7 * 86400))
def test_scenario_request_estimate_is_checked_before_running(rate: float, duration_s: float) -> None:
    raw = {"model_id": "m", "duration_s": duration_s, "workload": {"kind": "poisson", "rate_rps": rate},
           "variants": [{"name": "a"}]}  # fmt: skip
    loaded = scenario.parse(raw, base_dir=Path("."))
    expected = rate * duration_s
    try:
        count = scenario.check_work(loaded)
    except ConfigError as exc:
        assert expected > scenario.MAX_REQUESTS * 0.999
        _clear(str(exc))
        return
    assert count <= scenario.MAX_REQUESTS
    assert count == math.ceil(expected)


# ---- KEDA gRPC metadata -----------------------------------------------------------------------------------


@BUDGET
@given(
    nasty_text,
    nasty_text,
    st.dictionaries(
        st.sampled_from(["variantAutoscaling", "namespace", "metricName"]),
        st.one_of(nasty_text, st.text(min_size=5000, max_size=20000)),
    ),
)
def test_grpc_metadata_messages_are_short_and_printable(name: str, namespace: str, metadata: dict[str, str]) -> None:
    try:
        resolve_target(name=name, namespace=namespace, metadata=metadata)
    except ServeError as exc:
        message = str(exc)
    else:
        return
    _clear(message)
    assert len(message) < 400


# ---- the HTTPS gate's request heads ----------------------------------------------------------------------

LIMITS = GateLimits(max_request_line=512, max_header_line=256, max_headers=8)
head_lines = st.lists(st.binary(max_size=300), max_size=12)


@BUDGET
@given(st.binary(max_size=600), head_lines, st.booleans())
def test_gate_refuses_with_a_status_that_quotes_nothing(request_line: bytes, fields: list[bytes], body: bool) -> None:
    head = b"\r\n".join([request_line, *fields]) + b"\r\n\r\n"
    refused: HeadRefused | None = None
    try:
        vet_head(head, LIMITS, allow_body=body)
    except HeadRefused as exc:
        refused = exc
    if refused is not None:
        assert refused.status in (400, 413, 431)
        _clear(str(refused))
        assert str(refused).isascii()
        return
    # accepted: every line has the HTTP/1.1 shape and the limits hold
    assert len(request_line) <= LIMITS.max_request_line
    assert len(fields) <= LIMITS.max_headers
    assert b" HTTP/1." in request_line
    assert all(b":" in line for line in fields)
    assert not any(c in request_line for c in b"\x00\r\n\x1b")


# ---- the bounded reader -----------------------------------------------------------------------------------


@SMALL_BUDGET
@given(st.integers(min_value=0, max_value=4096), st.integers(min_value=0, max_value=4096))
def test_read_bounded_reads_exactly_what_fits(tmp_path_factory: pytest.TempPathFactory, size: int, limit: int) -> None:
    path = tmp_path_factory.mktemp("bounded") / "f"
    path.write_bytes(b"x" * size)
    try:
        data = read_bounded(path, what="fuzz", max_bytes=limit)
    except FileRefused as exc:
        assert size > limit
        _clear(str(exc))
        return
    assert len(data) == size <= limit
