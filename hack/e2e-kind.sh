#!/usr/bin/env bash
# `make e2e-kind`: the tests/e2e_k8s scenarios against a kind cluster instead of the local processes.
# Needs docker and kind on PATH (not on the CI machines, whose e2e runs the local control plane).
#
# What differs from the local control plane, and how it is bridged:
# - kube-controller-manager is kind's: --horizontal-pod-autoscaler-sync-period=1s is set through a kubeadm
#   patch (the scenarios' timeouts assume 1 s HPA syncs); the tolerance stays the default 0.1.
# - the aggregator runs inside the node container, so 127.0.0.1 is not the host: the ExternalName Service gets
#   the host's address on the kind network ($WVA_E2E_ADAPTER_HOST, the network's gateway) and the tests'
#   loopback Service listens there. The adapters still run on the host with the ServiceAccount's token.
# - the node's CA key and front-proxy client certificate are copied out ($WVA_E2E_PKI_DIR) so the tests can
#   sign their users (mallory, carol) and speak to the adapter as the aggregator does.
# - kind has a scheduler and a kubelet, but the example Deployments request nvidia.com/gpu, so their pods stay
#   unscheduled and the tests' emulated kubelet reports them Running/Ready exactly as on the local plane.
# The cluster is deleted afterwards unless KEEP_KIND=1.
set -euo pipefail
cd "$(dirname "$0")/.."
CLUSTER=${KIND_CLUSTER:-wva-e2e}
K8S_VERSION=${K8S_VERSION:-$(sed -n 's/^K8S_VERSION=\${K8S_VERSION:-\(v[0-9.]*\)}/\1/p' hack/build-k8s-bins.sh)}
NODE_IMAGE=${KIND_NODE_IMAGE:-kindest/node:$K8S_VERSION}
for tool in docker kind; do
  command -v "$tool" >/dev/null || { echo "e2e-kind: $tool is not on PATH" >&2; exit 2; }
done
WORK=$(mktemp -d "${TMPDIR:-/tmp}/wva-e2e-kind.XXXXXX")
mkdir -p "$WORK/pki"
cat >"$WORK/kind.yaml" <<KIND
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
name: $CLUSTER
nodes:
  - role: control-plane
    kubeadmConfigPatches:
      - |
        apiVersion: kubeadm.k8s.io/v1beta4
        kind: ClusterConfiguration
        controllerManager:
          extraArgs:
            - name: horizontal-pod-autoscaler-sync-period
              value: 1s
KIND
kind create cluster --config "$WORK/kind.yaml" --image "$NODE_IMAGE" --wait 120s
if [[ ${KEEP_KIND:-0} != 1 ]]; then
  trap 'kind delete cluster --name "$CLUSTER"' EXIT
fi
kind get kubeconfig --name "$CLUSTER" >"$WORK/admin.kubeconfig"
for file in ca.crt ca.key front-proxy-ca.crt front-proxy-client.crt front-proxy-client.key; do
  docker cp "$CLUSTER-control-plane:/etc/kubernetes/pki/$file" "$WORK/pki/$file"
done
GATEWAY=$(docker network inspect kind -f '{{range .IPAM.Config}}{{if .Gateway}}{{.Gateway}} {{end}}{{end}}' | tr ' ' '\n' |
  grep -E '^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$' | head -1)
echo "e2e-kind: cluster $CLUSTER ($NODE_IMAGE), adapters reachable from the node at $GATEWAY"
WVA_E2E_KUBECONFIG=$WORK/admin.kubeconfig WVA_E2E_PKI_DIR=$WORK/pki WVA_E2E_ADAPTER_HOST=$GATEWAY \
  .venv/bin/pytest -q -s -m e2e_k8s tests/e2e_k8s "$@"
