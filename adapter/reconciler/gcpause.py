"""Pause CPython's cyclic garbage collector around the cycle's bulk work; re-entrant across threads.

Why: a cycle at fleet scale makes millions of container objects that all survive until the cycle ends (the
decoded Prometheus answers while they are digested; the snapshot, the analyses and the decisions while
`engine.decide` runs). The generational collector then runs its young collections again and again over the same
survivors, and a full collection every time the survivors grow by a quarter of the heap: a full collection
traverses the whole heap, so its cost grows with the fleet and the number of them with the fleet too — the
superlinear part of a cycle. tests/bench_collect.py at 10,000 VAs (issue 22): `engine.decide` 1.92 s CPU with
the collector on, 1.31 s with it paused; 1,000 → 10,000 VAs 16.3× on, 11.4× paused.

Why it is safe: nothing made inside the pause is cyclic garbage that must go at once (JSON and the engine's
frozen values hold no reference cycles), and the pause is bounded by the work it covers (a cycle's queries are
bounded by their timeout; a decide by the fleet). The first entrant disables the collector only if it was
enabled; the last one out restores it.

Why the survivors are frozen: what survives the work (the snapshot; the decisions and the engine state) lives
one cycle and dies by its reference count when the next cycle replaces it. Left to the collector, it is
traversed by the young collection that follows the pause and again by the middle generation's: with the shipped
default at 10,000 VAs ~20 µs a VA and cycle, a tenth of its decide, held in the GIL while the servers wait.
Frozen (`gc.freeze`), it is never traversed; a frozen object is still freed when its count falls to zero. What
a freeze may hold back is cyclic garbage that happened to be young at that moment (the cycle's own work makes
none; the event loop's thread keeps serving during the pause): the last pause to end collects the whole heap,
frozen generation included, every `RECLAIM_EVERY_S` before it freezes, so such garbage lives at most that long.
docs/benchmarks/scale.md, item 33, has the figures.
"""

from __future__ import annotations

import gc
import math
import threading
import time
from collections.abc import Callable

__all__ = ["RECLAIM_EVERY_S", "GcPause"]

RECLAIM_EVERY_S = 300.0
"""How often the last pause to end collects the whole heap, frozen generation included (`GcPause`): the cyclic
garbage the pauses froze lives at most this long. At 10,000 VAs such a collection takes ~0.3–0.7 s of CPU, once
every ten 30-s cycles (docs/benchmarks/scale.md, item 33)."""


class GcPause:
    """`with GcPause(): ...` — the collector is off inside, in every thread, and back as it was after. The last
    one out freezes what survived the work (`gc.freeze`), and every `RECLAIM_EVERY_S` collects the whole heap
    first (module docstring)."""

    _lock = threading.RLock()
    """Re-entrant: the full collection runs finalizers, and one may enter a pause in this thread."""
    _depth = 0
    _was_enabled = False
    _reclaimed_s = -math.inf
    clock: Callable[[], float] = time.monotonic
    """Seconds, for `RECLAIM_EVERY_S` (a test's to set)."""

    def __enter__(self) -> None:
        with GcPause._lock:
            if GcPause._depth == 0:
                GcPause._was_enabled = gc.isenabled()
                gc.disable()
            GcPause._depth += 1

    def __exit__(self, *exc: object) -> None:
        with GcPause._lock:
            GcPause._depth -= 1
            if GcPause._depth == 0 and GcPause._was_enabled:
                now_s = GcPause.clock()
                if now_s - GcPause._reclaimed_s >= RECLAIM_EVERY_S:
                    gc.unfreeze()
                    gc.collect()
                    GcPause._reclaimed_s = now_s
                gc.freeze()
                gc.enable()
