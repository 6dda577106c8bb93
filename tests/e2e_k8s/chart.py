"""The Helm chart under test: the helm binary `make e2e-bins` builds (hack/build-helm.sh), rendering, and the
normalisation that makes a chart rendering comparable with a kustomize one.

When helm is missing the tests FAIL with the command that builds it; they never skip.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from .controlplane import CONTROLLER_NS, REPO

CHART = REPO / "charts" / "wva-adapter"
BUILD_SCRIPT = REPO / "hack" / "build-helm.sh"
POST_RENDERER = Path(__file__).with_name("helm_loopback.py")
HELM_LABELS = frozenset(
    {"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}
)
"""Labels Helm's conventions add to every object; the kustomizations have none of them."""

Values = Sequence[str]
"""`--set` arguments, e.g. ("tls.mode=certManager", "mode=keda")."""


def pinned_helm_version() -> str:
    found = re.search(r"HELM_VERSION=\$\{HELM_VERSION:-(v[0-9.]+)\}", BUILD_SCRIPT.read_text())
    assert found, f"no HELM_VERSION default in {BUILD_SCRIPT}"
    return found.group(1)


def helm_binary() -> Path:
    cache = Path(os.environ.get("KUBE_E2E_CACHE") or Path.home() / ".cache" / "kube-e2e")
    path = cache / f"helm-{os.environ.get('HELM_VERSION') or pinned_helm_version()}" / "bin" / "helm"
    if not os.access(path, os.X_OK):
        pytest.fail(
            f"the chart tests need helm at {path}: run `make e2e-bins` (builds helm.sh/helm/v3 from the Go module "
            "proxy, ~3 min cold)",
            pytrace=False,
        )
    return path


def helm(*args: str, kubeconfig: Path | None = None, check: bool = True, timeout_s: float = 120,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run helm (a failure fails the test with its output, unless `check=False`)."""
    argv = [str(helm_binary()), *args]
    if kubeconfig is not None:
        argv.append(f"--kubeconfig={kubeconfig}")
    base = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "HELM_NAMESPACE")}
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout_s, env={**base, **(env or {})}, check=False
    )
    if check and result.returncode != 0:
        pytest.fail(
            f"helm {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}", pytrace=False
        )
    return result


def set_args(values: Values) -> list[str]:
    return [arg for value in values for arg in ("--set", value)]


def template(values: Values = (), *, namespace: str = CONTROLLER_NS, release: str = "wva") -> list[dict[str, Any]]:
    """`helm template --include-crds` of the chart, parsed (no cluster: `lookup` finds nothing). A fresh copy per
    call."""
    return copy.deepcopy(_template(tuple(values), namespace, release))


@functools.cache
def _template(values: tuple[str, ...], namespace: str, release: str) -> list[dict[str, Any]]:
    out = helm("template", release, str(CHART), "--namespace", namespace, "--include-crds", *set_args(values)).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def post_renderer_args(kubectl: Path) -> tuple[list[str], dict[str, str]]:
    """`--post-renderer` arguments running helm_loopback.py with this interpreter, and its environment."""
    return (
        ["--post-renderer", sys.executable, "--post-renderer-args", str(POST_RENDERER)],
        {"WVA_E2E_KUBECTL": str(kubectl)},
    )


def without_helm_metadata(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` without Helm's labels (what a kustomization renders for the same object)."""
    out = copy.deepcopy(obj)
    meta = out["metadata"]
    kept = {k: v for k, v in (meta.get("labels") or {}).items() if k not in HELM_LABELS}
    if kept:
        meta["labels"] = kept
    else:
        meta.pop("labels", None)
    return out


def object_id(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{obj.get('kind')}/{namespace + '/' if namespace else ''}{meta.get('name')}"
