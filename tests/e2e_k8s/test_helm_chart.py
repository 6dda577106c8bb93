"""The Helm chart rendered by the real helm (`make e2e-bins`): `helm lint`, `helm template` in HPA and KEDA mode
and every TLS mode, checked object by object, and proved equal to the kustomizations it stands beside.

One source of truth or a proof: the chart and `manifests/` are kept separately (the chart templates what the
kustomizations hard-code), and `test_chart_renders_what_the_kustomization_renders` renders both and compares
every object, field by field, after removing only Helm's own labels (`helm.sh/chart`, `managed-by`,
`instance`, `version`). The CRD is the chart's `crds/` file (installed before the templates, never upgraded or
deleted by Helm), rendered with `--include-crds`.

Installing the chart on the real control plane: tests/e2e_k8s/test_helm_install.py.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from adapter.config.va import GROUP, KIND, VERSION, parse_va
from tests.manifests.rbac import (
    EXPECTED_ADAPTER_RULES,
    EXPECTED_HPA_READER_RULES,
    EXPECTED_LEASE_RULES,
    expand,
    grants,
)
from tests.manifests.strict import (
    BUILTIN_MODELS,
    apply_defaults,
    deserialize,
    foreign_errors,
    schema_errors,
    strict_errors,
)

from .chart import CHART, HELM_LABELS, helm, object_id, set_args, template, without_helm_metadata
from .controlplane import CONTROLLER_NS

pytestmark = pytest.mark.e2e_k8s

MODES: dict[str, tuple[str, ...]] = {
    "hpa-helm-tls": (),
    "hpa-cert-manager": ("tls.mode=certManager",),
    "hpa-cert-manager-own-issuer": (
        "tls.mode=certManager",
        "tls.certManager.issuerRef.name=corp-ca",
        "tls.certManager.issuerRef.kind=ClusterIssuer",
    ),
    "hpa-secret": ("tls.mode=secret", "tls.secret.name=my-tls", "tls.secret.caBundle=Q0E="),
    "hpa-insecure": ("tls.mode=insecure",),
    "keda": ("mode=keda",),
    "hpa-examples": ("examples.enabled=true",),
    "keda-examples": ("mode=keda", "examples.enabled=true"),
    "settings-and-queueing-model": (
        "settings.GLOBAL_OPT_INTERVAL=10s",
        "settings.PROMETHEUS_QUERY_TIMEOUT=5s",
        "analyzerConfig.queueingModel.default=sloTtftMs: 500",
        "prometheus.url=",
    ),
    "single-replica": ("replicas=1", "leaderElection.enabled=false", "podDisruptionBudget.enabled=false"),
}


def _kustomize(rel: str) -> list[dict[str, Any]]:
    from tests.manifests.render import render

    return [dict(o) for o in render(rel)]


def _by_id(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {object_id(o): o for o in objs}
    assert len(out) == len(objs), f"duplicate objects: {sorted(object_id(o) for o in objs)}"
    return out


def _one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[object_id(o) for o in found]}"
    return found[0]


# ---- helm lint --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(MODES))
def test_helm_lint(mode: str) -> None:
    result = helm("lint", "--strict", str(CHART), *set_args(MODES[mode]))
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout, result.stdout


# ---- equal to the kustomizations --------------------------------------------------------------------------


def _examples(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        o
        for o in objs
        if o["metadata"].get("namespace") == "llm" or (o["kind"] == "Namespace" and o["metadata"]["name"] == "llm")
    ]


EQUIVALENT = [
    pytest.param(("namespace.create=true", "tls.mode=certManager"), ("manifests",), False, id="manifests"),
    pytest.param(
        ("namespace.create=true", "mode=keda", "tls.mode=insecure"), ("manifests/keda-mode",), False, id="keda-mode"
    ),
    pytest.param(
        ("namespace.create=true", "tls.mode=insecure"), ("manifests/overlays/insecure-tls",), False, id="insecure-tls"
    ),
    pytest.param(("examples.enabled=true",), ("manifests/examples", "manifests/examples/hpa"), True, id="examples-hpa"),
    pytest.param(
        ("examples.enabled=true", "mode=keda"),
        ("manifests/examples", "manifests/examples/keda"),
        True,
        id="examples-keda",
    ),
]


@pytest.mark.parametrize(("values", "kustomizations", "examples_only"), EQUIVALENT)
def test_chart_renders_what_the_kustomization_renders(
    values: tuple[str, ...], kustomizations: tuple[str, ...], examples_only: bool
) -> None:
    chart = template(values)
    if examples_only:
        chart = _examples(chart)
    kustomized = _by_id([o for rel in kustomizations for o in _kustomize(rel)])
    rendered = _by_id([without_helm_metadata(o) for o in chart])
    assert sorted(rendered) == sorted(kustomized)
    for key, obj in kustomized.items():
        assert rendered[key] == obj, (
            f"{key} differs:\nchart: {yaml.safe_dump(rendered[key])}\nkustomize: {yaml.safe_dump(obj)}"
        )
    for obj in chart:
        if obj["kind"] == "CustomResourceDefinition":
            continue  # crds/ is not templated
        labels = obj["metadata"].get("labels") or {}
        assert set(labels) >= HELM_LABELS, f"{object_id(obj)} lacks Helm's labels: {labels}"


def test_a_drift_would_be_caught() -> None:
    """The comparison is not vacuous: change one default and the objects differ."""
    chart = _by_id([without_helm_metadata(o) for o in template(("namespace.create=true", "tls.mode=certManager",
                                                                   "resources.requests.cpu=200m"))])  # fmt: skip
    kustomized = _by_id(_kustomize("manifests"))
    key = f"Deployment/{CONTROLLER_NS}/wva-adapter"
    assert chart[key] != kustomized[key]
    assert {k for k in kustomized if chart[k] != kustomized[k]} == {key}


# ---- every object strictly valid --------------------------------------------------------------------------


def _va_schema() -> dict[str, Any]:
    crd = _one(template(), "CustomResourceDefinition")
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _strict(obj: dict[str, Any], va_schema: dict[str, Any]) -> list[str]:
    key = (obj["apiVersion"], obj["kind"])
    if key == (f"{GROUP}/{VERSION}", KIND):
        parse_va(obj)
        return schema_errors(apply_defaults(obj, va_schema), va_schema)
    foreign = foreign_errors(obj)
    if foreign is not None:
        return foreign
    assert key in BUILTIN_MODELS, f"no validator for {key}"
    errors = strict_errors(obj, BUILTIN_MODELS[key])
    deserialize(obj, BUILTIN_MODELS[key])
    return errors


@pytest.mark.parametrize("mode", list(MODES))
def test_every_rendered_object_is_strictly_valid(mode: str) -> None:
    schema = _va_schema()
    for obj in template(MODES[mode]):
        assert _strict(obj, schema) == [], object_id(obj)


# ---- the modes -------------------------------------------------------------------------------------------


def _deployment_flags(objs: list[dict[str, Any]]) -> dict[str, str | None]:
    args = _one(objs, "Deployment", "wva-adapter")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "serve"
    return {a.split("=", 1)[0]: (a.split("=", 1)[1] if "=" in a else None) for a in args[1:]}


def test_helm_tls_mode_generates_a_verifiable_certificate_for_the_service() -> None:
    """The default: a CA and a serving certificate made by the chart; the APIService verifies with that CA."""
    objs = template(namespace="wva-prod")
    secret = _one(objs, "Secret", "wva-adapter-tls")
    assert secret["type"] == "kubernetes.io/tls"
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    ca = x509.load_pem_x509_certificate(data["ca.crt"])
    leaf = x509.load_pem_x509_certificate(data["tls.crt"])
    leaf.verify_directly_issued_by(ca)
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "wva-adapter.wva-prod.svc" in names
    key = serialization.load_pem_private_key(data["tls.key"], password=None)
    assert key.public_key().public_numbers() == leaf.public_key().public_numbers()  # type: ignore[union-attr]
    api = _one(objs, "APIService")
    assert base64.b64decode(api["spec"]["caBundle"]) == data["ca.crt"]
    assert "insecureSkipTLSVerify" not in api["spec"]
    assert api["spec"]["service"] == {"name": "wva-adapter", "namespace": "wva-prod", "port": 443}
    flags = _deployment_flags(objs)
    assert flags["--tls-cert-file"] == "/var/run/wva-adapter/tls/tls.crt"
    pod = _one(objs, "Deployment")["spec"]["template"]["spec"]
    assert {"name": "serving-cert", "secret": {"secretName": "wva-adapter-tls"}} in pod["volumes"]


def test_secret_mode_uses_the_given_secret_and_ca() -> None:
    objs = template(MODES["hpa-secret"])
    assert not [o for o in objs if o["kind"] == "Secret"]
    assert _one(objs, "APIService")["spec"]["caBundle"] == "Q0E="
    pod = _one(objs, "Deployment")["spec"]["template"]["spec"]
    assert {"name": "serving-cert", "secret": {"secretName": "my-tls"}} in pod["volumes"]


def test_cert_manager_mode_with_an_issuer_of_ones_own() -> None:
    objs = template(MODES["hpa-cert-manager-own-issuer"])
    assert not [o for o in objs if o["kind"] == "Issuer"]
    serving = _one(objs, "Certificate", "wva-adapter-serving")
    assert serving["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer"}
    api = _one(objs, "APIService")
    assert api["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": f"{CONTROLLER_NS}/wva-adapter-serving"}
    assert "caBundle" not in api["spec"]


def test_insecure_only_when_asked_for() -> None:
    for mode, values in MODES.items():
        apis = [o for o in template(values) if o["kind"] == "APIService"]
        for api in apis:
            assert bool(api["spec"].get("insecureSkipTLSVerify")) == (mode == "hpa-insecure"), mode
    assert "--tls-cert-file" not in _deployment_flags(template(MODES["hpa-insecure"]))


def test_keda_mode_has_no_external_metrics_path() -> None:
    objs = template(("mode=keda", "examples.enabled=true", "examples.namespace=models"), namespace="wva-prod")
    assert not [o for o in objs if o["kind"] in ("APIService", "HorizontalPodAutoscaler")]
    assert not [o for o in objs if o["metadata"]["name"] == "wva-adapter-external-metrics-reader"]
    scaled = [o for o in objs if o["kind"] == "ScaledObject"]
    assert len(scaled) == 2
    for so in scaled:
        [trigger] = so["spec"]["triggers"]
        assert trigger["metadata"]["scalerAddress"] == "wva-adapter.wva-prod.svc:50051"
        assert trigger["metadata"]["namespace"] == so["metadata"]["namespace"] == "models"


def test_rbac_of_the_chart_is_least_privilege() -> None:
    """The chart's ClusterRoles and Roles grant exactly the expected rules (tests/manifests/rbac.py)."""
    objs = template()
    assert grants(_one(objs, "ClusterRole", "wva-adapter")) == expand(EXPECTED_ADAPTER_RULES)
    assert grants(_one(objs, "Role", "wva-adapter-leader-election")) == expand(EXPECTED_LEASE_RULES)
    assert grants(_one(objs, "ClusterRole", "wva-adapter-external-metrics-reader")) == expand(EXPECTED_HPA_READER_RULES)
    delegator = _one(objs, "ClusterRoleBinding", "wva-adapter:system:auth-delegator")
    assert delegator["roleRef"]["name"] == "system:auth-delegator"  # tokenreviews and subjectaccessreviews create


def test_another_namespace_moves_every_reference() -> None:
    objs = template(("tls.mode=certManager",), namespace="wva-prod")
    for obj in objs:
        namespace = obj["metadata"].get("namespace")
        if namespace is not None:
            assert namespace == ("kube-system" if obj["metadata"]["name"] == "wva-adapter-auth-reader" else "wva-prod")
        for subject in obj.get("subjects") or []:
            if subject["name"] == "wva-adapter":
                assert subject["namespace"] == "wva-prod"
    serving = _one(objs, "Certificate", "wva-adapter-serving")["spec"]
    assert "wva-adapter.wva-prod.svc" in serving["dnsNames"]
    assert _one(objs, "APIService")["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        "wva-prod/wva-adapter-serving"
    )


def test_settings_become_the_main_configmap_and_prometheus_can_move_there() -> None:
    objs = template(MODES["settings-and-queueing-model"])
    main = _one(objs, "ConfigMap", "wva-variantautoscaling-config")
    assert main["data"] == {"GLOBAL_OPT_INTERVAL": "10s", "PROMETHEUS_QUERY_TIMEOUT": "5s"}
    assert _one(objs, "ConfigMap", "wva-queueing-model-config")["data"] == {"default": "sloTtftMs: 500"}
    assert "--prometheus-url" not in _deployment_flags(objs)
    assert not [o for o in template() if o["metadata"]["name"] == "wva-variantautoscaling-config"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(("mode=both",), "value must be one of 'hpa', 'keda'", id="mode"),
        pytest.param(("tls.mode=selfsigned",), "value must be one of 'helm', 'certManager'", id="tls-mode"),
        pytest.param(("extraArgs={watch-namespace=llm}",), "does not match pattern", id="extra-arg"),
        pytest.param(("replicas=0",), "minimum", id="replicas"),
        pytest.param(("prometheus.url=prometheus:9090",), "does not match pattern", id="prometheus-url"),
        pytest.param(("replicas=3", "leaderElection.enabled=false"), "needs leaderElection.enabled=true", id="lease"),
        pytest.param(("tls.mode=secret", "tls.secret.name=s"), "needs tls.secret.caBundle", id="secret-ca"),
        pytest.param(("tls.mode=secret",), "tls.secret.name is required", id="secret-name"),
        pytest.param(("unknownValue=1",), "additional properties 'unknownValue' not allowed", id="unknown"),
    ],
)
def test_bad_values_are_refused_with_a_message(values: tuple[str, ...], message: str) -> None:
    result = helm("template", "wva", str(CHART), *set_args(values), check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_the_post_renderer_applies_the_e2e_overlay() -> None:
    """What test_helm_install.py installs: the chart minus the adapter's Deployment and PDB, the Service an
    ExternalName of 127.0.0.1 (manifests/overlays/e2e-loopback's patches, read from the overlay)."""
    from .chart import post_renderer_args
    from .controlplane import require_binaries

    args, env = post_renderer_args(require_binaries()["kubectl"])
    out = helm("template", "wva", str(CHART), "--namespace", CONTROLLER_NS, *args, env=env).stdout
    objs = [o for o in yaml.safe_load_all(out) if o]
    assert not [o for o in objs if o["kind"] in ("Deployment", "PodDisruptionBudget")]
    assert _one(objs, "Service")["spec"] == {"type": "ExternalName", "externalName": "127.0.0.1"}
    assert _one(objs, "APIService")["spec"]["caBundle"]
