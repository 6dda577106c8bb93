"""Configuration: WVA ConfigMap parsing and layering (seed 000/001, research §6.5 and the documented deviations),
VariantAutoscaling validation (seed 001 "Spec"), and what the engine reads from a pod template.
"""

from __future__ import annotations

import pytest

from adapter.config import podtemplate
from adapter.config.configmaps import (
    QUEUEING_CM,
    SATURATION_CM,
    SCALE_TO_ZERO_CM,
    ConfigSet,
    SaturationConfig,
    parse_configmap,
)
from adapter.config.va import parse_va, status_from_dict
from adapter.domain.errors import ManifestError
from adapter.domain.ids import ModelKey
from adapter.domain.snapshot import ConditionType, VllmArgs

from .builders import CONTROLLER_NS, MODEL, MODEL_KEY, NS, T0

# ---- ConfigMap parsing ---------------------------------------------------------------------------------------


def parse(name: str, **data: str):
    return parse_configmap(namespace=CONTROLLER_NS, name=name, data=data)


def test_a_valid_saturation_default_entry_parses_every_field():
    cm = parse(
        SATURATION_CM,
        default="kvCacheThreshold: 0.85\nqueueLengthThreshold: 6\nkvSpareTrigger: 0.15\nqueueSpareTrigger: 2\n"
        "enableLimiter: true\ntransitionTimeout: 2m\n",
    )
    assert cm.errors == ()
    entry = cm.default
    assert (entry.kv_cache_threshold, entry.queue_length_threshold) == (0.85, 6)
    assert (entry.kv_spare_trigger, entry.queue_spare_trigger) == (0.15, 2)
    assert entry.enable_limiter is True
    assert entry.transition_timeout == "2m"


@pytest.mark.parametrize(
    ("name", "data", "needles"),
    [
        pytest.param(
            SATURATION_CM,
            {"default": "kvCacheThreshold: 0.8\nkvCacheThresold: 0.9\n"},
            ["[default]", "kvCacheThresold", "unknown field"],
            id="unknown-field-is-named",
        ),
        pytest.param(
            SATURATION_CM,
            {"default": "kvCacheThreshold: 0.8\nqueueLengthThreshold: [5,\n"},
            ["[default]", "malformed YAML", "line 3", "column 1"],
            id="malformed-yaml-has-line-and-column",
        ),
        pytest.param(
            SATURATION_CM,
            {"default": "kvCacheThreshold: 1.5\n"},
            ["kvCacheThreshold", "1.5", "less than or equal to 1"],
            id="kv-cache-threshold-above-one",
        ),
        pytest.param(
            SATURATION_CM,
            {"default": "queueSpareTrigger: -1\n"},
            ["queueSpareTrigger", "-1", "greater than or equal to 0"],
            id="negative-queue-spare-trigger",
        ),
        pytest.param(
            SATURATION_CM,
            {"llama": "kvCacheThreshold: 0.7\n"},
            ["[llama]", "model_id"],
            id="per-model-entry-without-model-id",
        ),
        pytest.param(
            SATURATION_CM,
            {"default": "namespace: llm\nkvCacheThreshold: 0.7\n"},
            ["[default]", "namespace", "model_id"],
            id="namespace-without-model-id",
        ),
        pytest.param(
            SATURATION_CM, {"default": "- 0.8\n- 5\n"}, ["[default]", "YAML mapping", "list"], id="not-a-mapping"
        ),
        pytest.param(
            SATURATION_CM,
            {"default": "transitionTimeout: soon\n"},
            ["transitionTimeout", "soon"],
            id="transition-timeout-not-a-duration",
        ),
        pytest.param(
            SCALE_TO_ZERO_CM,
            {"default": "retention_period: 0s\n"},
            ["retention_period", "positive duration"],
            id="zero-retention-period",
        ),
        pytest.param(
            SCALE_TO_ZERO_CM,
            {"default": "enable_scale_to_zero: maybe\n"},
            ["enable_scale_to_zero", "maybe"],
            id="enable-scale-to-zero-not-a-bool",
        ),
        pytest.param(
            QUEUEING_CM,
            {"default": "targetTTFT: 500\n"},
            ["[default]", "targetTTFT and targetITL"],
            id="queueing-targets-both-or-neither-ttft-only",
        ),
        pytest.param(
            QUEUEING_CM,
            {"slo": f"model_id: {MODEL}\ntargetITL: 100\n"},
            ["[slo]", "targetTTFT and targetITL"],
            id="queueing-targets-both-or-neither-itl-only",
        ),
        pytest.param(QUEUEING_CM, {"default": "sloMultiplier: 1\n"}, ["sloMultiplier", "greater than 1"], id="k-1"),
        pytest.param(QUEUEING_CM, {"default": "sloMultiplier: 0.5\n"}, ["sloMultiplier", "0.5"], id="k-below-1"),
        pytest.param(QUEUEING_CM, {"default": "sloMultiplier: -3\n"}, ["sloMultiplier", "-3"], id="k-negative"),
    ],
)
def test_an_invalid_configmap_entry_is_dropped_with_a_message_that_names_it(name, data, needles):
    cm = parse(name, **data)
    assert cm.entries == {}
    assert len(cm.errors) >= 1
    text = " | ".join(cm.errors)
    assert f"ConfigMap {CONTROLLER_NS}/{name}" in text
    for needle in needles:
        assert needle in text, (needle, text)


def test_an_invalid_entry_does_not_take_the_valid_ones_with_it():
    cm = parse(SATURATION_CM, default="kvCacheThreshold: 0.7\n", broken="kvCacheThreshold: 2\n")
    assert set(cm.entries) == {"default"}
    assert len(cm.errors) == 1


@pytest.mark.parametrize(
    ("text", "multiplier"),
    [
        pytest.param("sloMultiplier: 3.0\n", 3.0, id="three"),
        pytest.param("sloMultiplier: 1.5\n", 1.5, id="just-above-one"),
        pytest.param("sloMultiplier: 0\n", 3.0, id="zero-means-unset-as-upstream"),
        pytest.param("tuningEnabled: false\n", 3.0, id="unset-defaults-to-3"),
    ],
)
def test_valid_queueing_multipliers_are_accepted(text, multiplier):
    cs = ConfigSet.from_raw([(CONTROLLER_NS, QUEUEING_CM, {"default": text})])
    assert cs.errors() == []
    cfg, _ = cs.queueing(MODEL_KEY)
    assert cfg.slo_multiplier == multiplier


def test_queueing_targets_given_together_make_an_explicit_slo():
    entry = f"model_id: {MODEL}\nnamespace: {NS}\ntargetTTFT: 500\ntargetITL: 100\n"
    cs = ConfigSet.from_raw([(CONTROLLER_NS, QUEUEING_CM, {"default": "sloMultiplier: 4\n", "llama": entry})])
    cfg, _ = cs.queueing(MODEL_KEY)
    assert (cfg.target_ttft_ms, cfg.target_itl_ms, cfg.explicit_slo) == (500, 100, True)
    assert cfg.slo_multiplier == 4


def test_parse_configmap_rejects_a_configmap_that_is_not_a_wva_one():
    with pytest.raises(ValueError, match="not a WVA ConfigMap"):
        parse_configmap(namespace=CONTROLLER_NS, name="kube-root-ca.crt", data={})


# ---- saturation layering ----------------------------------------------------------------------------------


def saturation(model: ModelKey = MODEL_KEY, **maps: dict[str, str]) -> tuple[SaturationConfig, list[str]]:
    """maps: `glob=` global data, `local=` namespace-local data (namespace of `model`)."""
    raw = []
    if "glob" in maps:
        raw.append((CONTROLLER_NS, SATURATION_CM, maps["glob"]))
    if "local" in maps:
        raw.append((model.namespace, SATURATION_CM, maps["local"]))
    return ConfigSet.from_raw(raw).saturation(model)


def test_a_missing_saturation_configmap_gives_the_recommended_thresholds_and_a_warning():
    cfg, warnings = saturation()
    assert (cfg.kv_cache_threshold, cfg.queue_length_threshold) == (0.80, 5.0)
    assert (cfg.kv_spare_trigger, cfg.queue_spare_trigger) == (0.10, 3.0)
    assert cfg.transition_timeout_s == 300.0
    assert len(warnings) == 1
    assert SATURATION_CM in warnings[0]
    assert "recommended thresholds" in warnings[0]


def test_a_per_model_entry_inherits_every_field_it_leaves_unset_from_the_default():
    cfg, warnings = saturation(
        glob={
            "default": "kvCacheThreshold: 0.7\nqueueLengthThreshold: 8\nkvSpareTrigger: 0.2\n",
            "llama": f"model_id: {MODEL}\nqueueLengthThreshold: 4\n",
        }
    )
    assert warnings == []
    assert cfg.kv_cache_threshold == 0.7  # from default
    assert cfg.queue_length_threshold == 4  # from the entry
    assert cfg.kv_spare_trigger == 0.2  # from default
    assert cfg.queue_spare_trigger == 3.0  # recommended (nobody set it)


def test_a_namespace_local_default_overrides_the_global_default_field_by_field():
    cfg, _ = saturation(
        glob={"default": "kvCacheThreshold: 0.7\nqueueLengthThreshold: 8\n"},
        local={"default": "kvCacheThreshold: 0.9\n"},
    )
    assert (cfg.kv_cache_threshold, cfg.queue_length_threshold) == (0.9, 8)


def test_layers_apply_in_the_documented_order():
    # recommended < global default < local default < global entry < local entry, field by field.
    cfg, _ = saturation(
        glob={
            "default": "kvCacheThreshold: 0.6\nqueueLengthThreshold: 6\nkvSpareTrigger: 0.2\nqueueSpareTrigger: 2\n",
            "llama": f"model_id: {MODEL}\nqueueLengthThreshold: 7\nkvSpareTrigger: 0.25\n",
        },
        local={
            "default": "kvCacheThreshold: 0.65\nqueueLengthThreshold: 9\n",
            "llama": f"model_id: {MODEL}\nkvSpareTrigger: 0.3\n",
        },
    )
    assert cfg.kv_cache_threshold == 0.65  # local default beats global default
    assert cfg.queue_length_threshold == 7  # global per-model entry beats local default
    assert cfg.kv_spare_trigger == 0.3  # local per-model entry beats global per-model entry
    assert cfg.queue_spare_trigger == 2  # only the global default set it


@pytest.mark.parametrize(
    ("entry", "model", "applies"),
    [
        pytest.param(f"model_id: {MODEL}\nnamespace: {NS}\n", MODEL_KEY, True, id="model-and-namespace-match"),
        pytest.param(f"model_id: {MODEL}\nnamespace: staging\n", MODEL_KEY, False, id="other-namespace"),
        pytest.param(f"model_id: {MODEL}\n", ModelKey("staging", MODEL), True, id="no-namespace-any-namespace"),
        pytest.param("model_id: meta/llama-3.1-8b\n", MODEL_KEY, False, id="other-model"),
    ],
)
def test_a_per_model_entry_matches_on_its_model_id_and_namespace_fields_not_its_key(entry, model, applies):
    cfg, _ = saturation(
        model,
        glob={"default": "kvCacheThreshold: 0.8\n", "any-key-name": entry + "kvCacheThreshold: 0.55\n"},
    )
    assert cfg.kv_cache_threshold == (0.55 if applies else 0.8)


def test_an_upstream_style_hash_key_without_model_id_fields_is_rejected_with_a_message():
    # Seed 000's "{modelID}#{namespace}" data key is not how we match (documented deviation): the entry must
    # carry model_id, otherwise it is reported.
    cs = ConfigSet.from_raw([(CONTROLLER_NS, SATURATION_CM, {"meta/llama-70b#production": "kvCacheThreshold: 0.85\n"})])
    assert any("model_id" in e for e in cs.errors())


def test_a_kv_spare_trigger_above_the_kv_cache_threshold_falls_back_to_the_recommended_thresholds():
    cfg, warnings = saturation(glob={"default": "kvCacheThreshold: 0.3\nkvSpareTrigger: 0.5\n"})
    assert (cfg.kv_cache_threshold, cfg.kv_spare_trigger) == (0.80, 0.10)
    assert any("kvSpareTrigger 0.5 exceeds kvCacheThreshold 0.3" in w for w in warnings)


def test_the_transition_timeout_is_configurable():
    cfg, _ = saturation(glob={"default": "transitionTimeout: 2m\n"})
    assert cfg.transition_timeout_s == 120.0


def test_configmap_errors_surface_as_warnings_for_the_models_they_apply_to():
    cfg, warnings = saturation(glob={"default": "kvCacheThreshold: 0.7\n", "bad": "kvCacheThreshold: 7\n"})
    assert cfg.kv_cache_threshold == 0.7
    assert any("[bad]" in w for w in warnings)


@pytest.mark.parametrize("kind", ["saturation", "scale_to_zero", "queueing"])
def test_a_models_layered_config_is_resolved_once_per_set_and_its_warnings_are_the_callers_own(kind):
    glob = {"default": "kvCacheThreshold: 0.7\n", "bad": "kvCacheThreshold: 7\n"}
    cs = ConfigSet.from_raw([(CONTROLLER_NS, name, glob) for name in (SATURATION_CM, SCALE_TO_ZERO_CM, QUEUEING_CM)])
    resolve = getattr(cs, kind)
    first_cfg, first_warnings = resolve(MODEL_KEY)
    fresh = getattr(ConfigSet.from_raw(cs.sources), kind)(MODEL_KEY)
    assert (first_cfg, first_warnings) == fresh  # the memo answers what resolving afresh answers
    first_warnings.append("the caller's own note")
    again_cfg, again_warnings = resolve(MODEL_KEY)
    assert again_cfg is first_cfg  # resolved once
    assert again_warnings == fresh[1]  # a caller's edit does not reach the next caller
    other = ModelKey("staging", MODEL)
    assert resolve(other) == getattr(ConfigSet.from_raw(cs.sources), kind)(other)


# ---- VariantAutoscaling ------------------------------------------------------------------------------------


def va(**spec_fields) -> dict:
    spec = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-l4"}, "modelID": MODEL}
    spec.update(spec_fields)
    return {
        "apiVersion": "llmd.ai/v1alpha1",
        "kind": "VariantAutoscaling",
        "metadata": {"name": "llama-l4", "namespace": NS},
        "spec": spec,
    }


def test_va_defaults_are_min_1_max_2_and_cost_10():
    spec = parse_va(va()).to_spec()
    assert (spec.min_replicas, spec.max_replicas, spec.cost) == (1, 2, 10.0)
    assert (spec.target_kind, spec.target_name, spec.model_id) == ("Deployment", "llama-l4", MODEL)


def test_the_accelerator_label_fills_the_spec_accelerator():
    obj = va()
    obj["metadata"]["labels"] = {"inference.optimization/acceleratorName": "L4"}
    assert parse_va(obj).to_spec().accelerator == "L4"


@pytest.mark.parametrize(
    ("fields", "needles"),
    [
        pytest.param({"minReplicas": 3, "maxReplicas": 1}, ["minReplicas (3)", "maxReplicas (1)"], id="min-above-max"),
        pytest.param({"minReplicas": 5}, ["minReplicas (5)", "maxReplicas (2)"], id="min-above-the-default-max"),
        pytest.param({"minReplicas": -1}, ["minReplicas", "-1"], id="negative-min"),
        pytest.param({"maxReplicas": 0}, ["maxReplicas", "0"], id="zero-max"),
        pytest.param({"replicas": 3}, ["spec.replicas", "unknown field"], id="unknown-spec-field"),
        pytest.param({"modelID": ""}, ["modelID"], id="empty-model-id"),
        pytest.param(
            {"scaleTargetRef": {"kind": "ReplicaSet", "name": "x"}}, ["scaleTargetRef.kind", "ReplicaSet"], id="kind"
        ),
    ],
)
def test_an_invalid_va_spec_is_rejected_with_a_message_naming_field_and_value(fields, needles):
    with pytest.raises(ManifestError) as info:
        parse_va(va(**fields))
    message = str(info.value)
    assert "llama-l4" in message
    for needle in needles:
        assert needle in message, (needle, message)


@pytest.mark.parametrize(
    "cost",
    [
        pytest.param("abc", id="letters"),
        pytest.param("-1", id="negative"),
        pytest.param(" 5", id="leading-space"),
        pytest.param("5 ", id="trailing-space"),
        pytest.param("+5", id="plus-sign"),
        pytest.param("NaN", id="nan"),
        pytest.param("inf", id="infinity"),
        # The CRD validates variantCost against ^\d+(\.\d+)?$ (research §6.1), so the API server rejects these;
        # check-config must not pass a manifest that `kubectl apply` refuses.
        pytest.param("1e3", id="exponent"),
        pytest.param("1_000", id="python-digit-separator"),
        pytest.param(".5", id="no-integer-part"),
        pytest.param("5.", id="no-fraction-digits"),
    ],
)
def test_a_variant_cost_that_is_not_a_plain_decimal_is_rejected(cost):
    with pytest.raises(ManifestError) as info:
        parse_va(va(variantCost=cost))
    assert "variantCost" in str(info.value)
    assert repr(cost) in str(info.value)


@pytest.mark.parametrize(
    ("cost", "value"),
    [
        pytest.param("5", 5.0, id="integer"),
        pytest.param("5.0", 5.0, id="decimal"),
        pytest.param("10.25", 10.25, id="two-decimals"),
        pytest.param("0", 0.0, id="zero"),
    ],
)
def test_a_plain_decimal_variant_cost_is_accepted(cost, value):
    assert parse_va(va(variantCost=cost)).to_spec().cost == value


def test_every_problem_of_a_va_is_reported_at_once():
    # parse_va's contract: "raise ManifestError with every problem, each naming its field and value".
    with pytest.raises(ManifestError) as info:
        parse_va(va(minReplicas=4, maxReplicas=2, replicas=3))
    message = str(info.value)
    assert "spec.replicas" in message
    assert "minReplicas (4)" in message


def test_va_status_is_read_with_its_times_and_conditions():
    status = status_from_dict(
        {
            "desiredOptimizedAlloc": {
                "numReplicas": 3,
                "reason": "Fallback: preserving previous allocation (no optimizer solution)",
                "lastRunTime": "2026-01-01T00:01:00Z",
                "lastUpdate": "2026-01-01T00:00:00Z",
                "accelerator": "L4",
            },
            "actuation": {"applied": True},
            "conditions": [
                {"type": "MetricsAvailable", "status": "False", "reason": "MetricsMissing", "message": "m"},
                {"type": "SomethingElse", "status": "True"},
            ],
        }
    )
    assert status.desired is not None
    assert (status.desired.num_replicas, status.desired.accelerator) == (3, "L4")
    assert (status.desired.last_run_time_s, status.desired.last_update_s) == (T0 + 60, T0)
    assert status.applied is True
    assert [c.type for c in status.conditions] == [ConditionType.METRICS_AVAILABLE]
    assert status.conditions[0].status is False


def test_a_va_status_without_last_update_reads_as_a_first_run():
    status = status_from_dict({"desiredOptimizedAlloc": {"numReplicas": 2, "lastRunTime": "2026-01-01T00:00:00Z"}})
    assert status.desired is not None
    assert status.desired.last_update_s is None


# ---- pod template ------------------------------------------------------------------------------------------


def template(*containers: dict, **spec) -> dict:
    return {"spec": {"containers": list(containers), **spec}}


def container(args=None, command=None, requests=None, limits=None, env=None) -> dict:
    out: dict = {"name": "vllm", "image": "vllm/vllm-openai"}
    if args is not None:
        out["args"] = args
    if command is not None:
        out["command"] = command
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    if resources:
        out["resources"] = resources
    if env is not None:
        out["env"] = env
    return out


@pytest.mark.parametrize(
    ("tmpl", "gpus"),
    [
        pytest.param(template(container(requests={"nvidia.com/gpu": "2"})), 2, id="nvidia-request"),
        pytest.param(
            template(container(requests={"nvidia.com/gpu": 1}), container(requests={"nvidia.com/gpu": 1})),
            2,
            id="summed-over-containers",
        ),
        pytest.param(template(container(requests={"amd.com/gpu": "4"})), 4, id="amd"),
        pytest.param(template(container(requests={"intel.com/gpu": "1", "cpu": "8"})), 1, id="intel"),
        pytest.param(template(container(limits={"nvidia.com/gpu": "8"})), 8, id="limits-only"),
        # The usual GPU manifest: CPU/memory requests, GPUs only under limits (Kubernetes defaults a missing
        # request to its limit). The docstring promises "requests (falling back to limits)".
        pytest.param(
            template(container(requests={"cpu": "4", "memory": "16Gi"}, limits={"nvidia.com/gpu": "2"})),
            2,
            id="gpu-under-limits-with-cpu-requests",
        ),
        pytest.param(template(container(requests={"cpu": "4"})), 1, id="no-gpu-counts-as-one"),
        pytest.param(template(container(requests={"nvidia.com/gpu": "0"})), 1, id="zero-counts-as-one"),
        pytest.param({}, 1, id="empty-template"),
    ],
)
def test_gpus_per_replica_sums_gpu_requests_over_containers(tmpl, gpus):
    assert podtemplate.gpus_per_replica(tmpl) == gpus


@pytest.mark.parametrize(
    ("spec", "accelerator"),
    [
        pytest.param(
            {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}, "NVIDIA-H100-80GB-HBM3", id="nv"
        ),
        pytest.param({"nodeSelector": {"amd.com/gpu.product-name": "MI300X"}}, "MI300X", id="amd"),
        pytest.param({"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"}}, "nvidia-l4", id="gke"),
        pytest.param({"nodeSelector": {"kubernetes.io/arch": "amd64"}}, "", id="unrelated-selector"),
        pytest.param(
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["A100", "H100"]}
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
            "A100",
            id="required-affinity-first-value",
        ),
        pytest.param(
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "nvidia.com/gpu.product", "operator": "NotIn", "values": ["T4"]}
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
            "",
            id="not-in-is-ignored",
        ),
    ],
)
def test_the_accelerator_comes_from_the_node_selector_or_required_node_affinity(spec, accelerator):
    assert podtemplate.accelerator(template(container(), **spec)) == accelerator


def test_the_node_selector_wins_over_affinity():
    spec = {
        "nodeSelector": {"nvidia.com/gpu.product": "L4"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["A100"]}]}
                    ]
                }
            }
        },
    }
    assert podtemplate.accelerator(template(container(), **spec)) == "L4"


SCRIPT = """set -e
echo starting
exec vllm serve meta/llama-3.1-8b \\
  --max-num-seqs 64 \\
  --max-model-len=4096 \\
  --tensor-parallel-size 2 \\
  --gpu-memory-utilization "0.95"
"""


@pytest.mark.parametrize(
    ("cont", "expected"),
    [
        pytest.param(container(args=["--max-num-seqs=64"]), {"max_num_seqs": 64}, id="equals-form"),
        pytest.param(container(args=["--max-num-seqs", "64"]), {"max_num_seqs": 64}, id="separate-value"),
        pytest.param(
            container(command=["python3", "-m", "vllm.entrypoints.openai.api_server"], args=["--block-size", "32"]),
            {"block_size": 32},
            id="command-plus-args",
        ),
        pytest.param(
            container(command=["/bin/bash", "-c"], args=[SCRIPT]),
            {"max_num_seqs": 64, "max_model_len": 4096, "tensor_parallel_size": 2, "gpu_memory_utilization": 0.95},
            id="bash-c-multi-line-script",
        ),
        pytest.param(
            container(command=["sh", "-c", "vllm serve m --max-num-batched-tokens 4096 --enforce-eager"]),
            {"max_num_batched_tokens": 4096, "enforce_eager": True},
            id="sh-c-one-line",
        ),
        pytest.param(
            container(args=["--max-num-seqs", "lots", "--kv-cache-dtype", "fp8"]),
            {"max_num_seqs": 256, "kv_cache_dtype": "fp8"},
            id="unparseable-number-is-ignored",
        ),
        pytest.param(
            container(args=["--num-gpu-blocks-override=1000"], env=[{"name": "VLLM_USE_V1", "value": "0"}]),
            {"num_gpu_blocks_override": 1000, "v1_engine": False, "chunked_prefill": False},
            id="vllm-use-v1-0-is-v0-without-chunked-prefill",
        ),
        pytest.param(
            container(args=["--enforce-eager", "--max-num-seqs", "64"]),
            {"enforce_eager": True, "max_num_seqs": 64},
            id="a-flag-does-not-swallow-the-next-option",
        ),
        pytest.param(container(args=[]), {}, id="no-args-are-the-defaults"),
    ],
)
def test_vllm_arguments_are_read_from_the_pod_template(cont, expected):
    args = podtemplate.vllm_args(template(cont))
    defaults = VllmArgs()
    for field_name in VllmArgs.__dataclass_fields__:
        want = expected.get(field_name, getattr(defaults, field_name))
        assert getattr(args, field_name) == want, field_name


def test_a_later_container_overrides_an_earlier_one():
    args = podtemplate.vllm_args(
        template(container(args=["--max-num-seqs", "32"]), container(args=["--max-num-seqs", "128"]))
    )
    assert args.max_num_seqs == 128


@pytest.mark.parametrize(
    ("args", "tokens"),
    [
        pytest.param(VllmArgs(max_num_batched_tokens=1024), 1024, id="explicit"),
        pytest.param(VllmArgs(), 8192, id="v1-chunked"),
        pytest.param(VllmArgs(v1_engine=False), 2048, id="v0-chunked"),
        pytest.param(VllmArgs(v1_engine=False, chunked_prefill=False, max_model_len=4096), 4096, id="v0-long-context"),
        pytest.param(VllmArgs(v1_engine=False, chunked_prefill=False, max_model_len=1024), 2048, id="v0-short-context"),
    ],
)
def test_effective_max_batched_tokens_follows_the_upstream_rules(args, tokens):
    assert args.effective_max_batched_tokens == tokens


def test_a_v0_template_reads_as_v0_end_to_end():
    args = podtemplate.vllm_args(
        template(container(args=["--max-model-len", "8192"], env=[{"name": "VLLM_USE_V1", "value": "0"}]))
    )
    # V0 without chunked prefill: max_model_len 8192 > 2048 -> 8192 batched tokens.
    assert args.effective_max_batched_tokens == 8192
