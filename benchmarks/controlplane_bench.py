"""Measure the local control plane: warm start time, memory per API server, optional cold build.

Run: ``.venv/bin/python -m benchmarks.controlplane_bench [--cold-build] [--rounds N]``.
A cold build uses an empty temporary GOCACHE (the module cache is kept: downloading modules is
network time, not build time) and builds into a temporary folder, so the project cache is untouched.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from tests.controlplane.binaries import MODULE_DIR
from tests.controlplane.cluster import ControlPlane, rss_bytes

NAMES = ["kcp", "skr-a", "skr-b"]


def cold_build() -> float:
    with tempfile.TemporaryDirectory(prefix="cold-go-") as tmp:
        env = {**os.environ, "GOCACHE": str(Path(tmp) / "gocache"), "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
        started = time.monotonic()
        for name, package in (
            ("etcd", "go.etcd.io/etcd/server/v3"),
            ("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"),
        ):
            subprocess.run(
                ["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(Path(tmp) / name), package],
                cwd=MODULE_DIR,
                env=env,
                check=True,
            )
        return time.monotonic() - started


def warm_start(rounds: int) -> tuple[list[float], dict[str, int]]:
    durations: list[float] = []
    rss: dict[str, int] = {}
    for _ in range(rounds):
        started = time.monotonic()
        with ControlPlane(NAMES) as plane:
            durations.append(time.monotonic() - started)
            for name, server in plane.servers.items():
                assert server.pid is not None
                rss[name] = max(rss.get(name, 0), rss_bytes(server.pid))
    return durations, rss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cold-build", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.cold_build:
        print(f"cold build (etcd + kube-apiserver, empty GOCACHE): {cold_build():.0f} s")
    durations, rss = warm_start(args.rounds)
    print(
        f"warm start of etcd + {len(NAMES)} API servers until all /readyz: "
        f"median {statistics.median(durations):.1f} s, max {max(durations):.1f} s over {args.rounds} rounds"
    )
    for name, value in rss.items():
        print(f"  RSS {name}: {value / 2**20:.0f} MiB (right after readiness)")


if __name__ == "__main__":
    main()
