"""The HTTPS server's gate (adapter.servers.gate) over real TLS sockets: handshake and head deadlines, the cap on
unauthenticated connections with eviction of the oldest idle one, one request per unauthenticated connection,
kept-alive authenticated ones, and a shutdown that does not wait for slow clients.

The deadlines are set to a fraction of a second here; the waits are bounded polls (`_until`), never timing
assertions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from adapter.servers.external_metrics import RunningServer, build_external_metrics_app, start_https_server
from adapter.servers.gate import GateLimits
from adapter.servers.tls import client_ssl_context, server_ssl_context
from tests.servers._em_support import EM_BASE, EmClientCert, EmPki, em_store

FAST = GateLimits(handshake_timeout_s=0.3, head_timeout_s=0.3, idle_timeout_s=5.0, max_unauthenticated=4)
PATH = f"{EM_BASE}/namespaces/llm/wva_desired_replicas"


@pytest.fixture
async def gated(em_pki: EmPki) -> AsyncIterator[Callable[..., asyncio.Future[RunningServer]]]:
    started: list[RunningServer] = []

    async def start(limits: GateLimits = FAST) -> RunningServer:
        context = server_ssl_context(
            cert_file=em_pki.serving_cert, key_file=em_pki.serving_key, client_ca_pem=em_pki.front_proxy_ca_pem
        )
        running = await start_https_server(
            build_external_metrics_app(em_store()), host="127.0.0.1", port=0, ssl_context=context, limits=limits
        )
        started.append(running)
        return running

    yield start  # type: ignore[misc]
    for running in started:
        await running.close()


async def _until(what: str, check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not check():
        if loop.time() > deadline:
            pytest.fail(f"{what}: not within {timeout_s} s")
        await asyncio.sleep(0.02)


def _client(pki: EmPki, cert: EmClientCert | None = None) -> ssl.SSLContext:
    return client_ssl_context(
        ca_pem=pki.serving_ca_pem,
        cert_file=None if cert is None else cert.cert_file,
        key_file=None if cert is None else cert.key_file,
    )


async def _open(port: int, context: ssl.SSLContext) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")


async def _response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    body = await asyncio.wait_for(reader.readexactly(int(headers.get("content-length", "0"))), 10)
    return int(lines[0].split()[1]), headers, body


def _get(path: str = PATH) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()


async def test_a_client_that_never_starts_tls_is_cut_at_the_handshake_deadline(gated: Callable[..., object]) -> None:
    running: RunningServer = await gated()  # type: ignore[misc]
    reader, writer = await asyncio.open_connection("127.0.0.1", running.port)  # plain TCP, no ClientHello
    await _until("the gate drops it", lambda: running.gate.stats.handshake_failed == 1)
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
    assert running.gate.unauthenticated == 0
    writer.close()


async def test_a_slow_head_gets_408_and_the_connection_is_closed(gated: Callable[..., object], em_pki: EmPki) -> None:
    running: RunningServer = await gated()  # type: ignore[misc]
    reader, writer = await _open(running.port, _client(em_pki))
    writer.write(b"GET /apis HTTP/1.1\r\nX-Slow: 1\r\n")  # a header line, then nothing: slowloris
    status, headers, body = await _response(reader)
    assert status == 408
    assert headers["connection"] == "close"
    document = json.loads(body)
    assert (document["kind"], document["code"], document["reason"]) == ("Status", 408, "Timeout")
    assert "no complete request head within 0.3 s" in document["message"]
    assert running.gate.stats.head_timeouts == 1
    await _until("the connection is forgotten", lambda: running.gate.unauthenticated == 0)
    writer.close()


async def test_the_cap_evicts_the_oldest_idle_connection_and_a_new_client_is_served(
    gated: Callable[..., object], em_pki: EmPki
) -> None:
    running: RunningServer = await gated(  # type: ignore[misc]
        GateLimits(handshake_timeout_s=30, head_timeout_s=30, max_unauthenticated=4)
    )
    idle = [await _open(running.port, _client(em_pki)) for _ in range(10)]  # TLS up, then nothing
    await _until("ten accepted", lambda: running.gate.stats.accepted >= 10)
    assert running.gate.unauthenticated <= 4
    assert running.gate.stats.evicted >= 6
    reader, writer = await _open(running.port, _client(em_pki))
    writer.write(_get())
    status, headers, _ = await _response(reader)
    assert status == 200
    assert headers["connection"] == "close"  # unauthenticated: one request per connection
    assert await asyncio.wait_for(reader.read(), 5) == b""
    # the oldest were dropped: their reads end
    first_reader, _ = idle[0]
    assert await asyncio.wait_for(first_reader.read(), 5) == b""
    for _, w in [*idle, (reader, writer)]:
        w.close()


async def test_an_authenticated_connection_is_kept_alive_and_not_counted(
    gated: Callable[..., object], em_pki: EmPki
) -> None:
    running: RunningServer = await gated()  # type: ignore[misc]
    reader, writer = await _open(running.port, _client(em_pki, em_pki.proxy_client))
    for _ in range(3):
        writer.write(_get())
        status, headers, _ = await _response(reader)
        assert status == 200
        assert headers.get("connection", "keep-alive").lower() != "close"
    assert running.gate.unauthenticated == 0
    assert running.gate.stats.handed_over == 1
    writer.close()


async def test_a_pipelined_second_request_on_an_unauthenticated_connection_is_not_read(
    gated: Callable[..., object], em_pki: EmPki
) -> None:
    running: RunningServer = await gated()  # type: ignore[misc]
    reader, writer = await _open(running.port, _client(em_pki))
    writer.write(_get() + b"GARBAGE THAT NO PARSER SEES\r\n\r\n")
    status, headers, _ = await _response(reader)
    assert (status, headers["connection"]) == (200, "close")
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()


async def test_close_does_not_wait_for_slow_clients(gated: Callable[..., object], em_pki: EmPki) -> None:
    running: RunningServer = await gated(  # type: ignore[misc]
        GateLimits(handshake_timeout_s=60, head_timeout_s=60, idle_timeout_s=60)
    )
    slow = [await _open(running.port, _client(em_pki)) for _ in range(3)]
    for _, writer in slow:
        writer.write(b"GET /apis HTTP/1.1\r\n")
    raw_reader, raw_writer = await asyncio.open_connection("127.0.0.1", running.port)  # stuck before TLS
    await _until("all four held", lambda: running.gate.unauthenticated == 4)
    await asyncio.wait_for(running.close(), timeout=10)  # bounded by the drain, not by the clients
    for reader, _ in [*slow, (raw_reader, raw_writer)]:
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            assert await asyncio.wait_for(reader.read(), 5) == b""
    for _, writer in [*slow, (raw_reader, raw_writer)]:
        writer.close()


async def test_a_rotating_context_is_read_at_each_handshake(em_pki: EmPki, tmp_path: Path) -> None:
    """`ssl_context` may be a function (for certificate rotation): each handshake asks it."""
    calls = 0
    context = server_ssl_context(cert_file=em_pki.serving_cert, key_file=em_pki.serving_key)

    def current() -> ssl.SSLContext:
        nonlocal calls
        calls += 1
        return context

    running = await start_https_server(
        build_external_metrics_app(em_store()), host="127.0.0.1", port=0, ssl_context=current, limits=FAST
    )
    try:
        for _ in range(2):
            reader, writer = await _open(running.port, _client(em_pki))
            writer.write(_get("/healthz"))
            assert (await _response(reader))[0] == 200
            writer.close()
    finally:
        await running.close()
    assert calls == 2
