"""Live settings from `wva-variantautoscaling-config`: what applies at once, what waits for a restart (and is
reported), what a flag overrides, and what is refused. The real ConfigMap changed under a running `serve`:
tests/e2e_k8s/test_live_access.py."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from adapter.app.live import LIVE, ConfigReporter, LiveSettings, ReloadReport, SwitchableMetrics, restart_only
from adapter.config.settings import KNOBS, Settings, load
from adapter.domain.cluster import Collection, ModelQuery
from adapter.k8s.events import EventRecorder, ObjectRef
from adapter.servers.telemetry import Telemetry
from adapter.store.decisions import DecisionStore

REPO = Path(__file__).resolve().parents[2]
FLAGS = {"prometheus_url": "http://prom:9090", "secure_port": "6443"}


@dataclass
class Applied:
    prometheus: list[Settings] = field(default_factory=list)
    reconciler: list[Settings] = field(default_factory=list)
    reports: list[ReloadReport] = field(default_factory=list)


def _live(flags: Mapping[str, str] = FLAGS, *, data: Mapping[str, str] | None = None) -> tuple[LiveSettings, Applied]:
    applied = Applied()

    def reload(configmap: Mapping[str, str]) -> Settings:
        return load(dict(flags), env={}, configmap=configmap)[0]

    live = LiveSettings(
        reload(data or {}),
        reload,
        apply_prometheus=applied.prometheus.append,
        apply_reconciler=applied.reconciler.append,
        report=applied.reports.append,
        data=dict(data or {}),
    )
    return live, applied


def test_live_settings_apply_at_once() -> None:
    live, applied = _live({"secure_port": "6443"}, data={"PROMETHEUS_BASE_URL": "http://old:9090"})
    report = live.apply({"PROMETHEUS_BASE_URL": "http://new:9090", "GLOBAL_OPT_INTERVAL": "5s"})
    assert report == ReloadReport("applied", ("--engine-interval", "--prometheus-url"))
    assert [s.prometheus_url for s in applied.prometheus] == ["http://new:9090"]
    assert [s.engine_interval_s for s in applied.reconciler] == [5.0]
    assert live.running.prometheus_url == "http://new:9090"
    assert live.counts == {"applied": 1}


def test_a_reconciler_only_change_leaves_prometheus_alone() -> None:
    live, applied = _live()
    assert live.apply({"WVA_SCALE_TO_ZERO": "true"}).applied == ("--scale-to-zero",)
    assert applied.prometheus == []
    assert applied.reconciler[0].scale_to_zero is True


def test_a_restart_only_setting_is_reported_until_changed_back(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    live, applied = _live()
    report = live.apply({"LEADER_ELECTION_ID": "other-lease", "WATCH_NAMESPACE": "llm"})
    assert report.outcome == "restart-required"
    assert report.pending == ("--leader-election-id", "--watch-namespace")
    assert live.running.leader_election_id == "72dd1cf1.llm-d.ai", "the running value stays"
    assert applied.prometheus == applied.reconciler == []
    assert "takes effect only after a restart" in caplog.text
    caplog.clear()
    report = live.apply({"WATCH_NAMESPACE": "llm"})
    assert report.pending == ("--watch-namespace",)
    assert "--leader-election-id is back to the value this process runs with" in caplog.text
    assert live.apply({}).outcome == "unchanged"
    assert live.pending == ()


def test_a_key_a_flag_overrides_changes_nothing_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    live, applied = _live()
    report = live.apply({"PROMETHEUS_BASE_URL": "http://elsewhere:9090"})
    assert report == ReloadReport("unchanged", overridden=("PROMETHEUS_BASE_URL",))
    assert applied.prometheus == []
    assert "a flag or the environment sets that setting" in caplog.text


@pytest.mark.parametrize(
    "data",
    [{"GLOBAL_OPT_INTERVAL": "soon"}, {"NOT_A_SETTING": "1"}, {"LEADER_ELECTION_RENEW_DEADLINE": "2h"}],
    ids=["bad-duration", "unknown-key", "inconsistent"],
)
def test_invalid_content_is_refused_whole(data: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    live, applied = _live()
    before = live.running
    report = live.apply({**data, "WVA_SCALE_TO_ZERO": "true"})
    assert report.outcome == "invalid"
    assert report.error
    assert live.running is before
    assert applied.reconciler == []
    assert "refused, the running settings stay" in caplog.text


def test_a_prometheus_change_that_cannot_apply_keeps_everything(tmp_path: Path) -> None:
    from adapter.domain.errors import ConfigError

    live, applied = _live({"secure_port": "6443"}, data={"PROMETHEUS_BASE_URL": "http://p:9090"})

    def refuse(_settings: Settings) -> None:
        raise ConfigError("--prometheus-token-path: cannot read /nowhere")

    live.apply_prometheus = refuse
    report = live.apply({"PROMETHEUS_BASE_URL": "http://p:9090", "PROMETHEUS_TOKEN_PATH": "/nowhere",
                         "GLOBAL_OPT_INTERVAL": "7s"})  # fmt: skip
    assert report.outcome == "invalid"
    assert "cannot read /nowhere" in report.error
    assert applied.reconciler == [], "nothing half-applied"
    assert live.running.engine_interval_s == 30.0


def test_deleted_configmap_means_no_layer() -> None:
    live, applied = _live(
        {"secure_port": "6443"}, data={"PROMETHEUS_BASE_URL": "http://p:9090", "GLOBAL_OPT_INTERVAL": "5s"}
    )
    report = live.apply(None)
    assert report.applied == ("--engine-interval", "--prometheus-url")
    assert applied.reconciler[-1].engine_interval_s == 30.0


def test_every_setting_is_either_live_or_restart_only() -> None:
    fields = {k.field for k in KNOBS} - {"config_file"}
    restart = {k.field for k in KNOBS if k.flag in restart_only()}
    assert fields >= LIVE
    assert LIVE.isdisjoint(restart)
    assert LIVE | restart == fields


def test_operations_doc_lists_both_sets() -> None:
    """docs/operations.md is where an operator looks; it must list exactly what the code does."""
    text = (REPO / "docs" / "operations.md").read_text()
    section = text[text.index("## Changing settings while it runs") :]
    section = section[: section.index("\n## ", 3)]
    applied, rest = section.split("**need a restart**")
    restart = rest.split("**refused**")[0]
    assert set(re.findall(r"`(--[a-z-]+)`", applied)) == {k.flag for k in KNOBS if k.field in LIVE}
    assert set(re.findall(r"`(--[a-z-]+)`", restart)) == set(restart_only())


# ---- reporting ------------------------------------------------------------------------------------------------


@dataclass
class Recorded:
    calls: list[tuple[str, str, str]] = field(default_factory=list)

    def record(self, regarding: ObjectRef, *, type: str, reason: str, note: str) -> None:
        self.calls.append((type, reason, note))


def test_reporter_records_warning_events_on_the_configmap() -> None:
    events = Recorded()
    reporter = ConfigReporter(events)  # type: ignore[arg-type]
    reporter(ReloadReport("restart-required", pending=("--watch-namespace",)))
    assert events.calls == [], "no ConfigMap seen yet: nothing to point the Event at"
    reporter.regarding = ObjectRef("v1", "ConfigMap", "wva-system", "wva-variantautoscaling-config", "u")
    reporter(ReloadReport("restart-required", pending=("--watch-namespace",)))
    reporter(ReloadReport("invalid", error="GLOBAL_OPT_INTERVAL: 'soon'"))
    reporter(ReloadReport("applied", applied=("--engine-interval",)))
    assert events.calls == [
        ("Warning", "RestartRequired", "takes effect only after a restart: --watch-namespace (docs/operations.md)"),
        ("Warning", "InvalidConfiguration", "refused, the running settings stay: GLOBAL_OPT_INTERVAL: 'soon'"),
    ]


def test_config_metrics() -> None:
    from adapter.app.live import export_config_metrics

    telemetry = Telemetry(DecisionStore())
    live, _applied = _live()
    export_config_metrics(telemetry, live)
    live.apply({"WATCH_NAMESPACE": "llm"})
    live.apply({"WATCH_NAMESPACE": "llm", "GLOBAL_OPT_INTERVAL": "soon"})
    sample = telemetry.registry.get_sample_value
    assert sample("wva_config_restart_required", {"setting": "--watch-namespace"}) == 1.0
    assert sample("wva_config_reloads_total", {"outcome": "restart-required"}) == 1.0
    assert sample("wva_config_reloads_total", {"outcome": "invalid"}) == 1.0


def test_reporter_uses_the_real_recorder_type() -> None:
    """The reporter's `events` is the rate-limited recorder serve builds."""

    class Sink:
        async def create(self, namespace: str, body: Mapping[str, object]) -> None:
            return None

        async def patch(self, namespace: str, name: str, body: Mapping[str, object]) -> None:
            return None

    recorder = EventRecorder(Sink(), instance="i")
    reporter = ConfigReporter(recorder, ObjectRef("v1", "ConfigMap", "ns", "cm"))
    reporter(ReloadReport("invalid", error="x"))
    assert len(recorder._queue) == 1


# ---- switching the metrics source ---------------------------------------------------------------------------


@dataclass
class Source:
    name: str
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False
    calls: int = 0

    async def collect(self, models: Sequence[ModelQuery], pod_variants: Mapping[tuple[str, str], str]) -> Collection:
        self.calls += 1
        await self.gate.wait()
        assert not self.closed, "collected on a closed source"
        return Collection(available=True, errors=(self.name,))


def _close(source: object) -> None:
    assert isinstance(source, Source)
    source.closed = True


async def test_the_old_source_closes_after_the_collection_it_is_in() -> None:
    old, new = Source("old"), Source("new")
    switch = SwitchableMetrics(old, close=_close)
    in_flight = asyncio.create_task(switch.collect([], {}))
    await asyncio.sleep(0)
    switch.switch(new)
    assert not old.closed, "a collection is running on it"
    new.gate.set()
    assert (await switch.collect([], {})).errors == ("new",)
    assert not old.closed
    old.gate.set()
    assert (await in_flight).errors == ("old",)
    assert old.closed
    assert not new.closed
    switch.close()
    assert new.closed


async def test_an_idle_source_closes_at_once() -> None:
    old, new = Source("old"), Source("new")
    switch = SwitchableMetrics(old, close=_close)
    switch.switch(new)
    assert old.closed
    assert switch.switches == 1
