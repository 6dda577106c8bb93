"""Read what the leader wrote into VA status, for `wva-adapter recommend` (cluster mode)."""

from __future__ import annotations

from adapter.config.va import status_from_dict
from adapter.domain.snapshot import Recommendation
from adapter.k8s.client import KubeClient
from adapter.k8s.resources import VARIANT_AUTOSCALINGS


async def read_recommendations(
    *, kubeconfig: str | None, namespace: str | None
) -> list[tuple[str, str, Recommendation | None, int | None]]:
    """(namespace/name, modelID, status.recommendation, status.desiredOptimizedAlloc.numReplicas) per VA."""
    client = await KubeClient.connect(kubeconfig=kubeconfig)
    try:
        listed = await client.list(VARIANT_AUTOSCALINGS, namespace=namespace)
    finally:
        await client.close()
    out = []
    for obj in listed.items:
        metadata = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        try:
            status = status_from_dict(obj.get("status") or {})
        except ValueError:
            status = None
        out.append(
            (
                f"{metadata.get('namespace', '')}/{metadata.get('name', '')}",
                str(spec.get("modelID", "")),
                status.recommendation if status else None,
                status.desired.num_replicas if status and status.desired else None,
            )
        )
    return sorted(out, key=lambda row: row[0])
