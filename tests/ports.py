"""Free 127.0.0.1 ports for tests that must name a port before the process that listens on it starts.

Why not `bind(0)`: the kernel hands out such a port from the *ephemeral* range
(`/proc/sys/net/ipv4/ip_local_port_range`, 32768–60999 by default), the same range it draws the local port of
every outgoing connection from. Between the test closing its probe socket and the child binding the port, any
client on the machine (the adapter's own connections to kube-apiserver, Prometheus scrapes, etcd's peers) can be
given that port as its local end, and the child's bind fails with EADDRINUSE. CI met exactly that: an adapter's
`--metrics-bind-address` port was taken 1 of ~600 times.

So ports come from below the ephemeral range, where the kernel never assigns a port on its own: only another
explicit `bind` can take one. Each is checked bindable, and none is handed out twice in a process (a test that
names several ports before starting anything must get distinct ones).
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import threading
from pathlib import Path

LOWEST_PORT = 20_000
"""Above the registered services a CI machine is likely to run (databases, web servers sit well below)."""
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()
_lock = threading.Lock()
_random = random.Random(os.getpid() ^ int.from_bytes(os.urandom(8), "big"))


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for automatically chosen local ports (Linux default when unreadable)."""
    with contextlib.suppress(OSError, ValueError):
        low, high = (int(part) for part in _RANGE_FILE.read_text().split())
        return low, high
    return 32_768, 60_999


def _candidates() -> range:
    low, high = ephemeral_range()
    if low - LOWEST_PORT >= 1_000:
        return range(LOWEST_PORT, low)
    return range(high + 1, 65_536)  # an unusual range starting low: use what lies above it


def free_port() -> int:
    """A port on 127.0.0.1 that nobody listens on now, outside the ephemeral range, not handed out before."""
    candidates = _candidates()
    with _lock:
        for _ in range(1_000):
            port = _random.choice(candidates)
            if port in _handed_out:
                continue
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    raise RuntimeError(f"no free port in {candidates.start}-{candidates.stop - 1} after 1,000 tries")
