"""requestheader authentication, delegated authorization and its cache, over real mTLS where it matters."""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict

from adapter.domain.errors import ConfigError
from adapter.servers.auth import (
    AllowAll,
    CachingAuthorizer,
    RequestAttributes,
    RequestHeaderAuthenticator,
    RequestHeaderConfig,
    UnionAuthenticator,
    UserInfo,
    peer_common_name,
    requestheader_config_from_configmap,
)
from adapter.servers.external_metrics import ANONYMOUS
from adapter.store.decisions import DecisionStore
from tests.servers._em_support import (
    EM_BASE,
    EM_NS,
    EM_PROXY_CN,
    EmFakeClock,
    EmPki,
    EmRecordingAuthorizer,
    em_request,
    em_store,
)
from tests.servers.conftest import EmServe, EmServer

METRIC_PATH = f"{EM_BASE}/namespaces/{EM_NS}/wva_desired_replicas?" + urllib.parse.urlencode(
    {"labelSelector": "variant_name=llama-h100"}
)
HPA_HEADERS = [
    ("X-Remote-User", "system:serviceaccount:kube-system:horizontal-pod-autoscaler"),
    ("X-Remote-Uid", "7f1c-uid"),
    ("X-Remote-Group", "system:serviceaccounts"),
    ("X-Remote-Group", "system:serviceaccounts:kube-system"),
    ("X-Remote-Extra-Authentication.kubernetes.io%2fpod-name", "kcm-0"),
    ("X-Remote-Extra-Scopes", "a"),
    ("X-Remote-Extra-Scopes", "b"),
]


def kubeadm_configmap(ca_pem: bytes, **overrides: str) -> dict[str, str]:
    data = {
        "client-ca-file": "unused here",
        "requestheader-client-ca-file": ca_pem.decode(),
        "requestheader-allowed-names": json.dumps([EM_PROXY_CN]),
        "requestheader-username-headers": json.dumps(["X-Remote-User"]),
        "requestheader-group-headers": json.dumps(["X-Remote-Group"]),
        "requestheader-extra-headers-prefix": json.dumps(["X-Remote-Extra-"]),
        "requestheader-uid-headers": json.dumps(["X-Remote-Uid"]),
    }
    data.update(overrides)
    return data


async def serve_with_auth(
    em_serve: EmServe,
    em_pki: EmPki,
    authorizer: Any = None,
    **configmap_overrides: str,
) -> EmServer:
    config = requestheader_config_from_configmap(kubeadm_configmap(em_pki.front_proxy_ca_pem, **configmap_overrides))
    return await em_serve(
        em_store(),
        authenticator=RequestHeaderAuthenticator(config),
        authorizer=authorizer if authorizer is not None else AllowAll(),
        client_ca=True,
    )


# --- configuration -----------------------------------------------------------------------------------------


def test_config_from_kubeadm_configmap(em_pki: EmPki) -> None:
    data = kubeadm_configmap(em_pki.front_proxy_ca_pem)
    data["requestheader-group-headers"] = '["X-Remote-Group", "X-Other-Group"]'
    config = requestheader_config_from_configmap(data)
    assert config == RequestHeaderConfig(
        client_ca_pem=em_pki.front_proxy_ca_pem.decode(),
        allowed_names=(EM_PROXY_CN,),
        username_headers=("X-Remote-User",),
        uid_headers=("X-Remote-Uid",),
        group_headers=("X-Remote-Group", "X-Other-Group"),
        extra_headers_prefixes=("X-Remote-Extra-",),
    )


def test_config_defaults_when_keys_are_absent(em_pki: EmPki) -> None:
    config = requestheader_config_from_configmap({"requestheader-client-ca-file": em_pki.front_proxy_ca_pem.decode()})
    assert config.allowed_names == ()
    assert config.username_headers == ("X-Remote-User",)
    assert config.group_headers == ("X-Remote-Group",)
    assert config.extra_headers_prefixes == ("X-Remote-Extra-",)
    assert config.uid_headers == ("X-Remote-Uid",)


def test_empty_allowed_names_list(em_pki: EmPki) -> None:
    config = requestheader_config_from_configmap(
        kubeadm_configmap(em_pki.front_proxy_ca_pem, **{"requestheader-allowed-names": "[]"})
    )
    assert config.allowed_names == ()


@pytest.mark.parametrize(
    ("overrides", "message_part"),
    [
        ({"requestheader-client-ca-file": ""}, "'requestheader-client-ca-file' is missing or empty"),
        ({"requestheader-allowed-names": "front-proxy-client"}, "'requestheader-allowed-names' is not JSON"),
        ({"requestheader-group-headers": '{"a": 1}'}, "'requestheader-group-headers' must be a JSON array"),
        ({"requestheader-username-headers": "[1]"}, "'requestheader-username-headers' must be a JSON array"),
        ({"requestheader-client-ca-file": "not a pem"}, "no PEM certificate"),
    ],
    ids=["missing-ca", "not-json", "not-a-list", "not-strings", "ca-not-pem"],
)
def test_invalid_configmap_names_the_key(em_pki: EmPki, overrides: dict[str, str], message_part: str) -> None:
    with pytest.raises(ConfigError) as caught:
        requestheader_config_from_configmap(kubeadm_configmap(em_pki.front_proxy_ca_pem, **overrides))
    assert message_part in str(caught.value)


PROXY_PEER = {"subject": ((("commonName", EM_PROXY_CN),),)}


def test_authenticator_reads_headers_case_insensitively(em_pki: EmPki) -> None:
    authenticator = RequestHeaderAuthenticator(RequestHeaderConfig(em_pki.front_proxy_ca_pem.decode()))
    headers = CIMultiDict(
        [
            ("x-remote-user", "carol"),
            ("X-REMOTE-GROUP", "g1"),
            ("x-remote-group", "g2"),
            ("X-Remote-Extra-Scopes", "a"),
            ("x-remote-extra-SCOPES", "b"),
            ("X-Remote-Extra-Bad%zzKey", "kept"),
            ("X-Remote-Extra-", "no key: ignored"),
        ]
    )
    user = authenticator.authenticate_sync(peer_cert=PROXY_PEER, headers=headers)
    assert user == UserInfo(
        name="carol",
        groups=("g1", "g2", "system:authenticated"),
        extra=(("bad%zzkey", ("kept",)), ("scopes", ("a", "b"))),
    )


class _NeverAsked:
    async def authenticate(self, *, peer_cert: Any, headers: Any) -> UserInfo | None:
        raise AssertionError("the second authenticator is not asked synchronously")


async def test_union_quick_answers_only_what_the_front_proxy_vouches_for(em_pki: EmPki) -> None:
    """`quick` is the union's answer when the front proxy vouches (it is first, so it wins), and None (ask
    `authenticate`) when it does not, or when the first authenticator cannot answer synchronously."""
    proxy = RequestHeaderAuthenticator(RequestHeaderConfig(em_pki.front_proxy_ca_pem.decode()))
    union = UnionAuthenticator(proxy, _NeverAsked())
    proxied = CIMultiDict([("X-Remote-User", "hpa")])
    quick = union.quick(peer_cert=PROXY_PEER, headers=proxied)
    assert quick is not None
    assert quick == await proxy.authenticate(peer_cert=PROXY_PEER, headers=proxied)
    assert union.quick(peer_cert=None, headers=CIMultiDict([("Authorization", "Bearer t")])) is None
    assert UnionAuthenticator(_NeverAsked(), proxy).quick(peer_cert=PROXY_PEER, headers=proxied) is None


def test_authenticator_does_not_duplicate_the_authenticated_group(em_pki: EmPki) -> None:
    authenticator = RequestHeaderAuthenticator(RequestHeaderConfig(em_pki.front_proxy_ca_pem.decode()))
    headers = CIMultiDict([("X-Remote-User", "dave"), ("X-Remote-Group", "system:authenticated")])
    user = authenticator.authenticate_sync(peer_cert=PROXY_PEER, headers=headers)
    assert user is not None
    assert user.groups == ("system:authenticated",)


def test_authenticator_update_applies_new_allowed_names(em_pki: EmPki) -> None:
    pem = em_pki.front_proxy_ca_pem.decode()
    authenticator = RequestHeaderAuthenticator(RequestHeaderConfig(pem, allowed_names=("someone-else",)))
    headers = CIMultiDict([("X-Remote-User", "erin")])
    assert authenticator.authenticate_sync(peer_cert=PROXY_PEER, headers=headers) is None
    authenticator.update(RequestHeaderConfig(pem, allowed_names=(EM_PROXY_CN,)))
    assert authenticator.authenticate_sync(peer_cert=PROXY_PEER, headers=headers) == UserInfo(
        "erin", groups=("system:authenticated",)
    )


def test_peer_common_name_takes_the_last_cn() -> None:
    subject = ((("organizationName", "system:masters"),), (("commonName", "first"),), (("commonName", "last"),))
    assert peer_common_name({"subject": subject}) == "last"
    assert peer_common_name({}) is None
    assert peer_common_name(None) is None


# --- authentication over mTLS ------------------------------------------------------------------------------


async def test_front_proxy_identity_reaches_the_authorizer(em_serve: EmServe, em_pki: EmPki) -> None:
    authorizer = EmRecordingAuthorizer()
    server = await serve_with_auth(em_serve, em_pki, authorizer)
    response = await em_request(
        server.port, METRIC_PATH, ca_pem=server.ca_pem, client_cert=em_pki.proxy_client, headers=HPA_HEADERS
    )
    assert response.status == 200, response.text
    assert [i["value"] for i in response.json()["items"]] == ["3"]
    ((user, attributes),) = authorizer.calls
    assert user == UserInfo(
        name="system:serviceaccount:kube-system:horizontal-pod-autoscaler",
        uid="7f1c-uid",
        groups=("system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"),
        extra=(("authentication.kubernetes.io/pod-name", ("kcm-0",)), ("scopes", ("a", "b"))),
    )
    assert user.extra_dict() == {"authentication.kubernetes.io/pod-name": ["kcm-0"], "scopes": ["a", "b"]}
    assert attributes == RequestAttributes(
        verb="list",
        path=f"{EM_BASE}/namespaces/{EM_NS}/wva_desired_replicas",
        resource_request=True,
        namespace=EM_NS,
        api_group="external.metrics.k8s.io",
        api_version="v1beta1",
        resource="wva_desired_replicas",
    )


async def test_discovery_is_a_non_resource_request(em_serve: EmServe, em_pki: EmPki) -> None:
    authorizer = EmRecordingAuthorizer()
    server = await serve_with_auth(em_serve, em_pki, authorizer)
    for path in ("/apis", EM_BASE):
        response = await em_request(
            server.port, path, ca_pem=server.ca_pem, client_cert=em_pki.proxy_client, headers=HPA_HEADERS[:1]
        )
        assert response.status == 200
    assert [a for _, a in authorizer.calls] == [
        RequestAttributes(verb="get", path="/apis"),
        RequestAttributes(verb="get", path=EM_BASE),
    ]


@pytest.mark.parametrize("path", ["/apis", EM_BASE, METRIC_PATH, "/openapi/v2", "/no/such/path"])
async def test_no_client_certificate_is_401(em_serve: EmServe, em_pki: EmPki, path: str) -> None:
    authorizer = EmRecordingAuthorizer()
    server = await serve_with_auth(em_serve, em_pki, authorizer)
    # The identity headers are present but nobody vouches for them.
    response = await em_request(server.port, path, ca_pem=server.ca_pem, headers=HPA_HEADERS)
    assert response.status == 401
    document = response.json()
    assert (document["kind"], document["code"], document["reason"], document["message"]) == (
        "Status",
        401,
        "Unauthorized",
        "Unauthorized",
    )
    assert authorizer.calls == []


@pytest.mark.parametrize("path", ["/healthz", "/livez", "/readyz"])
async def test_health_needs_no_identity(em_serve: EmServe, em_pki: EmPki, path: str) -> None:
    server = await serve_with_auth(em_serve, em_pki, EmRecordingAuthorizer(allow=False))
    response = await em_request(server.port, path, ca_pem=server.ca_pem)
    assert (response.status, response.text) == (200, "ok")


async def test_client_certificate_with_a_wrong_cn_is_401(em_serve: EmServe, em_pki: EmPki) -> None:
    server = await serve_with_auth(em_serve, em_pki, EmRecordingAuthorizer())
    response = await em_request(
        server.port, METRIC_PATH, ca_pem=server.ca_pem, client_cert=em_pki.other_cn_client, headers=HPA_HEADERS
    )
    assert response.status == 401
    assert response.json()["reason"] == "Unauthorized"


async def test_empty_allowed_names_accept_any_cn_from_the_ca(em_serve: EmServe, em_pki: EmPki) -> None:
    server = await serve_with_auth(em_serve, em_pki, EmRecordingAuthorizer(), **{"requestheader-allowed-names": "[]"})
    response = await em_request(
        server.port, METRIC_PATH, ca_pem=server.ca_pem, client_cert=em_pki.other_cn_client, headers=HPA_HEADERS
    )
    assert response.status == 200


async def test_client_certificate_from_another_ca_is_refused_by_tls(em_serve: EmServe, em_pki: EmPki) -> None:
    """Python's ssl cannot defer chain verification to the handler, so an untrusted client certificate
    fails the handshake (TLS alert) instead of reaching us for a 401. Either way: no answer."""
    authorizer = EmRecordingAuthorizer()
    server = await serve_with_auth(em_serve, em_pki, authorizer)
    with pytest.raises(aiohttp.ClientError):
        await em_request(
            server.port, METRIC_PATH, ca_pem=server.ca_pem, client_cert=em_pki.rogue_client, headers=HPA_HEADERS
        )
    assert authorizer.calls == []
    # The server is unharmed and still serves a trusted client.
    response = await em_request(
        server.port, METRIC_PATH, ca_pem=server.ca_pem, client_cert=em_pki.proxy_client, headers=HPA_HEADERS
    )
    assert response.status == 200


async def test_trusted_certificate_without_user_header_is_401(em_serve: EmServe, em_pki: EmPki) -> None:
    server = await serve_with_auth(em_serve, em_pki, EmRecordingAuthorizer())
    response = await em_request(
        server.port,
        METRIC_PATH,
        ca_pem=server.ca_pem,
        client_cert=em_pki.proxy_client,
        headers=[("X-Remote-User", ""), ("X-Remote-Group", "system:masters")],
    )
    assert response.status == 401


async def test_header_names_come_from_the_configmap(em_serve: EmServe, em_pki: EmPki) -> None:
    authorizer = EmRecordingAuthorizer()
    server = await serve_with_auth(
        em_serve,
        em_pki,
        authorizer,
        **{
            "requestheader-username-headers": '["X-Forwarded-User", "X-Remote-User"]',
            "requestheader-group-headers": '["X-Forwarded-Groups"]',
            "requestheader-extra-headers-prefix": '["X-Forwarded-Extra-"]',
        },
    )
    headers = [
        ("X-Forwarded-User", ""),  # empty: the next username header wins
        ("X-Remote-User", "alice"),
        ("X-Forwarded-Groups", "team-a"),
        ("X-Remote-Group", "ignored-now"),
        ("X-Forwarded-Extra-Reason", "debug"),
        ("X-Remote-Extra-Ignored", "x"),
    ]
    response = await em_request(
        server.port, METRIC_PATH, ca_pem=server.ca_pem, client_cert=em_pki.proxy_client, headers=headers
    )
    assert response.status == 200
    ((user, _),) = authorizer.calls
    assert user == UserInfo(name="alice", groups=("team-a", "system:authenticated"), extra=(("reason", ("debug",)),))


# --- authorization -----------------------------------------------------------------------------------------


async def test_denied_metric_is_403_with_kube_wording(em_serve: EmServe, em_pki: EmPki) -> None:
    server = await serve_with_auth(em_serve, em_pki, EmRecordingAuthorizer(allow=False))
    response = await em_request(
        server.port, METRIC_PATH, ca_pem=server.ca_pem, client_cert=em_pki.proxy_client, headers=HPA_HEADERS
    )
    assert response.status == 403
    document = response.json()
    assert document["kind"] == "Status"
    assert (document["code"], document["reason"]) == (403, "Forbidden")
    assert document["message"] == (
        "wva_desired_replicas.external.metrics.k8s.io is forbidden: User "
        '"system:serviceaccount:kube-system:horizontal-pod-autoscaler" cannot list resource '
        '"wva_desired_replicas" in API group "external.metrics.k8s.io" in the namespace "llm"'
    )
    assert document["details"] == {"group": "external.metrics.k8s.io", "kind": "wva_desired_replicas"}


async def test_denied_discovery_is_403(em_serve: EmServe, em_pki: EmPki) -> None:
    server = await serve_with_auth(em_serve, em_pki, EmRecordingAuthorizer(allow=False))
    response = await em_request(
        server.port, "/apis", ca_pem=server.ca_pem, client_cert=em_pki.proxy_client, headers=[("X-Remote-User", "bob")]
    )
    assert response.status == 403
    assert response.json()["message"] == 'forbidden: User "bob" cannot get path "/apis"'


async def test_authorization_is_per_resource(em_serve: EmServe, em_pki: EmPki) -> None:
    server = await serve_with_auth(
        em_serve, em_pki, EmRecordingAuthorizer(allowed_resources=frozenset({"wva_desired_replicas"}))
    )

    async def status(metric: str) -> int:
        path = f"{EM_BASE}/namespaces/{EM_NS}/{metric}"
        response = await em_request(
            server.port, path, ca_pem=server.ca_pem, client_cert=em_pki.proxy_client, headers=HPA_HEADERS
        )
        return response.status

    assert await status("wva_desired_replicas") == 200
    assert await status("wva_current_replicas") == 403


async def test_system_masters_skip_the_authorizer(em_serve: EmServe, em_pki: EmPki) -> None:
    """The aggregator's availability probe runs as group system:masters; Go always allows it."""
    authorizer = EmRecordingAuthorizer(allow=False)
    server = await serve_with_auth(em_serve, em_pki, authorizer)
    response = await em_request(
        server.port,
        EM_BASE,
        ca_pem=server.ca_pem,
        client_cert=em_pki.proxy_client,
        headers=[("X-Remote-User", "system:kube-aggregator"), ("X-Remote-Group", "system:masters")],
    )
    assert response.status == 200
    assert authorizer.calls == []


async def test_authorizer_failure_is_500(em_serve: EmServe, em_pki: EmPki) -> None:
    server = await serve_with_auth(em_serve, em_pki, EmRecordingAuthorizer(fail=RuntimeError("SAR timed out")))
    response = await em_request(
        server.port, METRIC_PATH, ca_pem=server.ca_pem, client_cert=em_pki.proxy_client, headers=HPA_HEADERS
    )
    assert response.status == 500
    assert response.json()["reason"] == "InternalError"


async def test_without_authenticator_requests_are_anonymous(em_serve: EmServe, em_decisions: DecisionStore) -> None:
    authorizer = EmRecordingAuthorizer(allow=False)
    server = await em_serve(em_decisions, authorizer=authorizer)
    response = await em_request(server.port, METRIC_PATH, ca_pem=server.ca_pem, headers=HPA_HEADERS)
    assert response.status == 403
    ((user, _),) = authorizer.calls
    assert user == ANONYMOUS  # X-Remote-* headers are never trusted without an authenticator


async def test_cached_authorizer_over_http(em_serve: EmServe, em_pki: EmPki) -> None:
    inner = EmRecordingAuthorizer()
    clock = EmFakeClock()
    server = await serve_with_auth(em_serve, em_pki, CachingAuthorizer(inner, clock=clock))
    for _ in range(3):
        response = await em_request(
            server.port, METRIC_PATH, ca_pem=server.ca_pem, client_cert=em_pki.proxy_client, headers=HPA_HEADERS
        )
        assert response.status == 200
    assert len(inner.calls) == 1
    clock.advance(10.0)
    await em_request(
        server.port, METRIC_PATH, ca_pem=server.ca_pem, client_cert=em_pki.proxy_client, headers=HPA_HEADERS
    )
    assert len(inner.calls) == 2


async def test_cached_denial_over_http_is_403_without_a_review(em_serve: EmServe, em_pki: EmPki) -> None:
    """The synchronous path (a cached decision read without awaiting) denies as the awaited one does."""
    inner = EmRecordingAuthorizer(allowed_resources=frozenset())
    clock = EmFakeClock()
    server = await serve_with_auth(em_serve, em_pki, CachingAuthorizer(inner, clock=clock))
    for _ in range(3):
        response = await em_request(
            server.port, METRIC_PATH, ca_pem=server.ca_pem, client_cert=em_pki.proxy_client, headers=HPA_HEADERS
        )
        assert response.status == 403
        assert response.json()["reason"] == "Forbidden"
    assert len(inner.calls) == 1


# --- CachingAuthorizer -------------------------------------------------------------------------------------

ALICE = UserInfo("alice", groups=("system:authenticated",))
BOB = UserInfo("bob", groups=("system:authenticated",))
LIST_DESIRED = RequestAttributes(
    verb="list", path="/x", resource_request=True, namespace="llm", api_group="g", resource="wva_desired_replicas"
)
LIST_RATIO = RequestAttributes(
    verb="list", path="/y", resource_request=True, namespace="llm", api_group="g", resource="wva_desired_ratio"
)


async def test_allow_and_deny_have_separate_ttls() -> None:
    inner = EmRecordingAuthorizer(allowed_resources=frozenset({"wva_desired_replicas"}))
    clock = EmFakeClock()
    cache = CachingAuthorizer(inner, clock=clock, allow_ttl_s=10.0, deny_ttl_s=2.0)
    assert await cache.authorize(ALICE, LIST_DESIRED) is True
    assert await cache.authorize(ALICE, LIST_RATIO) is False
    assert len(inner.calls) == 2
    clock.advance(1.9)
    assert await cache.authorize(ALICE, LIST_DESIRED) is True
    assert await cache.authorize(ALICE, LIST_RATIO) is False
    assert len(inner.calls) == 2  # both cached
    clock.advance(0.1)  # deny expires at exactly 2.0 s
    assert await cache.authorize(ALICE, LIST_RATIO) is False
    assert len(inner.calls) == 3
    assert await cache.authorize(ALICE, LIST_DESIRED) is True
    assert len(inner.calls) == 3  # allow still cached
    clock.advance(8.0)
    assert await cache.authorize(ALICE, LIST_DESIRED) is True
    assert len(inner.calls) == 4  # allow expired at 10 s
    assert (cache.stats.hits, cache.stats.misses) == (3, 4)


async def test_cache_keys_on_user_and_attributes() -> None:
    inner = EmRecordingAuthorizer()
    cache = CachingAuthorizer(inner, clock=EmFakeClock())
    for user in (ALICE, BOB, ALICE, BOB):
        for attributes in (LIST_DESIRED, LIST_RATIO):
            await cache.authorize(user, attributes)
    assert len(inner.calls) == 4
    assert len(cache) == 4


async def test_a_changed_group_is_a_different_identity() -> None:
    inner = EmRecordingAuthorizer()
    cache = CachingAuthorizer(inner, clock=EmFakeClock())
    await cache.authorize(ALICE, LIST_DESIRED)
    await cache.authorize(UserInfo("alice", groups=("system:authenticated", "admins")), LIST_DESIRED)
    assert len(inner.calls) == 2


async def test_errors_are_not_cached() -> None:
    inner = EmRecordingAuthorizer(fail=RuntimeError("apiserver down"))
    cache = CachingAuthorizer(inner, clock=EmFakeClock())
    for _ in range(2):
        with pytest.raises(RuntimeError, match="apiserver down"):
            await cache.authorize(ALICE, LIST_DESIRED)
    inner.fail = None
    assert await cache.authorize(ALICE, LIST_DESIRED) is True
    assert len(inner.calls) == 3


async def test_concurrent_misses_share_one_decision() -> None:
    inner = EmRecordingAuthorizer(delay_s=0.05)
    cache = CachingAuthorizer(inner, clock=EmFakeClock())
    results = await asyncio.wait_for(
        asyncio.gather(*(cache.authorize(ALICE, LIST_DESIRED) for _ in range(5))), timeout=5.0
    )
    assert results == [True] * 5
    assert len(inner.calls) == 1


async def test_a_cancelled_requester_does_not_cancel_the_others() -> None:
    inner = EmRecordingAuthorizer(delay_s=0.05)
    cache = CachingAuthorizer(inner, clock=EmFakeClock())
    first = asyncio.ensure_future(cache.authorize(ALICE, LIST_DESIRED))
    second = asyncio.ensure_future(cache.authorize(ALICE, LIST_DESIRED))
    await asyncio.sleep(0.01)
    first.cancel()
    assert await asyncio.wait_for(second, timeout=5.0) is True
    assert first.cancelled()
    assert len(inner.calls) == 1
    assert await cache.authorize(ALICE, LIST_DESIRED) is True  # the shared decision was cached
    assert len(inner.calls) == 1


async def test_zero_ttl_disables_caching() -> None:
    inner = EmRecordingAuthorizer()
    cache = CachingAuthorizer(inner, clock=EmFakeClock(), allow_ttl_s=0.0, deny_ttl_s=0.0)
    for _ in range(3):
        await cache.authorize(ALICE, LIST_DESIRED)
    assert len(inner.calls) == 3
    assert len(cache) == 0


async def test_cache_is_bounded_and_drops_expired_first() -> None:
    inner = EmRecordingAuthorizer()
    clock = EmFakeClock()
    cache = CachingAuthorizer(inner, clock=clock, allow_ttl_s=10.0, max_entries=2)
    await cache.authorize(ALICE, LIST_DESIRED)
    clock.advance(5.0)
    await cache.authorize(BOB, LIST_DESIRED)
    await cache.authorize(ALICE, LIST_RATIO)  # full: evicts the oldest (alice/desired)
    assert len(cache) == 2
    calls = len(inner.calls)
    await cache.authorize(BOB, LIST_DESIRED)
    assert len(inner.calls) == calls  # still cached
    await cache.authorize(ALICE, LIST_DESIRED)
    assert len(inner.calls) == calls + 1  # was evicted


@pytest.mark.parametrize(
    "kwargs", [{"allow_ttl_s": -1.0}, {"deny_ttl_s": -0.5}, {"max_entries": 0}], ids=["allow", "deny", "size"]
)
def test_invalid_cache_settings(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        CachingAuthorizer(AllowAll(), clock=EmFakeClock(), **kwargs)


async def test_allow_all() -> None:
    assert await AllowAll().authorize(ALICE, LIST_DESIRED) is True
