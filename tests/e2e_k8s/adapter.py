"""`wva-adapter serve` as a subprocess against the real control plane, with its own ServiceAccount's token.

Every port is a free 127.0.0.1 port chosen here (the APIService, the KEDA harness and the tests need to know
them before the process starts). The serving certificate is the session's adapter certificate (SAN
`wva-adapter.workload-variant-autoscaler-system.svc`, the name the aggregator verifies against `caBundle`).
Front-proxy authentication is ON (no `--authentication-skip-lookup`): the adapter reads
`kube-system/extension-apiserver-authentication` and authorizes callers with SubjectAccessReviews, as in a
cluster. The log is kept next to the control plane's (`adapter-<name>.log`).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.ports import free_port

from .controlplane import CONTROLLER_NS, Pair, _die_with_parent

WVA_ADAPTER = Path(sys.executable).with_name("wva-adapter")
LEADER_LINE = re.compile(r"became leader \(lease \S+, identity (\S+)\)")


@dataclass
class AdapterProcess:
    name: str
    log: Path
    kubeconfig: Path
    prometheus_url: str
    serving: Pair
    watch_namespace: str
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    """More environment (what the downward API gives a pod, e.g. POD_NAMESPACE)."""
    without: tuple[str, ...] = ()
    """Default flags to leave out (e.g. `--prometheus-url`, so the main ConfigMap can set it)."""
    https_port: int = field(default_factory=free_port)
    grpc_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        defaults = [arg for arg in self._argv() if arg.split("=", 1)[0] not in self.without]
        return [*defaults, *self.extra_args]

    def _argv(self) -> list[str]:
        return [
            str(WVA_ADAPTER),
            "serve",
            f"--kubeconfig={self.kubeconfig}",
            f"--prometheus-url={self.prometheus_url}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.https_port}",
            f"--keda-grpc-address=127.0.0.1:{self.grpc_port}",
            f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
            f"--tls-cert-file={self.serving.cert}",
            f"--tls-private-key-file={self.serving.key}",
            f"--controller-namespace={CONTROLLER_NS}",
            f"--watch-namespace={self.watch_namespace}",
            "--engine-interval=1s",
            "--prometheus-timeout=2s",
            "--saturation-window=2s",
            "--rest-client-timeout=10s",
        ]

    def start(self, *, timeout_s: float = 60) -> float:
        """Start and wait for /healthz; returns the seconds it took."""
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "PROMETHEUS_BASE_URL")}
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.env)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=_die_with_parent,  # noqa: PLW1509
            )
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self.proc.poll() is not None:
                pytest.fail(f"adapter {self.name} exited {self.proc.returncode}:\n{self.tail()}", pytrace=False)
            if self.probe("/healthz") == 200:
                return time.monotonic() - started
            time.sleep(0.2)
        pytest.fail(f"adapter {self.name}: /healthz not 200 within {timeout_s:g} s:\n{self.tail()}", pytrace=False)

    def probe(self, path: str) -> int | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}", timeout=2) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (OSError, urllib.error.URLError):
            return None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def assert_running(self) -> None:
        if not self.running():
            pytest.fail(f"adapter {self.name} died:\n{self.tail()}", pytrace=False)

    def identity(self) -> str | None:
        """The Lease identity it logged when it became leader (None if it never led)."""
        found = LEADER_LINE.findall(self.log.read_text(errors="replace")) if self.log.exists() else []
        return found[-1] if found else None

    def metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
            text = response.read().decode()
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
        return out

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL: no shutdown, no Lease release (a crashed pod or a lost node)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout_s: float = 15) -> int | None:
        """SIGTERM (graceful: servers drain, the Lease is released) then SIGKILL after `timeout_s`."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=10)
        return self.proc.returncode
