"""TLS for the External Metrics API: the serving certificate, the server context, the client-CA trust.

Serving certificate. kube-aggregator dials `<service>.<namespace>.svc` and verifies the certificate
against the APIService's `caBundle` (or skips verification if `insecureSkipTLSVerify`). With
`--tls-cert-file/--tls-private-key-file` we serve those; otherwise we generate one at start, as the Go
adapters do (`MaybeDefaultWithSelfSignedCerts`): a throw-away CA and a leaf signed by it, with SANs
`<svc>`, `<svc>.<ns>`, `<svc>.<ns>.svc`, `<svc>.<ns>.svc.cluster.local`, `localhost`, `127.0.0.1`. The CA key
is never written; the CA certificate is returned so a caller can put it in `caBundle` or a kubeconfig.
ECDSA P-256 keys: handshakes are several times cheaper than RSA-2048 and every client we care about
(Go's crypto/tls, OpenSSL) supports them.

Client certificates. The aggregator authenticates to us with its front-proxy client certificate. The
server context asks for a client certificate without requiring one (`CERT_OPTIONAL`: kubelet probes,
bearer-token callers and plain clients present none) and trusts only the requestheader client CA. OpenSSL
then *rejects the handshake* of a client that presents a certificate from any other CA; a client without a
certificate gets through TLS and is authenticated (or answered 401) by `adapter.servers.auth` (which also
checks the CN). Python's `ssl` has no verify callback, so "wrong CA → 401" is not possible; a TLS alert is
the stricter equivalent.

Rotation without a restart (`DynamicServerTLS`). OpenSSL cannot forget a CA once loaded into a context, so a
rotated-out CA would stay trusted. Instead the listening socket keeps one base context whose SNI callback
hands every new handshake the *current* context (OpenSSL `SSL_set_SSL_CTX`), rebuilt whenever the client CA
(from `kube-system/extension-apiserver-authentication`) or the serving certificate files (a cert-manager
renewal) change. New connections verify against the current CA and present the current certificate;
connections already established keep theirs and finish. OpenSSL ≥ 1.1.1 calls the callback for every
ClientHello, with SNI or without (server name None), so no handshake escapes it.

The module reads and writes certificate files because `ssl.SSLContext.load_cert_chain` only takes paths.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import os
import ssl
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CertificateAuthority",
    "DynamicServerTLS",
    "IssuedCert",
    "ServingTLS",
    "add_client_ca",
    "client_ssl_context",
    "generate_serving_cert",
    "server_ssl_context",
    "serving_hosts",
    "serving_tls",
    "write_pem_pair",
]

_BACKDATE = dt.timedelta(hours=1)
"""Certificates start an hour in the past so a client whose clock lags a little still accepts them."""


def _utc(now_s: float | None) -> dt.datetime:
    if now_s is None:
        return dt.datetime.now(dt.UTC)
    return dt.datetime.fromtimestamp(now_s, dt.UTC)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _san_entries(hosts: Iterable[str]) -> list[x509.GeneralName]:
    entries: list[x509.GeneralName] = []
    for host in hosts:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            entries.append(x509.DNSName(host))
    return entries


@dataclass(frozen=True, slots=True)
class IssuedCert:
    """A PEM certificate and its PEM (PKCS#8, unencrypted) private key."""

    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True, slots=True)
class CertificateAuthority:
    """A minimal CA: enough to sign a serving certificate at start, or front-proxy/client certs in tests
    and the demo. Not a general PKI: no revocation, no intermediates."""

    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def create(cls, common_name: str, *, valid_days: int = 365, now_s: float | None = None) -> CertificateAuthority:
        key = _new_key()
        now = _utc(now_s)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + dt.timedelta(days=valid_days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(certificate, key)

    @property
    def cert_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        common_name: str,
        *,
        hosts: Sequence[str] = (),
        organizations: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
        valid_days: int = 365,
        now_s: float | None = None,
    ) -> IssuedCert:
        """Sign a leaf certificate. `hosts` become SANs (IP or DNS); `organizations` the subject's O
        (Kubernetes reads them as groups); `server`/`client` set the extended key usages."""
        if not (server or client):
            raise ValueError("a leaf certificate needs server=True and/or client=True")
        key = _new_key()
        now = _utc(now_s)
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + dt.timedelta(days=valid_days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        if hosts:
            builder = builder.add_extension(x509.SubjectAlternativeName(_san_entries(hosts)), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        return IssuedCert(certificate.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def serving_hosts(*, service: str, namespace: str, extra_hosts: Sequence[str] = ()) -> tuple[str, ...]:
    """Every name the aggregator, in-cluster clients and local tools may dial us by."""
    hosts = [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
        "localhost",
        "127.0.0.1",
        *extra_hosts,
    ]
    return tuple(dict.fromkeys(hosts))


def write_pem_pair(directory: Path, stem: str, issued: IssuedCert) -> tuple[Path, Path]:
    """Write `<stem>.crt` and `<stem>.key` (mode 0600) into `directory`; returns (cert path, key path)."""
    directory.mkdir(parents=True, exist_ok=True)
    cert_path = directory / f"{stem}.crt"
    key_path = directory / f"{stem}.key"
    cert_path.write_bytes(issued.cert_pem)
    descriptor = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(issued.key_pem)
    return cert_path, key_path


@dataclass(slots=True)
class TlsReloadStats:
    """Counters for tests and for our own /metrics."""

    client_ca_changes: int = 0
    certificate_reloads: int = 0
    reload_errors: int = 0


class DynamicServerTLS:
    """A server TLS context whose client CA and serving certificate change under a running server.

    Pass `context` to the server once. `set_client_ca(pem)` and `reload_certificate()` rebuild the context
    that new handshakes get (see the module docstring); each returns whether anything changed. A rebuild
    that fails (a half-written certificate/key pair during a renewal, a CA bundle without a certificate)
    raises and keeps the previous context, so the server never loses its certificate.

    `client_certificates` fixes, for the server's life, whether clients are asked for a certificate: the
    request is part of the handshake state OpenSSL copies from the base context, which a switch does not
    change. With it, `client_ca_pem` None trusts no client certificate at all (a presented one fails the
    handshake).
    """

    def __init__(
        self,
        *,
        cert_file: Path | str,
        key_file: Path | str,
        client_ca_pem: bytes | str | None = None,
        client_certificates: bool | None = None,
    ) -> None:
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.stats = TlsReloadStats()
        self._client_ca = _pem_text(client_ca_pem) if client_ca_pem is not None else None
        self._asks_for_certificates = client_ca_pem is not None if client_certificates is None else client_certificates
        self._files_digest = self._read_digest()
        self._current = self._build(self._client_ca)
        base = _server_context()
        base.load_cert_chain(certfile=str(self.cert_file), keyfile=str(self.key_file))
        base.verify_mode = ssl.CERT_OPTIONAL if self._asks_for_certificates else ssl.CERT_NONE
        base.sni_callback = self._switch
        self.context = base

    @property
    def current(self) -> ssl.SSLContext:
        """The context new handshakes get."""
        return self._current

    @property
    def client_ca_pem(self) -> str | None:
        return self._client_ca

    def _switch(self, ssl_object: ssl.SSLObject, server_name: str | None, _base: ssl.SSLContext) -> None:
        del server_name  # one certificate for every name
        ssl_object.context = self._current

    def _build(self, client_ca: str | None) -> ssl.SSLContext:
        context = _server_context()
        context.load_cert_chain(certfile=str(self.cert_file), keyfile=str(self.key_file))
        if client_ca is not None:
            add_client_ca(context, client_ca)
        return context

    def _read_digest(self) -> bytes:
        digest = hashlib.sha256()
        for path in (self.cert_file, self.key_file):
            digest.update(path.read_bytes())
            digest.update(b"\0")
        return digest.digest()

    def set_client_ca(self, client_ca_pem: bytes | str) -> bool:
        """Trust exactly `client_ca_pem` (one or more PEM certificates) for new connections."""
        if not self._asks_for_certificates:
            raise ValueError("this server was started without client certificates; a client CA cannot apply")
        text = _pem_text(client_ca_pem)
        if text == self._client_ca:
            return False
        try:
            self._current = self._build(text)
        except (ssl.SSLError, ValueError, OSError):
            self.stats.reload_errors += 1
            raise
        self._client_ca = text
        self.stats.client_ca_changes += 1
        return True

    def reload_certificate(self) -> bool:
        """Re-read the certificate and key files; rebuild when their content changed."""
        try:
            digest = self._read_digest()
            if digest == self._files_digest:
                return False
            self._current = self._build(self._client_ca)
        except (ssl.SSLError, ValueError, OSError):
            self.stats.reload_errors += 1
            raise
        self._files_digest = digest
        self.stats.certificate_reloads += 1
        return True


def _pem_text(pem: bytes | str) -> str:
    return pem.decode("ascii") if isinstance(pem, bytes) else pem


@dataclass(frozen=True, slots=True)
class ServingTLS:
    """What the composition root needs to serve HTTPS and to tell clients how to trust it."""

    cert_file: Path
    key_file: Path
    ca_pem: bytes | None
    """The CA that signed a generated certificate (for `caBundle` / kubeconfigs); None for given files."""
    dynamic: DynamicServerTLS
    generated: bool

    @property
    def context(self) -> ssl.SSLContext:
        """The context to serve with (its client CA and certificate follow `dynamic`)."""
        return self.dynamic.context


def generate_serving_cert(
    *,
    service: str,
    namespace: str,
    directory: Path | None = None,
    extra_hosts: Sequence[str] = (),
    valid_days: int = 365,
    now_s: float | None = None,
) -> tuple[Path, Path, bytes]:
    """Generate a CA and a serving certificate signed by it; write the leaf to `directory` (a new temp
    directory by default). Returns (cert path, key path, CA PEM)."""
    authority = CertificateAuthority.create(f"{service}-ca", valid_days=valid_days, now_s=now_s)
    hosts = serving_hosts(service=service, namespace=namespace, extra_hosts=extra_hosts)
    leaf = authority.issue(hosts[2], hosts=hosts, server=True, valid_days=valid_days, now_s=now_s)
    target = directory if directory is not None else Path(tempfile.mkdtemp(prefix="wva-adapter-tls-"))
    cert_path, key_path = write_pem_pair(target, "serving", leaf)
    return cert_path, key_path, authority.cert_pem


def server_ssl_context(
    *, cert_file: Path | str, key_file: Path | str, client_ca_pem: bytes | str | None = None
) -> ssl.SSLContext:
    """A TLS ≥1.2 server context. With `client_ca_pem`, clients may present a certificate, which must chain
    to that CA (bundle); `peercert` then carries its subject for the requestheader authenticator."""
    context = _server_context()
    context.load_cert_chain(certfile=str(cert_file), keyfile=str(key_file))
    if client_ca_pem is not None:
        add_client_ca(context, client_ca_pem)
    return context


def _server_context() -> ssl.SSLContext:
    """TLS ≥ 1.2, renegotiation refused (as Go's crypto/tls server, i.e. kube-apiserver, always does). The
    servers read a connection's verified client certificate once and remember the identity its requests
    carried (adapter.servers.external_metrics): that holds only while a connection cannot renegotiate to
    another certificate, which TLS 1.2 would otherwise allow."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_RENEGOTIATION
    return context


def add_client_ca(context: ssl.SSLContext, ca_pem: bytes | str) -> None:
    """Trust `ca_pem` (one or more PEM certificates) for client certificates and start asking for them.

    Additive: OpenSSL cannot forget a loaded CA. To replace a CA under a running server, use
    `DynamicServerTLS.set_client_ca`, which builds a fresh context instead.
    """
    text = ca_pem.decode("ascii") if isinstance(ca_pem, bytes) else ca_pem
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ValueError("client CA bundle contains no PEM certificate")
    context.load_verify_locations(cadata=text)
    context.verify_mode = ssl.CERT_OPTIONAL


def client_ssl_context(
    *, ca_pem: bytes | str | None, cert_file: Path | str | None = None, key_file: Path | str | None = None
) -> ssl.SSLContext:
    """A client context that verifies the server against `ca_pem` (None: no verification, like
    `insecure-skip-tls-verify`) and optionally presents a client certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca_pem is None:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context.load_verify_locations(cadata=ca_pem.decode("ascii") if isinstance(ca_pem, bytes) else ca_pem)
    if cert_file is not None:
        context.load_cert_chain(certfile=str(cert_file), keyfile=None if key_file is None else str(key_file))
    return context


def serving_tls(
    *,
    cert_file: Path | str | None,
    key_file: Path | str | None,
    service: str,
    namespace: str,
    client_ca_pem: bytes | str | None = None,
    directory: Path | None = None,
    now_s: float | None = None,
) -> ServingTLS:
    """The composition root's entry point: serve `--tls-cert-file/--tls-private-key-file` if both are
    given, generate a certificate if neither is, and refuse one without the other. The context follows later
    client-CA changes and certificate renewals through `ServingTLS.dynamic`."""
    if (cert_file is None) != (key_file is None):
        raise ValueError("--tls-cert-file and --tls-private-key-file must be given together (or neither)")
    if cert_file is not None and key_file is not None:
        dynamic = DynamicServerTLS(cert_file=cert_file, key_file=key_file, client_ca_pem=client_ca_pem)
        return ServingTLS(Path(cert_file), Path(key_file), None, dynamic, generated=False)
    cert_path, key_path, ca_pem = generate_serving_cert(
        service=service, namespace=namespace, directory=directory, now_s=now_s
    )
    dynamic = DynamicServerTLS(cert_file=cert_path, key_file=key_path, client_ca_pem=client_ca_pem)
    return ServingTLS(cert_path, key_path, ca_pem, dynamic, generated=True)
