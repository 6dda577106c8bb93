"""Serving certificates: generated or given, and verifiable under every name the aggregator may use."""

from __future__ import annotations

import ipaddress
import shutil
import ssl
import stat
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from adapter.servers.external_metrics import build_external_metrics_app, start_https_server
from adapter.servers.tls import (
    CertificateAuthority,
    add_client_ca,
    serving_hosts,
    serving_tls,
    write_pem_pair,
)
from adapter.store.decisions import DecisionStore
from tests.servers._em_support import em_request


def test_generated_certificate_covers_the_service_names(tmp_path: Path) -> None:
    tls = serving_tls(cert_file=None, key_file=None, service="wva", namespace="wva-system", directory=tmp_path)
    assert tls.generated
    assert tls.ca_pem is not None
    assert tls.cert_file.parent == tmp_path
    certificate = x509.load_pem_x509_certificate(tls.cert_file.read_bytes())
    sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == {
        "wva",
        "wva.wva-system",
        "wva.wva-system.svc",
        "wva.wva-system.svc.cluster.local",
        "localhost",
    }
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    authority = x509.load_pem_x509_certificate(tls.ca_pem)
    certificate.verify_directly_issued_by(authority)
    assert stat.S_IMODE(tls.key_file.stat().st_mode) == 0o600
    assert tls.context.verify_mode == ssl.CERT_NONE  # no client CA given: no client certificates asked


def test_generated_certificate_goes_to_a_temp_dir_by_default() -> None:
    tls = serving_tls(cert_file=None, key_file=None, service="wva", namespace="ns")
    try:
        assert tls.cert_file.exists()
        assert tls.key_file.exists()
        assert tls.cert_file.parent.name.startswith("wva-adapter-tls-")
    finally:
        shutil.rmtree(tls.cert_file.parent)


@pytest.mark.parametrize(
    "hostname", ["wva.wva-system.svc", "wva.wva-system.svc.cluster.local", "localhost", "wva.wva-system"]
)
async def test_clients_verify_every_service_name(tmp_path: Path, hostname: str) -> None:
    tls = serving_tls(cert_file=None, key_file=None, service="wva", namespace="wva-system", directory=tmp_path)
    assert tls.ca_pem is not None
    running = await start_https_server(
        build_external_metrics_app(DecisionStore()), host="127.0.0.1", port=0, ssl_context=tls.context
    )
    try:
        response = await em_request(running.port, "/healthz", ca_pem=tls.ca_pem, server_hostname=hostname)
        assert response.status == 200
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await em_request(running.port, "/healthz", ca_pem=tls.ca_pem, server_hostname="evil.example.com")
    finally:
        await running.close()


async def test_given_certificate_files_are_served(tmp_path: Path) -> None:
    authority = CertificateAuthority.create("operator-ca")
    issued = authority.issue("wva.ns.svc", hosts=serving_hosts(service="wva", namespace="ns"), server=True)
    cert_file, key_file = write_pem_pair(tmp_path, "given", issued)
    front_proxy = CertificateAuthority.create("front-proxy-ca")
    tls = serving_tls(
        cert_file=cert_file,
        key_file=key_file,
        service="ignored",
        namespace="ignored",
        client_ca_pem=front_proxy.cert_pem,
    )
    assert not tls.generated
    assert tls.ca_pem is None
    assert (tls.cert_file, tls.key_file) == (cert_file, key_file)
    assert tls.context.verify_mode == ssl.CERT_OPTIONAL
    running = await start_https_server(
        build_external_metrics_app(DecisionStore()), host="127.0.0.1", port=0, ssl_context=tls.context
    )
    try:
        # No client certificate is fine at the TLS level (CERT_OPTIONAL).
        response = await em_request(running.port, "/readyz", ca_pem=authority.cert_pem)
        assert response.status == 200
        # The server presents the given certificate: a client trusting another CA refuses it.
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await em_request(running.port, "/readyz", ca_pem=front_proxy.cert_pem)
    finally:
        await running.close()


@pytest.mark.parametrize(("cert", "key"), [("x.crt", None), (None, "x.key")], ids=["cert-only", "key-only"])
def test_cert_and_key_go_together(cert: str | None, key: str | None) -> None:
    with pytest.raises(ValueError, match="must be given together"):
        serving_tls(cert_file=cert, key_file=key, service="s", namespace="n")


def test_client_ca_must_be_pem() -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with pytest.raises(ValueError, match="no PEM certificate"):
        add_client_ca(context, b"garbage")


def test_leaf_needs_a_usage() -> None:
    with pytest.raises(ValueError, match="server=True"):
        CertificateAuthority.create("ca").issue("x")


def test_issued_client_certificate_carries_groups() -> None:
    authority = CertificateAuthority.create("ca")
    issued = authority.issue("alice", organizations=("team-a",), client=True)
    certificate = x509.load_pem_x509_certificate(issued.cert_pem)
    assert certificate.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "team-a"
    assert certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
    usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
