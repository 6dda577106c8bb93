"""Two malloc arenas for the whole process (glibc's M_ARENA_MAX): the memory a worker thread frees is reused by
the others instead of staying in an arena of its own.

Why: a cycle at fleet scale reads one Prometheus answer after another into `bytes` of 8–18 MB each (issue 22:
sixteen answers a cycle at 10,000 VAs), in four query threads, and the digester thread decodes and frees them;
the decider thread builds the cycle's values. glibc gives each thread that contends for the allocator an arena of
its own (up to 8 a core), and memory freed into an arena stays there for that arena's next requests. So every
query thread's arena keeps the pages of the bodies it read, fragmented by the small objects decoded meanwhile,
and the process' RSS settles ~100 MB above what it uses.

`python -m tests.bench_collect --runs 3 --scales 10000 --metrics all --cycles 12`, glibc's defaults against this
(docs/benchmarks/scale.md, item 22; two pairs of runs, the machine's spread ±20 %): peak RSS 506 / 519 MB against
**473 / 458 MB**, the RSS at the last cycles 481–519 against 395–431 MB; collect 3.64 / 4.44 s against 3.76 /
2.99 s. Fixing the mmap threshold instead (every block of 1 MiB or more mapped on its own, unmapped when freed)
kept RSS lower still (449 MB) but cost 0.8 s a cycle in page faults; one arena serialised the threads (4.56 s).

Process-wide and only effective before the threads start, so only process entries call it (`wva-adapter serve`,
and the benchmarks that measure the cycle as shipped). Where the C library is not glibc (musl, macOS) it does
nothing and says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = ["MALLOC_ARENAS", "share_malloc_arenas"]

log = logging.getLogger(__name__)

MALLOC_ARENAS = 2
"""The main thread's arena and one that the worker threads share."""
_M_ARENA_MAX = -8
"""glibc's `mallopt` parameter number (malloc.h)."""


def share_malloc_arenas(arenas: int = MALLOC_ARENAS) -> str | None:
    """Cap glibc's malloc arenas at `arenas` (module docstring). None when done; otherwise why not (no glibc in
    this process, or glibc refused the value)."""
    if not 1 <= arenas <= 1024:
        raise ValueError(f"arenas: {arenas!r} is not in [1, 1024]")
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018  # glibc only: musl's mallopt is a stub that does nothing
    except (OSError, AttributeError) as e:
        return f"not glibc ({e})"
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    if mallopt(_M_ARENA_MAX, arenas) != 1:
        return f"glibc refused M_ARENA_MAX={arenas}"
    log.debug("glibc malloc arenas capped at %d", arenas)
    return None
