"""The package layering of docs/architecture.md ("Layering"), checked on the source: every import
statement of the shipped packages, parsed with ``ast`` (top-level, inside functions and under
``TYPE_CHECKING`` alike, since each is a dependency), must point down the table below.

A unit is a top-level package (``kyma_wire``, ``kcp_listener``, ...) or a first-level part of
``kyma_operator`` (``kyma_operator.runtime``, ``kyma_operator.controllers``, ...). A unit may import
units of lower layers only; units of one layer do not import each other. A new unit must be placed
in ``LAYERS`` (the test names it), so the table stays the whole truth.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PACKAGES = {
    "kyma_wire": REPO / "kyma_wire",
    "embedded_server": REPO / "embedded_server",
    "skr_watcher": REPO / "skr_watcher",
    "kcp_listener": REPO / "kcp_listener",
    "kyma_operator": REPO / "operator" / "kyma_operator",
}

LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(layer)
    for layer in (
        # the wire contract between agent, listener and operator: imports none of ours
        {"kyma_wire"},
        {"embedded_server"},
        # the agent, the listener core and the operator's controller runtime: none knows the others
        {"skr_watcher", "kcp_listener", "kyma_operator.runtime"},
        {"kyma_operator.api"},
        {"kyma_operator.modules", "kyma_operator.remote", "kyma_operator.identity", "kyma_operator.listener"},
        # fleet rollouts' pure wave/target/progress logic: module resolution (controllers) calls it
        {"kyma_operator.rollouts"},
        {"kyma_operator.agentinstall"},
        {"kyma_operator.controllers"},
        # the operator's flags build each controller's typed sub-config
        {"kyma_operator.config"},
        {"kyma_operator.app"},
        {"kyma_operator", "kyma_operator.cli", "kyma_operator.__main__"},
    )
)

ONLY: dict[str, frozenset[str]] = {
    # the agent runs in every customer runtime: the wire contract and nothing else of ours
    "skr_watcher": frozenset({"kyma_wire"}),
    # the listener: the wire contract, the embedded server, and the Protocols it declares itself
    # (``kcp_listener.routing``, ``kcp_listener.handoff``); the operator adapts to them
    "kcp_listener": frozenset({"kyma_wire", "embedded_server"}),
}


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    tree: ast.Module


@dataclass(frozen=True)
class Import:
    module: str
    target: str
    line: int


def modules_of(package: str) -> Iterator[Module]:
    root = PACKAGES[package]
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        yield Module(".".join(parts), path, ast.parse(path.read_text(), str(path)))


def imports_of(module: Module) -> Iterator[Import]:
    is_package = module.path.name == "__init__.py"
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module.name, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.name.split(".")
                keep = len(parent) - node.level + (1 if is_package else 0)
                base = ".".join([*parent[:keep], *([base] if base else [])])
            for alias in node.names:
                # ``from pkg import sub`` may name a submodule: count the more specific unit
                yield Import(module.name, f"{base}.{alias.name}" if base else alias.name, node.lineno)


def unit_of(module: str) -> str | None:
    """The unit of a module of ours, ``None`` for anything else (standard library, third party)."""
    parts = module.split(".")
    if parts[0] not in PACKAGES:
        return None
    if parts[0] == "kyma_operator" and len(parts) > 1:
        return f"kyma_operator.{parts[1]}"
    return parts[0]


def layer_of(unit: str) -> int:
    for index, layer in enumerate(LAYERS):
        if unit in layer:
            return index
    raise AssertionError(f"{unit} is not placed in LAYERS of {__file__}: decide where it belongs")


def all_imports() -> list[Import]:
    return [found for package in PACKAGES for module in modules_of(package) for found in imports_of(module)]


def violations(imports: list[Import]) -> list[str]:
    found = []
    for imp in imports:
        source, target = unit_of(imp.module), unit_of(imp.target)
        if source is None or target is None or source == target:
            continue
        if source == "kyma_operator" and target.startswith("kyma_operator."):
            continue  # the package's own __init__ (holds no code) is placed on top
        only = ONLY.get(source)
        if only is not None and target not in only:
            found.append(
                f"{imp.module}:{imp.line} imports {imp.target} ({source} may import only {sorted(only)})"
            )
        elif layer_of(target) >= layer_of(source):
            kind = "a sibling" if layer_of(target) == layer_of(source) else "upward"
            found.append(f"{imp.module}:{imp.line} imports {imp.target} ({kind}: {source} -> {target})")
    return found


def test_every_module_of_ours_is_placed() -> None:
    units = {unit_of(module.name) for package in PACKAGES for module in modules_of(package)}
    for unit in units:
        assert unit is not None
        layer_of(unit)


def test_nothing_imports_upward_or_sideways() -> None:
    assert violations(all_imports()) == []


def test_the_listener_does_not_import_the_operator() -> None:
    """The direction of docs/architecture.md: kyma_operator.listener -> kcp_listener -> kyma_wire."""
    listener = [imp.target for m in modules_of("kcp_listener") for imp in imports_of(m)]
    assert listener, "no imports found: the parser looks in the wrong place"
    assert not [t for t in listener if t.split(".")[0] in {"kyma_operator", "skr_watcher"}]


@pytest.mark.parametrize(
    ("module", "target", "expected"),
    [
        ("kyma_operator.runtime.informer", "kyma_operator.controllers.kyma", "upward"),
        ("kcp_listener.intake", "kyma_operator.runtime.request", "may import only"),
        ("skr_watcher.sender", "embedded_server", "may import only"),
        ("kyma_wire.events", "kcp_listener.routing", "upward"),
        ("kyma_operator.listener.kube", "kyma_operator.identity.store", "a sibling"),
        ("kyma_operator.runtime.kube", "skr_watcher.config", "a sibling"),
    ],
)
def test_a_wrong_import_is_reported(module: str, target: str, expected: str) -> None:
    """The checker itself: each rule catches what it is for."""
    (message,) = violations([Import(module, target, 1)])
    assert expected in message and module in message


@pytest.mark.parametrize(
    ("module", "target"),
    [
        ("kyma_operator.listener.wiring", "kcp_listener.intake"),
        ("kyma_operator.controllers.kyma.setup", "kyma_operator.runtime.intake"),
        ("kcp_listener.server", "embedded_server"),
        ("kyma_operator.app", "json"),
    ],
)
def test_a_downward_import_passes(module: str, target: str) -> None:
    assert violations([Import(module, target, 1)]) == []


def test_relative_imports_resolve_to_their_package(tmp_path: Path) -> None:
    tree = ast.parse("from .sinks import ControllerSink\nfrom ..runtime import informer\n")
    found = list(imports_of(Module("kyma_operator.listener.kube", tmp_path / "kube.py", tree)))
    assert [f.target for f in found] == [
        "kyma_operator.listener.sinks.ControllerSink",
        "kyma_operator.runtime.informer",
    ]


def test_runtime_knows_nothing_about_kymas() -> None:
    """``kyma_operator.runtime`` is the controller runtime: no function or class of it is about Kymas
    (the shard key of a Kyma lives in ``controllers/sharding.py``)."""
    for module in modules_of("kyma_operator"):
        if unit_of(module.name) == "kyma_operator.runtime":
            nodes = ast.walk(module.tree)
            defined = {n.name for n in nodes if isinstance(n, ast.FunctionDef | ast.ClassDef)}
            assert not {name for name in defined if "kyma" in name.lower()}, module.name
