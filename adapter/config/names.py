"""What Kubernetes accepts as a name, a namespace, a label value, and what we accept as free text.

`check-config`, the replay fixture, the scenario loader and the live inventory validate with these, so that
`check-config` never says ok to an object the API server would refuse, and a name that reaches a message, a
label or a PromQL query is one Kubernetes itself would have accepted. The rules, from
k8s.io/apimachinery/pkg/util/validation:

    DNS-1123 label       [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 characters        namespaces
    DNS-1123 subdomain   labels joined by '.', at most 253 characters                object names (VA, pod, node)
    label value          (([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?, at most 63      label values
    qualified name       [prefix/]name, prefix a subdomain, name a label-value-like  label keys

Free text (a modelID, an accelerator name, a variantID) has no Kubernetes rule beyond "a string"; ours: at most
`MAX_FREE_TEXT_CHARS` characters, every one printable (`str.isprintable`: no control, format, surrogate,
private-use or unassigned code point, no line or paragraph separator, no space but ' ' — NUL, newline, ESC,
U+202E, U+E000, U+3000 …), which would otherwise reach terminals, logs and PromQL label matchers verbatim or
unreadable.
"""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import AfterValidator

from adapter.domain.text import quote

DNS1123_LABEL: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN: Final = rf"{DNS1123_LABEL}(\.{DNS1123_LABEL})*"
LABEL_VALUE: Final = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_LABEL_RE: Final = re.compile(DNS1123_LABEL, re.ASCII)
_SUBDOMAIN_RE: Final = re.compile(DNS1123_SUBDOMAIN, re.ASCII)
_LABEL_VALUE_RE: Final = re.compile(LABEL_VALUE, re.ASCII)
_API_VERSION_RE: Final = re.compile(rf"({DNS1123_SUBDOMAIN}/)?{DNS1123_LABEL}", re.ASCII)
MAX_FREE_TEXT_CHARS: Final = 512
INT32_MAX: Final = 2**31 - 1

LABEL_RULE: Final = (
    "must be a lowercase RFC 1123 label: at most 63 characters, lowercase letters, digits or '-', starting and "
    "ending with a letter or digit (e.g. 'my-name')"
)
SUBDOMAIN_RULE: Final = (
    "must be a lowercase RFC 1123 subdomain: at most 253 characters, lowercase letters, digits, '-' or '.', "
    "starting and ending with a letter or digit (e.g. 'example.com')"
)
LABEL_VALUE_RULE: Final = (
    "must be a label value: at most 63 characters, letters, digits, '-', '_' or '.', starting and ending with a "
    "letter or digit (or empty)"
)


def is_dns1123_label(text: str) -> bool:
    return len(text) <= 63 and _LABEL_RE.fullmatch(text) is not None


def is_dns1123_subdomain(text: str) -> bool:
    return len(text) <= 253 and _SUBDOMAIN_RE.fullmatch(text) is not None


def is_label_value(text: str) -> bool:
    return len(text) <= 63 and _LABEL_VALUE_RE.fullmatch(text) is not None


def is_qualified_name(text: str) -> bool:
    prefix, sep, name = text.rpartition("/")
    if sep and (not prefix or not is_dns1123_subdomain(prefix)):
        return False
    return bool(name) and is_label_value(name)


def forbidden_character(text: str) -> str | None:
    """The first character of `text` that is not printable, escaped with its index (e.g. "'\\x00' at 1"), or
    None."""
    if text.isprintable():
        return None
    index, char = next((i, c) for i, c in enumerate(text) if not c.isprintable())
    return f"{char!r} at {index}"


def _dns1123_label(value: str) -> str:
    if not is_dns1123_label(value):
        raise ValueError(LABEL_RULE)
    return value


def _dns1123_subdomain(value: str) -> str:
    if not is_dns1123_subdomain(value):
        raise ValueError(SUBDOMAIN_RULE)
    return value


def _label_values(labels: dict[str, str]) -> dict[str, str]:
    for key, value in labels.items():
        if not is_qualified_name(key):
            raise ValueError(f"label key {quote(key)} must be a qualified name '[prefix/]name' (prefix a DNS "
                             "subdomain, name at most 63 letters, digits, '-', '_' or '.')")  # fmt: skip
        if not is_label_value(value):
            raise ValueError(f"label {quote(key)}: value {quote(value)} {LABEL_VALUE_RULE}")
    return labels


def _free_text(value: str) -> str:
    if len(value) > MAX_FREE_TEXT_CHARS:
        raise ValueError(f"must be at most {MAX_FREE_TEXT_CHARS} characters, got {len(value)}")
    bad = forbidden_character(value)
    if bad is not None:
        raise ValueError(
            "must hold printable characters only (no control, format, private-use or unassigned character, no "
            f"separator but ' '), found {bad}"
        )
    return value


def _api_version(value: str) -> str:
    if len(value) > 316 or not _API_VERSION_RE.fullmatch(value):
        raise ValueError("must be an API version such as 'apps/v1' or 'leaderworkerset.x-k8s.io/v1'")
    return value


DnsLabel = Annotated[str, AfterValidator(_dns1123_label)]
"""A namespace."""
DnsSubdomain = Annotated[str, AfterValidator(_dns1123_subdomain)]
"""An object name."""
Labels = Annotated[dict[str, str], AfterValidator(_label_values)]
FreeText = Annotated[str, AfterValidator(_free_text)]
ApiVersion = Annotated[str, AfterValidator(_api_version)]
