"""HA: two `run_serve` instances with `--leader-elect` against one real kube-apiserver (DESIGN §1).

Both replicas run in-process; each is a user of its own, so the apiserver's audit log attributes every request
(`RealApiServer.by`). The Lease is the real coordination.k8s.io/v1 Lease. Prometheus is the canned
`FakePrometheus` (its answers keyed by the exact PromQL the collector sends, built with the collector's own query
builder). Lease 2 s, renew deadline 1.5 s, retry 0.2 s.

What must hold: exactly one replica holds the Lease and only it PATCHes VA status; both serve the same values
(the follower from the VA status it watches); when the leader stops (graceful: it releases the Lease) the
follower leads within a bounded time, never serving anything but the last decision meanwhile; the next decision
is written by the new leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from adapter.domain.cluster import ModelQuery
from adapter.domain.ids import ModelKey
from adapter.k8s import resources as r
from adapter.k8s.leader import DEFAULT_LEASE_NAME
from adapter.metrics.queries import QueryName, build_queries
from tests.metrics import V1_QUERIES
from tests.metrics.emulators import FakePrometheus, vector

from .support import (
    CHEAP,
    CONTROLLER_NS,
    DEAR,
    MODEL,
    NS,
    VARIANTS,
    Cluster,
    RealApiServer,
    Serve,
    Tls,
    check_of,
    serve_settings,
    until,
)

pytestmark = pytest.mark.e2e_k8s  # a real kube-apiserver per test (tests/e2e_k8s/realapi.py)

LEASE_DURATION_S = 2.0
HA = {
    "leader_elect": True,
    "leader_election_lease_duration_s": LEASE_DURATION_S,
    "leader_election_renew_deadline_s": 1.5,
    "leader_election_retry_period_s": 0.2,
    "engine_interval_s": 0.5,
}
QUERIES = {
    q.name: q.promql for q in build_queries([ModelQuery(ModelKey(NS, MODEL), retention_s=600.0)], metrics=V1_QUERIES)
}


def answers(kv: Mapping[str, float], queue: float = 0.0) -> dict[str, list[dict[str, Any]] | int]:
    """Prometheus' answers for pods at `kv` KV-cache usage and `queue` waiting requests."""

    def per_pod(values: Mapping[str, float]) -> list[dict[str, Any]]:
        return vector(*(({"namespace": NS, "model_name": MODEL, "pod": pod}, v) for pod, v in values.items()))

    return {
        QUERIES[QueryName.KV_CACHE_USAGE]: per_pod(kv),
        QUERIES[QueryName.QUEUE_LENGTH]: per_pod(dict.fromkeys(kv, queue)),
    }


@pytest.fixture
async def prometheus() -> AsyncIterator[FakePrometheus]:
    prom = await FakePrometheus().start()
    try:
        yield prom
    finally:
        await prom.stop()


async def test_one_leader_writes_both_serve_the_same_and_failover_loses_no_decision(
    api: RealApiServer, cluster: Cluster, tls: Tls, prometheus: FakePrometheus, tmp_path: Path
) -> None:
    prometheus.answers = answers({"l4-0": 0.2, "a100-0": 0.2})
    serves: dict[str, Serve] = {}

    async def start(name: str) -> None:
        await api.add_client(name)
        kubeconfig = api.kubeconfig_for(name, tmp_path / f"kubeconfig-{name}")
        settings = serve_settings(kubeconfig=kubeconfig, prometheus_url=prometheus.url, tls=tls, **HA)
        serves[name] = await Serve.start(name, settings, tls.ca_pem)

    try:
        results = await asyncio.gather(start("a"), start("b"), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        await _scenario(api, cluster, prometheus, serves)
    finally:
        for serve in serves.values():
            if not serve.task.done():
                await serve.stop()


def _lease(api: RealApiServer) -> dict[str, Any]:
    try:
        return dict(api.get(r.LEASES, CONTROLLER_NS, DEFAULT_LEASE_NAME)["spec"])
    except KeyError:
        return {}


def _lease_writes(api: RealApiServer, client: str, *, since_s: float = 0.0) -> list[Any]:
    """Successful creates and updates of the Lease by `client`."""
    return [
        e
        for e in api.by(client, path_contains="/leases", since_s=since_s)
        if e.method in ("POST", "PUT") and e.status in (200, 201)
    ]


def _status_patches(api: RealApiServer, client: str, *, since_s: float = 0.0) -> list[Any]:
    return api.by(client, method="PATCH", path_contains="/variantautoscalings/", since_s=since_s)


def _patched_replicas(entry: Any) -> int | None:
    status = (entry.body or {}).get("status") or {}
    return (status.get("desiredOptimizedAlloc") or {}).get("numReplicas")


async def _serving(serves: Mapping[str, Serve], want: Mapping[str, int]) -> str | None:
    """None when every replica serves `want` (variant → desired) over HTTPS."""
    got = {(n, v): await s.external_metric(v) for n, s in serves.items() for v in want}
    wrong = {f"{n}/{v}": value for (n, v), value in got.items() if value != want[v]}
    return None if not wrong else f"want {dict(want)}, got {wrong}"


async def _scenario(api: RealApiServer, cluster: Cluster, prometheus: FakePrometheus, serves: dict[str, Serve]) -> None:
    # ---- exactly one leader, and only it writes VA status ------------------------------------------------------
    def decided() -> str | None:
        if QUERIES[QueryName.KV_CACHE_USAGE] not in prometheus.seen:
            return f"the collector never sent the expected KV query; it sent {sorted(set(prometheus.seen))[:2]}"
        problems = [
            cluster.status_line(v)
            for v in VARIANTS
            if cluster.alloc(v).get("numReplicas") != 1
            or cluster.condition(v, "MetricsAvailable").get("reason") != "MetricsFound"
        ]
        return "; ".join(problems) or (None if _lease(api).get("holderIdentity") else "no lease holder")

    took = await until("a Lease holder and both VA statuses decided from metrics", check_of(decided), timeout_s=15)
    leaders = [n for n in serves if _lease_writes(api, n)]
    assert len(leaders) == 1, f"lease written by {leaders}"
    [leader] = leaders
    [follower] = [n for n in serves if n != leader]
    holder = _lease(api)["holderIdentity"]
    assert _lease_writes(api, leader)[-1].body["spec"]["holderIdentity"] == holder
    print(f"\nleader {leader} ({holder}) decided in {took:.1f}s; follower {follower}")

    renewals = len(_lease_writes(api, leader))

    def renewed_five_times() -> str | None:
        n = len(_lease_writes(api, leader)) - renewals
        return None if n >= 5 else f"{n} renewals"

    await until("five lease renewals by the leader", check_of(renewed_five_times), timeout_s=5)
    lease = _lease(api)
    assert (lease["holderIdentity"], lease["leaseTransitions"]) == (holder, 0)
    assert _lease_writes(api, follower) == [], "the follower wrote the lease while the leader renewed it"
    assert _status_patches(api, follower) == [], "the follower PATCHed VA status"
    assert len(_status_patches(api, leader)) >= len(VARIANTS)

    await until("both replicas to serve 1 and 1", check_of(_serving, serves, {CHEAP: 1, DEAR: 1}), timeout_s=5)
    assert await serves[follower].keda_metric(CHEAP) == await serves[leader].keda_metric(CHEAP) == 1

    # ---- a decision change: both serve it, the leader wrote it --------------------------------------------------
    prometheus.answers = answers({"l4-0": 0.9, "a100-0": 0.9}, queue=2)
    took = await until("both replicas to serve l4=2", check_of(_serving, serves, {CHEAP: 2, DEAR: 1}), timeout_s=10)
    print(f"high load: both replicas serve l4=2 after {took:.1f}s")
    assert any(_patched_replicas(e) == 2 for e in _status_patches(api, leader)), "the leader never wrote l4=2"
    assert _status_patches(api, follower) == [], "the follower PATCHed VA status"
    assert await serves[follower].keda_metric(CHEAP) == 2

    # ---- fail-over: stop the leader (graceful release); the follower leads and keeps serving l4=2 ---------------
    sampled: list[float | None] = []
    sampling = True

    async def sample() -> None:
        while sampling:
            sampled.append(await serves[follower].external_metric(CHEAP))
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    try:
        stopping_s = time.monotonic()
        assert await serves[leader].stop() == 0, f"leader {leader} exited non-zero"
        stopped_s = time.monotonic()
        released = [
            e
            for e in _lease_writes(api, leader, since_s=stopping_s)
            if e.method == "PUT" and e.body["spec"]["holderIdentity"] == ""
        ]
        assert released, "the stopping leader did not release the lease"

        def took_over() -> str | None:
            lease = _lease(api)
            if lease.get("holderIdentity") in ("", holder) or not _lease_writes(api, follower, since_s=stopping_s):
                return f"lease {lease}"
            return None

        await until("the follower to take the lease", check_of(took_over), timeout_s=LEASE_DURATION_S + 3)
        took = time.monotonic() - stopping_s
        assert took < LEASE_DURATION_S, f"take-over after {took:.2f}s: the release did not hand the lease over at once"
        assert _lease(api)["leaseTransitions"] == 1

        def new_leader_writes() -> list[Any]:
            return _status_patches(api, follower, since_s=stopping_s)

        await until(
            "the new leader's first status writes",
            check_of(lambda: None if new_leader_writes() else "none yet"),
            timeout_s=5,
        )
        await asyncio.sleep(0.3)  # a few more samples while the new leader cycles
    finally:
        sampling = False
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
    print(f"fail-over: {follower} leads {took:.2f}s after {leader} was told to stop; served l4 {set(sampled)}")
    assert sampled, "no samples during the fail-over"
    assert set(sampled) == {2}, f"the follower served something else than l4=2 during the fail-over: {sampled}"

    # ---- the next decision is written by the new leader --------------------------------------------------------
    prometheus.answers = answers({"l4-0": 0.9, "l4-1": 0.9, "a100-0": 0.9}, queue=2)
    cluster.add_pod(CHEAP, 1)
    cluster.scale(CHEAP, 2)
    survivors = {follower: serves[follower]}

    def written_3() -> str | None:
        return None if cluster.alloc(CHEAP).get("numReplicas") == 3 else cluster.status_line(CHEAP)

    took = await until("the new leader to scale l4 to 3", check_of(written_3), timeout_s=10)
    await until("l4=3 served", check_of(_serving, survivors, {CHEAP: 3, DEAR: 1}), timeout_s=5)
    assert any(_patched_replicas(e) == 3 for e in new_leader_writes()), "l4=3 was not written by the new leader"
    assert api.by(leader, since_s=stopped_s) == [], "the stopped replica still talked to the API"
    print(f"after fail-over: {follower} scaled l4 to 3 in {took:.1f}s ({cluster.status_line(CHEAP)})")
    assert await serves[follower].stop() == 0
