"""The GIL handed over after 1 ms instead of CPython's 5 while a cycle decides (`FinelySharedGil`), so that the event
loop answers meanwhile. Re-entrant across threads, as `GcPause` is.

Why: the decide runs in a worker thread (`loop._DECIDER`) and holds the GIL for seconds at fleet scale (issue 22:
1.5 s for the shipped default learning α, β, γ at 1,000 VAs). Everything a request or a wake does on the event loop
meanwhile comes back from a socket or a timer and waits for the GIL, and CPython makes the holder let go only after
the switch interval. A wake from zero (EPP scrape, `engine.wake`, the KEDA stream's push) waits so many times that
its median went from 65 ms with the loop idle to ~205 ms while a cycle decides at 5 ms, and to ~105 ms at 1 ms.

`python -m tests.bench_wake --decide-s 1.5` (100 wakes, cycles back to back; docs/benchmarks/scale.md, item 26),
the interval fixed for the whole process, 5 ms against 1 ms, alternately: median 209 / 201 ms against
**106 / 104 ms**, p99 365 / 749 ms against **173 / 170 ms** (the goal: < 300 ms); 2 ms gave 135 / 216 ms, 0.5 ms
87 / 153 ms. A decide loses nothing measurable (the GIL changes hands only when another thread asks for it). With
the interval at 1 ms only while deciding, as here: median 110 / 104 ms, p99 176 / 167 ms.

Only while deciding: the collect runs four query threads and a digester beside the loop, and there a 1-ms interval
costs. One process, 10,000 VAs, the interval alternated cycle by cycle (8 cycles each): collect median 2.35 s at
5 ms against **2.68 s** at 1 ms (+14 %, CPU +15 %; 7 pairs of 8 slower), decide 1.05 / 1.06 s.

Process-wide, as the interval is: the first decide under way sets it, the last one to end puts back what it found
(a process may run more than one reconciler, as the tests do).
"""

from __future__ import annotations

import sys
import threading

__all__ = ["DECIDING_SWITCH_INTERVAL_S", "FinelySharedGil"]

DECIDING_SWITCH_INTERVAL_S = 0.001
"""How long a thread may hold the GIL while another waits for it, while a cycle decides (CPython's default: 5 ms)."""


class FinelySharedGil:
    """`with FinelySharedGil(): ...` — the interpreter's switch interval at `interval_s` inside; what it was when the
    first of the overlapping uses entered is put back when the last one leaves (module docstring)."""

    _lock = threading.Lock()
    _depth = 0
    _found_s = 0.0

    def __init__(self, interval_s: float = DECIDING_SWITCH_INTERVAL_S) -> None:
        if not 0 < interval_s <= 0.1:
            raise ValueError(f"interval_s: {interval_s!r} is not in (0, 0.1] s")
        self._interval_s = interval_s

    def __enter__(self) -> None:
        with FinelySharedGil._lock:
            if FinelySharedGil._depth == 0:
                FinelySharedGil._found_s = sys.getswitchinterval()
            FinelySharedGil._depth += 1
            sys.setswitchinterval(self._interval_s)

    def __exit__(self, *exc: object) -> None:
        with FinelySharedGil._lock:
            FinelySharedGil._depth -= 1
            if FinelySharedGil._depth == 0:
                sys.setswitchinterval(FinelySharedGil._found_s)
