"""The agent distribution installed alone, as its image installs it, runs and stays within its budget.

Why: every customer runtime pulls the agent image, so what it installs is the agent distribution
(``agent/pyproject.toml``: ``skr_watcher`` and the agent's share of ``kyma_wire``) with the pins of
``agent/requirements-agent.lock``, in a venv without pip -- nothing of the operator. The development
venv has everything installed, so only a fresh venv shows a missing dependency or module. The recipe
is ``tests.agentdist`` (shared with the image and ``benchmarks/agent_install.py``); pip reads PyPI's
index and takes wheels from its cache, which is why this is not a unit test.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.agentdist import (
    AGENT_LOCK,
    BUDGET_MB,
    DISTRIBUTION,
    du_mb,
    fresh_venv,
    install_agent,
    installed,
    normalize,
    python_of,
    read_lock,
    site_packages,
)


@pytest.fixture(scope="module")
def agent_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = fresh_venv(tmp_path_factory.mktemp("agent") / "venv")
    install_agent(venv)
    return venv


def _run(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python_of(venv)), *args], capture_output=True, text=True, timeout=60, check=False, cwd=venv
    )


def test_exactly_the_agent_and_its_locked_dependencies_are_installed(agent_venv: Path) -> None:
    found = {normalize(name): version for name, version in installed(agent_venv).items()}
    assert found.pop(DISTRIBUTION) == "0.1.0"
    assert found == read_lock(AGENT_LOCK)  # no pip, no setuptools, nothing of the operator


def test_the_installed_agent_starts_its_command_line(agent_venv: Path) -> None:
    result = _run(agent_venv, "-m", "skr_watcher", "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: skr-watcher") and "KCP_ADDR" in result.stdout
    version = subprocess.run(
        [str(agent_venv / "bin" / "skr-watcher"), "--version"], capture_output=True, text=True, timeout=60
    )
    assert (version.returncode, version.stdout.strip()) == (0, "0.1.0")  # from the agent's own metadata
    # without configuration it exits 2 naming what is missing (so the modules really ran, not just loaded)
    unconfigured = _run(agent_venv, "-m", "skr_watcher")
    assert unconfigured.returncode == 2 and "KCP_ADDR" in unconfigured.stderr, unconfigured.stderr


def test_every_shipped_module_imports_without_the_operators_libraries(agent_venv: Path) -> None:
    probe = (
        "import importlib, pkgutil, skr_watcher, kyma_wire\n"
        "names = [m.name for p in (skr_watcher, kyma_wire)\n"
        "         for m in pkgutil.iter_modules(p.__path__, p.__name__ + '.')]\n"
        "for name in names: importlib.import_module(name)\n"
        "print(' '.join(sorted(names)))"
    )
    result = _run(agent_venv, "-c", probe)
    assert result.returncode == 0, result.stderr
    names = set(result.stdout.split())
    assert {"skr_watcher.agent", "skr_watcher.__main__", "kyma_wire.http_client", "kyma_wire.events"} <= names
    assert not {"kyma_wire.keys", "kyma_wire.httpx_transport", "skr_watcher.artefacts"} & names


def test_the_installed_packages_stay_within_the_budget(agent_venv: Path) -> None:
    size = du_mb(site_packages(agent_venv))
    assert size <= BUDGET_MB, f"agent site-packages {size:.1f} MB > {BUDGET_MB:.0f} MB"
