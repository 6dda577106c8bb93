"""The exact program's solver is imported where a program is solved, not with the module: a process that never
runs `optimizer: exact` never holds scipy.optimize and scipy.sparse (~26 MB resident; adapter/optimizer/exact.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOLVER_MODULES = ("scipy.optimize", "scipy.sparse")


def _loaded_after(code: str) -> list[str]:
    """The solver modules loaded in a fresh interpreter after `code` runs."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {SOLVER_MODULES!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    loaded: list[str] = json.loads(out.stdout.splitlines()[-1])
    return loaded


@pytest.mark.parametrize(
    "module",
    ["adapter.app.serve", "adapter.engine", "adapter.optimizer.exact", "adapter.cli"],
    ids=["serve", "engine", "exact-module", "cli"],
)
def test_importing_does_not_load_the_solver(module: str) -> None:
    assert _loaded_after(f"import {module}") == []


def test_solving_an_exact_program_loads_it() -> None:
    """The probe can see the solver load: a greedy-vs-exact fleet of the benchmark's generator solved exactly."""
    code = (
        "import random\n"
        "from adapter.optimizer.allocate import AllocationMode, allocate\n"
        "from tests.bench_pipeline import generated_fleet\n"
        "signals, gpus = generated_fleet(random.Random(1))\n"
        "allocate(signals, mode=AllocationMode(limiter=True, exact=True), gpus=gpus)"
    )
    assert _loaded_after(code) == list(SOLVER_MODULES)
