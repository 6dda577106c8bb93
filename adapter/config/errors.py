"""Turn pydantic validation errors into one-line messages that name source, key, value and range."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from adapter.config.safeload import excerpt
from adapter.domain.text import plain

MAX_MSG_CHARS = 200
MAX_MESSAGES = 10
"""Problems listed per object; the rest are counted (a 10,000-item list of wrong types is one line more)."""


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        text = plain(str(part), 80)
        out += f"[{part}]" if isinstance(part, int) else (f".{text}" if out else text)
    return out


def describe(exc: ValidationError, *, source: str) -> list[str]:
    """One message per problem: `<source>.<key>: <value> — <what is wrong>`.

    >>> # e.g. "wva-saturation-scaling-config[default].kvCacheThreshold: 1.5 — must be <= 1"
    """
    messages = []
    for err in exc.errors(include_url=False):
        loc = _loc(tuple(err.get("loc", ())))
        loc = loc if len(loc) <= MAX_MSG_CHARS else loc[:MAX_MSG_CHARS] + "…"
        where = f"{source}.{loc}" if loc else source
        value: Any = err.get("input")
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        msg = msg if len(msg) <= MAX_MSG_CHARS else msg[:MAX_MSG_CHARS] + "…"
        if err.get("type") == "extra_forbidden":
            messages.append(f"{where}: unknown field (value {excerpt(value)})")
        elif err.get("type") == "missing":
            messages.append(f"{where}: required field is missing")
        else:
            messages.append(f"{where}: {excerpt(value)} — {msg[0].lower() + msg[1:]}")
        if len(messages) >= MAX_MESSAGES:
            messages.append(f"{source}: … and {exc.error_count() - len(messages)} more problems")
            break
    return messages
