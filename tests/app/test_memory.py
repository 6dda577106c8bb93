"""`share_malloc_arenas`: after it, four threads that allocate at once share glibc's arenas (two in all), where
glibc's default gives each its own (five with the main thread's).

Each case runs in a fresh interpreter: the setting is process-wide, and arenas once made are never removed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from adapter.app.memory import MALLOC_ARENAS, share_malloc_arenas

_PROBE = """
import ctypes, sys, threading
from adapter.app.memory import share_malloc_arenas
if sys.argv[1] == "tuned":
    assert share_malloc_arenas() is None
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
        share_malloc_arenas(arenas)
