"""Time helpers shared by the core and the edges: RFC 3339 and Go-style durations. No clock here."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

from adapter.domain.text import quote

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h|d)", re.ASCII)
MAX_DURATION_S = (2**63 - 1) / 1e9
"""Go's time.Duration is int64 nanoseconds (about 292 years); a longer duration is an error there and here."""
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration_s(text: str) -> float:
    """Parse a Go duration ("10m", "1h30m", "90s", "1.5h"; "d" accepted too) into seconds.

    Raises ValueError naming the text when it is not a duration.
    >>> parse_duration_s("1m30s")
    90.0
    """
    text = text.strip()
    if text in ("0", ""):
        if text == "0":
            return 0.0
        raise ValueError("empty duration")
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_S[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise ValueError(f"{quote(text, 40)} is not a duration such as '30s', '10m' or '1h30m'")
    if not total <= MAX_DURATION_S:  # also NaN/inf from a digit string too long for a float
        raise ValueError(f"{quote(text, 40)} is longer than a Go duration can be (about 292 years)")
    return total


def format_duration(seconds: float) -> str:
    """Render seconds the way Go's time.Duration.String does for whole seconds: 90 -> "1m30s", 300 -> "5m0s".

    Sub-second values render as "500ms"; 0 renders as "0s".
    """
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{round(seconds * 1000):d}ms"
    whole = math.floor(seconds)
    frac = seconds - whole
    hours, rem = divmod(whole, 3600)
    minutes, secs = divmod(rem, 60)
    sec_text = f"{secs + frac:.3f}".rstrip("0").rstrip(".") if frac >= 0.0005 else str(secs)
    if hours:
        return f"{hours}h{minutes}m{sec_text}s"
    if minutes:
        return f"{minutes}m{sec_text}s"
    return f"{sec_text}s"


def format_duration_short(seconds: float) -> str:
    """The largest exact unit, as upstream renders retention periods for PromQL and reasons: 300 -> "5m"."""
    whole = int(seconds)
    if whole != seconds or whole <= 0:
        return format_duration(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s"


def parse_rfc3339_s(text: str) -> float:
    """RFC 3339 ("2026-01-01T00:00:00Z") to epoch seconds. Raises ValueError naming the text."""
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"{text!r} is not an RFC 3339 timestamp such as '2026-01-01T00:00:00Z'") from exc
    if parsed.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone; use 'Z' or an offset")
    return parsed.timestamp()


def format_rfc3339(epoch_s: float) -> str:
    """Epoch seconds to RFC 3339 in UTC with a 'Z', second precision (as metav1.Time serialises)."""
    return datetime.fromtimestamp(int(epoch_s), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
