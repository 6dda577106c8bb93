"""Authentication (front-proxy requestheader and bearer tokens) and authorization for the External Metrics API.

How a request reaches us (research k8s-metrics-keda-hpa §1.9–1.10): the HPA controller calls
kube-apiserver, which authenticates and authorizes it, then proxies the request to us over mTLS with its
front-proxy client certificate and passes the caller's identity in `X-Remote-User`, `X-Remote-Group`
(repeated), `X-Remote-Extra-<key>` and `X-Remote-Uid` headers. A client may also call us directly (a
`kubectl get --raw` through a port-forward, a Prometheus or a KEDA pod with its ServiceAccount token) with
`Authorization: Bearer <token>`. We must, as k8s.io/apiserver's delegating authenticator does (front proxy
first, then the token; the first that vouches wins):

1. accept the identity headers only on a connection whose client certificate chains to the requestheader
   client CA (TLS does that: see `adapter.servers.tls`) and, if `allowed_names` is non-empty, whose
   subject CN is one of them; otherwise the headers are untrusted;
2. otherwise accept a bearer token that kube-apiserver vouches for in a TokenReview
   (`authentication.k8s.io/v1`), cached for a bounded time (allowed and denied answers alike);
3. answer 401 when neither vouches, and a 401 that says so when the TokenReview itself could not be made;
4. authorize the identity with a SubjectAccessReview (delegated authorization).

`RequestHeaderAuthenticator` does 1, `BearerTokenAuthenticator` 2 and 3, `UnionAuthenticator` chains
them. `TokenReviewer` and `Authorizer` are the ports to Kubernetes: their implementations live in
`adapter.k8s` (the only package that talks to it). `CachingAuthorizer` caches decisions (Go's delegating
authorizer: allow and deny for 10 s each); `AllowAll` serves the demo and tests. Health paths skip every
step; members of `system:masters` are always allowed (the aggregator's availability probe runs as that
group) — both as in k8s.io/apiserver.

Configuration comes from flags (construct `RequestHeaderConfig` directly) or from the
`kube-system/extension-apiserver-authentication` ConfigMap (`requestheader_config_from_configmap`).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import secrets
import urllib.parse
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from multidict import CIMultiDict, CIMultiDictProxy

from adapter.domain.errors import AdapterError, ConfigError, Unauthorized

__all__ = [
    "AUTHENTICATED_GROUP",
    "AllowAll",
    "Authenticator",
    "Authorizer",
    "BearerTokenAuthenticator",
    "CacheStats",
    "CachingAuthorizer",
    "IdentityMemo",
    "RequestAttributes",
    "RequestHeaderAuthenticator",
    "RequestHeaderConfig",
    "TokenReviewStatus",
    "TokenReviewer",
    "TtlCache",
    "UnionAuthenticator",
    "UserInfo",
    "bearer_token",
    "peer_common_name",
    "requestheader_config_from_configmap",
]

_log = logging.getLogger(__name__)
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

AUTHENTICATED_GROUP = "system:authenticated"
"""Added to every authenticated user, as Go's delegating authenticator does; RBAC's `system:discovery`
grants discovery paths through it."""

PeerCert = Mapping[str, Any]
"""`SSLObject.getpeercert()` of a *verified* client certificate (asyncio's `peercert` extra info)."""


@dataclass(frozen=True, slots=True)
class UserInfo:
    """An authenticated caller. Hashable (tuples only), so it can key an authorization cache."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """`X-Remote-Extra-*` as sorted (key, values) pairs; keys lower-cased and percent-decoded."""
    _hash: int = field(init=False, repr=False, compare=False, default=0)
    """Computed once: the authorization cache hashes (user, attributes) on every request."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.name, self.uid, self.groups, self.extra)))

    def __hash__(self) -> int:
        return self._hash

    def extra_dict(self) -> dict[str, list[str]]:
        """`extra` in the shape SubjectAccessReview's `spec.extra` wants."""
        return {key: list(values) for key, values in self.extra}


@dataclass(frozen=True, slots=True)
class RequestAttributes:
    """What a request does, in SubjectAccessReview terms (k8s.io/apiserver `RequestInfo`).

    Resource requests (`resource_request=True`) map to `spec.resourceAttributes {namespace, verb, group,
    version, resource, name}`; anything else (discovery, openapi) to `spec.nonResourceAttributes {path,
    verb}`. A GET of a metric is verb `list` (a collection: the metric name is the *resource*).
    """

    verb: str
    path: str
    resource_request: bool = False
    namespace: str = ""
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    name: str = ""
    _hash: int = field(init=False, repr=False, compare=False, default=0)
    """Computed once: the authorization cache hashes (user, attributes) on every request."""

    def __post_init__(self) -> None:
        fields = (self.verb, self.path, self.resource_request, self.namespace, self.api_group, self.api_version)
        object.__setattr__(self, "_hash", hash((*fields, self.resource, self.name)))

    def __hash__(self) -> int:
        return self._hash


class Authenticator(Protocol):
    """Who is calling? Returns None when this authenticator cannot vouch for the request (→ 401); raises
    `Unauthorized` with a message when it could not find out (→ a 401 that says why)."""

    async def authenticate(self, *, peer_cert: PeerCert | None, headers: Mapping[str, str]) -> UserInfo | None:
        """`headers` is the request's case-insensitive multi-dict (aiohttp `CIMultiDictProxy`)."""
        ...


class Authorizer(Protocol):
    """May `user` do `attributes`? Raise on failure to decide (→ 500, like Go), never return a guess."""

    async def authorize(self, user: UserInfo, attributes: RequestAttributes) -> bool: ...


# --- requestheader authentication --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestHeaderConfig:
    """The front-proxy trust settings. Defaults are kube-apiserver's (and kubeadm's ConfigMap values).

    `client_ca_pem` is the PEM bundle of `--requestheader-client-ca-file`; the TLS context loads it (the
    TLS layer, not this class, verifies the chain). An empty `allowed_names` accepts any certificate the
    CA signed, as Kubernetes does (some managed clusters publish an empty list).
    """

    client_ca_pem: str
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    uid_headers: tuple[str, ...] = ("X-Remote-Uid",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_headers_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)

    def __post_init__(self) -> None:
        if "-----BEGIN CERTIFICATE-----" not in self.client_ca_pem:
            raise ConfigError("requestheader client CA: no PEM certificate in the given bundle")
        if not self.username_headers:
            raise ConfigError("requestheader username headers: at least one header name is required")


_CM_CA = "requestheader-client-ca-file"
_CM_LISTS = {
    "requestheader-allowed-names": "allowed_names",
    "requestheader-username-headers": "username_headers",
    "requestheader-uid-headers": "uid_headers",
    "requestheader-group-headers": "group_headers",
    "requestheader-extra-headers-prefix": "extra_headers_prefixes",
}


def requestheader_config_from_configmap(data: Mapping[str, str]) -> RequestHeaderConfig:
    """Build the config from `kube-system/extension-apiserver-authentication` `.data`.

    List values are JSON string arrays (`'["X-Remote-User"]'`). A key that is absent keeps the default,
    except `requestheader-uid-headers`: clusters older than 1.32 do not publish it and do not send the
    header, so the default (`X-Remote-Uid`) stays harmless. Raises ConfigError naming the key when the CA
    is missing or a list is not a JSON array of strings.
    """
    ca = data.get(_CM_CA, "")
    if not ca.strip():
        raise ConfigError(
            f"ConfigMap kube-system/extension-apiserver-authentication: {_CM_CA!r} is missing or empty; "
            "the cluster has no front-proxy (requestheader) CA, so aggregated requests cannot be authenticated"
        )
    lists: dict[str, tuple[str, ...]] = {}
    for key, attribute in _CM_LISTS.items():
        raw = data.get(key)
        if raw is None:
            continue
        try:
            parsed = json.loads(raw) if raw.strip() else []
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"ConfigMap kube-system/extension-apiserver-authentication: {key!r} is not JSON: {raw!r}"
            ) from exc
        if not isinstance(parsed, list) or not all(isinstance(item, str) for item in parsed):
            raise ConfigError(
                f"ConfigMap kube-system/extension-apiserver-authentication: {key!r} must be a JSON array of "
                f"strings, got {raw!r}"
            )
        lists[attribute] = tuple(item for item in parsed if item)
    return RequestHeaderConfig(
        client_ca_pem=ca,
        allowed_names=lists.get("allowed_names", ()),
        username_headers=lists.get("username_headers") or ("X-Remote-User",),
        uid_headers=lists.get("uid_headers", ("X-Remote-Uid",)),
        group_headers=lists.get("group_headers", ("X-Remote-Group",)),
        extra_headers_prefixes=lists.get("extra_headers_prefixes", ("X-Remote-Extra-",)),
    )


def peer_common_name(peer_cert: PeerCert | None) -> str | None:
    """The subject CN of a verified peer certificate (the last CN, as Go's `pkix.Name` keeps), or None."""
    if not peer_cert:
        return None
    common_name: str | None = None
    for rdn in peer_cert.get("subject", ()):
        for attribute, value in rdn:
            if attribute == "commonName":
                common_name = value
    return common_name


class IdentityMemo:
    """The identity the front proxy last vouched for on one TLS connection, and the raw header lines it came
    from (`RequestHeaderAuthenticator.authenticate_on`). One per connection: the client certificate that made
    the headers trustworthy is the connection's, so a memo never crosses connections."""

    __slots__ = ("generation", "raw_headers", "user")

    def __init__(self) -> None:
        self.raw_headers: tuple[tuple[bytes, bytes], ...] | None = None
        self.user: UserInfo | None = None
        self.generation = -1


class RequestHeaderAuthenticator:
    """Authenticator for requests proxied by kube-apiserver (front-proxy / requestheader).

    It runs on every request, so it is written for speed: header lookups go through the multi-dict's
    C `getall`, one pass finds the extra headers, and the resulting (immutable) UserInfo objects are
    memoized by their raw header values, which also makes the authorization cache's key cheap to hash.
    """

    _MEMO_ENTRIES = 1024

    def __init__(self, config: RequestHeaderConfig) -> None:
        self._config = config
        self._allowed = frozenset(config.allowed_names)
        self._prefixes = tuple(p.lower() for p in config.extra_headers_prefixes)
        self._memo: dict[tuple[Any, ...], UserInfo] = {}
        self._generation = 0
        """Bumped by `update`: an `IdentityMemo` filled under an older config is not used."""

    @property
    def config(self) -> RequestHeaderConfig:
        return self._config

    def update(self, config: RequestHeaderConfig) -> None:
        """Swap in a re-read config (ConfigMap watch). Header names and allowed names apply at once; a new
        CA must also be added to the TLS context (`adapter.servers.tls.add_client_ca`)."""
        self._config = config
        self._allowed = frozenset(config.allowed_names)
        self._prefixes = tuple(p.lower() for p in config.extra_headers_prefixes)
        self._memo = {}
        self._generation += 1

    async def authenticate(self, *, peer_cert: PeerCert | None, headers: Mapping[str, str]) -> UserInfo | None:
        return self.authenticate_sync(peer_cert=peer_cert, headers=headers)

    def authenticate_on(
        self,
        memo: IdentityMemo,
        *,
        peer_cert: PeerCert | None,
        raw_headers: tuple[tuple[bytes, bytes], ...],
        headers: Mapping[str, str],
    ) -> UserInfo | None:
        """`authenticate_sync` for one request of the connection `memo` belongs to, remembering its answer.

        The contract: `memo` is the connection's own (its `peer_cert` is the same for each call), and
        `raw_headers` are this request's header lines as received (aiohttp's `request.raw_headers`). The
        answer is a function of the client certificate, the headers and the config only; so a request whose
        header lines are byte for byte those of the last vouched-for request on the same connection, under the
        same config, is that user without a second look. Any other header set (another user, one more group,
        a reordered line) takes the whole check. A refusal is never remembered.
        """
        if raw_headers == memo.raw_headers and memo.generation == self._generation and memo.user is not None:
            return memo.user
        user = self.authenticate_sync(peer_cert=peer_cert, headers=headers)
        if user is not None:
            memo.raw_headers, memo.user, memo.generation = raw_headers, user, self._generation
        return user

    def authenticate_sync(self, *, peer_cert: PeerCert | None, headers: Mapping[str, str]) -> UserInfo | None:
        """The whole check; synchronous because it does no I/O."""
        common_name = peer_common_name(peer_cert)
        if common_name is None:
            return None  # no verified client certificate: the headers cannot be trusted
        if self._allowed and common_name not in self._allowed:
            return None
        multi = headers if isinstance(headers, CIMultiDictProxy | CIMultiDict) else CIMultiDict(headers)
        getall: Callable[[str, tuple[()]], Sequence[str]] = multi.getall
        config = self._config
        name = _first_value(getall, config.username_headers)
        if not name:
            return None
        uid = _first_value(getall, config.uid_headers)
        group_headers = config.group_headers
        if len(group_headers) == 1:
            groups = tuple(getall(group_headers[0], ()))
        else:
            groups = tuple(value for header in group_headers for value in getall(header, ()))
        extra_items: list[tuple[str, str]] = []
        prefixes = self._prefixes
        if prefixes:
            for header, value in multi.items():
                lowered = header.lower()
                if lowered.startswith(prefixes):
                    extra_items.append((lowered, value))
        memo_key = (name, uid, groups, tuple(extra_items))
        user = self._memo.get(memo_key)
        if user is None:
            user = UserInfo(
                name=name,
                uid=uid,
                groups=groups if AUTHENTICATED_GROUP in groups else (*groups, AUTHENTICATED_GROUP),
                extra=self._extra(memo_key[3]),
            )
            if len(self._memo) >= self._MEMO_ENTRIES:
                del self._memo[next(iter(self._memo))]
            self._memo[memo_key] = user
        return user

    def _extra(self, items: tuple[tuple[str, str], ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """`X-Remote-Extra-<key>` → key lower-cased and percent-decoded (as Go), values in header order."""
        extra: dict[str, list[str]] = {}
        for lowered, value in items:
            prefix = next(p for p in self._prefixes if lowered.startswith(p))
            if len(lowered) > len(prefix):
                extra.setdefault(urllib.parse.unquote(lowered[len(prefix) :]), []).append(value)
        return tuple(sorted((key, tuple(values)) for key, values in extra.items()))


def _first_value(getall: Callable[[str, tuple[()]], Sequence[str]], names: Sequence[str]) -> str:
    """The first non-empty value among `names`, in order (Go: the first username header with a value)."""
    for header in names:
        for value in getall(header, ()):
            if value:
                return value
    return ""


# --- authorization -----------------------------------------------------------------------------------------


def _retrieve_exception(task: asyncio.Future[Any]) -> None:
    """Mark a failed decision's exception as seen even if every requester was cancelled meanwhile."""
    if not task.cancelled():
        task.exception()


class AllowAll:
    """Allows everything: for the demo and for clusters where the network is the boundary."""

    async def authorize(self, user: UserInfo, attributes: RequestAttributes) -> bool:
        del user, attributes  # the answer depends on neither
        return True


@dataclass(slots=True)
class _Entry(Generic[V]):
    value: V
    expires_at_s: float


@dataclass(slots=True)
class CacheStats:
    """Counters for tests and for our own /metrics."""

    hits: int = 0
    misses: int = 0


class TtlCache(Generic[K, V]):
    """Answers cached for a time that depends on the answer, bounded in size, computed once per key at a time.

    `ttl_of(value)` gives the seconds a value stays valid (0: not cached). Concurrent misses for the same key
    share one computation, so the aggregator's five parallel availability probes cost one review. Errors are
    never cached. `clock` returns seconds (monotonic in production; injected so tests control time). When
    full (`max_entries`), expired entries are dropped first, then the oldest.
    """

    def __init__(self, *, clock: Callable[[], float], ttl_of: Callable[[V], float], max_entries: int) -> None:
        if max_entries < 1:
            raise ConfigError(f"cache size must be ≥ 1, got {max_entries}")
        self.clock = clock
        self.ttl_of = ttl_of
        self.max_entries = max_entries
        self.stats = CacheStats()
        self._entries: dict[K, _Entry[V]] = {}
        self._inflight: dict[K, asyncio.Future[V]] = {}

    def peek(self, key: K) -> V | None:
        """The cached answer while it is fresh (counted as a hit), else None: the synchronous fast path of `get`
        for a caller that can skip creating a coroutine on the hot path (the External Metrics API)."""
        entry = self._entries.get(key)
        if entry is not None and self.clock() < entry.expires_at_s:
            self.stats.hits += 1
            return entry.value
        return None

    async def get(self, key: K, compute: Callable[[], Awaitable[V]]) -> V:
        entry = self._entries.get(key)
        if entry is not None:
            if self.clock() < entry.expires_at_s:
                self.stats.hits += 1
                return entry.value
            del self._entries[key]
        self.stats.misses += 1
        task = self._inflight.get(key)
        if task is None:
            # A task of its own, so a cancelled requester does not cancel the answer others wait for.
            task = asyncio.ensure_future(self._compute(key, compute))
            task.add_done_callback(_retrieve_exception)
            self._inflight[key] = task
        return await asyncio.shield(task)

    async def _compute(self, key: K, compute: Callable[[], Awaitable[V]]) -> V:
        try:
            value = await compute()
        finally:
            self._inflight.pop(key, None)
        ttl_s = self.ttl_of(value)
        if ttl_s > 0:
            self._store(key, _Entry(value, self.clock() + ttl_s))
        return value

    def _store(self, key: K, entry: _Entry[V]) -> None:
        if len(self._entries) >= self.max_entries:
            now_s = self.clock()
            for stale in [k for k, e in self._entries.items() if e.expires_at_s <= now_s]:
                del self._entries[stale]
            while len(self._entries) >= self.max_entries:
                del self._entries[next(iter(self._entries))]
        self._entries[key] = entry

    def __len__(self) -> int:
        return len(self._entries)


def _check_ttls(what: str, allow_ttl_s: float, deny_ttl_s: float) -> None:
    if allow_ttl_s < 0 or deny_ttl_s < 0:
        raise ConfigError(f"{what} cache TTLs must be ≥ 0 s, got allow={allow_ttl_s} deny={deny_ttl_s}")


class CachingAuthorizer:
    """Caches another authorizer's decisions: allow for `allow_ttl_s`, deny for `deny_ttl_s` (Go: 10 s each).

    Concurrent misses for the same (user, attributes) share one call to the inner authorizer; errors are not
    cached; at most `max_entries` decisions are kept (see `TtlCache`).
    """

    def __init__(
        self,
        inner: Authorizer,
        *,
        clock: Callable[[], float],
        allow_ttl_s: float = 10.0,
        deny_ttl_s: float = 10.0,
        max_entries: int = 4096,
    ) -> None:
        _check_ttls("authorization", allow_ttl_s, deny_ttl_s)
        if max_entries < 1:
            raise ConfigError(f"authorization cache size must be ≥ 1, got {max_entries}")
        self.inner = inner
        self.allow_ttl_s = allow_ttl_s
        self.deny_ttl_s = deny_ttl_s
        self._cache: TtlCache[tuple[UserInfo, RequestAttributes], bool] = TtlCache(
            clock=clock, ttl_of=lambda allowed: allow_ttl_s if allowed else deny_ttl_s, max_entries=max_entries
        )

    @property
    def stats(self) -> CacheStats:
        return self._cache.stats

    async def authorize(self, user: UserInfo, attributes: RequestAttributes) -> bool:
        return await self._cache.get((user, attributes), lambda: self.inner.authorize(user, attributes))

    def cached(self, user: UserInfo, attributes: RequestAttributes) -> bool | None:
        """The cached decision while it is fresh, else None (then `authorize`): no coroutine on a hit."""
        return self._cache.peek((user, attributes))

    def __len__(self) -> int:
        return len(self._cache)


# --- bearer tokens (TokenReview) ---------------------------------------------------------------------------


class TokenReviewStatus(Protocol):
    """What a TokenReview answered (`status` of `authentication.k8s.io/v1` TokenReview)."""

    @property
    def authenticated(self) -> bool: ...

    @property
    def username(self) -> str: ...

    @property
    def uid(self) -> str: ...

    @property
    def groups(self) -> tuple[str, ...]: ...

    @property
    def extra(self) -> Mapping[str, Sequence[str]]: ...

    @property
    def audiences(self) -> tuple[str, ...]: ...

    @property
    def error(self) -> str: ...


class TokenReviewer(Protocol):
    """Asks kube-apiserver about a token. Raises AdapterError when it gets no answer (API down, forbidden,
    timeout): that is not a denial, and it is never cached."""

    async def review(self, token: str) -> TokenReviewStatus: ...


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of `Authorization: Bearer <token>` (scheme case-insensitive, as Go's bearertoken), else None."""
    header = headers.get("Authorization", "")
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None


class BearerTokenAuthenticator:
    """Authenticates `Authorization: Bearer` callers with TokenReviews, as k8s.io/apiserver's delegating
    authenticator does, with a bounded TTL cache in front.

    - Allowed answers are cached for `allow_ttl_s`, denied ones for `deny_ttl_s` (Go: 10 s each). Unlike Go,
      a denial that carries an error text (an invalid or expired token) is cached too: it is the API's
      answer, and caching it keeps a client that repeats a bad token from costing one review per request.
      Failures to get an answer are never cached.
    - The cache is keyed by an HMAC of the token under a per-process random key: tokens are not kept in
      memory in the clear, and the key cannot be precomputed. At most `max_entries` answers are kept.
    - `audiences` (empty: kube-apiserver's own) are sent in the review; an authenticated answer must name one
      of them in `status.audiences` when it names any (Go's webhook token authenticator does the same).
    - When the review cannot be made, `authenticate` raises `Unauthorized` with a message saying so (→ 401
      Status): the caller learns that the adapter could not check, not that its token is bad.
    """

    def __init__(
        self,
        reviewer: TokenReviewer,
        *,
        clock: Callable[[], float],
        audiences: Sequence[str] = (),
        allow_ttl_s: float = 10.0,
        deny_ttl_s: float = 10.0,
        max_entries: int = 4096,
    ) -> None:
        _check_ttls("token review", allow_ttl_s, deny_ttl_s)
        self.reviewer = reviewer
        self.audiences = tuple(audiences)
        self.allow_ttl_s = allow_ttl_s
        self.deny_ttl_s = deny_ttl_s
        self._key = secrets.token_bytes(32)
        self._cache: TtlCache[bytes, UserInfo | None] = TtlCache(
            clock=clock, ttl_of=lambda user: allow_ttl_s if user is not None else deny_ttl_s, max_entries=max_entries
        )
        self.reviews = 0
        self.failures = 0

    @property
    def stats(self) -> CacheStats:
        return self._cache.stats

    def __len__(self) -> int:
        return len(self._cache)

    async def authenticate(self, *, peer_cert: PeerCert | None, headers: Mapping[str, str]) -> UserInfo | None:
        del peer_cert  # a token stands on its own
        token = bearer_token(headers)
        if token is None:
            return None
        digest = hmac.new(self._key, token.encode("utf-8"), hashlib.sha256).digest()
        return await self._cache.get(digest, lambda: self._review(token))

    async def _review(self, token: str) -> UserInfo | None:
        self.reviews += 1
        try:
            answer = await self.reviewer.review(token)
        except AdapterError as exc:
            self.failures += 1
            _log.warning("TokenReview failed, answering 401: %s", exc)
            raise Unauthorized(
                "Unauthorized: the bearer token could not be verified because the TokenReview with "
                "kube-apiserver failed; retry later (this is not a verdict on the token)"
            ) from exc
        if not answer.authenticated or not answer.username:
            return None
        if self.audiences and answer.audiences and not set(self.audiences) & set(answer.audiences):
            return None
        groups = tuple(answer.groups)
        return UserInfo(
            name=answer.username,
            uid=answer.uid,
            groups=groups if AUTHENTICATED_GROUP in groups else (*groups, AUTHENTICATED_GROUP),
            extra=tuple(sorted((key, tuple(values)) for key, values in answer.extra.items())),
        )


class UnionAuthenticator:
    """The first authenticator that vouches for a request wins, in order (front proxy first, then tokens, as
    k8s.io/apiserver). One that raises `Unauthorized` (it could not check) ends the search with that answer
    only when no later one vouches."""

    def __init__(self, *authenticators: Authenticator) -> None:
        if not authenticators:
            raise ValueError("UnionAuthenticator needs at least one authenticator")
        self.authenticators = authenticators

    def quick(self, *, peer_cert: PeerCert | None, headers: Mapping[str, str]) -> UserInfo | None:
        """The user when the first authenticator vouches without waiting (the front proxy's check is synchronous),
        which is then the union's answer; None: call `authenticate` (it asks them all, in order)."""
        first = self.authenticators[0]
        if isinstance(first, RequestHeaderAuthenticator):
            return first.authenticate_sync(peer_cert=peer_cert, headers=headers)
        return None

    async def authenticate(self, *, peer_cert: PeerCert | None, headers: Mapping[str, str]) -> UserInfo | None:
        failure: Unauthorized | None = None
        for authenticator in self.authenticators:
            try:
                user = await authenticator.authenticate(peer_cert=peer_cert, headers=headers)
            except Unauthorized as exc:
                failure = failure or exc
                continue
            if user is not None:
                return user
        if failure is not None:
            raise failure
        return None
