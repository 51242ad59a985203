"""Locate (or build once) the Go programs the local control plane runs.

The API-server-only control plane needs etcd and kube-apiserver; the *living* cluster (see
``cluster.py``) adds kube-controller-manager, kube-scheduler and kwok, so that Deployments roll out,
pods are scheduled onto simulated nodes and become Ready, garbage collection and namespace deletion
happen. Every binary is built from a pinned Go module into ``.cache/bin`` (ignored by git):
etcd and the Kubernetes components from ``go.mod`` in this folder, kwok from ``kwok/go.mod`` (its
own module: kwok pins other k8s.io and OpenTelemetry versions, which must not move the ones
kube-apiserver is built with). A stamp per binary records the hash of the go.mod/go.sum it was
built from, so a second run builds nothing, a version bump rebuilds, and adding a binary builds only
that one. Builds go to a temporary name first and are renamed into place: parallel runs never see
a half-written binary.

Prebuilt binaries follow envtest: ``TEST_ASSET_ETCD`` / ``TEST_ASSET_KUBE_APISERVER`` (both or
neither) and ``TEST_ASSET_KUBE_CONTROLLER_MANAGER``, ``TEST_ASSET_KUBE_SCHEDULER``, ``TEST_ASSET_KWOK``
name single binaries; ``KUBEBUILDER_ASSETS`` names a folder holding etcd and kube-apiserver (and is
used for the other three when it holds them). Anything not named is built.
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


class BinaryError(RuntimeError):
    """A binary could not be found or built; the message says what to do."""


@dataclass(frozen=True)
class GoTool:
    """One Go program: its cache name, main package, the module folder pinning it, its env variable."""

    name: str
    package: str
    module_dir: Path
    env_var: str

    def module_hash(self) -> str:
        digest = hashlib.sha256()
        for name in ("go.mod", "go.sum"):
            digest.update((self.module_dir / name).read_bytes())
        return digest.hexdigest()[:16]


ETCD = GoTool("etcd", "go.etcd.io/etcd/server/v3", MODULE_DIR, "TEST_ASSET_ETCD")
KUBE_APISERVER = GoTool(
    "kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver", MODULE_DIR, "TEST_ASSET_KUBE_APISERVER"
)
KUBE_CONTROLLER_MANAGER = GoTool(
    "kube-controller-manager",
    "k8s.io/kubernetes/cmd/kube-controller-manager",
    MODULE_DIR,
    "TEST_ASSET_KUBE_CONTROLLER_MANAGER",
)
KUBE_SCHEDULER = GoTool(
    "kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler", MODULE_DIR, "TEST_ASSET_KUBE_SCHEDULER"
)
KWOK = GoTool("kwok", "sigs.k8s.io/kwok/cmd/kwok", MODULE_DIR / "kwok", "TEST_ASSET_KWOK")

LIVING_TOOLS = (KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER, KWOK)


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path


@dataclass(frozen=True)
class LivingBinaries:
    """What turns an API server into a living cluster: controllers, scheduler, simulated kubelets."""

    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path


def _executable(path: Path, source: str) -> Path:
    if not os.access(path, os.X_OK):
        raise BinaryError(f"{path} (from {source}) is not an executable file")
    return path


def from_environment(env: Mapping[str, str]) -> Binaries | None:
    """etcd and kube-apiserver named by envtest's variables, or None when none is set."""
    etcd = env.get(ETCD.env_var)
    apiserver = env.get(KUBE_APISERVER.env_var)
    assets = env.get("KUBEBUILDER_ASSETS")
    if assets:
        etcd = etcd or str(Path(assets) / ETCD.name)
        apiserver = apiserver or str(Path(assets) / KUBE_APISERVER.name)
    if not (etcd or apiserver):
        return None
    if not (etcd and apiserver):
        raise BinaryError(
            "set both TEST_ASSET_ETCD and TEST_ASSET_KUBE_APISERVER, or KUBEBUILDER_ASSETS to a folder "
            "holding etcd and kube-apiserver"
        )
    return Binaries(
        _executable(Path(etcd), "the environment"), _executable(Path(apiserver), "the environment")
    )


def tool_from_environment(tool: GoTool, env: Mapping[str, str]) -> Path | None:
    """A prebuilt ``tool``: its ``TEST_ASSET_*`` variable, else a file in ``KUBEBUILDER_ASSETS``."""
    given = env.get(tool.env_var)
    if given:
        return _executable(Path(given), tool.env_var)
    assets = env.get("KUBEBUILDER_ASSETS")
    if assets and (Path(assets) / tool.name).exists():
        return _executable(Path(assets) / tool.name, "KUBEBUILDER_ASSETS")
    return None


def build_tool(
    tool: GoTool, cache_dir: Path = DEFAULT_CACHE, *, log: bool = True, env: Mapping[str, str] | None = None
) -> Path:
    """Build ``tool`` into ``cache_dir`` unless a build for its current go.mod/go.sum is there.

    ``env``: the environment Go is looked up in and run with (default: this process's).
    """
    env = os.environ if env is None else env
    target = cache_dir / tool.name
    stamp = cache_dir / f"{tool.name}.stamp"
    wanted = tool.module_hash()
    if target.exists() and stamp.exists() and stamp.read_text().strip() == wanted:
        return target
    go = shutil.which("go", path=env.get("PATH", ""))
    if go is None:
        raise BinaryError(f"Go is needed to build {tool.name} (or set {tool.env_var} to a prebuilt one)")
    cache_dir.mkdir(parents=True, exist_ok=True)
    if log:
        print(
            f"building {tool.name} from {tool.package} (cached in {cache_dir})", file=sys.stderr, flush=True
        )
    partial = cache_dir / f".{tool.name}.{os.getpid()}.partial"
    try:
        subprocess.run(
            [go, "build", "-ldflags=-s -w", "-o", str(partial), tool.package],
            cwd=tool.module_dir,
            env={**env, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -trimpath"},
            check=True,
        )
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    stamp.write_text(wanted + "\n")
    return target


def find_or_build_tool(
    tool: GoTool, env: Mapping[str, str] | None = None, cache_dir: Path = DEFAULT_CACHE
) -> Path:
    env = os.environ if env is None else env
    return tool_from_environment(tool, env) or build_tool(tool, cache_dir, env=env)


def build(cache_dir: Path = DEFAULT_CACHE, *, log: bool = True) -> Binaries:
    """Build etcd and kube-apiserver into ``cache_dir`` unless current builds are there."""
    return Binaries(build_tool(ETCD, cache_dir, log=log), build_tool(KUBE_APISERVER, cache_dir, log=log))


def find_or_build(env: Mapping[str, str] | None = None) -> Binaries:
    return from_environment(os.environ if env is None else env) or build()


def find_or_build_living(
    env: Mapping[str, str] | None = None, cache_dir: Path = DEFAULT_CACHE
) -> LivingBinaries:
    env = os.environ if env is None else env
    manager, scheduler, kwok = (find_or_build_tool(tool, env, cache_dir) for tool in LIVING_TOOLS)
    return LivingBinaries(manager, scheduler, kwok)


if __name__ == "__main__":
    found = find_or_build()
    living = find_or_build_living()
    print(
        f"etcd={found.etcd}\nkube-apiserver={found.kube_apiserver}\n"
        f"kube-controller-manager={living.kube_controller_manager}\nkube-scheduler={living.kube_scheduler}\n"
        f"kwok={living.kwok}"
    )
