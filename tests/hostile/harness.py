"""Run one command as a child process under a memory limit and a time limit, and report how it ended.

The hostile corpus (tests/hostile/test_corpus.py) and the before/after probes (tests/hostile/probes.py) both use
it, so the figures in the closing note and the bounds the tests enforce come from the same measurement:

- memory: `RLIMIT_AS` (address space) set in the child before it runs anything, so an allocation beyond the bound
  fails inside the child (a `MemoryError`, which a correct program turns into a message) instead of growing the
  machine's memory; the peak resident set size comes from the kernel's accounting of that one child (`wait4`).
  Linux starts the child with vfork and charges the exec against the parent's memory, so the figure is never
  below the spawning process's own peak: spawn from a small process (tests/hostile/probes.py stays near 30 MB
  until its server group, which runs last) when the figure matters.
- time: a deadline after which the child (and its process group) is killed; `timed_out` says so.
- signals: optionally SIGTERM / SIGINT once the child printed a marker (or after a delay), and the seconds from
  the signal to the exit (`after_signal_s`), for the shutdown cases.

Nothing here asserts; the tests do, on the `Outcome`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUTPUT_KEEP_BYTES = 256 * 1024
"""Bytes of each output stream kept (the rest is counted, not stored): a child that floods its output cannot
grow the test process."""


@dataclass(frozen=True, slots=True)
class Outcome:
    argv: tuple[str, ...]
    returncode: int | None
    """The exit code; a negative number -N when a signal N ended it (SIGKILL at the deadline: -9)."""
    stdout: str
    stderr: str
    wall_s: float
    peak_rss_mb: float
    timed_out: bool
    after_signal_s: float | None = None
    """Seconds from the signal the harness sent to the child's exit (None: no signal sent)."""
    output_bytes: int = 0

    def describe(self) -> str:
        """One paragraph for an assertion message: how it ended and the tail of stderr."""
        how = "timed out (killed)" if self.timed_out else f"exit {self.returncode}"
        tail = self.stderr[-1500:] if self.stderr else "(no stderr)"
        return (
            f"{' '.join(self.argv)[:300]}: {how} after {self.wall_s:.1f}s, peak RSS {self.peak_rss_mb:.0f} MB\n{tail}"
        )


@dataclass
class _Collected:
    chunks: list[bytes] = field(default_factory=list)
    kept: int = 0
    total: int = 0

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", "replace")


def _drain(stream: object, into: _Collected, seen: threading.Event | None, marker: bytes | None) -> None:
    tail = b""
    read = getattr(stream, "read1", None) or getattr(stream, "read")  # noqa: B009
    while True:
        chunk = read(65536)
        if not chunk:
            return
        into.total += len(chunk)
        if into.kept < OUTPUT_KEEP_BYTES:
            piece = chunk[: OUTPUT_KEEP_BYTES - into.kept]
            into.chunks.append(piece)
            into.kept += len(piece)
        if seen is not None and marker is not None and not seen.is_set():
            window = tail + chunk
            if marker in window:
                seen.set()
            tail = window[-len(marker) :]


_TRAMPOLINE = (
    "import os, resource, sys\n"
    "limit = int(sys.argv[1])\n"
    "resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
    "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)
"""Sets the limits in the child, then becomes the command (same process, so `wait4` accounts for it). Not a
`preexec_fn`: that makes subprocess fork() the test process, and gRPC's fork handlers (installed once a test
used gRPC in this process) abort such a child with SIGABRT before it runs anything."""


def run_bounded(
    argv: Sequence[str],
    *,
    timeout_s: float,
    memory_mb: int,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    send_signal: int | None = None,
    signal_when: bytes | None = None,
    signal_after_s: float = 0.0,
    exit_within_s: float | None = None,
) -> Outcome:
    """Run `argv` under `memory_mb` of address space for at most `timeout_s`.

    With `send_signal`, the signal goes to the child `signal_after_s` seconds after `signal_when` appeared on its
    stdout or stderr (or after `signal_after_s` from the start when `signal_when` is None); with `exit_within_s`
    the child must then exit within that many seconds of the signal, or it is killed (`timed_out`).
    """
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    child_env.setdefault("OPENBLAS_NUM_THREADS", "1")
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-S", "-c", _TRAMPOLINE, str(memory_mb * 1024 * 1024), *argv],
        cwd=str(cwd or REPO),
        env=child_env,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    seen = threading.Event()
    out, err = _Collected(), _Collected()
    readers = [
        threading.Thread(target=_drain, args=(proc.stdout, out, seen, signal_when), daemon=True),
        threading.Thread(target=_drain, args=(proc.stderr, err, seen, signal_when), daemon=True),
    ]
    for reader in readers:
        reader.start()
    if stdin is not None:
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(stdin)
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
    deadline = started + timeout_s
    signalled_at: float | None = None
    ready_at: float | None = None
    timed_out = False
    status = rusage = None
    while True:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            break
        now = time.monotonic()
        if now >= deadline:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            _, status, rusage = os.wait4(proc.pid, 0)
            break
        if send_signal is not None and signalled_at is None:
            if ready_at is None and (signal_when is None or seen.is_set()):
                ready_at = started if signal_when is None else now
            if ready_at is not None and now >= ready_at + signal_after_s:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, send_signal)
                signalled_at = now
                if exit_within_s is not None:
                    deadline = min(deadline, now + exit_within_s)
        time.sleep(0.01)
    ended = time.monotonic()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here; Popen must not wait for it again
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # anything the child left behind in its group
    for reader in readers:
        reader.join(timeout=10)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    assert rusage is not None
    return Outcome(
        argv=tuple(argv),
        returncode=None if timed_out else proc.returncode,
        stdout=out.text(),
        stderr=err.text(),
        wall_s=ended - started,
        peak_rss_mb=rusage.ru_maxrss / 1024.0,
        timed_out=timed_out,
        after_signal_s=None if signalled_at is None else ended - signalled_at,
        output_bytes=out.total + err.total,
    )


def wva(*args: str, python: str = sys.executable) -> list[str]:
    """`python -m adapter ARGS` (the same program as `wva-adapter`), with this interpreter."""
    return [python, "-m", "adapter", *args]


def kubeconfig_for(path: Path, server: str) -> Path:
    """Write a one-context kubeconfig pointing at `server` with a bearer token, and return its path."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1", "kind": "Config", "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )  # fmt: skip
    return path
