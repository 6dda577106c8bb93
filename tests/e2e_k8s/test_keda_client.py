"""KEDA's own client code against our gRPC external scaler.

tests/e2e_k8s/kedaclient is a Go program built (`go build`, Go module proxy, cache outside the repository, see
hack/build-kedaclient.sh) from KEDA's published `github.com/kedacore/keda/v2/pkg/scalers/externalscaler`
package; it calls GetMetricSpec, GetMetrics, IsActive and StreamIsActive the way KEDA's operator does (see
main.go). The trigger metadata comes from the shipped ScaledObject (manifests/examples/keda), with the
scaler address and namespace changed to this test's. A build failure fails the test; it never skips.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from .cluster import CHEAP, DEAR, EXAMPLES, until
from .conftest import Env
from .controlplane import REPO

pytestmark = pytest.mark.e2e_k8s

BUILD = REPO / "hack" / "build-kedaclient.sh"
SPEC = {
    "metricName": "wva_desired_replicas",
    "hpaMetricName": "s0-wva_desired_replicas",
    "targetSize": 1,
    "targetSizeFloat": 1,
}
"""GetMetricSpec: target 1 (AverageValue 1 per replica, so the HPA's replicas = the served desired count)."""


@pytest.fixture(scope="module")
def kedaclient() -> str:
    result = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=900, check=False)
    if result.returncode != 0:
        pytest.fail(
            f"building the KEDA client harness failed (exit {result.returncode}); it needs Go >= 1.26 and the Go "
            f"module proxy (`make e2e-bins` builds it too):\n{result.stderr[-3000:]}",
            pytrace=False,
        )
    return result.stdout.strip().splitlines()[-1]


def _trigger_metadata(variant: str) -> dict[str, str]:
    scaled_object = yaml.safe_load((EXAMPLES / "keda" / f"scaledobject-{variant}.yaml").read_text())
    [trigger] = scaled_object["spec"]["triggers"]
    assert trigger["type"] == "external"
    return {str(k): str(v) for k, v in trigger["metadata"].items()}


def _call(kedaclient: str, env: Env, grpc_port: int, name: str, metadata: dict[str, str]) -> dict[str, object]:
    meta = {k: v for k, v in metadata.items() if k != "scalerAddress"}
    argv = [
        kedaclient,
        f"-address=127.0.0.1:{grpc_port}",
        f"-name={name}",
        f"-namespace={env.namespace}",
        "-metadata=" + ",".join(f"{k}={v}" for k, v in meta.items()),
    ]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_kedas_externalscaler_client_against_our_grpc_server(env: Env, kedaclient: str) -> None:
    env.create_namespace(hpa=False)
    env.set_demand(2.7)  # saturated: the adapter asks for a second L4 replica
    env.wait_scraped(2)
    adapter = env.start_adapter("solo")
    # No HPA or KEDA acts here: L4 stays at 1 replica while 2 is wanted (the value KEDA would scale to).
    until(
        "L4 desired 2 in the VA status",
        lambda: env.decided(CHEAP, 2, "saturation-only mode: scale-up"),
        timeout_s=45,
    )
    for variant, want in ((CHEAP, 2.0), (DEAR, 1.0)):
        metadata = _trigger_metadata(variant)
        metadata["namespace"] = env.namespace
        got = _call(kedaclient, env, adapter.grpc_port, variant, metadata)
        print(f"[keda] ScaledObject {variant} metadata {metadata} -> {got}")
        assert got["errors"] == [], got
        assert got["metricSpecs"] == [SPEC], got
        assert got["metrics"] == [{"metricName": "wva_desired_replicas", "value": want}], got
        assert got["isActive"] is True, got
        assert (got["stream"], got["streamQuiet"]) == ([True], False), got

    # A ScaledObject named differently from its VA names it in the metadata; an unknown VA is an error KEDA logs.
    metadata = {"variantAutoscaling": CHEAP, "namespace": env.namespace}
    got = _call(kedaclient, env, adapter.grpc_port, "some-other-name", metadata)
    print(f"[keda] ScaledObject some-other-name with variantAutoscaling={CHEAP} -> metrics {got['metrics']}")
    assert got["metrics"] == [{"metricName": "wva_desired_replicas", "value": 2.0}], got
    got = _call(kedaclient, env, adapter.grpc_port, "no-such-va", {})
    print(f"[keda] ScaledObject no-such-va -> {got}")
    assert got["metricSpecs"] == [SPEC], got  # the spec does not depend on a decision
    assert [e.split(": VariantAutoscaling ")[0] for e in got["errors"]] == [
        "GetMetrics: NotFound",
        "IsActive: NotFound",
    ]
    assert all("no-such-va has no decision" in e for e in got["errors"]), got
    assert (got["stream"], got["streamQuiet"]) == ([], True), got  # nothing to push until a decision exists
    adapter.assert_running()
