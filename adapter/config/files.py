"""The one reader of files named on the command line, in settings or in a scenario: stat first, then a capped read.

A file argument is outside input. Reading it whole and checking its size afterwards lets `/dev/zero`, a FIFO or
a 1 GB sparse file take the machine's memory (or wait forever) before the check runs. So every file the CLI or
`serve` reads goes through `read_bounded`, which

1. opens without blocking (`O_NONBLOCK`: opening a FIFO does not wait for a writer) and without following the
   file into a controlling terminal (`O_NOCTTY`);
2. refuses anything that is not a regular file (a directory, a device such as `/dev/zero`, a FIFO, a socket),
   naming what it is;
3. refuses a regular file larger than the limit *before reading a byte*, naming its size and the limit;
4. reads at most limit + 1 bytes, so a file that grows while we read it (or a procfs file that reports size 0)
   is refused too.

Files that a library opens itself by path (the kubeconfig, TLS certificates and keys, CA bundles) get the same
checks through `check_file` (stat only) just before the library opens them. Every failure is a `FileRefused`
(an `InputError`, so a `ConfigError`): one line naming the file, never a traceback.

The limits, one per kind of file (docs/security.md repeats this table):

    kind                                  limit     why
    manifests (check-config, demo VAs)    16 MB     many VA / ConfigMap documents; etcd's object limit is 1.5 MB
    replay fixtures                       16 MB     a flight-recorder cycle of a large cluster is ~1 MB
    simulation scenarios                  1 MB      a scenario is a page of YAML
    trace files (scenario workloads)      512 MB    streamed, never held whole; the request budget bounds the work
    serve --config-file                   256 KB    a page of settings
    kubeconfig                            4 MB      a few clusters with embedded certificates are ~50 KB
    TLS certificates, keys, CA bundles    1 MB      the Mozilla CA bundle is ~220 KB
    bearer token files                    64 KB     a service-account JWT is ~1 KB
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Final

from adapter.config.safeload import InputError, size_text
from adapter.domain.text import plain

__all__ = [
    "MAX_CONFIG_FILE_BYTES",
    "MAX_FIXTURE_BYTES",
    "MAX_KUBECONFIG_BYTES",
    "MAX_MANIFEST_BYTES",
    "MAX_PEM_BYTES",
    "MAX_SCENARIO_BYTES",
    "MAX_TOKEN_BYTES",
    "MAX_TRACE_BYTES",
    "FileRefused",
    "check_file",
    "read_bounded",
]

MAX_MANIFEST_BYTES: Final = 16 * 1024 * 1024
MAX_FIXTURE_BYTES: Final = 16 * 1024 * 1024
MAX_SCENARIO_BYTES: Final = 1024 * 1024
MAX_TRACE_BYTES: Final = 512 * 1024 * 1024
MAX_CONFIG_FILE_BYTES: Final = 256 * 1024
MAX_KUBECONFIG_BYTES: Final = 4 * 1024 * 1024
MAX_PEM_BYTES: Final = 1024 * 1024
MAX_TOKEN_BYTES: Final = 64 * 1024

_READ_CHUNK: Final = 1024 * 1024


class FileRefused(InputError):
    """A file that is not read: not there, not a regular file, too large, or unreadable. The message names the
    file (and its size and the limit when that is the reason)."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _label(what: str, path: Path | str) -> str:
    shown = plain(str(path))
    return f"{what} {shown}" if what else shown


def _check_stat(status: os.stat_result, *, label: str, max_bytes: int) -> None:
    if not stat.S_ISREG(status.st_mode):
        raise FileRefused(f"{label} is {_kind(status.st_mode)}, not a regular file")
    if status.st_size > max_bytes:
        raise FileRefused(f"{label} is {size_text(status.st_size)}; the limit is {size_text(max_bytes)}")


def _os_error(exc: OSError, *, label: str) -> FileRefused:
    reason = exc.strerror or errno.errorcode.get(exc.errno or 0, type(exc).__name__)
    return FileRefused(f"{label}: cannot read: {reason}")


def check_file(path: Path | str, *, what: str, max_bytes: int) -> None:
    """For a file a library opens by path: refuse it unless it is a regular file of at most `max_bytes`."""
    label = _label(what, path)
    try:
        status = os.stat(path)
    except OSError as exc:
        raise _os_error(exc, label=label) from None
    _check_stat(status, label=label, max_bytes=max_bytes)


def read_bounded(path: Path | str, *, what: str, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes` (module docstring); FileRefused otherwise, e.g.
    `read_bounded("/dev/zero", what="fixture", max_bytes=1024)` raises "fixture /dev/zero is a character device,
    not a regular file" without reading."""
    label = _label(what, path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        descriptor = os.open(path, flags)
    except OSError as exc:
        raise _os_error(exc, label=label) from None
    try:
        _check_stat(os.fstat(descriptor), label=label, max_bytes=max_bytes)
        chunks: list[bytes] = []
        total = 0
        while total <= max_bytes:
            chunk = os.read(descriptor, min(_READ_CHUNK, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise _os_error(exc, label=label) from None
    finally:
        os.close(descriptor)
    if total > max_bytes:
        raise FileRefused(
            f"{label} holds more than the limit of {size_text(max_bytes)} (it grew while it was read, or its file "
            "system reports no size)"
        )
    return b"".join(chunks)
