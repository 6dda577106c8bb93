"""One test's corner of the real API server, for the client-level tests (`test_api_*.py`).

These tests used to run against `tests/k8s/fake_apiserver.py`. On the real kube-apiserver they get:

* `ApiWorld.namespace`, a fresh namespace, deleted afterwards (also on failure);
* `ApiWorld.kubeconfig`, an x509 user of its own in `system:masters` and in the audited group, so that
* `ApiWorld.requests()` reads back, from the control plane's **audit log**, exactly the requests this test's
  client sent (verb, URI, body, answer). The fake server's request log had that; the real server's audit log
  is the real thing (kube-apiserver `--audit-policy-file`, controlplane.py);
* `ApiWorld.put/get/patch_status/delete`: seeding and inspecting objects as the admin, over plain HTTPS with
  `requests`, so nothing under test (our `KubeClient`) prepares its own world.

Objects the builders of tests/k8s/builders.py make carry a `status` as the server would return it; `put`
creates the object and then writes that status through the status subresource, as a controller (or kubelet)
would.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from adapter.k8s import resources as r
from adapter.k8s.resources import ResourceType

from .cluster import Kube, until
from .controlplane import AUDITED_GROUP

WITH_STATUS = {r.VARIANT_AUTOSCALINGS, r.DEPLOYMENTS, r.STATEFULSETS, r.REPLICASETS, r.PODS, r.NODES}
WITH_STATUS |= {r.LEADERWORKERSETS, r.INFERENCE_POOLS_V1, r.INFERENCE_POOLS_V1ALPHA2}
"""Types whose `status` the API server ignores on create and takes only through `/status`."""


@dataclass(frozen=True)
class AuditedRequest:
    """One request as kube-apiserver's audit log recorded it (stage ResponseComplete, or ResponseStarted for a
    watch, whose response never completes while it streams)."""

    verb: str
    """The API verb: get, list, watch, create, update, patch, delete."""
    method: str
    """The HTTP method it came as (GET, POST, PUT, PATCH, DELETE)."""
    uri: str
    path: str
    code: int
    resource: str
    subresource: str
    name: str
    body: Any
    user: str
    stage: str
    at_s: float
    """When the apiserver received it, on this process' `time.monotonic()` clock."""

    @property
    def status(self) -> int:
        return self.code

    @property
    def watch(self) -> bool:
        return self.verb == "watch"

    @property
    def client(self) -> str:
        return self.user


_METHODS = {
    "get": "GET",
    "list": "GET",
    "watch": "GET",
    "create": "POST",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
    "deletecollection": "DELETE",
}


def read_audit(path: Path, *, user: str, since_bytes: int = 0) -> list[AuditedRequest]:
    """The requests `user` sent, from the audit log at `path`, starting at byte `since_bytes`."""
    found: list[AuditedRequest] = []
    wall_minus_monotonic = time.time() - time.monotonic()
    with path.open("rb") as log:
        log.seek(since_bytes)
        for line in log:
            if not line.endswith(b"\n"):
                break  # an event still being written
            event = json.loads(line)
            if event.get("user", {}).get("username") != user:
                continue
            stage, verb = event.get("stage"), event.get("verb", "")
            if stage != ("ResponseStarted" if verb == "watch" else "ResponseComplete"):
                continue  # a watch is logged when its stream starts (and again when it ends: not counted twice)
            ref = event.get("objectRef") or {}
            uri = str(event.get("requestURI", ""))
            found.append(
                AuditedRequest(
                    verb=verb,
                    method=_METHODS.get(verb, verb.upper()),
                    uri=uri,
                    path=uri.split("?", 1)[0],
                    code=int((event.get("responseStatus") or {}).get("code") or 0),
                    resource=str(ref.get("resource", "")),
                    subresource=str(ref.get("subresource", "")),
                    name=str(ref.get("name", "")),
                    body=event.get("requestObject"),
                    user=user,
                    stage=stage,
                    at_s=_timestamp(event.get("requestReceivedTimestamp")) - wall_minus_monotonic,
                )
            )
    return found


def _timestamp(text: object) -> float:
    """An audit timestamp (RFC 3339 with microseconds, "2026-11-25T05:21:03.123456Z") as epoch seconds."""
    if not isinstance(text, str):
        return 0.0
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


OWNER_TYPES = {t.kind: t for t in (r.DEPLOYMENTS, r.STATEFULSETS, r.REPLICASETS, r.LEADERWORKERSETS)}


@dataclass
class Objects:
    """Objects on the real API server, read and written as the admin over plain HTTPS (`requests`)."""

    kube: Kube
    namespace: str | None = None
    """The namespace of namespaced objects that name none."""
    created: list[tuple[ResourceType, str | None, str]] = field(default_factory=list)

    def url(self, resource: ResourceType, *, namespace: str | None = None, name: str | None = None) -> str:
        ns = namespace if namespace is not None else (self.namespace if resource.namespaced else None)
        return self.kube.plane.url + resource.path(namespace=ns, name=name)

    def _call(self, method: str, url: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        response = self.kube.http.request(
            method,
            url,
            data=None if body is None else json.dumps(body),
            headers={"Content-Type": content_type},
            timeout=10,
        )
        if response.status_code >= 400:
            raise AssertionError(f"{method} {url} -> {response.status_code}: {response.text[:500]}")
        return response.json()

    def ensure_namespace(self, namespace: str) -> None:
        answer = self.kube.http.post(
            f"{self.kube.plane.url}/api/v1/namespaces", json={"metadata": {"name": namespace}}, timeout=10
        )
        if answer.status_code not in (201, 409):
            raise AssertionError(f"creating namespace {namespace} -> {answer.status_code}: {answer.text[:300]}")

    def _owner_uids(self, meta: dict[str, Any], namespace: str | None) -> None:
        """The real server requires an owner's uid; the builders name the owner only. Take the owner's, when it
        exists (as a controller would have), else a fresh one (an owner not created yet, or deleted)."""
        for ref in meta.get("ownerReferences") or []:
            if ref.get("uid"):
                continue
            owner_type = OWNER_TYPES.get(str(ref.get("kind")))
            uid = None
            if owner_type is not None:
                found = self.kube.http.get(self.url(owner_type, namespace=namespace, name=ref["name"]), timeout=10)
                if found.status_code == 200:
                    uid = found.json()["metadata"]["uid"]
            ref["uid"] = uid or str(uuid.uuid4())

    def put(self, resource: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """Create `obj` (replace it when it exists), then write its `status` through `/status`; the stored object."""
        obj = json.loads(json.dumps(obj))
        status = obj.pop("status", None)
        meta = obj.setdefault("metadata", {})
        namespace = None
        if resource.namespaced:
            namespace = meta["namespace"] = meta.get("namespace") or self.namespace
            self.ensure_namespace(namespace)
        name = meta["name"]
        self._owner_uids(meta, namespace)
        existing = self.kube.http.get(self.url(resource, namespace=namespace, name=name), timeout=10)
        if existing.status_code == 200:
            meta["resourceVersion"] = existing.json()["metadata"]["resourceVersion"]
            stored = self._call("PUT", self.url(resource, namespace=namespace, name=name), obj)
        else:
            stored = self._call("POST", self.url(resource, namespace=namespace), obj)
            self.created.append((resource, namespace, name))
        if status is not None and resource in WITH_STATUS:
            stored = self.patch_status(resource, name, status, namespace=namespace)
        return dict(stored)

    def patch_status(
        self, resource: ResourceType, name: str, status: dict[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        url = self.url(resource, namespace=namespace, name=name) + "/status"
        return dict(self._call("PATCH", url, {"status": status}, content_type="application/merge-patch+json"))

    def patch(
        self, resource: ResourceType, name: str, patch: dict[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        url = self.url(resource, namespace=namespace, name=name)
        return dict(self._call("PATCH", url, patch, content_type="application/merge-patch+json"))

    def get(self, resource: ResourceType, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        return dict(self._call("GET", self.url(resource, namespace=namespace, name=name)))

    def delete(self, resource: ResourceType, name: str, *, namespace: str | None = None) -> None:
        response = self.kube.http.delete(self.url(resource, namespace=namespace, name=name), timeout=10)
        if response.status_code not in (200, 202, 404):
            raise AssertionError(f"DELETE {resource} {name} -> {response.status_code}: {response.text[:300]}")


@dataclass
class ApiWorld:
    kube: Kube
    namespace: str
    user: str
    kubeconfig: Path
    audit_log: Path | None
    _objects: Objects | None = None
    _mark: int = 0

    # ---- the audit log ----

    def mark(self) -> None:
        """Requests before now are not returned by `requests()` any more (the fake's `since=len(log)`)."""
        self._mark = self._size()

    def _size(self) -> int:
        return self._log().stat().st_size if self._log().exists() else 0

    def _log(self) -> Path:
        if self.audit_log is None:
            pytest.fail("this test reads the audit log, which only the local control plane writes", pytrace=False)
        return self.audit_log

    def requests(self, *, settle_s: float = 0.3) -> list[AuditedRequest]:
        """This test user's requests since `mark()`, once the log stopped growing for `settle_s` (an event
        can reach the log just after its response reached us)."""
        last, stable_since = -1, time.monotonic()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            size = self._size()
            if size != last:
                last, stable_since = size, time.monotonic()
            elif time.monotonic() - stable_since >= settle_s:
                break
            time.sleep(0.05)
        return read_audit(self._log(), user=self.user, since_bytes=self._mark)

    def wait_requests(
        self, what: str, enough: Callable[[list[AuditedRequest]], bool], *, timeout_s: float = 10
    ) -> list[AuditedRequest]:
        seen: list[AuditedRequest] = []

        def check() -> str | None:
            seen[:] = read_audit(self._log(), user=self.user, since_bytes=self._mark)
            return None if enough(seen) else f"{[(e.verb, e.path) for e in seen]}"

        until(what, check, timeout_s=timeout_s, every_s=0.05)
        return seen

    # ---- objects, as the admin ----

    @property
    def objects(self) -> Objects:
        if self._objects is None:
            self._objects = Objects(self.kube, self.namespace)
        return self._objects

    def put(self, resource: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        return self.objects.put(resource, obj)

    def patch_status(
        self, resource: ResourceType, name: str, status: dict[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        return self.objects.patch_status(resource, name, status, namespace=namespace)

    def patch(
        self, resource: ResourceType, name: str, patch: dict[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        return self.objects.patch(resource, name, patch, namespace=namespace)

    def get(self, resource: ResourceType, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        return self.objects.get(resource, name, namespace=namespace)

    def delete(self, resource: ResourceType, name: str, *, namespace: str | None = None) -> None:
        self.objects.delete(resource, name, namespace=namespace)

    def teardown(self) -> None:
        """Cluster-scoped objects this test created, then its namespace (which takes the rest with it)."""
        for resource, namespace, name in reversed(self.objects.created):
            if not resource.namespaced:
                self.delete(resource, name, namespace=namespace)
        self.kube.delete_namespace(self.namespace)


def world_for(kube: Kube, nodeid: str, name: str) -> ApiWorld:
    """A namespace and an audited `system:masters` user named after the test."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40].strip("-")
    digest = hashlib.sha256(nodeid.encode()).hexdigest()[:6]
    namespace, user = f"api-{slug}-{digest}", f"e2e-{slug}-{digest}"
    kube.core.create_namespace({"metadata": {"name": namespace}})
    kubeconfig = kube.plane.kubeconfig_for(user, "system:masters", AUDITED_GROUP)
    return ApiWorld(kube, namespace, user, kubeconfig, kube.plane.audit_log)
