"""Measure the local control plane: builds, start times and memory, plain and living clusters.

Run: ``.venv/bin/python -m benchmarks.controlplane_bench [--cold-build] [--rounds N] [--no-workload]``.

* ``--cold-build``: every Go binary the suite uses (etcd, kube-apiserver, kube-controller-manager,
  kube-scheduler, kwok, kustomize) built one after the other from an empty temporary GOCACHE, as a
  fresh clone's ``make binaries`` does (the module cache is kept: downloading modules is network
  time, not build time; later builds reuse what earlier ones compiled into that cache). The binaries
  go to a temporary folder: the project cache is untouched.
* start times, ``--rounds`` each: the plain plane of the test session (etcd + kcp, skr-a, skr-b API
  servers, until every ``/readyz``) and the living plane of ``make run`` (etcd + kcp and skr-1, each
  with kube-controller-manager, kube-scheduler and kwok with 3 nodes, until controllers run and every
  node is Ready and schedulable). The first living round is reported apart ("first start": binaries
  not yet in the page cache after a build, nothing warmed up); the others give the warm figure.
* RSS of every process right after readiness (the largest over the rounds), and, with the workload,
  after it: a Deployment of 10 replicas until Available (all pods Ready on kwok nodes), its deletion
  until ReplicaSet and pods are garbage-collected, and a namespace deletion until it is gone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import kubernetes

from tests.controlplane.binaries import ETCD, KUBE_APISERVER, LIVING_TOOLS, GoTool
from tests.controlplane.cluster import ControlPlane, rss_bytes
from tests.kustomize.binaries import KUSTOMIZE

PLAIN = ["kcp", "skr-a", "skr-b"]
LIVING = ["kcp", "skr-1"]
TOOLS: tuple[GoTool, ...] = (ETCD, KUBE_APISERVER, *LIVING_TOOLS, KUSTOMIZE)


def cold_build() -> list[tuple[str, float, int]]:
    """(binary, seconds, size in bytes) per tool, built from an empty GOCACHE in order."""
    results = []
    with tempfile.TemporaryDirectory(prefix="cold-go-") as tmp:
        env = {**os.environ, "GOCACHE": str(Path(tmp) / "gocache"), "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
        for tool in TOOLS:
            target = Path(tmp) / tool.name
            started = time.monotonic()
            subprocess.run(
                ["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(target), tool.package],
                cwd=tool.module_dir,
                env=env,
                check=True,
            )
            results.append((tool.name, time.monotonic() - started, target.stat().st_size))
    return results


def _rss(plane: ControlPlane) -> dict[str, int]:
    found: dict[str, int] = {}
    if plane.etcd_pid is not None:
        found["etcd"] = rss_bytes(plane.etcd_pid)
    for name, server in plane.servers.items():
        for program, pid in server.pids().items():
            found[f"{name} {program}"] = rss_bytes(pid)
    return found


def _max(into: dict[str, int], sample: dict[str, int]) -> None:
    for key, value in sample.items():
        into[key] = max(into.get(key, 0), value)


def starts(
    names: list[str],
    rounds: int,
    *,
    living: bool,
    workload: Callable[[ControlPlane], dict[str, float]] | None,
) -> tuple[list[float], dict[str, int], dict[str, int], dict[str, float]]:
    durations: list[float] = []
    rss: dict[str, int] = {}
    after: dict[str, int] = {}
    figures: dict[str, float] = {}
    for index in range(rounds):
        started = time.monotonic()
        with ControlPlane(names, living=living) as plane:
            durations.append(time.monotonic() - started)
            _max(rss, _rss(plane))
            if workload is not None and index == rounds - 1:
                figures = workload(plane)
                _max(after, _rss(plane))
    return durations, rss, after, figures


def _poll(what: str, probe: Callable[[], bool], within: float = 120.0) -> float:
    started = time.monotonic()
    while not probe():
        if time.monotonic() - started > within:
            raise TimeoutError(f"{what} not within {within:.0f}s")
        time.sleep(0.05)
    return time.monotonic() - started


def workload(plane: ControlPlane) -> dict[str, float]:
    """Rollout, garbage collection and namespace deletion in the living runtime, timed."""
    api_client = kubernetes.config.new_client_from_config(config_file=str(plane["skr-1"].kubeconfig_path))
    core, apps = kubernetes.client.CoreV1Api(api_client), kubernetes.client.AppsV1Api(api_client)
    namespace, replicas = "bench", 10
    figures = {}
    try:
        core.create_namespace({"metadata": {"name": namespace}})
        labels = {"app": "bench"}
        apps.create_namespaced_deployment(
            namespace,
            {
                "metadata": {"name": "bench"},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"containers": [{"name": "app", "image": "registry.test/app:1.0.0"}]},
                    },
                },
            },
        )

        def available() -> bool:
            status = apps.read_namespaced_deployment("bench", namespace).status
            return (status.available_replicas or 0) == replicas

        figures[f"Deployment of {replicas} created -> Available (all pods Ready on kwok nodes)"] = _poll(
            "rollout", available
        )
        apps.delete_namespaced_deployment("bench", namespace)

        def collected() -> bool:
            pods = core.list_namespaced_pod(namespace).items
            return not pods and not apps.list_namespaced_replica_set(namespace).items

        figures["Deployment deleted -> ReplicaSet and pods garbage-collected"] = _poll("GC", collected)
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "data"}})
        core.delete_namespace(namespace)

        def gone() -> bool:
            return namespace not in {ns.metadata.name for ns in core.list_namespace().items}

        figures["namespace deleted -> gone"] = _poll("namespace deletion", gone)
    finally:
        api_client.close()
    return figures


def _mib(value: int) -> str:
    return f"{value / 2**20:.0f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cold-build", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-workload", action="store_true")
    args = parser.parse_args()
    if args.cold_build:
        builds = cold_build()
        print("cold build, empty GOCACHE, in this order (later builds reuse the cache of earlier ones):")
        for name, seconds, size in builds:
            print(f"  {name:24} {seconds:6.0f} s  ({size / 1e6:.0f} MB)")
        print(f"  {'total':24} {sum(s for _, s, _ in builds):6.0f} s")

    durations, rss, _, _ = starts(PLAIN, args.rounds, living=False, workload=None)
    print(
        f"plain plane: etcd + {len(PLAIN)} API servers until every /readyz: "
        f"median {statistics.median(durations):.1f} s, max {max(durations):.1f} s over {args.rounds} rounds"
    )
    for name, value in rss.items():
        print(f"  RSS {name}: {_mib(value)} (right after readiness)")

    durations, rss, after, figures = starts(
        LIVING, args.rounds, living=True, workload=None if args.no_workload else workload
    )
    first, warm = durations[0], durations[1:] or durations
    print(
        f"living plane ({', '.join(LIVING)}: API server + kube-controller-manager + kube-scheduler + kwok, "
        f"3 nodes each) until controllers run and nodes are schedulable: first start {first:.1f} s, "
        f"warm median {statistics.median(warm):.1f} s, max {max(warm):.1f} s over {len(warm)} rounds"
    )
    for name, value in rss.items():
        extra = f", {_mib(after[name])} after the workload" if name in after else ""
        print(f"  RSS {name}: {_mib(value)} (right after readiness{extra})")
    total = sum(rss.values())
    print(f"  RSS total of the living plane: {_mib(total)}")
    for what, seconds in figures.items():
        print(f"  {what}: {seconds:.2f} s")


if __name__ == "__main__":
    main()
