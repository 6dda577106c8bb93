"""`wva-adapter serve` as a process: it fails fast, with a message naming the problem and a non-zero exit code,
when it cannot work — no Prometheus URL, or a kubeconfig it cannot use. (A crash loop with a clear last log
line is what Kubernetes operators see.)"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from pathlib import Path

import pytest

from adapter.config.settings import KNOBS, MAIN_CONFIGMAP

from .support import RealApiServer, Tls

pytestmark = pytest.mark.e2e_k8s  # a real kube-apiserver per test (tests/e2e_k8s/realapi.py)

FAIL_FAST_S = 15.0
"""Interpreter start-up included; a hang (e.g. retrying forever) is cut off here and fails the test."""


def _binary() -> Path:
    path = Path(sys.executable).with_name("wva-adapter")
    if not path.exists():
        pytest.fail(f"{path} not found: install the package into the venv (`make install`)", pytrace=False)
    return path


def _env(home: Path) -> dict[str, str]:
    """This environment without any setting `serve` reads (so only the flags count) and outside any cluster."""
    names = {k.env for k in KNOBS} | {"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}
    return {k: v for k, v in os.environ.items() if k not in names} | {"HOME": str(home)}


def _kubeconfig(path: Path, server: str, token: str, ca: Path | None = None) -> Path:
    cluster = {"server": server} | ({"certificate-authority": str(ca)} if ca else {})
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path.write_text(json.dumps(config))
    return path


async def _serve(tmp_path: Path, tls: Tls, *args: str) -> tuple[int, str, float]:
    local = [
        "--bind-address=127.0.0.1",
        "--secure-port=0",
        "--keda-grpc-address=127.0.0.1:0",
        "--metrics-bind-address=127.0.0.1:0",
        "--health-probe-bind-address=127.0.0.1:0",
        f"--tls-cert-file={tls.cert}",
        f"--tls-private-key-file={tls.key}",
    ]
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        str(_binary()),
        "serve",
        *local,
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), FAIL_FAST_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        pytest.fail(f"serve {' '.join(args)} still running after {FAIL_FAST_S} s; it must fail fast")
    return proc.returncode or 0, (out + err).decode(errors="replace"), time.monotonic() - started


def _last_error(output: str) -> str:
    return next((line for line in reversed(output.splitlines()) if "ERROR" in line or "invalid" in line), output)


async def test_missing_prometheus_url_is_reported_after_looking_in_the_configmap(
    api: RealApiServer, tls: Tls, tmp_path: Path
) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    code, output, took = await _serve(tmp_path, tls, f"--kubeconfig={kubeconfig}")
    print(f"\nno --prometheus-url: exit {code} after {took:.1f}s: {_last_error(output)}")
    assert code == 2, output
    assert "--prometheus-url (env PROMETHEUS_BASE_URL) is required by serve" in output
    # The URL may come from the wva-variantautoscaling-config ConfigMap: serve looked there before giving up.
    assert api.count(method="GET", path_contains=f"/configmaps/{MAIN_CONFIGMAP}") == 1
    assert api.count(path_contains="/variantautoscalings") == 0, "serve started watching before failing"


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        pytest.param("missing", "cannot read: No such file", id="missing-file"),
        pytest.param("malformed", "cannot load Kubernetes configuration from", id="malformed-yaml"),
        pytest.param("wrong-token", "HTTP 401", id="rejected-credentials"),
        pytest.param("unreachable", "Cannot connect to host", id="unreachable-server"),
    ],
)
async def test_an_unusable_kubeconfig_is_reported(
    api: RealApiServer, tls: Tls, tmp_path: Path, case: str, expected: str
) -> None:
    kubeconfig = tmp_path / f"kubeconfig-{case}"
    if case == "malformed":
        kubeconfig.write_text("clusters: [{name: c, cluster: {server: ")
    elif case == "wrong-token":
        _kubeconfig(kubeconfig, api.url, "not-the-token", ca=api.plane.pki.ca)  # kube-apiserver answers 401
    elif case == "unreachable":
        with socket.socket() as s:  # a port that was free a moment ago: nobody listens there
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        _kubeconfig(kubeconfig, f"https://127.0.0.1:{port}", "any-token", ca=api.plane.pki.ca)
    code, output, took = await _serve(
        tmp_path, tls, f"--kubeconfig={kubeconfig}", "--prometheus-url=http://127.0.0.1:9/"
    )
    print(f"\n{case} kubeconfig: exit {code} after {took:.1f}s: {_last_error(output)}")
    assert code == 2, output
    assert expected in output
    if case in ("missing", "malformed"):
        assert str(kubeconfig) in output, "the message must name the kubeconfig"
    assert "Traceback" not in output


async def test_an_invalid_prometheus_url_is_rejected_before_anything_starts(
    api: RealApiServer, tls: Tls, tmp_path: Path
) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    code, output, _ = await _serve(tmp_path, tls, f"--kubeconfig={kubeconfig}", "--prometheus-url=prometheus:9090")
    assert code == 2, output
    assert "flag --prometheus-url: 'prometheus:9090'" in output
    assert "http:// or https://" in output
    assert api.requests == [], "serve talked to the API server with invalid settings"  # from the audit log
