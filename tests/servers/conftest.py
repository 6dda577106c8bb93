"""Fixtures for tests/servers. Names are prefixed by area (`em_` = External Metrics API) so several
servers' tests can share this file without collisions."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from adapter.servers.auth import Authenticator, Authorizer
from adapter.servers.external_metrics import RunningServer, build_external_metrics_app, start_https_server
from adapter.servers.tls import server_ssl_context
from adapter.store.decisions import DecisionReader, DecisionStore
from tests.servers._em_support import EmPki, em_make_pki, em_store


@dataclass(frozen=True)
class EmServer:
    """A running External Metrics API server on 127.0.0.1 (TLS, ephemeral port)."""

    port: int
    ca_pem: bytes
    running: RunningServer


EmServe = Callable[..., Awaitable[EmServer]]


@pytest.fixture(scope="session")
def em_pki(tmp_path_factory: pytest.TempPathFactory) -> EmPki:
    return em_make_pki(tmp_path_factory.mktemp("em-pki"))


@pytest.fixture
def em_decisions() -> DecisionStore:
    """A real DecisionStore holding `em_fleet()`."""
    return em_store()


@pytest.fixture
async def em_serve(em_pki: EmPki) -> AsyncIterator[EmServe]:
    """Start real servers: `await em_serve(reader, authenticator=…, authorizer=…, client_ca=True, …)`.
    `client_ca=True` makes TLS ask for client certificates signed by the front-proxy CA; other keyword
    options go to `build_external_metrics_app`."""
    started: list[RunningServer] = []

    async def serve(
        reader: DecisionReader,
        *,
        authenticator: Authenticator | None = None,
        authorizer: Authorizer | None = None,
        client_ca: bool = False,
        **options: Any,
    ) -> EmServer:
        context = server_ssl_context(
            cert_file=em_pki.serving_cert,
            key_file=em_pki.serving_key,
            client_ca_pem=em_pki.front_proxy_ca_pem if client_ca else None,
        )
        app = build_external_metrics_app(reader, authenticator=authenticator, authorizer=authorizer, **options)
        running = await start_https_server(app, host="127.0.0.1", port=0, ssl_context=context)
        started.append(running)
        return EmServer(running.port, em_pki.serving_ca_pem, running)

    yield serve
    for running in started:
        await running.close()


@pytest.fixture
async def em_server(em_serve: EmServe, em_decisions: DecisionStore) -> EmServer:
    """An unauthenticated server over `em_decisions` (authentication is tested separately)."""
    return await em_serve(em_decisions)
