"""Follow one ConfigMap: list-and-watch it by name and report every change of its `data`.

Used for `kube-system/extension-apiserver-authentication` (front-proxy CA rotation, `adapter.k8s.authz`) and
for `wva-variantautoscaling-config` (live settings, `adapter.app.live`). The watch is a `Reflector`, so it
resumes, relists and backs off like every other watch of the adapter.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from adapter.k8s.client import KubeClient
from adapter.k8s.objects import ConfigMapRecord, project_configmap
from adapter.k8s.reflector import Reflector, ReflectorOptions
from adapter.k8s.resources import CONFIGMAPS

__all__ = ["watch_configmap"]

log = logging.getLogger(__name__)


async def watch_configmap(
    client: KubeClient,
    namespace: str,
    name: str,
    on_change: Callable[[ConfigMapRecord | None], None],
    *,
    options: ReflectorOptions | None = None,
) -> None:
    """Run until cancelled: call `on_change(record)` when the ConfigMap appears or its data changes, and
    `on_change(None)` when it is deleted. Not called while it is absent from the start, nor for changes that
    leave `data` as it was (labels, annotations). An exception from `on_change` is logged; the watch goes on."""
    delivered: list[Mapping[str, str] | None] = []

    def changed(reflector: Reflector[ConfigMapRecord]) -> None:
        record = reflector.store.get((namespace, name))
        data = record.data if record is not None else None
        if delivered and delivered[0] == data:
            return
        delivered[:] = [data]
        try:
            on_change(record)
        except Exception:
            log.exception("applying ConfigMap %s/%s failed", namespace, name)

    reflector: Reflector[ConfigMapRecord] = Reflector(
        client,
        CONFIGMAPS,
        project=project_configmap,
        on_change=changed,
        namespace=namespace,
        field_selector=f"metadata.name={name}",
        options=options,
    )
    await reflector.run()
