"""The embedded demo: the world on a virtual clock, and the real servers checked with real clients."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from pathlib import Path

import aiohttp
import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from adapter.app.demo import DemoEndpoints, DemoOptions, run_demo
from adapter.app.world import DemoWorld, load_vas
from adapter.cli import main
from adapter.domain.ids import VariantKey
from adapter.servers._keda_pb import externalscaler_pb2 as pb
from adapter.servers._keda_pb import externalscaler_pb2_grpc as pb_grpc
from adapter.store import DecisionStore

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "manifests" / "examples"
KUBECTL = Path(sys.prefix) / "bin" / "kubectl"
START_S = 1_800_000_000.0


def test_the_world_scales_the_cheap_variant_up_and_the_expensive_one_down() -> None:
    """Two virtual hours of the built-in diurnal load (3 → 40 rps, 30-minute period)."""
    vas = load_vas(EXAMPLES)
    store = DecisionStore()
    world = DemoWorld(vas, store=store, start_s=START_S)
    bounds = {va.key.name: (va.spec.min_replicas, va.spec.max_replicas) for va in vas}
    peak_replicas = dict.fromkeys(bounds, 0)
    first_decisions = None
    for t in range(0, 7200, 5):
        result = world.step_to(START_S + t)
        if result is None:
            continue
        first_decisions = first_decisions or result.decisions
        for key, decision in result.decisions.items():
            lo, hi = bounds[key.name]
            assert lo <= decision.desired_replicas <= hi, decision
        for name in bounds:
            peak_replicas[name] = max(peak_replicas[name], world.fleet.scale_target(name).replicas)
    assert first_decisions is not None
    # Both start at 2 replicas on a quiet fleet: the most expensive variant (A100, 3.5/h) gives one up first.
    a100 = first_decisions[VariantKey("llm", "llama-8b-a100")]
    l4 = first_decisions[VariantKey("llm", "llama-8b-l4")]
    assert (a100.desired_replicas, l4.desired_replicas) == (1, 2)
    assert "scale-down" in a100.reason
    # At 40 rps the cheap L4 variant takes the added capacity; the A100 one never grows.
    assert peak_replicas["llama-8b-l4"] >= 3
    assert peak_replicas["llama-8b-a100"] <= 2
    assert {e.key.name for e in store.list()} == set(bounds)


def test_the_table_shows_each_variant_with_its_reason() -> None:
    vas = load_vas(EXAMPLES)
    world = DemoWorld(vas, store=DecisionStore(), start_s=START_S)
    world.step_to(START_S)
    rows = {r.variant: r for r in world.rows()}
    assert set(rows) == {"llama-8b-a100", "llama-8b-l4"}
    assert rows["llama-8b-a100"].reason.startswith("saturation-only mode")
    assert rows["llama-8b-l4"].cost == pytest.approx(0.8)


async def _kubectl(kubeconfig: Path, path: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(KUBECTL),
        "--kubeconfig",
        str(kubeconfig),
        "get",
        "--raw",
        path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_kubectl_grpc_and_prometheus_clients_read_the_same_decisions_from_the_demo(tmp_path: Path) -> None:
    started: asyncio.Future[DemoEndpoints] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    options = DemoOptions(
        examples_dir=EXAMPLES,
        out_dir=tmp_path,
        speed=0.01,  # the first cycle publishes at once; the next is 50 real minutes away: a frozen store
        secure_port=0,
        grpc_port=0,
        metrics_port=0,
        health_port=0,
        tick_s=0.05,
    )
    out = io.StringIO()
    demo = asyncio.create_task(run_demo(options, out=out, stop=stop, on_started=started.set_result))
    try:
        ep = await asyncio.wait_for(asyncio.shield(started), timeout=30)
        async with asyncio.timeout(30):
            while ep.store.get(VariantKey("llm", "llama-8b-l4")) is None:
                await asyncio.sleep(0.05)
        version = ep.store.version
        code, text, err = await _kubectl(ep.kubeconfig, "/apis/external.metrics.k8s.io/v1beta1")
        assert code == 0, err
        names = {r["name"] for r in json.loads(text)["resources"]}
        assert names == {
            "wva_desired_replicas",
            "wva_current_replicas",
            "wva_desired_ratio",
            "wva_recommended_replicas",
        }

        selector = "labelSelector=variant_name%3Dllama-8b-l4"
        code, text, err = await _kubectl(
            ep.kubeconfig, f"/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/wva_desired_replicas?{selector}"
        )
        assert code == 0, err
        body = json.loads(text)
        assert body["kind"] == "ExternalMetricValueList"
        [item] = body["items"]
        stored = ep.store.get(VariantKey("llm", "llama-8b-l4"))
        assert stored is not None
        assert ep.store.version == version, "the store moved while the clients read it"
        assert item["metricLabels"]["variant_name"] == "llama-8b-l4"
        assert item["value"] == str(stored.desired_replicas)

        code, _, err = await _kubectl(ep.kubeconfig, "/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/nope")
        assert code != 0
        assert "NotFound" in err

        async with grpc.aio.insecure_channel(f"127.0.0.1:{ep.grpc_port}") as channel:
            stub = pb_grpc.ExternalScalerStub(channel)
            ref = pb.ScaledObjectRef(name="llama-8b-l4", namespace="llm")
            metrics = await stub.GetMetrics(
                pb.GetMetricsRequest(scaledObjectRef=ref, metricName="wva_desired_replicas")
            )
            assert metrics.metricValues[0].metricValue == stored.desired_replicas

        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{ep.metrics_port}/metrics") as resp:
                scraped = await resp.text()
            async with http.get(f"http://127.0.0.1:{ep.health_port}/readyz") as resp:
                assert resp.status == 200
        samples = {
            s.labels["variant_name"]: s.value
            for family in text_string_to_metric_families(scraped)
            if family.name == "wva_desired_replicas"
            for s in family.samples
        }
        assert samples["llama-8b-l4"] == stored.desired_replicas
    finally:
        stop.set()
        assert await asyncio.wait_for(demo, timeout=30) == 0
    assert "kubectl --kubeconfig" in out.getvalue()
    assert "llama-8b-l4" in out.getvalue()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["demo", "--speed", "0"], "argument --speed: must be a finite number > 0", id="zero-speed"),
        pytest.param(
            ["demo", "--duration", "-1"], "argument --duration: must be a finite number >= 0", id="negative-duration"
        ),
        pytest.param(["demo", "--scenario", "/nonexistent.yaml", "--duration", "1"], "cannot read", id="no-scenario"),
    ],
)
def test_demo_rejects_bad_options_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_ctrl_c_shuts_the_demo_down_cleanly(tmp_path: Path) -> None:
    import signal
    import subprocess
    import time

    proc = subprocess.Popen(
        [
            str(Path(sys.prefix) / "bin" / "wva-adapter"),
            "demo",
            "--out",
            str(tmp_path),
            "--speed",
            "50",
            "--secure-port",
            "0",
            "--grpc-port",
            "0",
            "--metrics-port",
            "0",
            "--health-port",
            "0",
            "--examples",
            str(EXAMPLES),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        seen = ""
        assert proc.stdout is not None
        while "reason" not in seen and time.monotonic() < deadline:  # the first table has been printed
            seen += proc.stdout.readline()
        assert "reason" in seen, seen
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert "demo: shutting down" in rest
    assert "Traceback" not in seen + rest
