"""The helm binary finder honours TEST_ASSET_HELM and a helm on the PATH before building."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helm.binaries import ENV_VAR, HelmBinaryError, find, find_or_build, pinned_version


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_the_variable_wins_over_the_path(tmp_path: Path) -> None:
    given = _executable(tmp_path / "given" / "helm")
    on_path = _executable(tmp_path / "bin" / "helm")
    env = {ENV_VAR: str(given), "PATH": str(on_path.parent)}
    assert find_or_build(env, cache_dir=tmp_path / "cache") == given
    assert not (tmp_path / "cache").exists()


def test_a_helm_on_the_path_is_used_without_building(tmp_path: Path) -> None:
    on_path = _executable(tmp_path / "bin" / "helm")
    assert find_or_build({"PATH": str(on_path.parent)}, cache_dir=tmp_path / "cache") == on_path
    assert not (tmp_path / "cache").exists()


def test_a_non_executable_given_binary_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "helm").write_text("")
    with pytest.raises(HelmBinaryError, match=ENV_VAR):
        find_or_build({ENV_VAR: str(tmp_path / "helm")}, cache_dir=tmp_path)


def test_the_pinned_version_is_read_from_go_mod() -> None:
    assert pinned_version().startswith("v4.")


def test_find_never_builds(tmp_path: Path) -> None:
    assert find({"PATH": str(tmp_path / "empty")}, cache_dir=tmp_path / "cache") is None
    assert not (tmp_path / "cache").exists()
    on_path = _executable(tmp_path / "bin" / "helm")
    assert find({"PATH": str(on_path.parent)}, cache_dir=tmp_path / "cache") == on_path
