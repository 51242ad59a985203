"""Take enable -> module Ready apart: what the operator adds to each step (DESIGN §9.3).

Run: ``.venv/bin/python -m benchmarks.enable_steps [--enables 40] [--modules 3] [--objects 10]``.

DESIGN §9.3: "module enabled in a runtime -> module Ready: bounded by the module's own rollout, the
operator adding <= 100 ms per step". ``module_bench`` measures the first step only (enable ->
Manifest); this benchmark follows one enable all the way to Ready and splits it.

The system is the one ``module_bench`` runs (``localrun``, everything real on loopback): etcd, KCP
and one *living* runtime kube-apiserver (kube-controller-manager, kube-scheduler and kwok nodes), a
real OCI registry with ``--modules`` published modules, the operator in this process (Kyma, Manifest
and Watcher controllers, listener) and the runtime's agent as its own process. Each module is
``--objects - 1`` ConfigMaps and one Deployment (1 replica); its rollout is the cluster's own: the
Deployment controller creates the ReplicaSet, the scheduler places the Pod on a kwok node, kwok
marks it Running and Ready, the Deployment controller sets ``Available`` -- no container runs and
nothing patches a status by hand. Each module is first enabled once outside the samples (its
layer fetched from the registry, the runtime's first admission calls: shown apart as "cold"), then
``--enables`` times, rotating over the modules (each followed by a disable, the module's removal, a
quiet Kyma controller and no event within the listener's coalescing window, as in ``module_bench``).

Timestamps are ``time.monotonic()`` in this process: the enable's write (t0), watch events seen by
the benchmark's own clients (KCP: Manifests and Kymas; runtime: the module's ConfigMaps and
Deployments, the runtime Kyma), the listener's routing of the runtime event (the intake's observer)
and the reconcile reports of both controllers (start and duration, the operator's own trace). Steps:

1. enable written -> the listener routes the runtime event (the API server's admission call to the
   agent, the agent's signed event, the listener);
2. routed -> the Manifest exists in KCP (queue, Kyma reconcile, Manifest create);
3. Manifest in KCP -> every module object exists in the runtime (informer, queue, fetch and render
   of the module, apply);
4. the Deployment created -> the Deployment ready by the operator's rule (``readiness``): the
   module's own rollout, not the operator's time;
5. max(3, 4) done -> the module Ready in the runtime Kyma's status, in three parts: (a) the Manifest
   ``Ready`` in KCP (the agent's status event, listener, Manifest reconcile), (b) the KCP Kyma's
   ``status.modules`` entry ``Ready``, (c) the runtime Kyma's copy ``Ready``.

The operator's share of a step is its wall time minus the time spent waiting for the rollout: steps
1-3 and 5 contain no such wait (they start once the previous one is done; 4 is all rollout), so the
share is the step's wall time; the rows say so. A sample is the step of one enable; the watches add
their own delivery time (~ms) to the step they end and take it off the next.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.localenv import bench_environment
from benchmarks.module_bench import entry_state, gone, set_modules, settled
from benchmarks.stats import latency_row, percentile
from kyma_operator.api import names
from kyma_operator.api.meta import State
from kyma_operator.api.resources import KYMAS, MANIFESTS, MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.controllers.common.report import ReconcileReport
from kyma_operator.controllers.kyma.moduleresolution import manifest_name
from kyma_operator.controllers.manifest.readiness import deployment_readiness
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import CONFIGMAPS, DEPLOYMENTS, NAMESPACES, Resource
from localrun.kcp import KCP_NAMESPACE, SYNC_NAMESPACE
from localrun.system import LocalSystem, local_system
from tests.controlplane.cluster import ControlPlane
from tests.registry.modules import publish_module
from tests.registry.server import LocalRegistry

JSON = dict[str, Any]
TARGET = 0.1
"""DESIGN §9.3: the operator adds at most 100 ms per step."""
STEP_DEADLINE = 60.0


def module_manifest(module: str, objects: int) -> bytes:
    """``objects - 1`` ConfigMaps and one Deployment whose rollout the living cluster does."""
    namespace = f"bench-{module}"
    labels = {"app": module}
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
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": module, "namespace": namespace, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "manager", "image": f"example.invalid/{module}:1.0.0"}]},
                },
            },
        }
    )
    return yaml.safe_dump_all(docs, sort_keys=False).encode()


Event = tuple[float, str, JSON]


@dataclass(frozen=True)
class WatchSpec:
    """One watch of the observer process: ``(kubeconfig, resource, namespace)`` under a name."""

    name: str
    kubeconfig: str
    res: Resource
    namespace: str | None


def slim(obj: JSON) -> JSON:
    """What the steps read of an object (identity, generation, status): small to send between
    processes."""
    meta = obj.get("metadata") or {}
    keep = ("name", "namespace", "uid", "generation")
    return {"metadata": {k: meta[k] for k in keep if k in meta}, "status": obj.get("status") or {}}


async def _watch_forever(spec: WatchSpec, client: KubeClient, out: Any) -> None:
    while True:
        listing = await client.list(spec.res, spec.namespace)
        now = time.monotonic()
        for item in listing.items:
            out.put((spec.name, now, "LISTED", slim(item)))
        out.put((spec.name, now, "SYNCED", {}))
        async for event in client.watch(
            spec.res, spec.namespace, resource_version=listing.resource_version, timeout_seconds=1800
        ):
            if event.type == "ERROR":
                break
            out.put((spec.name, time.monotonic(), event.type, slim(event.object)))


async def _observe(specs: Sequence[WatchSpec], out: Any) -> None:
    clients = {path: KubeClient.from_kubeconfig_file(path) for path in {s.kubeconfig for s in specs}}
    try:
        await asyncio.gather(*(_watch_forever(s, clients[s.kubeconfig], out) for s in specs))
    finally:
        for client in clients.values():
            await client.close()


def observer_process(specs: Sequence[WatchSpec], out: Any) -> None:
    """The watches, in a process of their own: an event is stamped when it arrives, not when the
    operator's busy event loop in the benchmark process would get to it."""
    asyncio.run(_observe(specs, out))


class Recorder:
    """Every event of one watch of the observer process, stamped with ``time.monotonic()`` there
    (system-wide on Linux, so comparable with this process's stamps); a LIST after a closed stream
    is recorded as ``LISTED`` events."""

    def __init__(self, res: Resource) -> None:
        self.res = res
        self.events: list[Event] = []
        self.synced = threading.Event()

    async def first(self, after: float, check: Callable[[str, JSON], bool], deadline: float) -> float:
        """The first time at or after ``after`` that an event satisfies ``check``."""
        return (await self.first_event(after, check, deadline))[0]

    async def first_event(
        self, after: float, check: Callable[[str, JSON], bool], deadline: float
    ) -> tuple[float, JSON]:
        """The first event at or after ``after`` that satisfies ``check``: (time, object)."""
        until = time.monotonic() + deadline
        index = 0
        while True:
            while index < len(self.events):
                at, kind, obj = self.events[index]
                index += 1
                if at >= after and kind != "DELETED" and check(kind, obj):
                    return at, obj
            if time.monotonic() > until:
                raise TimeoutError(f"no matching {self.res.plural} event within {deadline:.0f} s")
            await asyncio.sleep(0.005)


def _pump(queue: Any, recorders: dict[str, Recorder]) -> None:
    """Thread: the observer's events into the recorders (``None`` ends it)."""
    while (item := queue.get()) is not None:
        name, at, kind, obj = item
        if kind == "SYNCED":
            recorders[name].synced.set()
        else:
            recorders[name].events.append((at, kind, obj))


@contextlib.contextmanager
def observer(specs: Sequence[WatchSpec]) -> Iterator[dict[str, Recorder]]:
    """The observer process and the thread that files its events; both stopped on exit."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    recorders = {s.name: Recorder(s.res) for s in specs}
    process = context.Process(target=observer_process, args=(list(specs), queue), daemon=True)
    process.start()
    pump = threading.Thread(target=_pump, args=(queue, recorders), daemon=True)
    pump.start()
    try:
        for recorder in recorders.values():
            if not recorder.synced.wait(60.0):
                raise TimeoutError(f"the observer's {recorder.res.plural} watch did not start")
        yield recorders
    finally:
        process.terminate()
        process.join(10.0)
        queue.put(None)
        pump.join(10.0)


def named(name: str, namespace: str | None = None) -> Callable[[str, JSON], bool]:
    def check(_: str, obj: JSON) -> bool:
        meta = obj.get("metadata") or {}
        return bool(meta.get("name") == name and (namespace is None or meta.get("namespace") == namespace))

    return check


def last_report(reports: Sequence[ReconcileReport], request: Any, before: float) -> ReconcileReport | None:
    """The last reconcile of ``request`` that began before ``before`` (the one whose write ``before``
    saw)."""
    earlier = [r for r in reports if r.request == request and r.started <= before]
    return max(earlier, key=lambda r: r.started) if earlier else None


def last_start(reports: Sequence[ReconcileReport], request: Any, before: float) -> float | None:
    report = last_report(reports, request, before)
    return report.started if report is not None else None


STEPS: tuple[tuple[str, str], ...] = (
    ("1", "enable written -> listener routes the runtime event"),
    ("2", "routed -> Manifest in KCP"),
    ("3", "Manifest in KCP -> all module objects in the runtime"),
    ("4", "Deployment created -> Deployment ready (the module's rollout)"),
    ("5a", "rollout done -> Manifest Ready in KCP"),
    ("5b", "Manifest Ready -> KCP Kyma status.modules Ready"),
    ("5c", "KCP Kyma Ready -> runtime Kyma status.modules Ready"),
    ("5", "rollout done -> module Ready in the runtime Kyma (5a+5b+5c)"),
    ("all", "enable written -> module Ready in the runtime Kyma"),
)
INSIDE: tuple[tuple[str, str], ...] = (
    ("2q", "2: routed -> Kyma reconcile start (queue)"),
    ("2r", "2: Kyma reconcile start -> Manifest in KCP"),
    ("3q", "3: Manifest in KCP -> Manifest reconcile start (informer, queue)"),
    ("3r", "3: Manifest reconcile start -> all objects in the runtime"),
    ("5aw", "5a: rollout done -> the installing reconcile ends (0: it had ended)"),
    ("5aq", "5a: rollout done -> Manifest reconcile start (agent event, listener, queue; includes 5aw)"),
    ("5ar", "5a: Manifest reconcile start -> Manifest Ready in KCP"),
    ("5bq", "5b: Manifest Ready -> Kyma reconcile start"),
    ("5br", "5b: Kyma reconcile start -> KCP Kyma Ready"),
)
OPERATOR_STEPS = ("1", "2", "3", "5a", "5b", "5c")


@dataclass
class Watches:
    manifests: Recorder
    kcp_kymas: Recorder
    configmaps: Recorder
    deployments: Recorder
    runtime_kymas: Recorder

    @staticmethod
    def specs(kcp: str, skr: str) -> list[WatchSpec]:
        return [
            WatchSpec("manifests", kcp, MANIFESTS, KCP_NAMESPACE),
            WatchSpec("kcp_kymas", kcp, KYMAS, KCP_NAMESPACE),
            WatchSpec("configmaps", skr, CONFIGMAPS, None),
            WatchSpec("deployments", skr, DEPLOYMENTS, None),
            WatchSpec("runtime_kymas", skr, KYMAS, SYNC_NAMESPACE),
        ]


async def one_enable(
    system: LocalSystem, watches: Watches, module: str, component: str, objects: int
) -> dict[str, float]:
    runtime = system.runtimes[0]
    kyma, skr = runtime.kyma, runtime.client
    manifest = manifest_name(kyma, component, module)
    namespace = f"bench-{module}"
    d = STEP_DEADLINE
    await settled(system)
    await system.quiet(runtime)  # not held by the listener's coalescing window of an earlier event
    t0 = time.monotonic()
    await set_modules(skr, [module])
    routed = await system.wait_routed(runtime, after=t0, deadline=d)
    t2 = await watches.manifests.first(t0, named(manifest, KCP_NAMESPACE), d)
    seen: set[str] = set()

    def created(kind: str, obj: JSON) -> bool:
        meta = obj.get("metadata") or {}
        if kind == "ADDED" and meta.get("namespace") == namespace:
            seen.add(str(meta.get("name")))
        return len(seen) >= objects - 1

    t3_configmaps = await watches.configmaps.first(t0, created, d)
    t_deploy, deployment = await watches.deployments.first_event(
        t0, lambda k, o: k == "ADDED" and named(module, namespace)(k, o), d
    )
    uid = (deployment.get("metadata") or {}).get("uid")
    t3 = max(t3_configmaps, t_deploy)
    first_object = min(
        await watches.configmaps.first(
            t0, lambda k, o: k == "ADDED" and (o.get("metadata") or {}).get("namespace") == namespace, d
        ),
        t_deploy,
    )

    def deployment_ready(kind: str, obj: JSON) -> bool:
        this = (obj.get("metadata") or {}).get("uid") == uid
        return this and deployment_readiness(obj).state == State.READY

    t4 = await watches.deployments.first(t_deploy, deployment_ready, d)
    t5a = await watches.manifests.first(
        t0,
        lambda k, o: named(manifest, KCP_NAMESPACE)(k, o) and (o.get("status") or {}).get("state") == "Ready",
        d,
    )
    t5b = await watches.kcp_kymas.first(
        t0, lambda k, o: named(kyma, KCP_NAMESPACE)(k, o) and entry_state(o, module) == "Ready", d
    )
    t5c = await watches.runtime_kymas.first(
        t0,
        lambda k, o: (
            named(names.DEFAULT_REMOTE_KYMA_NAME, SYNC_NAMESPACE)(k, o) and entry_state(o, module) == "Ready"
        ),
        d,
    )
    rollout_done = max(t3, t4)
    kyma_request = runtime.request
    manifest_request = next((r.request for r in system.manifest_reports if r.request.name == manifest), None)
    sample = {
        "1": routed - t0,
        "2": t2 - routed,
        "3": t3 - t2,
        "4": t4 - t_deploy,
        "5a": t5a - rollout_done,
        "5b": t5b - t5a,
        "5c": t5c - t5b,
        "5": t5c - rollout_done,
        "all": t5c - t0,
    }
    kyma_start = last_start(system.reports, kyma_request, t2)
    if kyma_start is not None and kyma_start >= routed:
        sample["2q"], sample["2r"] = kyma_start - routed, t2 - kyma_start
    if manifest_request is not None:
        install = last_report(system.manifest_reports, manifest_request, first_object)
        if install is not None and install.started >= t2 - 0.05:
            sample["3q"], sample["3r"] = max(0.0, install.started - t2), t3 - install.started
            sample["5aw"] = max(0.0, install.started + install.duration - rollout_done)
        ready_start = last_start(system.manifest_reports, manifest_request, t5a)
        if ready_start is not None:
            sample["5aq"], sample["5ar"] = ready_start - rollout_done, t5a - ready_start
    status_start = last_start(system.reports, kyma_request, t5b)
    if status_start is not None:
        sample["5bq"], sample["5br"] = status_start - t5a, t5b - status_start
    await set_modules(skr, [])
    await gone(system.kcp, manifest)
    return sample


NOT_OURS = {"4": "the module's rollout, not ours", "5": "sum of 5a-5c", "all": "includes the rollout"}


def _row(key: str, label: str, values: list[float]) -> str:
    base = latency_row(label, values)
    if key in NOT_OURS or not values:
        return f"{base} {NOT_OURS.get(key, '-')} |"
    return f"{base} {'met' if percentile(values, 0.99) <= TARGET else '**NOT met**'} |"


async def run(plane: ControlPlane, registry: LocalRegistry, cache: Path, args: argparse.Namespace) -> None:
    def say(message: str) -> None:
        if args.verbose:
            print(message, flush=True)

    modules = [f"mod-{chr(ord('a') + i) * 3}" for i in range(args.modules)]
    components: dict[str, str] = {}
    overrides: dict[str, Any] = {
        "oci_insecure_registries": (registry.host,),
        "module_cache_dir": cache,
        "module_upgrade_rollout_max_delay": 0.0,
    }
    specs = Watches.specs(str(plane["kcp"].kubeconfig_path), str(plane["skr-1"].kubeconfig_path))
    async with local_system(
        plane, ["skr-1"], say, verbose=args.verbose, config_overrides=overrides
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
        samples: list[dict[str, float]] = []
        with observer(specs) as recorders:
            watches = Watches(**recorders)
            cold = [await one_enable(system, watches, m, components[m], args.objects) for m in modules]
            for index in range(args.enables):
                module = modules[index % len(modules)]
                sample = await one_enable(system, watches, module, components[module], args.objects)
                samples.append(sample)
                say(f"enable {index + 1}: " + ", ".join(f"{k}={v * 1000:.0f}" for k, v in sample.items()))
    print()
    print(
        f"{args.enables} enables over {args.modules} modules ({args.objects - 1} ConfigMaps + 1 Deployment "
        "each), one living runtime (rollout by kube-controller-manager, kube-scheduler, kwok)"
    )
    print("| step | samples | p50 | p99 | max | mean | operator's share vs 100 ms (p99) |")
    print("|---|---|---|---|---|---|---|")
    for key, label in STEPS:
        values = [s[key] for s in samples if key in s]
        print(_row(key, f"{key}. {label}" if key != "all" else label, values))
    print()
    print(
        "first enable of each module, not in the samples above (cold: the module's layer fetched from "
        "the registry, the runtime's first admission calls and connections), ms per enable:"
    )
    print("| step | " + " | ".join(modules) + " |")
    print("|---|" + "---|" * len(modules))
    for key, label in STEPS:
        print(f"| {key}. {label} | " + " | ".join(f"{c[key] * 1000:.1f}" for c in cold) + " |")
    print()
    print("inside the steps (the operator's reconcile reports: start of the reconcile that made the change)")
    print("| part | samples | p50 | p99 | max | mean |")
    print("|---|---|---|---|---|---|")
    for key, label in INSIDE:
        print(latency_row(label, [s[key] for s in samples if key in s]))
    p50 = {key: percentile([s[key] for s in samples], 0.5) * 1000 for key in OPERATOR_STEPS}
    p99 = {key: percentile([s[key] for s in samples], 0.99) * 1000 for key in OPERATOR_STEPS}
    worst = max(p99, key=lambda key: p99[key])
    per_step = ", ".join(f"{key} **{p50[key]:.1f} / {p99[key]:.1f}**" for key in OPERATOR_STEPS)
    verdict = "met" if p99[worst] <= TARGET * 1000 else f"NOT met: slowest step {worst}"
    print()
    print(
        f"operator's share of enable -> Ready, p50 / p99 per step: {per_step} ms ({verdict}; target "
        "p99 <= 100 ms each)"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--enables", type=int, default=40, help="enables followed to module Ready")
    parser.add_argument("--modules", type=int, default=3, help="modules, enabled in turn")
    parser.add_argument("--objects", type=int, default=10, help="objects per module (the last a Deployment)")
    parser.add_argument("--verbose", action="store_true", help="print the local system's log and each sample")
    args = parser.parse_args(argv)
    if args.objects < 2:
        parser.error("--objects must be at least 2 (ConfigMaps and one Deployment)")
    logging.basicConfig(level=logging.WARNING)
    started = time.monotonic()
    with bench_environment("enable-steps-") as (plane, registry, work):
        asyncio.run(run(plane, registry, work, args))
    print(f"\ntotal {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
