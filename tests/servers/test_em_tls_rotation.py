"""The client CA and the serving certificate change under a running server (`DynamicServerTLS`), over real TLS:
new connections get the new trust and certificate, connections already open finish with what they negotiated.

The same rotation driven by the real `extension-apiserver-authentication` ConfigMap under a running `serve`:
tests/e2e_k8s/test_live_access.py.
"""

from __future__ import annotations

import shutil
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from adapter.servers.auth import RequestHeaderAuthenticator, RequestHeaderConfig
from adapter.servers.external_metrics import RunningServer, build_external_metrics_app, start_https_server
from adapter.servers.tls import (
    CertificateAuthority,
    DynamicServerTLS,
    client_ssl_context,
    serving_hosts,
    serving_tls,
    write_pem_pair,
)
from adapter.store.decisions import DecisionStore
from tests.servers._em_support import EmClientCert, em_request

PROXY_CN = "front-proxy-client"
MASTERS = [("X-Remote-User", "admin"), ("X-Remote-Group", "system:masters")]
TLS_REFUSED = (aiohttp.ClientError, ssl.SSLError, ConnectionError)


@dataclass
class World:
    directory: Path
    serving_ca: CertificateAuthority
    old_proxy_ca: CertificateAuthority
    new_proxy_ca: CertificateAuthority
    old_client: EmClientCert
    new_client: EmClientCert
    tls: DynamicServerTLS
    running: RunningServer
    authenticator: RequestHeaderAuthenticator

    def issue_serving(self, authority: CertificateAuthority, stem: str) -> tuple[Path, Path]:
        hosts = serving_hosts(service="wva", namespace="ns")
        return write_pem_pair(self.directory / stem, "serving", authority.issue(hosts[2], hosts=hosts, server=True))


def _client(directory: Path, authority: CertificateAuthority, stem: str, cn: str = PROXY_CN) -> EmClientCert:
    return EmClientCert(*write_pem_pair(directory / "clients", stem, authority.issue(cn, client=True)))


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    serving_ca = CertificateAuthority.create("serving-ca")
    old_proxy, new_proxy = CertificateAuthority.create("front-proxy-ca"), CertificateAuthority.create("front-proxy-ca")
    hosts = serving_hosts(service="wva", namespace="ns")
    live = tmp_path / "live"
    cert, key = write_pem_pair(live, "serving", serving_ca.issue(hosts[2], hosts=hosts, server=True))
    tls = serving_tls(
        cert_file=cert, key_file=key, service="wva", namespace="ns", client_ca_pem=old_proxy.cert_pem
    ).dynamic
    authenticator = RequestHeaderAuthenticator(RequestHeaderConfig(old_proxy.cert_pem.decode(), (PROXY_CN,)))
    app = build_external_metrics_app(DecisionStore(), authenticator=authenticator)
    running = await start_https_server(app, host="127.0.0.1", port=0, ssl_context=tls.context)
    try:
        yield World(
            tmp_path,
            serving_ca,
            old_proxy,
            new_proxy,
            _client(tmp_path, old_proxy, "old"),
            _client(tmp_path, new_proxy, "new"),
            tls,
            running,
            authenticator,
        )
    finally:
        await running.close()


async def _get(world: World, client: EmClientCert | None, *, sni: bool = True, ca: bytes | None = None) -> int:
    response = await em_request(
        world.running.port,
        "/apis",
        ca_pem=ca or world.serving_ca.cert_pem,
        client_cert=client,
        headers=MASTERS,
        server_hostname="wva.ns.svc" if sni else None,
    )
    return response.status


@pytest.mark.parametrize("sni", [True, False], ids=["sni", "no-sni"])
async def test_a_rotated_client_ca_applies_to_new_connections(world: World, sni: bool) -> None:
    """Handshakes with and without SNI both go through the switch (OpenSSL calls it for every ClientHello)."""
    assert await _get(world, world.old_client, sni=sni) == 200
    with pytest.raises(TLS_REFUSED):
        await _get(world, world.new_client, sni=sni)
    assert world.tls.set_client_ca(world.new_proxy_ca.cert_pem) is True
    assert await _get(world, world.new_client, sni=sni) == 200
    with pytest.raises(TLS_REFUSED):
        await _get(world, world.old_client, sni=sni)  # rotated out: no longer trusted (add_client_ca could not)
    assert await _get(world, None, sni=sni) == 401, "no certificate: through TLS, then 401"
    assert world.tls.stats.client_ca_changes == 1


async def test_a_bundle_of_both_cas_trusts_both(world: World) -> None:
    bundle = world.old_proxy_ca.cert_pem + world.new_proxy_ca.cert_pem
    world.tls.set_client_ca(bundle)
    assert await _get(world, world.old_client) == 200
    assert await _get(world, world.new_client) == 200
    assert world.tls.set_client_ca(bundle) is False, "the same bundle again changes nothing"
    assert world.tls.stats.client_ca_changes == 1


async def test_an_open_connection_finishes_with_what_it_negotiated(world: World) -> None:
    """A keep-alive connection made with the old CA's certificate keeps serving after the rotation; only a new
    handshake meets the new trust."""
    context = client_ssl_context(
        ca_pem=world.serving_ca.cert_pem,
        cert_file=world.old_client.cert_file,
        key_file=world.old_client.key_file,
    )
    url = f"https://127.0.0.1:{world.running.port}/apis"
    connector = aiohttp.TCPConnector(ssl=context, limit=1, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get(url, headers=MASTERS, server_hostname="wva.ns.svc") as before:
            assert before.status == 200
            await before.read()
        world.tls.set_client_ca(world.new_proxy_ca.cert_pem)
        for _ in range(3):
            async with session.get(url, headers=MASTERS, server_hostname="wva.ns.svc") as after:
                assert after.status == 200
                await after.read()
    with pytest.raises(TLS_REFUSED):
        await _get(world, world.old_client)


async def test_allowed_names_change_with_the_authenticator(world: World) -> None:
    other = _client(world.directory, world.old_proxy_ca, "other-cn", cn="other-proxy")
    assert await _get(world, other) == 401
    world.authenticator.update(RequestHeaderConfig(world.old_proxy_ca.cert_pem.decode(), (PROXY_CN, "other-proxy")))
    assert await _get(world, other) == 200


async def test_a_renewed_serving_certificate_is_served_from_the_next_handshake(world: World) -> None:
    renewed_ca = CertificateAuthority.create("renewed-serving-ca")
    cert, key = world.issue_serving(renewed_ca, "renewed")
    assert world.tls.reload_certificate() is False, "unchanged files: nothing to do"
    shutil.copyfile(cert, world.tls.cert_file)
    shutil.copyfile(key, world.tls.key_file)
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await _get(world, world.old_client, ca=renewed_ca.cert_pem)
    assert world.tls.reload_certificate() is True
    assert await _get(world, world.old_client, ca=renewed_ca.cert_pem) == 200
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await _get(world, world.old_client)  # the old certificate is no longer served
    assert world.tls.stats.certificate_reloads == 1


async def test_a_half_written_renewal_keeps_the_served_certificate(world: World) -> None:
    """cert-manager's Secret update lands as two files: caught between them, the pair does not match."""
    cert, _key = world.issue_serving(CertificateAuthority.create("renewed"), "half")
    shutil.copyfile(cert, world.tls.cert_file)  # the key is still the old one
    with pytest.raises(ssl.SSLError):
        world.tls.reload_certificate()
    assert world.tls.stats.reload_errors == 1
    assert await _get(world, world.old_client) == 200, "still serving the previous certificate"


async def test_a_bundle_without_a_certificate_is_refused_and_the_previous_ca_stays(world: World) -> None:
    with pytest.raises(ValueError, match="no PEM certificate"):
        world.tls.set_client_ca("not a certificate")
    assert world.tls.stats.reload_errors == 1
    assert await _get(world, world.old_client) == 200


def test_a_server_started_without_client_certificates_cannot_take_a_ca(tmp_path: Path) -> None:
    tls = serving_tls(cert_file=None, key_file=None, service="wva", namespace="ns", directory=tmp_path).dynamic
    assert tls.context.verify_mode == ssl.CERT_NONE
    with pytest.raises(ValueError, match="started without client certificates"):
        tls.set_client_ca(CertificateAuthority.create("x").cert_pem)
