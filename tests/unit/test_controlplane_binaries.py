"""Binary discovery honours envtest's variables before building anything; builds are stamped per binary."""

from pathlib import Path

import pytest

from tests.controlplane.binaries import (
    LIVING_TOOLS,
    BinaryError,
    GoTool,
    build_tool,
    from_environment,
    tool_from_environment,
)
from tests.kustomize.binaries import KUSTOMIZE


def _executable(path: Path) -> Path:
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_nothing_set_means_build(tmp_path: Path) -> None:
    assert from_environment({}) is None


def test_kubebuilder_assets_folder(tmp_path: Path) -> None:
    etcd = _executable(tmp_path / "etcd")
    apiserver = _executable(tmp_path / "kube-apiserver")
    found = from_environment({"KUBEBUILDER_ASSETS": str(tmp_path)})
    assert found is not None
    assert (found.etcd, found.kube_apiserver) == (etcd, apiserver)


def test_single_assets_override_the_folder(tmp_path: Path) -> None:
    _executable(tmp_path / "etcd")
    _executable(tmp_path / "kube-apiserver")
    special = _executable(tmp_path / "my-apiserver")
    found = from_environment({"KUBEBUILDER_ASSETS": str(tmp_path), "TEST_ASSET_KUBE_APISERVER": str(special)})
    assert found is not None
    assert found.kube_apiserver == special
    assert found.etcd == tmp_path / "etcd"


def test_only_one_single_asset_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(BinaryError, match="TEST_ASSET_KUBE_APISERVER"):
        from_environment({"TEST_ASSET_ETCD": str(_executable(tmp_path / "etcd"))})


def test_missing_binary_is_named(tmp_path: Path) -> None:
    with pytest.raises(BinaryError, match=r"kube-apiserver.*not an executable"):
        _executable(tmp_path / "etcd")
        from_environment({"KUBEBUILDER_ASSETS": str(tmp_path)})


# -- the living cluster's tools and kustomize: one variable each, a stamp per binary ---------------


def _tool(tmp_path: Path) -> GoTool:
    module = tmp_path / "module"
    module.mkdir()
    (module / "go.mod").write_text("module example.test/tools\n")
    (module / "go.sum").write_text("")
    return GoTool("kwok", "example.test/tools/cmd/kwok", module, "TEST_ASSET_KWOK")


def test_a_tool_variable_names_the_binary(tmp_path: Path) -> None:
    kwok = _executable(tmp_path / "my-kwok")
    assert tool_from_environment(_tool(tmp_path), {"TEST_ASSET_KWOK": str(kwok)}) == kwok


def test_a_tool_in_kubebuilder_assets_is_used_and_a_missing_one_is_built(tmp_path: Path) -> None:
    tool = _tool(tmp_path)
    assets = tmp_path / "assets"
    assets.mkdir()
    assert tool_from_environment(tool, {"KUBEBUILDER_ASSETS": str(assets)}) is None
    kwok = _executable(assets / "kwok")
    assert tool_from_environment(tool, {"KUBEBUILDER_ASSETS": str(assets)}) == kwok


def test_a_tool_variable_naming_no_executable_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(BinaryError, match=r"TEST_ASSET_KWOK"):
        tool_from_environment(_tool(tmp_path), {"TEST_ASSET_KWOK": str(tmp_path / "missing")})


def test_a_build_with_a_matching_stamp_is_reused_without_go(tmp_path: Path) -> None:
    tool = _tool(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    built = _executable(cache / "kwok")
    (cache / "kwok.stamp").write_text(tool.module_hash() + "\n")
    assert build_tool(tool, cache, env={"PATH": str(tmp_path / "no-go-here")}) == built


def test_a_stale_stamp_rebuilds_and_says_how_to_avoid_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = _tool(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    _executable(cache / "kwok")
    (cache / "kwok.stamp").write_text("hash-of-an-older-go.mod\n")
    with pytest.raises(BinaryError, match=r"Go is needed to build kwok.*TEST_ASSET_KWOK"):
        build_tool(tool, cache, env={"PATH": str(tmp_path / "no-go-here")})


def test_every_living_tool_and_kustomize_has_its_own_variable_and_module() -> None:
    tools = [*LIVING_TOOLS, KUSTOMIZE]
    assert [t.env_var for t in tools] == [
        "TEST_ASSET_KUBE_CONTROLLER_MANAGER",
        "TEST_ASSET_KUBE_SCHEDULER",
        "TEST_ASSET_KWOK",
        "TEST_ASSET_KUSTOMIZE",
    ]
    for tool in tools:
        assert (tool.module_dir / "go.mod").is_file() and (tool.module_dir / "go.sum").is_file()
        assert tool.package.split("/")[0] in (tool.module_dir / "go.mod").read_text()
