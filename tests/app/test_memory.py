"""`map_large_buffers`: after it, a large buffer freed and allocated again is mapped on its own (returned to the
OS when freed), where glibc's dynamic threshold would have put the second one in an arena.

Each case runs in a fresh interpreter: the setting is process-wide, and the dynamic threshold it turns off moves
with what the process freed before."""

from __future__ import annotations

import subprocess
import sys

import pytest

from adapter.app.memory import map_large_buffers

_PROBE = """
import ctypes, sys
from adapter.app.memory import map_large_buffers
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "tuned":
    assert map_large_buffers() is None
first = b"x" * (4 << 20)  # 4 MiB: mapped either way (glibc's threshold starts at 128 KiB)...
del first  # ... and freed: glibc's default raises its threshold to 4 MiB here
second = b"y" * (4 << 20)
print(libc.mallinfo2().hblkhd)  # bytes in blocks mapped on their own
"""


def _mapped_bytes(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True, timeout=60)
    return int(done.stdout.strip())


@pytest.mark.parametrize(("mode", "second_is_mapped"), [("tuned", True), ("default", False)], ids=["tuned", "default"])
def test_the_second_large_buffer_is_mapped_only_when_tuned(mode: str, second_is_mapped: bool) -> None:
    assert (_mapped_bytes(mode) >= 4 << 20) is second_is_mapped


@pytest.mark.parametrize("threshold_bytes", [0, -1, (32 << 20) + 1], ids=["zero", "negative", "above-32MiB"])
def test_a_threshold_glibc_would_refuse_is_named(threshold_bytes: int) -> None:
    with pytest.raises(ValueError, match=rf"threshold_bytes: {threshold_bytes} is not in \(0, 33554432\]"):
        map_large_buffers(threshold_bytes)
