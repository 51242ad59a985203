"""What the access-Secret cache costs one replica: fleet-wide (before; and ``--shard-scoped-caches=false``)
against shard-scoped (a replica holding a third of the shards).

Run: ``.venv/bin/python -m benchmarks.secret_shards_bench [--secrets 5000] [--kubeconfig-bytes 3000]
[--held 6] [--repeat 2] [--also-held 0 16]``. Recorded in ``benchmarks/results/scale.md`` (issue 28,
access Secrets).

One real KCP API server (tests/controlplane); ``--secrets`` access Secrets in one namespace as a
provisioner writes them (labels ``operator.kyma-project.io/kyma-name`` and the runtime id), each
with a kubeconfig of ``--kubeconfig-bytes`` random-looking bytes (a client certificate and key are
about 3 KB), already carrying their Kyma's shard label (the converged state: the holder labelled
them). Then, each in a fresh Python process (``--measure``) so that nothing else shares its heap:
the operator's access-Secret informer as built without shard-scoped caches
(``remote.secrets.access_secret_informer``), and the shard-scoped one
(``controllers.sharding.scoped_access_secrets``) with ``--held`` of 16 shards started (a replica of
three holds 5 or 6). Figure: RSS after the cache synced (and a full collection) minus RSS just
before the informer started (imports done, client connected), i.e. what the cache adds to a
replica; plus the CPU seconds of the lists, the wall time until every held shard synced (loaded
machine: indicative only), and (diagnostic) the same RSS after ``malloc_trim(0)``
(glibc returns the free memory it kept: what of the figure is live objects).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import ctypes
import gc
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kyma_operator.api.names import MANAGED_BY_LABEL
from kyma_operator.controllers.sharding import scoped_access_secrets, scoped_informers
from kyma_operator.remote.secrets import access_secret_informer
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import NAMESPACES, SECRETS
from kyma_operator.runtime.shardmap import SHARD_LABEL, shard_of
from kyma_wire.names import KYMA_NAME_LABEL, RUNTIME_ID_LABEL
from tests.controlplane.cluster import ControlPlane

SHARDS = 16
NAMESPACE = "kcp-system"


def _rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def kubeconfig(i: int, size: int) -> bytes:
    """A kubeconfig of about ``size`` bytes whose certificate data differs per runtime."""
    blob = base64.b64encode(os.urandom(size * 3 // 4)).decode()
    return (
        "apiVersion: v1\nkind: Config\ncurrent-context: shoot\n"
        f"clusters:\n- name: shoot\n  cluster:\n    server: https://api.rt-{i}.example.com\n"
        f"users:\n- name: admin\n  user:\n    client-key-data: {blob}\n"
        "contexts:\n- name: shoot\n  context: {cluster: shoot, user: admin}\n"
    ).encode()


def secret(i: int, size: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"kubeconfig-rt-{i}",
            "namespace": NAMESPACE,
            "labels": {
                KYMA_NAME_LABEL: f"rt-{i}",
                RUNTIME_ID_LABEL: f"rt-{i}",
                MANAGED_BY_LABEL: "infrastructure-manager",
                SHARD_LABEL: str(shard_of(f"rt-{i}", SHARDS)),
            },
        },
        "data": {"config": base64.b64encode(kubeconfig(i, size)).decode()},
    }


async def create_fleet(client: KubeClient, count: int, size: int) -> None:
    await client.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
    for start in range(0, count, 50):
        await asyncio.gather(
            *(client.create(SECRETS, secret(i, size)) for i in range(start, min(count, start + 50)))
        )


async def measure(kubeconfig_path: Path, mode: str, held: int) -> dict[str, Any]:
    """In this (fresh) process: RSS and CPU the access-Secret cache of ``mode`` adds."""
    async with KubeClient.from_kubeconfig_file(kubeconfig_path) as client:
        await client.list(NAMESPACES)  # connected, TLS set up
        kymas = scoped_informers(client, NAMESPACE, SHARDS)[0]  # not run: only for tombstones
        gc.collect()
        rss0, cpu0 = _rss(), _cpu()
        informer: Informer
        if mode == "fleet":
            informer = access_secret_informer(client, NAMESPACE)
        else:
            informer = scoped = scoped_access_secrets(client, NAMESPACE, SHARDS, kymas)
        began = time.monotonic()
        task = asyncio.create_task(informer.run())
        assert await informer.wait_synced(300)
        if mode == "scoped":
            for shard in range(held):
                scoped.start_shard(shard)
            for shard in range(held):
                assert await scoped.wait_shard_synced(shard, 300)
        synced = time.monotonic() - began
        cached = len(informer)
        gc.collect()
        figures = {"mode": mode, "cached": cached, "rss_added": _rss() - rss0, "cpu_s": _cpu() - cpu0}
        figures["synced_s"] = synced
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # what of it is free memory the allocator kept
        figures["rss_trimmed"] = _rss() - rss0
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return figures


def _measure_in_child(kubeconfig_path: Path, mode: str, held: int) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.secret_shards_bench",
            "--measure",
            mode,
            "--kubeconfig",
            str(kubeconfig_path),
            "--held",
            str(held),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    figures: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return figures


async def run(count: int, size: int, held: int, repeat: int, also_held: list[int]) -> None:
    with ControlPlane(["kcp"]) as plane:
        path = Path(plane["kcp"].kubeconfig_path)
        started = time.monotonic()
        async with KubeClient.from_kubeconfig_file(path) as client:
            await create_fleet(client, count, size)
        print(
            f"{count} access Secrets (~{size} B kubeconfig) created in {time.monotonic() - started:.0f} s",
            flush=True,
        )
        mine = sum(1 for i in range(count) if shard_of(f"rt-{i}", SHARDS) < held)
        print(f"shards 0..{held - 1} of {SHARDS} hold {mine} of them", flush=True)
        for _ in range(repeat):
            for mode in ("fleet", "scoped"):
                f = _measure_in_child(path, mode, held)
                print(
                    f"{mode:6s}: {f['cached']} Secrets cached, +{f['rss_added'] / 1e6:.1f} MB RSS "
                    f"({f['rss_added'] / max(1, f['cached']) / 1e3:.1f} KB each; after malloc_trim "
                    f"+{f['rss_trimmed'] / 1e6:.1f} MB), {f['cpu_s']:.2f} CPU s, "
                    f"synced in {f['synced_s']:.2f} s",
                    flush=True,
                )
        for other in also_held:
            f = _measure_in_child(path, "scoped", other)
            print(
                f"scoped holding {other} of {SHARDS}: {f['cached']} cached, "
                f"+{f['rss_added'] / 1e6:.1f} MB RSS (after malloc_trim +{f['rss_trimmed'] / 1e6:.1f} MB), "
                f"synced in {f['synced_s']:.2f} s",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--secrets", type=int, default=5000, help="access Secrets in the fleet")
    parser.add_argument("--kubeconfig-bytes", type=int, default=3000, help="size of each kubeconfig")
    parser.add_argument("--held", type=int, default=6, help="shards (of 16) the scoped replica holds")
    parser.add_argument(
        "--also-held", type=int, nargs="*", default=[], help="then the scoped cache holding these counts once"
    )
    parser.add_argument("--repeat", type=int, default=2, help="measurements per mode (alternating)")
    parser.add_argument(
        "--measure", choices=("fleet", "scoped"), help="internal: measure one cache in this process"
    )
    parser.add_argument("--kubeconfig", type=Path, help="internal: the KCP of --measure")
    args = parser.parse_args()
    if args.measure is not None:
        print(json.dumps(asyncio.run(measure(args.kubeconfig, args.measure, args.held))))
        return
    asyncio.run(run(args.secrets, args.kubeconfig_bytes, args.held, args.repeat, args.also_held))


if __name__ == "__main__":
    main()
