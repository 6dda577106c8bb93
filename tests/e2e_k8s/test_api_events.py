"""The Event recorder against the real kube-apiserver: what we write is a valid `events.k8s.io/v1` Event (the API
validates reportingController, eventTime, note, series), a repeat becomes a series by a merge PATCH, a series
whose Event was deleted is created again, and `kubectl describe` shows them on the VA. The requests are read
from the audit log. Series timing, rate limits and the queue run on virtual clocks in tests/k8s/test_events.py.
"""

from __future__ import annotations

import pytest

from adapter.k8s import resources as r
from adapter.k8s.client import KubeClient
from adapter.k8s.events import EventRecorder, KubeEventSink, ObjectRef
from adapter.k8s.resources import EVENTS
from tests.k8s import builders as b

from .apiworld import ApiWorld

pytestmark = pytest.mark.e2e_k8s


def _va(api_world: ApiWorld) -> ObjectRef:
    va = api_world.put(r.VARIANT_AUTOSCALINGS, b.va("llama-8b-l4", namespace=api_world.namespace))
    meta = va["metadata"]
    return ObjectRef(va["apiVersion"], va["kind"], meta["namespace"], meta["name"], meta["uid"])


async def test_events_series_and_describe(api_world: ApiWorld, client: KubeClient) -> None:
    regarding = _va(api_world)
    clock = {"wall": 1_767_225_600.0, "mono": 0.0}
    recorder = EventRecorder(KubeEventSink(client), instance="wva-adapter-e2e", clock=lambda: clock["wall"],
                             monotonic=lambda: clock["mono"])  # fmt: skip
    note = "desired replicas 1 → 2: saturation-only mode: scale-up (both KV spare (0.000 < 0.100))"
    api_world.mark()
    recorder.record(regarding, type="Normal", reason="DesiredReplicasIncreased", note=note)
    recorder.record(regarding, type="Warning", reason="LimitedByGpus", note="limited: 8 GPUs")
    await recorder.flush()
    clock["wall"] += 30
    clock["mono"] += 30
    recorder.record(regarding, type="Normal", reason="DesiredReplicasIncreased", note=note)
    await recorder.flush()
    assert (recorder.stats.created, recorder.stats.series_patches, recorder.stats.failed) == (2, 1, 0)
    sent = [(r.verb, r.code, r.resource) for r in api_world.requests()]
    assert sent == [("create", 201, "events"), ("create", 201, "events"), ("patch", 200, "events")]

    stored = await client.list(EVENTS, namespace=api_world.namespace)
    by_reason = {e["reason"]: e for e in stored.items}
    increased = by_reason["DesiredReplicasIncreased"]
    assert increased["series"]["count"] == 2
    assert increased["series"]["lastObservedTime"] == "2026-01-01T00:00:30.000000Z"
    assert increased["regarding"]["uid"] == regarding.uid
    assert increased["reportingController"] == "llm-d.ai/wva-adapter"
    assert by_reason["LimitedByGpus"]["type"] == "Warning"

    described = api_world.kube.kubectl("describe", "va", "llama-8b-l4", "-n", api_world.namespace).stdout
    events = described[described.index("Events:") :]
    assert "DesiredReplicasIncreased" in events
    assert "(x2 over" in events, events
    assert "LimitedByGpus" in events

    # The Event expired (deleted here): the next series write creates it again, with its count.
    api_world.delete(EVENTS, increased["metadata"]["name"], namespace=api_world.namespace)
    clock["wall"] += 30
    clock["mono"] += 30
    recorder.record(regarding, type="Normal", reason="DesiredReplicasIncreased", note=note)  # counted, not written
    await recorder.flush()
    clock["mono"] += 360  # 6 min without a repeat: the series ends and its final count is written
    recorder.sweep()
    await recorder.flush()
    stored = await client.list(EVENTS, namespace=api_world.namespace)
    again = [e for e in stored.items if e["reason"] == "DesiredReplicasIncreased"]
    assert [e["series"]["count"] for e in again] == [3]
