"""Our own /metrics and health probes, served by a real aiohttp server on 127.0.0.1 and parsed with
prometheus_client's parser."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field

import aiohttp
import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from adapter.domain.decision import VariantDecision
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import DecisionPath
from adapter.servers.telemetry import HttpServer, Telemetry, build_telemetry_app, start_http_server
from adapter.store.decisions import DecisionStore

from ._keda_support import NS, T0_S, decision

Labels = frozenset[tuple[str, str]]
Scrape = dict[str, dict[Labels, float]]
"""sample name -> labels -> value."""


@dataclass
class FakeClock:
    now_s: float = T0_S

    def __call__(self) -> float:
        return self.now_s


@dataclass
class TelemetryHarness:
    store: DecisionStore
    telemetry: Telemetry
    clock: FakeClock
    url: str
    session: aiohttp.ClientSession
    ready_flag: list[bool] = field(default_factory=lambda: [False])

    async def scrape(self) -> Scrape:
        async with self.session.get(f"{self.url}/metrics") as response:
            assert response.status == 200
            text = await response.text()
        out: Scrape = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
        return out

    def publish(self, *decisions: VariantDecision, now_s: float = T0_S) -> None:
        self.store.publish({d.key: d for d in decisions}, now_s=now_s)


def labels(**items: str) -> Labels:
    return frozenset(items.items())


def variant_labels(name: str, *, accelerator: str = "H100", model_id: str = "meta/llama-3.1-8b") -> Labels:
    return labels(variant_name=name, namespace=NS, model_id=model_id, accelerator_type=accelerator)


async def _harness(*, controller_instance: str = "") -> AsyncIterator[TelemetryHarness]:
    store = DecisionStore()
    clock = FakeClock()
    telemetry = Telemetry(store, clock=clock, controller_instance=controller_instance)
    ready_flag = [False]
    app = build_telemetry_app(telemetry.registry, ready=lambda: ready_flag[0])
    server: HttpServer = await start_http_server(app, host="127.0.0.1", port=0)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            yield TelemetryHarness(store, telemetry, clock, f"http://127.0.0.1:{server.port}", session, ready_flag)
    finally:
        await server.stop()


@pytest.fixture
async def telemetry_harness() -> AsyncIterator[TelemetryHarness]:
    async for harness in _harness():
        yield harness


# ---------------------------------------------------------------- store-derived gauges


async def test_gauges_follow_the_store(telemetry_harness: TelemetryHarness) -> None:
    h = telemetry_harness
    h.publish(
        decision("llama-h100", desired=3, current=2),
        decision("llama-l4", desired=0, current=0, accelerator="L4", path=DecisionPath.FALLBACK),
        now_s=T0_S - 12,
    )
    scrape = await h.scrape()
    h100, l4 = variant_labels("llama-h100"), variant_labels("llama-l4", accelerator="L4")
    assert scrape["wva_desired_replicas"] == {h100: 3.0, l4: 0.0}
    assert scrape["wva_current_replicas"] == {h100: 2.0, l4: 0.0}
    assert scrape["wva_desired_ratio"] == {h100: 1.5, l4: 0.0}
    assert scrape["va_desired_optimized_replicas"] == {
        labels(variant_name="llama-h100", namespace=NS, reason="optimizer"): 3.0,
        labels(variant_name="llama-l4", namespace=NS, reason="fallback"): 0.0,
    }
    assert scrape["wva_decision_age_seconds"] == {
        labels(variant_name="llama-h100", namespace=NS): 12.0,
        labels(variant_name="llama-l4", namespace=NS): 12.0,
    }
    h.clock.now_s += 30
    aged = await h.scrape()
    assert aged["wva_decision_age_seconds"][labels(variant_name="llama-h100", namespace=NS)] == 42.0


@dataclass(frozen=True)
class StaleCase:
    id: str
    then: tuple[VariantDecision, ...]
    gone: Mapping[str, Labels]
    """metric -> the series that must have disappeared."""
    present: Mapping[str, Labels]
    """metric -> the series that must exist instead (if any)."""


_L4 = variant_labels("llama-l4", accelerator="L4")
_L4_OPT = labels(variant_name="llama-l4", namespace=NS, reason="optimizer")
STALE_CASES = [
    StaleCase(
        "va-deleted",
        then=(decision("llama-h100", desired=3),),
        gone={
            "wva_desired_replicas": _L4,
            "wva_current_replicas": _L4,
            "wva_desired_ratio": _L4,
            "va_desired_optimized_replicas": _L4_OPT,
            "wva_decision_age_seconds": labels(variant_name="llama-l4", namespace=NS),
        },
        present={},
    ),
    StaleCase(
        "accelerator-changed",
        then=(decision("llama-h100", desired=3), decision("llama-l4", desired=1, accelerator="L40S")),
        gone={"wva_desired_replicas": _L4, "wva_current_replicas": _L4, "wva_desired_ratio": _L4},
        present={"wva_desired_replicas": variant_labels("llama-l4", accelerator="L40S")},
    ),
    StaleCase(
        "path-changed",
        then=(
            decision("llama-h100", desired=3),
            decision("llama-l4", desired=1, accelerator="L4", path=DecisionPath.LAST_RESORT),
        ),
        gone={"va_desired_optimized_replicas": _L4_OPT},
        present={"va_desired_optimized_replicas": labels(variant_name="llama-l4", namespace=NS, reason="last-resort")},
    ),
]


@pytest.mark.parametrize("case", STALE_CASES, ids=[c.id for c in STALE_CASES])
async def test_stale_series_disappear(telemetry_harness: TelemetryHarness, case: StaleCase) -> None:
    """Upstream never deletes a series; a leftover one doubles an HPA's AverageValue sum (wva-upstream §6.7)."""
    h = telemetry_harness
    h.publish(decision("llama-h100", desired=3), decision("llama-l4", desired=1, accelerator="L4"))
    before = await h.scrape()
    for name, series in case.gone.items():
        assert series in before[name], name

    h.publish(*case.then, now_s=T0_S + 30)
    after = await h.scrape()
    for name, series in case.gone.items():
        assert series not in after.get(name, {}), name
    for name, series in case.present.items():
        assert series in after[name], name
    # The other VA is untouched, and each VA has exactly one series per metric.
    assert after["wva_desired_replicas"][variant_labels("llama-h100")] == 3.0
    for name in ("wva_desired_replicas", "va_desired_optimized_replicas"):
        assert len(after[name]) == len(case.then), name


async def test_empty_store_exports_no_variant_series(telemetry_harness: TelemetryHarness) -> None:
    scrape = await telemetry_harness.scrape()
    assert "wva_desired_replicas" not in scrape


# ---------------------------------------------------------------- reconciler-fed counters and histograms


def _by_key(*decisions: VariantDecision) -> dict[VariantKey, VariantDecision]:
    return {d.key: d for d in decisions}


@dataclass(frozen=True)
class CycleCase:
    id: str
    previous: Mapping[VariantKey, VariantDecision]
    current: Mapping[VariantKey, VariantDecision]
    scaling: Mapping[tuple[str, str, str], float]
    """(variant, direction, reason) -> count."""
    changes: Mapping[str, float]


CYCLE_CASES = [
    CycleCase(
        "first-cycle-compares-with-current",
        previous={},
        current=_by_key(decision("a", desired=4, current=2), decision("b", desired=1, current=1)),
        scaling={("a", "up", "optimizer"): 1.0},
        changes={"a": 0.0, "b": 0.0},
    ),
    CycleCase(
        "down-by-fallback",
        previous=_by_key(decision("a", desired=4, current=4)),
        current=_by_key(decision("a", desired=2, current=4, path=DecisionPath.FALLBACK)),
        scaling={("a", "down", "fallback"): 1.0},
        changes={"a": 1.0},
    ),
    CycleCase(
        "unchanged-desired-is-not-scaling-even-if-current-lags",
        previous=_by_key(decision("a", desired=4, current=2)),
        current=_by_key(decision("a", desired=4, current=3)),
        scaling={},
        changes={"a": 0.0},
    ),
    CycleCase(
        "accelerator-change-is-an-allocation-change",
        previous=_by_key(decision("a", desired=2, accelerator="L4")),
        current=_by_key(decision("a", desired=2, accelerator="H100")),
        scaling={},
        changes={"a": 1.0},
    ),
]


@pytest.mark.parametrize("case", CYCLE_CASES, ids=[c.id for c in CYCLE_CASES])
async def test_record_cycle_counters(telemetry_harness: TelemetryHarness, case: CycleCase) -> None:
    h = telemetry_harness
    h.telemetry.record_cycle(duration_s=0.2, decisions=case.current, previous=case.previous)
    scrape = await h.scrape()
    scaling = {
        (dict(lbl)["variant_name"], dict(lbl)["direction"], dict(lbl)["reason"]): value
        for lbl, value in scrape.get("wva_replica_scaling_total", {}).items()
    }
    assert scaling == case.scaling
    changes = {dict(lbl)["variant_name"]: v for lbl, v in scrape["va_allocation_changes_total"].items()}
    assert changes == case.changes


async def test_counters_accumulate_and_deleted_va_series_are_removed(
    telemetry_harness: TelemetryHarness,
) -> None:
    h = telemetry_harness
    c1 = _by_key(decision("a", desired=1, current=1), decision("b", desired=1, current=1))
    c2 = _by_key(decision("a", desired=3, current=1), decision("b", desired=2, current=1))
    c3 = _by_key(decision("a", desired=5, current=3))  # b deleted
    h.telemetry.record_cycle(duration_s=0.1, decisions=c1, previous={})
    h.telemetry.record_cycle(duration_s=0.1, decisions=c2, previous=c1)
    h.telemetry.record_cycle(duration_s=0.3, decisions=c3, previous=c2)
    scrape = await h.scrape()
    assert scrape["wva_replica_scaling_total"] == {
        labels(variant_name="a", namespace=NS, direction="up", reason="optimizer"): 2.0
    }
    assert scrape["va_allocation_changes_total"] == {labels(variant_name="a", namespace=NS): 2.0}
    assert scrape["wva_cycle_duration_seconds_count"] == {labels(outcome="success"): 3.0}
    assert scrape["wva_cycle_duration_seconds_sum"][labels(outcome="success")] == pytest.approx(0.5)

    h.telemetry.forget(VariantKey(NS, "a"))
    after = await h.scrape()
    assert "wva_replica_scaling_total" not in after
    assert "va_allocation_changes_total" not in after


async def test_cycle_errors_and_collections_are_histograms(telemetry_harness: TelemetryHarness) -> None:
    h = telemetry_harness
    h.telemetry.record_cycle_error(duration_s=1.5)
    h.telemetry.record_collection(duration_s=0.02)
    h.telemetry.record_collection(duration_s=7.0, ok=False)
    h.telemetry.record_collection(duration_s=0.004, source="epp")
    scrape = await h.scrape()
    assert scrape["wva_cycle_duration_seconds_count"] == {labels(outcome="error"): 1.0}
    assert scrape["wva_cycle_duration_seconds_bucket"][labels(outcome="error", le="1.0")] == 0.0
    assert scrape["wva_cycle_duration_seconds_bucket"][labels(outcome="error", le="2.5")] == 1.0
    assert scrape["wva_metrics_collection_duration_seconds_count"] == {
        labels(source="prometheus", outcome="success"): 1.0,
        labels(source="prometheus", outcome="error"): 1.0,
        labels(source="epp", outcome="success"): 1.0,
    }


async def test_controller_instance_label_on_every_series() -> None:
    async for h in _harness(controller_instance="wva-a"):
        h.publish(decision("a", desired=2, current=1))
        h.telemetry.record_cycle(duration_s=0.1, decisions=_by_key(decision("a", desired=2, current=1)), previous={})
        scrape = await h.scrape()
        wva = {
            name: series
            for name, series in scrape.items()
            if name.startswith(("wva_", "va_")) and not name.endswith("_created")
        }
        assert set(wva) >= {
            "wva_desired_replicas",
            "va_desired_optimized_replicas",
            "wva_decision_age_seconds",
            "wva_replica_scaling_total",
            "va_allocation_changes_total",
            "wva_cycle_duration_seconds_count",
        }
        for name, series in wva.items():
            for lbl in series:
                assert ("controller_instance", "wva-a") in lbl, name


async def test_own_registry_not_the_global_one(telemetry_harness: TelemetryHarness) -> None:
    telemetry_harness.publish(decision("a", desired=2))
    global_names = {m.name for m in prometheus_client.REGISTRY.collect()}
    assert not global_names & {"wva_desired_replicas", "wva_cycle_duration_seconds", "wva_replica_scaling"}
    # Two adapters in one process (tests, the simulator) do not collide.
    Telemetry(DecisionStore())
    Telemetry(DecisionStore())


# ---------------------------------------------------------------- HTTP endpoints


async def test_health_and_readiness(telemetry_harness: TelemetryHarness) -> None:
    h = telemetry_harness
    for path in ("/healthz", "/livez"):
        async with h.session.get(h.url + path) as response:
            assert response.status == 200
    async with h.session.get(h.url + "/readyz") as response:
        assert response.status == 503
    h.ready_flag[0] = True
    async with h.session.get(h.url + "/readyz") as response:
        assert response.status == 200


@pytest.mark.parametrize(
    ("ready", "status"),
    [(lambda: True, 200), (lambda: False, 503), (lambda: 1 / 0 > 0, 503)],
    ids=["ready", "not-ready", "check-raises"],
)
async def test_readyz_statuses(ready: Callable[[], bool], status: int) -> None:
    app = build_telemetry_app(prometheus_client.CollectorRegistry(), ready=ready)
    server = await start_http_server(app, host="127.0.0.1", port=0)
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
            session.get(f"http://127.0.0.1:{server.port}/readyz") as response,
        ):
            assert response.status == status
    finally:
        await server.stop()


@pytest.mark.parametrize(
    ("serve_metrics", "serve_health", "expected"),
    [
        (True, False, {"/metrics": 200, "/healthz": 404, "/readyz": 404}),
        (False, True, {"/metrics": 404, "/healthz": 200, "/readyz": 200}),
    ],
    ids=["metrics-port", "probe-port"],
)
async def test_split_ports(serve_metrics: bool, serve_health: bool, expected: dict[str, int]) -> None:
    app = build_telemetry_app(
        prometheus_client.CollectorRegistry(),
        ready=lambda: True,
        serve_metrics=serve_metrics,
        serve_health=serve_health,
    )
    server = await start_http_server(app, host="127.0.0.1", port=0)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            for path, status in expected.items():
                async with session.get(f"http://127.0.0.1:{server.port}{path}") as response:
                    assert response.status == status, path
    finally:
        await server.stop()


async def test_metrics_openmetrics_negotiation(telemetry_harness: TelemetryHarness) -> None:
    h = telemetry_harness
    h.publish(decision("a", desired=2))
    headers = {"Accept": "application/openmetrics-text; version=1.0.0"}
    async with h.session.get(h.url + "/metrics", headers=headers) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        assert (await response.text()).rstrip().endswith("# EOF")


def test_families_read_at_scrape_time() -> None:
    telemetry = Telemetry(DecisionStore(), controller_instance="a")
    counts = {("hit",): 1.0}
    telemetry.add_family("wva_test_cache", "doc", kind="counter", labelnames=("result",), read=lambda: counts)
    telemetry.add_family("wva_test_state", "doc", kind="gauge", labelnames=(), read=lambda: {(): 3.0})
    sample = telemetry.registry.get_sample_value
    assert sample("wva_test_cache_total", {"result": "hit", "controller_instance": "a"}) == 1.0
    counts[("hit",)] = 5.0
    assert sample("wva_test_cache_total", {"result": "hit", "controller_instance": "a"}) == 5.0
    assert sample("wva_test_state", {"controller_instance": "a"}) == 3.0
    with pytest.raises(ValueError, match="already registered"):
        telemetry.add_family("wva_test_state", "doc", kind="gauge", labelnames=(), read=dict)


def test_a_broken_family_reader_does_not_break_the_scrape(caplog: pytest.LogCaptureFixture) -> None:
    telemetry = Telemetry(DecisionStore())

    def broken() -> dict[tuple[str, ...], float]:
        raise RuntimeError("boom")

    telemetry.add_family("wva_test_broken", "doc", kind="counter", labelnames=("x",), read=broken)
    text = prometheus_client.generate_latest(telemetry.registry).decode()
    assert "wva_cycle_duration_seconds" in text
    assert "reading wva_test_broken failed" in caplog.text
