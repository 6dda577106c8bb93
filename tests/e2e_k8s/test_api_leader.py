"""Lease-based leader election against the real kube-apiserver, on an injected clock.

The real server stores a Lease exactly as written (it never interprets `renewTime`), so the elector's injected
clocks decide expiry as they do in production. Real here: the Lease objects and their resourceVersions, a real
409 from a real concurrent writer between our read and our write (and a real AlreadyExists), the race of four
candidates that the server's optimistic concurrency decides, renewals that fail because RBAC takes the
elector's permission away (real 403s) until it is given back, and the `run()` loop with its requests counted
in the audit log (apiworld.py).

Nothing of the election stays on the fake server: tests/k8s/test_leader.py keeps only the option checks, the
identity and the callback containment, which need no server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from adapter.domain.errors import KubeNotFound
from adapter.k8s import resources as r
from adapter.k8s.client import KubeAuthError, KubeClient
from adapter.k8s.leader import DEFAULT_LEASE_NAME, LeaderElectionOptions, LeaderElector, micro_time
from tests.k8s import builders as b
from tests.k8s.conftest import eventually
from tests.k8s.test_leader import Clock

from .apiworld import ApiWorld, read_audit
from .cluster import Kube
from .controlplane import AUDITED_GROUP

pytestmark = pytest.mark.e2e_k8s


class InterleavedClient(KubeClient):
    """Our client; `before_write`, when set, runs once just before the next create or replace: another writer's
    request between our read and our write, as in a real race, without a fake server."""

    before_write: Callable[[], object] | None = None

    def _interleave(self) -> None:
        hook, self.before_write = self.before_write, None
        if hook is not None:
            hook()

    async def create(self, resource: Any, body: Any, *, namespace: str | None = None) -> dict[str, Any]:
        self._interleave()
        return await super().create(resource, body, namespace=namespace)

    async def replace(self, resource: Any, name: str, body: Any, *, namespace: str | None = None) -> dict[str, Any]:
        self._interleave()
        return await super().replace(resource, name, body, namespace=namespace)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def opts(api_world: ApiWorld) -> LeaderElectionOptions:
    return LeaderElectionOptions(namespace=api_world.namespace)


@pytest.fixture
async def racing(api_world: ApiWorld) -> AsyncIterator[InterleavedClient]:
    client = await InterleavedClient.connect(kubeconfig=str(api_world.kubeconfig), request_timeout_s=10.0)
    assert isinstance(client, InterleavedClient)  # `connect` builds the class it is called on
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def elector(client: KubeClient, clock: Clock, opts: LeaderElectionOptions) -> Callable[..., LeaderElector]:
    def make(
        identity: str,
        *,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        via: KubeClient | None = None,
    ) -> LeaderElector:
        return LeaderElector(
            via or client,
            opts,
            identity=identity,
            clock=clock.monotonic,
            wall_clock=clock.wall,
            on_started_leading=on_started_leading,
            on_stopped_leading=on_stopped_leading,
        )

    return make


def _lease(world: ApiWorld) -> dict[str, Any]:
    return world.get(r.LEASES, DEFAULT_LEASE_NAME)["spec"]  # type: ignore[no-any-return]


async def test_acquires_a_missing_lease_by_creating_it(
    api_world: ApiWorld, elector: Callable[..., LeaderElector], clock: Clock
) -> None:
    events: list[str] = []
    a = elector(
        "a", on_started_leading=lambda: events.append("start"), on_stopped_leading=lambda: events.append("stop")
    )
    api_world.mark()
    assert await a.try_acquire_or_renew()
    assert a.is_leader
    assert events == ["start"]
    assert [(e.verb, e.code) for e in api_world.requests()] == [("get", 404), ("create", 201)]
    spec = _lease(api_world)
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 60
    assert spec["renewTime"] == micro_time(clock.wall())
    assert spec["leaseTransitions"] == 0
    clock.t += 10
    assert await a.try_acquire_or_renew()  # a renewal: no new start event
    assert events == ["start"]
    assert _lease(api_world)["renewTime"] == micro_time(clock.wall())
    assert _lease(api_world)["acquireTime"] == spec["acquireTime"]


async def test_a_held_lease_is_taken_only_after_it_expired_on_our_clock(
    api_world: ApiWorld, elector: Callable[..., LeaderElector], clock: Clock
) -> None:
    api_world.put(r.LEASES, b.lease(DEFAULT_LEASE_NAME, namespace=api_world.namespace, holder="other", transitions=3))
    b_ = elector("b")
    assert not await b_.try_acquire_or_renew()  # first sight: valid for a lease duration from now
    clock.t += 59
    assert not await b_.try_acquire_or_renew()
    assert b_.observed_holder == "other"
    clock.t += 2
    assert await b_.try_acquire_or_renew()
    spec = _lease(api_world)
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 4)


async def test_a_renewing_holder_keeps_the_lease(
    api_world: ApiWorld, elector: Callable[..., LeaderElector], clock: Clock
) -> None:
    a, b_ = elector("a"), elector("b")
    assert await a.try_acquire_or_renew()
    for _ in range(20):  # 200 s of a renewing every 10 s: b never gets it
        clock.t += 10
        assert await a.try_acquire_or_renew()
        assert not await b_.try_acquire_or_renew()
    assert _lease(api_world)["holderIdentity"] == "a"


async def test_we_stop_renewing_and_another_acquires_after_expiry(
    api_world: ApiWorld, elector: Callable[..., LeaderElector], clock: Clock
) -> None:
    a, b_ = elector("a"), elector("b")
    assert await a.try_acquire_or_renew()
    assert not await b_.try_acquire_or_renew()
    clock.t += 60.5  # a fell silent (no renewals) for more than the lease duration
    assert await b_.try_acquire_or_renew()
    assert not await a.try_acquire_or_renew()  # a comes back and sees b holding the lease
    assert not a.is_leader
    assert b_.is_leader
    assert _lease(api_world)["holderIdentity"] == "b"


async def test_another_holder_takes_over_and_we_stop_leading(
    api_world: ApiWorld, elector: Callable[..., LeaderElector], clock: Clock
) -> None:
    stopped: list[str] = []
    a = elector("a", on_stopped_leading=lambda: stopped.append("a"))
    assert await a.try_acquire_or_renew()
    spec = {"holderIdentity": "intruder", "renewTime": micro_time(clock.wall() + 1)}
    api_world.patch(r.LEASES, DEFAULT_LEASE_NAME, {"spec": spec})  # the admin, a real second writer
    clock.t += 10
    assert not await a.try_acquire_or_renew()
    assert stopped == ["a"]
    assert not a.is_leader
    assert _lease(api_world)["holderIdentity"] == "intruder"


# ---- renewals refused by RBAC -----------------------------------------------------------------------------


RBAC = "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/{plural}"


def _rbac(kube: Kube, method: str, namespace: str, plural: str, *, name: str = "", body: Any = None) -> None:
    url = kube.plane.url + RBAC.format(namespace=namespace, plural=plural) + (f"/{name}" if name else "")
    answer = kube.http.request(method, url, json=body, timeout=10)
    assert answer.status_code < 300, f"{method} {url} -> {answer.status_code}: {answer.text[:300]}"


def _grant_leases(kube: Kube, namespace: str, user: str) -> Callable[[], None]:
    """A Role on Leases in `namespace` bound to `user`; returns how to bind it again after a revocation."""
    rules = [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]}]
    _rbac(kube, "POST", namespace, "roles", body={"metadata": {"name": "elector"}, "rules": rules})
    binding = {
        "metadata": {"name": "elector"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "elector"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }

    def bind() -> None:
        _rbac(kube, "POST", namespace, "rolebindings", body=binding)

    bind()
    return bind


async def _until_answer(client: KubeClient, namespace: str, *, forbidden: bool) -> None:
    """RBAC changes reach the authorizer through its informers: wait until the server answers accordingly."""

    async def probe() -> bool:
        try:
            await client.get(r.LEASES, DEFAULT_LEASE_NAME, namespace=namespace)
        except KubeAuthError:
            return forbidden
        except KubeNotFound:
            pass  # allowed to look, and not there yet
        return not forbidden

    deadline = asyncio.get_running_loop().time() + 10
    while not await probe():
        assert asyncio.get_running_loop().time() < deadline, f"RBAC never became forbidden={forbidden}"
        await asyncio.sleep(0.05)


@pytest.fixture
async def restricted(api_world: ApiWorld, kube: Kube) -> AsyncIterator[tuple[str, KubeClient]]:
    """A user of its own (audited, no system:masters) whose only permission is the Role on Leases."""
    user = f"{api_world.user}-elector"
    path: Path = kube.plane.kubeconfig_for(user, AUDITED_GROUP)
    client = await KubeClient.connect(kubeconfig=str(path), request_timeout_s=10.0)
    try:
        yield user, client
    finally:
        await client.close()


async def test_failed_renewals_keep_leadership_until_the_renew_deadline(
    api_world: ApiWorld,
    kube: Kube,
    restricted: tuple[str, KubeClient],
    elector: Callable[..., LeaderElector],
    clock: Clock,
) -> None:
    """Every renewal fails for 51 s: RBAC takes the permission away (real 403s), then gives it back."""
    user, client = restricted
    ns = api_world.namespace
    bind_again = _grant_leases(kube, ns, user)
    await _until_answer(client, ns, forbidden=False)
    a = elector("a", via=client)
    assert await a.try_acquire_or_renew()
    _rbac(kube, "DELETE", ns, "rolebindings", name="elector")
    await _until_answer(client, ns, forbidden=True)
    assert api_world.audit_log is not None
    since = api_world.audit_log.stat().st_size
    for _ in range(5):  # 50 s of failures: still within the deadline
        clock.t += 10
        assert await a.try_acquire_or_renew()
    clock.t += 1  # 51 s since the last renewal
    assert not await a.try_acquire_or_renew()
    assert not a.is_leader
    api_world.requests()  # returns once the audit log stopped growing
    refused = read_audit(api_world.audit_log, user=user, since_bytes=since)
    assert [(e.verb, e.code) for e in refused] == [("get", 403)] * 6
    bind_again()
    await _until_answer(client, ns, forbidden=False)
    assert await a.try_acquire_or_renew()  # nobody else took it: we may lead again
    assert a.transitions == 2
    assert _lease(api_world)["holderIdentity"] == "a"


# ---- conflicts --------------------------------------------------------------------------------------------


async def test_conflict_on_update_means_we_lost_the_race(
    api_world: ApiWorld, racing: InterleavedClient, elector: Callable[..., LeaderElector], clock: Clock
) -> None:
    """Between our GET and our PUT another writer (the admin) renews the empty lease: the real server refuses our
    stale resourceVersion with 409. The next attempt reads the new record and, it being unheld, takes it."""
    api_world.put(r.LEASES, b.lease(DEFAULT_LEASE_NAME, namespace=api_world.namespace, holder=""))
    racing.before_write = lambda: api_world.patch(r.LEASES, DEFAULT_LEASE_NAME, {"spec": {"leaseTransitions": 7}})
    a = elector("a", via=racing)
    api_world.mark()
    assert not await a.try_acquire_or_renew()
    assert not a.is_leader
    assert [(e.verb, e.code) for e in api_world.requests()] == [("get", 200), ("update", 409)]
    assert await a.try_acquire_or_renew()  # the next attempt (the race over) succeeds
    spec = _lease(api_world)
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("a", 8)


async def test_conflict_on_create_means_we_lost_the_race(
    api_world: ApiWorld, racing: InterleavedClient, elector: Callable[..., LeaderElector], clock: Clock
) -> None:
    """Between our GET (404) and our POST another writer creates the lease: a real 409 AlreadyExists."""
    lease = b.lease(DEFAULT_LEASE_NAME, namespace=api_world.namespace, holder="")
    racing.before_write = lambda: api_world.put(r.LEASES, lease)
    a = elector("a", via=racing)
    api_world.mark()
    assert not await a.try_acquire_or_renew()
    assert not a.is_leader
    assert [(e.verb, e.code) for e in api_world.requests()] == [("get", 404), ("create", 409)]
    assert await a.try_acquire_or_renew()
    assert _lease(api_world)["holderIdentity"] == "a"


async def test_real_race_between_two_candidates(
    api_world: ApiWorld, client: KubeClient, clock: Clock, opts: LeaderElectionOptions
) -> None:
    api_world.put(r.LEASES, b.lease(DEFAULT_LEASE_NAME, namespace=api_world.namespace, holder=""))
    candidates = [
        LeaderElector(client, opts, identity=name, clock=clock.monotonic, wall_clock=clock.wall) for name in "abcd"
    ]
    api_world.mark()
    results = await asyncio.gather(*(c.try_acquire_or_renew() for c in candidates))
    assert sum(results) == 1  # resourceVersion guards the update: exactly one wins
    assert _lease(api_world)["holderIdentity"] == "abcd"[results.index(True)]
    updates = sorted(e.code for e in api_world.requests() if e.verb == "update")
    assert updates[0] == 200
    assert updates[1:] == [409] * (len(updates) - 1)  # every other write the server refused


async def test_release_lets_another_replica_take_over_at_once(
    api_world: ApiWorld, elector: Callable[..., LeaderElector], clock: Clock
) -> None:
    a, b_ = elector("a"), elector("b")
    assert await a.try_acquire_or_renew()
    assert not await b_.try_acquire_or_renew()
    assert await a.release()
    assert not a.is_leader
    spec = _lease(api_world)
    assert spec["holderIdentity"] == ""
    assert spec["leaseDurationSeconds"] == 1
    assert await b_.try_acquire_or_renew()  # no need to wait out the lease duration
    assert not await a.release()  # not leader: nothing to release


async def test_release_retries_when_our_own_interrupted_renewal_lands_first(
    api_world: ApiWorld, racing: InterleavedClient, elector: Callable[..., LeaderElector], clock: Clock
) -> None:
    """Between the release's GET and PUT, a renewal of ours that the cancellation interrupted still commits (the
    admin renews the lease in our name): a real 409. The release reads again and hands the lease back, instead
    of leaving it held for a whole lease duration."""
    a = elector("a", via=racing)
    assert await a.try_acquire_or_renew()
    renewal = {"spec": {"holderIdentity": "a", "renewTime": micro_time(clock.wall() + 1)}}
    racing.before_write = lambda: api_world.patch(r.LEASES, DEFAULT_LEASE_NAME, renewal)
    api_world.mark()
    assert await a.release()
    assert [(e.verb, e.code) for e in api_world.requests()] == [
        ("get", 200),
        ("update", 409),
        ("get", 200),
        ("update", 200),
    ]
    spec = _lease(api_world)
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("", 1)


async def test_release_gives_up_when_another_holder_took_the_lease_meanwhile(
    api_world: ApiWorld, racing: InterleavedClient, elector: Callable[..., LeaderElector]
) -> None:
    """The conflicting write was another replica taking over: the re-read shows it holds the lease; ours is not
    released over its head."""
    a = elector("a", via=racing)
    assert await a.try_acquire_or_renew()
    racing.before_write = lambda: api_world.patch(r.LEASES, DEFAULT_LEASE_NAME, {"spec": {"holderIdentity": "b"}})
    assert not await a.release()
    assert _lease(api_world)["holderIdentity"] == "b"


async def test_run_loops_and_releases_on_cancel(api_world: ApiWorld, client: KubeClient) -> None:
    """Real time: a 3 s lease renewed every 50 ms; the renewals counted in the audit log."""
    fast = LeaderElectionOptions(
        namespace=api_world.namespace, lease_duration_s=3, renew_deadline_s=2, retry_period_s=0.05, jitter=0
    )
    a = LeaderElector(client, fast, identity="a")
    b_ = LeaderElector(client, fast, identity="b")
    api_world.mark()
    task_a = asyncio.create_task(a.run())
    tasks: list[asyncio.Task[None]] = [task_a]
    try:
        await eventually(lambda: a.is_leader, what="a to lead")
        tasks.append(asyncio.create_task(b_.run()))
        await asyncio.sleep(0.3)
        assert not b_.is_leader
        task_a.cancel()
        await asyncio.gather(task_a, return_exceptions=True)
        updates = [e for e in api_world.requests() if e.verb == "update"]
        renewals = [e.code for e in updates if e.body["spec"]["holderIdentity"] == "a"]
        assert 3 <= len(renewals) <= 12  # about one renewal per retry period, not a busy loop
        # the renewal our cancellation interrupted, if any, the server records as 504 (its client went away)
        assert set(renewals[:-1]) == {200}, renewals
        assert renewals[-1] in (200, 504), renewals
        assert [e.code for e in updates if e.body["spec"]["holderIdentity"] == ""] == [200]  # the release
        assert _lease(api_world)["holderIdentity"] in ("", "b")
        await eventually(lambda: b_.is_leader, timeout_s=1.0, what="b to take over without waiting 3 s")
    finally:
        await _cancel(*tasks)
    assert _lease(api_world)["holderIdentity"] == ""  # b released it on cancellation too


async def _cancel(*tasks: asyncio.Task[None]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
