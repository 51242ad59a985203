"""Build a Go program of the benchmarks (a folder with go.mod and main.go) once into ``.cache/bin``.

Why: the benchmarks run a few Go programs next to ours (upstream's listener, a Go admission client
like kube-apiserver's webhook client). Each is built from its pinned folder; a stamp holds the hash
of the folder's go.mod, go.sum (when it has one: a program on the standard library alone has none)
and main.go, like ``tests/controlplane/binaries.py``, so a second run builds nothing and an edit
rebuilds. The build writes a temporary name and renames it, so parallel runs never see half a binary.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "bin"


def source_hash(source: Path) -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        path = source / name
        if path.exists():
            digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def build(source: Path, name: str, *, cache: Path = CACHE, env: Mapping[str, str] | None = None) -> Path:
    """The binary ``name`` built from ``source``, first if missing or stale (needs Go; the module
    proxy for a program with dependencies). ``env``: extra variables for ``go build``."""
    binary = cache / name
    stamp = cache / f"{name}.stamp"
    wanted = source_hash(source)
    if binary.exists() and stamp.exists() and stamp.read_text().strip() == wanted:
        return binary
    cache.mkdir(parents=True, exist_ok=True)
    partial = cache / f".{name}.{os.getpid()}.tmp"
    variables = {**os.environ, "CGO_ENABLED": "0", **(env or {})}
    try:
        subprocess.run(
            ["go", "build", "-trimpath", "-o", str(partial), "."], cwd=source, env=variables, check=True
        )
        partial.replace(binary)
    finally:
        partial.unlink(missing_ok=True)
    stamp.write_text(wanted + "\n")
    return binary
