"""`helm install`, `upgrade` and `uninstall` of the chart on a real control plane of its own, after which the real
aggregator serves `wva_desired_replicas` from the installed adapter and the real HPA scales from it.

A control plane of its own (etcd, kube-apiserver, kube-controller-manager, ~4 s): the session's already holds
the kustomize install (CRD, APIService, ClusterRoles), which a Helm release cannot own. Its own Prometheus and
emulated kubelet (node.py) too, so the decisions come from real metrics.

What is real: helm (`make e2e-bins`) installing the chart as a user would, with `--create-namespace` and the
chart's own TLS (tls.mode=helm: the chart's CA in the APIService's caBundle, which the aggregator verifies),
RBAC, ConfigMaps (the analyzer ones and `settings` as wva-variantautoscaling-config), examples (VAs,
Deployments, HPAs). What stands in for the kubelet running the adapter's pod: `wva-adapter serve` started
with the Deployment's own arguments (from `helm template` of the same values), reading the Secret helm made
and the token of the chart's ServiceAccount; only addresses and the certificate's path are made local. The
post-renderer (helm_loopback.py) applies the e2e-loopback overlay's patches (no Deployment, Service
ExternalName 127.0.0.1), as the kustomize tests do.

Figures printed (`-s`): the install, upgrade and uninstall times, and the time from `helm install` to the
HPA's first scale-up.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from tests.manifests.rbac import (
    EXPECTED_ADAPTER_RULES,
    EXPECTED_AUTH_DELEGATOR_RULES,
    EXPECTED_HPA_READER_RULES,
    EXPECTED_LEASE_RULES,
    expand,
    grants,
)

from .adapter import WVA_ADAPTER, AdapterProcess
from .chart import CHART, helm, post_renderer_args, set_args, template
from .cluster import APISERVICE, CHEAP, DEAR, EM_GROUP, EM_VERSION, VA_GROUP, VA_PLURAL, VA_VERSION, Kube, until
from .controlplane import CONTROLLER_NS, ControlPlane, Pair, write_token_kubeconfig
from .node import FileSdPrometheus, LoopbackService, LoopThread, Node

pytestmark = pytest.mark.e2e_k8s

RELEASE = "wva"
EXAMPLES_NS = "llm"
SA_USER = f"system:serviceaccount:{CONTROLLER_NS}:wva-adapter"
MOUNT = "/var/run/wva-adapter/tls"
HIGH_DEMAND = 2.7
"""2.7 pods' worth of KV cache: the example model settles at 3 L4 + 1 A100 (node.py's worked example)."""


@dataclass
class HelmWorld:
    plane: ControlPlane
    kube: Kube
    prometheus: FileSdPrometheus
    node: Node
    loopback: LoopbackService
    loop: LoopThread
    workdir: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, loop: LoopThread) -> Iterator[HelmWorld]:
    workdir = tmp_path_factory.mktemp("helm-plane")
    plane = ControlPlane(workdir)
    started: list[Any] = []
    try:
        plane.start()
        print(f"\n[helm] control plane of its own ready: {plane.startup_s}")
        kube = Kube(plane)
        started.append(kube.close)
        prometheus = FileSdPrometheus(workdir / "prometheus", jobs={})
        prometheus.write_targets([])
        prometheus.start()
        started.append(prometheus.stop)
        loop.run(prometheus.wait_ready())
        node = Node(kube.core, prometheus)
        loop.run(node.start())
        started.append(lambda: loop.run(node.stop()))
        loopback = LoopbackService(host="127.0.0.1")
        loop.run(loopback.start())
        started.append(lambda: loop.run(loopback.stop()))
        yield HelmWorld(plane, kube, prometheus, node, loopback, loop, workdir)
    finally:
        plane.stop()  # first: the aggregator's connections through the forwarder then end from its side
        for stop in reversed(started):
            stop()


def _values(world: HelmWorld, *, interval: str) -> list[str]:
    """The release's values: examples on, the Service port the loopback forwarder listens on, and Prometheus,
    the engine interval and the query window given as live settings (the wva-variantautoscaling-config)."""
    return [
        "examples.enabled=true",
        f"service.httpsPort={world.loopback.port}",
        "prometheus.url=",
        f"settings.PROMETHEUS_BASE_URL={world.prometheus.url}",
        f"settings.GLOBAL_OPT_INTERVAL={interval}",
        "settings.WVA_SATURATION_WINDOW=2s",
        "settings.PROMETHEUS_QUERY_TIMEOUT=2s",
    ]


def _helm_release(world: HelmWorld, verb: str, values: list[str]) -> float:
    args, env = post_renderer_args(world.plane.bins["kubectl"])
    started = time.monotonic()
    extra = ["--create-namespace"] if verb == "install" else []
    helm(verb, RELEASE, str(CHART), "--namespace", CONTROLLER_NS, *extra, *args, *set_args(values), "--timeout",
         "60s", kubeconfig=world.plane.admin_kubeconfig, env=env)  # fmt: skip
    return time.monotonic() - started


@dataclass
class ChartPod(AdapterProcess):
    """The chart's Deployment run as a process: its container arguments, with only what must be local changed
    (listen addresses and ports, the mounted certificate's directory) and the kubeconfig of its ServiceAccount."""

    chart_args: list[str] = field(default_factory=list)
    cert_dir: Path = Path()

    def argv(self) -> list[str]:
        local = {
            "--secure-port": str(self.https_port),
            "--keda-grpc-address": f"127.0.0.1:{self.grpc_port}",
            "--metrics-bind-address": f"127.0.0.1:{self.metrics_port}",
            "--health-probe-bind-address": f"127.0.0.1:{self.health_port}",
        }
        args: list[str] = []
        for arg in self.chart_args[1:]:
            name, sep, value = arg.partition("=")
            if name in local:
                value = local[name]
            elif value.startswith(MOUNT):
                value = str(self.cert_dir) + value[len(MOUNT) :]
            args.append(f"{name}{sep}{value}")
        return [str(WVA_ADAPTER), "serve", f"--kubeconfig={self.kubeconfig}", "--bind-address=127.0.0.1", *args]


def _start_chart_pod(world: HelmWorld, values: list[str]) -> ChartPod:
    deployment = next(
        o for o in template(values) if o["kind"] == "Deployment" and o["metadata"]["name"] == "wva-adapter"
    )
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    secret = world.kube.core.read_namespaced_secret("wva-adapter-tls", CONTROLLER_NS)
    cert_dir = world.workdir / "serving-cert"
    cert_dir.mkdir(exist_ok=True)
    for key in ("tls.crt", "tls.key"):
        (cert_dir / key).write_bytes(base64.b64decode(secret.data[key]))
    token = world.kube.service_account_token(CONTROLLER_NS, "wva-adapter")
    kubeconfig = write_token_kubeconfig(
        world.workdir / "chart-pod.kubeconfig", server=world.plane.url, ca=world.plane.pki.ca, token=token,
        user="wva-adapter",
    )  # fmt: skip
    pod = ChartPod(
        name="chart-pod",
        log=world.plane.logs / "adapter-chart-pod.log",
        kubeconfig=kubeconfig,
        prometheus_url="",
        serving=Pair(cert_dir / "tls.crt", cert_dir / "tls.key"),
        watch_namespace="",
        env={"POD_NAMESPACE": CONTROLLER_NS, "POD_NAME": "wva-adapter-0"},
        chart_args=list(container["args"]),
        cert_dir=cert_dir,
    )
    took = pod.start()
    print(f"[helm] adapter started with the chart's arguments in {took:.1f}s: {' '.join(pod.argv()[1:])}")
    return pod


def _served(world: HelmWorld, variant: str) -> str | None:
    status, body = world.kube.external_metric(EXAMPLES_NS, "wva_desired_replicas", f"variant_name={variant}")
    items = body.get("items") or []
    return str(items[0]["value"]) if status == 200 and items else None


def _bound_rules(kube: Kube) -> set[tuple[str, str, str]]:
    """Every (group, resource, verb) the adapter's ServiceAccount holds, read from the roles bound to it on the
    real API server (ClusterRoleBindings and the RoleBindings of its namespace and kube-system)."""
    rbac = kube.api.sanitize_for_serialization
    api = k8s.RbacAuthorizationV1Api(kube.api)
    out: set[tuple[str, str, str]] = set()

    def bound(binding: dict[str, Any]) -> bool:
        return any(
            s.get("kind") == "ServiceAccount" and s.get("name") == "wva-adapter" and s.get("namespace") == CONTROLLER_NS
            for s in binding.get("subjects") or []
        )

    for binding in rbac(api.list_cluster_role_binding())["items"]:
        if bound(binding):
            out |= grants(rbac(api.read_cluster_role(binding["roleRef"]["name"])))
    for namespace in (CONTROLLER_NS, "kube-system"):
        for binding in rbac(api.list_namespaced_role_binding(namespace))["items"]:
            if bound(binding) and binding["roleRef"]["kind"] == "Role":
                out |= grants(rbac(api.read_namespaced_role(binding["roleRef"]["name"], namespace)))
    return out


def _user_va() -> dict[str, Any]:
    """A VariantAutoscaling a user created outside the release (helm uninstall must not take it)."""
    return {
        "apiVersion": f"{VA_GROUP}/{VA_VERSION}",
        "kind": "VariantAutoscaling",
        "metadata": {"name": "users-own", "namespace": EXAMPLES_NS},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "elsewhere"},
            "modelID": "meta/llama-3.1-8b",
            "minReplicas": 1,
            "maxReplicas": 2,
        },
    }


def _can(kube: Kube, verb: str, resource: str, subresource: str = "") -> bool:
    """`kubectl auth can-i` as the adapter's ServiceAccount: the real authorizer's answer."""
    extra = [f"--subresource={subresource}"] if subresource else []
    result = kube.kubectl("auth", "can-i", verb, resource, *extra, "-n", EXAMPLES_NS, f"--as={SA_USER}", check=False)
    return result.stdout.strip() == "yes"


@pytest.mark.timeout(420)
def test_helm_install_upgrade_uninstall(world: HelmWorld) -> None:
    kube, loop = world.kube, world.loop
    loop.run(world.node.adopt(EXAMPLES_NS))
    loop.run(world.node.set_demand(EXAMPLES_NS, HIGH_DEMAND))
    values = _values(world, interval="1s")

    # ---- install --------------------------------------------------------------------------------------------
    t_install = time.monotonic()
    install_s = _helm_release(world, "install", values)
    status = json.loads(helm("status", RELEASE, "-n", CONTROLLER_NS, "-o", "json",
                             kubeconfig=world.plane.admin_kubeconfig).stdout)  # fmt: skip
    assert (status["info"]["status"], status["version"]) == ("deployed", 1)
    secret = kube.core.read_namespaced_secret("wva-adapter-tls", CONTROLLER_NS)
    api_service = kube.registration.read_api_service(APISERVICE)
    assert api_service.spec.ca_bundle == secret.data["ca.crt"], "the APIService trusts the chart's CA"
    assert not api_service.spec.insecure_skip_tls_verify
    main = kube.core.read_namespaced_config_map("wva-variantautoscaling-config", CONTROLLER_NS)
    assert main.data["GLOBAL_OPT_INTERVAL"] == "1s"

    pod = _start_chart_pod(world, values)
    try:
        loop.run(world.loopback.set_backends([pod.https_port]))
        available_s = kube.wait_apiservice_available()
        served_s = until(f"{CHEAP} served through the aggregator", lambda: None if _served(world, CHEAP) else "nothing",
                         timeout_s=60)  # fmt: skip

        def scaled(replicas: int) -> str | None:
            spec = kube.deployment(EXAMPLES_NS, CHEAP)["spec"]["replicas"]
            if spec >= replicas:
                return None
            alloc = (kube.va(EXAMPLES_NS, CHEAP).get("status") or {}).get("desiredOptimizedAlloc") or {}
            return f"spec.replicas={spec}, served {_served(world, CHEAP)}, VA status {alloc}"  # why, on a timeout

        def fleet_of(pods: int) -> str | None:
            specs = {name: kube.deployment(EXAMPLES_NS, name)["spec"]["replicas"] for name in (CHEAP, DEAR)}
            return None if sum(specs.values()) >= pods else f"spec.replicas {specs}"

        until(f"the HPA scaling {CHEAP} from the served decision", lambda: scaled(2), timeout_s=120)
        first_scale_s = time.monotonic() - t_install
        # 2.7 pods' worth of KV demand on 3 pods saturates each (0.9), on 4 it leaves 0.125 spare (steady). The
        # two added pods are usually both L4s, but the saturation analyzer (the e2e overlay's patches, applied by
        # the post-renderer, select it) rightly gives a +1 to the A100s when a cycle sees the A100 pod reporting
        # before any L4 pod is scraped (seen once: A100 -> 2 at the first decision, then L4 -> 2), or while a new
        # L4 pod reports but is not Ready (the L4s have a pending replica). Either way the fleet reaches 4 pods.
        until("the HPAs scaling the fleet to 4 pods", lambda: fleet_of(4), timeout_s=120)
        to_four_s = time.monotonic() - t_install
        rescales = [e["message"] for e in kube.events(EXAMPLES_NS, kind="HorizontalPodAutoscaler", name=CHEAP)
                    if e["reason"] == "SuccessfulRescale"]  # fmt: skip
        assert any("New size: 2" in str(m) and "wva_desired_replicas" in str(m) for m in rescales), rescales
        print(f"[helm] FIGURES install {install_s:.2f}s; APIService available {available_s:.2f}s after routing "
              f"(first value served {served_s:.2f}s later); helm install -> HPA scaled {CHEAP} to 2 in "
              f"{first_scale_s:.1f}s, the fleet to 4 pods in {to_four_s:.1f}s")  # fmt: skip

        # ---- least privilege, on the real RBAC of the release ---------------------------------------------------
        # The roles bound to the ServiceAccount, read from the API server: exactly the expected rules, including what
        # the built-in system:auth-delegator grants (tokenreviews and subjectaccessreviews create) and the
        # extension-apiserver-authentication-reader Role (configmaps, already among the adapter's reads).
        expected = expand(EXPECTED_ADAPTER_RULES) | expand(EXPECTED_LEASE_RULES) | expand(EXPECTED_AUTH_DELEGATOR_RULES)
        assert _bound_rules(kube) == expected
        reader = k8s.RbacAuthorizationV1Api(kube.api).read_cluster_role("wva-adapter-external-metrics-reader")
        assert grants(kube.api.sanitize_for_serialization(reader)) == expand(EXPECTED_HPA_READER_RULES)
        for verb, resource, subresource, allowed in [
            ("create", "tokenreviews.authentication.k8s.io", "", True),
            ("create", "subjectaccessreviews.authorization.k8s.io", "", True),
            ("create", "events.events.k8s.io", "", True),
            ("patch", "variantautoscalings.llmd.ai", "status", True),
            ("create", "events", "", False),
            ("get", "secrets", "", False),
            ("patch", "deployments.apps", "", False),
            ("update", "deployments.apps", "scale", False),
            ("update", "variantautoscalings.llmd.ai", "", False),
            ("delete", "variantautoscalings.llmd.ai", "", False),
        ]:
            assert _can(kube, verb, resource, subresource) is allowed, f"can-i {verb} {resource} {subresource}"

        # ---- upgrade: a live setting changes, the TLS Secret is reused -------------------------------------------
        upgraded = _values(world, interval="2s")
        upgrade_s = _helm_release(world, "upgrade", upgraded)
        status = json.loads(helm("status", RELEASE, "-n", CONTROLLER_NS, "-o", "json",
                                 kubeconfig=world.plane.admin_kubeconfig).stdout)  # fmt: skip
        assert (status["info"]["status"], status["version"]) == ("deployed", 2)
        assert kube.core.read_namespaced_secret("wva-adapter-tls", CONTROLLER_NS).data == secret.data, "reused"
        assert kube.registration.read_api_service(APISERVICE).spec.ca_bundle == secret.data["ca.crt"]
        applied_s = until(
            "the adapter applying GLOBAL_OPT_INTERVAL=2s live",
            lambda: None if "live setting --engine-interval is now 2.0" in pod.tail(200) else "not yet",
            timeout_s=30,
        )
        pod.assert_running()
        assert _served(world, CHEAP) is not None
        kube.wait_apiservice_available()
        print(f"[helm] FIGURES upgrade {upgrade_s:.2f}s; the new engine interval applied by the running adapter "
              f"{applied_s:.2f}s later (same process, no restart)")  # fmt: skip

        # ---- uninstall: the release's objects go (APIService, RBAC, its example VAs), the CRD and VAs of others stay
        kube.custom.create_namespaced_custom_object(VA_GROUP, VA_VERSION, EXAMPLES_NS, VA_PLURAL, _user_va())
        uninstall_s_start = time.monotonic()
        helm("uninstall", RELEASE, "-n", CONTROLLER_NS, "--timeout", "60s", kubeconfig=world.plane.admin_kubeconfig)
        uninstall_s = time.monotonic() - uninstall_s_start
        with pytest.raises(ApiException) as gone:
            kube.registration.read_api_service(APISERVICE)
        assert gone.value.status == 404
        assert kube.kubectl("get", "clusterrole", "wva-adapter", check=False).returncode != 0
        assert kube.kubectl("get", "crd", "variantautoscalings.llmd.ai", check=False).returncode == 0, "kept"
        assert kube.va(EXAMPLES_NS, "users-own")["metadata"]["name"] == "users-own", "the CRD and VAs outside stay"
        with pytest.raises(ApiException, match="Not Found"):
            kube.va(EXAMPLES_NS, CHEAP)  # the release's example
        discovery = f"{world.plane.url}/apis/{EM_GROUP}/{EM_VERSION}"

        def dropped() -> str | None:
            code = kube.http.get(discovery, timeout=5).status_code
            return None if code == 404 else f"HTTP {code}"

        until("the aggregator dropping external.metrics.k8s.io", dropped, timeout_s=30)
        print(f"[helm] FIGURES uninstall {uninstall_s:.2f}s")
        log = pod.log.read_text(errors="replace")
        assert not re.search(r"Traceback|a root task failed", log), log[-3000:]
    finally:
        pod.stop()
