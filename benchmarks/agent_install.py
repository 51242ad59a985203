"""What installing the agent costs a runtime: site-packages of a fresh venv, whole project vs agent dist.

Run: ``.venv/bin/python -m benchmarks.agent_install [--before PATH]``; prints markdown (copied into
``benchmarks/results/agent_install.md`` by hand). Every customer runtime pulls the agent image, and
the image's size is mostly its venv. Measured here, each in a fresh venv filled by this
interpreter's pip (pip cache used, PyPI's index read), ``du`` of site-packages, nothing subtracted:

* **the whole project** (root ``pyproject.toml`` with ``requirements.lock``: what ``images/agent``
  installed before issue 23), from the checkout at ``--before`` (default: this one);
* **the agent distribution** (``agent/pyproject.toml`` with ``agent/requirements-agent.lock``: what
  ``images/agent`` installs now), the recipe of ``tests.agentdist``.

Each in two venvs: without pip (``python -m venv --without-pip``, as the image builds it: the agent
needs no installer at run time) and as ``python -m venv`` makes it, whose ensurepip puts pip and
setuptools in (their share is listed apart). Sizes do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import subprocess
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tests.agentdist import (
    AGENT_LOCK,
    BUDGET_MB,
    REPO,
    du_mb,
    fresh_venv,
    install_agent,
    installed,
    pip,
    site_packages,
)

_INSTALLERS = ("pip", "setuptools", "pkg_resources", "_distutils_hack", "distutils-precedence.pth")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info")


@dataclass(frozen=True)
class Measured:
    installs: str
    with_pip: bool
    site_packages_mb: float
    installers_mb: float
    """pip, setuptools and their helpers (0 in a venv without pip)."""
    distributions: int
    largest: list[tuple[str, float]]


def install_project(venv: Path, tree: Path) -> None:
    """The whole project of ``tree`` (non-editable, ``-c requirements.lock``), as images/* did."""
    project = tomllib.loads((tree / "pyproject.toml").read_text())
    roots = {Path(path).parts[0] for path in project["tool"]["setuptools"]["package-dir"].values()}
    with tempfile.TemporaryDirectory(prefix="project-src-") as directory:
        source = Path(directory)
        for name in ("pyproject.toml", "requirements.lock", "README.md"):
            shutil.copy2(tree / name, source / name)
        for root in roots:
            shutil.copytree(tree / root, source / root, ignore=_IGNORE, symlinks=False)
        pip(venv, "install", "--quiet", "-c", str(source / "requirements.lock"), str(source), timeout=1200)


def _entries(path: Path) -> list[tuple[str, float]]:
    out = subprocess.run(
        ["du", "-sk", *(str(p) for p in sorted(path.iterdir()))], capture_output=True, text=True, check=True
    ).stdout
    sizes = [(Path(line.split("\t", 1)[1]).name, int(line.split()[0]) / 1024) for line in out.splitlines()]
    return sorted(sizes, key=lambda item: -item[1])


def measure(installs: str, with_pip: bool, tree: Path) -> Measured:
    with tempfile.TemporaryDirectory(prefix="agent-install-") as directory:
        venv = fresh_venv(Path(directory) / "venv", with_pip=with_pip)
        if installs == "agent":
            install_agent(venv)
        else:
            install_project(venv, tree)
        packages = site_packages(venv)
        entries = _entries(packages)
        installers = sum(mb for name, mb in entries if name.split("-")[0] in _INSTALLERS)
        return Measured(installs, with_pip, du_mb(packages), installers, len(installed(venv)), entries[:12])


def report(results: list[Measured], before: Path) -> str:
    label = {
        "project": f"whole project (`pyproject.toml` + `requirements.lock`, {before.name})",
        "agent": f"agent distribution (`agent/pyproject.toml` + `{AGENT_LOCK.relative_to(REPO)}`)",
    }
    lines = [
        f"CPython {platform.python_version()}; `du -sk` of site-packages, in MB.",
        "",
        "| installs | venv | site-packages MB | of which pip + setuptools MB | distributions |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in results:
        venv = "`python -m venv` (pip, setuptools)" if r.with_pip else "`--without-pip` (as the image)"
        lines.append(
            f"| {label[r.installs]} | {venv} | {r.site_packages_mb:.1f} | {r.installers_mb:.1f} | "
            f"{r.distributions} |"
        )
    agent = next(r for r in results if r.installs == "agent" and not r.with_pip)
    verdict = "met" if agent.site_packages_mb <= BUDGET_MB else "NOT met"
    lines += [
        "",
        f"**agent image's site-packages: {agent.site_packages_mb:.1f} MB (target <= {BUDGET_MB:.0f} MB: "
        f"{verdict})**",
    ]
    for r in results:
        if not r.with_pip:
            lines += ["", f"Largest entries, {label[r.installs]}, without pip:", ""]
            lines += ["| entry | MB |", "| --- | --- |"]
            lines += [f"| {name} | {mb:.1f} |" for name, mb in r.largest]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.agent_install", description=__doc__)
    parser.add_argument(
        "--before",
        type=Path,
        default=REPO,
        metavar="PATH",
        help="checkout whose whole project is installed for the 'before' rows (default: this one)",
    )
    args = parser.parse_args()
    results = [
        measure(installs, with_pip, args.before.resolve())
        for installs in ("project", "agent")
        for with_pip in (False, True)
    ]
    print(report(results, args.before.resolve()))


if __name__ == "__main__":
    main()
