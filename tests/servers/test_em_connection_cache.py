"""What the requests of one TLS connection share on the External Metrics API's hot path, and what they must not.

The front proxy's identity is remembered per connection by the request's raw header lines
(`RequestHeaderAuthenticator.authenticate_on`); the authorization decision stays the CachingAuthorizer's, with its
TTL. These tables pin that a remembered identity is only ever the one those very header lines name, that a
config change or a refusal is not papered over by the memo, and that a revoked permission refuses at its TTL
even on a connection the quick path has been serving.
"""

from __future__ import annotations

import ssl
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import aiohttp
import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from adapter.servers.auth import (
    CachingAuthorizer,
    IdentityMemo,
    PeerCert,
    RequestAttributes,
    RequestHeaderAuthenticator,
    RequestHeaderConfig,
    UserInfo,
)
from adapter.servers.tls import DynamicServerTLS, client_ssl_context, server_ssl_context
from tests.servers._em_support import (
    EM_BASE,
    EM_NS,
    EM_PROXY_CN,
    EmFakeClock,
    EmPki,
    EmRecordingAuthorizer,
    em_store,
)
from tests.servers.conftest import EmServe, EmServer

PROXY_PEER: PeerCert = {"subject": ((("commonName", EM_PROXY_CN),),)}
METRIC_PATH = f"{EM_BASE}/namespaces/{EM_NS}/wva_desired_replicas?" + urllib.parse.urlencode(
    {"labelSelector": "variant_name=llama-h100"}
)
Headers = Sequence[tuple[str, str]]
HPA: Headers = (
    ("X-Remote-User", "system:serviceaccount:kube-system:horizontal-pod-autoscaler"),
    ("X-Remote-Group", "system:serviceaccounts"),
)
ALICE: Headers = (("X-Remote-User", "alice"), ("X-Remote-Group", "devs"))
HPA_ONE_MORE_GROUP: Headers = (*HPA, ("X-Remote-Group", "auditors"))
HPA_REORDERED: Headers = (HPA[1], HPA[0])
HPA_WITH_EXTRA: Headers = (*HPA, ("X-Remote-Extra-Scopes", "read"))
GROUP_ONLY: Headers = (HPA[1],)


class CountingAuthenticator(RequestHeaderAuthenticator):
    """Counts the whole checks, so a table can say which requests were answered from the memo."""

    def __init__(self, config: RequestHeaderConfig) -> None:
        super().__init__(config)
        self.checks = 0

    def authenticate_sync(self, *, peer_cert: PeerCert | None, headers: Mapping[str, str]) -> UserInfo | None:
        self.checks += 1
        return super().authenticate_sync(peer_cert=peer_cert, headers=headers)


def raw(headers: Headers) -> tuple[tuple[bytes, bytes], ...]:
    return tuple((name.encode(), value.encode()) for name, value in headers)


def parsed(headers: Headers) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(headers))


@dataclass(frozen=True)
class Step:
    headers: Headers
    user: str | None
    """The user name the step must authenticate as (None: refused)."""
    checked: bool
    """True: the whole check ran (the memo was not used)."""
    groups: tuple[str, ...] = ()
    """Groups the user must have, besides system:authenticated (checked when `user` is not None)."""
    trusted: bool = True
    """False: the connection presented no client certificate."""


MEMO_CASES = [
    pytest.param(
        [Step(HPA, "system:serviceaccount:kube-system:horizontal-pod-autoscaler", True, ("system:serviceaccounts",))]
        + [Step(HPA, "system:serviceaccount:kube-system:horizontal-pod-autoscaler", False, ("system:serviceaccounts",))]
        * 2,
        id="same-lines-again-from-the-memo",
    ),
    pytest.param(
        [Step(HPA, HPA[0][1], True), Step(ALICE, "alice", True, ("devs",)), Step(HPA, HPA[0][1], True)],
        id="another-identity-is-never-served-from-the-memo",
    ),
    pytest.param(
        [Step(HPA, HPA[0][1], True), Step(HPA_ONE_MORE_GROUP, HPA[0][1], True, ("auditors",))],
        id="one-more-group-is-a-new-check",
    ),
    pytest.param(
        [Step(HPA, HPA[0][1], True), Step(HPA_WITH_EXTRA, HPA[0][1], True)],
        id="one-more-extra-header-is-a-new-check",
    ),
    pytest.param(
        [Step(HPA, HPA[0][1], True), Step(HPA_REORDERED, HPA[0][1], True)], id="reordered-lines-are-a-new-check"
    ),
    pytest.param([Step(HPA, HPA[0][1], True), Step(GROUP_ONLY, None, True)], id="user-header-dropped-is-refused"),
    pytest.param(
        [Step(HPA, None, True, trusted=False), Step(HPA, None, True, trusted=False)], id="a-refusal-is-never-remembered"
    ),
]


@pytest.mark.parametrize("steps", MEMO_CASES)
def test_identity_memo(em_pki: EmPki, steps: list[Step]) -> None:
    authenticator = CountingAuthenticator(RequestHeaderConfig(em_pki.front_proxy_ca_pem.decode()))
    memo = IdentityMemo()
    for number, step in enumerate(steps):
        before = authenticator.checks
        user = authenticator.authenticate_on(
            memo,
            peer_cert=PROXY_PEER if step.trusted else None,
            raw_headers=raw(step.headers),
            headers=parsed(step.headers),
        )
        assert (authenticator.checks > before) == step.checked, f"step {number}"
        if step.user is None:
            assert user is None, f"step {number}"
            continue
        assert user is not None, f"step {number}"
        assert user.name == step.user, f"step {number}"
        assert set(step.groups) <= set(user.groups), f"step {number}"


def test_a_config_update_is_not_bypassed_by_the_memo(em_pki: EmPki) -> None:
    """The memo holds an answer under the config it was given under: after `update` (the ConfigMap watch), the
    same header lines are checked again, here against allowed names that no longer include the proxy."""
    pem = em_pki.front_proxy_ca_pem.decode()
    authenticator = CountingAuthenticator(RequestHeaderConfig(pem, allowed_names=(EM_PROXY_CN,)))
    memo = IdentityMemo()
    assert authenticator.authenticate_on(memo, peer_cert=PROXY_PEER, raw_headers=raw(HPA), headers=parsed(HPA))
    authenticator.update(RequestHeaderConfig(pem, allowed_names=("someone-else",)))
    assert authenticator.authenticate_on(memo, peer_cert=PROXY_PEER, raw_headers=raw(HPA), headers=parsed(HPA)) is None
    assert authenticator.checks == 2


# --- over HTTP, on one keep-alive connection ------------------------------------------------------------------


async def one_connection(
    server: EmServer, em_pki: EmPki, requests: Sequence[Headers]
) -> tuple[list[int], list[str], int]:
    """Send `requests` in order on one TLS connection with the front proxy's certificate; the statuses, the body
    `reason`s (or "" for a 200) and how many connections the gate handed to aiohttp (1: the memo was in play)."""
    context = client_ssl_context(
        ca_pem=server.ca_pem, cert_file=em_pki.proxy_client.cert_file, key_file=em_pki.proxy_client.key_file
    )
    statuses: list[int] = []
    reasons: list[str] = []
    before = server.running.gate.stats.handed_over
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=1)) as session:
        for headers in requests:
            async with session.get(f"https://127.0.0.1:{server.port}{METRIC_PATH}", headers=list(headers)) as response:
                statuses.append(response.status)
                body = await response.json()
                reasons.append(body.get("reason", "") if response.status != 200 else "")
    return statuses, reasons, server.running.gate.stats.handed_over - before


HTTP_CASES = [
    pytest.param([HPA, HPA, HPA], [HPA[0][1]] * 3, [200] * 3, id="same-identity-repeated"),
    pytest.param([HPA, ALICE, HPA], [HPA[0][1], "alice", HPA[0][1]], [200] * 3, id="identities-alternate"),
    pytest.param([HPA, GROUP_ONLY], [HPA[0][1]], [200, 401], id="user-header-dropped-mid-connection"),
    pytest.param(
        [HPA, HPA_ONE_MORE_GROUP, HPA], [HPA[0][1], HPA[0][1], HPA[0][1]], [200] * 3, id="group-added-then-removed"
    ),
]


@pytest.mark.parametrize(("requests", "users", "statuses"), HTTP_CASES)
async def test_identity_per_request_on_one_connection(
    em_serve: EmServe, em_pki: EmPki, requests: list[Headers], users: list[str], statuses: list[int]
) -> None:
    """No caching authorizer: the recording one sees, per request, the identity that request's lines name."""
    inner = EmRecordingAuthorizer()
    config = RequestHeaderConfig(em_pki.front_proxy_ca_pem.decode(), allowed_names=(EM_PROXY_CN,))
    server = await em_serve(
        em_store(), authenticator=RequestHeaderAuthenticator(config), authorizer=inner, client_ca=True
    )
    got_statuses, _, connections = await one_connection(server, em_pki, requests)
    assert connections == 1
    assert got_statuses == statuses
    assert [user.name for user, _ in inner.calls] == users
    for (user, _), headers in zip(inner.calls, requests, strict=False):
        named = {value for name, value in headers if name == "X-Remote-Group"}
        assert set(user.groups) - {"system:authenticated"} == named


REVOKE_CASES = [
    pytest.param(10.0, 9.9, 200, 1, id="revoked-within-ttl-still-allowed-from-cache"),
    pytest.param(10.0, 10.0, 403, 2, id="revoked-at-ttl-refuses"),
    pytest.param(10.0, 60.0, 403, 2, id="revoked-long-after-ttl-refuses"),
    pytest.param(0.0, 0.0, 403, 4, id="no-caching-refuses-at-once"),
]


@pytest.mark.parametrize(("allow_ttl_s", "advance_s", "status", "reviews"), REVOKE_CASES)
async def test_a_revoked_permission_refuses_at_its_ttl(
    em_serve: EmServe, em_pki: EmPki, allow_ttl_s: float, advance_s: float, status: int, reviews: int
) -> None:
    """The quick path (remembered identity, cached allow) ends where the authorization cache's TTL does; every
    request still counts as a hit or a miss of that cache (our /metrics reads those counters)."""
    inner = EmRecordingAuthorizer()
    clock = EmFakeClock()
    cache = CachingAuthorizer(inner, clock=clock, allow_ttl_s=allow_ttl_s)
    config = RequestHeaderConfig(em_pki.front_proxy_ca_pem.decode(), allowed_names=(EM_PROXY_CN,))
    server = await em_serve(
        em_store(), authenticator=RequestHeaderAuthenticator(config), authorizer=cache, client_ca=True
    )
    context = client_ssl_context(
        ca_pem=server.ca_pem, cert_file=em_pki.proxy_client.cert_file, key_file=em_pki.proxy_client.key_file
    )
    url = f"https://127.0.0.1:{server.port}{METRIC_PATH}"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=1)) as session:
        for _ in range(3):
            async with session.get(url, headers=list(HPA)) as response:
                assert response.status == 200
        inner.allow = False  # the RBAC binding is removed
        clock.advance(advance_s)
        async with session.get(url, headers=list(HPA)) as response:
            assert response.status == status
            if status == 403:
                assert (await response.json())["reason"] == "Forbidden"
    assert len(inner.calls) == reviews
    assert (cache.stats.hits, cache.stats.misses) == (4 - reviews, reviews)  # each request counted once


async def test_a_cached_denial_is_counted_once_per_request(em_serve: EmServe, em_pki: EmPki) -> None:
    inner = EmRecordingAuthorizer(allow=False)
    cache = CachingAuthorizer(inner, clock=EmFakeClock())
    config = RequestHeaderConfig(em_pki.front_proxy_ca_pem.decode(), allowed_names=(EM_PROXY_CN,))
    server = await em_serve(
        em_store(), authenticator=RequestHeaderAuthenticator(config), authorizer=cache, client_ca=True
    )
    statuses, reasons, connections = await one_connection(server, em_pki, [HPA] * 3)
    assert (statuses, reasons, connections) == ([403] * 3, ["Forbidden"] * 3, 1)
    assert (len(inner.calls), cache.stats.hits, cache.stats.misses) == (1, 2, 1)


def _dynamic_base(em_pki: EmPki) -> ssl.SSLContext:
    return DynamicServerTLS(
        cert_file=em_pki.serving_cert, key_file=em_pki.serving_key, client_ca_pem=em_pki.front_proxy_ca_pem
    ).context


def _dynamic_current(em_pki: EmPki) -> ssl.SSLContext:
    return DynamicServerTLS(
        cert_file=em_pki.serving_cert, key_file=em_pki.serving_key, client_ca_pem=em_pki.front_proxy_ca_pem
    ).current


def _static(em_pki: EmPki) -> ssl.SSLContext:
    return server_ssl_context(
        cert_file=em_pki.serving_cert, key_file=em_pki.serving_key, client_ca_pem=em_pki.front_proxy_ca_pem
    )


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(_dynamic_base, id="serve-handshake-context"),
        pytest.param(_dynamic_current, id="serve-switched-context"),
        pytest.param(_static, id="server_ssl_context"),
    ],
)
def test_server_contexts_refuse_renegotiation(em_pki: EmPki, make: Callable[[EmPki], ssl.SSLContext]) -> None:
    """The connection's certificate, read once, is the connection's for good only if it cannot be renegotiated."""
    context = make(em_pki)
    assert context.options & ssl.OP_NO_RENEGOTIATION
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


_HPA_USER = UserInfo("hpa", uid="u", groups=("g",), extra=(("scopes", ("a",)),))
_LIST = RequestAttributes(verb="list", path="/p", resource_request=True, namespace="llm", resource="r")


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        pytest.param(
            _HPA_USER, UserInfo("hpa", uid="u", groups=("g",), extra=(("scopes", ("a",)),)), True, id="user-equal"
        ),
        pytest.param(
            _HPA_USER, UserInfo("hpa", uid="u", groups=("g", "h"), extra=_HPA_USER.extra), False, id="user-group"
        ),
        pytest.param(_HPA_USER, UserInfo("hpa", uid="v", groups=("g",), extra=_HPA_USER.extra), False, id="user-uid"),
        pytest.param(_HPA_USER, UserInfo("hpa", uid="u", groups=("g",)), False, id="user-extra"),
        pytest.param(
            _LIST,
            RequestAttributes(verb="list", path="/p", resource_request=True, namespace="llm", resource="r"),
            True,
            id="attributes-equal",
        ),
        pytest.param(
            _LIST,
            RequestAttributes(verb="list", path="/p", resource_request=True, namespace="other", resource="r"),
            False,
            id="attributes-namespace",
        ),
        pytest.param(
            _LIST,
            RequestAttributes(verb="create", path="/p", resource_request=True, namespace="llm", resource="r"),
            False,
            id="attributes-verb",
        ),
    ],
)
def test_cached_hashes_key_the_authorization_cache_as_the_fields_do(a: object, b: object, same: bool) -> None:
    """UserInfo and RequestAttributes hash once, at construction; as keys they still behave as their fields."""
    assert (a == b) is same
    if same:
        assert hash(a) == hash(b)
    assert len({a: 1, b: 2}) == (1 if same else 2)
