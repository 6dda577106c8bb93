"""`tune_malloc`: after it, four threads that allocate at once share glibc's arenas (two in all), where glibc's
default gives each its own (five with the main thread's); and a 9-MiB block is mapped on its own even after a
larger mapped block was freed, where glibc's default has raised its threshold above it by then.

Each case runs in a fresh interpreter: the setting is process-wide, and arenas once made are never removed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from adapter.app.memory import MALLOC_ARENAS, tune_malloc

_PROBE = """
import ctypes, sys, threading
from adapter.app.memory import tune_malloc
if sys.argv[1] == "tuned":
    assert tune_malloc() is None
kept = []
start = threading.Barrier(5)
def allocate():
    start.wait()  # the four threads allocate at once (each one's state is malloc'd too)
    for _ in range(1000):
        kept.append(bytearray(200))
threads = [threading.Thread(target=allocate) for _ in range(4)]
for t in threads:
    t.start()
start.wait()
for t in threads:
    t.join()
ctypes.CDLL(None).malloc_stats()  # one "Arena N:" block per arena, on stderr
"""


def _arenas(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True, timeout=60)
    return sum(line.startswith("Arena ") for line in done.stderr.splitlines())


@pytest.mark.parametrize(("mode", "arenas"), [("tuned", MALLOC_ARENAS), ("default", 5)], ids=["tuned", "default"])
def test_threads_share_the_arenas_only_when_tuned(mode: str, arenas: int) -> None:
    assert _arenas(mode) == arenas


@pytest.mark.parametrize("arenas", [0, -1, 1025], ids=["zero", "negative", "above-1024"])
def test_an_arena_count_out_of_range_is_named(arenas: int) -> None:
    with pytest.raises(ValueError, match=rf"arenas: {arenas} is not in \[1, 1024\]"):
        tune_malloc(arenas)


_MMAP_PROBE = """
import ctypes, sys
from adapter.app.memory import tune_malloc
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "tuned":
    assert tune_malloc() is None
big = bytes(16 * 2**20)
del big  # a mapped block freed: glibc's default now takes 16 MiB as its threshold
before = libc.mallinfo2().hblks
body = bytes(9 * 2**20)  # an answer's body
print(libc.mallinfo2().hblks - before)
"""


@pytest.mark.parametrize(("mode", "mapped"), [("tuned", 1), ("default", 0)], ids=["tuned", "default"])
def test_a_body_is_mapped_on_its_own_only_when_tuned(mode: str, mapped: int) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _MMAP_PROBE, mode], capture_output=True, text=True, check=True, timeout=60
    )
    assert int(done.stdout) == mapped


@pytest.mark.parametrize("threshold", [0, -1, 32 * 2**20 + 1], ids=["zero", "negative", "above-32-mib"])
def test_an_mmap_threshold_out_of_range_is_named(threshold: int) -> None:
    with pytest.raises(ValueError, match=r"mmap_threshold_bytes: .* is not in \(0, 32 MiB\]"):
        tune_malloc(mmap_threshold_bytes=threshold)
