"""The fixture keys of issue 18 (DESIGN §3.2, ours): `models[].latency` and `scale_targets[].startup_s`.

Validated with JSON-path messages, absent = None / (), written by the flight recorder whenever the Snapshot has
them, so `replay` and `explain` see the cycle's input as the engine saw it; recorded end to end from the
simulated fleet through the real reconciler, the collector's assembly and SimCluster.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from adapter import engine
from adapter.app.simulate import run_scenario
from adapter.app.world import DemoWorld, load_vas
from adapter.domain.errors import FixtureError
from adapter.domain.latency import INF, LatencyHistogram, ModelLatency
from adapter.reconciler.loop import Reconciler, ReconcilerOptions
from adapter.reconciler.ports import AlwaysLeader
from adapter.replay import explain, fixture, runner
from adapter.replay.recorder import FlightRecorder, build_fixture
from adapter.sim import simulate as simulate_module
from adapter.sim.pipeline import SimCluster, SimEpp
from adapter.store import DecisionStore
from tests.sim.test_simulate import step_scenario

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "manifests" / "examples"
START_S = 1_800_000_000.0
SAMPLES = REPO / "tests" / "core" / "fixtures"

BASE: dict[str, Any] = {
    "schema": "wva-replay/v1",
    "variant_autoscalings": [
        {
            "apiVersion": "llmd.ai/v1alpha1",
            "kind": "VariantAutoscaling",
            "metadata": {"name": "v", "namespace": "ns"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "d"}, "modelID": "m", "variantCost": "1"},
        }
    ],
    "cycles": [
        {
            "now": "2026-01-01T00:00:00Z",
            "scale_targets": [
                {"namespace": "ns", "name": "d", "replicas": 2, "ready_replicas": 2, "startup_s": [120, 90.5]}
            ],
            "models": [
                {
                    "namespace": "ns",
                    "model_id": "m",
                    "latency": {
                        "window_s": 300,
                        "ttft": [[1, 6], [2.5, 9], ["+Inf", 10]],
                        "tpot": [[0.05, 3], [0.1, 3.9], ["+Inf", 4]],
                    },
                }
            ],
        }
    ],
}


def test_the_keys_parse_into_the_snapshot_types() -> None:
    fx, _ = fixture.parse(copy.deepcopy(BASE))
    target = fixture.scale_target(fx.cycles[0].scale_targets[0])  # type: ignore[index]
    assert target.startup_s == (90.5, 120.0)
    latency = fixture.model_traffic(fx.cycles[0].models[0]).latency  # type: ignore[index]
    assert latency == ModelLatency(
        window_s=300.0,
        ttft=LatencyHistogram(((1.0, 6.0), (2.5, 9.0), (INF, 10.0))),
        tpot=LatencyHistogram(((0.05, 3.0), (0.1, 3.9), (INF, 4.0))),
    )
    assert latency.ttft_within(2.0) == pytest.approx(0.8)


def test_absent_keys_are_none_and_every_existing_fixture_is_unchanged() -> None:
    doc = copy.deepcopy(BASE)
    del doc["cycles"][0]["scale_targets"][0]["startup_s"]
    del doc["cycles"][0]["models"][0]["latency"]
    fx, _ = fixture.parse(doc)
    assert fixture.scale_target(fx.cycles[0].scale_targets[0]).startup_s == ()  # type: ignore[index]
    assert fixture.model_traffic(fx.cycles[0].models[0]).latency is None  # type: ignore[index]
    samples = sorted(SAMPLES.glob("*.json"))
    assert samples
    for path in samples:
        loaded, vas = fixture.load(path)
        for cycle in loaded.cycles:
            assert all(m.latency is None for m in cycle.models or ())
            assert all(t.startup_s is None for t in cycle.scale_targets or ())
        assert runner.run(loaded, vas)["passed"], path.name


def _latency(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["cycles"][0]["models"][0]["latency"]  # type: ignore[no-any-return]


def _target(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["cycles"][0]["scale_targets"][0]  # type: ignore[no-any-return]


M = "$.cycles[0].models[0].latency"
S = "$.cycles[0].scale_targets[0].startup_s"


@pytest.mark.parametrize(
    ("edit", "path", "message"),
    [
        pytest.param(lambda d: _latency(d)["ttft"].pop(), f"{M}.ttft", '["+Inf", total rate]', id="no-inf-bucket"),
        pytest.param(lambda d: _latency(d).update(ttft=[]), f"{M}.ttft", '["+Inf", total rate]', id="empty"),
        pytest.param(
            lambda d: _latency(d)["ttft"].__setitem__(1, [0.5, 9]), f"{M}.ttft", "bucket 1: bound 0.5", id="unsorted"
        ),
        pytest.param(
            lambda d: _latency(d)["ttft"].__setitem__(0, ["+Inf", 6]), f"{M}.ttft", 'previous "+Inf"', id="inf-twice"
        ),
        pytest.param(
            lambda d: _latency(d)["ttft"].__setitem__(1, [2.5, 5]),
            f"{M}.ttft",
            "cumulative rate 5.0 below",
            id="not-cumulative",
        ),
        pytest.param(
            lambda d: _latency(d)["ttft"].__setitem__(1, ["2.5", 9]), f"{M}.ttft[1][0]", "bound", id="le-text"
        ),
        pytest.param(lambda d: _latency(d)["ttft"].__setitem__(1, [-1, 9]), f"{M}.ttft[1][0]", "bound", id="le<0"),
        pytest.param(lambda d: _latency(d)["ttft"].__setitem__(1, [True, 9]), f"{M}.ttft[1][0]", "bound", id="le-bool"),
        pytest.param(
            lambda d: _latency(d)["ttft"].__setitem__(1, [2.5, -1]),
            f"{M}.ttft[1][1]",
            "greater than or equal to 0",
            id="rate<0",
        ),
        pytest.param(
            lambda d: _latency(d)["ttft"].__setitem__(1, [2.5, float("nan")]), f"{M}.ttft[1][1]", "finite", id="nan"
        ),
        pytest.param(lambda d: _latency(d)["ttft"].__setitem__(1, [2.5, "9"]), f"{M}.ttft[1][1]", "number", id="text"),
        pytest.param(lambda d: _latency(d)["ttft"].__setitem__(1, [2.5]), f"{M}.ttft[1][1]", "required", id="short"),
        pytest.param(lambda d: _latency(d).update(window_s=0), f"{M}.window_s", "greater than 0", id="window-0"),
        pytest.param(lambda d: _latency(d).pop("window_s"), f"{M}.window_s", "required", id="window-missing"),
        pytest.param(lambda d: _latency(d).update(itl=[]), f"{M}.itl", "unknown field", id="unknown-key"),
        pytest.param(
            lambda d: _target(d).update(startup_s=[-1]), f"{S}[0]", "greater than or equal to 0", id="startup<0"
        ),
        pytest.param(lambda d: _target(d).update(startup_s=[float("inf")]), f"{S}[0]", "finite", id="startup-inf"),
        pytest.param(lambda d: _target(d).update(startup_s=120), S, "list", id="startup-not-a-list"),
    ],
)
def test_invalid_values_are_refused_naming_their_json_path(edit: Any, path: str, message: str) -> None:
    doc = copy.deepcopy(BASE)
    edit(doc)
    with pytest.raises(FixtureError) as info:
        fixture.parse(doc)
    assert info.value.path == path
    assert message in str(info.value)


def test_recorded_cycles_carry_the_keys_and_replay_them_exactly() -> None:
    """The demo fleet's Snapshot has latency and startup times: the recorder writes them, the fixture reads back
    the same values (through JSON text), and the replay reaches the same decisions."""
    world = DemoWorld(load_vas(EXAMPLES), store=DecisionStore(), start_s=START_S)
    seen = 0
    for step in range(1, 12):
        now_s = START_S + 60 * step
        world.step_to(now_s)
        snapshot = world.fleet.snapshot(now_s, world.statuses)
        result, _ = engine.decide(snapshot, world.state, world.config, now_s)
        doc = json.loads(json.dumps(build_fixture(snapshot, result, state_before=world.state, configmaps=[])))
        fx, vas = fixture.parse(doc)
        [model] = fx.cycles[0].models or []
        recorded = fixture.model_traffic(model)
        assert recorded.latency == snapshot.models[recorded.key].latency
        targets = {(t.namespace, t.name): fixture.scale_target(t) for t in fx.cycles[0].scale_targets or []}
        for view in snapshot.variants:
            assert view.target is not None
            assert targets[(view.target.namespace, view.target.name)].startup_s == view.target.startup_s
            seen += bool(view.target.startup_s)
        assert runner.run(fx, vas)["passed"]
    assert seen > 0
    assert recorded.latency is not None
    assert recorded.latency.ttft is not None
    assert recorded.latency.ttft.total_rps > 0


def test_the_simulated_cluster_records_them_through_the_real_reconciler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """simulate → SimCluster (startup) + the collector's queries over the simulated Prometheus (latency) →
    Reconciler → flight recorder → fixture file → replay and explain. The predictive policy: the collector asks
    for the latency histograms only when some model's analyzer reads them (`engine.reads`)."""
    recorder = FlightRecorder(tmp_path / "ring", inline=True)  # the virtual clock outruns a writer thread
    recorders: list[Reconciler] = []

    def build_with_recorder(cluster: SimCluster, metrics: Any, **kw: Any) -> Reconciler:
        reconciler = Reconciler(
            cluster=cluster,
            metrics=metrics,
            epp=SimEpp(cluster.fleet),
            status=cluster,
            leadership=AlwaysLeader(),
            store=kw["store"],
            options=ReconcilerOptions(controller_namespace=kw["controller_namespace"], interval_s=kw["interval_s"]),
            recorder=recorder,
            clock=kw["clock"],
        )
        recorders.append(reconciler)
        return reconciler

    monkeypatch.setattr(simulate_module, "build_reconciler", build_with_recorder)
    run_scenario(step_scenario(duration_s=600), policy="wva-predictive")
    assert recorders
    files = sorted((tmp_path / "ring").glob("cycle-*.json"))
    assert files, recorder.stats
    assert recorder.stats.skipped_busy == 0, recorder.stats
    latest = json.loads(files[-1].read_text())
    cycle = latest["cycles"][0]
    assert cycle["models"][0]["latency"]["window_s"] == 300.0
    assert cycle["models"][0]["latency"]["ttft"][-1][0] == "+Inf"
    assert cycle["scale_targets"][0]["startup_s"]  # the initial pod: a median startup (30 s) before the run
    for path in files:
        fx, vas = fixture.load(path)
        assert runner.run(fx, vas)["passed"], path.name
    fx, vas = fixture.load(files[-1])
    text = explain.explain(fx, vas)
    assert "Latency over 300 s: TTFT " in text
    assert "startup 30 s" in text
