"""Sibling controllers share only ``controllers.common``; the runtime knows nothing of controllers.

Read from the source (imports as written), so a new cross-import fails here with the line that
adds it, before it becomes a knot every later feature has to squeeze through.
"""

from __future__ import annotations

import ast
from pathlib import Path

import kyma_operator

PACKAGE = Path(kyma_operator.__file__).parent


def _imports(folder: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.append((str(path.relative_to(PACKAGE)), node.module))
            elif isinstance(node, ast.Import):
                found.extend((str(path.relative_to(PACKAGE)), alias.name) for alias in node.names)
    return found


def _offending(folder: str, forbidden: tuple[str, ...]) -> list[str]:
    return [f"{where}: {module}" for where, module in _imports(folder) if module.startswith(forbidden)]


def test_the_kyma_and_manifest_controllers_do_not_import_each_other() -> None:
    assert _offending("controllers/kyma", ("kyma_operator.controllers.manifest",)) == []
    assert _offending("controllers/manifest", ("kyma_operator.controllers.kyma",)) == []


def test_the_shared_controller_parts_import_no_controller() -> None:
    siblings = ("kyma", "manifest", "watcher", "sharding")
    forbidden = tuple(f"kyma_operator.controllers.{name}" for name in siblings)
    assert _offending("controllers/common", forbidden) == []


def test_the_runtime_knows_nothing_of_controllers_or_kymas() -> None:
    forbidden = ("kyma_operator.controllers", "kyma_operator.api.kyma", "kyma_operator.api.manifest")
    assert _offending("runtime", forbidden) == []
