"""The docs cite code that exists (issue 20): every file, module and name README.md and docs/**/*.md cite as code
is imported and resolved, so a rename or a removal that leaves a doc behind fails here.

What counts as a citation (always in backticks):
- a path ending in `.py` (optionally `path.py::test_name`), or starting with `adapter/` or `tests/`: the file or
  directory exists (a bare `name.py` or `dir/name.py` may sit anywhere under adapter/ or tests/);
- a path followed by a name, "`analyzers/tokens.py` `replica_capacity`": the name is an attribute of that module;
- a dotted name whose first part is a module or package of the adapter, "`ekf.advance`",
  "`adapter.engine.decide`", "`domain.decision.reason_family`": it resolves by import and attribute lookup;
- every name in the Code column of docs/deviations.md: resolved in the module cited in the same cell, else in
  the row's or an earlier row's module, else anywhere in the adapter (a top-level name or `Class.member`).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

import adapter

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
TICK = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"^(?:[\w.-]+/)*[\w.-]+\.py(?:::\w+)?$|^(?:adapter|tests)/[\w./-]*$")
DOTTED = re.compile(r"^[a-z_][a-z0-9_]*(?:\.[A-Za-z_]\w*)+(?:\(\))?$")
NAME = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?:\(\))?$")

NOT_CODE = {
    "status": "`status.…` in the docs is a VA's status field, not adapter/k8s/status.py",
    "events": "`events.k8s.io` is the Kubernetes API group, not adapter/k8s/events.py",
    "tls": "`tls.…` in the docs is a value of the Helm chart, not adapter/servers/tls.py",
    "settings": "`settings.…` in the docs is a key of the settings ConfigMap, not adapter/config/settings.py",
}
"""Module basenames whose dotted mentions are not code."""
NOT_CODE_TOKENS = {
    "engine.interval_s": "a key of the simulation scenario's YAML (DESIGN §3.3)",
}


@dataclass(frozen=True)
class Citation:
    doc: str
    line: int
    text: str
    module: str | None = None
    """The module the name must be found in (from a path cited beside it); None: by its own dotted prefix."""
    anywhere: bool = False
    """A bare name (deviations' Code column) may be defined in any module of the adapter."""

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: `{self.text}`"


@cache
def modules() -> dict[str, ModuleType]:
    """Every module of the adapter, imported, by dotted name."""
    found = {"adapter": adapter}
    for info in pkgutil.walk_packages(adapter.__path__, "adapter."):
        if not info.name.endswith(".__main__"):  # runs the CLI when imported
            found[info.name] = importlib.import_module(info.name)
    return found


@cache
def by_basename() -> dict[str, list[str]]:
    """Dotted module names by their last part ("ekf" → ["adapter.analyzers.queueing.ekf"])."""
    out: dict[str, list[str]] = {}
    for name in modules():
        out.setdefault(name.rsplit(".", 1)[-1], []).append(name)
    return out


def module_of_path(path: str) -> str | None:
    """The adapter module a cited `.py` path names (relative to the repository or to adapter/), if any."""
    clean = path.split("::", maxsplit=1)[0].removesuffix(".py").removesuffix("/__init__")
    for candidate in (clean, f"adapter/{clean}"):
        dotted = candidate.replace("/", ".")
        if dotted in modules():
            return dotted
    matches = [m for m in modules() if m.endswith("." + clean.replace("/", "."))]
    return matches[0] if len(matches) == 1 else None


def resolve(obj: object, attrs: list[str]) -> bool:
    for attr in attrs:
        fields = getattr(obj, "__dataclass_fields__", {})
        if hasattr(obj, attr):
            obj = getattr(obj, attr)
        elif attr in fields:  # a dataclass field without a default is no class attribute
            obj = fields[attr]
        else:
            return False
    return True


def resolves_in(module: str, name: str) -> bool:
    return resolve(modules()[module], name.removesuffix("()").split("."))


def resolves_dotted(text: str) -> bool:
    """`ekf.advance`, `adapter.engine.decide`, `domain.decision.reason_family`, `engine._alloc_for`."""
    parts = text.removesuffix("()").split(".")
    starts = ["adapter"] if parts[0] == "adapter" else by_basename().get(parts[0], [])
    for start in starts:
        rest = parts[1:]
        module = start
        while rest and f"{module}.{rest[0]}" in modules():  # descend through packages
            module = f"{module}.{rest[0]}"
            rest = rest[1:]
        if resolve(modules()[module], rest):
            return True
    return False


def resolves_anywhere(name: str) -> bool:
    return any(resolves_in(module, name) for module in modules())


def path_exists(path: str) -> bool:
    file, _, test = path.partition("::")
    hits = [p for p in (REPO / file, REPO / "adapter" / file) if p.exists()]
    if not hits and not file.startswith(("adapter/", "tests/")):  # `name.py` or `dir/name.py` somewhere below
        hits = [p for root in ("adapter", "tests") for p in (REPO / root).rglob(Path(file).name)]
        hits = [p for p in hits if str(p).endswith(f"/{file}")]
    if not hits:
        return False
    return not test or any(re.search(rf"^(?:async )?def {re.escape(test)}\b", h.read_text(), re.M) for h in hits)


def citations() -> Iterator[Citation | tuple[str, int, str]]:
    """Names to resolve (Citation) and paths to find (tuples)."""
    for doc in DOCS:
        relative = str(doc.relative_to(REPO))
        deviations = doc.name == "deviations.md"
        context: str | None = None  # deviations' Code column: the module cited last, in this row or an earlier one
        for number, line in enumerate(doc.read_text().splitlines(), start=1):
            code_cell = line.rsplit("|", 2)[-2] if deviations and line.startswith("| ") else ""
            cell_tokens = {t.strip() for t in TICK.findall(code_cell)}
            last_path, last_module = "", None
            for raw in TICK.findall(line):
                token = raw.strip()
                if PATH.match(token):
                    yield (relative, number, token)
                    last_path, last_module = token, module_of_path(token) if token.endswith(".py") else None
                    if last_module is not None and token in cell_tokens:
                        context = last_module
                    continue
                if not NAME.match(token):
                    continue
                if last_module is not None and f"`{last_path}` `{raw}`" in line:  # "`path.py` `name`"
                    yield Citation(relative, number, token, module=last_module)
                elif token in cell_tokens:
                    yield Citation(relative, number, token, module=context, anywhere=True)
                elif _module_qualified(token):
                    yield Citation(relative, number, token)


def _module_qualified(token: str) -> bool:
    """A dotted name whose first part is the adapter or one of its modules (and is not known to be prose)."""
    first = token.split(".", maxsplit=1)[0]
    if not DOTTED.match(token) or token in NOT_CODE_TOKENS or first in NOT_CODE:
        return False
    return first == "adapter" or first in by_basename()


def _ids(item: Citation | tuple[str, int, str]) -> str:
    return str(item) if isinstance(item, Citation) else f"{item[0]}:{item[1]}: `{item[2]}`"


ALL = list(citations())


@pytest.mark.parametrize("path", [c for c in ALL if isinstance(c, tuple)], ids=_ids)
def test_every_cited_file_exists(path: tuple[str, int, str]) -> None:
    doc, line, token = path
    assert path_exists(token), f"{doc}:{line} cites {token}, which is not in the repository"


@pytest.mark.parametrize("citation", [c for c in ALL if isinstance(c, Citation)], ids=_ids)
def test_every_cited_name_resolves(citation: Citation) -> None:
    name = citation.text
    if citation.module is not None and resolves_in(citation.module, name):
        return
    if DOTTED.match(name) and resolves_dotted(name):
        return
    assert citation.anywhere, f"{citation}: no such name in {citation.module or 'the adapter'}"
    assert resolves_anywhere(name), f"{citation}: no such name in {citation.module or 'the adapter'}"


def test_the_scan_finds_the_citations_it_is_meant_to() -> None:
    """Guards the scanner itself: a handful of citations known to be in the docs are found."""
    texts = {c.text if isinstance(c, Citation) else c[2] for c in ALL}
    assert {"ekf.advance", "engine/pipeline.py", "calculate_targets"} <= texts
    assert len([c for c in ALL if isinstance(c, Citation)]) > 40


def test_every_setting_is_in_the_operations_table_with_its_flag_and_env() -> None:
    """docs/operations.md lists each `serve` setting on one row with its flag and its environment variable."""
    from adapter.config.settings import KNOBS

    text = (REPO / "docs" / "operations.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `--")]
    for knob in KNOBS:
        row = next((r for r in rows if f"`{knob.flag}`" in r.split("|")[1]), None)
        assert row is not None, f"{knob.flag} is not in the settings table of docs/operations.md"
        assert f"`{knob.env}`" in row.split("|")[2], f"{knob.flag}: its env {knob.env} is not on its row"
