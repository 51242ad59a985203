"""Locate (or build once) the etcd and kube-apiserver binaries the local control plane runs.

Order of precedence follows envtest: ``TEST_ASSET_ETCD`` / ``TEST_ASSET_KUBE_APISERVER`` name single
binaries, ``KUBEBUILDER_ASSETS`` names a folder holding both; otherwise we build them from the Go
module in this folder into ``.cache/bin`` (ignored by git). A stamp file records the hash of
``go.mod``/``go.sum``, so a second run builds nothing and a version bump rebuilds.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

MODULE_DIR = Path(__file__).resolve().parent
REPO_ROOT = MODULE_DIR.parents[1]
DEFAULT_CACHE = REPO_ROOT / ".cache" / "bin"

# Go main package of each binary, as pinned in go.mod.
_PACKAGES = {
    "etcd": "go.etcd.io/etcd/server/v3",
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
}


class BinaryError(RuntimeError):
    """A binary could not be found or built; the message says what to do."""


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path


def _module_hash() -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((MODULE_DIR / name).read_bytes())
    return digest.hexdigest()[:16]


def from_environment(env: Mapping[str, str]) -> Binaries | None:
    """Binaries named by envtest's variables, or None when none is set."""
    etcd = env.get("TEST_ASSET_ETCD")
    apiserver = env.get("TEST_ASSET_KUBE_APISERVER")
    assets = env.get("KUBEBUILDER_ASSETS")
    if assets:
        etcd = etcd or str(Path(assets) / "etcd")
        apiserver = apiserver or str(Path(assets) / "kube-apiserver")
    if not (etcd or apiserver):
        return None
    if not (etcd and apiserver):
        raise BinaryError(
            "set both TEST_ASSET_ETCD and TEST_ASSET_KUBE_APISERVER, or KUBEBUILDER_ASSETS to a folder "
            "holding etcd and kube-apiserver"
        )
    found = Binaries(Path(etcd), Path(apiserver))
    for path in (found.etcd, found.kube_apiserver):
        if not os.access(path, os.X_OK):
            raise BinaryError(f"{path} (from the environment) is not an executable file")
    return found


def build(cache_dir: Path = DEFAULT_CACHE, *, log: bool = True) -> Binaries:
    """Build both binaries into ``cache_dir`` unless a build for the current go.mod is there."""
    stamp = cache_dir / "STAMP"
    wanted = _module_hash()
    binaries = Binaries(cache_dir / "etcd", cache_dir / "kube-apiserver")
    if (
        stamp.exists()
        and stamp.read_text().strip() == wanted
        and all(p.exists() for p in (binaries.etcd, binaries.kube_apiserver))
    ):
        return binaries
    go = shutil.which("go")
    if go is None:
        raise BinaryError(
            "Go is needed to build etcd and kube-apiserver (or set KUBEBUILDER_ASSETS to prebuilt ones)"
        )
    cache_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -trimpath"}
    for name, package in _PACKAGES.items():
        if log:
            print(f"building {name} from {package} (cached in {cache_dir})", file=sys.stderr, flush=True)
        subprocess.run(
            [go, "build", "-ldflags=-s -w", "-o", str(cache_dir / name), package],
            cwd=MODULE_DIR,
            env=env,
            check=True,
        )
    stamp.write_text(wanted + "\n")
    return binaries


def find_or_build(env: Mapping[str, str] | None = None) -> Binaries:
    return from_environment(os.environ if env is None else env) or build()


if __name__ == "__main__":
    found = find_or_build()
    print(f"etcd={found.etcd}\nkube-apiserver={found.kube_apiserver}")
