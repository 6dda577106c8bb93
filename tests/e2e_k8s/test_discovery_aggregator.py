"""Discovery, status and the aggregator path on a real control plane.

    emulated vLLM pods ◄─scrape 1 s─ Prometheus ◄─PromQL─ wva-adapter serve (subprocess, ServiceAccount token)
    kube-apiserver (+ etcd, kube-controller-manager) ◄─watch / PATCH status─┘      ▲ HTTPS, front-proxy mTLS
    kubectl get --raw ─► kube-apiserver aggregator ─► ExternalName Service 127.0.0.1 ─► loopback Service ─┘

The namespace holds manifests/examples (two variants of meta/llama-3.1-8b: L4 at cost 0.8, A100 at 3.5); the
ReplicaSet controller creates their pods and the emulated kubelet runs them (tests/e2e_k8s/node.py).
Run with `-s` to see the transcript.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import ssl
import time
import urllib.parse
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from .cluster import CHEAP, DEAR, EM_GROUP, EM_VERSION, until
from .conftest import Env

pytestmark = pytest.mark.e2e_k8s

LOW = {"kv_cache_usage": 0.2, "waiting": 0, "running": 4, "success_rps": 1}
VARIANTS = (CHEAP, DEAR)
DENY_TTL_S = 10.0
"""The adapter caches a SubjectAccessReview's denial this long (adapter.servers.auth.CachingAuthorizer, as Go)."""


def test_discovery_status_and_printer_columns(env: Env) -> None:
    env.create_namespace(hpa=False)
    for variant in VARIANTS:
        env.set_load(variant, LOW)
        env.wait_pods(variant, 1)
    adapter = env.start_adapter("solo")
    took = env.wait_decided({CHEAP: 1, DEAR: 1}, hold_s=0)
    print(f"[discovery] status written for both VAs {took:.1f}s after the adapter was healthy")
    for variant in VARIANTS:
        va = env.kube.va(env.namespace, variant)
        kinds = {c["type"]: (c["status"], c["reason"]) for c in va["status"]["conditions"]}
        print(f"[discovery] {variant}: conditions {kinds}; alloc {va['status']['desiredOptimizedAlloc']}")
        assert kinds["TargetResolved"][0] == "True"
        assert kinds["MetricsAvailable"] == ("True", "MetricsFound")
        assert kinds["OptimizationReady"][0] == "True"
        assert va["status"]["desiredOptimizedAlloc"]["accelerator"] == ("L4" if variant == CHEAP else "A100")

    table = env.kube.kubectl("get", "va", "-n", env.namespace, "-o", "wide").stdout
    print(f"[discovery] kubectl get va -o wide:\n{table}")
    header, *rows = [line.split() for line in table.strip().splitlines()]
    assert header[:8] == ["NAME", "TARGET", "MODEL", "MIN", "MAX", "COST", "OPTIMIZED", "METRICSREADY"], header
    by_name = {row[0]: row for row in rows}
    assert set(by_name) == set(VARIANTS)
    for variant, cost in ((CHEAP, "0.8"), (DEAR, "3.5")):
        _, target, model, low, high, shown_cost, optimized, metrics_ready = by_name[variant][:8]
        assert (target, model, low, high, shown_cost) == (variant, "meta/llama-3.1-8b", "1", "10", cost)
        assert (optimized, metrics_ready) == ("1", "True"), by_name[variant]
    adapter.assert_running()


def _raw(env: Env, metric: str, selector: str, **kw: object) -> tuple[int, str, str]:
    path = f"/apis/{EM_GROUP}/{EM_VERSION}/namespaces/{env.namespace}/{metric}"
    if selector:
        path += "?labelSelector=" + urllib.parse.quote(selector, safe="")
    result = env.kube.raw(path, **kw)  # type: ignore[arg-type]
    return result.returncode, result.stdout, result.stderr


def test_aggregator_path_discovery_and_selectors(env: Env) -> None:
    env.create_namespace(hpa=False)
    for variant in VARIANTS:
        env.set_load(variant, LOW)
    adapter = env.start_adapter("solo")
    took = env.route_to(adapter)
    print(f"[aggregator] APIService Available=True {took:.1f}s after routing to the adapter")
    env.wait_decided({CHEAP: 1, DEAR: 1}, hold_s=0)

    discovery = json.loads(env.kube.raw(f"/apis/{EM_GROUP}/{EM_VERSION}").stdout)
    names = sorted(r["name"] for r in discovery["resources"])
    print(f"[aggregator] discovery lists {names}")
    assert {"wva_desired_replicas", "wva_current_replicas", "wva_desired_ratio"} <= set(names)

    cases = [
        (f"variant_name={CHEAP}", {CHEAP}),
        (f"variant_name in ({CHEAP},{DEAR})", {CHEAP, DEAR}),
        (f"variant_name!={CHEAP}", {DEAR}),
        ("accelerator_type=A100", {DEAR}),
        ("", {CHEAP, DEAR}),
    ]
    for selector, want in cases:
        code, out, err = _raw(env, "wva_desired_replicas", selector)
        assert code == 0, f"{selector!r}: {err}"
        items = json.loads(out)["items"]
        got = {item["metricLabels"]["variant_name"] for item in items}
        print(f"[aggregator] labelSelector {selector!r:45} -> {sorted(got)} values {[i['value'] for i in items]}")
        assert got == want, selector
        assert all(item["value"] == "1" and item["metricName"] == "wva_desired_replicas" for item in items)

    code, _, err = _raw(env, "wva_desired_replicas", "variant_name in (")
    print(f"[aggregator] bad selector -> exit {code}: {err.strip()}")
    assert code != 0
    assert "(BadRequest): invalid labelSelector" in err, err
    code, _, err = _raw(env, "no_such_metric", f"variant_name={CHEAP}")
    print(f"[aggregator] unknown metric -> exit {code}: {err.strip()}")
    assert code != 0
    assert "(NotFound)" in err, err
    adapter.assert_running()


def _credential_id(cert: Path) -> str:
    """kube-apiserver's `authentication.kubernetes.io/credential-id` extra for an x509 user (k8s.io/apiserver
    request/x509): the SHA-256 of the certificate. The aggregator forwards it, and it is part of the user."""
    der = x509.load_pem_x509_certificate(cert.read_bytes()).public_bytes(serialization.Encoding.DER)
    return "X509SHA256=" + hashlib.sha256(der).hexdigest()


def _as_front_proxy(
    env: Env, port: int, path: str, user: str, *groups: str, credential: Path | None = None
) -> tuple[int, dict[str, object]]:
    """What the aggregator sends us: mTLS with the front-proxy client certificate, identity in X-Remote-* headers."""
    pki = env.plane.pki
    headers = [("X-Remote-User", user), *(("X-Remote-Group", g) for g in (*groups, "system:authenticated"))]
    if credential is not None:
        headers.append(("X-Remote-Extra-Authentication.kubernetes.io%2fcredential-Id", _credential_id(credential)))
    context = ssl.create_default_context(cafile=str(pki.adapter_ca))
    context.load_cert_chain(str(pki.front_proxy_client.cert), str(pki.front_proxy_client.key))
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.putrequest("GET", path)
        for name, value in headers:
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, dict(json.loads(response.read()))
    finally:
        connection.close()


def test_authorization_by_the_real_apiserver_through_the_aggregator(env: Env) -> None:
    """Who answers what. kube-apiserver authorizes every request before its aggregator proxies it, with the same
    RBAC our SubjectAccessReview asks, so an unauthorised user is refused by kube-apiserver (403) and never
    reaches us. We refuse (403, decided by a real SubjectAccessReview) a caller the front proxy vouches for but
    RBAC does not allow, and cache that answer for 10 s as k8s.io/apiserver's delegating authorizer does: a
    user granted access in between is allowed by kube-apiserver and still refused by us, through the
    aggregator, until our cached denial expires. That is the one way a 403 *from us* reaches a kubectl user."""
    env.create_namespace(hpa=False)
    env.set_demand(0.4)
    adapter = env.start_adapter("solo")
    env.route_to(adapter)
    env.wait_decided({CHEAP: 1, DEAR: 1}, hold_s=0)
    metric_path = f"/apis/{EM_GROUP}/{EM_VERSION}/namespaces/{env.namespace}/wva_desired_replicas"

    mallory = env.plane.kubeconfig_for("mallory", "e2e-nobodies")
    code, _, err = _raw(env, "wva_desired_replicas", f"variant_name={CHEAP}", kubeconfig=mallory)
    print(f"[authz] mallory (no RBAC) through the aggregator -> exit {code}: {err.strip()}")
    assert code != 0
    assert '(Forbidden): wva_desired_replicas.external.metrics.k8s.io is forbidden: User "mallory" cannot list' in err

    status, body = _as_front_proxy(env, adapter.https_port, metric_path, "mallory", "e2e-nobodies")
    print(f"[authz] mallory via the front-proxy certificate straight to us -> HTTP {status}: {body.get('message')}")
    assert (status, body.get("reason")) == (403, "Forbidden"), body

    # carol: refused by us (our SubjectAccessReview) and remembered for 10 s, for exactly the user the aggregator
    # will forward (name, groups, and the credential id of her certificate) ...
    carol = env.plane.kubeconfig_for("carol")
    denied_at = time.monotonic()
    status, body = _as_front_proxy(
        env, adapter.https_port, metric_path, "carol", credential=env.plane.pki.client_cert("carol").cert
    )
    assert status == 403, body
    # ... then granted the shipped reader ClusterRole: kube-apiserver lets her through at once, we still say no.
    env.kube.kubectl(
        "create", "clusterrolebinding", f"e2e-carol-{env.namespace}"[:63], "--user=carol",
        "--clusterrole=wva-adapter-external-metrics-reader",
    )  # fmt: skip

    def apiserver_allows() -> str | None:
        answer = env.kube.kubectl(
            "auth", "can-i", "list", "wva_desired_replicas.external.metrics.k8s.io", "-n", env.namespace,
            kubeconfig=carol, check=False,
        )  # fmt: skip
        return None if answer.stdout.strip() == "yes" else f"can-i: {answer.stdout.strip()} {answer.stderr.strip()}"

    until("kube-apiserver's RBAC to allow carol", apiserver_allows, timeout_s=10, every_s=0.1)
    code, _, err = _raw(env, "wva_desired_replicas", f"variant_name={CHEAP}", kubeconfig=carol)
    since_denial_s = time.monotonic() - denied_at
    print(f"[authz] carol, allowed by kube-apiserver, through the aggregator {since_denial_s:.1f}s after our denial -> "
          f"exit {code}: {err.strip()}")  # fmt: skip
    assert since_denial_s < DENY_TTL_S, "too slow to observe the cached denial; the test proves nothing"
    assert code != 0
    assert 'User "carol" cannot list resource "wva_desired_replicas"' in err, err

    def carol_served() -> str | None:
        code, out, err = _raw(env, "wva_desired_replicas", f"variant_name={CHEAP}", kubeconfig=carol)
        return None if code == 0 and json.loads(out)["items"] else f"exit {code}: {err.strip()}"

    until("our cached denial to expire", carol_served, timeout_s=DENY_TTL_S + 5, every_s=0.5)
    print(f"[authz] carol served through the aggregator {time.monotonic() - denied_at:.1f}s after our denial "
          f"(deny cache {DENY_TTL_S:g}s)")  # fmt: skip
    assert time.monotonic() - denied_at >= DENY_TTL_S - 0.5
    adapter.assert_running()
