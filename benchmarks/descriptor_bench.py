"""Measure module enable -> Manifest with descriptors from the registry (cold and warm cache) against
ModuleTemplates that embed them, in one run, and the registry requests of Kyma reconciles at rest.

Run: ``.venv/bin/python -m benchmarks.descriptor_bench [--rounds 30] [--idle-rounds 20]``.

Real components on loopback: one KCP kube-apiserver (etcd) with our CRDs, a real OCI registry
(distribution), the operator in this process (Kyma controller with its module half; the Manifest
controller is off: the series ends when the Manifest exists in KCP, seen by a KCP watch). Modules
are published by the project's own code; ``--rounds`` of them get a ModuleTemplate in the upstream
form (``spec.descriptor: {}``, the descriptor only in the registry) and as many others an embedded
descriptor. Three single-cluster Kymas (label ``sync=false``); round i, one after the other:

* embedded: Kyma ``k-emb`` lists embedded module i -> its Manifest;
* registry, cold: Kyma ``k-cold`` lists upstream-form module i (never fetched: manifest, config
  and descriptor layer requests) -> its Manifest;
* registry, warm: Kyma ``k-warm`` lists the same module i (its descriptor now cached) -> its
  Manifest.

At rest: ``k-warm`` lists every upstream-form module (all cached) and ``k-cold`` its last one; both
are reconciled ``--idle-rounds`` times without cause (a label edit wakes them) and the registry
requests the operator sends are counted (``ModuleDescriptors.registry_requests``, counted at the
HTTP transport).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Sequence

from benchmarks.stats import latency_row
from kyma_operator.api import names
from kyma_operator.api.resources import KYMAS, MANIFESTS, MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.controllers.kyma.moduleresolution import manifest_name
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import NAMESPACES
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.crds import apply_crds
from tests.integration.kyma_operator.harness import RunningOperator, operator_config, running_operator
from tests.registry.modules import publish_module
from tests.registry.server import LocalRegistry

NS = "kcp-system"
QUIET = 0.3
"""No Kyma reconcile for this long = the previous edit is done (each sample is measured alone)."""


def letters(i: int) -> str:
    """A module-name word (3+ lower-case letters, as the ModuleTemplate CRD wants) for ``i``."""
    return "".join(chr(ord("a") + (i // 26**k) % 26) for k in (2, 1, 0))


async def watch_until(client: KubeClient, name: str, started: asyncio.Event) -> float:
    """Time (monotonic) at which Manifest ``name`` first exists."""
    listing = await client.list(MANIFESTS, NS, field_selector=f"metadata.name={name}")
    started.set()
    if listing.items:
        return time.monotonic()
    async for event in client.watch(
        MANIFESTS, NS, resource_version=listing.resource_version, field_selector=f"metadata.name={name}"
    ):
        if event.type in ("ADDED", "MODIFIED"):
            return time.monotonic()
    raise RuntimeError("watch ended")


async def enable(kcp: KubeClient, kyma: str, modules: list[str], component: str, module: str) -> float:
    started = asyncio.Event()
    waiter = asyncio.create_task(watch_until(kcp, manifest_name(kyma, component, module), started))
    await started.wait()
    t0 = time.monotonic()
    await kcp.patch(KYMAS, kyma, {"spec": {"modules": [{"name": m} for m in modules]}}, NS)
    try:
        return await asyncio.wait_for(waiter, 60.0) - t0
    finally:
        waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError, RuntimeError):
            await waiter


async def settled(running: RunningOperator, deadline: float = 30.0) -> None:
    until = time.monotonic() + deadline
    seen, since = len(running.reports), time.monotonic()
    while time.monotonic() < until:
        await asyncio.sleep(0.02)
        if len(running.reports) != seen:
            seen, since = len(running.reports), time.monotonic()
        elif time.monotonic() - since >= QUIET:
            return
    raise TimeoutError("Kyma reconciles did not settle")


async def run(kcp: KubeClient, registry: LocalRegistry, args: argparse.Namespace) -> None:
    await kcp.create(NAMESPACES, {"metadata": {"name": NS}})
    embedded: list[tuple[str, str]] = []
    upstream: list[tuple[str, str]] = []
    t0 = time.monotonic()
    for i in range(args.rounds):
        for kind, into in (("emb", embedded), ("ups", upstream)):
            module = f"{kind}-{letters(i)}"
            published = await publish_module(registry, module, "1.0.0", namespace=NS)
            template = published.template
            if kind == "ups":
                template = {**template, "spec": {**template["spec"], "descriptor": {}}}
            await kcp.create(MODULE_TEMPLATES, template)
            await kcp.create(MODULE_RELEASE_METAS, published.release_meta)
            into.append((module, str(published.release_meta["spec"]["ocmComponentName"])))
    print(f"published {2 * args.rounds} modules in {time.monotonic() - t0:.1f} s", flush=True)
    config = operator_config(
        NS,
        kyma_modules=True,
        manifest_controller_enabled=False,
        kyma_healthy_interval=3600.0,
        kyma_unhealthy_interval=3600.0,
        oci_registry_host=registry.host,
        modules_repository_subpath="modules",
        oci_insecure_registries=(registry.host,),
    )
    series: dict[str, list[float]] = {"emb": [], "cold": [], "warm": []}
    async with running_operator(kcp, config) as running:
        descriptors = running.operator.kyma.descriptors
        assert descriptors is not None
        for kyma in ("k-emb", "k-cold", "k-warm"):
            await kcp.create(
                KYMAS,
                {
                    "metadata": {"name": kyma, "namespace": NS, "labels": {names.SYNC_LABEL: "false"}},
                    "spec": {"channel": "regular", "modules": []},
                },
            )
        await settled(running)
        for i in range(args.rounds):
            module, component = embedded[i]
            series["emb"].append(await enable(kcp, "k-emb", [module], component, module))
            await settled(running)
            module, component = upstream[i]
            series["cold"].append(await enable(kcp, "k-cold", [module], component, module))
            await settled(running)
            series["warm"].append(await enable(kcp, "k-warm", [module], component, module))
            await settled(running)
        cold_requests = descriptors.registry_requests
        fetches = descriptors.fetches
        # at rest: k-warm lists every upstream-form module (all cached), k-cold its last one
        everything = [m for m, _ in upstream]
        await kcp.patch(KYMAS, "k-warm", {"spec": {"modules": [{"name": m} for m in everything]}}, NS)
        await settled(running)
        before = descriptors.registry_requests
        reconciles = 0
        for r in range(args.idle_rounds):
            for kyma in ("k-warm", "k-cold"):
                seen = len(running.reports_for(kyma))
                await kcp.patch(KYMAS, kyma, {"metadata": {"labels": {"poke": str(r)}}}, NS)
                until = time.monotonic() + 30.0
                while len(running.reports_for(kyma)) <= seen:
                    if time.monotonic() > until:
                        raise TimeoutError("no reconcile at rest")
                    await asyncio.sleep(0.01)
                reconciles += 1
        at_rest = descriptors.registry_requests - before
        manifests = len((await kcp.list_all(MANIFESTS, NS)).items)
    load = os.getloadavg()
    print()
    print(f"{args.rounds} rounds; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (1/5/15 min)")
    print("| module enable -> Manifest in KCP | samples | p50 | p99 | max | mean |")
    print("|---|---|---|---|---|---|")
    print(latency_row("embedded descriptor (spec.descriptor)", series["emb"]))
    print(latency_row("descriptor from the registry, cold cache", series["cold"]))
    print(latency_row("descriptor from the registry, warm cache", series["warm"]))
    print()
    print(
        f"registry requests for {fetches} cold fetches: {cold_requests} "
        f"({cold_requests / max(fetches, 1):.1f} per component version); warm enables: 0 fetches added"
    )
    print(
        f"at rest: {reconciles} Kyma reconciles (k-warm lists {args.rounds} upstream-form modules, "
        f"k-cold 1; {manifests} Manifests) -> {at_rest} registry requests "
        f"({at_rest / max(reconciles, 1):.2f} per reconcile)"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=30, help="samples per series")
    parser.add_argument("--idle-rounds", type=int, default=20, help="causeless reconciles per Kyma at rest")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    started = time.monotonic()

    async def main_async(plane: ControlPlane, registry: LocalRegistry) -> None:
        client = KubeClient.from_kubeconfig_file(plane["kcp"].kubeconfig_path)
        try:
            await run(client, registry, args)
        finally:
            await client.close()

    with ControlPlane(["kcp"]) as plane, LocalRegistry() as registry:
        apply_crds(plane["kcp"].kubeconfig_path)
        asyncio.run(main_async(plane, registry))
    print(f"\ntotal {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
