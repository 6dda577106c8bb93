"""Delegated authorization (SubjectAccessReview) and the front-proxy trust settings, read from the cluster.

`SubjectAccessReviewAuthorizer` satisfies `adapter.servers.auth.Authorizer` structurally: adapter.k8s may
not import adapter.servers (they are sibling layers), so the user and request types are described here by
the Protocols `User` and `Request`, which `adapter.servers.auth.UserInfo` / `RequestAttributes` match.
Wrap it in `adapter.servers.auth.CachingAuthorizer` (10 s allow/deny caches, as k8s.io/apiserver does).

`load_requestheader_config(client, parse)` reads `kube-system/extension-apiserver-authentication` and
hands its `data` to `parse` (pass `adapter.servers.auth.requestheader_config_from_configmap`), so this
module needs no type from adapter.servers either. `watch_requestheader_config` follows the ConfigMap
(front-proxy CA rotation, allowed names), as the Go libraries' dynamic CA controllers do; `serve` runs it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol, TypeVar

from adapter.domain.errors import AdapterError, KubeError
from adapter.k8s.client import KubeClient
from adapter.k8s.configwatch import watch_configmap
from adapter.k8s.objects import ConfigMapRecord
from adapter.k8s.reflector import ReflectorOptions
from adapter.k8s.resources import CONFIGMAPS, SUBJECT_ACCESS_REVIEWS

__all__ = [
    "REQUESTHEADER_CONFIGMAP",
    "Request",
    "SubjectAccessReviewAuthorizer",
    "User",
    "load_requestheader_config",
    "subject_access_review",
    "watch_requestheader_config",
]

log = logging.getLogger(__name__)

REQUESTHEADER_CONFIGMAP: Final = ("kube-system", "extension-apiserver-authentication")

T = TypeVar("T")


class User(Protocol):
    """What SubjectAccessReview needs of an authenticated caller (`adapter.servers.auth.UserInfo`)."""

    @property
    def name(self) -> str: ...

    @property
    def uid(self) -> str: ...

    @property
    def groups(self) -> tuple[str, ...]: ...

    def extra_dict(self) -> dict[str, list[str]]: ...


class Request(Protocol):
    """What a request does (`adapter.servers.auth.RequestAttributes`)."""

    @property
    def verb(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def resource_request(self) -> bool: ...

    @property
    def namespace(self) -> str: ...

    @property
    def api_group(self) -> str: ...

    @property
    def api_version(self) -> str: ...

    @property
    def resource(self) -> str: ...

    @property
    def name(self) -> str: ...


def subject_access_review(user: User, attributes: Request) -> dict[str, Any]:
    """The `authorization.k8s.io/v1` SubjectAccessReview body for one request.

    Resource requests (a metric: group external.metrics.k8s.io, version v1beta1, resource = the metric
    name, the namespace, the verb the server derived) go in `resourceAttributes`; anything else
    (discovery, /openapi) in `nonResourceAttributes {path, verb}`.
    """
    spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups)}
    if user.uid:
        spec["uid"] = user.uid
    extra = user.extra_dict()
    if extra:
        spec["extra"] = extra
    if attributes.resource_request:
        resource = {
            "namespace": attributes.namespace,
            "verb": attributes.verb,
            "group": attributes.api_group,
            "version": attributes.api_version,
            "resource": attributes.resource,
        }
        if attributes.name:
            resource["name"] = attributes.name
        spec["resourceAttributes"] = {k: v for k, v in resource.items() if v}
    else:
        spec["nonResourceAttributes"] = {"path": attributes.path, "verb": attributes.verb}
    return {"apiVersion": SUBJECT_ACCESS_REVIEWS.api_version, "kind": SUBJECT_ACCESS_REVIEWS.kind, "spec": spec}


class SubjectAccessReviewAuthorizer:
    """`await authorize(user, attributes) -> bool`: POST a SubjectAccessReview; allowed iff `status.allowed`.

    A failure to decide (API unreachable, our service account lacks `system:auth-delegator`) raises the
    KubeError, never a guess: the server answers 500 for it, as k8s.io/apiserver does. `timeout_s`
    bounds one review (Go's default: 10 s).
    """

    def __init__(self, client: KubeClient, *, timeout_s: float = 10.0) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self.reviews = 0

    async def authorize(self, user: User, attributes: Request) -> bool:
        self.reviews += 1
        body = subject_access_review(user, attributes)
        try:
            async with asyncio.timeout(self._timeout_s):
                review = await self._client.create(SUBJECT_ACCESS_REVIEWS, body)
        except TimeoutError as exc:
            raise KubeError(f"SubjectAccessReview for {user.name}: no answer within {self._timeout_s} s") from exc
        status = review.get("status")
        return isinstance(status, Mapping) and status.get("allowed") is True


async def load_requestheader_config(client: KubeClient, parse: Callable[[Mapping[str, str]], T]) -> T:
    """Read `kube-system/extension-apiserver-authentication` and return `parse(data)`.

    Raises KubeNotFound when the ConfigMap does not exist (a cluster without an aggregation layer), other
    KubeErrors as they come (reading it needs the `extension-apiserver-authentication-reader` Role), and
    whatever `parse` raises for bad content (ConfigError from the servers' parser).
    """
    namespace, name = REQUESTHEADER_CONFIGMAP
    configmap = await client.get(CONFIGMAPS, name, namespace=namespace)
    data = configmap.get("data")
    return parse({str(k): str(v) for k, v in data.items()} if isinstance(data, Mapping) else {})


async def watch_requestheader_config(
    client: KubeClient,
    parse: Callable[[Mapping[str, str]], T],
    on_change: Callable[[T], None],
    *,
    options: ReflectorOptions | None = None,
) -> None:
    """Run until cancelled: call `on_change(parse(data))` whenever the ConfigMap's data changes (the first
    time included). Content that `parse` rejects, and a deleted ConfigMap (kube-apiserver republishes it at
    once), are logged and skipped, so a bad edit keeps the last good configuration; the watch itself retries
    with backoff like every reflector. `serve` applies each configuration to the authenticator (allowed
    names, header names) and to the TLS context (the client CA) at once, without a restart."""
    namespace, name = REQUESTHEADER_CONFIGMAP

    def changed(record: ConfigMapRecord | None) -> None:
        if record is None:
            log.warning("ConfigMap %s/%s deleted; keeping the previous requestheader configuration", namespace, name)
            return
        try:
            config = parse(record.data)
        except AdapterError as exc:
            log.error("ConfigMap %s/%s: %s; keeping the previous requestheader configuration", namespace, name, exc)
            return
        on_change(config)

    await watch_configmap(client, namespace, name, changed, options=options)
