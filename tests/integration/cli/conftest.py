"""CLI test helpers: a module source folder on disk; `kyma` run in-process or as a real process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kyma_operator.cli.main import app
from tests.registry.modules import sample_manifests

REPO = Path(__file__).resolve().parents[3]
PINNED = "@sha256:" + "5" * 64
"""The sample manager image pinned by digest: `create` records it as an ociArtifact resource with
that digest, so the module can be signed without asking a registry (example.invalid has none)."""


def write_module_source(folder: Path, module: str, version: str = "1.0.0", **extra: object) -> Path:
    """A module author's folder: module-config.yaml, manifest.yaml, default-cr.yaml. Returns the config."""
    folder.mkdir(parents=True, exist_ok=True)
    raw, cr = sample_manifests(module)
    image = f"example.invalid/{module}:1.0.0".encode()
    assert image in raw
    (folder / "manifest.yaml").write_bytes(raw.replace(image, image + PINNED.encode()))
    (folder / "default-cr.yaml").write_bytes(cr)
    config = {
        "name": f"kyma-project.io/module/{module}",
        "version": version,
        "manifest": "manifest.yaml",
        "defaultCR": "default-cr.yaml",
        "repository": f"https://example.invalid/{module}",
        "documentation": f"https://example.invalid/{module}/README.md",
        "manager": {
            "group": "apps",
            "version": "v1",
            "kind": "Deployment",
            "name": f"{module}-controller-manager",
            "namespace": f"{module}-system",
        },
        **extra,
    }
    path = folder / "module-config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


class Kyma:
    """Runs the CLI in-process (CliRunner) or as a real process (the installed console script's module)."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.runner = CliRunner()

    def __call__(self, *args: str, input: str | None = None):
        old = Path.cwd()
        os.chdir(self.cwd)
        try:
            return self.runner.invoke(app, list(args), input=input, catch_exceptions=False)
        finally:
            os.chdir(old)

    def process(self, *args: str) -> subprocess.Popen[str]:
        env = {**os.environ, "PYTHONPATH": f"{REPO / 'operator'}:{REPO}"}
        return subprocess.Popen(
            [sys.executable, "-m", "kyma_operator.cli", *args],
            cwd=self.cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture
def kyma(tmp_path: Path) -> Kyma:
    return Kyma(tmp_path)
