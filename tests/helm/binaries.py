"""Locate (or build once) the ``helm`` CLI: the real Helm engine the operator renders charts with.

Why built from the Go module proxy: the machine reaches package registries only, and Helm is a Go
module (``helm.sh/helm/v4``). The version is pinned in this folder's ``go.mod`` (a ``tool``
directive, so ``go.sum`` covers every dependency of ``cmd/helm``); the binary is cached in
``.cache/bin`` with a stamp of ``go.mod``/``go.sum`` like the control plane's and the registry's, so
a second run builds nothing and a version bump rebuilds.

Order of precedence: ``TEST_ASSET_HELM`` (envtest style), then a ``helm`` on the ``PATH``, then the
cached build. Reusable by anything that needs Helm (tests, benchmarks, ``localrun``, rendering a
chart of ours): ``find_or_build()`` returns the path (``find()`` the same without building);
``python -m tests.helm.binaries`` prints it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

MODULE_DIR = Path(__file__).resolve().parent
REPO_ROOT = MODULE_DIR.parents[1]
DEFAULT_CACHE = REPO_ROOT / ".cache" / "bin"
ENV_VAR = "TEST_ASSET_HELM"
PACKAGE = "helm.sh/helm/v4/cmd/helm"
_VERSION_VAR = "helm.sh/helm/v4/internal/version.version"


class HelmBinaryError(RuntimeError):
    """Helm could not be found or built; the message says what to do."""


def _module_hash() -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((MODULE_DIR / name).read_bytes())
    return digest.hexdigest()[:16]


def pinned_version() -> str:
    """The Helm version pinned in go.mod (``v4.3.1``)."""
    match = re.search(r"^\s*helm\.sh/helm/v4 (v\S+)", (MODULE_DIR / "go.mod").read_text(), re.MULTILINE)
    if match is None:
        raise HelmBinaryError(f"{MODULE_DIR / 'go.mod'} does not pin helm.sh/helm/v4")
    return match.group(1)


def find_or_build(
    env: Mapping[str, str] | None = None,
    cache_dir: Path = DEFAULT_CACHE,
    *,
    use_path: bool = True,
) -> Path:
    """The helm binary: ``TEST_ASSET_HELM``, else ``helm`` on ``env["PATH"]`` (with ``use_path``),
    else the build for the current go.mod in ``cache_dir`` (built now if missing or stale)."""
    env = os.environ if env is None else env
    given = env.get(ENV_VAR)
    if given:
        path = Path(given)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise HelmBinaryError(f"{path} (from {ENV_VAR}) is not an executable file")
        return path
    if use_path:
        on_path = shutil.which("helm", path=env.get("PATH", ""))
        if on_path is not None:
            return Path(on_path)
    return build(cache_dir)


def find(env: Mapping[str, str] | None = None, cache_dir: Path = DEFAULT_CACHE) -> Path | None:
    """Like ``find_or_build`` but never builds: ``None`` when there is no helm yet (or a stale build)."""
    env = os.environ if env is None else env
    if env.get(ENV_VAR) or shutil.which("helm", path=env.get("PATH", "")):
        return find_or_build(env, cache_dir)
    target = cache_dir / "helm"
    stamp = cache_dir / "helm.STAMP"
    if target.exists() and stamp.exists() and stamp.read_text().strip() == _module_hash():
        return target
    return None


def build(cache_dir: Path = DEFAULT_CACHE) -> Path:
    """``cache_dir/helm``, built unless a build for the current go.mod/go.sum is there."""
    target = cache_dir / "helm"
    stamp = cache_dir / "helm.STAMP"
    wanted = _module_hash()
    if target.exists() and stamp.exists() and stamp.read_text().strip() == wanted:
        return target
    go = shutil.which("go")
    if go is None:
        raise HelmBinaryError(f"Go is needed to build helm (or set {ENV_VAR} to a prebuilt one)")
    cache_dir.mkdir(parents=True, exist_ok=True)
    print(f"building helm from {PACKAGE} (cached in {cache_dir})", file=sys.stderr, flush=True)
    # Build next to the target and rename: parallel runs never see a half-written binary.
    partial = target.with_name(f".helm.{os.getpid()}.partial")
    goenv = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -trimpath"}
    ldflags = f"-s -w -X {_VERSION_VAR}={pinned_version()}"
    subprocess.run(
        [go, "build", f"-ldflags={ldflags}", "-o", str(partial), PACKAGE],
        cwd=MODULE_DIR,
        env=goenv,
        check=True,
    )
    partial.replace(target)
    stamp.write_text(wanted + "\n")
    return target


if __name__ == "__main__":
    print(f"helm={find_or_build()}")
