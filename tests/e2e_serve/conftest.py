"""Fixtures for the serve end-to-end tests: a real etcd + kube-apiserver of the test's own (RealApiServer,
tests/e2e_k8s/realapi.py) holding the two-variant cluster, and serving TLS."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e_k8s.realapi import RealApiServer

from .support import Cluster, Tls, make_tls


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[RealApiServer]:
    """etcd + kube-apiserver (no controllers: these tests play the HPA, the Deployment controller and the kubelet
    themselves), the VA CRD installed; its logs and audit log stay under the test's tmp_path."""
    server = RealApiServer(tmp_path / "control-plane")
    try:
        await server.start()
        yield server
    finally:
        await server.stop()


@pytest.fixture
def cluster(api: RealApiServer) -> Cluster:
    installed = Cluster(api)
    installed.install()
    return installed


@pytest.fixture
def tls(tmp_path: Path) -> Tls:
    return make_tls(tmp_path / "tls")
