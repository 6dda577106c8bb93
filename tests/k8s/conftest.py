"""Fixtures for tests/k8s: a fake API server and a real `kubernetes` client configured for it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from adapter.k8s.client import KubeClient
from adapter.k8s.reflector import ReflectorOptions
from tests.k8s.builders import ALL_TYPES
from tests.k8s.fake_apiserver import FakeApiServer

FAST = ReflectorOptions(
    backoff_initial_s=0.02,
    backoff_max_s=0.2,
    backoff_jitter=0.0,
    watch_timeout_s=30.0,
    min_watch_s=0.2,
    absent_recheck_s=0.2,
    page_size=2,
)
"""Reflector timing for tests: fast retries, small pages (so pagination is exercised)."""


@pytest.fixture
async def fake_api() -> AsyncIterator[FakeApiServer]:
    """A running fake API server serving every type the adapter uses (tests `unserve` optional ones)."""
    server = FakeApiServer()
    server.serve(*ALL_TYPES)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def kubeconfig(fake_api: FakeApiServer, tmp_path: Path) -> Path:
    return fake_api.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
async def kube(kubeconfig: Path) -> AsyncIterator[KubeClient]:
    """The real client (kubernetes.aio) loaded from the generated kubeconfig."""
    client = await KubeClient.connect(kubeconfig=str(kubeconfig), request_timeout_s=5.0)
    yield client
    await client.close()


async def eventually(condition: Callable[[], object], *, timeout_s: float = 5.0, what: str = "condition") -> None:
    """Poll `condition` every 10 ms; fail the test after `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.01)
