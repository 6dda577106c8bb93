"""Lease-based leader election against the fake API server, on an injected clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from adapter.domain.errors import ConfigError
from adapter.k8s import resources as r
from adapter.k8s.client import KubeClient
from adapter.k8s.leader import DEFAULT_LEASE_NAME, LeaderElectionOptions, LeaderElector, micro_time
from tests.k8s import builders as b
from tests.k8s.conftest import eventually
from tests.k8s.fake_apiserver import FakeApiServer

NS = "wva-system"
OPTS = LeaderElectionOptions(namespace=NS)


class Clock:
    """Monotonic and wall time that only move when a test says so."""

    def __init__(self) -> None:
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> float:
        return 1767225600.0 + self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def elector(kube: KubeClient, clock: Clock) -> Callable[..., LeaderElector]:
    def make(
        identity: str,
        *,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
    ) -> LeaderElector:
        return LeaderElector(
            kube,
            OPTS,
            identity=identity,
            clock=clock.monotonic,
            wall_clock=clock.wall,
            on_started_leading=on_started_leading,
            on_stopped_leading=on_stopped_leading,
        )

    return make


def _lease(api: FakeApiServer) -> dict[str, object]:
    return api.get(r.LEASES, NS, DEFAULT_LEASE_NAME)["spec"]  # type: ignore[no-any-return]


async def test_acquires_a_missing_lease_by_creating_it(
    fake_api: FakeApiServer, elector: Callable[..., LeaderElector], clock: Clock
) -> None:
    events: list[str] = []
    a = elector(
        "a", on_started_leading=lambda: events.append("start"), on_stopped_leading=lambda: events.append("stop")
    )
    assert await a.try_acquire_or_renew()
    assert a.is_leader
    assert events == ["start"]
    spec = _lease(fake_api)
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 60
    assert spec["renewTime"] == micro_time(clock.wall())
    assert spec["leaseTransitions"] == 0
    clock.t += 10
    assert await a.try_acquire_or_renew()  # a renewal: no new start event
    assert events == ["start"]
    assert _lease(fake_api)["renewTime"] == micro_time(clock.wall())
    assert _lease(fake_api)["acquireTime"] == spec["acquireTime"]


async def test_a_held_lease_is_taken_only_after_it_expired_on_our_clock(
    fake_api: FakeApiServer, elector: Callable[..., LeaderElector], clock: Clock
) -> None:
    fake_api.put(r.LEASES, b.lease(DEFAULT_LEASE_NAME, namespace=NS, holder="other", transitions=3))
    b_ = elector("b")
    assert not await b_.try_acquire_or_renew()  # first sight: valid for a lease duration from now
    clock.t += 59
    assert not await b_.try_acquire_or_renew()
    assert b_.observed_holder == "other"
    clock.t += 2
    assert await b_.try_acquire_or_renew()
    spec = _lease(fake_api)
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 4)


async def test_a_renewing_holder_keeps_the_lease(
    fake_api: FakeApiServer, elector: Callable[..., LeaderElector], clock: Clock
) -> None:
    a, b_ = elector("a"), elector("b")
    assert await a.try_acquire_or_renew()
    for _ in range(20):  # 200 s of a renewing every 10 s: b never gets it
        clock.t += 10
        assert await a.try_acquire_or_renew()
        assert not await b_.try_acquire_or_renew()
    assert _lease(fake_api)["holderIdentity"] == "a"


async def test_we_stop_renewing_and_another_acquires_after_expiry(
    fake_api: FakeApiServer, elector: Callable[..., LeaderElector], clock: Clock
) -> None:
    a, b_ = elector("a"), elector("b")
    assert await a.try_acquire_or_renew()
    assert not await b_.try_acquire_or_renew()
    clock.t += 60.5  # a fell silent (no renewals) for more than the lease duration
    assert await b_.try_acquire_or_renew()
    assert not await a.try_acquire_or_renew()  # a comes back and sees b holding the lease
    assert not a.is_leader
    assert b_.is_leader


async def test_another_holder_takes_over_and_we_stop_leading(
    fake_api: FakeApiServer, elector: Callable[..., LeaderElector], clock: Clock
) -> None:
    stopped: list[str] = []
    a = elector("a", on_stopped_leading=lambda: stopped.append("a"))
    assert await a.try_acquire_or_renew()
    lease = fake_api.get(r.LEASES, NS, DEFAULT_LEASE_NAME)
    lease["spec"] |= {"holderIdentity": "intruder", "renewTime": micro_time(clock.wall() + 1)}
    fake_api.put(r.LEASES, lease)
    clock.t += 10
    assert not await a.try_acquire_or_renew()
    assert stopped == ["a"]
    assert not a.is_leader


async def test_failed_renewals_keep_leadership_until_the_renew_deadline(
    fake_api: FakeApiServer, elector: Callable[..., LeaderElector], clock: Clock
) -> None:
    a = elector("a")
    assert await a.try_acquire_or_renew()
    fault = fake_api.fail(path_contains="/leases", status=500, times=None)
    for _ in range(5):  # 50 s of failures: still within the deadline
        clock.t += 10
        assert await a.try_acquire_or_renew()
    clock.t += 1  # 51 s since the last renewal
    assert not await a.try_acquire_or_renew()
    assert not a.is_leader
    fault.times = 0
    assert await a.try_acquire_or_renew()  # nobody else took it: we may lead again
    assert a.transitions == 2


@pytest.mark.parametrize("verb", ["PUT", "POST"], ids=["update-409", "create-409"])
async def test_conflict_means_we_lost_the_race(
    fake_api: FakeApiServer, elector: Callable[..., LeaderElector], clock: Clock, verb: str
) -> None:
    if verb == "PUT":
        fake_api.put(r.LEASES, b.lease(DEFAULT_LEASE_NAME, namespace=NS, holder=""))
    fake_api.fail(method=verb, status=409)
    a = elector("a")
    assert not await a.try_acquire_or_renew()
    assert not a.is_leader
    assert await a.try_acquire_or_renew()  # the next attempt (the race over) succeeds


async def test_real_race_between_two_candidates(fake_api: FakeApiServer, kube: KubeClient, clock: Clock) -> None:
    fake_api.put(r.LEASES, b.lease(DEFAULT_LEASE_NAME, namespace=NS, holder=""))
    candidates = [
        LeaderElector(kube, OPTS, identity=name, clock=clock.monotonic, wall_clock=clock.wall) for name in "abcd"
    ]
    results = await asyncio.gather(*(c.try_acquire_or_renew() for c in candidates))
    assert sum(results) == 1  # resourceVersion guards the update: exactly one wins
    assert _lease(fake_api)["holderIdentity"] == "abcd"[results.index(True)]


async def test_release_lets_another_replica_take_over_at_once(
    fake_api: FakeApiServer, elector: Callable[..., LeaderElector], clock: Clock
) -> None:
    a, b_ = elector("a"), elector("b")
    assert await a.try_acquire_or_renew()
    assert not await b_.try_acquire_or_renew()
    assert await a.release()
    assert not a.is_leader
    spec = _lease(fake_api)
    assert spec["holderIdentity"] == ""
    assert spec["leaseDurationSeconds"] == 1
    assert await b_.try_acquire_or_renew()  # no need to wait out the lease duration
    assert not await a.release()  # not leader: nothing to release


async def test_run_loops_and_releases_on_cancel(fake_api: FakeApiServer, kube: KubeClient) -> None:
    fast = LeaderElectionOptions(namespace=NS, lease_duration_s=3, renew_deadline_s=2, retry_period_s=0.05, jitter=0)
    a = LeaderElector(kube, fast, identity="a")
    b_ = LeaderElector(kube, fast, identity="b")
    task_a = asyncio.create_task(a.run())
    await eventually(lambda: a.is_leader, what="a to lead")
    task_b = asyncio.create_task(b_.run())
    await asyncio.sleep(0.3)
    assert not b_.is_leader
    renewals = fake_api.count(method="PUT", path_contains="/leases")
    assert 3 <= renewals <= 12  # about one renewal per retry period, not a busy loop
    task_a.cancel()
    await asyncio.gather(task_a, return_exceptions=True)
    assert _lease(fake_api)["holderIdentity"] in ("", "b")
    await eventually(lambda: b_.is_leader, timeout_s=1.0, what="b to take over without waiting 3 s")
    task_b.cancel()
    await asyncio.gather(task_b, return_exceptions=True)


def test_callback_errors_are_contained(kube: KubeClient) -> None:
    def boom() -> None:
        raise RuntimeError("boom")

    elector = LeaderElector(kube, OPTS, identity="x", on_started_leading=boom)
    elector._succeeded(0.0, {"holderIdentity": "x"})  # the transition itself, without I/O
    assert elector.is_leader


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lease_duration_s": 50, "renew_deadline_s": 50},
        {"renew_deadline_s": 10, "retry_period_s": 10},
        {"retry_period_s": 0},
    ],
    ids=["deadline-not-below-duration", "retry-not-below-deadline", "zero-retry"],
)
def test_option_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="leader election"):
        LeaderElectionOptions(**kwargs)  # type: ignore[arg-type]


def test_default_identity_is_unique() -> None:
    from adapter.k8s.leader import default_identity

    first, second = default_identity(), default_identity()
    assert first != second
    assert first.split("_")[0] == second.split("_")[0]
