"""Leader election over a `coordination.k8s.io/v1` Lease, with client-go's semantics.

Several adapter replicas run; the holder of the Lease (`72dd1cf1.llm-d.ai` in the controller namespace,
upstream's ID) computes decisions and writes VA status, the others serve what they watch.

Rules (k8s.io/client-go/tools/leaderelection):

- *Acquire* when the Lease does not exist (create), has no holder, or has expired. Expiry is judged on OUR
  clock: a record that has not changed for `leaseDurationSeconds` since we first saw it is expired. We do
  not compare the holder's `renewTime` with our wall clock, so clock skew between nodes cannot make two
  replicas leaders at once (a skewed clock would otherwise take a live lease). The price, as in
  client-go: a replica that starts next to a stale lease waits one lease duration; a graceful shutdown
  avoids even that by `release()`, which empties `holderIdentity` so another replica takes over at once.
- *Renew* every `retry_period_s` by writing `renewTime`. Every write carries the Lease's resourceVersion
  (optimistic concurrency): a 409 means someone else wrote first — we lost the race.
- *Give up* leadership when no renewal succeeded for `renew_deadline_s` (50 s < the 60 s lease duration,
  so we stop acting before anyone else may start), or at once when the Lease names another holder.

`clock` (monotonic seconds) drives every decision and `wall_clock` only stamps `acquireTime`/`renewTime`;
both are injected so tests can move time. `try_acquire_or_renew()` is one step; `run()` loops over it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from adapter.config.configmaps import DEFAULT_CONTROLLER_NAMESPACE
from adapter.domain.errors import ConfigError, KubeConflict, KubeError, KubeNotFound
from adapter.k8s.client import KubeClient
from adapter.k8s.resources import LEASES

__all__ = ["DEFAULT_LEASE_NAME", "LeaderElectionOptions", "LeaderElector", "default_identity", "micro_time"]

log = logging.getLogger(__name__)

DEFAULT_LEASE_NAME: Final = "72dd1cf1.llm-d.ai"
RELEASE_ATTEMPTS: Final = 3
"""Reads and writes `release()` makes when its write meets a conflict (a renewal of ours still landing)."""


def micro_time(epoch_s: float) -> str:
    """metav1.MicroTime: RFC 3339 with microseconds, UTC."""
    return datetime.fromtimestamp(epoch_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    """Pod name (the hostname in a pod) plus a UUID, so a restarted pod never inherits its old identity."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True, slots=True)
class LeaderElectionOptions:
    """`--leader-election-lease-duration` (60 s), `--leader-election-renew-deadline` (50 s), retry 10 s."""

    namespace: str = DEFAULT_CONTROLLER_NAMESPACE
    name: str = DEFAULT_LEASE_NAME
    lease_duration_s: float = 60.0
    renew_deadline_s: float = 50.0
    retry_period_s: float = 10.0
    jitter: float = 0.2
    """A candidate waits retry_period · (1 + jitter · U[0,1)) between attempts (replicas do not align)."""
    release_timeout_s: float | None = None
    """How long `run()` may spend releasing the lease when it is cancelled (None: one retry period). `serve`
    bounds it so that shutdown stays within its budget whatever the apiserver does."""

    def __post_init__(self) -> None:
        # client-go's checks: the leader must stop before anyone else may start, and retry within the deadline.
        if not self.lease_duration_s > self.renew_deadline_s:
            raise ConfigError(
                f"leader election: lease duration ({self.lease_duration_s} s) must exceed the renew deadline "
                f"({self.renew_deadline_s} s)"
            )
        if not self.renew_deadline_s > self.retry_period_s * (1.0 + self.jitter) or self.retry_period_s <= 0:
            raise ConfigError(
                f"leader election: renew deadline ({self.renew_deadline_s} s) must exceed the retry period "
                f"({self.retry_period_s} s) times {1.0 + self.jitter}, and the retry period must be > 0"
            )


def _record(spec: Mapping[str, Any]) -> tuple[Any, ...]:
    """What identifies one write of the lease record (a change of any of these restarts the expiry clock)."""
    return tuple(
        spec.get(k) for k in ("holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime", "leaseTransitions")
    )


class LeaderElector:
    """Implements the reconciler's `Leadership` (`is_leader`).

    `on_started_leading` / `on_stopped_leading` are called (synchronously, on the event loop) on every
    transition; an exception in one is logged, never propagated. `run()` returns only when cancelled, and
    then releases the lease if held.
    """

    def __init__(
        self,
        client: KubeClient,
        options: LeaderElectionOptions | None = None,
        *,
        identity: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: Callable[[], float] = random.random,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
    ) -> None:
        self._client = client
        self.options = options or LeaderElectionOptions()
        self.identity = identity or default_identity()
        self._clock = clock
        self._wall_clock = wall_clock
        self._sleep = sleep
        self._rng = rng
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._leader = False
        self._last_renew_s = 0.0
        self._observed: tuple[Any, ...] | None = None
        self._observed_at_s = 0.0
        self.observed_holder = ""
        """The holder in the lease as last read ("" = none)."""
        self.transitions = 0
        """How often this replica started leading."""

    @property
    def is_leader(self) -> bool:
        return self._leader

    # ---- the loop -----------------------------------------------------------------------------------

    async def run(self) -> None:
        """Acquire, then renew, until cancelled; on cancellation release the lease (bounded by a retry period)."""
        try:
            while True:
                await self.try_acquire_or_renew()
                delay_s = self.options.retry_period_s
                if not self._leader:
                    delay_s *= 1.0 + self.options.jitter * self._rng()
                await self._sleep(delay_s)
        finally:
            if self._leader:
                budget_s = self.options.release_timeout_s or self.options.retry_period_s
                released = False
                with contextlib.suppress(TimeoutError, KubeError):
                    async with asyncio.timeout(budget_s):
                        released = await self.release()
                if not released:
                    log.warning("the lease was not released within %g s; it expires on its own", budget_s)

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; returns whether we lead afterwards. Never raises a KubeError."""
        now_s = self._clock()
        opts = self.options
        try:
            lease = await self._client.get(LEASES, opts.name, namespace=opts.namespace)
        except KubeNotFound:
            return await self._create(now_s)
        except KubeError as exc:
            return self._failed(now_s, f"cannot read lease: {exc}")
        spec = _spec(lease)
        record = _record(spec)
        if record != self._observed:
            self._observed, self._observed_at_s = record, now_s
        holder = lease_holder(spec)
        self.observed_holder = holder
        duration_s = lease_duration_s(spec, default_s=opts.lease_duration_s)
        if holder and holder != self.identity and now_s - self._observed_at_s < duration_s:
            if self._leader:
                self._stop_leading(f"the lease is now held by {holder}")
            return False
        wall_s = self._wall_clock()
        renewed = {
            **spec,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": round(opts.lease_duration_s),
            "acquireTime": spec.get("acquireTime") if holder == self.identity else micro_time(wall_s),
            "renewTime": micro_time(wall_s),
            "leaseTransitions": lease_transitions(spec) + (0 if holder == self.identity else 1),
        }
        if not renewed["acquireTime"]:
            renewed["acquireTime"] = micro_time(wall_s)
        try:
            await self._client.replace(LEASES, opts.name, {**lease, "spec": renewed}, namespace=opts.namespace)
        except KubeConflict:
            return self._failed(now_s, "lost the race for the lease (409 Conflict)")
        except KubeError as exc:
            return self._failed(now_s, f"cannot update lease: {exc}")
        return self._succeeded(now_s, renewed)

    async def release(self) -> bool:
        """Stop leading and hand the lease back at once (empty holder, 1 s duration), as client-go's
        ReleaseOnCancel does. Returns True when the lease was released by this call.

        A conflict is retried (at most `RELEASE_ATTEMPTS` reads and writes): a renewal that the cancellation
        interrupted can still commit on the server between our read and our write, and giving up then would
        leave the lease held until it expires, a whole lease duration without a leader.
        """
        if not self._leader:
            return False
        self._stop_leading("releasing the lease")
        opts = self.options
        for attempt in range(1, RELEASE_ATTEMPTS + 1):
            try:
                lease = await self._client.get(LEASES, opts.name, namespace=opts.namespace)
                spec = _spec(lease)
                if spec.get("holderIdentity") != self.identity:
                    return False
                now = micro_time(self._wall_clock())
                released = {
                    **spec,
                    "holderIdentity": "",
                    "leaseDurationSeconds": 1,
                    "acquireTime": now,
                    "renewTime": now,
                }
                await self._client.replace(LEASES, opts.name, {**lease, "spec": released}, namespace=opts.namespace)
            except KubeConflict as exc:
                if attempt < RELEASE_ATTEMPTS:
                    log.info("lease %s/%s changed while releasing it; reading it again", opts.namespace, opts.name)
                    continue
                log.warning("could not release lease %s/%s: %s", opts.namespace, opts.name, exc)
                return False
            except KubeError as exc:
                log.warning("could not release lease %s/%s: %s", opts.namespace, opts.name, exc)
                return False
            log.info("released lease %s/%s", opts.namespace, opts.name)
            return True
        return False

    # ---- transitions --------------------------------------------------------------------------------

    async def _create(self, now_s: float) -> bool:
        opts = self.options
        wall = micro_time(self._wall_clock())
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": round(opts.lease_duration_s),
            "acquireTime": wall,
            "renewTime": wall,
            "leaseTransitions": 0,
        }
        body = {
            "apiVersion": LEASES.api_version,
            "kind": LEASES.kind,
            "metadata": {"name": opts.name, "namespace": opts.namespace},
            "spec": spec,
        }
        try:
            await self._client.create(LEASES, body, namespace=opts.namespace)
        except KubeConflict:
            return self._failed(now_s, "lost the race to create the lease (409 AlreadyExists)")
        except KubeError as exc:
            return self._failed(now_s, f"cannot create lease: {exc}")
        return self._succeeded(now_s, spec)

    def _succeeded(self, now_s: float, spec: Mapping[str, Any]) -> bool:
        self._observed, self._observed_at_s = _record(spec), now_s
        self.observed_holder = self.identity
        self._last_renew_s = now_s
        if not self._leader:
            self._leader = True
            self.transitions += 1
            log.info(
                "became leader (lease %s/%s, identity %s)", self.options.namespace, self.options.name, self.identity
            )
            _call(self._on_started, "on_started_leading")
        return True

    def _failed(self, now_s: float, why: str) -> bool:
        if not self._leader:
            log.debug("not leader: %s", why)
            return False
        elapsed_s = now_s - self._last_renew_s
        if elapsed_s > self.options.renew_deadline_s:
            self._stop_leading(
                f"{why}; no renewal for {elapsed_s:.0f} s (deadline {self.options.renew_deadline_s:.0f} s)"
            )
            return False
        log.warning(
            "lease renewal failed (%s); still leader for up to %.0f s", why, self.options.renew_deadline_s - elapsed_s
        )
        return True

    def _stop_leading(self, why: str) -> None:
        if not self._leader:
            return
        self._leader = False
        log.warning("stopped leading: %s", why)
        _call(self._on_stopped, "on_stopped_leading")


MAX_LEASE_DURATION_S = 3600.0
"""A holder may claim at most an hour: a record claiming more (or NaN, or text) reads as the default."""


def lease_holder(spec: Mapping[str, Any]) -> str:
    """`holderIdentity` as written by a well-behaved client: a string of at most 253 characters, else ""."""
    holder = spec.get("holderIdentity")
    return holder if isinstance(holder, str) and len(holder) <= 253 else ""


def lease_duration_s(spec: Mapping[str, Any], *, default_s: float) -> float:
    """`leaseDurationSeconds` when it is a number in [1 s, 1 h]; else our own duration. A hostile or broken
    record can neither make the lease never expire nor crash the elector."""
    value = spec.get("leaseDurationSeconds")
    if isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value <= MAX_LEASE_DURATION_S:
        return default_s
    return float(value)


def lease_transitions(spec: Mapping[str, Any]) -> int:
    value = spec.get("leaseTransitions")
    return value if type(value) is int and 0 <= value < 2**31 else 0


def _spec(lease: Mapping[str, Any]) -> dict[str, Any]:
    spec = lease.get("spec")
    return spec if isinstance(spec, dict) else {}


def _call(callback: Callable[[], None] | None, name: str) -> None:
    if callback is None:
        return
    try:
        callback()
    except Exception:
        log.exception("leader election callback %s failed", name)
