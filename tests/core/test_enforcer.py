"""Seed 001, "Scale-to-Zero" and the enforcer stage: `adapter.enforcer.scale_to_zero.enforce` and the
`ConfigSet.scale_to_zero` precedence (per-model entry > global default > WVA_SCALE_TO_ZERO env > off).
"""

from __future__ import annotations

import pytest

from adapter.config.configmaps import SCALE_TO_ZERO_CM
from adapter.enforcer.scale_to_zero import cheapest, enforce

from .builders import CONTROLLER_NS, MODEL, MODEL_KEY, NS, bounds, configset, s2z

ZERO_MIN = [bounds("a", cost=5, min_replicas=0), bounds("b", cost=20, min_replicas=0)]


@pytest.mark.parametrize(
    ("enabled", "request_count", "targets", "expected", "applied"),
    [
        pytest.param(True, 0, {"a": 3, "b": 2}, {"a": 0, "b": 0}, True, id="enabled-and-idle-sets-every-variant-to-0"),
        pytest.param(True, 0.0, {"a": 1, "b": 0}, {"a": 0, "b": 0}, True, id="a-float-zero-count-is-idle"),
        pytest.param(True, None, {"a": 3, "b": 2}, {"a": 3, "b": 2}, False, id="enabled-but-no-answer-is-no-change"),
        pytest.param(True, 4, {"a": 3, "b": 2}, {"a": 3, "b": 2}, False, id="enabled-with-requests-is-no-change"),
        pytest.param(True, 0.5, {"a": 1, "b": 1}, {"a": 1, "b": 1}, False, id="a-fractional-increase-is-traffic"),
        pytest.param(False, 0, {"a": 3, "b": 2}, {"a": 3, "b": 2}, False, id="disabled-idle-with-replicas-no-change"),
        pytest.param(False, 0, {"a": 0, "b": 0}, {"a": 1, "b": 0}, True, id="disabled-all-zero-cheapest-keeps-one"),
        pytest.param(False, None, {"a": 0, "b": 0}, {"a": 1, "b": 0}, True, id="disabled-min-one-ignores-count"),
        pytest.param(False, 9, {"a": 0, "b": 1}, {"a": 0, "b": 1}, False, id="disabled-some-replica-left-is-enough"),
    ],
)
def test_enforce_applies_scale_to_zero_or_the_minimum_one_rule(enabled, request_count, targets, expected, applied):
    out = enforce(targets, variants=ZERO_MIN, request_count=request_count, cfg=s2z(enabled))
    assert dict(out.targets) == expected
    assert (out.applied is not None) is applied


@pytest.mark.parametrize(
    ("variants", "keeper"),
    [
        pytest.param([bounds("b", 5, 0), bounds("a", 5, 0)], "a", id="cost-tie-goes-to-the-alphabetically-first"),
        pytest.param([bounds("a", 20, 0), bounds("b", 5, 0)], "b", id="lowest-cost-wins"),
        # a cost <= 0 counts as upstream's default 10: "free" (0) loses to 5, beats 20
        pytest.param([bounds("free", 0, 0), bounds("five", 5, 0)], "five", id="zero-cost-counts-as-10-vs-5"),
        pytest.param([bounds("free", 0, 0), bounds("dear", 20, 0)], "free", id="zero-cost-counts-as-10-vs-20"),
        pytest.param([bounds("neg", -3, 0), bounds("ten", 10, 0)], "neg", id="negative-cost-ties-10-then-by-name"),
        pytest.param([bounds("zz", 0, 0), bounds("ten", 10, 0)], "ten", id="zero-cost-ties-10-then-by-name"),
    ],
)
def test_minimum_one_goes_to_the_cheapest_variant_with_costs_at_most_zero_counted_as_10(variants, keeper):
    out = enforce({v.name: 0 for v in variants}, variants=variants, request_count=0, cfg=s2z(False))
    assert {n for n, t in out.targets.items() if t} == {keeper}
    assert out.targets[keeper] == 1
    assert cheapest(variants).name == keeper


@pytest.mark.parametrize("enabled", [pytest.param(True, id="enabled"), pytest.param(False, id="disabled")])
def test_any_variant_with_min_replicas_above_zero_skips_the_enforcer(enabled):
    variants = [bounds("a", cost=5, min_replicas=0), bounds("b", cost=20, min_replicas=1)]
    targets = {"a": 0, "b": 0} if not enabled else {"a": 2, "b": 1}
    out = enforce(targets, variants=variants, request_count=0, cfg=s2z(enabled))
    assert dict(out.targets) == targets
    assert out.applied is None


def test_enforce_with_no_variants_changes_nothing():
    assert dict(enforce({}, variants=[], request_count=0, cfg=s2z(True)).targets) == {}


# ---- configuration precedence -----------------------------------------------------------------------------


def _cm(default: str | None, entry: str | None) -> list:
    data = {}
    if default is not None:
        data["default"] = default
    if entry is not None:
        data["llama"] = f"model_id: {MODEL}\n{entry}"
    return [(CONTROLLER_NS, SCALE_TO_ZERO_CM, data)] if data else []


@pytest.mark.parametrize(
    ("default", "entry", "env", "enabled"),
    [
        pytest.param(None, None, None, False, id="nothing-set-is-off"),
        pytest.param(None, None, "true", True, id="env-true-turns-it-on"),
        pytest.param(None, None, "TRUE", True, id="env-is-case-insensitive"),
        pytest.param(None, None, "1", False, id="env-other-than-true-is-off"),
        pytest.param("enable_scale_to_zero: false\n", None, "true", False, id="global-default-beats-env"),
        pytest.param("enable_scale_to_zero: true\n", None, None, True, id="global-default-on"),
        pytest.param("retention_period: 5m\n", None, "true", True, id="default-without-the-field-falls-to-env"),
        pytest.param(
            "enable_scale_to_zero: true\n", "enable_scale_to_zero: false\n", "true", False, id="per-model-beats-default"
        ),
        pytest.param(
            "enable_scale_to_zero: false\n", "enable_scale_to_zero: true\n", None, True, id="per-model-turns-it-on"
        ),
        pytest.param(
            "enable_scale_to_zero: true\n", "retention_period: 2m\n", None, True, id="per-model-without-field-inherits"
        ),
    ],
)
def test_scale_to_zero_precedence_is_per_model_then_default_then_env_then_off(default, entry, env, enabled):
    cs = configset(saturation=None, env=env, extra=_cm(default, entry))
    cfg, _ = cs.scale_to_zero(MODEL_KEY)
    assert cfg.enabled is enabled


@pytest.mark.parametrize(
    ("default", "entry", "retention_s"),
    [
        pytest.param(None, None, 600.0, id="ten-minutes-by-default"),
        pytest.param("retention_period: 5m\n", None, 300.0, id="from-the-default-entry"),
        pytest.param("retention_period: 5m\n", "retention_period: 90s\n", 90.0, id="per-model-wins"),
    ],
)
def test_retention_period_comes_from_the_most_specific_entry(default, entry, retention_s):
    cfg, _ = configset(saturation=None, extra=_cm(default, entry)).scale_to_zero(MODEL_KEY)
    assert cfg.retention_period_s == retention_s


def test_a_per_model_scale_to_zero_entry_for_another_model_does_not_apply():
    raw = [(CONTROLLER_NS, SCALE_TO_ZERO_CM, {"other": "model_id: other/model\nenable_scale_to_zero: true\n"})]
    cfg, _ = configset(saturation=None, extra=raw).scale_to_zero(MODEL_KEY)
    assert cfg.enabled is False


def test_a_namespace_local_scale_to_zero_default_overrides_the_global_default():
    raw = [
        (CONTROLLER_NS, SCALE_TO_ZERO_CM, {"default": "enable_scale_to_zero: false\nretention_period: 5m\n"}),
        (NS, SCALE_TO_ZERO_CM, {"default": "enable_scale_to_zero: true\n"}),
    ]
    cfg, _ = configset(saturation=None, extra=raw).scale_to_zero(MODEL_KEY)
    assert cfg.enabled is True
    assert cfg.retention_period_s == 300.0  # inherited from the global default, field by field
