"""Locate (or build once) the ``kustomize`` binary: ``sigs.k8s.io/kustomize/kustomize/v5`` pinned in go.mod.

Why built and not installed: the suite checks that ``manifests/kcp`` builds with the real kustomize an
operator would run, and kustomize is a Go module like the control plane's binaries (Go module proxy,
cached in ``.cache/bin`` with a stamp of this go.mod/go.sum, no root). v5.8.2 is the newest release
that builds with Go 1.26 (v5.8.3 asks for Go 1.27). ``TEST_ASSET_KUSTOMIZE`` names a prebuilt one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tests.controlplane.binaries import DEFAULT_CACHE, GoTool, find_or_build_tool

MODULE_DIR = Path(__file__).resolve().parent
KUSTOMIZE = GoTool("kustomize", "sigs.k8s.io/kustomize/kustomize/v5", MODULE_DIR, "TEST_ASSET_KUSTOMIZE")


def find_or_build(env: Mapping[str, str] | None = None, cache_dir: Path = DEFAULT_CACHE) -> Path:
    return find_or_build_tool(KUSTOMIZE, env, cache_dir)


if __name__ == "__main__":
    print(f"kustomize={find_or_build()}")
