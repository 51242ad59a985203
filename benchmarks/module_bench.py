"""Measure the Kyma controller's module half through the whole local system (issue 12's figures).

Run: ``.venv/bin/python -m benchmarks.module_bench [--enables 100] [--status-changes 100] [--modules 5]``.

Everything real on loopback, brought up by ``localrun`` (what ``make run`` starts): etcd, KCP and one
SKR kube-apiserver, a real OCI registry with ``--modules`` modules published as OCM component
versions (each ``--objects`` objects), their ModuleTemplates and ModuleReleaseMetas in KCP, the
operator in this process (Kyma, Manifest and Watcher controllers, listener) and the runtime's agent
as its own process. Series:

* enable: a module added to the runtime Kyma's ``spec.modules`` -> its Manifest exists in KCP (seen
  by a KCP watch), ``--enables`` times (each followed by a disable and the module's removal; the
  next enable waits until the Kyma controller has been quiet for 0.7 s, i.e. the disable's
  re-reads are over);
* status: a Manifest's ``status.state`` changed -> the Kyma's ``status.modules`` entry shows it
  (seen by a KCP watch), ``--status-changes`` times; the Manifest carries the skip label so that only
  the benchmark writes its status (upstream: up to 5 minutes, the Kyma polls);
* requests: ``--modules`` modules enabled and Ready, then the Kyma and every Manifest reconciled
  ``--idle-rounds`` times without cause (what the safety net does); requests to KCP and to the
  runtime counted by verb (writes vs reads), scaled to an hour at the shipped safety-net intervals,
  beside upstream's figure for the same Kyma from the reference (§3.2 and §4.3: every 5 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.localenv import bench_environment
from benchmarks.samples import Series, sample_set, save
from benchmarks.stats import latency_row
from kyma_operator.api import names
from kyma_operator.api.resources import KYMAS, MANIFESTS, MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.config import OperatorConfig
from kyma_operator.controllers.kyma.moduleresolution import manifest_name
from kyma_operator.remote.metrics import WRITE_VERBS
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import PERIODIC_EARLY, Request
from kyma_operator.runtime.resources import NAMESPACES
from localrun.kcp import KCP_NAMESPACE, SYNC_NAMESPACE
from localrun.system import LocalSystem, local_system
from tests.controlplane.cluster import ControlPlane
from tests.registry.modules import publish_module
from tests.registry.server import LocalRegistry

JSON = dict[str, Any]
WINDOW = 0.6
"""Pause between edits of the same Kyma: beyond the listener's 0.5 s coalescing window."""
QUIET = 0.7
"""No Kyma reconcile for this long = the previous edit's re-reads (30 ms, 0.5 s) are over."""


def module_manifest(module: str, objects: int) -> bytes:
    namespace = f"bench-{module}"
    docs: list[JSON] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i:02d}", "namespace": namespace},
            "data": {"index": str(i)},
        }
        for i in range(objects - 1)
    ]
    docs.append(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": module, "namespace": namespace}}
    )
    return yaml.safe_dump_all(docs, sort_keys=False).encode()


class KcpRequests:
    """Counts the operator's requests to KCP by (verb, resource) (the KCP client's hook)."""

    def __init__(self) -> None:
        self.tally: Counter[tuple[str, str]] = Counter()

    def __call__(self, verb: str, resource: str) -> None:
        self.tally[(verb, resource)] += 1


async def watch_until(
    client: KubeClient, res: Any, namespace: str, name: str, check: Any, started: asyncio.Event
) -> float:
    """Time (monotonic) at which the watched object first satisfies ``check`` (None = deleted)."""
    listing = await client.list(res, namespace, field_selector=f"metadata.name={name}")
    for item in listing.items:
        if check(item):
            started.set()
            return time.monotonic()
    started.set()
    async for event in client.watch(
        res, namespace, resource_version=listing.resource_version, field_selector=f"metadata.name={name}"
    ):
        if event.type in ("ADDED", "MODIFIED") and check(event.object):
            return time.monotonic()
    raise RuntimeError("watch ended")


async def timed(client: KubeClient, res: Any, name: str, check: Any, action: Any) -> float:
    started = asyncio.Event()
    waiter = asyncio.create_task(watch_until(client, res, KCP_NAMESPACE, name, check, started))
    await started.wait()
    t0 = time.monotonic()
    await action()
    try:
        return await asyncio.wait_for(waiter, 30.0) - t0
    finally:
        waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError, RuntimeError):
            await waiter


async def set_modules(skr: KubeClient, modules: list[str]) -> None:
    await skr.patch(
        KYMAS,
        names.DEFAULT_REMOTE_KYMA_NAME,
        {"spec": {"modules": [{"name": m} for m in modules]}},
        SYNC_NAMESPACE,
    )


async def gone(kcp: KubeClient, name: str, deadline: float = 60.0) -> None:
    until = time.monotonic() + deadline
    while time.monotonic() < until:
        try:
            await kcp.get(MANIFESTS, name, KCP_NAMESPACE)
        except NotFound:
            return
        await asyncio.sleep(0.02)
    raise TimeoutError(f"Manifest {name} not gone")


def entry_state(kyma: JSON, module: str) -> str | None:
    for entry in (kyma.get("status") or {}).get("modules") or []:
        if entry.get("name") == module:
            return str(entry.get("state"))
    return None


async def wait_kyma(kcp: KubeClient, kyma: str, check: Any, deadline: float = 120.0) -> None:
    until = time.monotonic() + deadline
    while time.monotonic() < until:
        if check(await kcp.get(KYMAS, kyma, KCP_NAMESPACE)):
            return
        await asyncio.sleep(0.05)
    raise TimeoutError("Kyma condition not reached")


async def settled(system: LocalSystem, quiet_for: float = QUIET, deadline: float = 30.0) -> None:
    """Until no Kyma reconcile ran for ``quiet_for`` seconds (and at least ``WINDOW`` passed):
    each enable is measured on its own, not behind the previous disable's trailing reconciles."""
    await asyncio.sleep(WINDOW)
    until = time.monotonic() + deadline
    seen, since = len(system.reports), time.monotonic()
    while time.monotonic() < until:
        if len(system.reports) != seen:
            seen, since = len(system.reports), time.monotonic()
        elif time.monotonic() - since >= quiet_for:
            return
        await asyncio.sleep(0.02)
    raise TimeoutError(f"Kyma reconciles did not settle within {deadline:.0f} s")


async def enable_series(system: LocalSystem, module: str, component: str, rounds: int) -> list[float]:
    kyma = system.runtimes[0].kyma
    skr = system.runtimes[0].client
    name = manifest_name(kyma, component, module)
    samples = []
    for _ in range(rounds):
        await settled(system)
        samples.append(
            await timed(system.kcp, MANIFESTS, name, lambda obj: True, lambda: set_modules(skr, [module]))
        )
        await asyncio.sleep(WINDOW)
        await set_modules(skr, [])
        await gone(system.kcp, name)
    return samples


async def status_series(system: LocalSystem, module: str, component: str, rounds: int) -> list[float]:
    kyma = system.runtimes[0].kyma
    skr = system.runtimes[0].client
    name = manifest_name(kyma, component, module)
    await set_modules(skr, [module])
    await wait_kyma(system.kcp, kyma, lambda k: entry_state(k, module) == "Ready")
    await system.kcp.patch(
        MANIFESTS, name, {"metadata": {"labels": {names.SKIP_RECONCILIATION_LABEL: "true"}}}, KCP_NAMESPACE
    )
    await asyncio.sleep(WINDOW)
    samples = []
    for index in range(rounds):
        state = "Warning" if index % 2 == 0 else "Ready"

        async def write(state: str = state) -> None:
            await system.kcp.patch_status(
                MANIFESTS,
                name,
                {"status": {"state": state, "lastOperation": {"operation": state}}},
                KCP_NAMESPACE,
            )

        samples.append(
            await timed(system.kcp, KYMAS, kyma, lambda k, s=state: entry_state(k, module) == s, write)
        )
    await system.kcp.patch(
        MANIFESTS, name, {"metadata": {"labels": {names.SKIP_RECONCILIATION_LABEL: None}}}, KCP_NAMESPACE
    )
    await set_modules(skr, [])
    await gone(system.kcp, name)
    return samples


@dataclass(frozen=True)
class RequestCounts:
    """Mean requests per causeless reconcile of the Kyma and all its Manifests."""

    per_round: dict[str, float]
    runtime_detail: str
    kcp_detail: str


async def request_series(
    system: LocalSystem,
    modules: list[str],
    components: dict[str, str],
    rounds: int,
    kcp_requests: KcpRequests,
) -> RequestCounts:
    kyma = system.runtimes[0].kyma
    skr = system.runtimes[0].client
    await set_modules(skr, modules)
    await wait_kyma(
        system.kcp,
        kyma,
        lambda k: (
            (k.get("status") or {}).get("state") == "Ready"
            and all(entry_state(k, m) == "Ready" for m in modules)
        ),
    )
    operator = system.operator
    manifest = operator.manifest
    api = operator.api_requests
    assert manifest is not None and api is not None
    await asyncio.sleep(2.0)  # let trailing events (status copies, readiness) settle before counting
    await operator.kyma.controller.queue.wait_idle()
    await manifest.controller.queue.wait_idle()
    kcp_before, runtime_before = Counter(kcp_requests.tally), Counter(api.tally)
    kyma_request = Request(KCP_NAMESPACE, kyma)
    manifests = [Request(KCP_NAMESPACE, manifest_name(kyma, components[m], m)) for m in modules]
    for _ in range(rounds):
        operator.kyma.enqueue(kyma_request, "benchmark: safety net")
        for request in manifests:
            manifest.controller.enqueue(request, "benchmark: safety net")
        await asyncio.sleep(0.05)
        await operator.kyma.controller.queue.wait_idle()
        await manifest.controller.queue.wait_idle()
    kcp_delta = Counter(kcp_requests.tally)
    kcp_delta.subtract(kcp_before)
    runtime_delta = Counter(api.tally)
    runtime_delta.subtract(runtime_before)
    # the leader's Lease renewals are the operator's, not the Kyma's (and the same for 1 or 5,000)
    per_kyma = {key: n for key, n in kcp_delta.items() if key[1] != "leases"}
    kcp_writes = sum(n for (verb, _), n in per_kyma.items() if verb in WRITE_VERBS)
    kcp_reads = sum(n for (verb, _), n in per_kyma.items() if verb not in WRITE_VERBS and verb != "watch")
    rt_writes = sum(n for (_, verb, _), n in runtime_delta.items() if verb in WRITE_VERBS)
    rt_reads = sum(n for (_, verb, _), n in runtime_delta.items() if verb not in WRITE_VERBS)
    return RequestCounts(
        {
            "kcp_writes": kcp_writes / rounds,
            "kcp_reads": kcp_reads / rounds,
            "runtime_writes": rt_writes / rounds,
            "runtime_reads": rt_reads / rounds,
        },
        str(sorted((k, v) for k, v in runtime_delta.items() if v)),
        str(sorted((k, v) for k, v in kcp_delta.items() if v)),
    )


def upstream_per_hour(modules: int, objects: int) -> dict[str, int]:
    """Upstream's requests for one Ready Kyma with ``modules`` modules of ``objects`` objects each,
    from reference §3.2 / §4.3: every 5 minutes (12 times an hour) the Kyma reconcile writes 1
    Namespace, 3 CRDs, one apply per catalog template and release meta, ~8 webhook objects and the
    runtime Kyma status, reads 2 catalog LISTs, the webhook Deployment (GET) and its pods (LIST)
    and the runtime Kyma twice, and patches the KCP status once; every Manifest reconcile applies
    each of its objects (status written only on change)."""
    runtime_writes = 1 + 3 + 2 * modules + 8 + 1
    runtime_reads = 2 + 1 + 1 + 2
    manifest_writes = modules * objects
    return {
        "kcp_writes": 12 * 1,
        "kcp_reads": 0,
        "runtime_writes": 12 * (runtime_writes + manifest_writes),
        "runtime_reads": 12 * runtime_reads,
    }


async def run(plane: ControlPlane, registry: LocalRegistry, cache: Path, args: argparse.Namespace) -> None:
    def say(message: str) -> None:
        if args.verbose:
            print(message, flush=True)

    modules = [f"mod-{chr(ord('a') + i) * 3}" for i in range(args.modules)]
    components: dict[str, str] = {}
    kcp_requests = KcpRequests()
    defaults = OperatorConfig()
    overrides: dict[str, Any] = {
        "oci_insecure_registries": (registry.host,),
        "module_cache_dir": cache,
        "module_upgrade_rollout_max_delay": 0.0,
    }
    async with local_system(
        plane, ["skr-1"], say, verbose=args.verbose, config_overrides=overrides, on_kcp_request=kcp_requests
    ) as system:
        await system.wait_ready()
        skr = system.runtimes[0].client
        for module in modules:
            await skr.create(NAMESPACES, {"metadata": {"name": f"bench-{module}"}})
            published = await publish_module(
                registry,
                module,
                "1.0.0",
                namespace=KCP_NAMESPACE,
                manifest=module_manifest(module, args.objects),
                with_default_cr=False,
            )
            components[module] = str(published.release_meta["spec"]["ocmComponentName"])
            await system.kcp.apply(MODULE_TEMPLATES, published.template, field_manager="bench")
            await system.kcp.apply(MODULE_RELEASE_METAS, published.release_meta, field_manager="bench")
        enables = await enable_series(system, modules[0], components[modules[0]], args.enables)
        statuses = await status_series(system, modules[0], components[modules[0]], args.status_changes)
        requests = await request_series(system, modules, components, args.idle_rounds, kcp_requests)
    # the safety net may come up to PERIODIC_EARLY of its interval early (Result.periodic): counted
    # as if every one did
    safety_net = defaults.kyma_healthy_interval * (1.0 - PERIODIC_EARLY)
    per_hour_kyma = 3600.0 / safety_net
    counts = requests.per_round
    ours = {key: value * per_hour_kyma for key, value in counts.items()}
    upstream = upstream_per_hour(args.modules, args.objects)
    print()
    print(f"{args.modules} modules of {args.objects} objects each; one runtime")
    print("| what | samples | p50 | p99 | max | mean |")
    print("|---|---|---|---|---|---|")
    print(latency_row("module enabled in the runtime Kyma -> Manifest in KCP", enables))
    print(latency_row("Manifest status change -> Kyma status.modules shows it", statuses))
    if args.samples is not None:
        series = [
            Series.of("module enabled in the runtime Kyma -> Manifest in KCP", enables, 0.1),
            Series.of("Manifest status change -> Kyma status.modules shows it", statuses, 0.1),
        ]
        print(f"samples written to {save(args.samples, sample_set('benchmarks.module_bench', series))}")
    print()
    print(
        f"requests per Ready Kyma with its {args.modules} Manifests, per causeless reconcile of all "
        f"(mean of {args.idle_rounds}): KCP writes {counts['kcp_writes']:.2f}, KCP reads "
        f"{counts['kcp_reads']:.2f}, runtime writes {counts['runtime_writes']:.2f}, runtime reads "
        f"{counts['runtime_reads']:.2f}"
    )
    print(f"runtime requests by (controller, verb, resource): {requests.runtime_detail}")
    print(f"KCP requests by (verb, resource): {requests.kcp_detail}")
    print()
    print(
        f"per hour (ours: safety net every {defaults.kyma_healthy_interval:.0f} s while the agent is "
        f"healthy, up to {PERIODIC_EARLY:.0%} early: counted as every {safety_net:.0f} s)"
    )
    print("| per Ready Kyma-hour | ours | upstream | ours / upstream |")
    print("|---|---|---|---|")
    total_ours = total_up = 0.0
    for key in ("kcp_writes", "kcp_reads", "runtime_writes", "runtime_reads"):
        total_ours += ours[key]
        total_up += upstream[key]
        ratio = f"{100 * ours[key] / upstream[key]:.1f} %" if upstream[key] else "-"
        print(f"| {key.replace('_', ' ')} | {ours[key]:.1f} | {upstream[key]} | {ratio} |")
    print(f"| all | {total_ours:.1f} | {total_up:.0f} | {100 * total_ours / total_up:.1f} % |")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--enables", type=int, default=100, help="enable -> Manifest samples")
    parser.add_argument("--status-changes", type=int, default=100, help="Manifest state -> Kyma samples")
    parser.add_argument("--modules", type=int, default=5, help="modules enabled for the request count")
    parser.add_argument("--objects", type=int, default=10, help="objects per module")
    parser.add_argument("--idle-rounds", type=int, default=12, help="causeless reconciles counted")
    parser.add_argument("--verbose", action="store_true", help="print the local system's log")
    parser.add_argument(
        "--samples", type=Path, metavar="FILE", help="also write the raw latencies there (JSON for the plots)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    started = time.monotonic()
    with bench_environment("module-bench-") as (plane, registry, work):
        asyncio.run(run(plane, registry, work, args))
    print(f"\ntotal {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
