"""Static checks of the Dockerfile (no Docker engine here, so the image is never built in tests).

The Dockerfile is parsed line by line into stages and instructions; the checks are deliberately simple:
multi-stage, a final stage that runs as a numeric non-root user and carries no build tools, the same protoc
command as the Makefile, and ports/user/entry point consistent with the manifests and pyproject.toml.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field

import pytest

from tests.manifests.render import REPO, one, render

DOCKERFILE = REPO / "Dockerfile"
BUILD_TOOLS = ("gcc", "g++", "build-essential", "grpcio-tools", "grpc_tools", "apt-get", "apk add", "make ")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args_of(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages). Joins backslash continuations and drops comments and blank lines."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword, args = keyword.upper(), args.strip()
        if keyword == "FROM":
            parts = args.split()
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: global_args.get(m[1] or m[2], m[0]), parts[0])
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base, name))
        elif not stages:
            assert keyword == "ARG", f"only ARG may precede the first FROM, found {keyword}"
            key, _, default = args.partition("=")
            global_args[key] = default
        else:
            stages[-1].instructions.append((keyword, args))
    return global_args, stages


def problems(text: str) -> list[str]:
    """Every violated property, as a message; empty for a good Dockerfile."""
    _, stages = parse(text)
    out: list[str] = []
    if len(stages) < 2:
        return ["not multi-stage"]
    builder, final = stages[0], stages[-1]
    if builder.name != "builder":
        out.append("the first stage is not named 'builder'")
    for stage in (builder, final):
        if stage.base != "python:3.11-slim":
            out.append(f"stage {stage.name} is based on {stage.base}, not python:3.11-slim")
    users = final.args_of("USER")
    if not users:
        out.append("the final stage sets no USER (it would run as root)")
    else:
        uid = users[-1].split(":")[0]
        if not uid.isdigit():
            out.append(f"USER {users[-1]} is not numeric (the kubelet cannot verify runAsNonRoot)")
        elif int(uid) == 0:
            out.append("USER is root")
    for keyword, args in final.instructions:
        lowered = f"{keyword} {args}".lower()
        for tool in BUILD_TOOLS:
            if tool in lowered:
                out.append(f"the final stage mentions the build tool {tool.strip()!r}: {keyword} {args}")
    for copy in final.args_of("COPY"):
        if not copy.startswith("--from=builder"):
            out.append(f"the final stage copies from the build context: COPY {copy}")
    if final.args_of("ENTRYPOINT") != ['["wva-adapter"]']:
        out.append('ENTRYPOINT is not the exec form ["wva-adapter"]')
    if final.args_of("CMD") != ['["serve"]']:
        out.append('CMD is not the exec form ["serve"]')
    return out


GOOD = DOCKERFILE.read_text(encoding="utf-8") if DOCKERFILE.is_file() else ""


def _stages() -> list[Stage]:
    return parse(GOOD)[1]


def test_dockerfile_has_no_problems() -> None:
    assert DOCKERFILE.is_file()
    assert problems(GOOD) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            'FROM python:3.11-slim\nUSER 65532\nENTRYPOINT ["wva-adapter"]\nCMD ["serve"]\n',
            "not multi-stage",
            id="single-stage",
        ),
        pytest.param(
            GOOD.replace("USER 65532:65532", "USER appuser"),
            "is not numeric",
            id="named-user",
        ),
        pytest.param(GOOD.replace("USER 65532:65532", "USER 0"), "USER is root", id="root"),
        pytest.param(GOOD.replace("USER 65532:65532", ""), "sets no USER", id="no-user"),
        pytest.param(
            GOOD.replace(
                "COPY --from=builder /opt/venv /opt/venv",
                "COPY --from=builder /opt/venv /opt/venv\nRUN apt-get update && apt-get install -y gcc",
            ),
            "build tool 'gcc'",
            id="gcc-in-final",
        ),
        pytest.param(
            GOOD.replace(
                "COPY --from=builder /opt/venv /opt/venv",
                "COPY --from=builder /opt/venv /opt/venv\nRUN pip install \\\n    grpcio-tools",
            ),
            "build tool 'grpcio-tools'",
            id="grpcio-tools-in-final-continued-line",
        ),
        pytest.param(
            GOOD.replace("COPY --from=builder /opt/venv /opt/venv", "COPY adapter/ /app/adapter/"),
            "copies from the build context",
            id="copy-from-context",
        ),
        pytest.param(GOOD.replace('CMD ["serve"]', "CMD serve"), "CMD is not the exec form", id="shell-cmd"),
        pytest.param(GOOD.replace("AS builder", "AS build"), "not named 'builder'", id="builder-name"),
        pytest.param(
            GOOD.replace("ARG PYTHON_IMAGE=python:3.11-slim", "ARG PYTHON_IMAGE=python:3.12"),
            "not python:3.11-slim",
            id="base-image",
        ),
    ],
)
def test_problems_are_detected(text: str, expected: str) -> None:
    assert any(expected in p for p in problems(text)), problems(text)


def _makefile_protoc() -> list[str]:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8").replace("\\\n", " ")
    line = next(ln for ln in makefile.splitlines() if "grpc_tools.protoc" in ln)
    tokens = shlex.split(line)
    return tokens[tokens.index("grpc_tools.protoc") :]


def test_builder_generates_stubs_like_the_makefile_before_building() -> None:
    runs = _stages()[0].args_of("RUN")
    protoc_at = next(i for i, run in enumerate(runs) if "grpc_tools.protoc" in run)
    wheel_at = next(i for i, run in enumerate(runs) if "pip wheel" in run)
    assert protoc_at < wheel_at
    command = next(c for c in runs[protoc_at].split("&&") if "grpc_tools.protoc" in c)
    tokens = shlex.split(command)
    assert tokens[tokens.index("grpc_tools.protoc") :] == _makefile_protoc()


def test_final_stage_runs_as_the_deployments_user() -> None:
    final = _stages()[-1]
    uid, _, gid = final.args_of("USER")[-1].partition(":")
    deploy = one(render("manifests"), "Deployment", "wva-adapter")
    pod_security = deploy["spec"]["template"]["spec"]["securityContext"]
    assert (int(uid), int(gid)) == (pod_security["runAsUser"], pod_security["runAsGroup"]) == (65532, 65532)


def test_exposed_ports_match_the_container_ports() -> None:
    exposed = {int(p) for args in _stages()[-1].args_of("EXPOSE") for p in args.split()}
    deploy = one(render("manifests"), "Deployment", "wva-adapter")
    [container] = deploy["spec"]["template"]["spec"]["containers"]
    assert exposed == {p["containerPort"] for p in container["ports"]} == {6443, 50051, 8080, 8081}


def test_entry_point_is_the_projects_console_script() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    [entry] = json.loads(_stages()[-1].args_of("ENTRYPOINT")[-1])
    assert entry in scripts


def _dockerignore() -> list[str]:
    lines = (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
    return [ln.strip().rstrip("/") for ln in lines if ln.strip() and not ln.startswith("#")]


@pytest.mark.parametrize("pattern", [".git", ".venv", "adapter/servers/_keda_pb", "**/__pycache__", "tests"])
def test_dockerignore_excludes(pattern: str) -> None:
    assert pattern in _dockerignore()


def test_builder_copies_only_existing_unignored_sources() -> None:
    ignored = set(_dockerignore())
    for args in _stages()[0].args_of("COPY"):
        *sources, _ = args.split()
        for source in sources:
            assert (REPO / source).exists(), source
            assert source.rstrip("/") not in ignored, source
