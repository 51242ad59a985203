"""Measure helm-chart Manifests: render + apply of the test chart, and the render cache across Manifests.

Run: ``.venv/bin/python -m benchmarks.helm_bench [--installs 5] [--renders 20] [--manifests 100]``.

Everything real on loopback: etcd, KCP and one SKR kube-apiserver and the operator (``localrun``,
what ``make run`` starts), a distribution registry, the helm CLI (``tests/helm``). The chart is
``tests/helm/charts.py``'s (a CRD in ``crds/``, a Deployment, two ConfigMaps, values with a schema),
published with ``helm push``. Series:

* install: Manifest created -> every chart object applied (the reconcile's report), ``--installs``
  times (uninstalled in between). The first pulls the chart and runs ``helm template``; later ones
  find the archive on disk and the render in the cache, so the difference is the render's cost;
  the reconcile's own duration (fetch + render + transforms + apply) is reported too;
* helm template: the engine alone on the cached archive (a subprocess per call), ``--renders`` times;
  and one Manifest's fetch with empty caches (OCI look-up, archive pull, ``helm template``);
* render cache: ``--manifests`` Manifests of the same chart (different Kymas, same version and
  values: one module in many runtimes) fetched through the operator's ``helm-chart`` source at
  once, as their first reconciles would, then all again (their next reconciles); then the same with
  ``--value-sets`` distinct value sets. Reports the first pass's hit rate, helm runs, registry
  look-ups and archive downloads, and what the second pass needed. (This series drives the source
  directly: 100 runtimes would need 100 API servers; what the reconciler asks of the source per
  reconcile is exactly one ``fetch``.)
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

from benchmarks.localenv import bench_environment
from benchmarks.manifest_bench import wait_for
from benchmarks.stats import latency_row as line
from kyma_operator.api.manifest import Manifest
from kyma_operator.controllers.manifest.helm.engine import HelmEngine, TemplateRequest
from kyma_operator.controllers.manifest.helm.source import HelmSource, HelmSourceConfig
from kyma_operator.controllers.manifest.oci import OciSource, OciSourceConfig
from kyma_operator.controllers.manifest.reconciler import MANIFESTS
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import CRDS, NAMESPACES
from localrun.kcp import KCP_NAMESPACE
from localrun.system import local_system
from tests.controlplane.cluster import ControlPlane
from tests.helm.binaries import find_or_build
from tests.helm.charts import CHART, PLURAL, HelmCli, write_chart
from tests.integration.kyma_operator.controllers.manifest.chart import chart_manifest, helm_source
from tests.registry.server import LocalRegistry

JSON = dict[str, Any]
MODULE_NS = "bench-helm"
GROUP = "bench-helm.modules.test"
CHART_OBJECTS = 4  # CRD, Deployment, two ConfigMaps


async def install_series(
    system: Any, url: str, installs: int
) -> tuple[list[float], list[float], list[float]]:
    """(created -> applied, reconcile durations, created -> applied of the first only)."""
    applied_after: list[float] = []
    durations: list[float] = []
    for index in range(installs):
        name = f"helm-{index}"
        body = chart_manifest(name, KCP_NAMESPACE, helm_source(url, namespace=MODULE_NS))
        body["metadata"]["labels"]["operator.kyma-project.io/kyma-name"] = system.runtimes[0].kyma
        mark = len(system.manifest_reports)
        started = time.monotonic()
        await system.kcp.create(MANIFESTS, body)
        deadline = started + 60.0
        report = None
        while report is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"Manifest {name}: chart not applied within 60 s")
            report = next(
                (
                    r
                    for r in system.manifest_reports[mark:]
                    if r.request.name == name and len(r.applied) >= CHART_OBJECTS
                ),
                None,
            )
            await asyncio.sleep(0.002)
        applied_after.append(report.started + report.duration - started)
        durations.append(report.duration)
        await system.kcp.delete(MANIFESTS, name, KCP_NAMESPACE)
        await wait_for(system.kcp, name, "<gone>")
    return applied_after, durations, applied_after[:1]


async def template_series(engine: HelmEngine, archive: bytes, renders: int) -> list[float]:
    samples = []
    for _ in range(renders):
        started = time.monotonic()
        await engine.template(TemplateRequest(archive, "sample", MODULE_NS))
        samples.append(time.monotonic() - started)
    return samples


def bench_manifest(index: int, url: str, values: JSON) -> Manifest:
    body = chart_manifest(f"m-{index}", KCP_NAMESPACE, helm_source(url, namespace=MODULE_NS, values=values))
    body["metadata"]["labels"]["operator.kyma-project.io/kyma-name"] = f"kyma-{index}"
    return Manifest.from_object(body)


async def cache_series(
    kcp: KubeClient,
    registry: LocalRegistry,
    binary: Path,
    url: str,
    manifests: int,
    value_sets: int,
    work: Path,
) -> dict[str, Any]:
    oci = OciSource(
        kcp,
        OciSourceConfig(
            cache_dir=work / "modules", namespace=KCP_NAMESPACE, insecure_registries=(registry.host,)
        ),
    )
    helm = HelmSource(
        oci,
        HelmEngine(binary, concurrency=2),
        HelmSourceConfig(cache_dir=work / "modules" / "charts", default_namespace=MODULE_NS),
    )
    try:
        batch = [bench_manifest(i, url, {"greeting": f"set-{i % value_sets}"}) for i in range(manifests)]
        started = time.monotonic()
        results = await asyncio.gather(*(helm.fetch(m) for m in batch))
        elapsed = time.monotonic() - started
        first = (helm.renders.hits, helm.renders.misses, helm.engine.runs)
        again_started = time.monotonic()
        await asyncio.gather(*(helm.fetch(m) for m in batch))
        again = time.monotonic() - again_started
        return {
            "manifests": manifests,
            "value sets": value_sets,
            "distinct renders": len({r.digest for r in results}),
            "hits": first[0],
            "misses": first[1],
            "hit rate": first[0] / (first[0] + first[1]),
            "helm runs": first[2],
            "second hits": helm.renders.hits - first[0],
            "second runs": helm.engine.runs - first[2],
            "registry look-ups": helm.charts.lookups,
            "archive downloads": helm.charts.downloads,
            "first pass": elapsed,
            "second pass": again,
        }
    finally:
        await helm.close()
        await oci.close()


async def cold_fetch_series(
    kcp: KubeClient, registry: LocalRegistry, binary: Path, url: str, rounds: int, work: Path
) -> list[float]:
    """One Manifest's fetch with empty caches: registry look-up, archive pull, helm template."""
    samples = []
    for index in range(rounds):
        cache = work / f"cold-{index}"
        oci = OciSource(
            kcp,
            OciSourceConfig(cache_dir=cache, namespace=KCP_NAMESPACE, insecure_registries=(registry.host,)),
        )
        helm = HelmSource(
            oci, HelmEngine(binary), HelmSourceConfig(cache_dir=cache / "charts", default_namespace=MODULE_NS)
        )
        try:
            started = time.monotonic()
            await helm.fetch(bench_manifest(index, url, {}))
            samples.append(time.monotonic() - started)
        finally:
            await helm.close()
            await oci.close()
    return samples


async def run(plane: ControlPlane, registry: LocalRegistry, work: Path, args: argparse.Namespace) -> None:
    binary = find_or_build()
    cli = HelmCli(binary, work / "helm-home")
    archive = cli.package(write_chart(work / "src", GROUP, "1.0.0"), work / "packages")
    url = cli.push(archive, registry.host, "bench/charts")
    engine = HelmEngine(binary)
    version = await engine.version()

    overrides = {
        "oci_insecure_registries": (registry.host,),
        "module_cache_dir": work / "modules",
        "helm_binary": binary,
        # Manifests are created by this benchmark: the Kyma's module half would delete them
        "kyma_modules": False,
    }
    async with local_system(
        plane, ["skr-1"], lambda _: None, verbose=False, config_overrides=overrides
    ) as system:
        await system.wait_ready()
        skr = system.runtimes[0].client
        await skr.create(NAMESPACES, {"metadata": {"name": MODULE_NS}})
        applied, durations, _ = await install_series(system, url, args.installs)
        helm = system.operator.helm
        assert helm is not None
        operator_runs = helm.engine.runs
        with contextlib.suppress(NotFound):
            await skr.delete(CRDS, f"{PLURAL}.{GROUP}")
        renders = await template_series(engine, archive.read_bytes(), args.renders)
        cold = await cold_fetch_series(system.kcp, registry, binary, url, args.renders, work / "cold")
        same = await cache_series(system.kcp, registry, binary, url, args.manifests, 1, work / "same")
        mixed = await cache_series(
            system.kcp, registry, binary, url, args.manifests, args.value_sets, work / "mixed"
        )
    print()
    objects = "CRD in crds/, Deployment, 2 ConfigMaps"
    print(f"helm {version}; chart {CHART} 1.0.0: {CHART_OBJECTS} objects ({objects})")
    print("| what | samples | p50 | p99 | max | mean |")
    print("|---|---|---|---|---|---|")
    print(
        line("install, first (chart pulled, helm template): Manifest created -> chart applied", applied[:1])
    )
    print(line("install, later (archive on disk, render cached): created -> applied", applied[1:]))
    print(line("reconcile that applied the chart, first (fetch + render + apply)", durations[:1]))
    print(line("reconcile that applied the chart, later (render cache hit + apply)", durations[1:]))
    print(line("helm template alone (subprocess, cached archive)", renders))
    print(line("source fetch, empty caches (OCI look-up + archive pull + helm template)", cold))
    print(f"\nhelm runs by the operator over {args.installs} installs: {operator_runs}")
    for r in (same, mixed):
        print(
            f"\nrender cache, {r['manifests']} Manifests of one chart, {r['value sets']} value set(s): "
            f"hit rate {r['hit rate']:.2%} ({r['hits']} hits, {r['misses']} misses), "
            f"helm runs {r['helm runs']}, registry look-ups {r['registry look-ups']}, "
            f"archive downloads {r['archive downloads']}, distinct renders {r['distinct renders']}; "
            f"first pass {r['first pass'] * 1000:.0f} ms; second pass (every Manifest reconciled again): "
            f"{r['second hits']} hits, {r['second runs']} helm runs, {r['second pass'] * 1000:.0f} ms"
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--installs", type=int, default=5)
    parser.add_argument("--renders", type=int, default=20)
    parser.add_argument("--manifests", type=int, default=100)
    parser.add_argument("--value-sets", type=int, default=10)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    started = time.monotonic()
    with bench_environment("helm-bench-") as (plane, registry, work):
        asyncio.run(run(plane, registry, work, args))
    print(f"\ntotal {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
