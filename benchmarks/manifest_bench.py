"""Measure the Manifest controller through the whole local system.

Run: ``.venv/bin/python -m benchmarks.manifest_bench [--objects 50] [--installs 5] [--drifts 100]``.

Everything real on loopback, brought up by ``localrun`` (what ``make run``
starts): etcd, KCP and one SKR kube-apiserver, the operator in this process (Kyma, Watcher and
Manifest controllers, listener), the runtime's agent as its own process with both default Watchers
(the Kyma one and ``klm-module-watcher`` for module objects). Series:

* install: a module of ``--objects`` objects (one CRD, ConfigMaps, no workload), published to a
  real OCI registry (distribution, plain HTTP on loopback) -> Manifest created -> Manifest
  ``Ready`` (pull, render, CRD applied and Established, everything applied); then uninstalled,
  ``--installs`` times (the first pulls, later ones read the on-disk cache);
* drift repair: a module ConfigMap deleted in the runtime -> the same ConfigMap back (seen by a
  watch on the runtime), ``--drifts`` times, one at a time (1 s apart: the repair is itself an
  event and opens the listener's 0.5 s coalescing window for the Manifest); every timer of the
  Manifest is far longer than the run, so only the agent's event can repair it;
* idle: a Ready Manifest reconciled as often as an hour of upstream's 5-minute polling would
  (12 times) -> API writes (status, metadata, applies, deletes) counted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from benchmarks.localenv import bench_environment
from benchmarks.samples import Series, sample_set, save
from benchmarks.stats import latency_row
from kyma_operator.controllers.manifest.reconciler import MANIFESTS, ManifestReconciler, ManifestReport
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import CONFIGMAPS, CRDS, NAMESPACES
from localrun.kcp import KCP_NAMESPACE
from localrun.system import LocalSystem, local_system
from tests.controlplane.cluster import ControlPlane
from tests.integration.kyma_operator.controllers.manifest import module as m
from tests.integration.kyma_operator.controllers.manifest.published import Published, RegistryModules
from tests.registry.server import LocalRegistry

JSON = dict[str, Any]
MODULE_NS = "bench-module"
GROUP = "bench.modules.test"


def module_text(objects: int) -> str:
    configmaps = tuple(f"cm-{i:03d}" for i in range(objects - 2))
    body = m.module_objects(GROUP, MODULE_NS, configmaps=configmaps, workload="none")
    return yaml.safe_dump_all(body, sort_keys=False)


async def state_of(kcp: KubeClient, name: str) -> str:
    try:
        obj = await kcp.get(MANIFESTS, name, KCP_NAMESPACE)
    except NotFound:
        return "<gone>"
    return str((obj.get("status") or {}).get("state") or "")


async def wait_for(kcp: KubeClient, name: str, state: str, deadline: float = 60.0) -> None:
    until = time.monotonic() + deadline
    while time.monotonic() < until:
        if await state_of(kcp, name) == state:
            return
        await asyncio.sleep(0.005)
    raise TimeoutError(f"Manifest {name} not {state} within {deadline}s")


async def install_series(system: LocalSystem, published: Published, installs: int) -> list[float]:
    """The first install pulls from the registry; later ones find the blob in the on-disk cache."""
    kyma = system.runtimes[0].kyma
    samples = []
    for index in range(installs):
        name = f"bench-{index}"
        body = m.manifest_body(name, KCP_NAMESPACE, kyma, published)
        started = time.monotonic()
        await system.kcp.create(MANIFESTS, body)
        await wait_for(system.kcp, name, "Ready")
        samples.append(time.monotonic() - started)
        if index < installs - 1:
            await system.kcp.delete(MANIFESTS, name, KCP_NAMESPACE)
            await wait_for(system.kcp, name, "<gone>")
    return samples


async def drift_series(system: LocalSystem, object_names: Sequence[str], drifts: int) -> list[float]:
    skr = system.runtimes[0].client
    samples = []
    for index in range(drifts):
        target = object_names[index % len(object_names)]
        listing = await skr.list(CONFIGMAPS, MODULE_NS)
        back = asyncio.get_running_loop().create_future()

        async def watch(target: str = target, rv: str = listing.resource_version, back: Any = back) -> None:
            async for event in skr.watch(
                CONFIGMAPS, MODULE_NS, resource_version=rv, field_selector=f"metadata.name={target}"
            ):
                if event.type == "ADDED" and not back.done():
                    back.set_result(time.monotonic())
                    return

        watcher = asyncio.create_task(watch())
        await asyncio.sleep(0.05)  # the watch is established before the deletion
        started = time.monotonic()
        await skr.delete(CONFIGMAPS, target, MODULE_NS)
        try:
            restored = await asyncio.wait_for(back, 30.0)
            samples.append(restored - started)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        # beyond the listener's 0.5 s coalescing window, which our own repair (an event too) opens
        await asyncio.sleep(1.0)
    return samples


async def idle_series(system: LocalSystem, name: str, rounds: int) -> dict[str, int]:
    manifest = system.operator.manifest
    assert manifest is not None
    reconciler: ManifestReconciler = manifest.reconciler
    metrics = system.operator.manager.registry
    before = {
        "status": reconciler.status_writes,
        "metadata": reconciler.metadata_writes,
        "applied": int(metrics.get_sample_value("kyma_operator_manifest_objects_applied_total") or 0),
        "pruned": int(metrics.get_sample_value("kyma_operator_manifest_objects_pruned_total") or 0),
    }
    request = Request(KCP_NAMESPACE, name)
    done = asyncio.Event()

    def observe(report: ManifestReport) -> None:
        if report.request == request:
            done.set()

    reconciler.observers.append(observe)
    for _ in range(rounds):
        done.clear()
        manifest.controller.enqueue(request, "benchmark: safety net")
        await asyncio.wait_for(done.wait(), 30.0)
    reconciler.observers.remove(observe)
    after = {
        "status": reconciler.status_writes,
        "metadata": reconciler.metadata_writes,
        "applied": int(metrics.get_sample_value("kyma_operator_manifest_objects_applied_total") or 0),
        "pruned": int(metrics.get_sample_value("kyma_operator_manifest_objects_pruned_total") or 0),
    }
    return {key: after[key] - before[key] for key in before}


async def run(plane: ControlPlane, registry: LocalRegistry, cache: Path, args: argparse.Namespace) -> None:
    published = await RegistryModules(registry, "bench").publish(module_text(args.objects))

    def say(message: str) -> None:
        if args.verbose:
            print(message, flush=True)

    # Manifests are created by this benchmark: the Kyma's module half would delete them
    overrides = {
        "oci_insecure_registries": (registry.host,),
        "module_cache_dir": cache,
        "kyma_modules": False,
    }
    async with local_system(plane, ["skr-1"], say, verbose=False, config_overrides=overrides) as system:
        await system.wait_ready()
        skr = system.runtimes[0].client
        await skr.create(NAMESPACES, {"metadata": {"name": MODULE_NS}})
        installs = await install_series(system, published, args.installs)
        last = f"bench-{args.installs - 1}"
        reconciler_reports = [r for r in system.manifest_reports if len(r.applied) >= args.objects]
        config_names = [f"cm-{i:03d}" for i in range(args.objects - 2)]
        drifts = await drift_series(system, config_names, args.drifts)
        idle = await idle_series(system, last, 12)
        print()
        print(f"module of {args.objects} objects (1 CRD + {args.objects - 2} ConfigMaps + 1 ServiceAccount)")
        print("| what | samples | p50 | p99 | max | mean |")
        print("|---|---|---|---|---|---|")
        print(
            latency_row("install, first (pulled from the registry): Manifest created -> Ready", installs[:1])
        )
        print(
            latency_row("install, later (blob from the disk cache): Manifest created -> Ready", installs[1:])
        )
        print(
            latency_row(
                "install: the reconcile that applied everything", [r.duration for r in reconciler_reports]
            )
        )
        print(latency_row("drift: runtime delete -> object back", drifts))
        if args.samples is not None:
            series = [Series.of("runtime drift (module object deleted) -> restored", drifts, 1.0)]
            print(f"samples written to {save(args.samples, sample_set('benchmarks.manifest_bench', series))}")
        print()
        print(f"idle: 12 reconciles of a Ready Manifest (one hour of 5-minute polling): writes {idle}")
        with contextlib.suppress(NotFound):
            await system.kcp.delete(MANIFESTS, last, KCP_NAMESPACE)
        with contextlib.suppress(TimeoutError):
            await wait_for(system.kcp, last, "<gone>", 30.0)
        with contextlib.suppress(NotFound):
            await skr.delete(CRDS, f"{m.PLURAL}.{GROUP}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--objects", type=int, default=50)
    parser.add_argument("--installs", type=int, default=5)
    parser.add_argument("--drifts", type=int, default=100)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument(
        "--samples", type=Path, metavar="FILE", help="also write the raw latencies there (JSON for the plots)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    started = time.monotonic()
    with bench_environment("manifest-bench-") as (plane, registry, work):
        asyncio.run(run(plane, registry, work, args))
    print(f"\ntotal {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
