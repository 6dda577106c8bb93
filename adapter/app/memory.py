"""glibc's malloc tuned for the cycle (`tune_malloc`): two arenas for the whole process (M_ARENA_MAX), so that the
memory a worker thread frees is reused by the others instead of staying in an arena of its own; and every block of
8 MiB or more mapped on its own (M_MMAP_THRESHOLD), so that a Prometheus answer's body goes back to the system when
it is freed.

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

**The mmap threshold.** glibc maps a block above its threshold on its own, but raises the threshold to the size
of every mapped block freed (up to 32 MiB): after the first answer, the bodies (8–18 MB) came from the arenas,
where a freed body's pages stay unless they are at the top. Fixed at 8 MiB (which also stops that adjustment),
every body is mapped and unmapped. `python -m tests.bench_collect --runs 3 --scales 10000 --metrics all --cycles
12`, glibc's adjusting threshold against 8 MiB, two pairs (docs/benchmarks/scale.md, item 25): peak RSS 481 / 465
against **438 / 445 MB**, the RSS at the last cycles 461–481 / 417–451 against 399–416 / 399–416 MB; collect over
decide 1.64 / 1.82 against 1.83 / 1.81 (the page faults of a body mapped afresh: at most 10 %). Not lower: the
1-MiB threshold above mapped far more than the bodies.

Process-wide and only effective before the threads start, so only process entries call it (`wva-adapter serve`,
and the benchmarks that measure the cycle as shipped). Where the C library is not glibc (musl, macOS) it does
nothing and says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = ["MALLOC_ARENAS", "MMAP_THRESHOLD_BYTES", "tune_malloc"]

log = logging.getLogger(__name__)

MALLOC_ARENAS = 2
"""The main thread's arena and one that the worker threads share."""
MMAP_THRESHOLD_BYTES = 8 * 2**20
"""Blocks this large or larger are mapped on their own: a Prometheus answer's body at fleet scale, little else."""
_M_ARENA_MAX = -8
_M_MMAP_THRESHOLD = -3
"""glibc's `mallopt` parameter numbers (malloc.h)."""


def tune_malloc(arenas: int = MALLOC_ARENAS, mmap_threshold_bytes: int = MMAP_THRESHOLD_BYTES) -> str | None:
    """Cap glibc's malloc arenas at `arenas` and fix its mmap threshold at `mmap_threshold_bytes` (module docstring).
    None when done; otherwise why not (no glibc in this process, or glibc refused a value)."""
    if not 1 <= arenas <= 1024:
        raise ValueError(f"arenas: {arenas!r} is not in [1, 1024]")
    if not 0 < mmap_threshold_bytes <= 32 * 2**20:
        raise ValueError(f"mmap_threshold_bytes: {mmap_threshold_bytes!r} is not in (0, 32 MiB]")
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018  # glibc only: musl's mallopt is a stub that does nothing
    except (OSError, AttributeError) as e:
        return f"not glibc ({e})"
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    if mallopt(_M_ARENA_MAX, arenas) != 1:
        return f"glibc refused M_ARENA_MAX={arenas}"
    if mallopt(_M_MMAP_THRESHOLD, mmap_threshold_bytes) != 1:
        return f"glibc refused M_MMAP_THRESHOLD={mmap_threshold_bytes}"
    log.debug("glibc malloc: %d arenas, blocks from %d bytes mapped on their own", arenas, mmap_threshold_bytes)
    return None
