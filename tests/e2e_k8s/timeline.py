"""Watching a variant from the outside while the control loop runs: the value served through the aggregator (what
the HPA reads) and the Deployment's `spec.replicas` (what the HPA writes), polled together every 0.1 s."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from .cluster import VA_GROUP, VA_PLURAL, VA_VERSION, Kube, served_value


@dataclass
class Timeline:
    kube: Kube
    namespace: str
    variant: str
    metric: str = "wva_desired_replicas"
    started_s: float = field(default_factory=time.monotonic)
    started_wall_s: float = field(default_factory=time.time)
    served: list[tuple[float, float | None]] = field(default_factory=list)
    spec: list[tuple[float, int]] = field(default_factory=list)
    last_answer: str = ""
    others: list[tuple[float, str]] = field(default_factory=list)
    """Changes of every VA's decision and every Deployment's status in the namespace, for the record."""
    _last: dict[str, str] = field(default_factory=dict)

    def now(self) -> float:
        return time.monotonic() - self.started_s

    def sample(self) -> tuple[float | None, int]:
        now = time.monotonic() - self.started_s
        code, body = self.kube.external_metric(self.namespace, self.metric, f"variant_name={self.variant}")
        value = served_value(body) if code == 200 else None
        self.last_answer = f"HTTP {code}: {body}"
        if not self.served or self.served[-1][1] != value:
            self.served.append((now, value))
        replicas = 0
        for deployment in self.kube.apps.list_namespaced_deployment(self.namespace).items:
            name, status = deployment.metadata.name, deployment.status
            if name == self.variant:
                replicas = int(deployment.spec.replicas)
            self._note(now, f"Deployment {name}", f"status.replicas={status.replicas} ready={status.ready_replicas}")
        if not self.spec or self.spec[-1][1] != replicas:
            self.spec.append((now, replicas))
        for va in self.kube.custom.list_namespaced_custom_object(VA_GROUP, VA_VERSION, self.namespace, VA_PLURAL)[
            "items"
        ]:
            alloc = (va.get("status") or {}).get("desiredOptimizedAlloc") or {}
            self._note(
                now, f"VA {va['metadata']['name']}", f"numReplicas={alloc.get('numReplicas')} ({alloc.get('reason')})"
            )
        return value, replicas

    def _note(self, now: float, what: str, state: str) -> None:
        if self._last.get(what) != state:
            self._last[what] = state
            self.others.append((now, f"{what}: {state}"))

    def watch_until(
        self,
        served: float,
        replicas: int,
        *,
        timeout_s: float,
        hold_s: float = 0.0,
        describe: Callable[[], str] = lambda: "",
    ) -> float:
        """Sample until the served value is `served` and spec.replicas is `replicas` (for `hold_s` in a row);
        returns the seconds it took. Fails with the timeline on timeout."""
        started = time.monotonic()
        since: float | None = None
        while time.monotonic() - started <= timeout_s:
            value, count = self.sample()
            if value == served and count == replicas:
                since = since if since is not None else time.monotonic()
                if time.monotonic() - since >= hold_s:
                    return time.monotonic() - started
            else:
                since = None
            time.sleep(0.1)
        raise pytest.fail.Exception(
            f"{self.variant}: served {served:g} and spec.replicas {replicas} not reached within {timeout_s:g} s\n"
            f"{self.render(everything=True)}\nlast answer: {self.last_answer}\n{describe()}",
            pytrace=False,
        )

    def first_served(self, value: float, after_s: float = 0.0) -> float | None:
        return next((t for t, v in self.served if v == value and t >= after_s), None)

    def first_spec(self, replicas: int, after_s: float = 0.0) -> float | None:
        return next((t for t, r in self.spec if r == replicas and t >= after_s), None)

    def render(self, *, everything: bool = False) -> str:
        events = sorted(
            [(t, f"{self.variant}: served {self.metric}={'-' if v is None else f'{v:g}'}") for t, v in self.served]
            + [(t, f"{self.variant}: Deployment spec.replicas={r}") for t, r in self.spec]
            + (self.others if everything else [])
        )
        return "\n".join(f"  [{t:6.2f}s] {what}" for t, what in events)
