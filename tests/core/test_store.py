"""DecisionStore: the latest decision per VA, versioned; listeners hear which keys changed."""

from __future__ import annotations

import pytest

from adapter.domain.decision import AnalyzerName, VariantDecision
from adapter.domain.ids import VariantKey
from adapter.domain.snapshot import DecisionPath
from adapter.store import DecisionStore

from .builders import T0, key


def decision(name: str, desired: int, current: int = 2, *, ns: str = "llm", reason: str = "r") -> VariantDecision:
    return VariantDecision(
        key=VariantKey(ns, name),
        model_id="llama-70b",
        desired_replicas=desired,
        current_replicas=current,
        reason=reason,
        path=DecisionPath.OPTIMIZER,
        analyzer=AnalyzerName.SATURATION_PERCENTAGE,
        accelerator="L4",
    )


def by_key(*decisions: VariantDecision) -> dict[VariantKey, VariantDecision]:
    return {d.key: d for d in decisions}


@pytest.fixture
def store_and_events():
    store = DecisionStore()
    events: list[frozenset[VariantKey]] = []
    store.subscribe(events.append)
    return store, events


def test_the_first_publish_adds_every_decision_bumps_the_version_and_announces_every_key(store_and_events):
    store, events = store_and_events
    changed = store.publish(by_key(decision("a", 3), decision("b", 1)), now_s=T0)
    assert changed == {key("a"), key("b")}
    assert events == [frozenset({key("a"), key("b")})]
    assert store.version > 0
    assert store.get(key("a")).desired_replicas == 3
    assert [d.key for d in store.list()] == [key("a"), key("b")]


def test_publishing_the_same_values_keeps_the_version_and_stays_silent_but_refreshes_the_evidence(store_and_events):
    store, events = store_and_events
    store.publish(by_key(decision("a", 3)), now_s=T0)
    version = store.version
    changed = store.publish(by_key(decision("a", 3, reason="newer words")), now_s=T0 + 30)
    assert changed == frozenset()
    assert store.version == version
    assert len(events) == 1
    stored = store.get(key("a"))
    assert stored.decision.reason == "newer words"
    assert stored.decided_at_s == T0 + 30
    assert stored.changed_at_s == T0


def test_a_changed_value_bumps_the_version_and_announces_only_that_key(store_and_events):
    store, events = store_and_events
    store.publish(by_key(decision("a", 3), decision("b", 1)), now_s=T0)
    version = store.version
    changed = store.publish(by_key(decision("a", 4), decision("b", 1)), now_s=T0 + 30)
    assert changed == {key("a")}
    assert events[-1] == frozenset({key("a")})
    assert store.version > version
    assert store.get(key("a")).version == store.version
    assert store.get(key("a")).changed_at_s == T0 + 30
    assert store.get(key("b")).changed_at_s == T0


def test_a_changed_current_count_is_a_change_but_keeps_the_desired_change_time(store_and_events):
    store, _ = store_and_events
    store.publish(by_key(decision("a", 3, current=2)), now_s=T0)
    version = store.version
    assert store.publish(by_key(decision("a", 3, current=3)), now_s=T0 + 30) == {key("a")}
    assert store.version > version
    assert store.get(key("a")).changed_at_s == T0


def test_publish_replaces_the_whole_set_so_a_deleted_va_is_no_longer_served(store_and_events):
    store, events = store_and_events
    store.publish(by_key(decision("a", 3), decision("b", 1)), now_s=T0)
    version = store.version
    changed = store.publish(by_key(decision("a", 3)), now_s=T0 + 30)
    assert changed == {key("b")}
    assert store.get(key("b")) is None
    assert [d.key for d in store.list()] == [key("a")]
    assert events[-1] == frozenset({key("b")})
    # The module's contract: "Every change bumps a store-wide `version`" — a removal is a change that readers
    # polling the version must see.
    assert store.version > version


def test_upsert_adds_or_replaces_some_decisions_and_leaves_the_others(store_and_events):
    store, events = store_and_events
    store.publish(by_key(decision("a", 3), decision("b", 1)), now_s=T0)
    changed = store.upsert([decision("b", 0), decision("c", 1)], now_s=T0 + 1)
    assert changed == {key("b"), key("c")}
    assert events[-1] == frozenset({key("b"), key("c")})
    assert {d.key.name: d.desired_replicas for d in store.list()} == {"a": 3, "b": 0, "c": 1}
    assert store.upsert([decision("a", 3)], now_s=T0 + 2) == frozenset()


def test_remove_drops_one_key_bumps_the_version_and_announces_it(store_and_events):
    store, events = store_and_events
    store.publish(by_key(decision("a", 3)), now_s=T0)
    version = store.version
    assert store.remove(key("a")) is True
    assert store.version > version
    assert events[-1] == frozenset({key("a")})
    assert store.remove(key("a")) is False


def test_an_unsubscribed_listener_hears_nothing_more():
    store = DecisionStore()
    events: list[frozenset[VariantKey]] = []
    unsubscribe = store.subscribe(events.append)
    store.publish(by_key(decision("a", 1)), now_s=T0)
    unsubscribe()
    store.publish(by_key(decision("a", 2)), now_s=T0 + 1)
    assert len(events) == 1


def test_list_filters_by_namespace_and_sorts_by_key():
    store = DecisionStore()
    store.publish(
        by_key(decision("z", 1, ns="llm"), decision("a", 1, ns="other"), decision("b", 1, ns="llm")), now_s=T0
    )
    assert [str(d.key) for d in store.list("llm")] == ["llm/b", "llm/z"]
    assert [str(d.key) for d in store.list()] == ["llm/b", "llm/z", "other/a"]
