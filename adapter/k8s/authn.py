"""Delegated authentication of bearer tokens: a TokenReview (`authentication.k8s.io/v1`) per unknown token.

`TokenReviewClient` satisfies `adapter.servers.auth.TokenReviewer` structurally (adapter.k8s may not import
adapter.servers): `await review(token)` returns a `TokenReviewResult` (the review's `status`), or raises
KubeError when kube-apiserver gave no answer — unreachable, a timeout, or our ServiceAccount lacking
`create tokenreviews` (the `system:auth-delegator` binding). Wrap it in
`adapter.servers.auth.BearerTokenAuthenticator`, which caches answers and turns a failure into a 401.

The token travels only in the review's body; it is never logged (`KubeClient` errors name the resource, not
the body).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from adapter.domain.errors import KubeError
from adapter.k8s.client import KubeClient
from adapter.k8s.resources import TOKEN_REVIEWS

__all__ = ["TokenReviewClient", "TokenReviewResult", "parse_token_review", "token_review"]


@dataclass(frozen=True, slots=True)
class TokenReviewResult:
    """`status` of a TokenReview: who the token belongs to, if anyone."""

    authenticated: bool
    username: str = ""
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, Sequence[str]] = field(default_factory=dict)
    audiences: tuple[str, ...] = ()
    error: str = ""


def token_review(token: str, audiences: Sequence[str] = ()) -> dict[str, Any]:
    """The request body. Without audiences kube-apiserver checks the token against its own (`--api-audiences`,
    by default its service-account issuer), which is what a ServiceAccount token from a pod carries."""
    spec: dict[str, Any] = {"token": token}
    if audiences:
        spec["audiences"] = list(audiences)
    return {"apiVersion": TOKEN_REVIEWS.api_version, "kind": TOKEN_REVIEWS.kind, "spec": spec}


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def parse_token_review(review: Mapping[str, Any]) -> TokenReviewResult:
    """The answer, read defensively: anything but `status.authenticated: true` with a user is a denial."""
    status = review.get("status")
    if not isinstance(status, Mapping):
        return TokenReviewResult(authenticated=False, error="the TokenReview came back without a status")
    user = status.get("user")
    user = user if isinstance(user, Mapping) else {}
    extra = user.get("extra")
    extra = {str(k): _strings(v) for k, v in extra.items()} if isinstance(extra, Mapping) else {}
    return TokenReviewResult(
        authenticated=status.get("authenticated") is True,
        username=str(user.get("username") or ""),
        uid=str(user.get("uid") or ""),
        groups=_strings(user.get("groups")),
        extra=extra,
        audiences=_strings(status.get("audiences")),
        error=str(status.get("error") or ""),
    )


class TokenReviewClient:
    """`await review(token) -> TokenReviewResult`: POST one TokenReview. `timeout_s` bounds it (Go's
    delegating authenticator: 10 s); `audiences` are sent with every review."""

    def __init__(self, client: KubeClient, *, audiences: Sequence[str] = (), timeout_s: float = 10.0) -> None:
        self._client = client
        self._audiences = tuple(audiences)
        self._timeout_s = timeout_s
        self.reviews = 0

    async def review(self, token: str) -> TokenReviewResult:
        self.reviews += 1
        try:
            async with asyncio.timeout(self._timeout_s):
                answer = await self._client.create(TOKEN_REVIEWS, token_review(token, self._audiences))
        except TimeoutError as exc:
            raise KubeError(f"TokenReview: no answer within {self._timeout_s:g} s") from exc
        return parse_token_review(answer)
