"""The optimised collector (typed decoding, columns by pod number) agrees with the dict-based path it replaced
(tests/metrics/reference_collector.py) on generated cycles: the same Collection, element for element.

Generated answers cover what the digests tell apart: pods behind a VA or not, requested models or not, labels
missing, several series of one pod (LoRA adapters: max; dispatch: sum), NaN, ±Inf, negative and out-of-range
values, one pod name in two namespaces, a known pod's name under another namespace (the digests' fast path looks
pods up by name: both must fall to the exact checks), cache-geometry labels that are not integers, histogram
buckets with and without `+Inf` or with an unreadable `le`, bounds spelled twice and elements repeated (their rates
summed), a model's elements apart from each other, -0 rates, EPP series with and without a namespace, failed queries
and malformed elements. Histograms are compared to the bit (their repr: 0.0 == -0.0).
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter.domain.cluster import Collection, ModelQuery
from adapter.domain.errors import PrometheusUnavailable, QueryError, SourceError
from adapter.domain.ids import ModelKey
from adapter.metrics.answers import assemble
from adapter.metrics.collector import PrometheusCollector
from adapter.metrics.queries import EPP_MODEL_LABEL, Query, QueryName, build_queries
from tests.metrics import reference_collector as reference

from .emulators import FakePrometheus

VALUES = ("0.5", "0.25", "3", "0", "-0", "12.5", "1", "0.999", "1.5", "NaN", "+Inf", "-Inf", "-2", "1e3", "7")
LE = ("0.01", "0.05", "0.1", "0.5", "1.0", "1", "2.5", "10", "10.0", "+Inf", "+inf", "abc", "-1")
"""Bucket bounds, some spelled twice ("1" and "1.0": one bound, whose rates are summed)."""
PER_POD = {
    QueryName.KV_CACHE_USAGE,
    QueryName.QUEUE_LENGTH,
    QueryName.RUNNING_REQUESTS,
    QueryName.AVG_INPUT_TOKENS,
    QueryName.AVG_OUTPUT_TOKENS,
    QueryName.PREFIX_CACHE_HIT_RATE,
    QueryName.AVG_TTFT,
    QueryName.AVG_ITL,
}


def generated_cycle(
    seed: int,
) -> tuple[list[ModelQuery], dict[tuple[str, str], str], list[tuple[Query, list[dict[str, Any]] | SourceError]]]:
    rng = random.Random(seed)
    namespaces = [f"ns-{i}" for i in range(rng.randint(1, 3))]
    model_ids = [f"org/m-{i}" for i in range(rng.randint(1, 4))]
    models = [
        ModelQuery(ModelKey(ns, m), retention_s=rng.choice((300.0, 600.0)))
        for ns in namespaces
        for m in model_ids
        if rng.random() < 0.7
    ] or [ModelQuery(ModelKey(namespaces[0], model_ids[0]))]
    pods: list[tuple[str, str, str]] = []  # (namespace, pod, model_id)
    pod_variants: dict[tuple[str, str], str] = {}
    for mq in models:
        for v in range(rng.randint(1, 2)):
            for p in range(rng.randint(0, 4)):
                name = f"{mq.key.model_id.split('/')[-1]}-v{v}-{p}"
                pods.append((mq.key.namespace, name, mq.key.model_id))
                pod_variants[(mq.key.namespace, name)] = f"{mq.key.model_id.split('/')[-1]}-v{v}"
    strangers = [(rng.choice(namespaces), f"gone-{i}", rng.choice(model_ids)) for i in range(rng.randint(0, 3))]
    outcomes: list[tuple[Query, list[dict[str, Any]] | SourceError]] = []
    for query in build_queries(models):
        roll = rng.random()
        if roll < 0.05:
            outcomes.append((query, QueryError("boom")))
            continue
        if roll < 0.08:
            outcomes.append((query, PrometheusUnavailable("down")))
            continue
        answer = _answer(rng, query, models, pods + strangers, namespaces, model_ids)
        if rng.random() < 0.04:
            answer.insert(rng.randint(0, len(answer)), rng.choice(MALFORMED))
        outcomes.append((query, answer))
    return models, pod_variants, outcomes


MALFORMED: tuple[dict[str, Any], ...] = (
    {"metric": {"pod": "x"}},
    {"metric": {}, "value": [1, "one"]},
    {"metric": {}, "value": []},
)


def _element(labels: dict[str, str], value: str) -> dict[str, Any]:
    return {"metric": labels, "value": [1_700_000_000.5, value]}


def _answer(
    rng: random.Random,
    query: Query,
    models: list[ModelQuery],
    pods: list[tuple[str, str, str]],
    namespaces: list[str],
    model_ids: list[str],
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    name = query.name
    if name in (QueryName.TTFT_HISTOGRAM, QueryName.TPOT_HISTOGRAM):
        for ns in namespaces:
            for m in model_ids:
                if rng.random() < 0.3:
                    continue
                for le in rng.sample(LE, rng.randint(1, len(LE))):
                    labels = {"namespace": ns, "model_name": m, "le": le}
                    if rng.random() < 0.05:
                        del labels["le"]
                    out.append(_element(labels, rng.choice(VALUES)))
        for _ in range(rng.choice((0, 0, 1, 3)) if out else 0):  # an element twice: its bound's rates summed
            out.insert(rng.randint(0, len(out)), dict(rng.choice(out)))
        if rng.random() < 0.2:  # a model's elements apart from each other
            rng.shuffle(out)
        return out
    if name in (QueryName.REQUEST_COUNT, QueryName.EPP_QUEUE_SIZE, QueryName.EPP_QUEUE_BYTES):
        label = "model_name" if name is QueryName.REQUEST_COUNT else EPP_MODEL_LABEL
        for ns in [*namespaces, ""]:
            for m in model_ids:
                if rng.random() < 0.5:
                    labels = {label: m, **({"namespace": ns} if ns else {})}
                    out.append(_element(labels, rng.choice(VALUES)))
        return out
    for home, pod, model in pods:
        for _ in range(rng.choice((0, 1, 1, 1, 2))):  # absent, once, or twice (LoRA adapters)
            series_model = model if rng.random() < 0.9 else rng.choice(model_ids)
            ns = home if rng.random() < 0.95 else rng.choice(namespaces)  # a known pod name in another namespace
            if name is QueryName.DISPATCH_RATE:
                labels = {"namespace": ns, "pod_name": pod, EPP_MODEL_LABEL: series_model}
            elif rng.random() < 0.1:
                labels = {"namespace": ns, "pod_name": pod, "model_name": series_model}  # no `pod` target label
            else:
                labels = {"namespace": ns, "pod": pod, "model_name": series_model}
            if name is QueryName.CACHE_CONFIG_INFO:
                labels |= {
                    "num_gpu_blocks": rng.choice(("30000", "2048", "x", "-4")),
                    "block_size": rng.choice(("16", "32", "")),
                }
            if rng.random() < 0.03:
                labels.pop(rng.choice(sorted(labels)))
            out.append(_element(labels, "1" if name is QueryName.CACHE_CONFIG_INFO else rng.choice(VALUES)))
    return out


def _reference(
    models: list[ModelQuery],
    pod_variants: dict[tuple[str, str], str],
    outcomes: list[tuple[Query, list[dict[str, Any]] | SourceError]],
) -> Collection:
    return reference.assemble(models, outcomes, pod_variants)


def same(got: Collection, want: Collection) -> None:
    """Equal, except the wording of errors: the same queries fail, with the same kind of error."""

    def kinds(c: Collection) -> list[tuple[str, str]]:
        return sorted((e.split(": ")[0], e.split(": ")[1]) for e in c.errors)

    assert kinds(got) == kinds(want)
    assert got.pods == want.pods
    assert got.models == want.models
    assert repr(got.models) == repr(want.models)  # to the bit: -0.0 would equal 0.0
    assert (got.available, got.unavailable_models, got.dropped_samples) == (
        want.available,
        want.unavailable_models,
        want.dropped_samples,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_assemble_equals_the_reference(seed: int) -> None:
    models, pod_variants, outcomes = generated_cycle(seed)
    same(assemble(models, outcomes, pod_variants), _reference(models, pod_variants, outcomes))


@pytest.fixture
async def fake() -> AsyncIterator[FakePrometheus]:
    server = await FakePrometheus().start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.mark.parametrize("seed", [1, 2, 3, 5, 8, 13, 21, 34], ids=lambda s: f"seed-{s}")
async def test_collect_over_http_equals_the_reference(fake: FakePrometheus, seed: int) -> None:
    """The whole client path (HTTP, typed decoding, pod index, join) on the answers the reference reads."""
    models, pod_variants, outcomes = generated_cycle(seed)
    expected: list[tuple[Query, list[dict[str, Any]] | SourceError]] = []
    for query, outcome in outcomes:
        if isinstance(outcome, SourceError):  # a 500: this query's error (a 503 would stop the cycle's others)
            fake.answers[query.promql] = 500
            expected.append((query, QueryError("500")))
        else:
            fake.raw[query.promql] = json.dumps({"status": "success", "data": {"result": outcome}}).encode()
            expected.append((query, outcome))
    async with PrometheusCollector(fake.url) as collector:
        got = await collector.collect(models, pod_variants)
    same(got, _reference(models, pod_variants, expected))
