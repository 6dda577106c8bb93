"""Helm post-renderer of the chart tests: what `manifests/overlays/e2e-loopback` does to the kustomizations, done
to a Helm release, so a chart installed on the test control plane reaches an adapter running on 127.0.0.1.

Helm pipes the rendered release into stdin and applies stdout. The patches are read from the overlay's own
kustomization (one source): the Deployment and PodDisruptionBudget are deleted (no kubelet runs them; the test
runs the adapter with the chart's arguments, tests/e2e_k8s/test_helm_install.py) and the Service becomes
`ExternalName 127.0.0.1`. Everything else — RBAC, ConfigMaps, the TLS Secret, the APIService with its caBundle —
is applied as the chart rendered it. Applied with the real `kubectl kustomize` ($WVA_E2E_KUBECTL).

    helm install ... --post-renderer "$(which python)" --post-renderer-args tests/e2e_k8s/helm_loopback.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

OVERLAY = Path(__file__).resolve().parents[2] / "manifests" / "overlays" / "e2e-loopback" / "kustomization.yaml"


def main() -> int:
    rendered = sys.stdin.read()
    patches = yaml.safe_load(OVERLAY.read_text())["patches"]
    with tempfile.TemporaryDirectory(prefix="wva-helm-loopback-") as work:
        Path(work, "release.yaml").write_text(rendered)
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": ["release.yaml"],
            "patches": patches,
        }
        Path(work, "kustomization.yaml").write_text(json.dumps(kustomization))
        kubectl = os.environ.get("WVA_E2E_KUBECTL", "kubectl")
        result = subprocess.run([kubectl, "kustomize", work], capture_output=True, text=True, check=False)
    sys.stderr.write(result.stderr)
    sys.stdout.write(result.stdout)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
