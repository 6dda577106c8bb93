"""Fixtures for the serve end-to-end tests: the fake API server with the two-variant cluster, serving TLS."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.k8s.builders import ALL_TYPES

from .support import Cluster, TaggedApiServer, Tls, make_tls


@pytest.fixture
async def api() -> AsyncIterator[TaggedApiServer]:
    server = TaggedApiServer()
    server.serve(*ALL_TYPES)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def cluster(api: TaggedApiServer) -> Cluster:
    installed = Cluster(api)
    installed.install()
    return installed


@pytest.fixture
def tls(tmp_path: Path) -> Tls:
    return make_tls(tmp_path / "tls")
