"""Hand large buffers back to the OS when they are freed: glibc's mmap threshold, fixed at `MMAP_THRESHOLD_BYTES`.

Why: a cycle at fleet scale reads one Prometheus answer after another into `bytes` of 8–18 MB each (issue 22:
sixteen answers a cycle at 10,000 VAs, up to four in flight) and frees each once it is digested. glibc serves a
request above its mmap threshold with its own mapping, which `free` unmaps at once; but the threshold is dynamic:
freeing a mapped block of 13 MB raises it to 13 MB, so from the second answer on every body is carved out of a
malloc arena instead. The arenas (one per worker thread) then keep the freed bodies' pages, and the freed space
is fragmented by the small objects decoded meanwhile, so the process' RSS stays ~90 MB above what it uses.

Setting the threshold explicitly turns the dynamic adjustment off (mallopt(3)): every block of 1 MiB or more is
mapped and unmapped on its own. `python -m tests.bench_collect --runs 1 --scales 10000 --metrics all --cycles 15`
(docs/benchmarks/scale.md, item 22): peak RSS 467 → 375 MB, flat from the first cycle (325–343 MB), against
404 → 467 MB rising over the same cycles with glibc's default; collect time within the run-to-run spread. The
cost is a page fault per 4 KiB of each large buffer (~3,300 for a 13-MB body), which arena pages the process
had given back would cost too.

Process-wide, so only process entries call it (`wva-adapter serve`, and the benchmarks that measure it as
shipped). Where the C library is not glibc (musl has no mallopt; macOS), it does nothing and says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = ["MMAP_THRESHOLD_BYTES", "map_large_buffers"]

log = logging.getLogger(__name__)

MMAP_THRESHOLD_BYTES = 1 << 20
"""Blocks of this size or more get a mapping of their own. Below it: everything a decide makes (a 100,000-pod
float column is 800 KB), which the arenas reuse from cycle to cycle."""
_M_MMAP_THRESHOLD = -3
"""glibc's `mallopt` parameter number (malloc.h)."""


def map_large_buffers(threshold_bytes: int = MMAP_THRESHOLD_BYTES) -> str | None:
    """Fix glibc's mmap threshold at `threshold_bytes` (module docstring). None when done; otherwise why not (no
    glibc `mallopt` in this process, or glibc refused the value: it takes at most 32 MiB on 64-bit hosts)."""
    if not 0 < threshold_bytes <= 32 << 20:
        raise ValueError(f"threshold_bytes: {threshold_bytes!r} is not in (0, 33554432] (glibc's HEAP_MAX / 2)")
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018  # glibc only: musl's mallopt is a stub that does nothing
    except (OSError, AttributeError) as e:
        return f"not glibc ({e})"
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    if mallopt(_M_MMAP_THRESHOLD, threshold_bytes) != 1:
        return f"glibc refused M_MMAP_THRESHOLD={threshold_bytes}"
    log.debug("glibc mmap threshold fixed at %d bytes", threshold_bytes)
    return None
