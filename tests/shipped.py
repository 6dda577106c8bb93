"""The ConfigMaps the project ships (manifests/deploy/configmaps.yaml), read as the benchmarks and tests use them.

A module of its own, importing only yaml and the adapter's ConfigSet: the cycle benchmarks build the shipped
configuration in the process whose resident set they measure, and reading it through tests/bench_sim.py imported
the simulator, its oracle and scipy.stats and scipy.optimize there, ~40 MB that `wva-adapter serve` never holds
(docs/benchmarks/scale.md, item 36)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from adapter.config.configmaps import ConfigSet

REPO = Path(__file__).resolve().parents[1]
SHIPPED_CONFIGMAPS = REPO / "manifests" / "deploy" / "configmaps.yaml"


def shipped_configmaps() -> list[dict[str, Any]]:
    """The ConfigMaps in manifests/deploy/configmaps.yaml as scenario `configmaps:` entries."""
    entries = []
    for doc in yaml.safe_load_all(SHIPPED_CONFIGMAPS.read_text(encoding="utf-8")):
        if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
            meta = doc["metadata"]
            entries.append({"namespace": meta["namespace"], "name": meta["name"], "data": dict(doc.get("data") or {})})
    return entries


def configset_of(entries: list[dict[str, Any]]) -> ConfigSet:
    """ConfigMap entries (as `shipped_configmaps` gives them) as the ConfigSet `serve` builds from them, the
    controller's namespace that of the first entry."""
    raw = [(e["namespace"], e["name"], e["data"]) for e in entries]
    return ConfigSet.from_raw(raw, controller_namespace=entries[0]["namespace"])
