"""The agent distribution (``agent/pyproject.toml``) holds what the agent imports, and its lock is in step.

Why statically: installing the distribution into a fresh venv needs PyPI and takes a while
(``tests/integration/test_agent_distribution.py`` does it); these checks catch the usual drift in
milliseconds. A new ``kyma_wire`` module the agent starts to import must be listed in the agent's
``py-modules``; a third-party import of the agent must come from a distribution of its lock (uvloop,
for one, is not in it); the agent lock must pin the same versions as the root ``requirements.lock``
(the versions the suite runs with) and be the whole dependency closure of the agent's requirements,
which the development venv (installed from the root lock) can tell from its installed metadata.
"""

from __future__ import annotations

import ast
import importlib.metadata
import sys
import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from tests.agentdist import AGENT_LOCK, AGENT_PYPROJECT, REPO, ROOT_LOCK, normalize, read_lock


def _agent_project() -> dict[str, Any]:
    return tomllib.loads(AGENT_PYPROJECT.read_text())


def _shipped_modules() -> dict[str, Path]:
    """Module name -> source file of every module the agent distribution ships."""
    setuptools = _agent_project()["tool"]["setuptools"]
    modules: dict[str, Path] = {}
    for package in setuptools["packages"]:
        for path in sorted((REPO / package).glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            modules[name] = path
    for dotted in setuptools["py-modules"]:
        package, _, module = dotted.rpartition(".")
        modules[dotted] = REPO / package / f"{module}.py"
        modules[package] = REPO / package / "__init__.py"
    return modules


def _runtime_imports(path: Path) -> set[str]:
    """Absolute module names imported by ``path`` at run time (``if TYPE_CHECKING:`` blocks skipped)."""
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Try | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.With):
                visit(node.body)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(ast.parse(path.read_text()).body)
    return found


def test_every_first_party_module_the_agent_imports_is_shipped() -> None:
    shipped = _shipped_modules()
    first_party = ("skr_watcher", "kyma_wire")
    missing = {
        f"{name} imports {imported}"
        for name, path in shipped.items()
        for imported in _runtime_imports(path)
        if imported.split(".")[0] in first_party
        and imported not in shipped
        and (REPO / Path(*imported.split("."))).with_suffix(".py").exists()  # a module, not a name in one
    }
    assert missing == set(), "add these to agent/pyproject.toml [tool.setuptools] py-modules"
    # the operator's and the tests' parts of kyma_wire stay out (cryptography, httpx)
    assert {"kyma_wire.keys", "kyma_wire.httpx_transport"}.isdisjoint(shipped)


def _closure(requirements: list[str]) -> dict[str, str]:
    """Normalised name -> installed version of the requirements and everything they require
    (markers evaluated for this interpreter, extras not taken)."""
    seen: dict[str, str] = {}
    pending = [Requirement(text) for text in requirements]
    while pending:
        requirement = pending.pop()
        name = normalize(requirement.name)
        if name in seen or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        distribution = importlib.metadata.distribution(requirement.name)
        seen[name] = distribution.version
        pending.extend(Requirement(text) for text in distribution.requires or [])
    return seen


def test_the_agent_lock_is_the_closure_of_its_requirements_at_the_root_locks_versions() -> None:
    agent_lock, root_lock = read_lock(AGENT_LOCK), read_lock(ROOT_LOCK)
    different = {name: (version, root_lock.get(name)) for name, version in agent_lock.items()}
    assert {name: pair for name, pair in different.items() if pair[0] != pair[1]} == {}, (
        "agent lock vs root lock: run `make agent-lock`"
    )
    requirements = _agent_project()["project"]["dependencies"]
    assert _closure(requirements) == agent_lock, "run `make agent-lock`"
    for text in requirements:  # direct dependencies are pinned in pyproject too, to the same version
        requirement = Requirement(text)
        assert str(requirement.specifier) == f"=={agent_lock[normalize(requirement.name)]}", text


def test_every_third_party_import_of_the_agent_comes_from_its_lock() -> None:
    provided = importlib.metadata.packages_distributions()
    locked = set(read_lock(AGENT_LOCK))
    third_party = {
        imported.split(".")[0]
        for path in _shipped_modules().values()
        for imported in _runtime_imports(path)
        if imported.split(".")[0] not in {*sys.stdlib_module_names, "skr_watcher", "kyma_wire", "__future__"}
    }
    unlocked = {
        top: provided.get(top, ["(no installed distribution)"])
        for top in third_party
        if not {normalize(name) for name in provided.get(top, [])} & locked
    }
    assert unlocked == {}, "the agent imports packages its distribution does not install"
