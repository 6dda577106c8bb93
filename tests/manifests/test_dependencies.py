"""Dependencies (issue 20): every third-party package adapter/ imports is declared in pyproject.toml, and what
the serving image installs (the base dependencies, no extras) never brings matplotlib, which only
`simulate --out` needs (the `sim` extra).

The imports are read with `ast` from every module under adapter/; a module name is mapped to the distribution
that provides it with `importlib.metadata.packages_distributions()` of this environment.
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest

from tests.manifests.render import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
ADAPTER = REPO / "adapter"
OPTIONAL = {"adapter/sim/plot.py": "sim"}
"""Modules allowed to import an extra's packages (the extra named)."""
GENERATED = ("adapter/servers/_keda_pb/",)


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string ("urllib3>=2,<3" → "urllib3")."""
    return re.sub(r"[-_.]+", "-", re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]).lower()


def _declared(extra: str | None = None) -> set[str]:
    deps = (
        PYPROJECT["project"]["dependencies"] if extra is None else PYPROJECT["project"]["optional-dependencies"][extra]
    )
    return {_name(r) for r in deps}


def _third_party_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n != "adapter" and n not in sys.stdlib_module_names and n != "__future__"}


def _sources() -> list[Path]:
    return sorted(
        p for p in ADAPTER.rglob("*.py") if not any(str(p.relative_to(REPO)).startswith(g) for g in GENERATED)
    )


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_imported_package_is_declared(path: Path) -> None:
    relative = str(path.relative_to(REPO))
    allowed = _declared() | (_declared(OPTIONAL[relative]) if relative in OPTIONAL else set())
    providers = metadata.packages_distributions()
    for module in sorted(_third_party_imports(path)):
        dists = {_name(d) for d in providers.get(module, [])}
        assert dists, f"{relative} imports {module!r}, which no installed distribution provides"
        assert dists & allowed, f"{relative} imports {module!r} from {sorted(dists)}, not declared in pyproject.toml"


def _closure(requirements: list[str]) -> set[str]:
    """Every distribution these requirements install (markers for extras skipped, as `pip install .` does)."""
    seen: set[str] = set()
    todo = [r for r in requirements if "extra ==" not in r]
    while todo:
        name = _name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            todo.extend(r for r in metadata.requires(name) or [] if "extra ==" not in r)
        except metadata.PackageNotFoundError:
            continue  # not installed here (a platform-specific marker); nothing below it to follow
    return seen


def test_the_serving_install_does_not_bring_matplotlib() -> None:
    serving = _closure(PYPROJECT["project"]["dependencies"])
    assert "matplotlib" not in serving, sorted(serving)
    assert "matplotlib" in _declared("sim")
    assert "aiohttp" in serving  # the walk follows the real requirements


def test_make_install_takes_the_sim_extra_so_run_and_test_have_everything() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "-e '.[dev,sim]'" in makefile


def test_the_serving_image_installs_the_wheel_without_extras() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    installs = [line for line in dockerfile.splitlines() if "install" in line and "/wheels/" in line]
    assert installs, "the runtime venv is installed from the built wheel"
    assert all("[" not in line for line in installs), installs
    assert "MPLCONFIGDIR" not in dockerfile
