"""The `wva-adapter replay` and `check-config` verbs (DESIGN §3.1/§3.2), run as a user runs them: a subprocess of
the installed console script, from the repository root, with the shared fixtures beside the repository.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .builders import CORE_FIXTURES, REPO_ROOT, SHARED_FIXTURES

CLI = REPO_ROOT / ".venv" / "bin" / "wva-adapter"
SCALE_UP = SHARED_FIXTURES / "seed000-scale-up-cheapest.json"


def wva(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [str(CLI)] if CLI.exists() else [sys.executable, "-m", "adapter"]
    full_env = {k: v for k, v in os.environ.items() if k != "WVA_SCALE_TO_ZERO"}
    full_env.update(env or {})
    return subprocess.run(
        [*command, *map(str, args)],
        check=False,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=full_env,
    )


def rel(path: Path) -> str:
    """The path as a user in the repository root types it (`../shared/fixtures/...`)."""
    return os.path.relpath(path, REPO_ROOT)


# ---- replay ----------------------------------------------------------------------------------------------------


def test_replay_of_every_shared_fixture_passes():
    fixtures = sorted(SHARED_FIXTURES.glob("*.json"))
    assert len(fixtures) >= 4, f"expected the shared fixtures in {SHARED_FIXTURES}"
    result = wva("replay", *map(rel, fixtures))
    assert result.returncode == 0, result.stderr
    documents = json.loads(result.stdout)
    assert isinstance(documents, list)
    assert len(documents) == len(fixtures)
    for doc in documents:
        assert doc["schema"] == "wva-replay-result/v1"
        assert doc["passed"] is True, doc["fixture"]
        assert all(cycle["mismatches"] == [] for cycle in doc["cycles"])


def test_replay_of_one_fixture_prints_one_result_with_the_design_fields():
    result = wva("replay", rel(SCALE_UP))
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    cycle = doc["cycles"][0]
    assert cycle["now"] == "2026-01-01T00:00:00Z"
    decision = cycle["decisions"]["llm/v1-l4"]
    assert decision["desired_replicas"] == 3
    assert decision["analyzer"] == "saturation-percentage-based"
    assert "scale-up" in decision["reason"]
    analysis = cycle["models"]["llm/llama-70b"]["analysis"]
    assert set(analysis) >= {
        "total_replicas",
        "non_saturated_count",
        "avg_spare_kv",
        "avg_spare_queue",
        "should_scale_up",
        "scale_down_safe",
    }
    # kv 0.75/0.76/0.72/0.74 -> mean spare 0.0575; queue 2/2/1/2 -> mean spare 3.25
    assert analysis["avg_spare_kv"] == pytest.approx(0.0575)
    assert analysis["avg_spare_queue"] == pytest.approx(3.25)
    assert (analysis["total_replicas"], analysis["non_saturated_count"]) == (4, 4)


@pytest.mark.parametrize(
    "fixture",
    [pytest.param(p, id=p.stem) for p in sorted(CORE_FIXTURES.glob("*.json")) if not p.name.startswith("v2-")],
)
def test_replay_of_a_multi_cycle_fixture_carries_status_between_cycles(fixture):
    result = wva("replay", rel(fixture))
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert doc["passed"] is True
    assert len(doc["cycles"]) >= 4


@pytest.mark.parametrize("count", [1, 3], ids=["one-fixture", "several-fixtures"])
def test_replay_streams_exactly_the_document_run_builds(count, tmp_path):
    """The CLI writes the result cycle by cycle (issue 22: one cycle's result in memory at a time); the text is
    byte for byte `json.dumps` of the whole document, for one fixture (an object) and several (a list), passing
    and failing ones (mismatches in the middle), multi-cycle ones included."""
    from adapter.replay import fixture, runner

    failing = json.loads(SCALE_UP.read_text())
    failing["cycles"][0]["expect"]["llm/v1-l4"] = {"desired_replicas": 2}
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(failing))
    multi = sorted(p for p in CORE_FIXTURES.glob("*.json") if not p.name.startswith("v2-"))[0]
    paths = [multi, wrong, SCALE_UP][:count]
    documents = []
    for path in paths:
        fx, vas = fixture.load(path)
        documents.append({**runner.run(fx, vas), "fixture": rel(path) if path != wrong else str(wrong)})
    result = wva("replay", *(rel(p) if p != wrong else p for p in paths))
    expected = documents[0] if count == 1 else documents
    assert result.stdout == json.dumps(expected, indent=2) + "\n"


def test_the_core_fixtures_exist():
    names = {p.name for p in CORE_FIXTURES.glob("*.json")}
    assert {
        "retention-clock-outage.json",
        "seed000-timeline-with-protection.json",
        "seed002-optimizer-zero-retention.json",
    } <= names


def test_replay_with_a_wrong_expectation_exits_1_and_lists_the_mismatch(tmp_path):
    doc = json.loads(SCALE_UP.read_text())
    doc["cycles"][0]["expect"]["llm/v1-l4"] = {"desired_replicas": 4}
    doc["cycles"][0]["expect"]["llm/v2-a100"] = {"reason": "no such reason"}
    path = tmp_path / "wrong.json"
    path.write_text(json.dumps(doc))
    result = wva("replay", path)
    assert result.returncode == 1
    out = json.loads(result.stdout)
    assert out["passed"] is False
    mismatches = out["cycles"][0]["mismatches"]
    assert {"variant": "llm/v1-l4", "field": "desired_replicas", "expected": 4, "actual": 3} in mismatches
    assert any(m["variant"] == "llm/v2-a100" and m["field"] == "reason" for m in mismatches)
    assert "FAIL" in result.stderr
    assert "llm/v1-l4: desired_replicas expected 4, got 3" in result.stderr


def test_replay_exits_1_when_any_of_several_fixtures_fails(tmp_path):
    doc = json.loads(SCALE_UP.read_text())
    doc["cycles"][0]["expect"]["llm/v1-l4"] = {"desired_replicas": 2}
    path = tmp_path / "wrong.json"
    path.write_text(json.dumps(doc))
    result = wva("replay", rel(SCALE_UP), path)
    assert result.returncode == 1
    assert [d["passed"] for d in json.loads(result.stdout)] == [True, False]


def _mutate(doc: dict, change: str) -> str:
    doc = copy.deepcopy(doc)
    pod0 = doc["cycles"][0]["pods"][0]
    if change == "schema":
        doc["schema"] = "wva-replay/v0"
    elif change == "negative-queue":
        pod0["metrics"]["queue_length"] = -1
    elif change == "kv-above-one":
        pod0["metrics"]["kv_cache_usage"] = 1.5
    elif change == "min-above-max":
        doc["variant_autoscalings"][1]["spec"].update(minReplicas=5, maxReplicas=3)
    elif change == "unknown-top-level":
        doc["extra"] = True
    elif change == "expect-unknown-va":
        doc["cycles"][0]["expect"] = {"llm/nope": {"desired_replicas": 1}}
    elif change == "bad-now":
        doc["cycles"][0]["now"] = "yesterday"
    elif change == "pod-unknown-va":
        pod0["variant"] = "nope"
    elif change == "no-cycles":
        doc["cycles"] = []
    elif change == "nan":
        pod0["metrics"]["kv_cache_usage"] = "__NAN__"
        return json.dumps(doc).replace('"__NAN__"', "NaN")
    elif change == "not-json":
        return json.dumps(doc)[:-7]
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("change", "needles"),
    [
        pytest.param("schema", ["$.schema", "wva-replay/v0"], id="bad-schema"),
        pytest.param("nan", ["$.cycles[0].pods[0].metrics.kv_cache_usage"], id="json-nan-literal"),
        pytest.param("negative-queue", ["$.cycles[0].pods[0].metrics.queue_length", "-1"], id="negative-queue-length"),
        pytest.param("kv-above-one", ["$.cycles[0].pods[0].metrics.kv_cache_usage", "1.5"], id="kv-above-one"),
        pytest.param(
            "min-above-max", ["$.variant_autoscalings[1]", "minReplicas (5)", "maxReplicas (3)"], id="va-min-above-max"
        ),
        pytest.param("unknown-top-level", ["$.extra", "unknown field"], id="unknown-top-level-field"),
        pytest.param("expect-unknown-va", ["$.cycles[0].expect", "llm/nope"], id="expect-names-no-va"),
        pytest.param("bad-now", ["$.cycles[0].now", "yesterday"], id="bad-now"),
        pytest.param("pod-unknown-va", ["$.cycles[0].pods[0].variant", "nope"], id="pod-names-no-va"),
        pytest.param("no-cycles", ["$.cycles"], id="no-cycles"),
        pytest.param("not-json", ["$", "invalid JSON at line"], id="truncated-json"),
    ],
)
def test_replay_of_an_invalid_fixture_exits_2_naming_the_json_path(tmp_path, change, needles):
    path = tmp_path / f"{change}.json"
    path.write_text(_mutate(json.loads(SCALE_UP.read_text()), change))
    result = wva("replay", path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    assert "invalid fixture" in result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


def test_replay_of_a_missing_file_exits_2(tmp_path):
    result = wva("replay", tmp_path / "absent.json")
    assert result.returncode == 2
    assert "absent.json" in result.stderr


def test_replay_reads_wva_scale_to_zero_from_the_environment(tmp_path):
    # Outage past retention with every minReplicas 0 and no scale-to-zero ConfigMap: the env decides between
    # scenario A (on: all 0) and scenario B (off: cheapest 1).
    doc = json.loads((SHARED_FIXTURES / "seed002-no-metrics-retention-scale-to-zero.json").read_text())
    doc["configmaps"] = [cm for cm in doc["configmaps"] if cm["name"] != "wva-model-scale-to-zero-config"]
    for cycle in doc["cycles"]:
        cycle.pop("expect", None)
    # Retention defaults to 10m: move lastUpdate 11 minutes back.
    for obj in doc["variant_autoscalings"]:
        obj["status"]["desiredOptimizedAlloc"]["lastUpdate"] = "2025-12-31T23:49:00Z"
        obj["status"]["desiredOptimizedAlloc"]["lastRunTime"] = "2025-12-31T23:49:00Z"
    path = tmp_path / "env.json"
    path.write_text(json.dumps(doc))
    on = json.loads(wva("replay", path, env={"WVA_SCALE_TO_ZERO": "true"}).stdout)["cycles"][0]["decisions"]
    off = json.loads(wva("replay", path).stdout)["cycles"][0]["decisions"]
    assert (on["llm/v1-l4"]["desired_replicas"], on["llm/v2-a100"]["desired_replicas"]) == (0, 0)
    assert (off["llm/v1-l4"]["desired_replicas"], off["llm/v2-a100"]["desired_replicas"]) == (1, 0)


# ---- check-config ----------------------------------------------------------------------------------------------

VALID = """\
apiVersion: llmd.ai/v1alpha1
kind: VariantAutoscaling
metadata: {name: llama-l4, namespace: llm}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: llama-l4}
  modelID: llama-70b
  minReplicas: 1
  maxReplicas: 4
  variantCost: "5.0"
---
apiVersion: v1
kind: ConfigMap
metadata: {name: wva-saturation-scaling-config, namespace: workload-variant-autoscaler-system}
data:
  default: |
    kvCacheThreshold: 0.80
    queueLengthThreshold: 5
    kvSpareTrigger: 0.1
    queueSpareTrigger: 3
  llama: |
    model_id: llama-70b
    namespace: llm
    kvCacheThreshold: 0.85
---
apiVersion: v1
kind: ConfigMap
metadata: {name: wva-model-scale-to-zero-config, namespace: workload-variant-autoscaler-system}
data:
  default: |
    enable_scale_to_zero: true
    retention_period: "10m"
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: llama-l4}
"""


def test_check_config_accepts_valid_manifests_and_skips_other_kinds(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(VALID)
    result = wva("check-config", path)
    assert result.returncode == 0, result.stderr
    assert f"{path}#1: VariantAutoscaling llm/llama-l4" in result.stdout
    assert f"{path}#2: ConfigMap wva-saturation-scaling-config (2 entries)" in result.stdout
    assert f"{path}#3: ConfigMap wva-model-scale-to-zero-config (1 entries)" in result.stdout
    assert f"skip  {path}#4" in result.stdout
    assert result.stderr == ""


VA_TEMPLATE = """\
apiVersion: llmd.ai/v1alpha1
kind: VariantAutoscaling
metadata: {{name: bad-va, namespace: llm}}
spec:
  scaleTargetRef: {{kind: Deployment, name: d}}
  modelID: m
{extra}
"""

CM_TEMPLATE = """\
apiVersion: v1
kind: ConfigMap
metadata: {{name: wva-saturation-scaling-config, namespace: workload-variant-autoscaler-system}}
data:
  default: |
{entry}
"""


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        pytest.param(
            VA_TEMPLATE.format(extra="  minReplicas: 4\n  maxReplicas: 2"),
            ["#2", "bad-va", "minReplicas (4)", "maxReplicas (2)"],
            id="va-min-above-max",
        ),
        pytest.param(
            VA_TEMPLATE.format(extra="  variantCost: abc"), ["#2", "variantCost", "'abc'"], id="va-cost-not-decimal"
        ),
        pytest.param(
            VA_TEMPLATE.format(extra="  maxReplica: 3"), ["#2", "spec.maxReplica", "unknown field"], id="va-typo-field"
        ),
        pytest.param(
            CM_TEMPLATE.format(entry="    kvCacheThreshold: 1.5"),
            ["#2", "wva-saturation-scaling-config[default]", "kvCacheThreshold", "1.5"],
            id="cm-threshold-out-of-range",
        ),
        pytest.param(
            CM_TEMPLATE.format(entry="    kvCacheThreshold: [0.8,\n    queueLengthThreshold: 5"),
            ["#2", "[default]", "malformed YAML at line"],
            id="cm-entry-malformed-yaml",
        ),
        pytest.param(
            CM_TEMPLATE.format(entry="    queueSpareTriger: 3"),
            ["#2", "queueSpareTriger", "unknown field"],
            id="cm-unknown-field",
        ),
    ],
)
def test_check_config_rejects_an_invalid_document_naming_file_document_field_and_value(tmp_path, text, needles):
    path = tmp_path / "bad.yaml"
    path.write_text(VALID.split("---\n", maxsplit=1)[0] + "---\n" + text)
    result = wva("check-config", path)
    assert result.returncode == 1
    assert f"{path}#1: VariantAutoscaling llm/llama-l4" in result.stdout  # the valid first document still passes
    errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert errors, result.stderr
    for needle in needles:
        assert any(needle in line and str(path) in line for line in errors), (needle, errors)


def test_check_config_reports_a_malformed_file_with_line_and_column(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("kind: ConfigMap\nmetadata: {name: x\n")
    result = wva("check-config", path)
    assert result.returncode == 1
    assert f"{path}:" in result.stderr
    assert "malformed YAML" in result.stderr


def test_check_config_checks_every_file_and_fails_if_any_is_invalid(tmp_path):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(VALID)
    bad.write_text(VA_TEMPLATE.format(extra="  minReplicas: -1"))
    result = wva("check-config", good, bad)
    assert result.returncode == 1
    assert str(good) in result.stdout
    assert f"{bad}#1" in result.stderr
