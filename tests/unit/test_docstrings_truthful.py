"""Docstrings that tell the truth, as far as a test can tell (docs/architecture.md is the reference).

* Nothing in the shipped packages cites DESIGN.md: it is not part of this repository; the
  repository's own docs (``docs/``, the README) are what a reader can follow.
* A dotted name of ours in double backticks (``kcp_listener.routing.ObjectRef``) names something
  that exists, in every docstring of the shipped packages; in a package's ``__init__`` docstring
  also the short form relative to the package (``wiring.OperatorListener`` in
  ``kyma_operator.listener``). Classes get renamed and removed; a summary that walks through them
  must move with them.
"""

from __future__ import annotations

import ast
import importlib
import io
import itertools
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_import_layering import PACKAGES

REFERENCE = re.compile(r"``([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\))?``")
"""A dotted name in double backticks, optionally called: ``module.Class`` or ``pkg.mod.func()``."""


def sources() -> Iterator[tuple[str, Path]]:
    for package, root in PACKAGES.items():
        for path in sorted(root.rglob("*.py")):
            parts = [package, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join(parts), path


def docstrings(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield doc
        # attribute docstrings: a string statement right after an assignment
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for before, statement in itertools.pairwise(body):
                if (
                    isinstance(before, ast.Assign | ast.AnnAssign)
                    and isinstance(statement, ast.Expr)
                    and isinstance(statement.value, ast.Constant)
                    and isinstance(statement.value.value, str)
                ):
                    yield statement.value.value


def comments(text: str) -> Iterator[str]:
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.string


def resolves(name: str) -> bool:
    """True when ``name`` is an importable module or an attribute path below one."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for attribute in parts[end:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def references(module: str, path: Path, tree: ast.Module) -> Iterator[str]:
    """The names of ours a module's docstrings mention, made absolute."""
    is_package = path.name == "__init__.py"
    submodules = {p.stem for p in path.parent.glob("*.py")} | {
        p.name for p in path.parent.iterdir() if (p / "__init__.py").exists()
    }
    for doc in docstrings(tree):
        for match in REFERENCE.finditer(doc):
            name = match.group(1)
            head = name.split(".")[0]
            if head in PACKAGES:
                yield name
            elif is_package and head in submodules:
                yield f"{module}.{name}"


def test_nothing_shipped_cites_the_design_document() -> None:
    found = []
    for module, path in sources():
        text = path.read_text()
        cited = [d for d in docstrings(ast.parse(text)) if "DESIGN" in d]
        cited += [c for c in comments(text) if "DESIGN" in c]
        found += [
            f"{module}: {line.strip()[:80]}" for c in cited for line in c.splitlines() if "DESIGN" in line
        ]
    assert found == []


def test_every_name_of_ours_in_a_docstring_exists() -> None:
    missing = []
    checked = 0
    for module, path in sources():
        for name in references(module, path, ast.parse(path.read_text())):
            checked += 1
            if not resolves(name):
                missing.append(f"{module}: ``{name}``")
    assert checked > 50, "suspiciously few references: the pattern no longer matches"
    assert missing == []


@pytest.mark.parametrize(
    ("name", "exists"),
    [
        ("kcp_listener.routing.ObjectRef", True),
        ("kyma_operator.listener.wiring.OperatorListener", True),
        ("kyma_wire", True),
        ("kcp_listener.coalesce.CoalescingSink", False),
        ("kcp_listener.routing.KymaEventSink", False),
        ("kyma_operator.runtime.controller.ChannelSource", False),
    ],
)
def test_resolution(name: str, exists: bool) -> None:
    assert resolves(name) is exists


def test_a_package_summary_is_read_relative_to_its_package() -> None:
    path = PACKAGES["kyma_operator"] / "listener" / "__init__.py"
    tree = ast.parse(
        '"""``wiring.OperatorListener``, ``kube.Gone``, ``Kyma.status``, ``kcp_listener.app``"""'
    )
    assert list(references("kyma_operator.listener", path, tree)) == [
        "kyma_operator.listener.wiring.OperatorListener",
        "kyma_operator.listener.kube.Gone",
        "kcp_listener.app",
    ]
