"""A real Kubernetes control plane as plain processes on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager.

The binaries are built from published Go modules by `make e2e-bins` (hack/build-k8s-bins.sh) into a cache outside
the repository; when they are missing the test FAILS and says so (it never skips). Recipe and reasoning:
../shared/research/real-control-plane.md §3.2 (apiserver flags), §3.3 (the aggregator reaching 127.0.0.1
through an ExternalName Service), §4 (kube-controller-manager without kubelets).

* The PKI is generated here with `cryptography` (through `adapter.servers.tls.CertificateAuthority`): a cluster
  CA (apiserver serving cert; a client cert for `admin` in `system:masters`, used by the tests and by
  kube-controller-manager), a separate front-proxy CA with the
  `front-proxy-client` cert the aggregator presents to us, an RSA ServiceAccount key pair, and the adapter's
  serving CA and certificate (SAN `wva-adapter.workload-variant-autoscaler-system.svc`: the name the
  aggregator verifies, `caBundle` in the APIService).
* Every port is a free 127.0.0.1 port; every wait is a bounded poll that fails with the component's log tail.
* Logs (`etcd.log`, `kube-apiserver.log`, `kube-controller-manager.log`) stay in the session's pytest temp
  directory as test artefacts; `stop()` terminates in reverse order (SIGTERM, 10 s, SIGKILL) and runs also when
  a test fails. Children also get SIGKILL if pytest itself dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import re
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from adapter.servers.tls import CertificateAuthority, IssuedCert, serving_hosts, write_pem_pair
from tests.ports import free_port

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "hack" / "build-k8s-bins.sh"
CONTROLLER_NS = "workload-variant-autoscaler-system"
ADAPTER_SA = "wva-adapter"
ADAPTER_USER = f"system:serviceaccount:{CONTROLLER_NS}:{ADAPTER_SA}"
AUDITED_GROUP = "wva-e2e:audited"
"""Users in this group have every request written to the control plane's audit log, bodies included."""
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl")


def pinned_k8s_version() -> str:
    """The release hack/build-k8s-bins.sh builds by default (one place states it)."""
    found = re.search(r"K8S_VERSION=\$\{K8S_VERSION:-(v[0-9.]+)\}", BUILD_SCRIPT.read_text())
    assert found, f"no K8S_VERSION default in {BUILD_SCRIPT}"
    return found.group(1)


def binary_dir() -> Path:
    """$KUBE_E2E_BIN, else $KUBE_E2E_CACHE/k8s-$K8S_VERSION/bin (cache default ~/.cache/kube-e2e)."""
    if os.environ.get("KUBE_E2E_BIN"):
        return Path(os.environ["KUBE_E2E_BIN"])
    cache = Path(os.environ.get("KUBE_E2E_CACHE") or Path.home() / ".cache" / "kube-e2e")
    return cache / f"k8s-{os.environ.get('K8S_VERSION') or pinned_k8s_version()}" / "bin"


def require_binaries() -> dict[str, Path]:
    directory = binary_dir()
    found = {name: directory / name for name in BINARIES}
    missing = [name for name, path in found.items() if not os.access(path, os.X_OK)]
    if missing:
        pytest.fail(
            f"the real-control-plane e2e tests need {', '.join(missing)} in {directory}: run `make e2e-bins` "
            "(builds them from the Go module proxy into the cache, ~6 min cold on 2 cores; needs Go >= 1.24)",
            pytrace=False,
        )
    return found


def _die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when pytest dies, so no control plane outlives a crashed run."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


# ------------------------------------------------------------------------------------------ PKI


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path

    def cert_b64(self) -> str:
        return base64.b64encode(self.cert.read_bytes()).decode()

    def key_b64(self) -> str:
        return base64.b64encode(self.key.read_bytes()).decode()


@dataclass(frozen=True)
class Pki:
    directory: Path
    ca: Path
    apiserver: Pair
    admin: Pair
    front_proxy_ca: Path
    front_proxy_client: Pair
    sa_key: Path
    sa_pub: Path
    adapter_ca: Path
    adapter_serving: Pair
    clients: dict[str, Pair] = field(default_factory=dict)
    _cluster_ca: CertificateAuthority | None = None

    def client_cert(self, user: str, *groups: str) -> Pair:
        """A client certificate of the cluster CA for `user` in `groups` (CN and O, as Kubernetes reads them)."""
        assert self._cluster_ca is not None
        key = f"{user}|{','.join(groups)}"
        if key not in self.clients:
            issued = self._cluster_ca.issue(user, organizations=groups, client=True)
            stem = re.sub(r"[^A-Za-z0-9_.-]", "_", user)
            self.clients[key] = Pair(*write_pem_pair(self.directory, f"user-{stem}", issued))
        return self.clients[key]


def _write(directory: Path, stem: str, issued: IssuedCert) -> Pair:
    return Pair(*write_pem_pair(directory, stem, issued))


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    cluster = CertificateAuthority.create("kube-e2e-ca")
    (directory / "ca.crt").write_bytes(cluster.cert_pem)
    api_hosts = ("127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "10.0.0.1")
    apiserver = _write(directory, "apiserver", cluster.issue("kube-apiserver", hosts=api_hosts, server=True))
    admin = _write(directory, "admin", cluster.issue("admin", organizations=("system:masters",), client=True))
    front = CertificateAuthority.create("kube-e2e-front-proxy-ca")
    (directory / "front-proxy-ca.crt").write_bytes(front.cert_pem)
    front_client = _write(directory, "front-proxy-client", front.issue("front-proxy-client", client=True))
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (directory / "sa.key").write_bytes(
        sa.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    (directory / "sa.pub").write_bytes(
        sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    adapter_ca = CertificateAuthority.create("wva-adapter-e2e-ca")
    (directory / "adapter-ca.crt").write_bytes(adapter_ca.cert_pem)
    hosts = serving_hosts(service="wva-adapter", namespace=CONTROLLER_NS)
    adapter_serving = _write(directory, "adapter-serving", adapter_ca.issue(hosts[2], hosts=hosts, server=True))
    return Pki(
        directory=directory,
        ca=directory / "ca.crt",
        apiserver=apiserver,
        admin=admin,
        front_proxy_ca=directory / "front-proxy-ca.crt",
        front_proxy_client=front_client,
        sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub",
        adapter_ca=directory / "adapter-ca.crt",
        adapter_serving=adapter_serving,
        _cluster_ca=cluster,
    )


def write_kubeconfig(path: Path, *, server: str, ca: Path, client: Pair, user: str = "user") -> Path:
    """A kubeconfig (JSON is YAML) with the CA and the client certificate embedded."""
    return _kubeconfig(
        path,
        server=server,
        ca=ca,
        user=user,
        credentials={"client-certificate-data": client.cert_b64(), "client-key-data": client.key_b64()},
    )


def write_token_kubeconfig(path: Path, *, server: str, ca: Path, token: str, user: str) -> Path:
    """A kubeconfig authenticating with a bearer token (a ServiceAccount's, from the TokenRequest API)."""
    return _kubeconfig(path, server=server, ca=ca, user=user, credentials={"token": token})


def _kubeconfig(path: Path, *, server: str, ca: Path, user: str, credentials: dict[str, str]) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "e2e", "cluster": {"server": server, "certificate-authority-data": _b64(ca.read_bytes())}}
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
        "current-context": "e2e",
    }
    path.write_text(json.dumps(config, indent=1))
    return path


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# ------------------------------------------------------------------------------------------ processes


@dataclass
class Component:
    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl, no locks taken
            )

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout_s: float = 10.0) -> None:
        if not self.running():
            return
        assert self.proc is not None
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=timeout_s)


def wait_for(what: str, probe: object, *, component: Component, timeout_s: float) -> float:
    """Poll `probe()` (True when ready) every 0.2 s until `timeout_s`; returns the seconds it took. Fails with the
    component's log tail when it exits or the time is up."""
    assert callable(probe)
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if not component.running():
            pytest.fail(f"{component.name} exited ({component.proc and component.proc.returncode}) before {what}:\n"
                        f"{component.tail()}", pytrace=False)  # fmt: skip
        with contextlib.suppress(OSError, ssl.SSLError, urllib.error.URLError):
            if probe():
                return time.monotonic() - started
        time.sleep(0.2)
    pytest.fail(f"{component.name}: {what} not reached within {timeout_s:g} s:\n{component.tail()}", pytrace=False)


class _Clients:
    """What tests need of either control plane: kubeconfigs and TLS contexts for its users."""

    workdir: Path
    url: str
    pki: Pki

    def kubeconfig_for(self, user: str, *groups: str) -> Path:
        """A kubeconfig for an x509 user of the cluster CA (CN = user, O = groups)."""
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", user)
        return write_kubeconfig(
            self.workdir / f"{stem}.kubeconfig",
            server=self.url,
            ca=self.pki.ca,
            client=self.pki.client_cert(user, *groups),
            user=stem,
        )

    def admin_ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        context.load_cert_chain(str(self.pki.admin.cert), str(self.pki.admin.key))
        return context


@dataclass
class ControlPlane(_Clients):
    """etcd + kube-apiserver + kube-controller-manager on free 127.0.0.1 ports, under `workdir`."""

    workdir: Path
    hpa_sync_period_s: float = 1.0
    controller_manager: bool = True
    """False: etcd and kube-apiserver only, for tests that play the controllers themselves (realapi.py)."""
    bins: dict[str, Path] = field(default_factory=require_binaries)
    etcd_port: int = field(default_factory=free_port)
    etcd_peer_port: int = field(default_factory=free_port)
    api_port: int = field(default_factory=free_port)
    kcm_port: int = field(default_factory=free_port)
    components: list[Component] = field(default_factory=list)
    startup_s: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.logs = self.workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.audit_log: Path | None = self.logs / "audit.jsonl"
        self.pki = make_pki(self.workdir / "pki")
        self.admin_kubeconfig = write_kubeconfig(
            self.workdir / "admin.kubeconfig", server=self.url, ca=self.pki.ca, client=self.pki.admin, user="admin"
        )

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    def _component(self, name: str, argv: list[str]) -> Component:
        component = Component(name, argv, self.logs / f"{name}.log")
        self.components.append(component)
        component.start()
        return component

    def start(self) -> None:
        self._start_etcd()
        self._start_apiserver()
        if self.controller_manager:
            self._start_controller_manager()

    def _start_etcd(self) -> None:
        client, peer = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{self.etcd_peer_port}"
        etcd = self._component(
            "etcd",
            [
                str(self.bins["etcd"]),
                "--name=e2e",
                f"--data-dir={self.workdir / 'etcd-data'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=e2e={peer}",
                "--listen-metrics-urls=",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )

        def healthy() -> bool:
            with urllib.request.urlopen(f"{client}/health", timeout=1) as response:
                return bool(json.loads(response.read()).get("health") == "true")

        self.startup_s["etcd"] = wait_for("/health", healthy, component=etcd, timeout_s=30)

    def _start_apiserver(self) -> None:
        pki = self.pki
        apiserver = self._component(
            "kube-apiserver",
            [
                str(self.bins["kube-apiserver"]),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",
                f"--tls-cert-file={pki.apiserver.cert}",
                f"--tls-private-key-file={pki.apiserver.key}",
                f"--client-ca-file={pki.ca}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--authorization-mode=RBAC",
                "--disable-admission-plugins=ServiceAccount",
                "--allow-privileged=true",
                f"--requestheader-client-ca-file={pki.front_proxy_ca}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki.front_proxy_client.cert}",
                f"--proxy-client-key-file={pki.front_proxy_client.key}",
                # Never --enable-aggregator-routing: it would bypass the ExternalName Service (research §3.3).
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                # The audit log is how tests see which requests a client sent (verb, URI, body, user), the
                # real server's answer to the fake server's request log (tests/e2e_k8s/apiworld.py).
                f"--audit-policy-file={self._audit_policy()}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-mode=blocking",
                "--audit-log-maxbackup=0",
                "--profiling=false",
                "--v=1",
            ],
        )
        context = self.admin_ssl_context()

        def ready() -> bool:
            request = urllib.request.Request(f"{self.url}/readyz")
            with urllib.request.urlopen(request, timeout=2, context=context) as response:
                return bool(response.status == 200)

        self.startup_s["kube-apiserver"] = wait_for("/readyz", ready, component=apiserver, timeout_s=90)

    def _audit_policy(self) -> Path:
        """Request-level audit (with bodies) of the tests' audited users and the adapter's ServiceAccount only:
        kube-controller-manager's HPA sync every second would otherwise dominate the log."""
        policy = {
            "apiVersion": "audit.k8s.io/v1",
            "kind": "Policy",
            "omitStages": ["RequestReceived"],
            "rules": [
                {"level": "Request", "userGroups": [AUDITED_GROUP]},
                {"level": "Request", "users": [ADAPTER_USER]},
                {"level": "None"},
            ],
        }
        path = self.workdir / "audit-policy.yaml"
        path.write_text(yaml.safe_dump(policy))
        return path

    def _start_controller_manager(self) -> None:
        kubeconfig = str(self.admin_kubeconfig)
        kcm = self._component(
            "kube-controller-manager",
            [
                str(self.bins["kube-controller-manager"]),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--use-service-account-credentials=false",
                "--controllers=deployment-controller,replicaset-controller,horizontal-pod-autoscaler-controller,"
                "garbage-collector-controller,namespace-controller",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.kcm_port}",
                f"--cert-dir={self.workdir / 'kcm-certs'}",
                f"--horizontal-pod-autoscaler-sync-period={self.hpa_sync_period_s:g}s",
                # The cluster-wide defaults, stated: the tolerance scenario depends on the 10 % band.
                "--horizontal-pod-autoscaler-tolerance=0.1",
                "--horizontal-pod-autoscaler-downscale-stabilization=5m0s",
                "--v=2",
            ],
        )
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # KCM's self-signed serving cert; only /healthz is read

        def healthy() -> bool:
            url = f"https://127.0.0.1:{self.kcm_port}/healthz"
            with urllib.request.urlopen(url, timeout=2, context=insecure) as response:
                return bool(response.status == 200)

        self.startup_s["kube-controller-manager"] = wait_for("/healthz", healthy, component=kcm, timeout_s=60)

    def assert_running(self) -> None:
        for component in self.components:
            if not component.running():
                pytest.fail(f"{component.name} died:\n{component.tail()}", pytrace=False)

    def stop(self) -> None:
        for component in reversed(self.components):
            component.stop()


# ------------------------------------------------------------------------------------------ an existing cluster


@dataclass
class ExternalCluster(_Clients):
    """The same interface as `ControlPlane` for a cluster that already runs (`make e2e-kind`, hack/e2e-kind.sh).

    `$WVA_E2E_KUBECONFIG` is its admin kubeconfig (client-certificate auth, as kind writes it);
    `$WVA_E2E_PKI_DIR` holds copies of the node's `ca.crt`, `ca.key` (to sign the tests' users mallory and
    carol), `front-proxy-ca.crt`, `front-proxy-client.crt` and `front-proxy-client.key`. The adapter's serving
    CA and certificate are generated as for the local control plane. Nothing is started or stopped here.
    """

    workdir: Path
    bins: dict[str, Path] = field(default_factory=require_binaries)
    startup_s: dict[str, float] = field(default_factory=dict)
    components: list[Component] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.logs = self.workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.audit_log: Path | None = None  # kind's apiserver audits nothing unless configured to
        source = Path(os.environ["WVA_E2E_KUBECONFIG"])
        config = yaml.safe_load(source.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        self.url = str(cluster["server"])
        pki_dir = Path(os.environ["WVA_E2E_PKI_DIR"])
        generated = make_pki(self.workdir / "pki")  # adapter serving CA/cert (and throw-away cluster parts)
        admin = Pair(self.workdir / "pki" / "admin.crt", self.workdir / "pki" / "admin.key")
        admin.cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
        admin.key.write_bytes(base64.b64decode(user["client-key-data"]))
        ca_cert = x509.load_pem_x509_certificate((pki_dir / "ca.crt").read_bytes())
        ca_key = serialization.load_pem_private_key((pki_dir / "ca.key").read_bytes(), password=None)
        self.pki = Pki(
            directory=generated.directory,
            ca=pki_dir / "ca.crt",
            apiserver=generated.apiserver,
            admin=admin,
            front_proxy_ca=pki_dir / "front-proxy-ca.crt",
            front_proxy_client=Pair(pki_dir / "front-proxy-client.crt", pki_dir / "front-proxy-client.key"),
            sa_key=generated.sa_key,
            sa_pub=generated.sa_pub,
            adapter_ca=generated.adapter_ca,
            adapter_serving=generated.adapter_serving,
            _cluster_ca=CertificateAuthority(ca_cert, ca_key),  # type: ignore[arg-type]  # RSA signs the same way
        )
        self.admin_kubeconfig = write_kubeconfig(
            self.workdir / "admin.kubeconfig", server=self.url, ca=self.pki.ca, client=admin, user="admin"
        )

    def start(self) -> None:
        print(f"[e2e-k8s] using the running cluster at {self.url} ($WVA_E2E_KUBECONFIG)")

    def assert_running(self) -> None:
        return None

    def stop(self) -> None:
        return None


def adapter_host() -> str:
    """Where the aggregator reaches the tests' adapters: 127.0.0.1 for the local control plane; for a cluster in
    containers (kind) the host's address on their network, `$WVA_E2E_ADAPTER_HOST`."""
    return os.environ.get("WVA_E2E_ADAPTER_HOST", "127.0.0.1")
