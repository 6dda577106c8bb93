"""A real etcd + kube-apiserver behind the small interface the in-process `serve` tests use of an API server.

`tests/e2e_serve` drives `run_serve` in-process and plays the controllers itself (it sets Deployment replicas
and creates Pods, as the HPA, the Deployment controller and a kubelet would), so it needs an API server but no
kube-controller-manager: `RealApiServer` starts etcd and kube-apiserver only (about 3 s), installs the VA CRD
from `manifests/crd` with kubectl, and offers what those tests call:

* `put`, `get`, `delete` of objects (as the admin; `put` writes `status` through the status subresource and
  creates the namespace when missing, see apiworld.Objects);
* `write_kubeconfig` (the default client) and `add_client` + `kubeconfig_for` (one more named client): each
  client is an x509 user of its own, in `system:masters` and in the audited group;
* `by(client, ...)`, `count(...)` and `requests`: what each client sent, from the apiserver's audit log.

One control plane per test (function scope) keeps the tests' fixed namespaces (`llm`, `wva-system`) and
Lease names apart without a namespace deletion between tests.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

from adapter.k8s.resources import ResourceType

from .apiworld import AuditedRequest, Objects, read_audit
from .cluster import Kube
from .controlplane import AUDITED_GROUP, REPO, ControlPlane

CRD = REPO / "manifests" / "crd"
DEFAULT_CLIENT = "serve"


class RealApiServer:
    def __init__(self, workdir: Path, *, install_crd: bool = True) -> None:
        """`install_crd=False` leaves the VA CRD out, for the one test of an adapter started before it exists."""
        self.workdir = workdir
        self.install_crd = install_crd
        self.plane = ControlPlane(workdir, controller_manager=False)
        self.kube: Kube | None = None
        self.objects: Objects | None = None
        self.clients: dict[str, Path] = {}

    # ---- life cycle ----

    async def start(self) -> None:
        await asyncio.to_thread(self._start)

    def _start(self) -> None:
        self.plane.start()
        self.kube = Kube(self.plane)
        self.objects = Objects(self.kube)
        if not self.install_crd:
            return
        self.kube.kubectl("apply", "--server-side", "-k", str(CRD))
        self.kube.kubectl("wait", "--for=condition=Established", "--timeout=30s", "crd", "--all")

    async def stop(self) -> None:
        if self.kube is not None:
            self.kube.close()
        await asyncio.to_thread(self.plane.stop)

    @property
    def url(self) -> str:
        return self.plane.url

    # ---- clients ----

    def _client(self, name: str) -> Path:
        if name not in self.clients:
            self.clients[name] = self.plane.kubeconfig_for(name, "system:masters", AUDITED_GROUP)
        return self.clients[name]

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig for the default client (user `serve`)."""
        shutil.copyfile(self._client(DEFAULT_CLIENT), path)
        return path

    async def add_client(self, name: str) -> int:
        """Register client `name` (a user of its own; there is no port to open: the audit log names the user)."""
        self._client(name)
        return 0

    def kubeconfig_for(self, name: str, path: Path) -> Path:
        shutil.copyfile(self._client(name), path)
        return path

    # ---- what the clients sent ----

    def _audit(self, client: str) -> list[AuditedRequest]:
        assert self.plane.audit_log is not None
        if not self.plane.audit_log.exists():
            return []
        return read_audit(self.plane.audit_log, user=client)

    def by(
        self, client: str, *, method: str | None = None, path_contains: str = "", since_s: float = 0.0
    ) -> list[AuditedRequest]:
        """Requests of `client` with HTTP `method` whose path contains `path_contains`, received at or after
        `since_s` (`time.monotonic()`)."""
        return [
            e
            for e in self._audit(client)
            if (method is None or e.method == method) and path_contains in e.path and e.at_s >= since_s
        ]

    def count(self, *, method: str | None = None, path_contains: str = "") -> int:
        """Requests of the default client (the fake server counted every request; here only the clients the
        test made are audited, and the default client is the one `serve` runs as)."""
        return len(self.by(DEFAULT_CLIENT, method=method, path_contains=path_contains))

    @property
    def requests(self) -> list[AuditedRequest]:
        return [e for name in self.clients for e in self._audit(name)]

    # ---- objects ----

    def _objects(self) -> Objects:
        assert self.objects is not None, "start() first"
        return self.objects

    def put(self, resource: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        return self._objects().put(resource, obj)

    def get(self, resource: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        return self._objects().get(resource, name, namespace=namespace)

    def delete(self, resource: ResourceType, namespace: str | None, name: str) -> None:
        self._objects().delete(resource, name, namespace=namespace)
