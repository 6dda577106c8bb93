"""The Helm chart's copies of the kustomize sources (the CRD in crds/, the examples in files/) are the same bytes,
and its defaults the same values, so that `make unit` catches a drift without helm. The chart's rendering is
compared object by object with the kustomizations' in tests/e2e_k8s/test_helm_chart.py (it needs the helm
binary of `make e2e-bins`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from adapter import __version__
from adapter.config.configmaps import QUEUEING_CM, SATURATION_CM, SCALE_TO_ZERO_CM
from tests.manifests.render import MANIFESTS, REPO

CHART = REPO / "charts" / "wva-adapter"
COPIES = sorted([*(CHART / "files").rglob("*.yaml"), *(CHART / "crds").glob("*.yaml")])


def _source_of(copy: Path) -> Path:
    name = copy.name
    if copy.parent.name != "examples":
        return MANIFESTS / "crd" / name
    if name.startswith("hpa-"):
        return MANIFESTS / "examples" / "hpa" / name
    if name.startswith("scaledobject-"):
        return MANIFESTS / "examples" / "keda" / name
    return MANIFESTS / "examples" / name


@pytest.mark.parametrize("copy", COPIES, ids=[str(p.relative_to(CHART)) for p in COPIES])
def test_chart_file_is_the_manifest(copy: Path) -> None:
    assert copy.read_bytes() == _source_of(copy).read_bytes(), f"{copy} differs from {_source_of(copy)}"


def test_every_example_and_the_crd_are_copied() -> None:
    sources = {p.name for p in (MANIFESTS / "examples").rglob("*.yaml") if p.name != "kustomization.yaml"}
    assert {p.name for p in (CHART / "files" / "examples").glob("*.yaml")} == sources
    assert [p.name for p in (CHART / "crds").iterdir()] == ["llmd.ai_variantautoscalings.yaml"]


def test_default_analyzer_configmaps_are_the_manifests() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())["analyzerConfig"]
    shipped = {
        d["metadata"]["name"]: d["data"]
        for d in yaml.safe_load_all((MANIFESTS / "deploy" / "configmaps.yaml").read_text())
    }
    assert values["saturation"] == shipped[SATURATION_CM]
    assert values["scaleToZero"] == shipped[SCALE_TO_ZERO_CM]
    assert values["queueingModel"] == shipped[QUEUEING_CM]


def test_chart_versions_follow_the_package() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    assert chart["apiVersion"] == "v2"
