"""Outside text inside our messages: short, escaped excerpts.

Every edge (HTTP Status messages, gRPC details, CLI lines, logs, VA conditions) may quote what a client sent, and
a client may send 17 kB of metadata, a newline that forges a log line, an ANSI escape that repaints a terminal,
or U+202E that reverses what follows. So a message never holds outside text except through `quote` or
`excerpt`: at most `limit` characters of Python's `repr` of it (control, format and other non-printable
characters escaped: `\\n`, `\\x1b`, `\\u202e`; the text in quotes), with the full length said when it was cut.
"""

from __future__ import annotations

from typing import Any, Final

EXCERPT_CHARS: Final = 60


def quote(text: str, limit: int = EXCERPT_CHARS) -> str:
    """`text` quoted and escaped, at most about `limit` characters (plus the length note when cut).

    >>> quote("a\\u202eb\\nc")
    "'a\\\\u202eb\\\\nc'"
    >>> quote("x" * 1000, 10)
    "'xxxxxxxxx… (1000 chars)"
    """
    shown = repr(text[: limit + 1])  # never escape more than we show: repr of a 16 MB string is 16 MB
    if len(text) <= limit and len(shown) <= limit + 2:
        return shown
    return f"{shown[:limit]}… ({len(text)} chars)"


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """Any value as a bounded, escaped excerpt: strings through `quote`, containers by type and size only (a
    shared-reference bomb is cheap to hold and costly to print), anything else by its repr, cut to `limit`.

    >>> excerpt("x" * 1000)
    "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx… (1000 chars)"
    >>> excerpt({"a": 1})
    '<dict of 1 items>'
    """
    if isinstance(value, str):
        return quote(value, limit)
    if isinstance(value, list | dict | tuple | set | frozenset):
        return f"<{type(value).__name__} of {len(value)} items>"
    try:
        text = repr(value)
    except Exception as exc:  # a hostile __repr__ must not escape
        text = f"<unprintable {type(value).__name__}: {type(exc).__name__}>"
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} chars)"


def plain(text: str, limit: int = 200) -> str:
    """`text` as it is when it is printable and at most `limit` characters (a file path, a name we validated),
    else `quote(text, limit)`: ordinary names read naturally, hostile ones are escaped.

    >>> plain("fixtures/a.json"), plain("a\\nb")
    ('fixtures/a.json', "'a\\\\nb'")
    """
    if len(text) <= limit and text.isprintable():
        return text
    return quote(text, limit)


def escape(text: str) -> str:
    """`text` with every non-printable character written as its Python escape (`\\n`, `\\x1b`, `\\u202e`), the
    printable ones as they are: for messages that already bound their length but embed outside text."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
