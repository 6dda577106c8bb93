"""Our own /metrics (prometheus_client) and the /healthz, /readyz probes.

Why a scrape-time collector: upstream WVA sets gauges and never deletes them, so a deleted VA (or a VA whose
accelerator label changed) keeps exporting its last desired count and an HPA summing over `variant_name` sees
two series (research wva-upstream §6.7). Here the per-VA gauges are built from the DecisionStore at every
scrape: what is not in the store is not exported. Counters the reconciler feeds (`Telemetry.record_cycle`)
are removed for VAs that leave the decision set.

Exported (labels; `controller_instance` is added to all when configured, as upstream does):
- `wva_desired_replicas`, `wva_current_replicas`, `wva_desired_ratio` (gauges;
  variant_name, namespace, model_id, accelerator_type) — the same values the External Metrics API and the
  KEDA scaler serve.
- `va_desired_optimized_replicas` (gauge; variant_name, namespace, reason) — seed 002's metric. `reason` is
  the decision path (optimizer | fallback | last-resort | scale-from-zero), a bounded set: the free-text
  reason quotes durations and would mint a new series every cycle.
- `wva_decision_age_seconds` (gauge; variant_name, namespace) — now − when the engine decided: a stalled
  reconciler shows as a growing age.
- `wva_replica_scaling_total` (counter; variant_name, namespace, direction, reason) — decisions that moved the
  desired count (up | down); `reason` is the decision path.
- `va_allocation_changes_total` (counter; variant_name, namespace) — desired count or accelerator changed.
- `wva_cycle_duration_seconds` (histogram; outcome = success | error) — one reconcile cycle.
- `wva_metrics_collection_duration_seconds` (histogram; source, outcome) — one collection.
- Edge counters read at scrape time from the parts that keep them (`Telemetry.add_family`): the token-review
  and authorization caches, TLS reloads, Events written, live-configuration reloads (serve composes them).

A private CollectorRegistry is used, never prometheus_client's global one, so tests, the simulator and
several adapters in one process never collide.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from adapter.domain.decision import VariantDecision
from adapter.domain.ids import VariantKey
from adapter.store.decisions import DecisionReader

_log = logging.getLogger(__name__)

Clock = Callable[[], float]
"""Seconds since the Unix epoch; injected so tests control the decision age."""

VARIANT_LABELS = ("variant_name", "namespace", "model_id", "accelerator_type")
MODEL_LABELS = ("namespace", "model_id", "analyzer", "unit")
INSTANCE_LABEL = "controller_instance"

CYCLE_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""A cycle is milliseconds of arithmetic plus the collection; beyond the 30 s default interval it is late."""
COLLECTION_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

Direction = Literal["up", "down"]


class _DecisionCollector:
    """Builds the per-VA gauges from the store at scrape time (no state of its own)."""

    def __init__(self, reader: DecisionReader, *, clock: Clock, instance: str) -> None:
        self._reader = reader
        self._clock = clock
        self._instance = instance

    def _families(self) -> dict[str, GaugeMetricFamily]:
        extra = [INSTANCE_LABEL] if self._instance else []
        variant = [*VARIANT_LABELS, *extra]
        brief = ["variant_name", "namespace", *extra]

        return {
            "desired": GaugeMetricFamily(
                "wva_desired_replicas", "Desired replica count served for the variant.", labels=variant
            ),
            "current": GaugeMetricFamily(
                "wva_current_replicas", "Replicas of the scale target when it was decided.", labels=variant
            ),
            "ratio": GaugeMetricFamily(
                "wva_desired_ratio", "Desired / current replicas (desired when current is 0).", labels=variant
            ),
            "optimized": GaugeMetricFamily(
                "va_desired_optimized_replicas",
                "Desired replicas, labelled with the decision path (optimizer, fallback, ...).",
                labels=[*brief[:2], "reason", *extra],
            ),
            "age": GaugeMetricFamily(
                "wva_decision_age_seconds",
                "Seconds since the engine produced the served decision.",
                labels=brief,
            ),
            "required": GaugeMetricFamily(
                "wva_model_required_capacity",
                "Capacity the model's analyzer requires on top of what runs, in its unit (tokens, rps, replicas).",
                labels=[*MODEL_LABELS, *extra],
            ),
            "spare": GaugeMetricFamily(
                "wva_model_spare_capacity",
                "Capacity the model's analyzer finds removable, in its unit.",
                labels=[*MODEL_LABELS, *extra],
            ),
            "gpus_allocatable": GaugeMetricFamily(
                "wva_gpus_allocatable",
                "GPUs the cluster's nodes offer, per normalised accelerator type.",
                labels=["accelerator_type", *extra],
            ),
            "gpus_used": GaugeMetricFamily(
                "wva_gpus_used",
                "GPUs the variants' current replicas hold, per accelerator type.",
                labels=["accelerator_type", *extra],
            ),
            "gpus_desired": GaugeMetricFamily(
                "wva_gpus_desired",
                "GPUs the served decisions ask for, per accelerator type.",
                labels=["accelerator_type", *extra],
            ),
            "recommendation": GaugeMetricFamily(
                "wva_recommendation_replicas",
                "The recommender's replica bounds for the variant (bound: lower, target, upper).",
                labels=[*VARIANT_LABELS, "bound", *extra],
            ),
            "qm_parameter": GaugeMetricFamily(
                "wva_queueing_model_parameter_ms",
                "Learned queueing-model service parameters per variant (alpha ms/iteration, beta and gamma ms/token).",
                labels=["namespace", "variant_name", "parameter", *extra],
            ),
            "qm_max_rps": GaugeMetricFamily(
                "wva_queueing_model_max_rps_per_replica",
                "Largest request rate one replica sustains within the SLO (lambda*), per variant.",
                labels=["namespace", "variant_name", *extra],
            ),
            "model_errors": GaugeMetricFamily(
                "wva_model_decision_failed",
                "1 while the model's last decision raised an internal error (the model is held).",
                labels=["namespace", "model_id", *extra],
            ),
        }

    def describe(self) -> Iterable[Metric]:
        """Declares the names so the registry rejects a duplicate registration."""
        return list(self._families().values())

    def collect(self) -> Iterable[Metric]:
        families = self._families()
        now_s = self._clock()
        extra = [self._instance] if self._instance else []
        for stored in self._reader.list():
            d = stored.decision
            variant = [d.key.name, d.key.namespace, d.model_id, d.accelerator, *extra]
            brief = [d.key.name, d.key.namespace, *extra]
            families["desired"].add_metric(variant, d.desired_replicas)
            families["current"].add_metric(variant, d.current_replicas)
            families["ratio"].add_metric(variant, d.desired_ratio)
            families["optimized"].add_metric([*brief[:2], d.path.value, *extra], d.desired_replicas)
            families["age"].add_metric(brief, max(0.0, now_s - stored.decided_at_s))
            rec = d.recommendation
            if rec is not None:
                for bound, value in (("lower", rec.lower_bound), ("target", rec.target), ("upper", rec.upper_bound)):
                    families["recommendation"].add_metric([*variant[:4], bound, *extra], value)
        figures = self._reader.figures
        for model, analysis in sorted(figures.models.items()):
            labels = [model.namespace, model.model_id, str(analysis.analyzer), analysis.unit, *extra]
            if analysis.required_capacity is not None:
                families["required"].add_metric(labels, analysis.required_capacity)
            if analysis.spare_capacity is not None:
                families["spare"].add_metric(labels, analysis.spare_capacity)
        for model, analysis in sorted(figures.models.items()):
            if str(analysis.analyzer) != "queueing-model":
                continue
            variants = analysis.analysis.get("variants")
            for name, figures_of in sorted((variants or {}).items()):
                for parameter in ("alpha", "beta", "gamma"):
                    value = figures_of.get(parameter)
                    if isinstance(value, int | float):
                        families["qm_parameter"].add_metric([model.namespace, name, parameter, *extra], value)
                rate = figures_of.get("max_rps_per_replica")
                if isinstance(rate, int | float):
                    families["qm_max_rps"].add_metric([model.namespace, name, *extra], rate)
        for accelerator, pool in sorted(figures.gpu_pools.items()):
            families["gpus_allocatable"].add_metric([accelerator, *extra], pool.allocatable_gpus)
            families["gpus_used"].add_metric([accelerator, *extra], pool.used_gpus)
            families["gpus_desired"].add_metric([accelerator, *extra], pool.desired_gpus)
        for model in sorted(figures.errors):
            families["model_errors"].add_metric([model.namespace, model.model_id, *extra], 1)
        return list(families.values())


Reading = Callable[[], Mapping[tuple[str, ...], float]]
"""Label values → value, read at scrape time."""


@dataclass(frozen=True, slots=True)
class _Family:
    kind: Literal["counter", "gauge"]
    name: str
    documentation: str
    labelnames: tuple[str, ...]
    read: Reading


class _ReadingCollector:
    """Families whose values live in other objects (cache statistics, reload counters), read per scrape."""

    def __init__(self, instance: str) -> None:
        self._instance = instance
        self.families: list[_Family] = []

    def _build(self, family: _Family) -> GaugeMetricFamily | CounterMetricFamily:
        labels = [*family.labelnames, *([INSTANCE_LABEL] if self._instance else [])]
        if family.kind == "counter":
            return CounterMetricFamily(family.name, family.documentation, labels=labels)
        return GaugeMetricFamily(family.name, family.documentation, labels=labels)

    def describe(self) -> Iterable[Metric]:
        return [self._build(f) for f in self.families]

    def collect(self) -> Iterable[Metric]:
        out: list[Metric] = []
        extra = [self._instance] if self._instance else []
        for family in self.families:
            metric = self._build(family)
            try:
                values = family.read()
            except Exception:  # a broken reader must not break the scrape
                _log.exception("reading %s failed", family.name)
                values = {}
            for labels, value in sorted(values.items()):
                metric.add_metric([*labels, *extra], value)
            out.append(metric)
        return out


class Telemetry:
    """The adapter's metrics: the store-derived gauges plus what the reconciler reports.

    Contract for the reconciler: call `record_cycle` once per successful cycle with the full decision set it
    published and the previous cycle's set; `record_cycle_error` when a cycle fails; `record_collection`
    per metrics collection. Every method is thread-safe and cheap (no I/O).
    """

    def __init__(
        self,
        reader: DecisionReader,
        *,
        clock: Clock = time.time,
        controller_instance: str = "",
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._instance = controller_instance
        extra = (INSTANCE_LABEL,) if controller_instance else ()
        self._extra_values: tuple[str, ...] = (controller_instance,) if controller_instance else ()
        self._lock = threading.Lock()
        self._tracked: dict[VariantKey, set[tuple[str, str]]] = {}
        """Per VA, the (direction, reason) label pairs its scaling counter has, so `forget` removes them."""
        self._scaling = Counter(
            "wva_replica_scaling",
            "Decisions that moved a variant's desired replica count, by direction and decision path.",
            labelnames=("variant_name", "namespace", "direction", "reason", *extra),
            registry=self.registry,
        )
        self._allocation_changes = Counter(
            "va_allocation_changes",
            "Changes of a variant's desired allocation (replica count or accelerator).",
            labelnames=("variant_name", "namespace", *extra),
            registry=self.registry,
        )
        self._cycle = Histogram(
            "wva_cycle_duration_seconds",
            "Duration of one reconcile cycle (snapshot, decide, publish).",
            labelnames=("outcome", *extra),
            buckets=CYCLE_BUCKETS_S,
            registry=self.registry,
        )
        self._collection = Histogram(
            "wva_metrics_collection_duration_seconds",
            "Duration of one metrics collection, by source.",
            labelnames=("source", "outcome", *extra),
            buckets=COLLECTION_BUCKETS_S,
            registry=self.registry,
        )
        self._dropped = Counter(
            "wva_metrics_samples_dropped",
            "Metric samples dropped by the collector, by reason (nan, inf, negative, unknown-pod, ...).",
            labelnames=("reason", *extra),
            registry=self.registry,
        )
        self._recorded = Counter(
            "wva_recorder_cycles_written",
            "Cycles the flight recorder saved as replay fixtures.",
            labelnames=extra,
            registry=self.registry,
        )
        self._recorder_errors = Counter(
            "wva_recorder_errors",
            "Cycles the flight recorder could not save, by reason (the cycle itself is never failed).",
            labelnames=("reason", *extra),
            registry=self.registry,
        )
        self._rejected = Counter(
            "wva_inputs_rejected",
            "Outside objects rejected (VariantAutoscalings, ConfigMap entries), once per object and problem.",
            labelnames=("kind", "reason", *extra),
            registry=self.registry,
        )
        self.registry.register(_DecisionCollector(reader, clock=clock, instance=controller_instance))
        self._readings = _ReadingCollector(controller_instance)
        self.registry.register(self._readings)

    def add_family(
        self,
        name: str,
        documentation: str,
        *,
        kind: Literal["counter", "gauge"],
        labelnames: Iterable[str],
        read: Reading,
    ) -> None:
        """Export `read()` (label values → value) at every scrape as a counter (`name` without `_total`; the
        exposition adds it) or a gauge. For statistics other objects keep, so they need no metrics library."""
        if any(f.name == name for f in self._readings.families):
            raise ValueError(f"metric family {name!r} is already registered")
        self._readings.families.append(_Family(kind, name, documentation, tuple(labelnames), read))

    def record_cycle(
        self,
        *,
        duration_s: float,
        decisions: Mapping[VariantKey, VariantDecision],
        previous: Mapping[VariantKey, VariantDecision],
    ) -> None:
        """One successful cycle. A VA counts as scaled when its desired count differs from the previous
        cycle's (or, for a VA new to this process, from its current replicas); VAs tracked before but absent
        from `decisions` are forgotten (their counters removed)."""
        self._cycle.labels("success", *self._extra_values).observe(duration_s)
        with self._lock:
            for key in [k for k in self._tracked if k not in decisions]:
                self._forget_locked(key)
            for key, decision in decisions.items():
                self._record_decision_locked(key, decision, previous.get(key))

    def record_cycle_error(self, *, duration_s: float) -> None:
        """A cycle that failed before publishing; the served decisions stay as they were."""
        self._cycle.labels("error", *self._extra_values).observe(duration_s)

    def record_collection(
        self,
        *,
        duration_s: float,
        source: str = "prometheus",
        ok: bool = True,
        dropped: Mapping[str, int] | None = None,
    ) -> None:
        """One collection from `source` (a small fixed set: "prometheus", "epp", ...), and the samples it
        dropped by reason."""
        outcome = "success" if ok else "error"
        self._collection.labels(source, outcome, *self._extra_values).observe(duration_s)
        for reason, count in (dropped or {}).items():
            if count > 0:
                self._dropped.labels(reason, *self._extra_values).inc(count)

    def record_recorder_written(self) -> None:
        """The flight recorder wrote one cycle (called from its writer thread)."""
        (self._recorded.labels(*self._extra_values) if self._extra_values else self._recorded).inc()

    def record_recorder_error(self, reason: str) -> None:
        """The flight recorder could not write a cycle (disk-full, permission, read-only, io, busy, encode)."""
        self._recorder_errors.labels(reason, *self._extra_values).inc()

    def record_rejected(self, *, kind: str, reason: str) -> None:
        """An outside object (a VA, a ConfigMap entry, …) newly rejected; `reason` is a small fixed vocabulary."""
        self._rejected.labels(kind, reason, *self._extra_values).inc()

    def forget(self, key: VariantKey) -> None:
        """Drop every counter series of a VA (called for deleted VAs; record_cycle does it itself)."""
        with self._lock:
            self._forget_locked(key)

    def _record_decision_locked(
        self, key: VariantKey, decision: VariantDecision, previous: VariantDecision | None
    ) -> None:
        ids = (key.name, key.namespace)
        pairs = self._tracked.setdefault(key, set())
        changes = self._allocation_changes.labels(*ids, *self._extra_values)  # exists from the start at 0
        baseline = previous.desired_replicas if previous is not None else decision.current_replicas
        direction: Direction | None = None
        if decision.desired_replicas > baseline:
            direction = "up"
        elif decision.desired_replicas < baseline:
            direction = "down"
        if direction is not None:
            reason = decision.path.value
            self._scaling.labels(*ids, direction, reason, *self._extra_values).inc()
            pairs.add((direction, reason))
        if previous is not None and (
            previous.desired_replicas != decision.desired_replicas or previous.accelerator != decision.accelerator
        ):
            changes.inc()

    def _forget_locked(self, key: VariantKey) -> None:
        ids = (key.name, key.namespace)
        for direction, reason in self._tracked.pop(key, set()):
            self._scaling.remove(*ids, direction, reason, *self._extra_values)
        self._allocation_changes.remove(*ids, *self._extra_values)


def _metrics_handler(registry: CollectorRegistry) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """prometheus_client's aiohttp handler (content negotiation, OpenMetrics) when the installed version has
    it; a plain text-format handler otherwise."""
    try:
        from prometheus_client.aiohttp import make_aiohttp_handler  # optional: by version
    except ImportError:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        async def metrics(_request: web.Request) -> web.StreamResponse:
            return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

        return metrics
    return make_aiohttp_handler(registry)


def build_telemetry_app(
    registry: CollectorRegistry,
    *,
    ready: Callable[[], bool],
    serve_metrics: bool = True,
    serve_health: bool = True,
) -> web.Application:
    """`/metrics` from `registry`; `/healthz` and `/livez` (200 while the loop answers); `/readyz` (503 until
    `ready()` is true, e.g. until the store holds its first decisions). DESIGN §3.5 puts /metrics (8080) and
    the probes (8081) on different ports: build two apps with `serve_metrics`/`serve_health`, or one for both.
    """
    app = web.Application()
    if serve_metrics:
        app.router.add_get("/metrics", _metrics_handler(registry))
    if serve_health:

        async def healthz(_request: web.Request) -> web.StreamResponse:
            return web.Response(text="ok\n")

        async def readyz(_request: web.Request) -> web.StreamResponse:
            try:
                is_ready = ready()
            except Exception:
                _log.exception("readiness check failed")
                is_ready = False
            if is_ready:
                return web.Response(text="ok\n")
            return web.Response(status=503, text="not ready\n")

        app.router.add_get("/healthz", healthz)
        app.router.add_get("/livez", healthz)
        app.router.add_get("/readyz", readyz)
    return app


@dataclass(frozen=True, slots=True)
class HttpServer:
    """A started aiohttp app: the runner (to clean up) and the port it bound (useful with port 0)."""

    runner: web.AppRunner
    port: int

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start_http_server(app: web.Application, *, host: str, port: int) -> HttpServer:
    """Serve `app` over plain HTTP on host:port (0 picks a free port). No access log: Prometheus scrapes and
    kubelet probes would drown everything else."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = next(addr[1] for addr in runner.addresses if isinstance(addr, tuple))
    return HttpServer(runner, int(bound))
