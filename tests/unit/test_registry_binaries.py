"""The test registry's binaries honour prebuilt ones named by environment variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.registry.binaries import RegistryBinaryError, find_or_build


def test_prebuilt_binaries_are_used_as_given(tmp_path: Path) -> None:
    registry, htpasswd = tmp_path / "registry", tmp_path / "htpasswd"
    for path in (registry, htpasswd):
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    env = {"TEST_ASSET_REGISTRY": str(registry), "TEST_ASSET_REGISTRY_HTPASSWD": str(htpasswd)}
    found = find_or_build(env, cache_dir=tmp_path / "cache")
    assert (found.registry, found.htpasswd) == (registry, htpasswd)
    assert not (tmp_path / "cache").exists()


def test_non_executable_prebuilt_binary_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "registry").write_text("")
    with pytest.raises(RegistryBinaryError, match="TEST_ASSET_REGISTRY"):
        find_or_build({"TEST_ASSET_REGISTRY": str(tmp_path / "registry")}, cache_dir=tmp_path)
