"""Binary discovery honours envtest's variables before building anything."""

from pathlib import Path

import pytest

from tests.controlplane.binaries import BinaryError, from_environment


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
