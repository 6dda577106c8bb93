"""The External Metrics API routes without aiohttp's Application (`_ExternalMetricsAPI.__call__`): these paths pin
that it answers as aiohttp's router did (the expectations were checked against the router-based server of
3d96069), percent-encoded spellings included."""

from __future__ import annotations

import pytest

from tests.servers._em_support import EM_BASE, em_request
from tests.servers.conftest import EmServer

SELECTOR = "?labelSelector=variant_name%3Dllama-h100"


@pytest.mark.parametrize(
    ("path", "method", "status", "reason"),
    [
        pytest.param(f"{EM_BASE}/namespaces/llm/wva_desired_replicas{SELECTOR}", "GET", 200, "", id="metric"),
        pytest.param(f"{EM_BASE}/namespaces/ll%6D/wva_desired_replicas{SELECTOR}", "GET", 200, "", id="encoded-letter"),
        pytest.param(
            f"{EM_BASE}/namespaces/llm/wva%5Fdesired%5Freplicas{SELECTOR}", "GET", 200, "", id="encoded-metric"
        ),
        pytest.param(
            f"{EM_BASE}/namespaces/llm%2Fx/wva_desired_replicas", "GET", 400, "BadRequest", id="encoded-slash"
        ),
        pytest.param(
            f"{EM_BASE}/namespaces/ll%25m/wva_desired_replicas", "GET", 400, "BadRequest", id="encoded-percent"
        ),
        pytest.param(f"{EM_BASE}/namespaces/llm/wva_desired_replicas/x", "GET", 404, "NotFound", id="one-segment-more"),
        pytest.param(f"{EM_BASE}/namespaces/llm/", "GET", 404, "NotFound", id="no-metric"),
        pytest.param(f"{EM_BASE}/namespaces//wva_desired_replicas", "GET", 404, "NotFound", id="empty-namespace"),
        pytest.param(f"{EM_BASE}/namespaces/llm/nope", "GET", 404, "NotFound", id="unknown-metric"),
        pytest.param(f"{EM_BASE}/namespaces/l%7Bm/wva_desired_replicas", "GET", 404, "NotFound", id="brace"),
        pytest.param(f"{EM_BASE}/namespaces/llm/wva_desired_replicas", "POST", 405, "MethodNotAllowed", id="post"),
        pytest.param("/api%73", "GET", 200, "", id="encoded-discovery"),
        pytest.param("/apis/", "GET", 404, "NotFound", id="trailing-slash"),
        pytest.param("/", "GET", 404, "NotFound", id="root"),
        pytest.param("/healthz?verbose", "GET", 200, "", id="health-with-query"),
        pytest.param("/openapi/v2", "GET", 404, "NotFound", id="openapi"),
        pytest.param("/healthz", "DELETE", 405, "MethodNotAllowed", id="health-delete"),
    ],
)
async def test_paths_answer_as_the_router_did(
    em_server: EmServer, path: str, method: str, status: int, reason: str
) -> None:
    response = await em_request(em_server.port, path, ca_pem=em_server.ca_pem, method=method)
    assert response.status == status, response.text
    if reason:
        assert response.json()["reason"] == reason
    if status == 405:
        assert response.headers["Allow"] == "GET,HEAD"
