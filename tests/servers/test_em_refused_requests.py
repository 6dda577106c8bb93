"""Requests aiohttp refuses before any handler runs (issue 10) still get a `metav1.Status` body, over a real
TLS socket: an over-long labelSelector (request line), an oversized header, too many headers."""

from __future__ import annotations

import pytest

from tests.servers._em_support import em_request
from tests.servers.conftest import EmServer
from tests.servers.test_em_server import assert_status, metric_path


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        pytest.param(
            metric_path("wva_desired_replicas", "variant_name in (" + "a," * 10_000 + "b)"), (), id="20kB-selector"
        ),
        pytest.param(metric_path("wva_desired_replicas"), (("X-Big", "v" * 20_000),), id="20kB-header"),
        pytest.param(
            metric_path("wva_desired_replicas"), tuple((f"X-H{i}", "v") for i in range(300)), id="300-headers"
        ),
    ],
)
async def test_refused_before_routing_is_a_status(
    em_server: EmServer, path: str, headers: tuple[tuple[str, str], ...]
) -> None:
    response = await em_request(em_server.port, path, ca_pem=em_server.ca_pem, headers=headers)
    assert response.status == 400
    assert response.headers["Content-Type"].startswith("application/json")
    document = response.json()
    assert_status(document, code=400, reason="BadRequest", message_part="malformed or oversized request")
    assert len(document["message"]) < 300  # the refused input is not echoed back


async def test_server_still_answers_after_refusals(em_server: EmServer) -> None:
    await em_request(em_server.port, metric_path("x", "a=" + "b" * 20_000), ca_pem=em_server.ca_pem)
    ok = await em_request(em_server.port, metric_path("wva_desired_replicas"), ca_pem=em_server.ca_pem)
    assert ok.status == 200
