#!/usr/bin/env bash
# Builds tests/e2e_k8s/kedaclient (a KEDA external-scaler client made of KEDA's published
# github.com/kedacore/keda/v2/pkg/scalers/externalscaler package) with `go build` from the Go module proxy,
# into the e2e cache outside the repository, keyed by the hash of its sources. Prints the binary's path.
# Skipped when that binary exists. Cold: ~1 min on 2 cores (grpc + protobuf); go.sum pins every module.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../tests/e2e_k8s/kedaclient" && pwd)
CACHE=${KUBE_E2E_CACHE:-$HOME/.cache/kube-e2e}
HASH=$(cat "$SRC/go.mod" "$SRC/go.sum" "$SRC"/*.go | sha256sum | cut -c1-16)
OUT=$CACHE/kedaclient-$HASH/kedaclient
if [[ -x $OUT ]]; then
  echo "$OUT"
  exit 0
fi
command -v go >/dev/null || { echo "kedaclient: needs a Go toolchain (>= 1.26, KEDA v2.20's go line) on PATH" >&2; exit 2; }
mkdir -p "$(dirname "$OUT")"
cd "$SRC"
GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w" -o "$OUT.tmp" . >&2
mv "$OUT.tmp" "$OUT"
echo "$OUT"
