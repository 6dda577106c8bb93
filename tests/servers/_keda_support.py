"""Helpers for the KEDA scaler and telemetry tests: decisions, a subscription-counting reader, certificates."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from adapter.domain.decision import AnalyzerName, VariantDecision
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import DecisionPath
from adapter.servers.tls import CertificateAuthority
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


def make_pki() -> Pki:
    """A serving CA, a client CA and a rogue CA, with one certificate each (the production CA helper)."""
    ca = CertificateAuthority.create("wva-test-ca")
    client_ca = CertificateAuthority.create("wva-test-client-ca")
    rogue_ca = CertificateAuthority.create("rogue-ca")
    server = ca.issue("wva-adapter", hosts=("localhost", "127.0.0.1"), server=True)
    client = client_ca.issue("keda-operator", client=True)
    rogue = rogue_ca.issue("keda-operator", client=True)
    return Pki(
        ca_pem=ca.cert_pem,
        server_cert_pem=server.cert_pem,
        server_key_pem=server.key_pem,
        client_ca_pem=client_ca.cert_pem,
        client_cert_pem=client.cert_pem,
        client_key_pem=client.key_pem,
        rogue_client_cert_pem=rogue.cert_pem,
        rogue_client_key_pem=rogue.key_pem,
    )
