"""SIGINT/SIGTERM set an asyncio Event, for the demo and `serve` alike."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable


def stop_on_signals(stop: asyncio.Event) -> Callable[[], None]:
    """Make SIGINT and SIGTERM set `stop`; returns the function that restores the previous handling.

    Where the loop cannot install handlers (not the main thread, or a platform without them) it does
    nothing, and the caller's other stop conditions still apply.
    """
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)

    def remove() -> None:
        for sig in installed:
            loop.remove_signal_handler(sig)

    return remove
