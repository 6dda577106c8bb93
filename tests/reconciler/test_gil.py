"""`FinelySharedGil`: the switch interval at 1 ms while a cycle decides, and what it was before put back after,
also when decides overlap or fail. What it buys, a wake's latency while a cycle decides, is measured by
`python -m tests.bench_wake --decide-s 1.5` (docs/benchmarks/scale.md, item 26), not here."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

import adapter.reconciler.loop as loop
from adapter.reconciler import gil
from tests.reconciler.test_loop import FakeMetrics, busy_collection, busy_view, make

FOUND_S = 0.004
"""Not CPython's default, so that "put back" cannot pass by falling back to the default."""


@pytest.fixture(autouse=True)
def _interval_put_back() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(FOUND_S)
    yield
    sys.setswitchinterval(before)


def test_1_ms_inside_and_what_was_found_after() -> None:
    with gil.FinelySharedGil():
        assert sys.getswitchinterval() == pytest.approx(gil.DECIDING_SWITCH_INTERVAL_S)
    assert gil.DECIDING_SWITCH_INTERVAL_S == 0.001
    assert sys.getswitchinterval() == pytest.approx(FOUND_S)


def test_overlapping_uses_put_back_what_the_first_found_when_the_last_leaves() -> None:
    first, second = gil.FinelySharedGil(), gil.FinelySharedGil()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the second decide still runs
    assert sys.getswitchinterval() == pytest.approx(gil.DECIDING_SWITCH_INTERVAL_S)
    second.__exit__(None, None, None)
    assert sys.getswitchinterval() == pytest.approx(FOUND_S)


def test_a_failure_inside_puts_it_back() -> None:
    with pytest.raises(RuntimeError, match="a bug in the engine"), gil.FinelySharedGil():
        raise RuntimeError("a bug in the engine")
    assert sys.getswitchinterval() == pytest.approx(FOUND_S)


@pytest.mark.parametrize("interval_s", [0.0, -0.001, 0.2], ids=["zero", "negative", "above-100-ms"])
def test_an_interval_out_of_range_is_named_and_changes_nothing(interval_s: float) -> None:
    with pytest.raises(ValueError, match=rf"interval_s: {interval_s} is not in \(0, 0.1\] s"):
        gil.FinelySharedGil(interval_s)
    assert sys.getswitchinterval() == pytest.approx(FOUND_S)


async def test_the_reconciler_decides_with_it_and_collects_without(monkeypatch: pytest.MonkeyPatch) -> None:
    seen_s: dict[str, float] = {}
    real_decide = loop.engine.decide

    def decide(*args: object) -> object:  # the engine's decide, inside the reconciler's `decide_cycle`
        seen_s["decide"] = sys.getswitchinterval()
        return real_decide(*args)  # type: ignore[arg-type]

    class Metrics(FakeMetrics):
        async def collect(self, *args: object) -> object:  # type: ignore[override]
            seen_s["collect"] = sys.getswitchinterval()
            return await super().collect(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(loop.engine, "decide", decide)
    rec, store, _ = make(busy_view(), metrics=Metrics(busy_collection(0.5)))
    assert await rec.run_cycle() is not None
    assert len(store.list()) == 2
    assert seen_s == {"collect": pytest.approx(FOUND_S), "decide": pytest.approx(gil.DECIDING_SWITCH_INTERVAL_S)}
    assert sys.getswitchinterval() == pytest.approx(FOUND_S)
