"""List-then-watch one collection into a local store, the way client-go's Reflector does.

Contract of `Reflector.run()` (runs until cancelled, never raises a KubeError):

- list (paginated), replace the store, remember the list's resourceVersion (RV), mark `synced`;
- watch from the last RV; every event moves the RV forward (BOOKMARKs too);
- the server ending a stream normally → watch again from the last RV (no relist);
- 410 Gone (HTTP status or an ERROR event) → relist at once; a second 410 in a row waits like an error;
- any other error → exponential backoff with jitter, capped (`backoff_max_s`), then watch again from the
  last RV (or list again if the list failed). The failure count resets only when a watch proves healthy
  (it delivered an event or stayed open `min_watch_s`), so a list that succeeds while its watch fails
  at once can never turn into a tight loop;
- a stream that ends without events sooner than `min_watch_s` counts as a failure (no spinning on a
  server that closes every watch at once);
- an *optional* collection (a CRD that may be missing, or a resource RBAC may not grant) answering
  404 / 401 / 403 is "absent": the store is emptied, `synced` is set (nothing to wait for), one log line
  says why, and the list is retried every `absent_recheck_s` in case the CRD gets installed.

- anything else (a bug in a projection or a callback) is logged with its traceback and answered with a
  relist after backoff: one bad object never stops the watch for good.

Objects are reduced by `project` (a pure function to a small frozen record, or None to skip the object)
before they are stored, so the store holds only what the view needs; `on_change` is called only when a
projection actually changed, so a pod's status heartbeat does not rebuild anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from adapter.domain.errors import KubeError, KubeGone, KubeNotFound
from adapter.k8s.client import KubeAuthError, KubeClient
from adapter.k8s.resources import ResourceType

log = logging.getLogger(__name__)

T = TypeVar("T")
ObjectKey = tuple[str, str]
"""(namespace, name); namespace is "" for cluster-scoped objects."""


@dataclass(frozen=True, slots=True)
class ReflectorOptions:
    """Timing of list/watch. Defaults follow client-go (backoff 0.8 s → 30 s, watches of 5–10 min)."""

    backoff_initial_s: float = 0.8
    backoff_max_s: float = 30.0
    backoff_jitter: float = 0.2
    """Each delay is stretched by a random fraction in [0, jitter) so that replicas do not retry in step."""
    watch_timeout_s: float = 300.0
    """`timeoutSeconds` of a watch; each watch picks a value in [t, 2t) like client-go."""
    min_watch_s: float = 1.0
    absent_recheck_s: float = 60.0
    page_size: int = 500

    def backoff_s(self, failures: int, rnd: float) -> float:
        """Delay after the n-th consecutive failure (n ≥ 1): initial · 2^(n-1), capped, plus jitter."""
        base = min(self.backoff_max_s, self.backoff_initial_s * 2.0 ** min(max(failures - 1, 0), 30))
        return base * (1.0 + self.backoff_jitter * rnd)


@dataclass(slots=True)
class ReflectorStats:
    """Counters for tests, readiness and our own metrics."""

    lists: int = 0
    watches: int = 0
    events: int = 0
    relists_after_gone: int = 0
    errors: int = 0
    last_error: str = ""


@dataclass(slots=True)
class _Attempt:
    healthy: bool = False


class Reflector(Generic[T]):
    """Mirror of one collection (`resource`, optionally one namespace and a label selector).

    `optional` (default: `resource.optional`) makes 404/401/403 on list mean "absent" (module doc).
    `sleep`, `clock` and `rng` are injected so tests control time and jitter.
    """

    def __init__(
        self,
        client: KubeClient,
        resource: ResourceType,
        *,
        project: Callable[[dict[str, Any]], T | None],
        on_change: Callable[[Reflector[T]], None] | None = None,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        optional: bool | None = None,
        options: ReflectorOptions | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.client = client
        self.resource = resource
        self.project = project
        self.on_change = on_change or (lambda _reflector: None)
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.optional = resource.optional if optional is None else optional
        self.options = options or ReflectorOptions()
        self.sleep = sleep
        self.clock = clock
        self.rng = rng
        self.store: dict[ObjectKey, T] = {}
        self.resource_version = ""
        self.synced = False
        self.absent = False
        self.stats = ReflectorStats()
        self._synced_event = asyncio.Event()
        self._logged_error = ""

    @property
    def name(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        selectors = ",".join(s for s in (self.label_selector, self.field_selector) if s)
        selector = f" [{selectors}]" if selectors else ""
        return f"{self.resource}{where}{selector}"

    async def wait_synced(self) -> None:
        await self._synced_event.wait()

    async def run(self) -> None:
        """List and watch until cancelled (see the module doc for the retry rules)."""
        failures = 0
        need_list = True
        while True:
            attempt = _Attempt()
            try:
                if need_list:
                    await self._list()
                    need_list = False
                started_s = self.clock()
                await self._watch(attempt)
                if attempt.healthy or self.clock() - started_s >= self.options.min_watch_s:
                    failures = 0
                    self._logged_error = ""
                    continue
                failures += 1
                self._note_error(f"watch {self.name} closed at once without events")
            except KubeGone as exc:
                failures = self._count_failure(failures, attempt)
                self.stats.relists_after_gone += 1
                need_list = True
                log.info("%s: resourceVersion %s expired (%s); relisting", self.name, self.resource_version, exc)
                if failures == 1:
                    continue
            except (KubeNotFound, KubeAuthError) as exc:
                if need_list and self.optional:
                    self._mark_absent(exc)
                    await self.sleep(self.options.absent_recheck_s)
                    continue
                failures = self._count_failure(failures, attempt)
                # The collection may have gone (CRD deleted, RBAC revoked): list again to find out.
                need_list = need_list or isinstance(exc, KubeNotFound) or self.optional
                self._note_error(str(exc))
            except KubeError as exc:
                failures = self._count_failure(failures, attempt)
                self._note_error(str(exc))
            except Exception:  # a bug (in a projection or a callback): keep the inventory alive, resync
                failures = self._count_failure(failures, attempt)
                need_list = True
                self.stats.errors += 1
                log.exception("%s: unexpected error; relisting after backoff", self.name)
            await self.sleep(self.options.backoff_s(failures, self.rng()))

    def _count_failure(self, failures: int, attempt: _Attempt) -> int:
        """Consecutive failures, the current one included; a healthy watch before it resets the count."""
        if attempt.healthy:
            self._logged_error = ""
            return 1
        return failures + 1

    async def _list(self) -> None:
        self.stats.lists += 1
        listed = await self.client.list(
            self.resource,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            page_size=self.options.page_size,
        )
        fresh: dict[ObjectKey, T] = {}
        for obj in listed.items:
            record = self.project(obj)
            if record is not None:
                fresh[_key(obj)] = record
        was_absent = self.absent
        self.absent = False
        self.resource_version = listed.resource_version
        changed = fresh != self.store
        self.store = fresh
        self._mark_synced()
        if was_absent:
            log.info("%s is served now", self.name)
        if self._logged_error:
            log.info("%s: listed again after errors", self.name)
            self._logged_error = ""
        if changed:
            self.on_change(self)

    async def _watch(self, attempt: _Attempt) -> None:
        self.stats.watches += 1
        timeout_s = self.options.watch_timeout_s * (1.0 + self.rng())
        stream = self.client.watch(
            self.resource,
            resource_version=self.resource_version,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_s=timeout_s,
        )
        async with contextlib.aclosing(stream) as events:
            async for event in events:
                self.stats.events += 1
                attempt.healthy = True
                if event.resource_version:
                    self.resource_version = event.resource_version
                if event.type == "BOOKMARK":
                    continue
                key = _key(event.object)
                old = self.store.get(key)
                new = None if event.type == "DELETED" else self.project(event.object)
                if new is None:
                    self.store.pop(key, None)
                else:
                    self.store[key] = new
                if new != old:
                    self.on_change(self)

    def _mark_synced(self) -> None:
        self.synced = True
        self._synced_event.set()

    def _mark_absent(self, exc: KubeError) -> None:
        if not self.absent:
            log.warning(
                "%s is not available (%s); skipping it and checking again every %g s",
                self.name,
                exc,
                self.options.absent_recheck_s,
            )
        self.absent = True
        self.resource_version = ""
        if self.store:
            self.store = {}
            self.on_change(self)
        self._mark_synced()

    def _note_error(self, message: str) -> None:
        """Count every error; log a warning only when the message changes (no log flood while down)."""
        self.stats.errors += 1
        self.stats.last_error = message
        if message != self._logged_error:
            log.warning("%s: %s (retrying with backoff)", self.name, message)
            self._logged_error = message
        else:
            log.debug("%s: %s", self.name, message)


def _key(obj: dict[str, Any]) -> ObjectKey:
    metadata = obj.get("metadata") or {}
    return (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
