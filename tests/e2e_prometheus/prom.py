"""A real Prometheus (Debian's `prometheus` package) on 127.0.0.1, for end-to-end tests of the collector.

It listens on a free port (never the default :9090 a system instance may hold), keeps its TSDB in a temp
directory, scrapes every second, and can be killed (SIGKILL), frozen (SIGSTOP) and restarted on the same
port with the same data. When the binary is missing the test fails with instructions; it never skips,
because CI installs it (`make prometheus`).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest

from tests.ports import free_port

INSTALL_HINT = (
    "the Prometheus binary is required by the end-to-end metrics tests and was not found on PATH or at "
    "/usr/bin/prometheus. Install it with `make prometheus` (Debian/Ubuntu: "
    "`apt-get update && apt-get install -y --no-install-recommends prometheus`)."
)


def prometheus_binary() -> str:
    found = shutil.which("prometheus") or ("/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK) else None)
    if found is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    return found


@dataclass(frozen=True)
class Target:
    """One scrape target and the labels service discovery would have attached (namespace, pod)."""

    address: str
    namespace: str
    pod: str


@dataclass
class PrometheusProcess:
    workdir: Path
    jobs: dict[str, list[Target]]
    scrape_interval_s: float = 1.0
    port: int = field(default_factory=free_port)
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "prometheus.log"

    def config(self) -> dict[str, object]:
        interval = f"{int(self.scrape_interval_s * 1000)}ms"
        return {
            "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
            "scrape_configs": [
                {
                    "job_name": job,
                    "static_configs": [
                        {"targets": [t.address], "labels": {"namespace": t.namespace, "pod": t.pod}} for t in targets
                    ],
                }
                for job, targets in self.jobs.items()
            ],
        }

    def start(self) -> None:
        assert self._proc is None or self._proc.poll() is not None, "already running"
        binary = prometheus_binary()
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text(json.dumps(self.config(), indent=1))  # JSON is YAML
        log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()

    async def wait_ready(self, timeout_s: float = 20.0) -> float:
        """Poll `/-/ready` until 200; returns the seconds it took. Fails with the log tail on timeout/exit."""
        started = time.monotonic()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1.0)) as session:
            while time.monotonic() - started < timeout_s:
                if self._proc is not None and self._proc.poll() is not None:
                    pytest.fail(f"prometheus exited with {self._proc.returncode}:\n{self.log_tail()}")
                try:
                    async with session.get(f"{self.url}/-/ready") as resp:
                        if resp.status == 200:
                            return time.monotonic() - started
                except (aiohttp.ClientError, TimeoutError):
                    pass
                await asyncio.sleep(0.1)
        pytest.fail(f"prometheus not ready after {timeout_s} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _signal(self, sig: signal.Signals) -> None:
        if self._proc is None or self._proc.poll() is not None:
            raise RuntimeError("prometheus is not running")
        self._proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL: no shutdown, the port closes at once (a crash)."""
        self._signal(signal.SIGKILL)
        assert self._proc is not None
        self._proc.wait(timeout=10)

    def freeze(self) -> None:
        """SIGSTOP: the socket still accepts connections but nothing answers (a hung server).

        Returns once every thread is stopped: the signal is delivered asynchronously, and a query sent at once
        could otherwise still be answered by a thread that had not stopped yet (seen on a loaded machine).
        """
        self._signal(signal.SIGSTOP)
        assert self._proc is not None
        tasks = Path(f"/proc/{self._proc.pid}/task")
        deadline = time.monotonic() + 5.0
        states: list[str] = []
        while time.monotonic() < deadline:
            try:
                states = [(t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in tasks.iterdir()]
            except OSError:  # a thread ended while listing: look again
                continue
            if all(state in ("T", "t") for state in states):
                return
            time.sleep(0.01)
        pytest.fail(f"prometheus did not stop within 5 s of SIGSTOP (thread states {states})")

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)

    def stop(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.send_signal(signal.SIGCONT)
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=10)
