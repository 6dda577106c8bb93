"""The HTTPS server's front door: TLS handshake and request-head deadlines, a cap on unauthenticated
connections, and a `metav1.Status` for every request refused before routing, on public asyncio and aiohttp API.

Why a gate of our own. aiohttp has no TLS handshake timeout of its own to set (asyncio's default is 60 s), no
deadline for reading a request head (a client sending one header line every 10 s keeps its connection for an
hour, aiohttp's keep-alive default), no bound on connections, and answers requests its parser refuses with a
text/plain page that no hook can change (aio-libs/aiohttp#3287). Issue 19 measured 3,000 such connections
growing the server from 134 MB to 983 MB before any of them was authenticated. So the listening socket is ours
(`loop.create_server`) and each connection passes this gate before aiohttp sees it:

    accept ─► admitted? (at most `max_unauthenticated` connections not yet authenticated; when full, the
              │          oldest one still in its handshake or head is dropped for the newcomer)
              ▼
    TLS handshake (`loop.start_tls`, `handshake_timeout_s`)
              ▼
    first request head, read by the gate within `head_timeout_s` of the handshake: at most
    `max_head_bytes`, `max_request_line` and `max_header_line` bytes per line, `max_headers` lines, each of the
    HTTP/1.1 shape
    (RFC 9112 request-line and field-line), no request body on an unauthenticated connection
              │  refused → the gate writes a `metav1.Status` and closes: 431 too large (what kube-apiserver,
              │  i.e. Go's net/http, answers), 400 malformed, 413 a body, 408 the deadline passed
              ▼
    aiohttp (`runner.server`, a documented protocol factory, `web.Server`) gets the connection:
      - authenticated (the client presented a certificate that verified against the client CA: the
        aggregator's front-proxy certificate): the transport is handed over (`transport.set_protocol`) and
        kept alive; aiohttp's `keepalive_timeout` (`idle_timeout_s`) bounds idle time and later heads, and
        its parser limits are set to the gate's;
      - unauthenticated: one request per connection. The gate stays in front, forwards the vetted head only,
        and the application answers with `Connection: close` (`force_close_unauthenticated`), so every
        request of an unauthenticated client passes the gate's checks.

Nothing here touches aiohttp internals: `web.AppRunner(..., **handler kwargs)`, `runner.server` (a
`web.Server`, "a protocol factory compatible with loop.create_server") and `StreamResponse.force_close()`
are documented; the rest is asyncio's public transport and protocol API.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import logging
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

_log = logging.getLogger(__name__)

__all__ = ["Gate", "GateLimits", "GateStats", "HeadRefused", "vet_head"]


@dataclass(frozen=True, slots=True)
class GateLimits:
    """The numbers (docs/security.md lists them beside kube-apiserver's)."""

    handshake_timeout_s: float = 10.0
    head_timeout_s: float = 10.0
    """From the end of the handshake to the end of the first request head."""
    idle_timeout_s: float = 60.0
    """aiohttp's keep-alive timeout on authenticated connections: idle time, and the time to send a later head."""
    shutdown_timeout_s: float = 5.0
    """TLS close_notify exchange on close; a peer that never answers is cut off then."""
    max_unauthenticated: int = 256
    max_request_line: int = 16 * 1024
    """An 8,192-character labelSelector (`adapter.servers.selector`), percent-encoded, fits."""
    max_header_line: int = 8 * 1024
    max_headers: int = 64
    max_head_bytes: int = 64 * 1024
    """The whole head: what one connection may make the gate buffer (256 connections: at most 16 MB)."""

    def aiohttp_kwargs(self) -> dict[str, Any]:
        """The same limits for aiohttp's own parser (documented AppRunner/handler arguments)."""
        return {
            "keepalive_timeout": self.idle_timeout_s,
            "max_line_size": self.max_request_line,
            "max_field_size": self.max_header_line,
            "max_headers": self.max_headers,
        }


@dataclass
class GateStats:
    """Counters since start (tests and the security doc's measurements read them)."""

    accepted: int = 0
    evicted: int = 0
    refused_full: int = 0
    handshake_failed: int = 0
    head_timeouts: int = 0
    heads_refused: int = 0
    handed_over: int = 0


class HeadRefused(Exception):
    """A request head the gate will not pass on; `status` and a message that quotes no input."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# RFC 9110 token and RFC 9112 request-line / field-line, on bytes. Only the shape is checked; aiohttp parses.
_TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_REQUEST_LINE: Final = re.compile(_TOKEN + rb" [\x21-\x7e\x80-\xff]+ HTTP/1\.[01]")
_FIELD_LINE: Final = re.compile(rb"(" + _TOKEN + rb"):[\t \x21-\x7e\x80-\xff]*")
_HEAD_END: Final = b"\r\n\r\n"


def vet_head(head: bytes, limits: GateLimits, *, allow_body: bool) -> None:
    """Check one request head (up to and including its blank line) against the limits and the HTTP/1.1 line
    shapes; raise HeadRefused (never quoting the input). `allow_body=False` refuses a head that announces a
    body (`Content-Length` other than 0, or `Transfer-Encoding`): this API has no verb that takes one."""
    if len(head) > limits.max_head_bytes:
        raise HeadRefused(431, f"request head of {len(head):,} bytes; the limit is {limits.max_head_bytes:,}")
    lines = head[: -len(_HEAD_END)].split(b"\r\n")
    request_line, fields = lines[0], lines[1:]
    if len(request_line) > limits.max_request_line:
        raise HeadRefused(
            431,
            f"request line of {len(request_line):,} bytes; the limit is {limits.max_request_line:,} "
            "(a labelSelector of at most 8,192 characters fits)",
        )
    if not _REQUEST_LINE.fullmatch(request_line):
        raise HeadRefused(400, "malformed request line (expected 'METHOD /path HTTP/1.1')")
    if len(fields) > limits.max_headers:
        raise HeadRefused(431, f"{len(fields):,} header lines; the limit is {limits.max_headers}")
    for number, line in enumerate(fields, start=1):
        if len(line) > limits.max_header_line:
            raise HeadRefused(
                431, f"header line {number} is {len(line):,} bytes; the limit is {limits.max_header_line:,}"
            )
        match = _FIELD_LINE.fullmatch(line)
        if match is None:
            raise HeadRefused(400, f"malformed header line {number} (expected 'Name: value')")
        if not allow_body:
            name = match.group(1).lower()
            value = line[match.end(1) + 1 :].strip(b" \t")
            if name == b"transfer-encoding" or (name == b"content-length" and value != b"0"):
                raise HeadRefused(413, "request bodies are not accepted by this API")


_PHRASES: Final = {
    400: "Bad Request",
    408: "Request Timeout",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


def _status_response(status: int, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status} {_PHRASES.get(status, 'Error')}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


TRIM_AFTER_CONNECTIONS = 64
"""When this many unauthenticated connections were open at once and all have closed, freed memory is handed
back to the system (`release_freed_memory`)."""


def release_freed_memory() -> None:
    """glibc keeps memory freed by many small allocations (TLS buffers, request objects) in its heaps for reuse,
    so the resident size stays at its peak after a flood of connections has gone (issue 19: 983 MB before,
    997 MB after 3,000 connections closed). `malloc_trim(0)` returns the free pages. A no-op elsewhere."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any:
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]
    return trim


StatusRenderer = Callable[[int, str], bytes]
"""(HTTP status, message) → a `metav1.Status` JSON body."""
SslContext = ssl.SSLContext | Callable[[], ssl.SSLContext]


class _Connection(asyncio.Protocol):
    """One accepted connection while the gate holds it (module docstring). States: handshake → head →
    (handed over | single request) → closed."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self.state = "new"
        self.raw: asyncio.Transport | None = None
        self.transport: asyncio.Transport | None = None
        self.inner: asyncio.Protocol | None = None
        self.authenticated = False
        self._buffer = bytearray()
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None

    # ---- raw TCP, then TLS --------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.raw = transport
        if not self.gate.admit(self):
            transport.abort()
            return
        transport.pause_reading()  # the ClientHello waits in the socket until start_tls takes the transport
        self.state = "handshake"
        self._task = asyncio.get_running_loop().create_task(self._handshake())

    async def _handshake(self) -> None:
        assert self.raw is not None
        gate = self.gate
        try:
            transport = await asyncio.get_running_loop().start_tls(
                self.raw,
                self,
                gate.ssl_context(),
                server_side=True,
                ssl_handshake_timeout=gate.limits.handshake_timeout_s,
                ssl_shutdown_timeout=gate.limits.shutdown_timeout_s,
            )
        except asyncio.CancelledError:
            self.raw.abort()
            self._closed()
            raise
        except (OSError, TimeoutError, ssl.SSLError, ConnectionError, RuntimeError) as exc:
            gate.stats.handshake_failed += 1
            _log.debug("TLS handshake failed: %s", type(exc).__name__)
            self.raw.abort()
            self._closed()
            return
        finally:
            self._task = None
        if transport is None or self.state == "closed":
            return
        self.transport = transport
        self.authenticated = bool(transport.get_extra_info("peercert"))
        if self.authenticated:
            gate.promote(self)
        self.state = "head"
        self._timer = asyncio.get_running_loop().call_later(gate.limits.head_timeout_s, self._head_timeout)
        if self._buffer:  # data that arrived with the end of the handshake, before start_tls returned
            self._process()

    # ---- the first request head ---------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.state not in ("handshake", "head"):
            return  # after the single request of an unauthenticated connection: nothing more is read
        if len(self._buffer) > self.gate.limits.max_head_bytes:
            return  # already over the limit; the refusal follows in _process
        self._buffer += data
        if self.state == "head":
            self._process()

    def _process(self) -> None:
        end = self._buffer.find(_HEAD_END)
        limits = self.gate.limits
        if end < 0:
            if len(self._buffer) > limits.max_head_bytes:
                self._refuse(431, f"request head larger than {limits.max_head_bytes:,} bytes")
            return
        head = bytes(self._buffer[: end + len(_HEAD_END)])
        try:
            vet_head(head, limits, allow_body=self.authenticated)
        except HeadRefused as refused:
            self._refuse(refused.status, str(refused))
            return
        self._cancel_timer()
        self._hand_over(bytes(self._buffer) if self.authenticated else head)

    def _hand_over(self, data: bytes) -> None:
        assert self.transport is not None
        self.gate.stats.handed_over += 1
        inner = self.gate.protocol_factory()
        self._buffer = bytearray()
        if self.authenticated:
            self.state = "handed-over"
            self.transport.set_protocol(inner)
            inner.connection_made(self.transport)
            inner.data_received(data)
            self.gate.forget(self)
            return
        self.state = "single-request"
        self.inner = inner
        self.transport.pause_reading()  # nothing after the head is read: the response closes the connection
        inner.connection_made(self.transport)
        inner.data_received(data)

    def _head_timeout(self) -> None:
        self._timer = None
        if self.state == "head":
            self.gate.stats.head_timeouts += 1
            self._refuse(408, f"no complete request head within {self.gate.limits.head_timeout_s:g} s")

    def _refuse(self, status: int, message: str) -> None:
        self.gate.stats.heads_refused += status != 408
        self.state = "refused"
        self._cancel_timer()
        self._buffer = bytearray()
        transport = self.transport
        if transport is None:
            return
        with contextlib.suppress(Exception):
            transport.write(_status_response(status, self.gate.render(status, message)))
        transport.close()

    # ---- the rest of the protocol: forwarded to aiohttp while it serves the single request ----------------

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        inner, self.inner = self.inner, None
        self._closed()
        if inner is not None:
            inner.connection_lost(exc)

    # ---- bookkeeping --------------------------------------------------------------------------------------

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _closed(self) -> None:
        self.state = "closed"
        self._cancel_timer()
        self._buffer = bytearray()
        self.gate.forget(self)

    @property
    def evictable(self) -> bool:
        return self.state in ("new", "handshake", "head")

    def abort(self) -> None:
        """Drop the connection now (eviction, shutdown)."""
        if self._task is not None:
            self._task.cancel()
        transport = self.transport or self.raw
        if transport is not None:
            transport.abort()
        self._closed()


@dataclass
class Gate:
    """The protocol factory for `loop.create_server` (see `start`) and the connection bookkeeping."""

    protocol_factory: Callable[[], asyncio.Protocol]
    """aiohttp's `runner.server`."""
    context: SslContext
    """The server's SSL context, or a function returning the current one (for certificate rotation)."""
    render: StatusRenderer
    limits: GateLimits = field(default_factory=GateLimits)
    stats: GateStats = field(default_factory=GateStats)
    _unauthenticated: dict[_Connection, None] = field(default_factory=dict)
    _held: set[_Connection] = field(default_factory=set)
    """Every connection not yet handed over to aiohttp (authenticated or not)."""
    _peak: int = 0
    _server: asyncio.Server | None = None

    def ssl_context(self) -> ssl.SSLContext:
        return self.context if isinstance(self.context, ssl.SSLContext) else self.context()

    @property
    def unauthenticated(self) -> int:
        """Connections open and not (yet) authenticated: in the handshake, the head, or their one request."""
        return len(self._unauthenticated)

    def admit(self, connection: _Connection) -> bool:
        """Count a new connection; at the cap, drop the oldest still in its handshake or head for it, or
        refuse it when every counted connection is already being answered."""
        self.stats.accepted += 1
        if len(self._unauthenticated) >= self.limits.max_unauthenticated:
            victim = next((c for c in self._unauthenticated if c.evictable), None)
            if victim is None:
                self.stats.refused_full += 1
                return False
            self.stats.evicted += 1
            victim.abort()
        self._unauthenticated[connection] = None
        self._held.add(connection)
        return True

    def promote(self, connection: _Connection) -> None:
        """The client presented a certificate that verified: it no longer counts against the cap."""
        self._unauthenticated.pop(connection, None)

    def forget(self, connection: _Connection) -> None:
        self._unauthenticated.pop(connection, None)
        self._held.discard(connection)
        if self._unauthenticated:
            self._peak = max(self._peak, len(self._unauthenticated))
        elif self._peak >= TRIM_AFTER_CONNECTIONS:
            self._peak = 0
            release_freed_memory()

    async def start(self, host: str, port: int, *, backlog: int = 1024) -> asyncio.Server:
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Connection(self), host, port, backlog=backlog
        )
        return self._server

    def close(self) -> None:
        """Stop listening and drop every connection the gate still holds (those handed to aiohttp are closed
        by its runner's cleanup)."""
        if self._server is not None:
            self._server.close()
        for connection in list(self._held):
            if connection.state != "single-request":
                connection.abort()
