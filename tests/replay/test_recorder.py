"""The flight recorder (issue 13): every recorded cycle replays to the decisions that were taken, over hundreds
of cycles of the simulated fleet in several scenarios (V1, V2, the limiter, Prometheus outages, scale-to-zero);
the ring stays within its bound, files appear whole, and an unwritable directory never fails a cycle."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from adapter import engine
from adapter.app.world import DemoWorld, load_vas
from adapter.config.configmaps import (
    DEFAULT_CONTROLLER_NAMESPACE,
    SATURATION_CM,
    SCALE_TO_ZERO_CM,
    ConfigSet,
)
from adapter.config.engine import EngineConfig
from adapter.domain.snapshot import NodeGpus
from adapter.replay import fixture, runner
from adapter.replay.recorder import FlightRecorder, build_fixture
from adapter.store import DecisionStore

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "manifests" / "examples"
START_S = 1_800_000_000.0
CNS = DEFAULT_CONTROLLER_NAMESPACE
V1 = "kvCacheThreshold: 0.80\nqueueLengthThreshold: 5\nkvSpareTrigger: 0.1\nqueueSpareTrigger: 3\n"

SCENARIOS: dict[str, tuple[str, str | None, bool, bool]] = {
    # name: (saturation default, scale-to-zero default, outages, nodes)
    "v1": (V1, None, False, False),
    "v1-outages": (V1, None, True, False),
    "v2": ("analyzerName: saturation\n", None, False, False),
    "v2-limiter-outages": ("analyzerName: saturation\nenableLimiter: true\n", None, True, True),
    "v1-scale-to-zero": (V1, "enable_scale_to_zero: true\nretention_period: '2m'\n", True, False),
}


def _configs(saturation: str, s2z: str | None) -> ConfigSet:
    raw: list[tuple[str, str, dict[str, str]]] = [(CNS, SATURATION_CM, {"default": saturation})]
    if s2z is not None:
        raw.append((CNS, SCALE_TO_ZERO_CM, {"default": s2z}))
    return ConfigSet.from_raw(raw)


def _replayed(doc: dict[str, Any]) -> dict[str, Any]:
    fx, vas = fixture.parse(json.loads(json.dumps(doc)))  # through JSON text, as a file would be
    return runner.run(fx, vas)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_recorded_cycle_replays_to_the_same_decisions(name: str) -> None:
    saturation, s2z, outages, with_nodes = SCENARIOS[name]
    vas = load_vas(EXAMPLES)
    world = DemoWorld(vas, store=DecisionStore(), start_s=START_S, configmaps=_configs(saturation, s2z))
    config = EngineConfig(configmaps=world.config.configmaps)
    statuses = world.statuses
    state = world.state
    checked = 0
    for cycle in range(120):  # one hour of 30 s cycles of the diurnal demo load
        now_s = START_S + 30 * cycle
        world.fleet.advance(now_s)
        snapshot = world.fleet.snapshot(now_s, statuses)
        if outages and cycle % 17 in (5, 6, 7):
            snapshot = replace(snapshot, metrics_available=False, pods=())
        if with_nodes:
            snapshot = replace(
                snapshot, nodes=(NodeGpus("gpu-1", "NVIDIA-A100-SXM4-80GB", 2), NodeGpus("gpu-2", "L4", 3))
            )
        before = state
        result, state = engine.decide(snapshot, state, config, now_s)
        doc = build_fixture(snapshot, result, state_before=before, configmaps=config.configmaps.sources)
        replay = _replayed(doc)
        assert replay["passed"], (cycle, replay["cycles"][0]["mismatches"])
        replayed = replay["cycles"][0]["decisions"]
        for key, decision in result.decisions.items():
            assert replayed[str(key)]["desired_replicas"] == decision.desired_replicas
            assert replayed[str(key)]["reason"] == decision.reason
            assert replayed[str(key)]["path"] == str(decision.path)
        checked += 1
        statuses = {k.name: s for k, s in engine.statuses(result, snapshot).items()}
        served = {k.name: float(d.desired_replicas) for k, d in result.decisions.items()}
        targets = {va.key.name: world.fleet.scale_target(va.key.name) for va in vas}
        for variant, replicas in world.actuator.step(now_s, desired=served, targets=targets).items():
            world.fleet.set_replicas(variant, replicas, now_s)
    assert checked == 120


def test_recorded_files_replay_through_the_cli_alone_and_in_sequence(tmp_path: Path) -> None:
    vas = load_vas(EXAMPLES)
    recorder = FlightRecorder(tmp_path / "ring")
    world = DemoWorld(vas, store=DecisionStore(), start_s=START_S, recorder=recorder)
    for t in range(0, 600, 30):
        world.step_to(START_S + t)
    files = sorted((tmp_path / "ring").glob("cycle-*.json"))
    assert len(files) == 20
    for path in files:
        fx, vas_of = fixture.load(path)
        assert runner.run(fx, vas_of)["passed"]
    from tests.core.test_cli import wva

    result = wva("replay", *files[:5])
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)) == 5


def _one_cycle_doc() -> tuple[Any, Any, Any]:
    vas = load_vas(EXAMPLES)
    world = DemoWorld(vas, store=DecisionStore(), start_s=START_S)
    snapshot = world.fleet.snapshot(START_S, {})
    result, _ = engine.decide(snapshot, engine.EngineState(), world.config, START_S)
    return snapshot, result, world


def test_ring_stays_within_its_bound_oldest_first(tmp_path: Path) -> None:
    snapshot, result, _ = _one_cycle_doc()
    size = len(json.dumps(build_fixture(snapshot, result, state_before=engine.EngineState(), configmaps=()), indent=1))
    recorder = FlightRecorder(tmp_path, max_bytes=int(size * 3.5))
    for i in range(10):
        recorder.record(snapshot, replace(result, now_s=START_S + i), state_before=engine.EngineState(), configmaps=())
    files = sorted(tmp_path.glob("cycle-*.json"))
    assert len(files) == 3  # 3 files fit in 3.5 sizes
    assert sum(p.stat().st_size for p in files) <= recorder.max_bytes
    assert files[-1].name.startswith(f"cycle-{int((START_S + 9) * 1000):015d}")  # the newest kept
    assert recorder.stats.written == 10


def test_files_appear_whole(tmp_path: Path) -> None:
    snapshot, result, _ = _one_cycle_doc()
    recorder = FlightRecorder(tmp_path)
    recorder.record(snapshot, result, state_before=engine.EngineState(), configmaps=())
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left behind
    (path,) = tmp_path.glob("cycle-*.json")
    assert json.loads(path.read_text())["schema"] == "wva-replay/v1"


def test_unwritable_path_counts_an_error_and_never_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the ring should be")
    snapshot, result, _ = _one_cycle_doc()
    seen: list[str] = []
    recorder = FlightRecorder(blocker / "ring", on_error=seen.append)
    recorder.record(snapshot, result, state_before=engine.EngineState(), configmaps=())
    recorder.record(snapshot, result, state_before=engine.EngineState(), configmaps=())
    assert recorder.stats.written == 0
    assert sum(recorder.stats.errors.values()) == 2
    assert seen == ["io", "io"]


async def test_record_never_blocks_the_loop_and_skips_while_busy(tmp_path: Path) -> None:
    snapshot, result, _ = _one_cycle_doc()
    recorder = FlightRecorder(tmp_path)
    recorder.record(snapshot, result, state_before=engine.EngineState(), configmaps=())
    recorder.record(snapshot, result, state_before=engine.EngineState(), configmaps=())  # first still in flight
    await recorder.drain()
    await asyncio.sleep(0)
    assert recorder.stats.written + recorder.stats.skipped_busy == 2
    assert recorder.stats.written >= 1


async def test_inline_writes_every_cycle_inside_a_running_loop(tmp_path: Path) -> None:
    """A virtual clock runs cycles inside an event loop faster than a writer thread: inline keeps every one."""
    snapshot, result, _ = _one_cycle_doc()
    recorder = FlightRecorder(tmp_path, inline=True)
    for i in range(5):
        recorder.record(snapshot, replace(result, now_s=START_S + i), state_before=engine.EngineState(), configmaps=())
    assert (recorder.stats.written, recorder.stats.skipped_busy) == (5, 0)
    assert len(list(tmp_path.glob("cycle-*.json"))) == 5


async def test_a_scale_from_zero_wake_is_recorded_and_replays(tmp_path: Path) -> None:
    """Wakes between cycles go through the engine and the flight recorder like cycles (issue 20)."""
    from adapter.domain.ids import VariantKey
    from adapter.reconciler.loop import Reconciler, ReconcilerOptions
    from adapter.replay.explain import explain
    from tests.core.test_cli import wva
    from tests.reconciler.test_loop import NS, FakeCluster, FakeEpp, FakeLeader, FakeMetrics, FakeStatus, idle_view

    recorder = FlightRecorder(tmp_path / "ring")
    status = FakeStatus()
    rec = Reconciler(
        cluster=FakeCluster(idle_view()),
        metrics=FakeMetrics(None),
        epp=FakeEpp({(NS, "m"): 4.0}),
        status=status,
        leadership=FakeLeader(True),
        store=DecisionStore(),
        options=ReconcilerOptions(controller_namespace=CNS),
        recorder=recorder,
        clock=lambda: START_S,
    )
    assert await rec.wake_cycle() == [VariantKey(NS, "cheap")]
    await recorder.drain()
    (path,) = sorted((tmp_path / "ring").glob("cycle-*.json"))
    doc = json.loads(path.read_text())
    (cycle,) = doc["cycles"]
    assert cycle["kind"] == "scale-from-zero"
    assert cycle["models"] == [
        {"namespace": NS, "model_id": "m", "request_count": None, "epp_queue_size": 4.0, "epp_queue_bytes": None}
    ]
    assert cycle["expect"] == {
        f"{NS}/cheap": {"desired_replicas": 1, "reason": status.writes[VariantKey(NS, "cheap")].desired.reason}
    }  # type: ignore[union-attr]
    replayed = _replayed(doc)
    assert replayed["passed"]
    assert replayed["cycles"][0]["kind"] == "scale-from-zero"
    assert replayed["cycles"][0]["decisions"][f"{NS}/cheap"]["path"] == "scale-from-zero"
    fx, vas = fixture.load(path)
    told = explain(fx, vas)
    assert "scale-from-zero poll" in told
    assert f"Model {NS}/m — EPP queue 4" in told
    assert "cheap: 0 → 1  [scale-from-zero]" in told
    result = wva("replay", path)
    assert result.returncode == 0, result.stderr
