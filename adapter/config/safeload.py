"""Bounded parsing of outside input: YAML and JSON documents a tenant, an operator or a file can hand us.

A ConfigMap is written by anyone who may write ConfigMaps in one namespace, so its parser must not let one
document hurt anything but itself. Every loader here turns *any* failure into `InputError` with a short,
bounded message, checked in this order:

    size      > max_bytes                         → "… is 1.2 MB; the limit is 256 KB"
    encoding  not UTF-8                           → "not UTF-8 (byte 0xff at offset 12)"
    shape     nesting deeper than max_depth,      → counted on the event stream (iterative: a 6 kB `[[[[…`
              more than max_aliases aliases         cannot raise RecursionError here)
    syntax    malformed YAML / JSON               → the parser's problem and line
    anything  else (RecursionError, MemoryError…) → "could not be parsed (RecursionError)"

An alias bomb (`a: &a [x, x, …]`, `b: [*a, *a, …]`, nine levels) is stopped by the alias count before it is
constructed, so no billion-element value, and no 53 MB error message quoting it, ever exists. Values quoted in
messages go through `excerpt`, which never returns more than a few dozen characters.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import yaml

from adapter.domain.errors import ConfigError
from adapter.domain.text import EXCERPT_CHARS, excerpt, quote

__all__ = [
    "EXCERPT_CHARS",
    "MAX_ALIASES",
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "MAX_EXPANDED_NODES",
    "MAX_FILE_BYTES",
    "MAX_STREAM_VALUES",
    "InputError",
    "decode",
    "excerpt",
    "load_json",
    "load_yaml",
    "load_yaml_all",
    "quote",
    "rejection_reason",
    "size_text",
]

MAX_DOCUMENT_BYTES = 256 * 1024
"""A ConfigMap entry, a VA manifest: far above any real one; etcd's whole-object limit is 1.5 MB."""
MAX_FILE_BYTES = 16 * 1024 * 1024
"""A file given on the command line (manifests, fixtures, scenarios)."""
MAX_DEPTH = 64
MAX_ALIASES = 256
"""Aliases per YAML document."""
MAX_EXPANDED_NODES = 100_000
"""Values one YAML document may hold once its aliases are expanded; a real ConfigMap entry has a few dozen, a VA
manifest about twenty."""
MAX_STREAM_VALUES = 2_000_000
"""Values a whole multi-document stream may hold (aliases expanded): the per-document budget alone would let a
16 MB file of small alias bombs construct 10^10 values. 1,500 VA documents hold about 30,000."""
_LOADER = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader


class InputError(ConfigError):
    """A document that could not be parsed; the message is bounded and names no more than an excerpt."""


def decode(data: bytes | str, *, what: str, max_bytes: int) -> str:
    size = len(data.encode("utf-8", errors="surrogatepass")) if isinstance(data, str) else len(data)
    if size > max_bytes:
        raise InputError(f"{what} is {size_text(size)}; the limit is {size_text(max_bytes)}")
    if isinstance(data, str):
        try:
            data.encode("utf-8")
        except UnicodeEncodeError as exc:  # lone surrogates: text no encoder or parser accepts
            raise InputError(f"{what} is not UTF-8 (unpaired surrogate at offset {exc.start})") from None
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} is not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def size_text(n: int) -> str:
    """Bytes for a person: 1.0 GB, 16.0 MB, 256 KB, 17 bytes."""
    if n >= 1024 * 1024 * 1024:
        return f"{n / (1024 * 1024 * 1024):.1f} GB"
    if n >= 1024 * 1024:
        return f"{n / (1024 * 1024):.1f} MB"
    if n >= 1024:
        return f"{math.ceil(n / 1024)} KB"
    return f"{n} bytes"


def _check_shape(text: str, *, what: str, max_depth: int, max_aliases: int) -> None:
    """Walk the event stream (no recursion, nothing constructed): per document, the nesting depth, the alias count
    and the number of values it would have once every alias is expanded (what an alias bomb multiplies); over
    the whole stream, the total of those values (`MAX_STREAM_VALUES`). Anchors are per document in YAML, and
    so are the budgets: a file of 1,500 ordinary VA manifests is not an alias bomb."""
    stack: list[tuple[str | None, int]] = []
    anchors: dict[str, int] = {}
    aliases = expanded = total = 0
    document = 0

    def where() -> str:
        return f"{what} (document {document})" if document > 1 else what

    def add(size: int) -> None:
        nonlocal expanded, total
        expanded += size
        total += size
        if expanded > MAX_EXPANDED_NODES:
            raise InputError(f"{where()} expands to more than {MAX_EXPANDED_NODES:,} values (YAML aliases)")
        if total > MAX_STREAM_VALUES:
            raise InputError(
                f"{what} holds more than {MAX_STREAM_VALUES:,} values (all documents, aliases expanded); the limit "
                f"is {MAX_STREAM_VALUES:,}"
            )
        if stack:
            anchor, count = stack[-1]
            stack[-1] = (anchor, count + size)

    try:
        for event in yaml.parse(text, Loader=_LOADER):
            if isinstance(event, yaml.DocumentStartEvent):
                document += 1
                anchors.clear()
                aliases = expanded = 0
            elif isinstance(event, yaml.CollectionStartEvent):
                if len(stack) >= max_depth:
                    line = event.start_mark.line + 1 if event.start_mark else "?"
                    raise InputError(f"{what} nests deeper than {max_depth} levels (line {line})")
                stack.append((event.anchor, 1))
            elif isinstance(event, yaml.CollectionEndEvent):
                anchor, count = stack.pop()
                if anchor is not None:
                    anchors[anchor] = count
                add(count)
            elif isinstance(event, yaml.ScalarEvent):
                if event.anchor is not None:
                    anchors[event.anchor] = 1
                add(1)
            elif isinstance(event, yaml.AliasEvent):
                aliases += 1
                if aliases > max_aliases:
                    raise InputError(f"{where()} uses more than {max_aliases} YAML aliases")
                add(anchors.get(event.anchor or "", 1))
    except InputError:
        raise
    except yaml.YAMLError as exc:
        raise InputError(f"{what}: malformed YAML{_where(exc)}: {_problem(exc)}") from None
    except Exception as exc:  # RecursionError, MemoryError, a parser bug: one bad document, never a crash
        raise InputError(f"{what} could not be parsed ({type(exc).__name__})") from None


def _problem(exc: yaml.YAMLError) -> str:
    return excerpt(getattr(exc, "problem", None) or str(exc), 120)


def _where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _guarded(what: str, load: Any) -> Any:
    try:
        return load()
    except InputError:
        raise
    except yaml.YAMLError as exc:
        raise InputError(f"{what}: malformed YAML{_where(exc)}: {_problem(exc)}") from None
    except Exception as exc:  # RecursionError, MemoryError, a constructor bug: one bad document, never a crash
        raise InputError(f"{what} could not be parsed ({type(exc).__name__})") from None


def load_yaml(
    data: bytes | str,
    *,
    what: str,
    max_bytes: int = MAX_DOCUMENT_BYTES,
    max_depth: int = MAX_DEPTH,
    max_aliases: int = MAX_ALIASES,
) -> Any:
    """One YAML document (safe loader: plain data only), bounded as the module docstring says."""
    text = decode(data, what=what, max_bytes=max_bytes)
    _check_shape(text, what=what, max_depth=max_depth, max_aliases=max_aliases)
    return _guarded(what, lambda: yaml.safe_load(text))


def load_yaml_all(
    data: bytes | str,
    *,
    what: str,
    max_bytes: int = MAX_FILE_BYTES,
    max_depth: int = MAX_DEPTH,
    max_aliases: int = MAX_ALIASES,
) -> list[Any]:
    """Every document of a multi-document YAML stream (`---`), bounded like `load_yaml`."""
    text = decode(data, what=what, max_bytes=max_bytes)
    _check_shape(text, what=what, max_depth=max_depth, max_aliases=max_aliases)
    return list(_guarded(what, lambda: list(yaml.safe_load_all(text))))


def load_json(
    data: bytes | str,
    *,
    what: str,
    max_bytes: int = MAX_FILE_BYTES,
    max_depth: int = MAX_DEPTH,
    allow_nan: bool = False,
) -> Any:
    """A JSON document: bounded size and depth; duplicate keys rejected. NaN and Infinity are rejected unless
    `allow_nan` (then they parse to floats, for a validator that reports them at their JSON path)."""
    text = decode(data, what=what, max_bytes=max_bytes)
    _check_json_depth(text, what=what, max_depth=max_depth)

    def reject_constant(name: str) -> Any:
        raise InputError(f"{what}: {name} is not JSON (use a number or null)")

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise InputError(f"{what}: duplicate key {excerpt(key)}")
            out[key] = value
        return out

    try:
        if allow_nan:
            return json.loads(text, object_pairs_hook=no_duplicates)
        return json.loads(text, parse_constant=reject_constant, object_pairs_hook=no_duplicates)
    except InputError:
        raise
    except json.JSONDecodeError as exc:
        raise InputError(f"{what}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except Exception as exc:
        raise InputError(f"{what} could not be parsed ({type(exc).__name__})") from None


def _check_json_depth(text: str, *, what: str, max_depth: int) -> None:
    """Bracket depth outside strings, in one pass (json.loads recurses per level)."""
    depth = 0
    for kind, char in _structural(text):
        if kind == "open":
            depth += 1
            if depth > max_depth:
                raise InputError(f"{what} nests deeper than {max_depth} levels")
        elif kind == "close":
            depth -= 1
        del char


def _structural(text: str) -> Iterator[tuple[str, str]]:
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            yield "open", char
        elif char in "]}":
            yield "close", char


_REASONS = (
    ("not UTF-8", "not-utf8"),
    ("the limit is", "too-large"),
    ("nests deeper", "too-deep"),
    ("YAML aliases", "alias-bomb"),
    ("malformed YAML", "malformed"),
    ("invalid JSON", "malformed"),
    ("could not be parsed", "unparseable"),
    ("could not be validated", "unparseable"),
    ("unknown field", "unknown-field"),
)


def rejection_reason(message: str) -> str:
    """A small, fixed vocabulary for the `reason` label of `wva_inputs_rejected_total` (bounded cardinality):
    the first known phrase in the message, else "invalid"."""
    for phrase, reason in _REASONS:
        if phrase in message:
            return reason
    return "invalid"
