"""A fake Kubernetes API server for unit tests: aiohttp on 127.0.0.1 with an in-memory object store.

The real `kubernetes` client talks to it through a generated kubeconfig (bearer token, plain HTTP). It
implements what the adapter uses, with the API server's wire behaviour:

- list with `labelSelector` (equality), `fieldSelector` (metadata.name / metadata.namespace), `limit` /
  `continue` pagination, the list's `metadata.resourceVersion`;
- watch (`watch=true`) as chunked JSON lines: replay of history after `resourceVersion`, then live
  ADDED / MODIFIED / DELETED events (DELETED/ADDED when an object leaves/enters a label selector),
  BOOKMARKs on demand, an ERROR 410 event when the resourceVersion was compacted, `timeoutSeconds`;
- get, create (409 AlreadyExists), update (PUT; 409 on a stale `metadata.resourceVersion`), merge patch
  on objects and the `status` subresource (409 on a stale resourceVersion in the patch), delete;
- SubjectAccessReview creation answered by `sar_handler`;
- 401 for a wrong bearer token, 404 for collections that are not served (a missing CRD).

Fault injection (`fail`), forced expiry (`expire`), closing / dropping open watches, and a request log
(`count`) let tests check retries, relists, backoff and that nothing spins.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from adapter.k8s.resources import ResourceType

Key = tuple[str, str, str]  # (group, version, plural)


def _key(rt: ResourceType) -> Key:
    return (rt.group, rt.version, rt.plural)


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(status_body(code, reason, message), status=code)


def merge_apply(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_apply(result.get(k), v)
    return result


def _labels_match(selector: str | None, obj: dict[str, Any] | None) -> bool:
    if obj is None:
        return False
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in selector.split(","):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k.rstrip("=")) != v.lstrip("="):
                return False
        elif labels.get(term) is None:
            return False
    return True


def _fields_match(selector: str | None, obj: dict[str, Any]) -> bool:
    if not selector:
        return True
    meta = obj.get("metadata") or {}
    for term in selector.split(","):
        k, _, v = term.partition("=")
        if k == "metadata.name" and meta.get("name") != v:
            return False
        if k == "metadata.namespace" and meta.get("namespace") != v:
            return False
    return True


@dataclass
class Fault:
    """Answer matching requests with `status` (or drop the connection) `times` times (None: forever)."""

    method: str | None = None
    path_contains: str | None = None
    watch: bool | None = None
    status: int = 500
    drop: bool = False
    times: int | None = 1
    subresource: str | None = None

    def matches(self, request: web.Request, is_watch: bool) -> bool:
        if self.times is not None and self.times <= 0:
            return False
        if self.method and request.method != self.method:
            return False
        if self.path_contains and self.path_contains not in request.path:
            return False
        if self.subresource is not None and not request.path.endswith("/" + self.subresource):
            return False
        return self.watch is None or self.watch == is_watch


@dataclass
class Logged:
    method: str
    path: str
    query: dict[str, str]
    body: Any = None
    watch: bool = False
    content_type: str = ""


@dataclass
class _Watcher:
    key: Key
    namespace: str | None
    label_selector: str | None
    field_selector: str | None
    queue: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue)


class FakeApiServer:
    def __init__(self, *, token: str = "test-token") -> None:
        self.token = token
        self.types: dict[Key, ResourceType] = {}
        self.objects: dict[Key, dict[tuple[str, str], dict[str, Any]]] = {}
        self.history: dict[Key, list[tuple[int, str, dict[str, Any], dict[str, Any] | None]]] = {}
        self.compacted: dict[Key, int] = {}
        self.rv = 100
        self.watchers: list[_Watcher] = []
        self.log: list[Logged] = []
        self.faults: list[Fault] = []
        self.sar_handler: Callable[[dict[str, Any]], dict[str, Any]] = lambda _body: {"allowed": True}
        self.empty_watches = False
        """Every watch ends at once, without events or error (a misbehaving proxy)."""
        self.raw_watch_lines: list[bytes] = []
        """Sent verbatim at the start of the next watch, which then ends (malformed-stream tests)."""
        self._runner: web.AppRunner | None = None
        self.port = 0

    # ---- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        for watcher in list(self.watchers):
            watcher.queue.put_nowait(("close", None))
        await asyncio.sleep(0)
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_kubeconfig(self, path: Path, *, token: str | None = None) -> Path:
        """A kubeconfig for this server (JSON is valid YAML; the client's loader parses it)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": token or self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config))
        return path

    # ---- store manipulation (from tests) ------------------------------------------------------------

    def serve(self, *types: ResourceType) -> None:
        for rt in types:
            self.types[_key(rt)] = rt
            self.objects.setdefault(_key(rt), {})
            self.history.setdefault(_key(rt), [])

    def unserve(self, rt: ResourceType) -> None:
        """The CRD is gone: its paths answer 404, its open watches end."""
        self.types.pop(_key(rt), None)
        self.objects.pop(_key(rt), None)
        self.history.pop(_key(rt), None)
        self._signal(rt, ("close", None))

    def put(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object as a controller would (a new resourceVersion, a watch event)."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if rt.namespaced:
            meta.setdefault("namespace", "default")
        obj.setdefault("apiVersion", rt.api_version)
        obj.setdefault("kind", rt.kind)
        store = self.objects[_key(rt)]
        key = (meta.get("namespace", ""), meta["name"])
        old = store.get(key)
        if old is None:
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        else:
            meta["uid"] = old["metadata"].get("uid")
        return self._commit(rt, key, obj, old)

    def delete(self, rt: ResourceType, namespace: str, name: str) -> None:
        store = self.objects[_key(rt)]
        old = store.pop((namespace, name))
        self.rv += 1
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = str(self.rv)
        self._record(rt, "DELETED", gone, old)

    def get(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.objects[_key(rt)][(namespace, name)])

    def expire(self, rt: ResourceType) -> None:
        """Compact history (every resourceVersion so far is too old) and send ERROR 410 to open watches."""
        self.compacted[_key(rt)] = self.rv
        self._signal(rt, ("error", status_body(410, "Expired", "too old resource version")))

    def close_watches(self, rt: ResourceType) -> None:
        self._signal(rt, ("close", None))

    def drop_watches(self, rt: ResourceType) -> None:
        self._signal(rt, ("drop", None))

    def bookmark(self, rt: ResourceType) -> None:
        self.rv += 1
        self._signal(
            rt,
            (
                "event",
                {
                    "type": "BOOKMARK",
                    "object": {
                        "kind": rt.kind,
                        "apiVersion": rt.api_version,
                        "metadata": {"resourceVersion": str(self.rv)},
                    },
                },
            ),
        )

    def fail(self, **kwargs: Any) -> Fault:
        fault = Fault(**kwargs)
        self.faults.append(fault)
        return fault

    def count(
        self,
        *,
        method: str | None = None,
        path_contains: str | None = None,
        watch: bool | None = None,
        since: int = 0,
    ) -> int:
        return sum(
            1
            for entry in self.log[since:]
            if (method is None or entry.method == method)
            and (path_contains is None or path_contains in entry.path)
            and (watch is None or entry.watch == watch)
        )

    def watch_count(self, rt: ResourceType) -> int:
        return sum(1 for w in self.watchers if w.key == _key(rt))

    # ---- internals ----------------------------------------------------------------------------------

    def _signal(self, rt: ResourceType, message: tuple[str, Any]) -> None:
        for watcher in self.watchers:
            if watcher.key == _key(rt):
                watcher.queue.put_nowait(message)

    def _commit(
        self, rt: ResourceType, key: tuple[str, str], obj: dict[str, Any], old: dict[str, Any] | None
    ) -> dict[str, Any]:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[_key(rt)][key] = obj
        self._record(rt, "ADDED" if old is None else "MODIFIED", obj, old)
        return copy.deepcopy(obj)

    def _record(self, rt: ResourceType, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        entry = (self.rv, kind, copy.deepcopy(obj), copy.deepcopy(old) if old is not None else None)
        self.history[_key(rt)].append(entry)
        for watcher in self.watchers:
            if watcher.key == _key(rt):
                event = self._filter(watcher, kind, obj, old)
                if event is not None:
                    watcher.queue.put_nowait(("event", event))

    @staticmethod
    def _filter(watcher: _Watcher, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any] | None:
        meta = obj.get("metadata") or {}
        if watcher.namespace and meta.get("namespace") != watcher.namespace:
            return None
        if not _fields_match(watcher.field_selector, obj):
            return None
        now_in = _labels_match(watcher.label_selector, obj)
        was_in = _labels_match(watcher.label_selector, old)
        if kind == "DELETED":
            return {"type": "DELETED", "object": obj} if was_in or now_in else None
        if now_in and not was_in:
            return {"type": "ADDED", "object": obj}
        if was_in and not now_in:
            return {"type": "DELETED", "object": obj}
        if now_in:
            return {"type": kind, "object": obj}
        return None

    def _route(self, path: str) -> tuple[ResourceType | None, str | None, str | None, str | None, Key | None]:
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None, None, None, None, None
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest:
            return None, None, None, None, None
        key = (group, version, rest[0])
        rt = self.types.get(key)
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        return rt, namespace, name, sub, key

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        is_watch = request.query.get("watch") in ("true", "1")
        body: Any = None
        if request.can_read_body:
            raw = await request.read()
            with contextlib.suppress(ValueError):
                body = json.loads(raw)
        self.log.append(
            Logged(
                request.method,
                request.path,
                dict(request.query),
                body,
                is_watch,
                request.headers.get("Content-Type", ""),
            )
        )
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return _status(401, "Unauthorized", "Unauthorized")
        for fault in self.faults:
            if fault.matches(request, is_watch):
                if fault.times is not None:
                    fault.times -= 1
                if fault.drop:
                    assert request.transport is not None
                    request.transport.abort()
                    return web.Response()
                return _status(fault.status, "InternalError" if fault.status >= 500 else "Fault", "injected fault")
        rt, namespace, name, sub, key = self._route(request.path)
        if rt is None or key is None:
            return _status(404, "NotFound", "the server could not find the requested resource")
        if rt.kind == "SubjectAccessReview" and request.method == "POST":
            review = dict(body or {})
            review["status"] = self.sar_handler(review)
            return web.json_response(review, status=201)
        if request.method == "GET" and name is None:
            if is_watch:
                return await self._watch(request, rt, key, namespace)
            return self._list(request, rt, key, namespace)
        store = self.objects[key]
        if request.method == "POST" and name is None:
            meta = (body or {}).get("metadata") or {}
            obj_ns = (namespace or meta.get("namespace") or "") if rt.namespaced else ""
            if (obj_ns, meta.get("name")) in store:
                return _status(409, "AlreadyExists", f'{rt.plural} "{meta.get("name")}" already exists')
            body.setdefault("metadata", {})
            if rt.namespaced:
                body["metadata"]["namespace"] = obj_ns
            return web.json_response(self.put(rt, body), status=201)
        obj_key = (namespace or "", name or "")
        current = store.get(obj_key)
        if current is None:
            return _status(404, "NotFound", f'{rt.plural} "{name}" not found')
        if request.method == "GET":
            return web.json_response(current)
        if request.method == "DELETE":
            self.delete(rt, *obj_key)
            return web.json_response(status_body(200, "", "deleted") | {"status": "Success"})
        wanted_rv = ((body or {}).get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
        if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
            return _status(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {rt.plural} "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
            )
        if request.method == "PUT":
            updated = copy.deepcopy(body)
            updated["metadata"] = {
                **current["metadata"],
                **{k: v for k, v in body["metadata"].items() if k == "labels"},
            }
            return web.json_response(self._commit(rt, obj_key, updated, current))
        if request.method == "PATCH":
            if request.headers.get("Content-Type") != "application/merge-patch+json":
                return _status(415, "UnsupportedMediaType", "only merge patches here")
            patch = dict(body or {})
            patch.pop("metadata", None)
            updated = copy.deepcopy(current)
            if sub == "status":
                updated["status"] = merge_apply(current.get("status") or {}, patch.get("status") or {})
                if not updated["status"]:
                    updated.pop("status")
            else:
                patch.pop("status", None)
                updated = merge_apply(updated, patch)
            if updated == current:
                return web.json_response(current)  # a no-op patch does not bump resourceVersion
            return web.json_response(self._commit(rt, obj_key, updated, current))
        return _status(405, "MethodNotAllowed", request.method)

    def _list(self, request: web.Request, rt: ResourceType, key: Key, namespace: str | None) -> web.Response:
        label_selector = request.query.get("labelSelector")
        field_selector = request.query.get("fieldSelector")
        items = [
            copy.deepcopy(obj)
            for (ns, _), obj in sorted(self.objects[key].items())
            if (not namespace or ns == namespace)
            and _labels_match(label_selector, obj)
            and _fields_match(field_selector, obj)
        ]
        limit = int(request.query.get("limit") or 0)
        offset = 0
        token = request.query.get("continue")
        if token:
            state = json.loads(token)
            if state["rv"] <= self.compacted.get(key, 0):
                return _status(410, "Expired", "the provided continue parameter is too old")
            offset = state["offset"]
        page = items[offset : offset + limit] if limit else items[offset:]
        meta: dict[str, Any] = {"resourceVersion": str(self.rv)}
        if limit and offset + limit < len(items):
            meta["continue"] = json.dumps({"offset": offset + limit, "rv": self.rv})
        for item in page:  # items of a list carry no apiVersion/kind for built-in types
            if not rt.group:
                item.pop("apiVersion", None)
                item.pop("kind", None)
        return web.json_response(
            {"apiVersion": rt.api_version, "kind": f"{rt.kind}List", "metadata": meta, "items": page}
        )

    async def _watch(
        self, request: web.Request, rt: ResourceType, key: Key, namespace: str | None
    ) -> web.StreamResponse:
        since = request.query.get("resourceVersion")
        timeout_s = float(request.query.get("timeoutSeconds") or 1800)
        watcher = _Watcher(key, namespace, request.query.get("labelSelector"), request.query.get("fieldSelector"))
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        if self.empty_watches:
            await response.write_eof()
            return response
        if self.raw_watch_lines:
            lines, self.raw_watch_lines = self.raw_watch_lines, []
            for line in lines:
                await response.write(line)
            await response.write_eof()
            return response
        if since and int(since) < self.compacted.get(key, 0):
            await response.write(
                _line({"type": "ERROR", "object": status_body(410, "Expired", "too old resource version")})
            )
            await response.write_eof()
            return response
        if since:
            for rv, kind, obj, old in self.history[key]:
                if rv > int(since):
                    event = self._filter(watcher, kind, obj, old)
                    if event is not None:
                        watcher.queue.put_nowait(("event", event))
        else:
            for obj in self.objects[key].values():
                event = self._filter(watcher, "ADDED", obj, None)
                if event is not None:
                    watcher.queue.put_nowait(("event", event))
        self.watchers.append(watcher)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            while True:
                remaining_s = deadline - loop.time()
                if remaining_s <= 0:
                    break
                if request.transport is None or request.transport.is_closing():
                    return response  # the client went away (aiohttp does not cancel the handler)
                try:
                    async with asyncio.timeout(min(0.05, remaining_s)):
                        kind, payload = await watcher.queue.get()
                except TimeoutError:
                    continue
                if kind == "event":
                    await response.write(_line(payload))
                elif kind == "error":
                    await response.write(_line({"type": "ERROR", "object": payload}))
                    break
                elif kind == "close":
                    break
                elif kind == "drop":
                    assert request.transport is not None
                    request.transport.abort()
                    return response
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client went away
        finally:
            self.watchers.remove(watcher)
        return response


def _line(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"
