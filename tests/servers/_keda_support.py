"""Helpers for the KEDA scaler and telemetry tests: decisions, a subscription-counting reader, certificates."""

from __future__ import annotations

import datetime as dt
import ipaddress
import threading
from collections.abc import Callable
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from adapter.domain.decision import AnalyzerName, DecisionPath, VariantDecision
from adapter.domain.ids import VariantKey
from adapter.store.decisions import DecisionStore, Listener, StoredDecision

NS = "llm"
T0_S = 1_767_225_600.0
"""2026-01-01T00:00:00Z: the decisions' `now`."""


def decision(
    name: str,
    *,
    namespace: str = NS,
    desired: int = 1,
    current: int = 1,
    model_id: str = "meta/llama-3.1-8b",
    accelerator: str = "H100",
    path: DecisionPath = DecisionPath.OPTIMIZER,
) -> VariantDecision:
    return VariantDecision(
        key=VariantKey(namespace, name),
        model_id=model_id,
        desired_replicas=desired,
        current_replicas=current,
        reason="test",
        path=path,
        analyzer=AnalyzerName.SATURATION_PERCENTAGE,
        accelerator=accelerator,
    )


class CountingReader:
    """A DecisionReader over a DecisionStore that counts live subscriptions (to prove streams unsubscribe)
    and can be told to fail reads (to prove errors become INTERNAL, not crashes)."""

    def __init__(self, store: DecisionStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self.active_subscriptions = 0
        self.fail_reads = False

    @property
    def version(self) -> int:
        return self._store.version

    def get(self, key: VariantKey) -> StoredDecision | None:
        if self.fail_reads:
            raise RuntimeError("injected read failure")
        return self._store.get(key)

    def list(self, namespace: str | None = None) -> list[StoredDecision]:
        return self._store.list(namespace)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        unsubscribe = self._store.subscribe(listener)
        with self._lock:
            self.active_subscriptions += 1
        done = False

        def counted_unsubscribe() -> None:
            nonlocal done
            with self._lock:
                if done:
                    return
                done = True
                self.active_subscriptions -= 1
            unsubscribe()

        return counted_unsubscribe


@dataclass(frozen=True)
class Pki:
    """A CA, a server certificate for 127.0.0.1/localhost, and a client CA with one client certificate."""

    ca_pem: bytes
    server_cert_pem: bytes
    server_key_pem: bytes
    client_ca_pem: bytes
    client_cert_pem: bytes
    client_key_pem: bytes
    rogue_client_cert_pem: bytes
    """Signed by an unrelated CA: the server must refuse it."""
    rogue_client_key_pem: bytes


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(
    *,
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[str, ec.EllipticCurvePrivateKey] | None,
    server: bool = False,
    client: bool = False,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    issuer_name, issuer_key = issuer if issuer is not None else (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if issuer is None:
        builder = builder.add_extension(
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
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    if client:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_pki() -> Pki:
    ca_key, client_ca_key, rogue_ca_key = _key(), _key(), _key()
    ca = _cert(subject="wva-test-ca", key=ca_key, issuer=None)
    client_ca = _cert(subject="wva-test-client-ca", key=client_ca_key, issuer=None)
    server_key, client_key, rogue_key = _key(), _key(), _key()
    server = _cert(subject="wva-adapter", key=server_key, issuer=("wva-test-ca", ca_key), server=True)
    client = _cert(subject="keda-operator", key=client_key, issuer=("wva-test-client-ca", client_ca_key), client=True)
    rogue = _cert(subject="keda-operator", key=rogue_key, issuer=("rogue-ca", rogue_ca_key), client=True)
    return Pki(
        ca_pem=_pem(ca),
        server_cert_pem=_pem(server),
        server_key_pem=_key_pem(server_key),
        client_ca_pem=_pem(client_ca),
        client_cert_pem=_pem(client),
        client_key_pem=_key_pem(client_key),
        rogue_client_cert_pem=_pem(rogue),
        rogue_client_key_pem=_key_pem(rogue_key),
    )
