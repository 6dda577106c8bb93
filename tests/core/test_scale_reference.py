"""Issue 22 made the cycle faster without changing a decision: the optimised pieces of decide agree with the code
they replaced (kept here as references), and a whole cycle — optimised collector and decide — gives the same
decisions as the previous collector and decide on generated fleets.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator
from contextlib import contextmanager
from operator import attrgetter
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter import engine
from adapter.config.configmaps import ConfigSet
from adapter.config.engine import EngineConfig
from adapter.domain.decision import reason_family
from adapter.domain.ids import MODEL_ORDER, VARIANT_ORDER, ModelKey, VariantKey
from adapter.domain.snapshot import (
    DesiredAlloc,
    PodMetrics,
    ScaleTarget,
    Snapshot,
    VariantSpec,
    VariantStatus,
    VariantView,
)
from adapter.engine import analyze
from adapter.metrics.answers import assemble
from adapter.reconciler.loop import decide_cycle
from tests.metrics import reference_collector
from tests.metrics.test_collector_reference import generated_cycle

# ---- the replaced code ------------------------------------------------------------------------------------


def reference_pods_by_variant(snapshot: Snapshot) -> dict[VariantKey, list[PodMetrics]]:
    """`Snapshot.pods_by_variant` before issue 22."""
    out: dict[VariantKey, list[PodMetrics]] = {}
    for pod in sorted(snapshot.pods, key=attrgetter("namespace", "variant", "pod")):
        out.setdefault(VariantKey(pod.namespace, pod.variant), []).append(pod)
    return out


def reference_variants_by_model(snapshot: Snapshot) -> dict[ModelKey, list[VariantView]]:
    """`Snapshot.variants_by_model` before it sorted on tuples."""
    groups: dict[ModelKey, list[VariantView]] = {}
    for view in sorted(snapshot.variants, key=lambda v: v.key):
        groups.setdefault(view.spec.model, []).append(view)
    return groups


REFERENCE_NUMBERS = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|µs|ns|h|m|s))+|\d+(?:\.\d+)?")
"""`domain.decision._NUMBERS` before issue 22's last change (the same matches, tried from every position)."""


def reference_usable(pod: PodMetrics) -> bool:
    """`engine.analyze._usable` before issue 22."""
    return (
        all(value is None or (math.isfinite(value) and value >= 0) for value in (pod.kv_cache_usage, pod.queue_length))
        and pod.has_saturation_metrics
    )


@contextmanager
def previous_decide() -> Iterator[None]:
    with (
        mock.patch.object(Snapshot, "pods_by_variant", reference_pods_by_variant),
        mock.patch.object(analyze, "_usable", reference_usable),
    ):
        yield


# ---- the pieces --------------------------------------------------------------------------------------------

READINGS = st.one_of(
    st.none(),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 0.0, -1.0, 1e-300]),
    st.floats(min_value=-2, max_value=50),
)
PODS = st.lists(
    st.builds(
        PodMetrics,
        namespace=st.sampled_from(["a", "b", "c"]),
        pod=st.text("xyz0123", min_size=1, max_size=4),
        variant=st.sampled_from(["v1", "v2", "w"]),
        kv_cache_usage=READINGS,
        queue_length=READINGS,
    ),
    max_size=40,
)


@given(PODS, st.booleans())
def test_pods_by_variant_equals_the_reference(pods: list[PodMetrics], collected_order: bool) -> None:
    """Any order, and the collector's: (namespace, pod), where each VA's pods come in name order but VAs interleave
    (the grouping then skips the sort)."""
    if collected_order:
        pods = sorted(pods, key=attrgetter("namespace", "pod"))
    snapshot = Snapshot(0.0, (), tuple(pods))
    got, want = snapshot.pods_by_variant(), reference_pods_by_variant(snapshot)
    assert list(got.items()) == list(want.items())  # same groups, same order within and between them
    assert [[p is q for p, q in zip(g, w, strict=True)] for g, w in zip(got.values(), want.values(), strict=True)] == [
        [True] * len(w) for w in want.values()
    ]  # the same objects, not only equal ones (two pods of one name keep their order)


VIEWS = st.lists(
    st.builds(
        lambda namespace, name, model: VariantView(VariantSpec(VariantKey(namespace, name), model, "Deployment", name)),
        st.sampled_from(["a", "b", "c"]),
        st.text("xyz0123", min_size=1, max_size=4),
        st.sampled_from(["m1", "m2", "org/m"]),
    ),
    max_size=30,
    unique_by=lambda view: view.key,
)


@given(VIEWS)
def test_variants_by_model_equals_the_reference(views: list[VariantView]) -> None:
    snapshot = Snapshot(0.0, tuple(views))
    got, want = snapshot.variants_by_model(), reference_variants_by_model(snapshot)
    assert list(got.items()) == list(want.items())  # same models in the same order, each with its VAs in order


NAMES = st.text("ab/-.0", max_size=3)


@given(st.sets(st.tuples(NAMES, NAMES), max_size=30))
def test_the_order_keys_sort_as_the_keys_do(pairs: set[tuple[str, str]]) -> None:
    models, variants = [ModelKey(*p) for p in pairs], [VariantKey(*p) for p in pairs]
    assert sorted(models, key=MODEL_ORDER) == sorted(models)
    assert sorted(variants, key=VARIANT_ORDER) == sorted(variants)


@given(READINGS, READINGS)
def test_usable_equals_the_reference(kv: float | None, queue: float | None) -> None:
    pod = PodMetrics("ns", "p", "v", kv_cache_usage=kv, queue_length=queue)
    assert analyze._usable(pod) == reference_usable(pod)


REASON_TEXT = st.one_of(
    st.text(alphabet="0123456789.msµnhx (),:<-#", max_size=40),
    st.text(max_size=40),
    st.sampled_from(
        [
            "Optimizer returned 0 but retention period not exceeded (1m30s < 5m), preserving allocation",
            "predictive scale-up (optimizer: cost-aware, required: 2.14 rps)",
            "1.5.3ms 10h20m5s 7µs 3ns 4 m",
        ]
    ),
)


@settings(max_examples=500)
@given(REASON_TEXT)
def test_reason_family_equals_the_reference(reason: str) -> None:
    assert reason_family(reason) == REFERENCE_NUMBERS.sub("#", reason)


# ---- a whole cycle -----------------------------------------------------------------------------------------

SATURATION = ("workload-variant-autoscaler-system", "wva-saturation-scaling-config")


def views_for(seed: int, pod_variants: dict[tuple[str, str], str], models: list[ModelKey]) -> tuple[VariantView, ...]:
    """A VA per variant the pods name (model from the variant's name), some with a previous decision."""
    rng = random.Random(seed)
    out = []
    for namespace, variant in sorted({(ns, v) for (ns, _), v in pod_variants.items()}):
        model = ModelKey(namespace, "org/" + variant.rsplit("-v", 1)[0])  # generated_cycle names them so
        assert model in models
        replicas = sum(1 for (ns, _), v in pod_variants.items() if (ns, v) == (namespace, variant))
        status = (
            VariantStatus(desired=DesiredAlloc(replicas + rng.randint(-1, 1), "steady", -30.0, -900.0))
            if rng.random() < 0.5
            else VariantStatus()
        )
        out.append(
            VariantView(
                VariantSpec(
                    VariantKey(namespace, variant),
                    model.model_id,
                    "Deployment",
                    variant,
                    min_replicas=rng.choice((0, 1)),
                    max_replicas=8,
                    cost=rng.choice((1.0, 2.5, 4.0)),
                    accelerator=rng.choice(("A100", "L4")),
                ),
                status,
                ScaleTarget("Deployment", namespace, variant, replicas, replicas),
            )
        )
    return tuple(out)


def saturation_config(analyzer: str) -> EngineConfig:
    """The generated cycles' configuration: V1 (`v1`) or V2 (`v2`) with thresholds 0.8 / 5."""
    entry = "kvCacheThreshold: 0.8\nqueueLengthThreshold: 5\n" + (
        "analyzerName: saturation\n" if analyzer == "v2" else ""
    )
    return EngineConfig(configmaps=ConfigSet.from_raw([(*SATURATION, {"default": entry})]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=2**32 - 1), st.sampled_from(["v1", "v2"]))
def test_a_cycle_decides_as_before(seed: int, analyzer: str) -> None:
    models, pod_variants, outcomes = generated_cycle(seed)
    if not pod_variants:
        return
    views = views_for(seed, pod_variants, [m.key for m in models])
    config = saturation_config(analyzer)

    def decisions(collection: object) -> dict[VariantKey, object]:
        snapshot = Snapshot(
            1_000.0,
            views,
            collection.pods,  # type: ignore[attr-defined]
            collection.models,  # type: ignore[attr-defined]
            metrics_available=collection.available,  # type: ignore[attr-defined]
            unavailable_models=collection.unavailable_models,  # type: ignore[attr-defined]
        )
        result, _ = engine.decide(snapshot, engine.EngineState(), config, 1_000.0)
        return dict(result.decisions)

    optimised = assemble(models, outcomes, pod_variants)
    with previous_decide():
        before = decisions(reference_collector.assemble(models, outcomes, pod_variants))
    after = decisions(optimised)
    assert after == before
    snapshot = Snapshot(1_000.0, views, optimised.pods, optimised.models)
    assert decide_cycle(snapshot, engine.EngineState(), config, 1_000.0)[0].decisions == dict(
        engine.decide(snapshot, engine.EngineState(), config, 1_000.0)[0].decisions
    ), "the GC pause changes nothing but time"
