"""Live settings: `wva-variantautoscaling-config` followed while `serve` runs.

The main ConfigMap is one layer of the settings (flags > env > config file > ConfigMap > defaults). `serve`
watches it; on every change of its data `LiveSettings.apply(data)` re-resolves the settings with the new
layer and compares them with the ones the process runs with:

- settings in `LIVE` take effect at once: the engine interval, the scale-to-zero default and the wake
  interval (handed to the reconciler for its next wait and cycle), and the Prometheus connection (url,
  credentials, TLS, timeout, query window: a new collector replaces the old one, which finishes the
  collection it is in);
- any other setting (ports, TLS files, leader election, namespaces, the flight recorder, the Kubernetes
  client) is bound to something built once at start; a change is logged as a warning, reported by the
  gauge `wva_config_restart_required{setting}` and a Warning Event `RestartRequired` on the ConfigMap, and
  applies at the next restart. Changing it back clears the report;
- a key whose effective value does not move because a flag or an environment variable sets it is logged
  (info), not applied: the precedence holds live as at start;
- content that does not validate is refused as a whole (error log, Warning Event `InvalidConfiguration`,
  `wva_config_reloads_total{outcome="invalid"}`); the running settings stay.

docs/operations.md lists both sets. Nothing is ever ignored silently.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from adapter.config.settings import KNOBS, MAIN_CONFIGMAP, Settings, field_of_key
from adapter.domain.cluster import Collection, ModelQuery
from adapter.domain.errors import ConfigError
from adapter.k8s.client import KubeClient
from adapter.k8s.configwatch import watch_configmap
from adapter.k8s.events import EventRecorder, ObjectRef
from adapter.k8s.objects import ConfigMapRecord
from adapter.reconciler.ports import MetricsSource
from adapter.servers.telemetry import Telemetry

__all__ = [
    "LIVE",
    "ConfigReporter",
    "LiveSettings",
    "Outcome",
    "ReloadReport",
    "SwitchableMetrics",
    "export_config_metrics",
    "follow_main_configmap",
    "restart_only",
]

log = logging.getLogger(__name__)

PROMETHEUS_FIELDS: Final = frozenset(
    {
        "prometheus_url",
        "prometheus_bearer_token",
        "prometheus_token_path",
        "prometheus_ca_file",
        "prometheus_client_cert",
        "prometheus_client_key",
        "prometheus_insecure_skip_verify",
        "prometheus_timeout_s",
        "prometheus_compression",
        "saturation_window_s",
    }
)
RECONCILER_FIELDS: Final = frozenset({"engine_interval_s", "scale_to_zero", "scale_from_zero_interval_s"})
LIVE: Final = PROMETHEUS_FIELDS | RECONCILER_FIELDS
"""Settings a change of `wva-variantautoscaling-config` applies without a restart."""
_FLAG_OF: Final = {k.field: k.flag for k in KNOBS}


def restart_only() -> tuple[str, ...]:
    """The flags (setting names) that only a restart applies, for docs/operations.md and its test."""
    return tuple(sorted(k.flag for k in KNOBS if k.field not in LIVE and k.field != "config_file"))


Outcome = Literal["applied", "restart-required", "unchanged", "invalid"]


@dataclass(frozen=True, slots=True)
class ReloadReport:
    """What one change of the ConfigMap did."""

    outcome: Outcome
    applied: tuple[str, ...] = ()
    """Flags of the live settings that changed."""
    pending: tuple[str, ...] = ()
    """Flags of the settings that now differ from what runs (a restart applies them)."""
    overridden: tuple[str, ...] = ()
    """ConfigMap keys that changed without effect (a flag or the environment sets them)."""
    error: str = ""


@dataclass
class LiveSettings:
    """Applies changes of the main ConfigMap (module docstring).

    `reload(data)` resolves the settings with `data` as the ConfigMap layer (raises ConfigError);
    `apply_prometheus(settings)` and `apply_reconciler(settings)` hand the live parts to the running
    components; `report(report)` publishes the outcome (log, Event, metrics).
    """

    running: Settings
    reload: Callable[[Mapping[str, str]], Settings]
    apply_prometheus: Callable[[Settings], None]
    apply_reconciler: Callable[[Settings], None]
    report: Callable[[ReloadReport], None] = lambda _report: None
    data: Mapping[str, str] = field(default_factory=dict)
    """The ConfigMap data the running settings were resolved with."""
    pending: tuple[str, ...] = ()
    counts: dict[Outcome, int] = field(default_factory=dict)

    def apply(self, data: Mapping[str, str] | None) -> ReloadReport:
        """One new version of the ConfigMap's data (None: deleted, i.e. no ConfigMap layer)."""
        data = dict(data or {})
        try:
            wanted = self.reload(data)
        except ConfigError as exc:
            report = ReloadReport("invalid", pending=self.pending, error=str(exc))
            log.error("ConfigMap wva-variantautoscaling-config refused, the running settings stay: %s", exc)
            return self._done(report)
        changed = [name for name in type(wanted).model_fields if getattr(wanted, name) != getattr(self.running, name)]
        live = [name for name in changed if name in LIVE]
        pending = tuple(sorted(_FLAG_OF.get(n, n) for n in changed if n not in LIVE and n != "config_file"))
        overridden = tuple(sorted(_overridden(self.data, data, wanted, self.running)))
        if live:
            updates = {name: getattr(wanted, name) for name in live}
            updated = self.running.model_copy(update=updates)
            try:
                if PROMETHEUS_FIELDS.intersection(live):
                    self.apply_prometheus(updated)  # first: the one that can refuse (an unreadable token file)
                if RECONCILER_FIELDS.intersection(live):
                    self.apply_reconciler(updated)
            except ConfigError as exc:
                log.error("ConfigMap wva-variantautoscaling-config not applied, the running settings stay: %s", exc)
                return self._done(ReloadReport("invalid", pending=self.pending, error=str(exc)))
            self.running = updated
            for name in live:
                log.info("live setting %s is now %s (ConfigMap wva-variantautoscaling-config)", _FLAG_OF[name],
                         _shown(name, updates[name]))  # fmt: skip
        for flag in pending:
            if flag not in self.pending:
                log.warning("setting %s changed in ConfigMap wva-variantautoscaling-config; it takes effect only "
                            "after a restart (docs/operations.md)", flag)  # fmt: skip
        for flag in self.pending:
            if flag not in pending:
                log.info("setting %s is back to the value this process runs with; no restart needed for it", flag)
        for key in overridden:
            log.info("ConfigMap wva-variantautoscaling-config key %s changed but a flag or the environment sets "
                     "that setting; the running value stays", key)  # fmt: skip
        self.data = data
        outcome: Outcome = "applied" if live else ("restart-required" if pending else "unchanged")
        self.pending = pending
        return self._done(ReloadReport(outcome, tuple(_FLAG_OF[n] for n in sorted(live)), pending, overridden))

    def _done(self, report: ReloadReport) -> ReloadReport:
        self.counts[report.outcome] = self.counts.get(report.outcome, 0) + 1
        try:
            self.report(report)
        except Exception:
            log.exception("reporting a configuration reload failed")
        return report


_SECRET_FIELDS: Final = frozenset({"prometheus_bearer_token", "epp_bearer_token"})


def _shown(name: str, value: object) -> str:
    return "(set)" if name in _SECRET_FIELDS and value else repr(value)


def _overridden(old: Mapping[str, str], new: Mapping[str, str], wanted: Settings, running: Settings) -> Iterable[str]:
    """Keys whose value changed in the ConfigMap while the setting they name kept its effective value."""
    for key in sorted(set(old) | set(new)):
        if old.get(key) == new.get(key):
            continue
        name = field_of_key(key)
        if name is not None and getattr(wanted, name) == getattr(running, name):
            yield key


class SwitchableMetrics:
    """The reconciler's metrics source, replaceable while it runs (a new Prometheus URL or credentials).

    `switch(new)` routes the next collection to `new`; the old source is closed (`close_old`) once the
    collection it may be in has finished, never under it.
    """

    def __init__(self, source: MetricsSource, *, close: Callable[[MetricsSource], None]) -> None:
        self.current = source
        self._close = close
        self._busy: dict[int, int] = {}
        self._retired: list[MetricsSource] = []
        self.switches = 0

    async def collect(self, models: Sequence[ModelQuery], pod_variants: Mapping[tuple[str, str], str]) -> Collection:
        source = self.current
        self._busy[id(source)] = self._busy.get(id(source), 0) + 1
        try:
            return await source.collect(models, pod_variants)
        finally:
            self._busy[id(source)] -= 1
            if not self._busy[id(source)]:
                del self._busy[id(source)]
            self._close_retired()

    def switch(self, source: MetricsSource) -> None:
        self._retired.append(self.current)
        self.current = source
        self.switches += 1
        self._close_retired()

    def _close_retired(self) -> None:
        keep = []
        for old in self._retired:
            if id(old) in self._busy:
                keep.append(old)
            else:
                self._close(old)
        self._retired = keep

    def close(self) -> None:
        """Close every source (serve's shutdown)."""
        for source in [*self._retired, self.current]:
            self._close(source)
        self._retired = []


# ---- composition for serve ----------------------------------------------------------------------------------


@dataclass
class ConfigReporter:
    """Publishes each `ReloadReport`: Warning Events on the ConfigMap for a pending restart and for refused
    content (the rate-limited, aggregated recorder, so a ConfigMap edited in a loop cannot flood the API)."""

    events: EventRecorder | None
    regarding: ObjectRef | None = None

    def __call__(self, report: ReloadReport) -> None:
        if self.events is None or self.regarding is None:
            return
        if report.outcome == "invalid":
            note = f"refused, the running settings stay: {report.error}"
            self.events.record(self.regarding, type="Warning", reason="InvalidConfiguration", note=note)
        elif report.pending:
            note = f"takes effect only after a restart: {', '.join(report.pending)} (docs/operations.md)"
            self.events.record(self.regarding, type="Warning", reason="RestartRequired", note=note)


async def follow_main_configmap(
    client: KubeClient, namespace: str, live: LiveSettings, reporter: ConfigReporter
) -> None:
    """Run until cancelled: apply every change of `wva-variantautoscaling-config` in `namespace`."""

    def changed(record: ConfigMapRecord | None) -> None:
        if record is not None:
            reporter.regarding = ObjectRef("v1", "ConfigMap", record.namespace, record.name, record.uid)
        if (record.data if record is not None else {}) == live.data:
            return  # what the running settings were resolved with (the watch's first delivery)
        live.apply(record.data if record is not None else None)

    await watch_configmap(client, namespace, MAIN_CONFIGMAP, changed)


def export_config_metrics(telemetry: Telemetry, live: LiveSettings) -> None:
    telemetry.add_family(
        "wva_config_reloads",
        "Changes of wva-variantautoscaling-config, by outcome (applied, restart-required, unchanged, invalid).",
        kind="counter",
        labelnames=("outcome",),
        read=lambda: {(outcome,): float(count) for outcome, count in live.counts.items()},
    )
    telemetry.add_family(
        "wva_config_restart_required",
        "1 for each setting changed in wva-variantautoscaling-config that only a restart applies.",
        kind="gauge",
        labelnames=("setting",),
        read=lambda: {(flag,): 1.0 for flag in live.pending},
    )
