"""A running `wva-adapter serve` on the real control plane: bearer tokens checked by real TokenReviews (counted in
kube-apiserver's audit log), the front-proxy CA and allowed names rotated under it, and its main ConfigMap
changed under it — each without a restart (the same process answers before and after).

What the adapter sent is read from the audit log: the control plane audits every request of the adapter's
ServiceAccount (controlplane.py), TokenReviews and Events included.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from adapter.servers.tls import CertificateAuthority, write_pem_pair

from .apiworld import AuditedRequest, read_audit
from .cluster import CHEAP, OVERLAY, Kube, until
from .conftest import Env
from .controlplane import ADAPTER_USER, REPO

pytestmark = pytest.mark.e2e_k8s

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SARS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
AUTH_CM = ("kube-system", "extension-apiserver-authentication")
MASTERS = {"X-Remote-User": "e2e-admin", "X-Remote-Group": "system:masters"}


def _audit_mark(kube: Kube) -> int:
    log = kube.plane.audit_log
    assert log is not None, "these tests read the control plane's audit log"
    return log.stat().st_size if log.exists() else 0


def _adapter_requests(kube: Kube, since: int, *, settle_s: float = 0.5) -> list[AuditedRequest]:
    """The adapter's requests since `since` (bytes), once the audit log stopped growing for `settle_s`."""
    log = kube.plane.audit_log
    assert log is not None
    size, deadline = -1, time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(settle_s)
        if log.stat().st_size == size:
            break
        size = log.stat().st_size
    return read_audit(log, user=ADAPTER_USER, since_bytes=since)


def _metric_url(port: int, namespace: str) -> str:
    return f"https://127.0.0.1:{port}/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/wva_desired_replicas"


def _session(kube: Kube, cert: tuple[Path, Path] | None = None) -> requests.Session:
    """A direct client of the adapter (no aggregator in between), verifying its serving certificate."""
    session = requests.Session()
    session.trust_env = False
    session.verify = str(kube.plane.pki.adapter_ca)
    if cert is not None:
        session.cert = (str(cert[0]), str(cert[1]))
    return session


def _cache_counts(adapter: Any, cache: str) -> tuple[float, float]:
    samples = adapter.metrics().get("wva_auth_cache_requests_total", [])
    by = {labels["result"]: value for labels, value in samples if labels.get("cache") == cache}
    return by.get("hit", 0.0), by.get("miss", 0.0)


# ---- bearer tokens ----------------------------------------------------------------------------------------


def test_bearer_tokens_are_reviewed_cached_and_refused_with_a_status(env: Env) -> None:
    kube, ns = env.kube, env.namespace
    kube.kubectl("create", "namespace", ns)
    kube.kubectl("create", "serviceaccount", "metrics-reader", "-n", ns)
    kube.kubectl("create", "serviceaccount", "nobody", "-n", ns)
    role = "--clusterrole=wva-adapter-external-metrics-reader"
    kube.kubectl("create", "rolebinding", "metrics-reader", "-n", ns, role, f"--serviceaccount={ns}:metrics-reader")
    reader = kube.service_account_token(ns, "metrics-reader")
    nobody = kube.service_account_token(ns, "nobody")
    adapter = env.start_adapter("tokens", "--authentication-token-webhook-cache-ttl=3s")
    url = _metric_url(adapter.https_port, ns)
    requests_n = 30
    with _session(kube) as http:
        mark = _audit_mark(kube)
        started = time.monotonic()
        answers = [http.get(url, headers={"Authorization": f"Bearer {reader}"}, timeout=10) for _ in range(requests_n)]
        took_s = time.monotonic() - started
        assert {a.status_code for a in answers} == {200}, answers[0].text
        assert answers[0].json()["kind"] == "ExternalMetricValueList"
        sent = _adapter_requests(kube, mark)
        reviews = [r for r in sent if r.path == TOKEN_REVIEWS]
        assert [(r.method, r.code) for r in reviews] == [("POST", 201)], "one TokenReview for 30 requests"
        assert reviews[0].body["spec"]["token"] == reader
        assert "audiences" not in reviews[0].body["spec"]
        assert len([r for r in sent if r.path == SARS]) == 1, "and one SubjectAccessReview (cached too)"
        hits, misses = _cache_counts(adapter, "token")
        assert (hits, misses) == (requests_n - 1, 1)

        # A bad token: a Status 401 every time, one review (the denial is cached as well).
        mark = _audit_mark(kube)
        bad = [http.get(url, headers={"Authorization": "Bearer not-a-token"}, timeout=10) for _ in range(10)]
        assert {b.status_code for b in bad} == {401}
        status = bad[0].json()
        assert (status["kind"], status["reason"], status["code"]) == ("Status", "Unauthorized", 401)
        assert len([r for r in _adapter_requests(kube, mark) if r.path == TOKEN_REVIEWS]) == 1

        # Authenticated but not allowed by RBAC: 403 from the SubjectAccessReview.
        denied = http.get(url, headers={"Authorization": f"Bearer {nobody}"}, timeout=10)
        assert denied.status_code == 403
        assert (
            f'User "system:serviceaccount:{ns}:nobody" cannot list resource "wva_desired_replicas"'
            in (denied.json()["message"])
        )

        # The cache is bounded in time: after the 3 s TTL the token is reviewed again.
        time.sleep(3.2)
        mark = _audit_mark(kube)
        assert http.get(url, headers={"Authorization": f"Bearer {reader}"}, timeout=10).status_code == 200
        assert len([r for r in _adapter_requests(kube, mark) if r.path == TOKEN_REVIEWS]) == 1
        hits, misses = _cache_counts(adapter, "token")
        print(f"[tokens] FIGURES {requests_n} requests with one ServiceAccount token in {took_s:.2f}s: 1 TokenReview "
              f"(+1 SubjectAccessReview); 10 bad-token requests: 1 TokenReview, 401 each; token cache hits/misses "
              f"{hits:.0f}/{misses:.0f} after the TTL expired once")  # fmt: skip
    adapter.assert_running()


@pytest.fixture
def auth_delegator_restored(env: Env) -> Iterator[None]:
    """The adapter's system:auth-delegator binding is re-applied from manifests/rbac afterwards (session state)."""
    try:
        yield
    finally:
        env.kube.kubectl("apply", "-f", str(REPO / "manifests" / "rbac" / "auth_delegator.yaml"))


def test_a_token_review_that_cannot_be_made_is_a_401_that_says_so(env: Env, auth_delegator_restored: None) -> None:
    """The API cannot answer for us: our ServiceAccount lost `create tokenreviews` (a real 403 from RBAC)."""
    kube, ns = env.kube, env.namespace
    kube.kubectl("create", "namespace", ns)
    kube.kubectl("create", "serviceaccount", "metrics-reader", "-n", ns)
    token = kube.service_account_token(ns, "metrics-reader")
    adapter = env.start_adapter("no-reviews")
    kube.kubectl("delete", "clusterrolebinding", "wva-adapter:system:auth-delegator")
    with _session(kube) as http:
        mark = _audit_mark(kube)

        def refused() -> str | None:
            answer = http.get(_metric_url(adapter.https_port, ns), headers={"Authorization": f"Bearer {token}"},
                              timeout=10)  # fmt: skip
            return None if answer.status_code == 401 and "could not be verified" in answer.text else answer.text

        until("a 401 saying the token could not be verified", refused, timeout_s=15)
        failed = [r for r in _adapter_requests(kube, mark) if r.path == TOKEN_REVIEWS]
        assert failed
        assert {r.code for r in failed} == {403}, "RBAC refused the review"
        body = http.get(_metric_url(adapter.https_port, ns), headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert body.json()["reason"] == "Unauthorized"
        assert "not a verdict on the token" in body.json()["message"]
    assert "TokenReview failed, answering 401" in adapter.tail(50)


# ---- front-proxy CA and allowed names rotated under a running serve ----------------------------------------


@pytest.fixture
def auth_configmap(env: Env) -> Iterator[dict[str, str]]:
    """The published extension-apiserver-authentication data, written back afterwards (the session shares it)."""
    namespace, name = AUTH_CM
    original = dict(env.kube.core.read_namespaced_config_map(name, namespace).data)
    try:
        yield original
    finally:
        env.kube.core.patch_namespaced_config_map(name, namespace, {"data": original})


def _patch_auth(kube: Kube, data: dict[str, str]) -> float:
    namespace, name = AUTH_CM
    kube.core.patch_namespaced_config_map(name, namespace, {"data": data})
    return time.monotonic()


def _direct(kube: Kube, port: int, ns: str, cert: tuple[Path, Path]) -> int | str:
    """A new TLS connection presenting `cert`: the HTTP status, or "refused" when TLS refused the certificate."""
    with _session(kube, cert) as http:
        try:
            return http.get(_metric_url(port, ns), headers=MASTERS, timeout=10).status_code
        except requests.exceptions.ConnectionError:
            return "refused"


def test_front_proxy_ca_and_allowed_names_rotate_without_a_restart(env: Env, auth_configmap: dict[str, str]) -> None:
    kube, ns = env.kube, env.namespace
    ca_key, names_key = "requestheader-client-ca-file", "requestheader-allowed-names"
    rotated = CertificateAuthority.create("rotated-front-proxy-ca")
    proxy = write_pem_pair(env.workdir / "certs", "rotated-proxy", rotated.issue("front-proxy-client", client=True))
    other = write_pem_pair(env.workdir / "certs", "other-proxy", rotated.issue("other-proxy", client=True))
    adapter = env.start_adapter("rotation")
    env.route_to(adapter)
    pid = adapter.proc.pid if adapter.proc else None
    port = adapter.https_port
    assert _direct(kube, port, ns, proxy) == "refused", "a CA the cluster does not publish is not trusted"

    # 1. The new CA is published next to the old one, and a second front proxy's name is allowed.
    original_ca = auth_configmap[ca_key]
    names = json.loads(auth_configmap[names_key])
    t_added = _patch_auth(kube, {ca_key: original_ca.rstrip("\n") + "\n" + rotated.cert_pem.decode(),
                                 names_key: json.dumps([*names, "other-proxy"])})  # fmt: skip
    until("the rotated CA trusted", lambda: None if _direct(kube, port, ns, proxy) == 200 else "not yet", timeout_s=15)
    added_s = time.monotonic() - t_added
    assert _direct(kube, port, ns, other) == 200, "the newly allowed name"
    status, _ = kube.external_metric(ns, "wva_desired_replicas", "variant_name=x")
    assert status == 200, "the aggregator's own front-proxy certificate still works"

    # 2. An open connection made with the new CA's certificate; then the CA is withdrawn again.
    with _session(kube, proxy) as kept_open:
        assert kept_open.get(_metric_url(port, ns), headers=MASTERS, timeout=10).status_code == 200
        t_removed = _patch_auth(kube, {ca_key: original_ca, names_key: auth_configmap[names_key]})
        until("the withdrawn CA refused", lambda: None if _direct(kube, port, ns, proxy) == "refused" else "still 200",
              timeout_s=15)  # fmt: skip
        removed_s = time.monotonic() - t_removed
        for _ in range(3):  # the connection opened before the rotation finishes its work
            assert kept_open.get(_metric_url(port, ns), headers=MASTERS, timeout=10).status_code == 200
    assert _direct(kube, port, ns, other) == "refused"
    status, _ = kube.external_metric(ns, "wva_desired_replicas", "variant_name=x")
    assert status == 200
    adapter.assert_running()
    assert adapter.proc is not None
    assert adapter.proc.pid == pid, "the same process, never restarted"
    reloads = {labels["what"]: value for labels, value in adapter.metrics()["wva_tls_reloads_total"]}
    assert reloads["client_ca"] == 2
    assert reloads["error"] == 0
    print(f"[rotation] FIGURES new front-proxy CA trusted {added_s:.2f}s after the ConfigMap edit, withdrawn CA "
          f"refused {removed_s:.2f}s after; an open connection kept working; the same process throughout")  # fmt: skip


# ---- the main ConfigMap changed under a running serve --------------------------------------------------------


def _main_configmap(env: Env, data: dict[str, str]) -> None:
    meta = {"name": "wva-variantautoscaling-config", "namespace": env.namespace}
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
    env.kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(body))


def _metrics_available(env: Env, variant: str) -> str:
    return str(env.kube.condition(env.kube.va(env.namespace, variant), "MetricsAvailable").get("status"))


def _configmap_events(env: Env) -> list[dict[str, Any]]:
    return env.kube.events(env.namespace, kind="ConfigMap", name="wva-variantautoscaling-config")


def test_main_configmap_changes_apply_live_or_are_reported(env: Env) -> None:
    """The adapter's controller namespace is the test's, so its `wva-variantautoscaling-config` is the test's:
    Prometheus comes from there (the flag is left out), first pointing nowhere."""
    from tests.ports import free_port

    env.create_namespace(hpa=False)
    # The analyzer ConfigMaps in this controller namespace too (else their absence is a config warning): the
    # e2e overlay's, which select the saturation analyzer whose decisions these tests wait for.
    rendered = env.kube.kubectl("kustomize", str(OVERLAY)).stdout
    analyzer_configmaps = [
        doc for doc in yaml.safe_load_all(rendered)
        if doc and doc["kind"] == "ConfigMap" and doc["metadata"]["name"] != "wva-variantautoscaling-config"
    ]  # fmt: skip
    for doc in analyzer_configmaps:
        doc["metadata"]["namespace"] = env.namespace
    as_list = {"apiVersion": "v1", "kind": "List", "items": analyzer_configmaps}
    env.kube.kubectl("apply", "-f", "-", stdin=json.dumps(as_list))
    env.set_demand(0.4)
    env.wait_scraped(2)
    _main_configmap(env, {"PROMETHEUS_BASE_URL": f"http://127.0.0.1:{free_port()}", "GLOBAL_OPT_INTERVAL": "1s"})
    without = ("--prometheus-url", "--engine-interval", "--controller-namespace")
    adapter = env.start_adapter("live-config", f"--controller-namespace={env.namespace}", without=without)
    pid = adapter.proc.pid if adapter.proc else None

    def fallback() -> str | None:
        available = _metrics_available(env, CHEAP)
        return None if available == "False" else f"MetricsAvailable={available}"

    until("the fallback while Prometheus is unreachable", fallback, timeout_s=30)

    # Live: the Prometheus URL.
    t_live = time.monotonic()
    _main_configmap(env, {"PROMETHEUS_BASE_URL": env.prometheus.url, "GLOBAL_OPT_INTERVAL": "1s"})
    env.wait_decided({CHEAP: 1}, timeout_s=30, hold_s=1.0)
    live_s = time.monotonic() - t_live
    assert "live setting --prometheus-url is now" in adapter.tail(200)
    va_events = {e["reason"] for e in env.kube.events(env.namespace, kind="VariantAutoscaling", name=CHEAP)}
    assert {"FallbackDecision", "FallbackEnded"} <= va_events, va_events

    # Restart-only: reported by the log, a gauge and an Event on the ConfigMap; the running value stays.
    _main_configmap(env, {"PROMETHEUS_BASE_URL": env.prometheus.url, "GLOBAL_OPT_INTERVAL": "1s",
                          "LEADER_ELECTION_ID": "another-lease"})  # fmt: skip

    def reported() -> str | None:
        gauge = adapter.metrics().get("wva_config_restart_required", [])
        events = [e for e in _configmap_events(env) if e["reason"] == "RestartRequired"]
        ok = any(labels.get("setting") == "--leader-election-id" and value == 1 for labels, value in gauge)
        return None if ok and events else f"gauge {gauge}, events {[e['reason'] for e in _configmap_events(env)]}"

    until("the restart-only change reported", reported, timeout_s=15)
    [event] = [e for e in _configmap_events(env) if e["reason"] == "RestartRequired"]
    assert event["type"] == "Warning"
    assert "--leader-election-id" in event["message"]
    assert "takes effect only after a restart" in adapter.tail(100)

    # Refused: invalid content changes nothing, and says so.
    _main_configmap(env, {"PROMETHEUS_BASE_URL": env.prometheus.url, "GLOBAL_OPT_INTERVAL": "soon"})
    until("the invalid content refused",
          lambda: None if any(e["reason"] == "InvalidConfiguration" for e in _configmap_events(env)) else "no event",
          timeout_s=15)  # fmt: skip
    reloads = {labels["outcome"]: value for labels, value in adapter.metrics()["wva_config_reloads_total"]}
    assert reloads == {"applied": 1.0, "restart-required": 1.0, "invalid": 1.0}
    env.wait_decided({CHEAP: 1}, timeout_s=15, hold_s=1.0)
    adapter.assert_running()
    assert adapter.proc is not None
    assert adapter.proc.pid == pid
    print(f"[live-config] FIGURES Prometheus URL changed in the ConfigMap -> decisions from real metrics again "
          f"{live_s:.1f}s later, same process; a restart-only key reported (log, gauge, Event RestartRequired); "
          f"invalid content refused (Event InvalidConfiguration)")  # fmt: skip
