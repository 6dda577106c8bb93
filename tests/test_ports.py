"""tests/ports.py: ports named before a child binds them come from outside the kernel's ephemeral range."""

from __future__ import annotations

import socket

import pytest

from tests import ports
from tests.ports import ephemeral_range, free_port


def test_ports_are_outside_the_ephemeral_range_distinct_and_bindable() -> None:
    low, high = ephemeral_range()
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(not low <= port <= high for port in ports), [p for p in ports if low <= p <= high]
    for port in ports[:20]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_someone_listens_on_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a range of ten where five are held by listeners, the five others come out, then an error."""
    low = free_port()
    window = range(low - low % 10, low - low % 10 + 10)
    held: list[socket.socket] = []
    try:
        for port in window[::2]:
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            s.listen()
            held.append(s)
        listening = {s.getsockname()[1] for s in held}
        monkeypatch.setattr(ports, "_candidates", lambda: window)
        monkeypatch.setattr(ports, "_handed_out", set())
        got = {free_port() for _ in range(len(window) - len(held))}  # the free ones (none taken meanwhile)
        with pytest.raises(RuntimeError, match="no free port"):
            free_port()
        assert got, "nothing handed out"
        assert not got & listening
        assert got <= set(window)
    finally:
        for s in held:
            s.close()
