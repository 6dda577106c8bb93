"""Kubernetes label selectors, as they arrive in a `labelSelector` query parameter.

The HPA sends `metav1.LabelSelectorAsSelector(metric.selector).String()`, e.g.
`variant_name=llama-h100,accelerator_type in (H100,A100)`; `kubectl get --raw` users type anything. We accept
exactly what `k8s.io/apimachinery/pkg/labels.Parse` accepts, so a selector that works against a Go adapter
works here and one that Kubernetes would reject is rejected with a 400 instead of silently matching nothing:

    selector     ::= "" | requirement ("," requirement)*
    requirement  ::= ["!"] KEY
                   | KEY ("=" | "==" | "!=") [VALUE]
                   | KEY ("in" | "notin") "(" [VALUE] ("," [VALUE])* ")"
                   | KEY (">" | "<") INTEGER

Requirements are ANDed. Whitespace between tokens is ignored. Keys are qualified names (`[prefix/]name`,
name ≤ 63 chars, prefix a DNS-1123 subdomain ≤ 253 chars); values are ≤ 63 chars of `[-A-Za-z0-9_.]`,
starting and ending alphanumeric, or empty. `in`/`notin` are keywords only in operator position, so
`in in (in)` is a valid selector (as in Go). `()` and empty list elements mean the empty value.

Matching follows Go's `Requirement.Matches`: `=`/`==`/`in` need the label present with a listed value;
`!=`/`notin` also match when the label is absent; `>`/`<` need the label present and an integer.

No maintained Python library implements this grammar, hence this small hand-written lexer + recursive
descent parser. Pure: no I/O, no clock; parse errors raise `adapter.domain.errors.BadRequest` naming the
selector and the offending token.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum

from adapter.domain.errors import BadRequest
from adapter.domain.text import escape

__all__ = ["EVERYTHING", "Operator", "Requirement", "Selector", "parse_selector"]

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_MAX_NAME_LEN = 63
MAX_SELECTOR_CHARS = 8192
"""Longer selectors are refused before parsing (the request line limit is about the same)."""
_QUOTE_CHARS = 120
"""How much of a bad selector an error message quotes."""
_MAX_PREFIX_LEN = 253
_NAME = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")
_GO_INT = re.compile(r"[+-]?[0-9]+")
_VALUE_RULE = (
    "must be 63 characters or less and be empty or consist of alphanumeric characters, '-', '_' or '.', "
    "starting and ending with an alphanumeric character"
)


class Operator(StrEnum):
    """Selection operators; the value is how `Selector.__str__` renders them."""

    EQUALS = "="
    DOUBLE_EQUALS = "=="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"
    GREATER_THAN = ">"
    LESS_THAN = "<"


_POSITIVE_SET_OPERATORS = frozenset({Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.IN})


def _go_int(text: str) -> int | None:
    """`strconv.ParseInt(text, 10, 64)`: optional sign, decimal digits, int64 range; None if it fails."""
    if not _GO_INT.fullmatch(text):
        return None
    number = int(text)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ANDed clause of a selector. `values` is empty for (does-not-)exist, one value for `=`/`>`/…"""

    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op in _POSITIVE_SET_OPERATORS:
            value = labels.get(self.key)
            return value is not None and value in self.values
        if op is Operator.NOT_EQUALS or op is Operator.NOT_IN:
            value = labels.get(self.key)
            return value is None or value not in self.values
        if op is Operator.EXISTS:
            return self.key in labels
        if op is Operator.DOES_NOT_EXIST:
            return self.key not in labels
        # GREATER_THAN / LESS_THAN: the label must exist and be an integer (Go logs and returns false).
        value = labels.get(self.key)
        label_number = None if value is None else _go_int(value)
        if label_number is None:
            return False
        (bound_text,) = self.values
        bound = _go_int(bound_text)
        if bound is None:  # unreachable for parsed requirements; kept for hand-built ones
            return False
        return label_number > bound if op is Operator.GREATER_THAN else label_number < bound

    def __str__(self) -> str:
        """Go's `Requirement.String()`: `key`, `!key`, `key=v`, `key in (a,b)` (values sorted)."""
        op = self.operator
        if op is Operator.EXISTS:
            return self.key
        if op is Operator.DOES_NOT_EXIST:
            return f"!{self.key}"
        if op is Operator.IN or op is Operator.NOT_IN:
            return f"{self.key} {op.value} ({','.join(sorted(self.values))})"
        return f"{self.key}{op.value}{next(iter(self.values))}"


@dataclass(frozen=True, slots=True)
class Selector:
    """A parsed selector: the AND of its requirements (sorted by key when parsed). Empty matches everything."""

    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def required_values(self, key: str) -> frozenset[str] | None:
        """The values `key` can take in a match, if the selector pins it (`=`, `==`, `in`); else None.

        Lets a caller look candidates up by key instead of scanning everything: the HPA always sends
        `variant_name=<VA>`, so the server fetches one decision instead of listing the namespace.
        """
        allowed: frozenset[str] | None = None
        for requirement in self.requirements:
            if requirement.key == key and requirement.operator in _POSITIVE_SET_OPERATORS:
                allowed = requirement.values if allowed is None else allowed & requirement.values
        return allowed

    def __str__(self) -> str:
        """The canonical form (Go's `Selector.String()`): parsed requirements are already sorted by key."""
        return ",".join(str(r) for r in self.requirements)


EVERYTHING = Selector()


# --- lexer -------------------------------------------------------------------------------------------------


class _Tok(Enum):
    END = "end of string"
    IDENT = "identifier"
    IN = "in"
    NOT_IN = "notin"
    OPEN = "("
    CLOSE = ")"
    COMMA = ","
    BANG = "!"
    EQ = "="
    DEQ = "=="
    NEQ = "!="
    GT = ">"
    LT = "<"


_SPECIAL_CHARS = frozenset("=!(),<>")
_WHITESPACE = frozenset(" \t\r\n")
_SYMBOLS = {
    "(": _Tok.OPEN,
    ")": _Tok.CLOSE,
    ",": _Tok.COMMA,
    "!": _Tok.BANG,
    "=": _Tok.EQ,
    "==": _Tok.DEQ,
    "!=": _Tok.NEQ,
    ">": _Tok.GT,
    "<": _Tok.LT,
}
_KEYWORDS = {"in": _Tok.IN, "notin": _Tok.NOT_IN}
_BINARY_OPERATORS = {
    _Tok.EQ: Operator.EQUALS,
    _Tok.DEQ: Operator.DOUBLE_EQUALS,
    _Tok.NEQ: Operator.NOT_EQUALS,
    _Tok.IN: Operator.IN,
    _Tok.NOT_IN: Operator.NOT_IN,
    _Tok.GT: Operator.GREATER_THAN,
    _Tok.LT: Operator.LESS_THAN,
}


def _lex(text: str) -> list[tuple[_Tok, str]]:
    """Split into tokens like Go's lexer: symbols take the longest match (`!=` over `!`), and an
    identifier is any run of characters that are neither whitespace nor symbol characters."""
    tokens: list[tuple[_Tok, str]] = []
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos] in _WHITESPACE:
            pos += 1
        if pos >= end:
            tokens.append((_Tok.END, ""))
            return tokens
        if text[pos] in _SPECIAL_CHARS:
            two = text[pos : pos + 2]
            literal = two if two in _SYMBOLS else text[pos]
            tokens.append((_SYMBOLS[literal], literal))
            pos += len(literal)
            continue
        start = pos
        while pos < end and text[pos] not in _SPECIAL_CHARS and text[pos] not in _WHITESPACE:
            pos += 1
        word = text[start:pos]
        tokens.append((_KEYWORDS.get(word, _Tok.IDENT), word))


# --- parser ------------------------------------------------------------------------------------------------


def _shown(kind: _Tok, literal: str) -> str:
    return "end of string" if kind is _Tok.END else literal


class _Parser:
    """Recursive descent over the token list. In value position `in`/`notin` are plain identifiers."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._tokens = _lex(text)
        self._pos = 0

    def fail(self, detail: str) -> BadRequest:
        shown = self._text if len(self._text) <= _QUOTE_CHARS else self._text[:_QUOTE_CHARS] + "…"
        if len(detail) > 2 * _QUOTE_CHARS:  # the detail quotes tokens, which may be long too
            detail = detail[:_QUOTE_CHARS] + " … " + detail[-_QUOTE_CHARS:]
        detail = escape(detail)  # tokens quoted as they are may hold control characters
        return BadRequest(f"invalid labelSelector {shown!r}: {detail}")

    def _peek(self, *, value_context: bool = True) -> tuple[_Tok, str]:
        kind, literal = self._tokens[self._pos]
        if value_context and kind in (_Tok.IN, _Tok.NOT_IN):
            kind = _Tok.IDENT
        return kind, literal

    def _next(self, *, value_context: bool = True) -> tuple[_Tok, str]:
        token = self._peek(value_context=value_context)
        self._pos += 1
        return token

    def parse(self) -> Selector:
        requirements: list[Requirement] = []
        kind, literal = self._peek()
        if kind is _Tok.END:
            return EVERYTHING
        while True:
            if kind not in (_Tok.IDENT, _Tok.BANG):
                raise self.fail(f"found '{_shown(kind, literal)}', expected: !, identifier, or 'end of string'")
            requirements.append(self._requirement())
            kind, literal = self._next()
            if kind is _Tok.END:
                # Sorted by key like Go's parser, so equal selectors compare (and cache) equal.
                return Selector(tuple(sorted(requirements, key=lambda r: r.key)))
            if kind is not _Tok.COMMA:
                raise self.fail(f"found '{_shown(kind, literal)}', expected: ',' or 'end of string'")
            kind, literal = self._peek()
            if kind not in (_Tok.IDENT, _Tok.BANG):
                raise self.fail(f"found '{_shown(kind, literal)}', expected: identifier after ','")

    def _requirement(self) -> Requirement:
        negated = False
        kind, literal = self._next()
        if kind is _Tok.BANG:
            negated = True
            kind, literal = self._next()
        if kind is not _Tok.IDENT:
            raise self.fail(f"found '{_shown(kind, literal)}', expected: identifier")
        key = literal
        self._check_key(key)
        following, _ = self._peek()
        if following in (_Tok.END, _Tok.COMMA):
            return Requirement(key, Operator.DOES_NOT_EXIST if negated else Operator.EXISTS)
        if negated:
            # Go: `!key` takes no operator; what follows must be ',' or the end.
            _, shown = self._peek(value_context=False)
            raise self.fail(f"found '{shown}', expected: ',' or 'end of string' after '!{key}'")
        op_kind, op_literal = self._next(value_context=False)
        operator = _BINARY_OPERATORS.get(op_kind)
        if operator is None:
            raise self.fail(
                f"found '{_shown(op_kind, op_literal)}' after key {key!r}, expected: "
                "'=', '==', '!=', 'in', 'notin', '>' or '<'"
            )
        if operator is Operator.IN or operator is Operator.NOT_IN:
            values = self._value_set()
        else:
            values = frozenset({self._exact_value()})
        return self._build(key, operator, values)

    def _exact_value(self) -> str:
        kind, literal = self._peek()
        if kind in (_Tok.END, _Tok.COMMA):
            return ""  # `key=` selects the empty value, as in Go
        kind, literal = self._next()
        if kind is not _Tok.IDENT:
            raise self.fail(f"found '{_shown(kind, literal)}', expected: identifier")
        return literal

    def _value_set(self) -> frozenset[str]:
        """`(a,b)`; ports Go's parseValues/parseIdentifiersList, quirks included: `()`, `(,a)` and `(a,)`
        contain the empty value, `(a,,b)` too, but `(a,,)` is an error."""
        kind, literal = self._next()
        if kind is not _Tok.OPEN:
            raise self.fail(f"found '{_shown(kind, literal)}', expected: '('")
        kind, literal = self._peek()
        if kind is _Tok.CLOSE:
            self._next()
            return frozenset({""})
        if kind not in (_Tok.IDENT, _Tok.COMMA):
            raise self.fail(f"found '{_shown(kind, literal)}', expected: ',', ')' or identifier")
        values: set[str] = set()
        while True:
            kind, literal = self._next()
            if kind is _Tok.IDENT:
                values.add(literal)
                following, following_literal = self._peek()
                if following is _Tok.CLOSE:
                    break
                if following is not _Tok.COMMA:
                    raise self.fail(f"found '{_shown(following, following_literal)}', expected: ',' or ')'")
            elif kind is _Tok.COMMA:
                if not values:
                    values.add("")  # `(,`
                following, _ = self._peek()
                if following is _Tok.CLOSE:
                    values.add("")  # `,)`
                    break
                if following is _Tok.COMMA:
                    self._next()
                    values.add("")  # `,,`
            else:
                raise self.fail(f"found '{_shown(kind, literal)}', expected: ',' or identifier")
        self._next()  # the ')'
        return frozenset(values)

    def _build(self, key: str, operator: Operator, values: frozenset[str]) -> Requirement:
        if operator is Operator.GREATER_THAN or operator is Operator.LESS_THAN:
            (value,) = values
            if _go_int(value) is None:
                raise self.fail(f"value {value!r} of key {key!r}: for '>' and '<' the value must be an integer")
        for value in sorted(values):
            if len(value) > _MAX_NAME_LEN or (value and not _NAME.fullmatch(value)):
                raise self.fail(f"value {value!r} of key {key!r} {_VALUE_RULE}")
        return Requirement(key, operator, values)

    def _check_key(self, key: str) -> None:
        """`validation.IsQualifiedName`: `[prefix/]name` with a DNS-1123 subdomain prefix."""
        prefix, slash, name = key.rpartition("/")
        if slash and "/" in prefix:
            raise self.fail(f"key {key!r} must be a qualified name '[prefix/]name' with at most one '/'")
        if slash:
            if not prefix:
                raise self.fail(f"key {key!r}: the prefix before '/' must be non-empty")
            if len(prefix) > _MAX_PREFIX_LEN or not _DNS1123_SUBDOMAIN.fullmatch(prefix):
                raise self.fail(
                    f"key {key!r}: prefix {prefix!r} must be a lowercase RFC 1123 subdomain of at most "
                    f"{_MAX_PREFIX_LEN} characters (e.g. 'example.com')"
                )
        if not name:
            raise self.fail(f"key {key!r}: the name part must be non-empty")
        if len(name) > _MAX_NAME_LEN:
            raise self.fail(f"key {key!r}: the name part must be no more than {_MAX_NAME_LEN} characters")
        if not _NAME.fullmatch(name):
            raise self.fail(
                f"key {key!r}: the name part must consist of alphanumeric characters, '-', '_' or '.', "
                "starting and ending with an alphanumeric character"
            )


def parse_selector(text: str) -> Selector:
    """Parse a `labelSelector`; "" (or only whitespace) is the empty selector, which matches everything.

    Raises BadRequest naming the selector and the offending token or key/value.
    >>> parse_selector("variant_name=a, tier in (x,y),!legacy").matches({"variant_name": "a", "tier": "y"})
    True
    """
    if len(text) > MAX_SELECTOR_CHARS:
        raise BadRequest(f"labelSelector is {len(text)} characters; the limit is {MAX_SELECTOR_CHARS}")
    return _Parser(text).parse()
