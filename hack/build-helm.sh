#!/usr/bin/env bash
# Builds the helm CLI from its published Go module (helm.sh/helm/v3) into the e2e cache, outside the repository,
# for the chart tests of `make e2e` (helm lint, helm template, helm install/upgrade/uninstall on the real
# kube-apiserver). Skipped when the binary is already there. Cold: ~2-3 min on 2 cores (modules + compile).
#
# helm v3's go.mod has no replace directives, so `go install module/cmd/helm@version` builds it as published.
# The ldflags are those of helm's own Makefile: the version it reports, and the Kubernetes version its
# `.Capabilities.KubeVersion` and lint deprecation rules assume offline (client-go v0.Y.Z -> 1.Y).
set -euo pipefail
HELM_VERSION=${HELM_VERSION:-v3.22.0}
CACHE=${KUBE_E2E_CACHE:-$HOME/.cache/kube-e2e}
BIN=$CACHE/helm-$HELM_VERSION/bin
if [[ -x $BIN/helm ]]; then
  echo "e2e-bins: helm cached in $BIN"
  exit 0
fi
command -v go >/dev/null || { echo "e2e-bins: needs a Go toolchain (>= 1.26) on PATH" >&2; exit 2; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
MODULE=helm.sh/helm/v3
GOMOD=$(go mod download -json "$MODULE@$HELM_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
if grep -q '^replace' "$GOMOD"; then
  echo "e2e-bins: $MODULE@$HELM_VERSION has replace directives; go install cannot build it as published" >&2
  exit 2
fi
CLIENT_GO=$(go mod edit -json "$GOMOD" | python3 -c '
import json, sys
print(next(r["Version"] for r in json.load(sys.stdin)["Require"] if r["Path"] == "k8s.io/client-go"))')
K8S_MINOR=$(cut -d. -f2 <<<"$CLIENT_GO")
LDF="-s -w -X $MODULE/internal/version.version=$HELM_VERSION -X $MODULE/internal/version.gitTreeState=clean"
for p in pkg/lint/rules pkg/chartutil; do
  LDF+=" -X $MODULE/$p.k8sVersionMajor=1 -X $MODULE/$p.k8sVersionMinor=$K8S_MINOR"
done
mkdir -p "$BIN"
GOBIN=$BIN go install -trimpath -ldflags "$LDF" "$MODULE/cmd/helm@$HELM_VERSION"
"$BIN/helm" version --short
