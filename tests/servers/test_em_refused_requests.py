"""Requests refused before routing (issues 10 and 19) get a `metav1.Status` body, over a real TLS socket: an
over-long labelSelector (request line), an oversized header, too many headers, malformed lines, a body on an
unauthenticated connection. The refusals come from the gate (adapter.servers.gate), which sees every request
head of an unauthenticated connection and the first of an authenticated one."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from adapter.servers.gate import GateLimits
from adapter.servers.tls import client_ssl_context
from tests.servers._em_support import EmRecordingAuthorizer, em_request
from tests.servers.conftest import EmServer
from tests.servers.test_em_server import assert_status, metric_path

LIMITS = GateLimits()


@pytest.mark.parametrize(
    ("path", "headers", "code", "reason", "message"),
    [
        pytest.param(
            metric_path("wva_desired_replicas", "variant_name in (" + "a," * 10_000 + "b)"),
            (),
            431,
            "BadRequest",
            "request line of",
            id="20kB-selector",
        ),
        pytest.param(
            metric_path("wva_desired_replicas"),
            (("X-Big", "v" * 20_000),),
            431,
            "BadRequest",
            f"the limit is {LIMITS.max_header_line:,}",
            id="20kB-header",
        ),
        pytest.param(
            metric_path("wva_desired_replicas"),
            tuple((f"X-H{i}", "v") for i in range(300)),
            431,
            "BadRequest",
            f"the limit is {LIMITS.max_headers}",
            id="300-headers",
        ),
    ],
)
async def test_refused_before_routing_is_a_status(
    em_server: EmServer, path: str, headers: tuple[tuple[str, str], ...], code: int, reason: str, message: str
) -> None:
    response = await em_request(em_server.port, path, ca_pem=em_server.ca_pem, headers=headers)
    assert response.status == code
    assert response.headers["Content-Type"].startswith("application/json")
    document = response.json()
    assert_status(document, code=code, reason=reason, message_part=message)
    assert len(document["message"]) < 300  # the refused input is not echoed back


async def _raw(em_server: EmServer, data: bytes) -> tuple[int, str]:
    context = client_ssl_context(ca_pem=em_server.ca_pem)
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", em_server.port, ssl=context, server_hostname="localhost"
    )
    try:
        writer.write(data)
        answer = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


@pytest.mark.parametrize(
    ("data", "code", "message"),
    [
        pytest.param(b"GARBAGE\r\n\r\n", 400, "malformed request line", id="no-target-no-version"),
        pytest.param(b"GET /apis HTTP/2.0\r\n\r\n", 400, "malformed request line", id="http2-version"),
        pytest.param(b"GET /apis\x1b[31m HTTP/1.1\r\n\r\n", 400, "malformed request line", id="escape-in-target"),
        pytest.param(b"GET /apis HTTP/1.1\r\nNo colon here\r\n\r\n", 400, "malformed header line 1", id="no-colon"),
        pytest.param(b"GET /apis HTTP/1.1\r\n folded: x\r\n\r\n", 400, "malformed header line 1", id="obs-fold"),
        pytest.param(b"GET /apis HTTP/1.1\r\nX: a\x00b\r\n\r\n", 400, "malformed header line 1", id="nul-in-value"),
        pytest.param(
            b"POST /apis HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 413, "bodies are not accepted", id="body"
        ),
        pytest.param(
            b"POST /apis HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            413,
            "bodies are not accepted",
            id="chunked",
        ),
    ],
)
async def test_malformed_heads_are_a_status_that_quotes_nothing(
    em_server: EmServer, data: bytes, code: int, message: str
) -> None:
    status, body = await _raw(em_server, data)
    assert status == code
    reason = "RequestEntityTooLarge" if code == 413 else "BadRequest"
    assert_status(json.loads(body), code=code, reason=reason, message_part=message)
    assert "GARBAGE" not in body
    assert "\\u001b" not in body
    assert "hello" not in body


async def test_server_still_answers_after_refusals(em_server: EmServer) -> None:
    await em_request(em_server.port, metric_path("x", "a=" + "b" * 20_000), ca_pem=em_server.ca_pem)
    ok = await em_request(em_server.port, metric_path("wva_desired_replicas"), ca_pem=em_server.ca_pem)
    assert ok.status == 200


def _get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()


NAMESPACES = [
    pytest.param("%00", "'\\x00'", id="nul"),
    pytest.param("LLM", "'LLM'", id="upper-case"),
    pytest.param("a" * 64, "'" + "a" * 64 + "'", id="64-chars"),
    pytest.param("a" * 100, "(100 chars)", id="100-chars"),
    pytest.param("%1b%5b31mred", "'\\x1b[31mred'", id="ansi-escape"),
    pytest.param("a%E2%80%AEb", "'a\\u202eb'", id="rlo"),
]


@pytest.mark.parametrize(("namespace", "shown"), NAMESPACES)
async def test_a_namespace_no_object_can_live_in_is_400_naming_the_rule(
    em_server: EmServer, namespace: str, shown: str
) -> None:
    status, body = await _raw(
        em_server, _get(f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/wva_desired_replicas")
    )
    assert status == 400
    document = json.loads(body)
    assert_status(
        document, code=400, reason="BadRequest", message_part="is invalid: must be a lowercase RFC 1123 label"
    )
    assert shown in document["message"]
    assert document["message"].isprintable()


async def test_an_invalid_namespace_is_refused_before_anyone_is_asked(em_serve: Any, em_decisions: Any) -> None:
    authorizer = EmRecordingAuthorizer()
    server = await em_serve(em_decisions, authorizer=authorizer)
    status, _ = await _raw(server, _get("/apis/external.metrics.k8s.io/v1beta1/namespaces/%00/wva_desired_replicas"))
    assert status == 400
    assert authorizer.calls == []  # no SubjectAccessReview for a namespace that cannot exist


async def test_an_unknown_metric_name_is_quoted_escaped(em_server: EmServer) -> None:
    status, body = await _raw(em_server, _get("/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/wva%1b%5b31m"))
    assert status == 404
    message = json.loads(body)["message"]
    assert "'wva\\x1b[31m'" in message
    assert message.isprintable()
