"""Session-scoped helm fixtures (registered as a pytest plugin from tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helm.binaries import find_or_build
from tests.helm.charts import HelmCli


@pytest.fixture(scope="session")
def helm_binary() -> Path:
    """The helm CLI (``TEST_ASSET_HELM``, ``helm`` on PATH, or built once into ``.cache/bin``)."""
    return find_or_build()


@pytest.fixture
def helm_cli(helm_binary: Path, tmp_path: Path) -> HelmCli:
    """The helm CLI with its folders in this test's ``tmp_path`` (package, push, repo index)."""
    return HelmCli(helm_binary, tmp_path / "helm-home")
