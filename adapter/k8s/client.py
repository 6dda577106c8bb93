"""The one module that talks to the `kubernetes` library: configuration, REST calls, watch streams, errors.

We use the library's asyncio client (`kubernetes.aio`, shipped in the official package since 37.x, built on
aiohttp) instead of running the sync client in threads: watch streams then are ordinary coroutines that a
task cancellation stops at once, and no thread pool is held hostage by long-lived watches. The library
loads kubeconfig / in-cluster configuration (TLS, bearer tokens and their refresh, exec plugins, proxies)
and performs the HTTP requests; we address resources generically by `ResourceType` and keep objects as
the API's JSON (`dict`), which is what the validators in `adapter.config` read, and is far cheaper than
the generated models for thousands of pods.

Every failure leaves this module as one of our `KubeError`s (`raise ... from e`):

    404 → KubeNotFound   409 → KubeConflict   410 → KubeGone
    401 / 403 → KubeAuthError          400 / 422 → KubeInvalid
    429, 5xx, timeouts, refused or dropped connections, malformed responses → KubeUnavailable
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import aiohttp

from adapter.domain.errors import ConfigError, KubeConflict, KubeError, KubeGone, KubeNotFound
from adapter.k8s.resources import ResourceType

__all__ = [
    "JSON_PATCH",
    "MERGE_PATCH",
    "KubeAuthError",
    "KubeClient",
    "KubeInvalid",
    "KubeUnavailable",
    "ObjectList",
    "WatchEvent",
]

log = logging.getLogger(__name__)

MERGE_PATCH: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
WATCH_EVENT_TYPES: Final = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})
USER_AGENT: Final = "wva-adapter"
_MAX_PAGES: Final = 100_000
CLOSE_GRACE_S: Final = 0.25
"""How long `close` lets abandoned TLS connections finish their shutdown before returning."""


class KubeAuthError(KubeError):
    """401 / 403: our credentials or RBAC are wrong; retrying will not help until someone fixes them."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class KubeInvalid(KubeError):
    """400 / 422: the API server rejected what we sent (a bug on our side, or a schema we violate)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class KubeUnavailable(KubeError):
    """429, 5xx, a timeout or a broken connection: temporary, retry with backoff.

    `status` is 0 when there was no HTTP answer at all.
    """

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class ObjectList:
    """The items of a (possibly paginated) list and the resourceVersion to start a watch from."""

    items: tuple[dict[str, Any], ...]
    resource_version: str


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One watch event. BOOKMARK objects carry only `metadata.resourceVersion`."""

    type: str
    object: dict[str, Any]

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion") or "")


def _status_message(body: str) -> str:
    """The `message` of a metav1.Status body, else the body itself (shortened)."""
    with contextlib.suppress(ValueError, AttributeError):
        message = json.loads(body).get("message")
        if message:
            return str(message)
    return body.strip()[:300]


def status_error(status: int, message: str, *, what: str) -> KubeError:
    """The KubeError for an HTTP status (also for the `code` of a watch ERROR event)."""
    text = f"{what}: HTTP {status}: {message}" if message else f"{what}: HTTP {status}"
    if status == 404:
        return KubeNotFound(text)
    if status == 409:
        return KubeConflict(text)
    if status == 410:
        return KubeGone(text)
    if status in (401, 403):
        return KubeAuthError(text, status=status)
    if status in (400, 422):
        return KubeInvalid(text, status=status)
    return KubeUnavailable(text, status=status)


def _map_exception(exc: BaseException, *, what: str) -> KubeError:
    """Library / transport exception → KubeError. The library's ApiException carries `status` and `body`."""
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status > 0:
        body = getattr(exc, "body", None)
        return status_error(status, _status_message(body) if isinstance(body, str) else str(exc), what=what)
    if isinstance(exc, TimeoutError):
        return KubeUnavailable(f"{what}: timed out")
    return KubeUnavailable(f"{what}: {type(exc).__name__}: {exc}")


_TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError, OSError, ValueError)
"""What an aiohttp request or stream read raises when the network or the peer misbehaves (ValueError: a
line longer than the read buffer)."""


class KubeClient:
    """Async access to the Kubernetes API through the official client.

    Build it with `await KubeClient.connect(kubeconfig=..., request_timeout_s=...)` (the `serve` flags
    `--kubeconfig` and `--rest-client-timeout`), or from an existing `kubernetes.aio` ApiClient. Close it
    with `await client.close()` (or `async with`). All methods raise only `KubeError` subclasses.
    """

    def __init__(
        self, api_client: Any, *, request_timeout_s: float = 60.0, background: asyncio.Task[Any] | None = None
    ):
        if request_timeout_s <= 0:
            raise ConfigError(f"--rest-client-timeout must be > 0 s, got {request_timeout_s}")
        self._api: Any = api_client
        self._api.user_agent = USER_AGENT
        self.request_timeout_s = request_timeout_s
        self._background = background
        self.requests = 0
        """Requests issued (for tests and our own metrics)."""

    # ---- construction -------------------------------------------------------------------------------

    @classmethod
    async def connect(
        cls, *, kubeconfig: str | None = None, context: str | None = None, request_timeout_s: float = 60.0
    ) -> KubeClient:
        """Load configuration like controller-runtime: `--kubeconfig` if given, else the in-cluster service
        account, else the library's default kubeconfig (`$KUBECONFIG` or `~/.kube/config`).

        Raises ConfigError naming what was tried when none works.
        """
        import kubernetes.aio.config as config_module
        from kubernetes.aio.client import ApiClient, Configuration
        from kubernetes.aio.config import ConfigException

        lib: Any = config_module  # the loaders are untyped
        configuration: Any = Configuration()
        loader: Any = None
        try:
            if kubeconfig:
                if not os.path.isfile(kubeconfig):  # the library only warns, then reports a missing current-context
                    raise ConfigError(f"cannot load Kubernetes configuration from {kubeconfig}: no such file")
                loader = await lib.load_kube_config(
                    config_file=kubeconfig, context=context, client_configuration=configuration, persist_config=False
                )
            else:
                try:
                    lib.load_incluster_config(client_configuration=configuration)
                except ConfigException as in_cluster_error:
                    default = os.path.expanduser(str(lib.KUBE_CONFIG_DEFAULT_LOCATION).split(os.pathsep)[0])
                    if not os.path.exists(default):
                        raise ConfigError(
                            "no Kubernetes configuration: --kubeconfig not given, not running in a cluster "
                            f"({in_cluster_error}), and {default} does not exist"
                        ) from in_cluster_error
                    loader = await lib.load_kube_config(
                        config_file=str(lib.KUBE_CONFIG_DEFAULT_LOCATION),
                        context=context,
                        client_configuration=configuration,
                        persist_config=False,
                    )
        except ConfigError:
            raise
        except Exception as exc:  # the loaders raise ConfigException, OSError, YAML and key errors
            source = kubeconfig or "the default kubeconfig"
            raise ConfigError(f"cannot load Kubernetes configuration from {source}: {exc}") from exc
        try:
            api_client = ApiClient(configuration=configuration)  # builds the TLS context: CA and client cert
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise ConfigError(f"cannot set up TLS for {configuration.host}: {exc}") from exc
        background = None
        if loader is not None:
            # exec-plugin and GCP tokens expire: the library refreshes them in a background task.
            background = asyncio.create_task(_refresh_tokens(lib, loader, configuration))
        return cls(api_client, request_timeout_s=request_timeout_s, background=background)

    @property
    def host(self) -> str:
        return str(self._api.configuration.host)

    async def close(self) -> None:
        if self._background is not None:
            self._background.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._background
        await self._api.close()
        # Connections closed outside the pool (abandoned watch streams) finish their TLS shutdown (close_notify
        # both ways) a round trip later, not on the next loop iteration: give them the 250 ms aiohttp's
        # "graceful shutdown" advice gives, so a loop closed right after us finds no transport half-closed (one
        # e2e run in a few reported an unclosed socket to the apiserver after a single iteration).
        await asyncio.sleep(CLOSE_GRACE_S)

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- plumbing -----------------------------------------------------------------------------------

    async def _open(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, Any]] = (),
        body: Any = None,
        content_type: str = "application/json",
        timeout: aiohttp.ClientTimeout | None = None,
        what: str,
    ) -> Any:
        """Send one request; return the library's RESTResponse (body unread) for a 2xx, else raise."""
        headers = {"Accept": "application/json", "Content-Type": content_type}
        self.requests += 1
        try:
            method, url, headers, body, _ = await self._api.param_serialize(
                method, path, query_params=list(query), header_params=headers, body=body, auth_settings=["BearerToken"]
            )
            response = await self._api.call_api(
                method,
                url,
                header_params=headers,
                body=body,
                _request_timeout=timeout or aiohttp.ClientTimeout(total=self.request_timeout_s),
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the library raises ApiException, aiohttp errors and OS errors
            raise _map_exception(exc, what=what) from exc
        if 200 <= response.status < 300:
            return response
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that races
            # with completion, and a reflector cancelled at that moment would never stop.
            async with asyncio.timeout(self.request_timeout_s):
                raw = await response.read()
            text = raw.decode("utf-8", "replace")
        except _TRANSPORT_ERRORS:
            response.data = b""
            text = ""
        finally:
            response.response.release()
        from kubernetes.aio.client.exceptions import ApiException

        try:
            ApiException.from_response(http_resp=response, body=text, data=None)  # always raises
        except ApiException as exc:
            raise _map_exception(exc, what=what) from exc
        raise status_error(response.status, _status_message(text), what=what)  # pragma: no cover - unreachable

    async def _json(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, Any]] = (),
        body: Any = None,
        content_type: str = "application/json",
        what: str,
    ) -> dict[str, Any]:
        response = await self._open(method, path, query=query, body=body, content_type=content_type, what=what)
        try:
            raw = await response.read()
        except asyncio.CancelledError:
            raise
        except _TRANSPORT_ERRORS as exc:
            raise _map_exception(exc, what=what) from exc
        finally:
            response.response.release()
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise KubeUnavailable(f"{what}: the response is not JSON: {raw[:200]!r}") from exc
        if not isinstance(data, dict):
            raise KubeUnavailable(f"{what}: expected a JSON object, got {type(data).__name__}")
        return data

    # ---- verbs --------------------------------------------------------------------------------------

    async def get(self, resource: ResourceType, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        path = resource.path(namespace=namespace, name=name)
        return await self._json("GET", path, what=f"get {resource} {_where(namespace, name)}")

    async def list(
        self,
        resource: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
    ) -> ObjectList:
        """All objects, following `continue` tokens. The result's resourceVersion is the list's snapshot,
        the point a watch resumes from. A 410 while paging (the continue token expired) raises KubeGone."""
        path = resource.path(namespace=namespace)
        what = f"list {resource}" + (f" in {namespace}" if namespace else "")
        items: list[dict[str, Any]] = []
        token = ""
        for _ in range(_MAX_PAGES):
            query = [*_selectors(label_selector, field_selector), ("limit", page_size)]
            if token:
                query.append(("continue", token))
            data = await self._json("GET", path, query=query, what=what)
            for item in data.get("items") or []:
                if isinstance(item, dict):
                    item.setdefault("apiVersion", resource.api_version)
                    item.setdefault("kind", resource.kind)
                    items.append(item)
            metadata = data.get("metadata") or {}
            next_token = str(metadata.get("continue") or "")
            if not next_token:
                return ObjectList(tuple(items), str(metadata.get("resourceVersion") or ""))
            if next_token == token:
                raise KubeUnavailable(f"{what}: the server repeated continue token {token!r}")
            token = next_token
        raise KubeUnavailable(f"{what}: more than {_MAX_PAGES} pages")

    async def watch(
        self,
        resource: ResourceType,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_s: float = 300.0,
    ) -> AsyncGenerator[WatchEvent, None]:
        """One watch request: yields events until the server ends the stream (normal end: the generator
        returns). An ERROR event raises its status as KubeError (410 → KubeGone: relist); a broken or
        silent connection raises KubeUnavailable. Use with `contextlib.aclosing` so that an early exit
        closes the connection at once.

        `timeout_s` is sent as `timeoutSeconds` (the server closes the stream then); the socket read
        timeout is that plus the request timeout, so a dead connection is noticed even without bookmarks.
        """
        path = resource.path(namespace=namespace)
        what = f"watch {resource}" + (f" in {namespace}" if namespace else "")
        query = [
            *_selectors(label_selector, field_selector),
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", max(1, int(timeout_s))),
        ]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.request_timeout_s, sock_read=timeout_s + self.request_timeout_s
        )
        response = await self._open("GET", path, query=query, timeout=timeout, what=what)
        try:
            content = response.response.content
            while True:
                try:
                    line = await content.readline()
                except asyncio.CancelledError:
                    raise
                except _TRANSPORT_ERRORS as exc:
                    raise _map_exception(exc, what=what) from exc
                if not line:
                    return
                if line.strip():
                    yield _watch_event(line, what=what)
        finally:
            _abandon(response.response)

    async def create(
        self, resource: ResourceType, body: Mapping[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        name = str((body.get("metadata") or {}).get("name") or "")
        path = resource.path(namespace=namespace)
        return await self._json("POST", path, body=dict(body), what=f"create {resource} {_where(namespace, name)}")

    async def replace(
        self, resource: ResourceType, name: str, body: Mapping[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        """PUT (update). With `metadata.resourceVersion` in `body` the server rejects a stale write (409)."""
        path = resource.path(namespace=namespace, name=name)
        return await self._json("PUT", path, body=dict(body), what=f"update {resource} {_where(namespace, name)}")

    async def patch(
        self,
        resource: ResourceType,
        name: str,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        content_type: str = MERGE_PATCH,
    ) -> dict[str, Any]:
        """PATCH with a merge patch (a dict) or a JSON patch (a list of operations, `content_type=JSON_PATCH`)."""
        path = resource.path(namespace=namespace, name=name, subresource=subresource)
        body: Any = [dict(op) for op in patch] if isinstance(patch, Sequence) else dict(patch)
        target = _where(namespace, name) + (f"/{subresource}" if subresource else "")
        return await self._json("PATCH", path, body=body, content_type=content_type, what=f"patch {resource} {target}")

    async def patch_status(
        self, resource: ResourceType, name: str, patch: Mapping[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        return await self.patch(resource, name, patch, namespace=namespace, subresource="status")


async def _refresh_tokens(lib: Any, loader: Any, configuration: Any) -> None:
    """The library's token refresher (returns at once for static credentials); a failure is logged, the
    client keeps its current token."""
    try:
        await lib.refresh_token(loader, client_configuration=configuration)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("Kubernetes credential refresh stopped; keeping the current token")


def _where(namespace: str | None, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


def _selectors(label_selector: str | None, field_selector: str | None) -> list[tuple[str, Any]]:
    query: list[tuple[str, Any]] = []
    if label_selector:
        query.append(("labelSelector", label_selector))
    if field_selector:
        query.append(("fieldSelector", field_selector))
    return query


def _watch_event(line: bytes, *, what: str) -> WatchEvent:
    try:
        event = json.loads(line)
    except ValueError as exc:
        raise KubeUnavailable(f"{what}: malformed watch event {line[:200]!r}") from exc
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise KubeUnavailable(f"{what}: malformed watch event {line[:200]!r}")
    kind, obj = event.get("type"), event["object"]
    if kind == "ERROR":
        code = obj.get("code")
        message = str(obj.get("message") or obj.get("reason") or "")
        raise status_error(code if isinstance(code, int) else 500, message, what=what)
    if kind not in WATCH_EVENT_TYPES:
        raise KubeUnavailable(f"{what}: unknown watch event type {kind!r}")
    return WatchEvent(str(kind), obj)


def _abandon(response: aiohttp.ClientResponse) -> None:
    """Drop the connection of a stream we stop reading (a watch ended, failed or cancelled).

    Its body is unread, so the connection cannot go back to the pool. Aborting it closes the socket on the
    next loop iteration. A plain close would first run the TLS close_notify exchange with the apiserver (up
    to 30 s on a peer that does not answer), and a loop that stops meanwhile leaves the transport half-closed
    (ResourceWarning "unclosed transport", seen in the e2e tests).
    """
    connection = response.connection
    transport = connection.transport if connection is not None else None
    if transport is not None:
        transport.abort()
    response.close()
