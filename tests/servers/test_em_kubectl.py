"""The real Go client: `kubectl get --raw` against the server, as a user debugging an HPA would run it.

client-go decodes our Status documents, so these tests also prove kubectl shows our error messages."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pytest

from adapter.servers.auth import AllowAll, RequestHeaderAuthenticator, RequestHeaderConfig
from tests.servers._em_support import EM_BASE, EM_NS, EM_SERVICE, EM_SERVICE_NAMESPACE, EmPki, em_store
from tests.servers.conftest import EmServe, EmServer

KUBECTL = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "kubectl"
KUBECTL_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class KubectlResult:
    returncode: int
    stdout: str
    stderr: str


def write_kubeconfig(path: Path, server: EmServer, *, tls_server_name: str | None = None) -> Path:
    cluster: dict[str, str] = {
        "server": f"https://127.0.0.1:{server.port}",
        "certificate-authority-data": base64.b64encode(server.ca_pem).decode(),
    }
    if tls_server_name is not None:
        cluster["tls-server-name"] = tls_server_name
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "wva", "cluster": cluster}],
        # An empty user makes kubectl prompt for a password; a token it sends along (and we ignore) does not.
        "users": [{"name": "wva", "user": {"token": "not-checked-by-the-adapter"}}],
        "contexts": [{"name": "wva", "context": {"cluster": "wva", "user": "wva"}}],
        "current-context": "wva",
    }
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


async def kubectl_raw(kubeconfig: Path, path: str, home: Path) -> KubectlResult:
    """Run kubectl without blocking the event loop that serves it."""
    assert KUBECTL.exists(), f"kubectl not found at {KUBECTL}"
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "KUBECONFIG": str(kubeconfig)}
    process = await asyncio.create_subprocess_exec(
        str(KUBECTL),
        "get",
        "--raw",
        path,
        "--request-timeout=20s",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=KUBECTL_TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return KubectlResult(process.returncode, stdout.decode(), stderr.decode())


@pytest.fixture
async def em_kubectl_server(em_serve: EmServe) -> EmServer:
    return await em_serve(em_store())


async def test_kubectl_discovery(em_kubectl_server: EmServer, tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig", em_kubectl_server, tls_server_name=f"{EM_SERVICE}.{EM_SERVICE_NAMESPACE}.svc"
    )
    result = await kubectl_raw(kubeconfig, EM_BASE, tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["kind"] == "APIResourceList"
    assert [r["name"] for r in document["resources"]] == [
        "wva_desired_replicas",
        "wva_current_replicas",
        "wva_desired_ratio",
        "wva_recommended_replicas",
    ]
    groups = json.loads((await kubectl_raw(kubeconfig, "/apis", tmp_path)).stdout)
    assert groups["groups"][0]["preferredVersion"]["groupVersion"] == "external.metrics.k8s.io/v1beta1"


async def test_kubectl_reads_a_value_like_the_hpa_asks_for_it(em_kubectl_server: EmServer, tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", em_kubectl_server)
    query = urllib.parse.urlencode({"labelSelector": "variant_name=llama-a100"})
    result = await kubectl_raw(kubeconfig, f"{EM_BASE}/namespaces/{EM_NS}/wva_desired_ratio?{query}", tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "kind": "ExternalMetricValueList",
        "apiVersion": "external.metrics.k8s.io/v1beta1",
        "metadata": {},
        "items": [
            {
                "metricName": "wva_desired_ratio",
                "metricLabels": {
                    "variant_name": "llama-a100",
                    "model_id": "meta/llama-3.1-8b",
                    "accelerator_type": "A100",
                },
                "timestamp": "2026-01-01T00:00:00Z",
                "value": "667m",
            }
        ],
    }


async def test_kubectl_shows_our_not_found_status(em_kubectl_server: EmServer, tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", em_kubectl_server)
    result = await kubectl_raw(kubeconfig, f"{EM_BASE}/namespaces/{EM_NS}/wva_unknown", tmp_path)
    assert result.returncode != 0
    assert "NotFound" in result.stderr
    assert "the server could not find the metric wva_unknown for external.metrics.k8s.io" in result.stderr


async def test_kubectl_shows_our_bad_request_status(em_kubectl_server: EmServer, tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", em_kubectl_server)
    query = urllib.parse.urlencode({"labelSelector": "variant_name in (a"})
    result = await kubectl_raw(kubeconfig, f"{EM_BASE}/namespaces/{EM_NS}/wva_desired_replicas?{query}", tmp_path)
    assert result.returncode != 0
    assert "BadRequest" in result.stderr
    assert "expected: ',' or ')'" in result.stderr


async def test_kubectl_without_front_proxy_identity_is_unauthorized(
    em_serve: EmServe, em_pki: EmPki, tmp_path: Path
) -> None:
    """kubectl presents no front-proxy certificate, so an authenticated server answers 401, which
    client-go turns into its familiar login error."""
    server = await em_serve(
        em_store(),
        authenticator=RequestHeaderAuthenticator(RequestHeaderConfig(em_pki.front_proxy_ca_pem.decode())),
        authorizer=AllowAll(),
        client_ca=True,
    )
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server)
    result = await kubectl_raw(kubeconfig, EM_BASE, tmp_path)
    assert result.returncode != 0
    assert "Unauthorized" in result.stderr
