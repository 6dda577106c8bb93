"""The External Metrics API (`external.metrics.k8s.io/v1beta1`) over HTTPS, answered from the DecisionStore.

Wire contract (DESIGN §3.5; research k8s-metrics-keda-hpa §1):

- `GET /apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/{metric}?labelSelector=…` →
  `ExternalMetricValueList`, one item per VariantAutoscaling in `{ns}` whose labels match the selector:
  `metricName`, `metricLabels {variant_name, model_id, accelerator_type}`, `timestamp` (RFC 3339, when
  the engine made the decision), `value` (canonical Quantity). Metrics: `wva_desired_replicas`,
  `wva_current_replicas`, `wva_desired_ratio`. The HPA sends `variant_name=<VA>`; the full selector
  grammar works (`adapter.servers.selector`).
- Known metric, nothing matches → 200 with `"items": []`. That is what the reference provider of
  kubernetes-sigs/custom-metrics-apiserver and prometheus-adapter return; the HPA then reports
  "no metrics returned from external metrics API" and holds its replicas, exactly as for a 404, but a
  `kubectl get --raw` user sees a well-formed empty answer instead of an error. Pinned by a test.
- Discovery: `/apis` (APIGroupList; the aggregator asks for aggregated discovery first and falls back to
  this), `/apis/external.metrics.k8s.io` (APIGroup), `/apis/external.metrics.k8s.io/v1beta1`
  (APIResourceList: the three metrics, namespaced, verbs `get`; never empty, see kube #83332).
- `/openapi/v2`, `/openapi/v3` → 404: kube-aggregator's OpenAPI downloaders treat 404 as "this server
  publishes no spec" and skip it quietly, which beats a hand-written spec that could clash in the merge.
- `/healthz`, `/livez`, `/readyz` → 200 `ok`, no authentication (kubelet probes carry no identity).
- Errors are `metav1.Status` JSON: 400 bad selector, 401 no trusted identity, 403 denied, 404 unknown
  metric or path, 405 other verbs, 500 anything unexpected (logged; never aiohttp's bare page).

Request path: authenticate (requestheader, then bearer tokens: see `adapter.servers.auth`) → authorize
(`system:masters` always allowed, then the Authorizer; SAR verb `list`, resource = the metric, decisions cached
with a TTL by `CachingAuthorizer`) → answer from memory. No I/O beyond the (cached) reviews. No web.Application
and no middleware: aiohttp's low-level server calls `_ExternalMetricsAPI.__call__`, which routes with a dict and
one regular expression to a wrapper per route that does all of that and maps every error to a Status. The steady
state awaits nothing: the verified client certificate is read once per connection, the identity headers are parsed
again only when a request's header lines differ from the last ones vouched for on that connection
(`RequestHeaderAuthenticator.authenticate_on`), and a cached authorization answers synchronously. Bodies are
encoded once per request target and sent as they are until the store is written again (`DecisionReader.writes`:
any publish invalidates them), so a request costs one integer comparison on top of routing
(tests/servers/em_bench.py measures it against a bare handler).
"""

from __future__ import annotations

import json
import logging
import re
import time
import weakref
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from adapter.config.names import LABEL_RULE, is_dns1123_label
from adapter.domain.decision import VariantDecision
from adapter.domain.errors import BadRequest, Forbidden, MethodNotAllowed, NotFound, ServeError, Unauthorized
from adapter.domain.ids import VariantKey
from adapter.domain.text import plain, quote
from adapter.domain.timefmt import format_rfc3339
from adapter.servers.auth import (
    Authenticator,
    Authorizer,
    CachingAuthorizer,
    IdentityMemo,
    PeerCert,
    RequestAttributes,
    RequestHeaderAuthenticator,
    UnionAuthenticator,
    UserInfo,
)
from adapter.servers.gate import Gate, GateLimits, SslContext
from adapter.servers.quantity import format_quantity
from adapter.servers.selector import Selector, parse_selector
from adapter.servers.served import ServedMetric
from adapter.store.decisions import DecisionReader, StoredDecision

__all__ = [
    "ANONYMOUS",
    "GROUP",
    "GROUP_VERSION",
    "HEALTH_PATHS",
    "LABEL_ACCELERATOR",
    "LABEL_MODEL",
    "LABEL_VARIANT",
    "VERSION",
    "ExternalMetricsHandler",
    "RequestObserver",
    "RunningServer",
    "build_external_metrics_app",
    "start_https_server",
    "status_body",
]

_log = logging.getLogger(__name__)

GROUP: Final = "external.metrics.k8s.io"
VERSION: Final = "v1beta1"
GROUP_VERSION: Final = f"{GROUP}/{VERSION}"
LABEL_VARIANT: Final = "variant_name"
LABEL_MODEL: Final = "model_id"
LABEL_ACCELERATOR: Final = "accelerator_type"
HEALTH_PATHS: Final = frozenset({"/healthz", "/livez", "/readyz"})
ANONYMOUS: Final = UserInfo(name="system:anonymous", groups=("system:unauthenticated",))
"""Who a request is when authentication is disabled (the demo): what kube-apiserver calls anonymous."""

_NAMESPACES_PREFIX: Final = f"/apis/{GROUP_VERSION}/namespaces/"
_METRIC_PATH: Final = re.compile(re.escape(_NAMESPACES_PREFIX) + r"([^{}/]+)/([^{}/]+)")
"""`…/namespaces/{namespace}/{metric}` matched as aiohttp's router matches a dynamic route: on `path_safe` (the
decoded path with `%2F` and `%25` kept), each part one segment without braces, then `_unquote_path_safe`."""
_ENDPOINTS: Final = {
    "metric": "metric",
    "apis": "discovery",
    "group": "discovery",
    "resources": "discovery",
    "healthz": "health",
    "livez": "health",
    "readyz": "health",
    "openapi-v2": "openapi",
    "openapi-v3": "openapi",
}
"""Route name → the `endpoint` an observer sees (few values, so a metric label stays low-cardinality)."""

RequestObserver = Callable[[str, int, float], None]
"""`observer(endpoint, http_status, duration_s)`, called once per request."""
_Handler = Callable[[web.BaseRequest], web.StreamResponse]
"""A route's answer; raises ServeError (mapped to a Status by `_ExternalMetricsAPI.route`)."""
_Route = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]
ExternalMetricsHandler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]
"""What `build_external_metrics_app` returns: a low-level handler for `aiohttp.web.Server` (no Application)."""
_READ_METHODS: Final = frozenset({"GET", "HEAD"})
_JSON: Final = "application/json"


_REASONS: Final = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
"""HTTP status → metav1.StatusReason (k8s.io/apimachinery `metav1.StatusReason*`)."""

_RESOURCE_VERBS: Final = {
    "GET": "list",
    "HEAD": "list",
    "POST": "create",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "deletecollection",
}
"""k8s.io/apiserver RequestInfo verbs for a collection path (a metric has no object name)."""


def _dumps(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def status_body(
    *, code: int, message: str, reason: str | None = None, details: Mapping[str, Any] | None = None
) -> bytes:
    """A `metav1.Status` failure document, as kube-apiserver writes it."""
    document: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": _REASONS.get(code, "") if reason is None else reason,
    }
    if details:
        document["details"] = dict(details)
    document["code"] = code
    return _dumps(document)


def _status_response(
    *, code: int, message: str, reason: str | None = None, details: Mapping[str, Any] | None = None
) -> web.Response:
    return web.Response(
        status=code,
        body=status_body(code=code, message=message, reason=reason, details=details),
        content_type=_JSON,
    )


def _discovery_documents() -> tuple[bytes, bytes, bytes]:
    """APIGroupList, APIGroup and APIResourceList, as custom-metrics-apiserver serves them."""
    version = {"groupVersion": GROUP_VERSION, "version": VERSION}
    group_entry = {"name": GROUP, "versions": [version], "preferredVersion": version}
    group_list = {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group_entry]}
    group = {"kind": "APIGroup", "apiVersion": "v1", **group_entry}
    resources = {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GROUP_VERSION,
        "resources": [
            {
                "name": metric.value,
                "singularName": "",
                "namespaced": True,
                "kind": "ExternalMetricValueList",
                "verbs": ["get"],
            }
            for metric in ServedMetric
        ],
    }
    return _dumps(group_list), _dumps(group), _dumps(resources)


class _Connection:
    """What the requests of one TLS connection share: the verified client certificate, read once (`getpeercert()`
    builds a new dict on every call and cannot change on a connection: see `adapter.servers.tls`), and the
    identity the front proxy last vouched for on it (`IdentityMemo`)."""

    __slots__ = ("identity", "peer_cert")

    def __init__(self, peer_cert: PeerCert | None) -> None:
        self.peer_cert = peer_cert
        self.identity = IdentityMemo()


@dataclass(frozen=True, slots=True)
class _Rendered:
    """A rendered list body and the store's write count it was rendered at (the cache's validity: any write,
    a publish included, invalidates it, so the steady state costs one integer comparison per request)."""

    writes: int
    body: bytes


def _labels(decision: VariantDecision) -> dict[str, str]:
    return {
        LABEL_VARIANT: decision.key.name,
        LABEL_MODEL: decision.model_id,
        LABEL_ACCELERATOR: decision.accelerator,
    }


class _ExternalMetricsAPI:
    """State and handlers of one application. Single-threaded (the event loop), so no locks."""

    def __init__(
        self,
        reader: DecisionReader,
        *,
        authenticator: Authenticator | None,
        authorizer: Authorizer | None,
        always_allow_groups: Collection[str],
        cache_entries: int,
        observer: RequestObserver | None,
        clock: Callable[[], float],
    ) -> None:
        self._reader = reader
        self._observer = observer
        self._clock = clock
        self._authenticator = authenticator
        self._authorizer = authorizer
        self._always_allow = frozenset(always_allow_groups)
        self._auth_enabled = authenticator is not None or authorizer is not None
        self._cache_entries = cache_entries
        self._selectors: dict[str, Selector] = {}
        self._rendered: dict[str, _Rendered] = {}
        """By the request target as received (`raw_path`: path and query, undecoded): found before anything is
        decoded; two spellings of one request are two entries, each rendered from its own decoded form."""
        self._attributes: dict[tuple[str, str], RequestAttributes] = {}
        """By (method, raw target), for the same reason; equal attributes still share one authorization entry."""
        self._connections: weakref.WeakKeyDictionary[object, _Connection] = weakref.WeakKeyDictionary()
        """By transport: what one TLS connection's requests share (it carries many of the aggregator's)."""
        self._front_proxy = _front_proxy_of(authenticator)
        self._routes: dict[str, _Route] = {}
        self._metric_route: _Route = self._unrouted
        self._other_route: _Route = self._unrouted
        self._cached_decision = authorizer.cached if isinstance(authorizer, CachingAuthorizer) else None
        self._group_list, self._group, self._resource_list = _discovery_documents()

    # --- the request path: identity, permission, errors, telemetry --------------------------------------------

    def route(self, endpoint: str, handler: _Handler, *, guarded: bool, methods: frozenset[str] | None) -> _Route:
        """The aiohttp handler of one route: authenticate and authorize (when `guarded`), refuse other methods
        than `methods` (None: any), answer with `handler`, map every error to a Status, tell the observer.

        Why a wrapper per route and no middleware: aiohttp runs a middleware through two extra coroutine
        layers per request (its own `_fix_request_current_app` and ours) plus a handler lookup; with the scan of
        the identity headers that made most of the ~20 µs a cached answer cost over a bare handler
        (docs/benchmarks/scale.md §5). The dispatcher (`__call__`) calls this coroutine directly, and the
        endpoint the observer sees is bound here, once. Every route, the catch-all included, goes through it, so
        no request escapes the mapping to a Status.
        """
        observer = self._observer
        clock = self._clock
        guarded = guarded and self._auth_enabled
        allow = "" if methods is None else ",".join(sorted(methods))

        async def serve(request: web.BaseRequest) -> web.StreamResponse:
            started_s = clock() if observer is not None else 0.0
            connection = self._connection(request)
            seen_as = endpoint
            response: web.StreamResponse
            try:
                if guarded and not self._allowed_quickly(request, connection):
                    await self._check_access(request, connection)
                if methods is not None and request.method not in methods:
                    seen_as = "other"  # no route answered it (what the observer saw from aiohttp's router)
                    raise MethodNotAllowed(
                        "the server does not allow this method on the requested resource", allow=allow
                    )
                response = handler(request)
            except ServeError as exc:
                response = _error_response(exc)
            except web.HTTPException as exc:
                response = _http_exception_response(exc)
            except Exception:
                _log.exception("external metrics: unexpected error serving %s %s", request.method, request.path_qs)
                response = _status_response(
                    code=500,
                    message="Internal error occurred: the adapter failed to serve this request (see its log)",
                )
            if observer is not None:
                _observe(observer, seen_as, response.status, clock() - started_s)
            if connection.peer_cert is None:
                # An unauthenticated connection gets one request (adapter.servers.gate), so that every request
                # it sends passes the gate's checks; the aggregator's (a verified client certificate) stay alive.
                response.force_close()
            return response

        return serve

    def install(self, routes: Mapping[str, _Route], *, metric: _Route, other: _Route) -> None:
        """The routes `__call__` dispatches to: exact paths, the metric path, and everything else."""
        self._routes = dict(routes)
        self._metric_route = metric
        self._other_route = other

    def __call__(self, request: web.BaseRequest) -> Awaitable[web.StreamResponse]:
        """The low-level handler (`aiohttp.web.Server`): route by the decoded path, as aiohttp's router would.

        Why not `web.Application`: its request path runs the router's index walk, builds and freezes match info
        and looks up the handler, about 5 µs of the ~80 µs a cached answer costs (py-spy, tests/servers/em_bench.py);
        this API has eight fixed paths and one pattern, so a dict and one regular expression do the same.
        """
        path = request.rel_url.path_safe
        route = self._routes.get(path)
        if route is None:
            route = self._metric_route if _METRIC_PATH.fullmatch(path) else self._other_route
        return route(request)

    async def _unrouted(self, request: web.BaseRequest) -> web.StreamResponse:
        del request
        raise RuntimeError("external metrics: no routes installed")  # a bug in build_external_metrics_app

    def _connection(self, request: web.BaseRequest) -> _Connection:
        transport = request.transport
        if transport is None:  # the connection is gone already; nothing to share
            return _Connection(None)
        try:
            return self._connections[transport]
        except KeyError:
            connection = _Connection(transport.get_extra_info("peercert"))
            self._connections[transport] = connection
            return connection

    def _allowed_quickly(self, request: web.BaseRequest, connection: _Connection) -> bool:
        """The steady state without a coroutine: the front proxy vouches synchronously (on a repeated header set,
        from the connection's memo) and the authorization cache holds a fresh decision (a deny raises Forbidden
        here). False: take the awaited `_check_access`, which asks again from the start."""
        front_proxy = self._front_proxy
        if front_proxy is None:
            return False
        user = front_proxy.authenticate_on(
            connection.identity,
            peer_cert=connection.peer_cert,
            raw_headers=request.raw_headers,
            headers=request.headers,
        )
        if user is None:
            return False
        if self._authorizer is None or not self._always_allow.isdisjoint(user.groups):
            return True
        attributes = self._attributes.get((request.method, request.raw_path))
        cached = self._cached_decision
        if attributes is None or cached is None:
            return False
        decision = cached(user, attributes)  # counted as a hit when fresh: ask it once per request
        if decision is None:
            return False
        if not decision:
            raise _forbidden(user, attributes)
        return True

    async def _check_access(self, request: web.BaseRequest, connection: _Connection) -> None:
        """Authenticate, then authorize; raises Unauthorized, Forbidden or BadRequest (a namespace no object can
        live in). The path for everything `_allowed_quickly` could not settle."""
        user = ANONYMOUS
        authenticator = self._authenticator
        if authenticator is not None:
            peer_cert = connection.peer_cert
            headers = request.headers
            front_proxy = self._front_proxy
            authenticated = (
                None
                if front_proxy is None
                else front_proxy.authenticate_on(
                    connection.identity, peer_cert=peer_cert, raw_headers=request.raw_headers, headers=headers
                )
            )
            if authenticated is None:
                authenticated = await authenticator.authenticate(peer_cert=peer_cert, headers=headers)
            if authenticated is None:
                raise Unauthorized("Unauthorized")
            user = authenticated
        authorizer = self._authorizer
        if authorizer is None or not self._always_allow.isdisjoint(user.groups):
            return
        method, target = request.method, request.raw_path
        attributes = self._attributes.get((method, target))
        if attributes is None:
            attributes = _attributes(method, request.path)  # BadRequest for a namespace no object can live in
            self._remember(self._attributes, (method, target), attributes)
        cached = self._cached_decision
        allowed = None if cached is None else cached(user, attributes)
        if allowed is None:
            allowed = await authorizer.authorize(user, attributes)
        if not allowed:
            raise _forbidden(user, attributes)

    # --- handlers: synchronous (none waits for anything), raising ServeError --------------------------------

    def health(self, request: web.BaseRequest) -> web.Response:
        del request
        return web.Response(body=b"ok", content_type="text/plain")

    def group_list(self, request: web.BaseRequest) -> web.Response:
        del request
        return web.Response(body=self._group_list, content_type=_JSON)

    def group(self, request: web.BaseRequest) -> web.Response:
        del request
        return web.Response(body=self._group, content_type=_JSON)

    def resource_list(self, request: web.BaseRequest) -> web.Response:
        del request
        return web.Response(body=self._resource_list, content_type=_JSON)

    def openapi(self, request: web.BaseRequest) -> web.Response:
        raise NotFound(
            f"{plain(request.path, 40)}: this server publishes no OpenAPI document "
            "(kube-aggregator treats 404 as 'no spec' and skips it)"
        )

    def not_found(self, request: web.BaseRequest) -> web.Response:
        del request
        raise NotFound("the server could not find the requested resource")

    def metric(self, request: web.BaseRequest) -> web.Response:
        # Hot path: the HPA repeats the same few requests; the raw target keys the rendered body, valid until the
        # store is written (read the count before rendering: a write meanwhile re-renders next time).
        target = request.raw_path
        writes = self._reader.writes
        cached = self._rendered.get(target)
        if cached is None or cached.writes != writes:
            matched = _METRIC_PATH.fullmatch(request.rel_url.path_safe)
            if matched is None:  # not reached: the dispatcher sends only matching paths here
                raise NotFound("the server could not find the requested resource")
            namespace, metric_name = (_unquote_path_safe(part) for part in matched.groups())
            _check_namespace(namespace)
            try:
                metric = ServedMetric(metric_name)
            except ValueError:
                raise NotFound(f"the server could not find the metric {plain(metric_name, 80)} for {GROUP}") from None
            cached = _Rendered(writes, self._render(namespace, metric, request.query.get("labelSelector", "")))
            self._remember(self._rendered, target, cached)
        return web.Response(body=cached.body, content_type=_JSON)

    # --- rendering ---------------------------------------------------------------------------------------

    def _selector(self, raw: str) -> Selector:
        selector = self._selectors.get(raw)
        if selector is None:
            selector = parse_selector(raw)  # raises BadRequest; invalid input is never cached
            self._remember(self._selectors, raw, selector)
        return selector

    def _fetch(self, namespace: str, pinned: tuple[VariantKey, ...] | None) -> list[StoredDecision]:
        if pinned is None:
            return self._reader.list(namespace)
        get = self._reader.get
        return [entry for entry in map(get, pinned) if entry is not None]

    def _render(self, namespace: str, metric: ServedMetric, raw_selector: str) -> bytes:
        selector = self._selector(raw_selector)
        names = selector.required_values(LABEL_VARIANT)
        pinned = None if names is None else tuple(VariantKey(namespace, name) for name in sorted(names))
        value_of = metric.value_of
        items = [
            {
                "metricName": metric.value,
                "metricLabels": labels,
                "timestamp": format_rfc3339(entry.decided_at_s),
                "value": format_quantity(value),
            }
            for entry in self._fetch(namespace, pinned)
            if selector.matches(labels := _labels(entry.decision)) and (value := value_of(entry.decision)) is not None
        ]
        return _dumps({"kind": "ExternalMetricValueList", "apiVersion": GROUP_VERSION, "metadata": {}, "items": items})

    def _remember(self, cache: dict[Any, Any], key: Any, value: Any) -> None:
        """Bounded insert: a client cycling through random selectors cannot grow memory without limit."""
        if len(cache) >= self._cache_entries:
            del cache[next(iter(cache))]
        cache[key] = value


def _unquote_path_safe(part: str) -> str:
    """A part of `path_safe` decoded the rest of the way (`%2F` and `%25`), as aiohttp does for match info."""
    return part if "%" not in part else part.replace("%2F", "/").replace("%25", "%")


def _check_namespace(namespace: str) -> None:
    if not is_dns1123_label(namespace):
        raise BadRequest(f"namespace {quote(namespace, 80)} is invalid: {LABEL_RULE}")


def _front_proxy_of(authenticator: Authenticator | None) -> RequestHeaderAuthenticator | None:
    """The front-proxy authenticator that answers first and synchronously, if the chain starts with one (a
    union tries it first, and the first that vouches wins, so its answer is the union's)."""
    if isinstance(authenticator, RequestHeaderAuthenticator):
        return authenticator
    if isinstance(authenticator, UnionAuthenticator) and isinstance(
        authenticator.authenticators[0], RequestHeaderAuthenticator
    ):
        return authenticator.authenticators[0]
    return None


def _observe(observer: RequestObserver, endpoint: str, status: int, duration_s: float) -> None:
    try:
        observer(endpoint, status, duration_s)
    except Exception:  # a metrics bug must not fail the HPA's request
        _log.exception("external metrics: the request observer failed")


def _error_response(exc: ServeError) -> web.Response:
    details = getattr(exc, "details", None)
    response = _status_response(code=exc.http_status, message=str(exc), reason=exc.k8s_reason, details=details)
    if isinstance(exc, MethodNotAllowed):
        response.headers["Allow"] = exc.allow
    return response


def _http_exception_response(exc: web.HTTPException) -> web.StreamResponse:
    """An aiohttp HTTPException a handler let through, as a Status (none of ours raises one: a safety net)."""
    code = exc.status
    if code < 400:
        raise exc  # redirects and the like are not errors: let aiohttp send them as they are
    response = _status_response(code=code, message=exc.reason or f"HTTP {code}")
    allow = exc.headers.get("Allow")
    if allow:
        response.headers["Allow"] = allow
    return response


def _attributes(method: str, path: str) -> RequestAttributes:
    """SubjectAccessReview attributes of a request, following k8s.io/apiserver's RequestInfo. A namespace that
    is not a DNS-1123 label is a BadRequest before anyone is asked about it."""
    if path.startswith(_NAMESPACES_PREFIX):
        parts = path[len(_NAMESPACES_PREFIX) :].split("/")
        if len(parts) == 2 and all(parts):
            _check_namespace(parts[0])
            return RequestAttributes(
                verb=_RESOURCE_VERBS.get(method, method.lower()),
                path=path,
                resource_request=True,
                namespace=parts[0],
                api_group=GROUP,
                api_version=VERSION,
                resource=parts[1],
            )
    return RequestAttributes(verb=method.lower(), path=path)


class _ForbiddenError(Forbidden):
    def __init__(self, message: str, details: Mapping[str, Any] | None) -> None:
        super().__init__(message)
        self.details = details


def _quoted(text: str, limit: int = 120) -> str:
    """Go's `%q` for the names that appear in messages: double quotes, JSON escapes, and every character that
    is not printable (U+202E, zero-width spaces …) as `\\uXXXX`; cut to `limit` characters (a user name comes
    from a header and may be 8 kB)."""
    shown = text if len(text) <= limit else text[:limit]
    quoted = json.dumps(shown, ensure_ascii=False)
    if not quoted.isprintable():
        quoted = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in quoted)
    return quoted if len(text) <= limit else f"{quoted}… ({len(text)} chars)"


def _forbidden(user: UserInfo, attributes: RequestAttributes) -> Forbidden:
    """kube-apiserver's wording, so `kubectl` and HPA events read the same as for any other API."""
    if attributes.resource_request:
        qualified = f"{attributes.resource}.{attributes.api_group}"
        message = (
            f"{qualified} is forbidden: User {_quoted(user.name)} cannot {attributes.verb} resource "
            f"{_quoted(attributes.resource)} in API group {_quoted(attributes.api_group)} in the namespace "
            f"{_quoted(attributes.namespace)}"
        )
        return _ForbiddenError(message, {"group": attributes.api_group, "kind": attributes.resource})
    message = f"forbidden: User {_quoted(user.name)} cannot {attributes.verb} path {_quoted(attributes.path)}"
    return _ForbiddenError(message, None)


def build_external_metrics_app(
    reader: DecisionReader,
    *,
    authenticator: Authenticator | None = None,
    authorizer: Authorizer | None = None,
    always_allow_groups: Collection[str] = ("system:masters",),
    cache_entries: int = 4096,
    observer: RequestObserver | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> ExternalMetricsHandler:
    """The low-level aiohttp handler (`aiohttp.web.Server`'s) serving the External Metrics API from `reader`; serve
    it with `start_https_server`.

    `authenticator=None` disables authentication (every request is `ANONYMOUS`; for the demo and tests
    only). `authorizer=None` disables authorization. Members of `always_allow_groups` skip the authorizer
    (Go's default: `system:masters`, which is how the aggregator's availability probe is let in).
    `cache_entries` bounds the parsed-selector and rendered-body caches. `observer(endpoint, status,
    duration_s)` is called after every request (endpoint ∈ metric, discovery, health, openapi, other), timed
    with `clock` (seconds, monotonic): the hook for a latency histogram on our own /metrics.
    """
    if cache_entries < 1:
        raise ValueError(f"cache_entries must be ≥ 1, got {cache_entries}")
    api = _ExternalMetricsAPI(
        reader,
        authenticator=authenticator,
        authorizer=authorizer,
        always_allow_groups=always_allow_groups,
        cache_entries=cache_entries,
        observer=observer,
        clock=clock,
    )
    routes: list[tuple[str, str, _Handler]] = [
        *((path, path.strip("/"), api.health) for path in sorted(HEALTH_PATHS)),
        ("/apis", "apis", api.group_list),
        (f"/apis/{GROUP}", "group", api.group),
        (f"/apis/{GROUP_VERSION}", "resources", api.resource_list),
        (f"/apis/{GROUP_VERSION}/namespaces/{{namespace}}/{{metric}}", "metric", api.metric),
        ("/openapi/v2", "openapi-v2", api.openapi),
        ("/openapi/v3", "openapi-v3", api.openapi),
    ]
    served = {
        path: api.route(_ENDPOINTS[name], handler, guarded=path not in HEALTH_PATHS, methods=_READ_METHODS)
        for path, name, handler in routes
    }
    metric = served.pop(f"/apis/{GROUP_VERSION}/namespaces/{{namespace}}/{{metric}}")
    # Any other path is a 404 Status after authentication, as in kube-apiserver (an anonymous caller learns
    # nothing about which paths exist).
    api.install(served, metric=metric, other=api.route("other", api.not_found, guarded=True, methods=None))
    return api


@dataclass(frozen=True, slots=True)
class RunningServer:
    """A started HTTPS server; `port` is the bound port (useful when asked for port 0); `gate` its front door
    (adapter.servers.gate: limits and counters)."""

    runner: web.BaseRunner
    host: str
    port: int
    gate: Gate

    async def close(self) -> None:
        """Stop listening, drop connections still at the gate, let requests in flight finish (at most the
        runner's shutdown timeout), close the rest."""
        self.gate.close()
        await self.runner.cleanup()


def _render_refusal(status: int, message: str) -> bytes:
    reason = {408: "Timeout", 413: "RequestEntityTooLarge", 431: "BadRequest"}  # metav1 has no 431 reason
    return status_body(code=status, message=message, reason=reason.get(status))


async def start_https_server(
    app: web.Application | ExternalMetricsHandler,
    *,
    host: str,
    port: int,
    ssl_context: SslContext,
    shutdown_timeout_s: float = 5.0,
    access_log: bool = False,
    limits: GateLimits | None = None,
) -> RunningServer:
    """Serve `app` over TLS on host:port (0 = ephemeral), behind the gate (adapter.servers.gate: handshake and
    head deadlines, the cap on unauthenticated connections, a Status for every refusal). `ssl_context` may be
    a function returning the current context (read at each handshake). Access logging is off by default: at
    HPA request rates it costs more than the request itself; latency belongs in a histogram (`observer`)."""
    limits = limits or GateLimits()
    handler_options = {"access_log": _log if access_log else None, **limits.aiohttp_kwargs()}
    runner: web.BaseRunner
    if isinstance(app, web.Application):
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=shutdown_timeout_s, **handler_options)
    else:
        runner = web.ServerRunner(
            web.Server(app, **handler_options), handle_signals=False, shutdown_timeout=shutdown_timeout_s
        )
    await runner.setup()
    server = runner.server
    assert server is not None  # set by setup()
    gate = Gate(server, ssl_context, _render_refusal, limits)
    try:
        listening = await gate.start(host, port)
    except BaseException:
        await runner.cleanup()
        raise
    bound_port = int(listening.sockets[0].getsockname()[1]) if listening.sockets else port
    return RunningServer(runner, host, bound_port, gate)
