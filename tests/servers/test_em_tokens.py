"""Bearer tokens: the TokenReview cache (allowed and denied answers, TTLs, bounds, audiences, failures) and the
union with front-proxy certificates, over real HTTPS where the answer is a Status.

The TokenReview itself is a fake `TokenReviewer` here; tests/e2e_k8s/test_live_access.py sends real ones to
the real kube-apiserver and counts them in its audit log.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import pytest

from adapter.domain.errors import ConfigError, KubeError, Unauthorized
from adapter.k8s.authn import TokenReviewResult, parse_token_review, token_review
from adapter.servers.auth import (
    AUTHENTICATED_GROUP,
    BearerTokenAuthenticator,
    RequestHeaderAuthenticator,
    RequestHeaderConfig,
    UnionAuthenticator,
    UserInfo,
    bearer_token,
)
from adapter.store.decisions import DecisionStore
from tests.servers._em_support import (
    EM_BASE,
    EM_NS,
    EM_PROXY_CN,
    EmFakeClock,
    EmPki,
    EmRecordingAuthorizer,
    em_request,
)
from tests.servers.conftest import EmServe

METRIC_PATH = f"{EM_BASE}/namespaces/{EM_NS}/wva_desired_replicas?" + urllib.parse.urlencode(
    {"labelSelector": "variant_name=llama-h100"}
)
READER = TokenReviewResult(
    authenticated=True,
    username="system:serviceaccount:monitoring:prometheus",
    uid="u-1",
    groups=("system:serviceaccounts", "system:serviceaccounts:monitoring"),
    extra={"authentication.kubernetes.io/pod-name": ("prometheus-0",)},
    audiences=("https://kubernetes.default.svc",),
)
DENIED = TokenReviewResult(authenticated=False, error="[invalid bearer token, token has expired]")


@dataclass
class FakeReviewer:
    """Answers from `answers` by token; records every review; can fail or stall on demand."""

    answers: dict[str, TokenReviewResult] = field(default_factory=dict)
    reviewed: list[str] = field(default_factory=list)
    fail: BaseException | None = None
    delay_s: float = 0.0

    async def review(self, token: str) -> TokenReviewResult:
        self.reviewed.append(token)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail is not None:
            raise self.fail
        return self.answers.get(token, DENIED)


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _authenticator(reviewer: FakeReviewer, clock: EmFakeClock, **kwargs: Any) -> BearerTokenAuthenticator:
    return BearerTokenAuthenticator(reviewer, clock=clock, **kwargs)


# ---- the header -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "token"),
    [
        pytest.param("Bearer abc.def", "abc.def", id="bearer"),
        pytest.param("bearer abc", "abc", id="scheme-lower-case"),
        pytest.param("BEARER  abc ", "abc", id="extra-spaces"),
        pytest.param("Basic dXNlcjpwYXNz", None, id="basic"),
        pytest.param("Bearer", None, id="no-token"),
        pytest.param("Bearer   ", None, id="blank-token"),
        pytest.param("", None, id="empty"),
    ],
)
def test_bearer_token_parsing(header: str, token: str | None) -> None:
    assert bearer_token({"Authorization": header} if header else {}) == token


# ---- the review body and answer ------------------------------------------------------------------------------


def test_review_body_without_and_with_audiences() -> None:
    assert token_review("t") == {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": "t"},
    }
    assert token_review("t", ("wva", "api"))["spec"] == {"token": "t", "audiences": ["wva", "api"]}


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        pytest.param(
            {
                "status": {
                    "authenticated": True,
                    "user": {
                        "username": "system:serviceaccount:ns:sa",
                        "uid": "42",
                        "groups": ["system:serviceaccounts"],
                        "extra": {"authentication.kubernetes.io/pod-uid": ["p-1"]},
                    },
                    "audiences": ["https://kubernetes.default.svc"],
                }
            },
            TokenReviewResult(
                True,
                "system:serviceaccount:ns:sa",
                "42",
                ("system:serviceaccounts",),
                {"authentication.kubernetes.io/pod-uid": ("p-1",)},
                ("https://kubernetes.default.svc",),
            ),
            id="authenticated",
        ),
        pytest.param(
            {"status": {"authenticated": False, "error": "invalid bearer token"}},
            TokenReviewResult(False, error="invalid bearer token"),
            id="denied",
        ),
        pytest.param({}, TokenReviewResult(False, error="the TokenReview came back without a status"), id="no-status"),
        pytest.param({"status": {"authenticated": "yes", "user": "x"}}, TokenReviewResult(False), id="malformed"),
    ],
)
def test_parse_token_review(answer: dict[str, Any], expected: TokenReviewResult) -> None:
    assert parse_token_review(answer) == expected


# ---- the cache --------------------------------------------------------------------------------------------


async def test_allowed_token_is_reviewed_once_per_ttl() -> None:
    reviewer, clock = FakeReviewer({"good": READER}), EmFakeClock()
    tokens = _authenticator(reviewer, clock, allow_ttl_s=10.0)
    for _ in range(5):
        user = await tokens.authenticate(peer_cert=None, headers=_headers("good"))
        assert user == UserInfo(
            name=READER.username,
            uid="u-1",
            groups=(*READER.groups, AUTHENTICATED_GROUP),
            extra=(("authentication.kubernetes.io/pod-name", ("prometheus-0",)),),
        )
    assert reviewer.reviewed == ["good"]
    assert (tokens.stats.hits, tokens.stats.misses) == (4, 1)
    clock.advance(9.9)
    await tokens.authenticate(peer_cert=None, headers=_headers("good"))
    assert len(reviewer.reviewed) == 1
    clock.advance(0.2)
    await tokens.authenticate(peer_cert=None, headers=_headers("good"))
    assert len(reviewer.reviewed) == 2, "an expired answer is asked again"


async def test_denied_token_is_cached_with_its_own_ttl() -> None:
    reviewer, clock = FakeReviewer(), EmFakeClock()
    tokens = _authenticator(reviewer, clock, allow_ttl_s=60.0, deny_ttl_s=2.0)
    for _ in range(3):
        assert await tokens.authenticate(peer_cert=None, headers=_headers("bad")) is None
    assert reviewer.reviewed == ["bad"]
    clock.advance(2.0)
    assert await tokens.authenticate(peer_cert=None, headers=_headers("bad")) is None
    assert reviewer.reviewed == ["bad", "bad"]


async def test_zero_ttl_reviews_every_request() -> None:
    reviewer, clock = FakeReviewer({"good": READER}), EmFakeClock()
    tokens = _authenticator(reviewer, clock, allow_ttl_s=0.0, deny_ttl_s=0.0)
    for _ in range(3):
        await tokens.authenticate(peer_cert=None, headers=_headers("good"))
    assert len(reviewer.reviewed) == 3
    assert len(tokens) == 0


async def test_a_failed_review_is_a_401_that_says_so_and_is_not_cached(caplog: pytest.LogCaptureFixture) -> None:
    reviewer, clock = FakeReviewer({"good": READER}, fail=KubeError("create tokenreviews: HTTP 503")), EmFakeClock()
    tokens = _authenticator(reviewer, clock)
    with pytest.raises(Unauthorized, match="could not be verified") as failure:
        await tokens.authenticate(peer_cert=None, headers=_headers("good"))
    assert "not a verdict on the token" in str(failure.value)
    assert "HTTP 503" in caplog.text, "the cause goes to the log, not to the caller"
    reviewer.fail = None
    assert await tokens.authenticate(peer_cert=None, headers=_headers("good")) is not None
    assert len(reviewer.reviewed) == 2
    assert (tokens.reviews, tokens.failures) == (2, 1)


async def test_concurrent_requests_with_one_token_share_one_review() -> None:
    reviewer, clock = FakeReviewer({"good": READER}, delay_s=0.05), EmFakeClock()
    tokens = _authenticator(reviewer, clock)
    users = await asyncio.gather(*(tokens.authenticate(peer_cert=None, headers=_headers("good")) for _ in range(5)))
    assert all(u is not None and u.name == READER.username for u in users)
    assert reviewer.reviewed == ["good"]


async def test_the_cache_is_bounded_and_keeps_no_token_in_the_clear() -> None:
    reviewer, clock = FakeReviewer(), EmFakeClock()
    tokens = _authenticator(reviewer, clock, max_entries=3)
    for i in range(10):
        await tokens.authenticate(peer_cert=None, headers=_headers(f"random-{i}"))
    assert len(tokens) == 3
    keys = list(tokens._cache._entries)
    assert all(isinstance(k, bytes) and len(k) == 32 for k in keys)
    assert not any(b"random" in k for k in keys)


@pytest.mark.parametrize(
    ("wanted", "answered", "accepted"),
    [
        pytest.param(("wva",), ("wva", "other"), True, id="intersects"),
        pytest.param(("wva",), ("https://kubernetes.default.svc",), False, id="another-audience"),
        pytest.param(("wva",), (), True, id="answer-names-none"),
        pytest.param((), ("anything",), True, id="none-wanted"),
    ],
)
async def test_audiences(wanted: tuple[str, ...], answered: tuple[str, ...], accepted: bool) -> None:
    answer = TokenReviewResult(True, "u", audiences=answered)
    tokens = _authenticator(FakeReviewer({"t": answer}), EmFakeClock(), audiences=wanted)
    assert (await tokens.authenticate(peer_cert=None, headers=_headers("t")) is not None) is accepted


async def test_unauthenticated_or_nameless_answers_are_denials() -> None:
    reviewer = FakeReviewer({"nameless": TokenReviewResult(True, "")})
    tokens = _authenticator(reviewer, EmFakeClock())
    assert await tokens.authenticate(peer_cert=None, headers=_headers("nameless")) is None
    assert await tokens.authenticate(peer_cert=None, headers={}) is None
    assert reviewer.reviewed == ["nameless"], "no header, no review"


@pytest.mark.parametrize("kwargs", [{"allow_ttl_s": -1.0}, {"deny_ttl_s": -0.1}, {"max_entries": 0}])
def test_invalid_cache_settings(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        _authenticator(FakeReviewer(), EmFakeClock(), **kwargs)


# ---- union with the front proxy ---------------------------------------------------------------------------


@dataclass
class _Fixed:
    user: UserInfo | None = None
    error: Unauthorized | None = None
    calls: int = 0

    async def authenticate(self, *, peer_cert: object, headers: object) -> UserInfo | None:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.user


ALICE, BOB = UserInfo("alice"), UserInfo("bob")


@pytest.mark.parametrize(
    ("first", "second", "expected", "second_calls"),
    [
        pytest.param(_Fixed(ALICE), _Fixed(BOB), ALICE, 0, id="first-vouches"),
        pytest.param(_Fixed(None), _Fixed(BOB), BOB, 1, id="second-vouches"),
        pytest.param(_Fixed(None), _Fixed(None), None, 1, id="nobody"),
        pytest.param(_Fixed(error=Unauthorized("down")), _Fixed(BOB), BOB, 1, id="a-failure-then-a-user"),
    ],
)
async def test_union_order(first: _Fixed, second: _Fixed, expected: UserInfo | None, second_calls: int) -> None:
    union = UnionAuthenticator(first, second)
    assert await union.authenticate(peer_cert=None, headers={}) == expected
    assert second.calls == second_calls


async def test_union_raises_the_failure_when_nobody_vouches() -> None:
    union = UnionAuthenticator(_Fixed(None), _Fixed(error=Unauthorized("the review failed")))
    with pytest.raises(Unauthorized, match="the review failed"):
        await union.authenticate(peer_cert=None, headers={})


# ---- over HTTPS -------------------------------------------------------------------------------------------


async def _serve_union(
    em_serve: EmServe, em_pki: EmPki, em_decisions: DecisionStore, reviewer: FakeReviewer
) -> tuple[int, bytes, EmRecordingAuthorizer]:
    config = RequestHeaderConfig(client_ca_pem=em_pki.front_proxy_ca_pem.decode(), allowed_names=(EM_PROXY_CN,))
    tokens = BearerTokenAuthenticator(reviewer, clock=EmFakeClock())
    authorizer = EmRecordingAuthorizer(allow=True)
    server = await em_serve(
        em_decisions,
        authenticator=UnionAuthenticator(RequestHeaderAuthenticator(config), tokens),
        authorizer=authorizer,
        client_ca=True,
    )
    return server.port, server.ca_pem, authorizer


async def test_a_reviewed_token_is_served_and_authorized_as_its_user(
    em_serve: EmServe, em_pki: EmPki, em_decisions: DecisionStore
) -> None:
    port, ca, authorizer = await _serve_union(em_serve, em_pki, em_decisions, FakeReviewer({"good": READER}))
    response = await em_request(port, METRIC_PATH, ca_pem=ca, headers=[("Authorization", "Bearer good")])
    assert response.status == 200, response.text
    assert response.json()["items"][0]["value"] == "3"
    [(user, attributes)] = authorizer.calls
    assert user.name == READER.username
    assert AUTHENTICATED_GROUP in user.groups
    assert attributes.resource == "wva_desired_replicas"


async def test_front_proxy_identity_wins_over_a_token(
    em_serve: EmServe, em_pki: EmPki, em_decisions: DecisionStore
) -> None:
    """As in k8s.io/apiserver: the front proxy first; its request is never reviewed."""
    reviewer = FakeReviewer({"good": READER})
    port, ca, authorizer = await _serve_union(em_serve, em_pki, em_decisions, reviewer)
    headers = [("X-Remote-User", "hpa"), ("Authorization", "Bearer good")]
    response = await em_request(port, METRIC_PATH, ca_pem=ca, client_cert=em_pki.proxy_client, headers=headers)
    assert response.status == 200
    assert authorizer.calls[0][0].name == "hpa"
    assert reviewer.reviewed == []


@pytest.mark.parametrize(
    ("headers", "fail", "message"),
    [
        pytest.param([("Authorization", "Bearer bad")], None, "Unauthorized", id="bad-token"),
        pytest.param([], None, "Unauthorized", id="no-credentials"),
        pytest.param(
            [("Authorization", "Bearer good")],
            KubeError("create tokenreviews: HTTP 403: forbidden"),
            "the bearer token could not be verified",
            id="review-failed",
        ),
    ],
)
async def test_401_is_a_status(
    em_serve: EmServe,
    em_pki: EmPki,
    em_decisions: DecisionStore,
    headers: list[tuple[str, str]],
    fail: BaseException | None,
    message: str,
) -> None:
    reviewer = FakeReviewer({"good": READER}, fail=fail)
    port, ca, authorizer = await _serve_union(em_serve, em_pki, em_decisions, reviewer)
    response = await em_request(port, METRIC_PATH, ca_pem=ca, headers=headers)
    assert response.status == 401
    body = response.json()
    assert (body["kind"], body["status"], body["reason"], body["code"]) == ("Status", "Failure", "Unauthorized", 401)
    assert message in body["message"]
    assert "HTTP 403" not in body["message"], "the cause stays in our log"
    assert authorizer.calls == []
