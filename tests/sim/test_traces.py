"""The traces carried in the repository (examples/traces): the bytes are the published ones, every file parses,
and the benchmark's scenarios read them from inside the repository (no ../shared needed)."""

from __future__ import annotations

import gzip
import hashlib
import itertools
import re
from pathlib import Path

import pytest

from adapter.sim import scenario as scenario_module
from adapter.sim.workload import load_trace, trace_format

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "examples" / "traces"
SCENARIOS = REPO / "examples" / "scenarios"

ORIGINAL_SHA256 = {
    "azure_llm_2023_code.csv": "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6",
    "azure_llm_2023_conv.csv": "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8",
    "mooncake_conversation_trace.jsonl": "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df",
    "mooncake_synthetic_trace.jsonl": "bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131",
}
"""As published (../shared/traces/README.md, taken from the source repositories)."""
ROWS = {
    "azure_llm_2023_code.csv": 8819,
    "azure_llm_2023_conv.csv": 19366,
    "mooncake_conversation_trace.jsonl": 12031,
    "mooncake_synthetic_trace.jsonl": 3993,
}


def _readme_digests(heading: str) -> dict[str, str]:
    text = (TRACES / "README.md").read_text(encoding="utf-8")
    block = text.split(heading, 1)[1].split("```", 2)[1]
    return {name: digest for digest, name in re.findall(r"([0-9a-f]{64})\s+(\S+)", block)}


@pytest.mark.parametrize("name", sorted(ORIGINAL_SHA256))
def test_trace_is_the_published_file(name: str) -> None:
    data = gzip.decompress((TRACES / f"{name}.gz").read_bytes())
    assert hashlib.sha256(data).hexdigest() == ORIGINAL_SHA256[name]


@pytest.mark.parametrize("name", sorted(ORIGINAL_SHA256))
def test_readme_states_both_digests(name: str) -> None:
    packed = (TRACES / f"{name}.gz").read_bytes()
    assert _readme_digests("SHA-256 of the originals")[name] == ORIGINAL_SHA256[name]
    assert _readme_digests("SHA-256 of the compressed files")[f"{name}.gz"] == hashlib.sha256(packed).hexdigest()


@pytest.mark.parametrize("name", sorted(ORIGINAL_SHA256))
def test_trace_parses_whole(name: str) -> None:
    path = TRACES / f"{name}.gz"
    assert trace_format(path) == ("azure-csv" if name.endswith(".csv") else "mooncake-jsonl")
    rows = list(load_trace(path))
    assert len(rows) == ROWS[name]
    assert rows[0].arrival_s == 0.0
    assert all(a.arrival_s <= b.arrival_s for a, b in itertools.pairwise(rows))


def test_licences_and_attribution_are_carried() -> None:
    readme = (TRACES / "README.md").read_text(encoding="utf-8")
    for needed in ("CC-BY 4.0", "creativecommons.org/licenses/by/4.0", "Splitwise", "Apache-2.0", "FAST 2025"):
        assert needed in readme
    assert "Apache License" in (TRACES / "LICENSE-APACHE-2.0.txt").read_text(encoding="utf-8")


TRACE_SCENARIOS = sorted(p for p in SCENARIOS.rglob("*.yaml") if "trace:" in p.read_text(encoding="utf-8"))


def test_the_trace_workloads_are_found() -> None:
    assert {p.stem for p in TRACE_SCENARIOS} >= {"azure-code", "azure-conv", "mooncake", "conv-two-variants"}


@pytest.mark.parametrize("path", TRACE_SCENARIOS, ids=lambda p: p.stem)
def test_scenarios_read_traces_inside_the_repository(path: Path) -> None:
    scenario = scenario_module.load(path)
    trace = (path.parent / scenario.raw["workload"]["trace"]).resolve()
    assert trace.is_relative_to(REPO), f"{path.name} reads {trace}, outside the repository"
    assert trace.is_file()
