"""`serve` stops within 5 s of SIGTERM whatever the apiserver does (issue 19), on a real kube-apiserver.

A `wva-adapter serve --leader-elect` process (its REST timeout left at the 60 s default, the value that used to
hold shutdown) runs against an etcd + kube-apiserver of this test's own and becomes leader. Then:

- `answering`: SIGTERM; the process exits within 5 s and the Lease is released (empty holder), so a
  successor takes over at once;
- `prometheus hanging`: Prometheus is a listener that accepts and never answers, so every engine cycle waits
  on queries (60 s timeout) in worker threads; SIGTERM; the process exits within 5 s and releases the Lease;
- `hanging`: the kube-apiserver process is stopped with SIGSTOP, so it still holds its socket (the kernel
  accepts connections and buffers requests) but never answers: a hung apiserver, not a dead one. SIGTERM;
  the process still exits within 5 s (the Lease cannot be released and is left to expire, as the log says).
  The apiserver is resumed (SIGCONT) afterwards, whatever happens.

Why the real apiserver frozen rather than a listener that never answers: the real one can be made to hang,
with serve's watches, Lease and TLS connections to it established the way they are in a cluster; the
listener stand-in covers start-up in tests/hostile/test_corpus.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ports import free_port

from .controlplane import _die_with_parent
from .realapi import RealApiServer

pytestmark = pytest.mark.e2e_k8s

WVA_ADAPTER = Path(sys.executable).with_name("wva-adapter")
CONTROLLER_NS = "wva-system"
LEASE = "72dd1cf1.llm-d.ai"
STOP_WITHIN_S = 5.0


@pytest.fixture
def api(tmp_path: Path) -> Iterator[RealApiServer]:
    server = RealApiServer(tmp_path / "plane")
    server._start()
    try:
        assert server.kube is not None
        server.kube.kubectl("create", "namespace", CONTROLLER_NS)
        yield server
    finally:
        if server.kube is not None:
            server.kube.close()
        server.plane.stop()


def _apiserver_pid(api: RealApiServer) -> int:
    component = next(c for c in api.plane.components if c.name == "kube-apiserver")
    assert component.proc is not None
    return component.proc.pid


def _start_serve(
    api: RealApiServer, workdir: Path, *, prometheus_url: str = "http://127.0.0.1:9"
) -> tuple[subprocess.Popen[bytes], Path]:
    kubeconfig = api.write_kubeconfig(workdir / "serve.kubeconfig")
    log = workdir / "serve.log"
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "PROMETHEUS_BASE_URL")}
    env["PYTHONUNBUFFERED"] = "1"
    argv = [
        str(WVA_ADAPTER), "serve", f"--kubeconfig={kubeconfig}", f"--prometheus-url={prometheus_url}",
        "--prometheus-timeout=60s",
        "--authentication-skip-lookup", "--bind-address=127.0.0.1", "--secure-port=0",
        f"--keda-grpc-address=127.0.0.1:{free_port()}", f"--metrics-bind-address=127.0.0.1:{free_port()}",
        f"--health-probe-bind-address=127.0.0.1:{free_port()}", f"--controller-namespace={CONTROLLER_NS}",
        "--engine-interval=1s", "--leader-elect", "--leader-election-lease-duration=15s",
        "--leader-election-renew-deadline=10s", "--leader-election-retry-period=1s",
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - prctl only
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while "became leader" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"serve did not become leader:\n{log.read_text(errors='replace')[-3000:]}", pytrace=False)
        time.sleep(0.2)
    return proc, log


def _holder(api: RealApiServer) -> str:
    assert api.kube is not None
    result = api.kube.kubectl("get", "lease", LEASE, "-n", CONTROLLER_NS, "-o", "json")
    return str(json.loads(result.stdout)["spec"].get("holderIdentity") or "")


def _stop(proc: subprocess.Popen[bytes], log: Path) -> tuple[int, float]:
    """SIGTERM, and the exit code and seconds until the exit; fails (after a SIGKILL) past STOP_WITHIN_S."""
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=STOP_WITHIN_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        pytest.fail(
            f"serve still running {STOP_WITHIN_S:g} s after SIGTERM:\n{log.read_text(errors='replace')[-3000:]}",
            pytrace=False,
        )
    return code, time.monotonic() - sent


@pytest.mark.timeout(180)
def test_sigterm_with_the_apiserver_answering_releases_the_lease(api: RealApiServer, tmp_path: Path) -> None:
    proc, log = _start_serve(api, tmp_path)
    assert _holder(api)  # held by serve
    code, took_s = _stop(proc, log)
    print(f"[shutdown] answering apiserver: exit {code} {took_s:.2f}s after SIGTERM")
    assert code == 0, log.read_text(errors="replace")[-3000:]
    assert _holder(api) == "", "the Lease was not released"
    assert "released lease" in log.read_text(errors="replace")


@pytest.mark.timeout(180)
def test_sigterm_with_the_apiserver_hanging_still_stops_within_5s(api: RealApiServer, tmp_path: Path) -> None:
    proc, log = _start_serve(api, tmp_path)
    pid = _apiserver_pid(api)
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(2.0)  # serve's next Lease renewal and status writes are now waiting on the frozen apiserver
        code, took_s = _stop(proc, log)
    finally:
        os.kill(pid, signal.SIGCONT)
    text = log.read_text(errors="replace")
    print(f"[shutdown] hanging apiserver: exit {code} {took_s:.2f}s after SIGTERM")
    assert code in (0, 1), text[-3000:]
    assert "the lease was not released within" in text, text[-3000:]


@pytest.mark.timeout(180)
def test_sigterm_with_prometheus_hanging_stops_within_5s_and_releases(api: RealApiServer, tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    try:
        proc, log = _start_serve(api, tmp_path, prometheus_url=f"http://127.0.0.1:{listener.getsockname()[1]}")
        time.sleep(2.0)  # the first cycles' queries are now blocked in their threads
        code, took_s = _stop(proc, log)
    finally:
        listener.close()
    text = log.read_text(errors="replace")
    print(f"[shutdown] hanging Prometheus: exit {code} {took_s:.2f}s after SIGTERM")
    assert code == 0, text[-3000:]
    assert _holder(api) == "", "the Lease was not released"
