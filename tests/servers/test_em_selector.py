"""The label selector grammar, matched against Kubernetes' own parser's behaviour (k8s.io/apimachinery labels)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from adapter.domain.errors import BadRequest
from adapter.servers.selector import EVERYTHING, Operator, Requirement, Selector, parse_selector

LABELS = {"variant_name": "llama-h100", "model_id": "llama", "accelerator_type": "H100", "replicas": "3"}


@dataclass(frozen=True)
class MatchCase:
    id: str
    selector: str
    matches: bool
    canonical: str


MATCH_CASES = [
    MatchCase("empty", "", True, ""),
    MatchCase("whitespace-only", "  \t", True, ""),
    MatchCase("equals", "variant_name=llama-h100", True, "variant_name=llama-h100"),
    MatchCase("equals-other-value", "variant_name=llama-a100", False, "variant_name=llama-a100"),
    MatchCase("double-equals", "variant_name==llama-h100", True, "variant_name==llama-h100"),
    MatchCase("not-equals", "accelerator_type!=A100", True, "accelerator_type!=A100"),
    MatchCase("not-equals-same", "accelerator_type!=H100", False, "accelerator_type!=H100"),
    MatchCase("not-equals-absent-label", "tier!=gold", True, "tier!=gold"),
    MatchCase("equals-absent-label", "tier=gold", False, "tier=gold"),
    MatchCase("equals-empty-value-absent", "tier=", False, "tier="),
    MatchCase("in", "accelerator_type in (A100,H100)", True, "accelerator_type in (A100,H100)"),
    MatchCase("in-miss", "accelerator_type in (A100,L4)", False, "accelerator_type in (A100,L4)"),
    MatchCase("in-absent", "tier in (gold)", False, "tier in (gold)"),
    MatchCase("notin", "accelerator_type notin (A100,L4)", True, "accelerator_type notin (A100,L4)"),
    MatchCase("notin-hit", "accelerator_type notin (H100)", False, "accelerator_type notin (H100)"),
    MatchCase("notin-absent", "tier notin (gold)", True, "tier notin (gold)"),
    MatchCase("exists", "model_id", True, "model_id"),
    MatchCase("exists-absent", "tier", False, "tier"),
    MatchCase("not-exists", "!tier", True, "!tier"),
    MatchCase("not-exists-present", "!model_id", False, "!model_id"),
    MatchCase("and-all", "variant_name=llama-h100,model_id,!tier", True, "model_id,!tier,variant_name=llama-h100"),
    MatchCase("and-one-fails", "variant_name=llama-h100,model_id=qwen", False, "model_id=qwen,variant_name=llama-h100"),
    MatchCase("spaces-everywhere", " variant_name = llama-h100 , ! tier ", True, "!tier,variant_name=llama-h100"),
    MatchCase("in-spaces", "accelerator_type in ( H100 , A100 )", True, "accelerator_type in (A100,H100)"),
    MatchCase("in-empty-parens", "tier in ()", False, "tier in ()"),
    MatchCase("notin-empty-parens", "tier notin ()", True, "tier notin ()"),
    MatchCase("in-leading-comma", "model_id in (,llama)", True, "model_id in (,llama)"),
    MatchCase("in-trailing-comma", "model_id in (llama,)", True, "model_id in (,llama)"),
    MatchCase("in-double-comma", "model_id in (a,,llama)", True, "model_id in (,a,llama)"),
    MatchCase("keyword-as-key-and-value", "in in (in,notin)", False, "in in (in,notin)"),
    MatchCase("keyword-value", "model_id=notin", False, "model_id=notin"),
    MatchCase("prefixed-key", "example.com/tier notin (gold)", True, "example.com/tier notin (gold)"),
    MatchCase("greater-than", "replicas>2", True, "replicas>2"),
    MatchCase("greater-than-equal-bound", "replicas>3", False, "replicas>3"),
    MatchCase("less-than", "replicas<4", True, "replicas<4"),
    MatchCase("gt-non-integer-label", "model_id>1", False, "model_id>1"),
    MatchCase("gt-absent-label", "tier>1", False, "tier>1"),
    MatchCase("dotted-value", "model_id!=llama-3.1_8b", True, "model_id!=llama-3.1_8b"),
    MatchCase("63-char-value", "tier!=" + "v" * 63, True, "tier!=" + "v" * 63),
]


@pytest.mark.parametrize("case", MATCH_CASES, ids=[c.id for c in MATCH_CASES])
def test_selector_matches_like_kubernetes(case: MatchCase) -> None:
    selector = parse_selector(case.selector)
    assert selector.matches(LABELS) is case.matches
    assert str(selector) == case.canonical
    # The canonical form parses back to the same selector.
    assert parse_selector(str(selector)) == selector


@dataclass(frozen=True)
class InvalidCase:
    id: str
    selector: str
    message_part: str


INVALID_CASES = [
    InvalidCase("double-value", "a=b=c", "found '=', expected: ',' or 'end of string'"),
    InvalidCase("starts-with-operator", "=a", "found '=', expected: !, identifier"),
    InvalidCase("trailing-comma", "a=b,", "found 'end of string', expected: identifier after ','"),
    InvalidCase("leading-comma", ",a", "found ','"),
    InvalidCase("double-comma", "a,,b", "found ',', expected: identifier after ','"),
    InvalidCase("missing-operator", "a b", "found 'b' after key 'a'"),
    InvalidCase("in-without-parens", "a in b", "found 'b', expected: '('"),
    InvalidCase("in-without-values", "a in", "found 'end of string', expected: '('"),
    InvalidCase("unclosed-paren", "a in (b", "found 'end of string', expected: ',' or ')'"),
    InvalidCase("unclosed-empty-paren", "a in (", "expected: ',', ')' or identifier"),
    InvalidCase("space-in-set", "a in (b c)", "found 'c', expected: ',' or ')'"),
    InvalidCase("double-comma-then-close", "a in (b,,)", "found ')', expected: ',' or identifier"),
    InvalidCase("bang-with-value", "!a=b", "found '=', expected: ',' or 'end of string'"),
    InvalidCase("bang-alone", "!", "found 'end of string', expected: identifier"),
    InvalidCase("operator-value", "a==!=", "found '!=', expected: identifier"),
    InvalidCase("bad-value-char", "variant_name=bad$value", "value 'bad$value' of key 'variant_name'"),
    InvalidCase("value-dash-start", "variant_name=-x", "value '-x'"),
    InvalidCase("value-too-long", "tier=" + "v" * 64, "63 characters"),
    InvalidCase("value-slash", "model_id=meta/llama", "value 'meta/llama'"),
    InvalidCase("bad-value-in-set", "tier in (ok,no way)", "found 'way', expected: ',' or ')'"),
    InvalidCase("bad-value-in-set-char", "tier in (ok,n@)", "value 'n@' of key 'tier'"),
    InvalidCase("key-too-long", "k" * 64 + "=v", "no more than 63 characters"),
    InvalidCase("key-bad-char", "ti*er=v", "key 'ti*er'"),
    InvalidCase("key-two-slashes", "a/b/c=v", "at most one '/'"),
    InvalidCase("key-empty-prefix", "/tier=v", "prefix before '/' must be non-empty"),
    InvalidCase("key-empty-name", "example.com/=v", "name part must be non-empty"),
    InvalidCase("key-uppercase-prefix", "Example.com/tier=v", "prefix 'Example.com'"),
    InvalidCase("gt-non-integer", "replicas>two", "must be an integer"),
    InvalidCase("gt-empty", "replicas>", "must be an integer"),
    InvalidCase("gt-negative", "replicas>-1", "value '-1'"),
    InvalidCase("gte-is-not-an-operator", "replicas>=1", "found '=', expected: identifier"),
    InvalidCase("unicode-key", "tïer=v", "key 'tïer'"),
]


@pytest.mark.parametrize("case", INVALID_CASES, ids=[c.id for c in INVALID_CASES])
def test_invalid_selectors_raise_bad_request_naming_the_token(case: InvalidCase) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_selector(case.selector)
    message = str(caught.value)
    assert case.message_part in message
    assert repr(case.selector) in message  # the whole selector is quoted too
    assert caught.value.http_status == 400


def test_parsed_structure() -> None:
    selector = parse_selector("variant_name in (b,a), !legacy, tier")
    assert selector.requirements == (  # sorted by key, as Go's parser returns them
        Requirement("legacy", Operator.DOES_NOT_EXIST),
        Requirement("tier", Operator.EXISTS),
        Requirement("variant_name", Operator.IN, frozenset({"a", "b"})),
    )
    assert parse_selector("") is EVERYTHING
    assert EVERYTHING.empty
    assert EVERYTHING.matches({})


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("variant_name=a", frozenset({"a"})),
        ("variant_name==a,tier=x", frozenset({"a"})),
        ("variant_name in (a,b,c),variant_name in (b,c,d)", frozenset({"b", "c"})),
        ("variant_name in (a),variant_name=b", frozenset()),
        ("variant_name!=a", None),
        ("variant_name notin (a)", None),
        ("variant_name", None),
        ("tier=x", None),
        ("", None),
    ],
    ids=["eq", "eq-and-other", "in-intersection", "contradiction", "neq", "notin", "exists", "other-key", "empty"],
)
def test_required_values_pin_lookups(selector: str, expected: frozenset[str] | None) -> None:
    assert parse_selector(selector).required_values("variant_name") == expected


def test_selector_is_hashable_and_frozen() -> None:
    assert hash(parse_selector("a=b")) == hash(Selector((Requirement("a", Operator.EQUALS, frozenset({"b"})),)))
