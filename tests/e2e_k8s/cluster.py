"""Talking to the real control plane from the tests: kubectl (as a user would) and the Python client (polling).

`Kube` wraps both with the admin identity. Installation follows docs/deployment.md with the test overlay:
`kubectl kustomize manifests/overlays/e2e-loopback | kubectl apply -f -` (CRD, RBAC, ConfigMaps, the loopback
Service, the APIService), then per test a namespace rendered from `manifests/examples` (+ `examples/hpa`) by a
generated kustomization that sets the namespace and patches what the scenario needs.

Every wait is `until(...)`: a bounded poll that fails with the last thing it saw.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from .controlplane import CONTROLLER_NS, REPO, ControlPlane, ExternalCluster

APISERVICE = "v1beta1.external.metrics.k8s.io"
EM_GROUP, EM_VERSION = "external.metrics.k8s.io", "v1beta1"
VA_GROUP, VA_VERSION, VA_PLURAL = "llmd.ai", "v1alpha1", "variantautoscalings"
OVERLAY = REPO / "manifests" / "overlays" / "e2e-loopback"
EXAMPLES = REPO / "manifests" / "examples"
EXAMPLE_HPAS = EXAMPLES / "hpa"
MODEL = "meta/llama-3.1-8b"
CHEAP, DEAR = "llama-8b-l4", "llama-8b-a100"


def until(what: str, check: Callable[[], str | None], *, timeout_s: float, every_s: float = 0.2) -> float:
    """Poll `check` (None = satisfied, else what is still wrong) until satisfied; returns the seconds it took."""
    started = time.monotonic()
    problem: str | None = "not checked yet"
    while time.monotonic() - started <= timeout_s:
        problem = check()
        if problem is None:
            return time.monotonic() - started
        time.sleep(every_s)
    pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}; last seen: {problem}", pytrace=False)


@dataclass
class Kube:
    plane: ControlPlane | ExternalCluster
    api: k8s.ApiClient = field(init=False)

    def __post_init__(self) -> None:
        self.api = k8s_config.new_client_from_config(config_file=str(self.plane.admin_kubeconfig))
        self.core = k8s.CoreV1Api(self.api)
        self.apps = k8s.AppsV1Api(self.api)
        self.custom = k8s.CustomObjectsApi(self.api)
        self.autoscaling = k8s.AutoscalingV2Api(self.api)
        self.coordination = k8s.CoordinationV1Api(self.api)
        self.registration = k8s.ApiregistrationV1Api(self.api)
        self.http = requests.Session()
        self.http.trust_env = False  # REQUESTS_CA_BUNDLE would replace our CA, and no proxy is ever wanted
        self.http.verify = str(self.plane.pki.ca)
        self.http.cert = (str(self.plane.pki.admin.cert), str(self.plane.pki.admin.key))

    def close(self) -> None:
        self.http.close()
        self.api.close()

    # ---- kubectl ----

    def kubectl(
        self,
        *args: str,
        kubeconfig: Path | None = None,
        stdin: str | None = None,
        check: bool = True,
        timeout_s: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        argv = [str(self.plane.bins["kubectl"]), f"--kubeconfig={kubeconfig or self.plane.admin_kubeconfig}", *args]
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        result = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=timeout_s, env=env, check=False
        )
        if check and result.returncode != 0:
            pytest.fail(
                f"kubectl {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}", pytrace=False
            )
        return result

    def apply_kustomization(self, directory: Path) -> str:
        """`kubectl kustomize DIR | kubectl apply -f -` (kubectl's built-in kustomize, as users run it)."""
        rendered = self.kubectl("kustomize", str(directory)).stdout
        return self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=rendered).stdout

    def raw(self, path: str, *, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
        """`kubectl get --raw PATH` (exit code and stderr kept: a 403 is an answer too)."""
        return self.kubectl("get", "--raw", path, kubeconfig=kubeconfig, check=False)

    # ---- install ----

    def install_adapter_manifests(self) -> str:
        return self.apply_kustomization(OVERLAY)

    def service_account_token(self, namespace: str, name: str, duration: str = "2h") -> str:
        """A token for the ServiceAccount from the TokenRequest API (`kubectl create token`), as a pod would get."""
        return self.kubectl("create", "token", name, "-n", namespace, f"--duration={duration}").stdout.strip()

    def point_apiservice(self, *, port: int, ca_pem: bytes, host: str = "127.0.0.1") -> None:
        """The run-time half of the overlay: the adapter's port behind the ExternalName Service and its CA (and,
        for a cluster in containers, the host address instead of 127.0.0.1)."""
        if host != "127.0.0.1":
            service = {"spec": {"externalName": host}}
            self.kubectl(
                "patch", "service", "wva-adapter", "-n", CONTROLLER_NS, "--type=merge", "-p", json.dumps(service)
            )
        patch = {"spec": {"service": {"port": port}, "caBundle": base64.b64encode(ca_pem).decode()}}
        self.kubectl("patch", "apiservice", APISERVICE, "--type=merge", "-p", json.dumps(patch))

    def apiservice_available(self) -> tuple[str, str]:
        obj = self.registration.read_api_service(APISERVICE)
        for condition in obj.status.conditions or []:
            if condition.type == "Available":
                return condition.status, f"{condition.reason}: {condition.message}"
        return "Unknown", "no Available condition"

    def nudge_apiservice(self) -> None:
        """Touch the APIService so the availability controller probes it now, not at its next resync."""
        patch = {"metadata": {"annotations": {"e2e.wva/probe": str(time.monotonic_ns())}}}
        self.kubectl("patch", "apiservice", APISERVICE, "--type=merge", "-p", json.dumps(patch))

    def wait_apiservice_available(self, timeout_s: float = 60) -> float:
        """Until the APIService is Available and discovery through the aggregator is answered (by the adapter
        now behind the Service: the condition alone may still be True from the previous test's adapter)."""
        self.nudge_apiservice()
        url = f"{self.plane.url}/apis/{EM_GROUP}/{EM_VERSION}"

        def available() -> str | None:
            status, why = self.apiservice_available()
            if status != "True":
                return f"Available={status} ({why})"
            try:
                answer = self.http.get(url, timeout=5)
            except requests.RequestException as exc:
                return f"discovery through the aggregator: {exc!r}"
            return None if answer.status_code == 200 else f"discovery through the aggregator: HTTP {answer.status_code}"

        return until(f"APIService {APISERVICE} available and answering", available, timeout_s=timeout_s, every_s=0.2)

    def namespace_from_examples(
        self, workdir: Path, namespace: str, *, hpa: bool = True, patches: Sequence[dict[str, Any]] = ()
    ) -> str:
        """Render manifests/examples (and examples/hpa) into `namespace` with `patches` (kustomize patch entries),
        apply, and return kubectl's output."""
        workdir.mkdir(parents=True, exist_ok=True)
        resources = [os.path.relpath(EXAMPLES, workdir)]
        if hpa:
            resources.append(os.path.relpath(EXAMPLE_HPAS, workdir))
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "namespace": namespace,
            "resources": resources,
            "patches": list(patches),
        }
        (workdir / "kustomization.yaml").write_text(json.dumps(kustomization, indent=1))
        return self.apply_kustomization(workdir)

    def delete_namespace(self, namespace: str) -> None:
        """Start deleting (no wait): the namespace controller removes HPAs, VAs and pods in the background."""
        try:
            self.core.delete_namespace(namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise

    # ---- reading ----

    def va(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.custom.get_namespaced_custom_object(VA_GROUP, VA_VERSION, namespace, VA_PLURAL, name))

    def patch_va(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(VA_GROUP, VA_VERSION, namespace, VA_PLURAL, name, patch)

    def condition(self, va: dict[str, Any], kind: str) -> dict[str, Any]:
        for c in (va.get("status") or {}).get("conditions") or []:
            if c.get("type") == kind:
                return dict(c)
        return {}

    def deployment(self, namespace: str, name: str) -> dict[str, Any]:
        return self.api.sanitize_for_serialization(self.apps.read_namespaced_deployment(name, namespace))  # type: ignore[no-any-return]

    def hpa(self, namespace: str, name: str) -> dict[str, Any]:
        obj = self.autoscaling.read_namespaced_horizontal_pod_autoscaler(name, namespace)
        return self.api.sanitize_for_serialization(obj)  # type: ignore[no-any-return]

    def events(self, namespace: str, *, kind: str, name: str) -> list[dict[str, Any]]:
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        items = self.core.list_namespaced_event(namespace, field_selector=selector).items
        return [self.api.sanitize_for_serialization(e) for e in sorted(items, key=_event_time)]

    def external_metric(
        self, namespace: str, metric: str, selector: str, *, timeout_s: float = 5
    ) -> tuple[int, dict[str, Any]]:
        """GET through the real apiserver's aggregator as admin (a kept-alive HTTPS session): (status, body)."""
        url = f"{self.plane.url}/apis/{EM_GROUP}/{EM_VERSION}/namespaces/{namespace}/{metric}"
        try:
            response = self.http.get(url, params={"labelSelector": selector}, timeout=timeout_s)
        except requests.RequestException as exc:
            return 0, {"error": repr(exc)}
        try:
            return response.status_code, dict(response.json())
        except ValueError:
            return response.status_code, {"raw": response.text}


def _event_time(event: Any) -> float:
    stamp = event.last_timestamp or event.event_time or event.first_timestamp or event.metadata.creation_timestamp
    return stamp.timestamp() if stamp is not None else 0.0


def served_value(body: dict[str, Any]) -> float | None:
    """The one item's value of an ExternalMetricValueList (Quantity "3" or "1500m"), None when empty."""
    items = body.get("items") or []
    if not items:
        return None
    text = str(items[0]["value"])
    return int(text[:-1]) / 1000 if text.endswith("m") else float(text)
