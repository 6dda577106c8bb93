"""Who may call the External Metrics API, composed for `serve`, and kept current while it runs.

    front-proxy (requestheader) ─┐                          kube-system/extension-apiserver-authentication
    bearer token (TokenReview) ──┴─ UnionAuthenticator       └─ watched: client CA → TLS, allowed names → authn
    SubjectAccessReview ─────────── CachingAuthorizer        serving certificate files ─ polled: renewals → TLS

`build_access` reads the requestheader ConfigMap once (a cluster without it fails `serve` at start, as
before), and builds the authenticators and the authorizer; `follow_requestheader` and `follow_certificate`
are the long-running tasks that apply changes without a restart (existing connections keep what they
negotiated). `export_access_metrics` puts the caches' and reloads' counters on our /metrics.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from dataclasses import dataclass
from typing import Final

from adapter.config.settings import Settings
from adapter.k8s.authn import TokenReviewClient
from adapter.k8s.authz import SubjectAccessReviewAuthorizer, load_requestheader_config, watch_requestheader_config
from adapter.k8s.client import KubeClient
from adapter.servers.auth import (
    Authenticator,
    Authorizer,
    BearerTokenAuthenticator,
    CachingAuthorizer,
    RequestHeaderAuthenticator,
    RequestHeaderConfig,
    UnionAuthenticator,
    requestheader_config_from_configmap,
)
from adapter.servers.telemetry import Telemetry
from adapter.servers.tls import DynamicServerTLS

__all__ = [
    "CERTIFICATE_POLL_S",
    "Access",
    "apply_requestheader",
    "build_access",
    "export_access_metrics",
    "follow_certificate",
    "follow_requestheader",
]

log = logging.getLogger(__name__)

CERTIFICATE_POLL_S: Final = 10.0
"""How often the serving certificate files are compared with what is served. A Secret volume is updated
through a symlink swap that file-change notifications miss; reading two small files every 10 s is free, and a
cert-manager renewal happens at 2/3 of a lifetime of weeks."""


@dataclass(frozen=True, slots=True)
class Access:
    """What the External Metrics API authenticates and authorizes with. All None with
    `--authentication-skip-lookup` (every request is anonymous and allowed)."""

    authenticator: Authenticator | None
    authorizer: Authorizer | None
    requestheader: RequestHeaderAuthenticator | None = None
    tokens: BearerTokenAuthenticator | None = None
    cached_authorizer: CachingAuthorizer | None = None

    @property
    def client_ca_pem(self) -> str | None:
        return self.requestheader.config.client_ca_pem if self.requestheader is not None else None


async def build_access(settings: Settings, client: KubeClient) -> Access:
    """Front-proxy certificates first, then bearer tokens; SubjectAccessReviews for both (10 s caches)."""
    if settings.authentication_skip_lookup:
        log.warning("--authentication-skip-lookup: External Metrics API requests are not authenticated")
        return Access(None, None)
    config = await load_requestheader_config(client, requestheader_config_from_configmap)
    requestheader = RequestHeaderAuthenticator(config)
    ttl_s = settings.authentication_token_webhook_cache_ttl_s
    tokens = BearerTokenAuthenticator(
        TokenReviewClient(client, audiences=settings.token_audiences),
        clock=time.monotonic,
        audiences=settings.token_audiences,
        allow_ttl_s=ttl_s,
        deny_ttl_s=ttl_s,
    )
    authorizer = CachingAuthorizer(SubjectAccessReviewAuthorizer(client), clock=time.monotonic)
    return Access(UnionAuthenticator(requestheader, tokens), authorizer, requestheader, tokens, authorizer)


def apply_requestheader(access: Access, tls: DynamicServerTLS, config: RequestHeaderConfig) -> None:
    """A new `extension-apiserver-authentication`: the TLS context first (new connections verify against the
    new client CA), then allowed and header names. A CA that does not load keeps the previous one."""
    if access.requestheader is None:
        return
    try:
        if tls.set_client_ca(config.client_ca_pem):
            log.info("front-proxy client CA rotated: new connections verify against the new bundle")
    except (ssl.SSLError, ValueError) as exc:
        log.error("front-proxy client CA not applied, keeping the previous one: %s", exc)
        return
    if config != access.requestheader.config:
        access.requestheader.update(config)
        log.info("requestheader configuration applied (allowed names %s)", list(config.allowed_names) or "any")


async def follow_requestheader(client: KubeClient, access: Access, tls: DynamicServerTLS) -> None:
    """Run until cancelled: apply every change of the requestheader ConfigMap (no-op without it)."""
    if access.requestheader is None:
        await asyncio.Event().wait()
        return
    await watch_requestheader_config(
        client, requestheader_config_from_configmap, lambda config: apply_requestheader(access, tls, config)
    )


async def follow_certificate(tls: DynamicServerTLS, *, poll_s: float = CERTIFICATE_POLL_S) -> None:
    """Run until cancelled: serve renewed certificate files (cert-manager) from the next handshake on. A pair
    caught mid-update (certificate and key not matching yet) is retried at the next poll."""
    while True:
        await asyncio.sleep(poll_s)
        try:
            if tls.reload_certificate():
                log.info("serving certificate %s reloaded", tls.cert_file)
        except (ssl.SSLError, ValueError, OSError) as exc:
            log.warning("serving certificate not reloaded (kept the previous one; retried in %g s): %s", poll_s, exc)


def export_access_metrics(telemetry: Telemetry, access: Access, tls: DynamicServerTLS) -> None:
    """Cache hits and misses, TokenReview failures, TLS reloads on our /metrics."""
    tokens, authorizer = access.tokens, access.cached_authorizer

    def caches() -> dict[tuple[str, ...], float]:
        out: dict[tuple[str, ...], float] = {}
        named = [
            ("token", tokens.stats if tokens else None),
            ("authorization", authorizer.stats if authorizer else None),
        ]
        for name, stats in named:
            if stats is not None:
                out[(name, "hit")] = stats.hits
                out[(name, "miss")] = stats.misses
        return out

    def reviews() -> dict[tuple[str, ...], float]:
        if tokens is None:
            return {}
        return {("answered",): tokens.reviews - tokens.failures, ("failed",): tokens.failures}

    telemetry.add_family(
        "wva_auth_cache_requests",
        "Authentication (token) and authorization cache lookups, by result.",
        kind="counter",
        labelnames=("cache", "result"),
        read=caches,
    )
    telemetry.add_family(
        "wva_token_reviews",
        "TokenReviews sent for bearer tokens, by outcome (answered, failed: no answer, a 401 was served).",
        kind="counter",
        labelnames=("outcome",),
        read=reviews,
    )
    telemetry.add_family(
        "wva_tls_reloads",
        "TLS context rebuilds: client_ca (front-proxy CA rotated), certificate (serving files renewed), error.",
        kind="counter",
        labelnames=("what",),
        read=lambda: {
            ("client_ca",): tls.stats.client_ca_changes,
            ("certificate",): tls.stats.certificate_reloads,
            ("error",): tls.stats.reload_errors,
        },
    )
