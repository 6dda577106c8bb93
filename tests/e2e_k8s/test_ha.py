"""HA on a real Lease: two `wva-adapter serve --leader-elect` processes behind the APIService's Service. SIGKILL the
leader (no graceful release: a crashed pod or a lost node) and the follower takes the Lease once it expires;
SIGTERM it (a rollout) and the leader releases the Lease on its way out, so the follower takes it at its next try.

Lease 4 s, renew deadline 3 s, retry 0.5 s. Both replicas sit behind the loopback Service (round robin per
connection, like kube-proxy); the follower serves what it reads from the VA status it watches, so the value
served through the aggregator must never disappear: a poller reads it every 0.1 s through kube-apiserver the
whole time and the test prints the longest gap between two successful reads. After the take-over the load
rises and the new leader's decision is served, proving it leads (the old one is dead).
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field

import pytest
import requests

from adapter.k8s.leader import DEFAULT_LEASE_NAME

from .cluster import CHEAP, DEAR, EM_GROUP, EM_VERSION, served_value, until
from .conftest import Env
from .controlplane import CONTROLLER_NS

pytestmark = pytest.mark.e2e_k8s

LEASE_S, RENEW_S, RETRY_S = 4.0, 3.0, 0.5
HA_ARGS = (
    "--leader-elect",
    f"--leader-election-lease-duration={LEASE_S:g}s",
    f"--leader-election-renew-deadline={RENEW_S:g}s",
    f"--leader-election-retry-period={RETRY_S * 1000:g}ms",
)


@dataclass
class Poller:
    """Reads `wva_desired_replicas` of one variant through the aggregator every `every_s` on its own thread."""

    env: Env
    variant: str
    every_s: float = 0.1
    reads: list[tuple[float, int, float | None, str]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ha-poller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        plane = self.env.plane
        url = f"{plane.url}/apis/{EM_GROUP}/{EM_VERSION}/namespaces/{self.env.namespace}/wva_desired_replicas"
        with requests.Session() as http:
            http.trust_env = False
            http.verify = str(plane.pki.ca)
            http.cert = (str(plane.pki.admin.cert), str(plane.pki.admin.key))
            while not self._stop.is_set():
                at = time.monotonic()
                try:
                    response = http.get(url, params={"labelSelector": f"variant_name={self.variant}"}, timeout=5)
                    value = served_value(response.json()) if response.status_code == 200 else None
                    self.reads.append(
                        (at, response.status_code, value, "" if value is not None else response.text[:200])
                    )
                except (requests.RequestException, ValueError) as exc:
                    self.reads.append((at, 0, None, repr(exc)[:200]))
                self._stop.wait(self.every_s)

    def longest_gap_s(self) -> tuple[float, float]:
        """(longest time between two successive reads that returned the value, when that gap started)."""
        good = [at for at, code, value, _ in self.reads if code == 200 and value is not None]
        gaps = [(b - a, a) for a, b in itertools.pairwise(good)]
        return max(gaps) if gaps else (float("inf"), 0.0)

    def failures(self) -> list[tuple[float, int, str]]:
        return [(at, code, why) for at, code, value, why in self.reads if code != 200 or value is None]


def _holder(env: Env) -> str:
    lease = env.kube.coordination.read_namespaced_lease(DEFAULT_LEASE_NAME, CONTROLLER_NS)
    return str(lease.spec.holder_identity or "")


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "how",
    [
        pytest.param("SIGKILL", id="sigkill"),  # a crash: the Lease is left to expire
        pytest.param("SIGTERM", id="sigterm"),  # a rollout: serve releases the Lease on the way out
    ],
)
def test_the_leader_goes_and_the_follower_takes_over_while_the_value_stays_served(env: Env, how: str) -> None:
    env.create_namespace(hpa=False)
    env.set_demand(0.4)
    env.wait_scraped(2)
    a = env.start_adapter("a", *HA_ARGS)
    b = env.start_adapter("b", *HA_ARGS)
    env.route_to(a, b)
    replicas = {a.name: a, b.name: b}

    def one_leader() -> str | None:
        leaders = [r for r in replicas.values() if r.identity() is not None]
        if len(leaders) == 1 and _holder(env) == leaders[0].identity():
            return None
        return f"leaders by log {[r.name for r in leaders]}, Lease holder {_holder(env)!r}"

    until("one leader holding the Lease", one_leader, timeout_s=30)
    leader = next(r for r in replicas.values() if r.identity() is not None)
    follower = next(r for r in replicas.values() if r is not leader)
    env.wait_decided({CHEAP: 1, DEAR: 1})
    print(f"[ha] leader {leader.name} ({leader.identity()}), follower {follower.name}")

    poller = Poller(env, CHEAP)
    poller.start()
    try:
        time.sleep(2.0)  # steady state on record: both replicas answer through the Service
        killed_at = time.monotonic()
        if how == "SIGKILL":
            leader.kill()
        else:
            assert leader.stop() == 0, leader.tail()
        print(f"[ha] {how} {leader.name}: exited after {time.monotonic() - killed_at:.2f}s")

        def took_over() -> str | None:
            mine = follower.identity()
            holder = _holder(env)
            return None if mine is not None and holder == mine else f"holder {holder!r}, follower logged {mine!r}"

        until("the follower to hold the Lease", took_over, timeout_s=LEASE_S + 4 * RETRY_S + 5, every_s=0.05)
        takeover_s = time.monotonic() - killed_at
        print(f"[ha] {follower.name} holds the Lease {takeover_s:.2f}s after the {how} (lease duration {LEASE_S:g}s)")

        env.set_demand(2.7)

        def new_decision() -> str | None:
            recent = [v for at, code, v, _ in poller.reads if at > killed_at + takeover_s]
            return None if recent and recent[-1] == 2 else f"served {recent[-1:] or '-'}"

        took = until("the new leader's scale-up to be served", new_decision, timeout_s=45)
        print(f"[ha] load up: the new leader's decision (L4 2) served {took:.1f}s after the take-over")
        time.sleep(1.0)
    finally:
        poller.stop()
    gap_s, gap_at = poller.longest_gap_s()
    failures = poller.failures()
    values = sorted({v for _, code, v, _ in poller.reads if code == 200})
    print(
        f"[ha] FIGURES ({how}) {len(poller.reads)} reads through the aggregator over "
        f"{poller.reads[-1][0] - poller.reads[0][0]:.1f}s: values {values}, {len(failures)} without the value; "
        f"longest gap between reads with the value {gap_s:.2f}s (starting {gap_at - killed_at:+.2f}s from the kill); "
        f"take-over {takeover_s:.2f}s; Service connections per replica {env.service.connections}"
    )
    for at, code, why in failures[:10]:
        print(f"  failed read at {at - killed_at:+.2f}s: HTTP {code} {why}")
    assert not failures, f"the served value disappeared {len(failures)} times: {failures[:5]}"
    assert values == [1, 2], values
    assert takeover_s <= LEASE_S + 4 * RETRY_S + 1, f"take-over took {takeover_s:.2f}s"
    follower.assert_running()
