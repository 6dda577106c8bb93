"""The replay fixture (`schema: wva-replay/v1`, DESIGN §3.2), validated, with errors that name the JSON path.

A fixture is a user artefact (record a snapshot, explain a decision offline), so every problem is reported
as `$.cycles[0].pods[2].metrics.kv_cache_usage: -0.1 — must be >= 0`, never as a traceback.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError, field_validator

from adapter.config import podtemplate
from adapter.config.configmaps import DEFAULT_CONTROLLER_NAMESPACE
from adapter.config.safeload import InputError, load_json
from adapter.config.va import VariantAutoscaling, parse_va
from adapter.domain.errors import FixtureError, ManifestError
from adapter.domain.ids import ModelKey
from adapter.domain.latency import LatencyHistogram, ModelLatency
from adapter.domain.snapshot import ModelTraffic, NodeGpus, PodMetrics, ScaleTarget
from adapter.domain.timefmt import parse_rfc3339_s

SCHEMA = "wva-replay/v1"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


def _finite_non_negative(value: float | None) -> float | None:
    if value is not None and (not math.isfinite(value) or value < 0):
        raise ValueError("must be a finite number >= 0")
    return value


class FixtureConfigMap(_Model):
    namespace: str = Field(min_length=1)
    name: str = Field(min_length=1)
    data: dict[str, str] = Field(default_factory=dict)


class FixtureScaleTarget(_Model):
    kind: Literal["Deployment", "StatefulSet", "LeaderWorkerSet"] = "Deployment"
    namespace: str = Field(min_length=1)
    name: str = Field(min_length=1)
    replicas: int = Field(ge=0)
    ready_replicas: int = Field(ge=0)
    spec_replicas: int | None = Field(default=None, ge=0)
    pod_template: dict[str, Any] | None = None
    startup_s: list[Annotated[float, Field(ge=0)]] | None = None
    """Ours: startup durations (creation → Ready, s) of the target's Ready pods (`ScaleTarget.startup_s`)."""


class FixturePodMetrics(_Model):
    kv_cache_usage: float | None = Field(default=None, le=1)
    queue_length: float | None = None
    running_requests: float | None = None
    num_gpu_blocks: int | None = Field(default=None, ge=0)
    block_size: int | None = Field(default=None, ge=0)
    tokens_in_use: float | None = None
    avg_input_tokens: float | None = None
    avg_output_tokens: float | None = None
    prefix_cache_hit_rate: float | None = Field(default=None, le=1)
    arrival_rate_rps: float | None = None
    avg_ttft_s: float | None = None
    avg_itl_s: float | None = None
    max_batch_size: int | None = Field(default=None, ge=1)

    _check = field_validator(
        "kv_cache_usage",
        "queue_length",
        "running_requests",
        "tokens_in_use",
        "avg_input_tokens",
        "avg_output_tokens",
        "prefix_cache_hit_rate",
        "arrival_rate_rps",
        "avg_ttft_s",
        "avg_itl_s",
    )(_finite_non_negative)


class FixturePod(_Model):
    namespace: str = Field(min_length=1)
    name: str = Field(min_length=1)
    variant: str = Field(min_length=1)
    metrics: FixturePodMetrics = Field(default_factory=FixturePodMetrics)


def _bucket_bound(value: Any) -> float:
    """A bucket's upper bound: a number of seconds >= 0, or the string "+Inf" (JSON has no infinity)."""
    if isinstance(value, str) and value == "+Inf":
        return math.inf
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError('a bucket bound must be a number of seconds >= 0 or "+Inf"')
    return float(value)


BucketPair = tuple[Annotated[float, PlainValidator(_bucket_bound)], Annotated[float, Field(ge=0, strict=True)]]
"""One bucket of a latency histogram: [upper bound in seconds, or "+Inf"; cumulative rate per second]."""


def _histogram(pairs: list[tuple[float, float]] | None) -> list[tuple[float, float]] | None:
    """Canonical buckets only (what the recorder writes): bounds strictly increasing, rates non-decreasing,
    "+Inf" last. Example: [[1.0, 6], [2.5, 9], ["+Inf", 10]]."""
    if pairs is None:
        return None
    if not pairs or pairs[-1][0] != math.inf:
        raise ValueError('a latency histogram ends with its ["+Inf", total rate] bucket')
    for i in range(1, len(pairs)):
        (le_a, rate_a), (le_b, rate_b) = pairs[i - 1], pairs[i]
        if le_b <= le_a:
            shown = '"+Inf"' if math.isinf(le_a) else repr(le_a)
            raise ValueError(f"bucket {i}: bound {le_b!r} must be greater than the previous {shown}")
        if rate_b < rate_a:
            raise ValueError(f"bucket {i}: cumulative rate {rate_b!r} below the previous bucket's {rate_a!r}")
    return pairs


class FixtureLatency(_Model):
    """Ours: `ModelTraffic.latency`, the model's TTFT and per-request TPOT bucket rates over `window_s`."""

    window_s: float = Field(gt=0)
    ttft: list[BucketPair] | None = None
    tpot: list[BucketPair] | None = None

    _check = field_validator("ttft", "tpot")(_histogram)


class FixtureModel(_Model):
    namespace: str = Field(min_length=1)
    model_id: str = Field(min_length=1)
    request_count: float | None = None
    epp_queue_size: float | None = None
    epp_queue_bytes: float | None = None
    latency: FixtureLatency | None = None

    _check = field_validator("request_count", "epp_queue_size", "epp_queue_bytes")(_finite_non_negative)


class FixtureNode(_Model):
    name: str = Field(min_length=1)
    accelerator: str = Field(min_length=1)
    allocatable_gpus: int = Field(ge=0)


class FixtureExpectation(_Model):
    desired_replicas: int | None = Field(default=None, ge=0)
    reason: str | None = None
    """Ours: when set, the decision's reason must contain this text."""


class FixtureModelRef(_Model):
    namespace: str = Field(min_length=1)
    model_id: str = Field(min_length=1)


class FixtureCycle(_Model):
    now: str
    now_s: float | None = None
    """Ours (flight recorder): the exact epoch seconds of `now` (which RFC 3339 gives to the second)."""
    kind: Literal["decide", "scale-from-zero"] = "decide"
    """Ours (flight recorder): "scale-from-zero" for a poll between cycles (`engine.wake`, which reads the
    models' `epp_queue_size`); "decide" for an engine cycle."""
    prometheus: Literal["ok", "unavailable"] = "ok"
    unavailable_models: list[FixtureModelRef] | None = None
    """Ours: models whose collection failed while others succeeded (partial outage)."""
    scale_targets: list[FixtureScaleTarget] | None = None
    pods: list[FixturePod] = Field(default_factory=list)
    models: list[FixtureModel] | None = None
    nodes: list[FixtureNode] | None = None
    expect: dict[str, FixtureExpectation] = Field(default_factory=dict)

    @field_validator("now")
    @classmethod
    def _rfc3339(cls, value: str) -> str:
        parse_rfc3339_s(value)
        return value

    @field_validator("expect")
    @classmethod
    def _keys(cls, value: dict[str, FixtureExpectation]) -> dict[str, FixtureExpectation]:
        for key in value:
            ns, sep, name = key.partition("/")
            if not sep or not ns or not name:
                raise ValueError(f"expectation key {key!r} must be '<namespace>/<va name>'")
        return value


class Fixture(_Model):
    schema_: Literal["wva-replay/v1"] = Field(alias="schema")
    name: str = ""
    controller_namespace: str = DEFAULT_CONTROLLER_NAMESPACE
    configmaps: list[FixtureConfigMap] = Field(default_factory=list)
    variant_autoscalings: list[dict[str, Any]] = Field(min_length=1)
    cycles: list[FixtureCycle] = Field(min_length=1)
    engine_state: dict[str, Any] | None = None
    """Ours (flight recorder): the engine's memory before the first cycle (`adapter.engine.state_to_json`)."""
    scale_to_zero_env: str | None = None
    """Ours (flight recorder): the recording process's WVA_SCALE_TO_ZERO; wins over the replaying process's."""


def _json_path(loc: Sequence[int | str]) -> str:
    path = "$"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{'schema' if part == 'schema_' else part}"
    return path


def load(path: Path) -> tuple[Fixture, list[VariantAutoscaling]]:
    """Read and validate a fixture file. Raises FixtureError with the JSON path of the first problem."""
    try:
        # NaN/Infinity literals parse to floats so that validation reports them at their JSON path.
        raw = load_json(path.read_bytes(), what="fixture", allow_nan=True)
    except OSError as exc:
        raise FixtureError("$", f"cannot read {path}: {exc.strerror}") from None
    except InputError as exc:
        raise FixtureError("$", str(exc).removeprefix("fixture: ")) from None
    return parse(raw)


def parse(raw: Any) -> tuple[Fixture, list[VariantAutoscaling]]:
    if not isinstance(raw, dict):
        raise FixtureError("$", "a fixture must be a JSON object")
    try:
        fixture = Fixture.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        value = err.get("input")
        shown = "" if err.get("type") in ("missing", "extra_forbidden") else f"{value!r} — "
        message = "unknown field" if err.get("type") == "extra_forbidden" else str(err.get("msg"))
        raise FixtureError(_json_path(err.get("loc", ())), f"{shown}{message}") from None
    vas = []
    for i, obj in enumerate(fixture.variant_autoscalings):
        try:
            vas.append(parse_va(obj))
        except ManifestError as exc:
            raise FixtureError(f"$.variant_autoscalings[{i}]", str(exc)) from None
    _check_references(fixture, vas)
    return fixture, vas


def _check_references(fixture: Fixture, vas: Sequence[VariantAutoscaling]) -> None:
    names = {str(va.key) for va in vas}
    if len(names) != len(vas):
        raise FixtureError("$.variant_autoscalings", "two VariantAutoscalings share a namespace/name")
    for c, cycle in enumerate(fixture.cycles):
        for key in cycle.expect:
            if key not in names:
                raise FixtureError(f"$.cycles[{c}].expect", f"{key!r} names no VariantAutoscaling in the fixture")
        for p, pod in enumerate(cycle.pods):
            if f"{pod.namespace}/{pod.variant}" not in names:
                raise FixtureError(
                    f"$.cycles[{c}].pods[{p}].variant",
                    f"{pod.variant!r} names no VariantAutoscaling in {pod.namespace}",
                )


def scale_target(st: FixtureScaleTarget) -> ScaleTarget:
    template = st.pod_template or {}
    return ScaleTarget(
        kind=st.kind,
        namespace=st.namespace,
        name=st.name,
        replicas=st.replicas,
        ready_replicas=min(st.ready_replicas, st.replicas),
        spec_replicas=st.spec_replicas if st.spec_replicas is not None else st.replicas,
        gpus_per_replica=podtemplate.gpus_per_replica(template),
        accelerator=podtemplate.accelerator(template),
        vllm=podtemplate.vllm_args(template),
        role=podtemplate.role(template),
        startup_s=tuple(sorted(st.startup_s or ())),
    )


def pod_metrics(pod: FixturePod) -> PodMetrics:
    return PodMetrics(namespace=pod.namespace, pod=pod.name, variant=pod.variant, **pod.metrics.model_dump())


def model_traffic(model: FixtureModel) -> ModelTraffic:
    return ModelTraffic(
        key=ModelKey(model.namespace, model.model_id),
        request_count=model.request_count,
        epp_queue_size=model.epp_queue_size,
        epp_queue_bytes=model.epp_queue_bytes,
        latency=model_latency(model.latency) if model.latency is not None else None,
    )


def model_latency(latency: FixtureLatency) -> ModelLatency:
    def histogram(pairs: list[tuple[float, float]] | None) -> LatencyHistogram | None:
        return LatencyHistogram(tuple(pairs)) if pairs is not None else None

    return ModelLatency(window_s=latency.window_s, ttft=histogram(latency.ttft), tpot=histogram(latency.tpot))


def node(n: FixtureNode) -> NodeGpus:
    return NodeGpus(n.name, n.accelerator, n.allocatable_gpus)


def configmap_triples(fixture: Fixture) -> list[tuple[str, str, Mapping[str, Any]]]:
    return [(cm.namespace, cm.name, cm.data) for cm in fixture.configmaps]
