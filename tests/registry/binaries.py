"""Locate (or build once) the OCI registry the tests push modules to: CNCF distribution v3.

Why built from Go modules and not Debian's ``docker-registry``: the Debian package needs root and
``apt-get`` in the Makefile, ships distribution 2.8 (pre-OCI-1.1) and starts a system service on
install; building ``github.com/distribution/distribution/v3/cmd/registry`` works like the control
plane's binaries (Go module proxy, cached in ``.cache/bin``, rebuilt only when go.mod/go.sum change),
needs no root and pins the exact version. A tiny ``registry-htpasswd`` (bcrypt lines for the basic-auth
variant; Python's standard library has no bcrypt) is built from the same module.

``TEST_ASSET_REGISTRY`` / ``TEST_ASSET_REGISTRY_HTPASSWD`` name prebuilt binaries (envtest style).
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

_PACKAGES = {
    "registry": "github.com/distribution/distribution/v3/cmd/registry",
    "registry-htpasswd": "./htpasswd",
}
_ENV = {"registry": "TEST_ASSET_REGISTRY", "registry-htpasswd": "TEST_ASSET_REGISTRY_HTPASSWD"}


class RegistryBinaryError(RuntimeError):
    """The registry binary could not be found or built; the message says what to do."""


@dataclass(frozen=True)
class RegistryBinaries:
    registry: Path
    htpasswd: Path


def _module_hash() -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "htpasswd/main.go"):
        digest.update((MODULE_DIR / name).read_bytes())
    return digest.hexdigest()[:16]


def find_or_build(env: Mapping[str, str] | None = None, cache_dir: Path = DEFAULT_CACHE) -> RegistryBinaries:
    env = os.environ if env is None else env
    paths: dict[str, Path] = {}
    built = False
    stamp = cache_dir / "registry.STAMP"
    wanted = _module_hash()
    fresh = stamp.exists() and stamp.read_text().strip() == wanted
    for name, package in _PACKAGES.items():
        given = env.get(_ENV[name])
        if given:
            path = Path(given)
            if not os.access(path, os.X_OK):
                raise RegistryBinaryError(f"{path} (from {_ENV[name]}) is not an executable file")
            paths[name] = path
            continue
        path = cache_dir / name
        if not (fresh and path.exists()):
            _build(name, package, path)
            built = True
        paths[name] = path
    if built:
        stamp.write_text(wanted + "\n")
    return RegistryBinaries(paths["registry"], paths["registry-htpasswd"])


def _build(name: str, package: str, target: Path) -> None:
    go = shutil.which("go")
    if go is None:
        raise RegistryBinaryError(f"Go is needed to build {name} (or set {_ENV[name]} to a prebuilt one)")
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"building {name} from {package} (cached in {target.parent})", file=sys.stderr, flush=True)
    # Build next to the target and rename: parallel test runs never see a half-written binary.
    partial = target.with_name(f".{name}.{os.getpid()}.partial")
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -trimpath"}
    subprocess.run(
        [go, "build", "-ldflags=-s -w", "-o", str(partial), package], cwd=MODULE_DIR, env=env, check=True
    )
    partial.replace(target)


if __name__ == "__main__":
    found = find_or_build()
    print(f"registry={found.registry}\nregistry-htpasswd={found.htpasswd}")
