"""The running local system: operator and agents over a started control plane, the live log, ``--once``."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kyma_operator.api import names
from kyma_operator.app import Operator, build_operator
from kyma_operator.controllers.kyma.report import KymaReport as ReconcileReport
from kyma_operator.controllers.kyma.triggers import KymaTrigger
from kyma_operator.controllers.manifest.reconciler import ManifestReport
from kyma_operator.runtime.errors import KubeError
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.manager import LeaderElectionLost, ManagerFailed
from kyma_operator.runtime.request import Request
from localrun.agent import LocalAgent
from localrun.kcp import (
    AGENT_ENV,
    KCP_NAMESPACE,
    KYMAS,
    RUN_DIR,
    SYNC_NAMESPACE,
    Runtime,
    apply_kcp_manifests,
    operator_config,
    register_runtime,
)
from localrun.module import (
    MODULE,
    demonstrate_drift,
    enable_module,
    publish_sample_module,
    session_text,
    wait_manifest_ready,
)
from localrun.outage import ListenerRelay
from localrun.output import Say
from tests.controlplane.binaries import REPO_ROOT
from tests.controlplane.cluster import ControlPlane, free_port
from tests.registry.server import LocalRegistry

README_REGISTRY = "127.0.0.1:5001"
"""The registry the README's "Publishing a module" starts (``python -m tests.registry``, plain
HTTP); ``make run``'s operator reaches it without TLS, so a module published there installs."""

# -- the whole system --------------------------------------------------------------------------


@dataclass
class LocalSystem:
    """Operator + agents over a started ``ControlPlane``; see the module docstring."""

    plane: ControlPlane
    runtimes: list[Runtime]
    kcp: KubeClient
    operator: Operator
    agents: list[LocalAgent]
    say: Say
    reports: list[ReconcileReport] = field(default_factory=list)
    routed: list[tuple[float, Request]] = field(default_factory=list)
    """``(time.monotonic(), Kyma)`` for every request the listener routed."""
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    manifest_reports: list[ManifestReport] = field(default_factory=list)

    @property
    def listener_port(self) -> int:
        return self.operator.config.listener_port

    def runtime(self, name: str) -> Runtime:
        return next(r for r in self.runtimes if r.name == name)

    async def operator_stopped(self) -> str:
        """Wait until the operator stops by itself (a lost Lease, a failed component): why."""
        task = next(t for t in self.tasks if t.get_name() == "operator")
        try:
            await asyncio.shield(task)
        except (LeaderElectionLost, ManagerFailed) as exc:
            return str(exc)
        return "the operator returned"

    async def wait_ready(self, deadline: float = 60.0) -> None:
        """Every agent ready, every Kyma Ready, every runtime's signing key trusted by the listener."""
        listener = self.operator.listener
        assert listener is not None
        until = time.monotonic() + deadline
        pending = {r.kyma for r in self.runtimes}
        while pending:
            for task in self.tasks:
                if task.done():
                    task.result()  # surface a crash of the operator or an agent runner
                    raise RuntimeError(f"{task.get_name()} ended early")
            agents = {agent.runtime.name: agent for agent in self.agents}
            for runtime in self.runtimes:
                kyma = self.operator.kyma.kymas.get(KCP_NAMESPACE, runtime.kyma) or {}
                ready = (kyma.get("status") or {}).get("state") == "Ready"
                trusted = runtime.runtime_id in listener.keys.runtimes()
                # The Kyma's agent condition follows the Deployment (pods Ready by kwok), which says
                # nothing about the process running here: wait for its own readiness too.
                agent = agents.get(runtime.name)
                running = agent is not None and agent.ready.is_set()
                if ready and trusted and running and runtime.kyma in pending:
                    pending.discard(runtime.kyma)
                    self.say(
                        f"Kyma {KCP_NAMESPACE}/{runtime.kyma} is Ready; the listener trusts its agent's key"
                    )
            if pending and time.monotonic() > until:
                raise TimeoutError(f"not ready after {deadline:.0f}s: {', '.join(sorted(pending))}")
            await asyncio.sleep(0.05)

    async def quiet(self, runtime: Runtime, deadline: float = 10.0) -> None:
        """No event routed for the runtime within the listener's coalescing window, queue idle.

        The listener forwards the first event for a Kyma at once but holds further ones within its
        window (0.5 s) for one trailing request; the start-up resync must not hide the edit's event.
        """
        listener = self.operator.listener
        window = self.operator.kyma.intake.window if listener is not None else 0.0
        until = time.monotonic() + deadline
        while time.monotonic() < until:
            last = max((at for at, request in self.routed if request == runtime.request), default=None)
            idle = not self.operator.kyma.controller.queue.processing and not len(
                self.operator.kyma.controller.queue
            )
            if idle and (last is None or time.monotonic() - last > window + 0.05):
                return
            await asyncio.sleep(0.02)
        raise TimeoutError(f"runtime {runtime.name} did not become quiet within {deadline:.0f}s")

    async def wait_routed(self, runtime: Runtime, *, after: float, deadline: float) -> float:
        """When the listener routed an event for ``runtime``'s Kyma after ``after`` (monotonic)."""
        until = time.monotonic() + deadline
        while time.monotonic() < until:
            for at, request in self.routed:
                if at >= after and request == runtime.request:
                    return at
            await asyncio.sleep(0.005)
        raise TimeoutError(f"no event from runtime {runtime.runtime_id} was routed within {deadline:.0f}s")

    async def wait_targeted_reconcile(
        self, runtime: Runtime, predicate: Callable[[ReconcileReport], bool], *, after: int, deadline: float
    ) -> ReconcileReport:
        until = time.monotonic() + deadline
        while time.monotonic() < until:
            for report in self.reports[after:]:
                if report.request == runtime.request and predicate(report):
                    return report
            await asyncio.sleep(0.005)
        raise TimeoutError(f"no targeted reconcile of Kyma {runtime.request} within {deadline:.0f}s")


def is_event_reconcile(report: ReconcileReport) -> bool:
    event = {KymaTrigger.RUNTIME_EVENT, KymaTrigger.RUNTIME_EVENT_REREAD}
    return any(t in event for t in report.triggers)


@contextlib.asynccontextmanager
async def local_system(
    plane: ControlPlane,
    skr_names: Sequence[str],
    say: Say,
    *,
    verbose: bool = True,
    skip_manifests: Collection[str] = (),
    config_overrides: Mapping[str, Any] | None = None,
    on_kcp_request: Callable[[str, str], None] | None = None,
) -> AsyncIterator[LocalSystem]:
    """Set up KCP, start the operator and one agent per runtime; stop all of it on exit.

    ``skip_manifests``: files of ``manifests/kcp`` not to apply (benchmarks: one Watcher only).
    ``config_overrides``: operator settings on top of the local defaults (e.g. the module registry).
    ``on_kcp_request``: called with (verb, resource) for every request of the KCP client (benchmarks).
    """
    kcp_server = plane["kcp"]
    kcp = KubeClient.from_kubeconfig_file(kcp_server.kubeconfig_path, on_request=on_kcp_request)
    runtimes = [
        Runtime(name, plane[name], KubeClient.from_kubeconfig_file(plane[name].kubeconfig_path), free_port())
        for name in skr_names
    ]
    operator: Operator | None = None
    agents: list[LocalAgent] = []
    tasks: list[asyncio.Task[Any]] = []
    try:
        applied = await apply_kcp_manifests(kcp, skip=skip_manifests)
        say(f"KCP: applied manifests/kcp ({', '.join(applied)}); Gateway host overlaid with 127.0.0.1")
        for runtime in runtimes:
            await register_runtime(kcp, runtime)
            say(
                f"runtime {runtime.name}: Kyma {KCP_NAMESPACE}/{runtime.kyma} "
                f"(runtime id {runtime.runtime_id}), access Secret {KCP_NAMESPACE}/{runtime.kyma}-kubeconfig"
            )
        listener_port = free_port()
        config = operator_config(kcp_server, runtimes, listener_port)
        if config_overrides:
            config = config.model_copy(update=dict(config_overrides))
        operator = await build_operator(config, kcp)
        system = LocalSystem(plane, runtimes, kcp, operator, agents, say, tasks=tasks)
        if operator.manifest is not None:

            def manifest_reconciled(report: ManifestReport) -> None:
                system.manifest_reports.append(report)
                if verbose or report.applied or report.pruned:
                    say(f"{report.line()} [{report.duration * 1000:.0f} ms]")

            operator.manifest.reconciler.observers.append(manifest_reconciled)
        by_request = {r.request: r for r in runtimes}

        def routed(request: Request) -> None:
            system.routed.append((time.monotonic(), request))
            runtime = by_request.get(request)
            rid = runtime.runtime_id if runtime else "?"
            say(f"event from runtime {rid} (signed, verified) -> listener enqueues Kyma {request}")

        def reconciled(report: ReconcileReport) -> None:
            system.reports.append(report)
            if verbose or is_event_reconcile(report):
                prefix = "targeted " if is_event_reconcile(report) else ""
                say(f"{prefix}{report.line()} [{report.duration * 1000:.0f} ms]")

        operator.kyma.intake.observers.append(routed)
        operator.kyma.reconciler.observers.append(reconciled)
        tasks.append(asyncio.create_task(operator.run(), name="operator"))
        async with asyncio.timeout(30.0):
            await operator.manager.started.wait()
        say(
            f"operator running: listener on 127.0.0.1:{listener_port} (agents send there directly, no "
            f"gateway), agents address from Gateway {KCP_NAMESPACE}/klm-watcher: {operator.kcp_addr}, "
            f"health/metrics on 127.0.0.1:{operator.manager.health_port}"
        )
        for runtime in runtimes:
            agent = LocalAgent(runtime, say, directory=RUN_DIR / runtime.name)
            agents.append(agent)
            tasks.append(asyncio.create_task(agent.run(), name=f"agent {runtime.name}"))
        yield system
    finally:
        for agent in agents:
            await agent.stop()
        for task in tasks:
            if task.get_name() != "operator":
                task.cancel()
        if operator is not None:
            await operator.shutdown()
        await asyncio.gather(*tasks, return_exceptions=True)
        for runtime in runtimes:
            await runtime.client.close()
        await kcp.close()


def operator_overrides(
    registry: LocalRegistry | None, insecure_registries: Sequence[str] = (README_REGISTRY,)
) -> dict[str, Any]:
    """The local operator's settings on top of the defaults: module registries on 127.0.0.1 are
    plain HTTP (the README's and the --module one), so modules published there install."""
    insecure = tuple(dict.fromkeys([*insecure_registries, *([registry.host] if registry else [])]))
    overrides: dict[str, Any] = {
        "oci_insecure_registries": insecure,
        # a catalog change reaches the (few) local runtimes at once, not spread over 5 minutes
        "module_upgrade_rollout_max_delay": 0.0,
    }
    if registry is not None:
        overrides["module_cache_dir"] = RUN_DIR / "module-cache"
    return overrides


async def run_local(
    plane: ControlPlane,
    skr_names: Sequence[str],
    *,
    once: bool,
    say: Say,
    registry: LocalRegistry | None = None,
    insecure_registries: Sequence[str] = (README_REGISTRY,),
    demo_outage: float | None = None,
) -> int:
    """Run until Ctrl-C; ``once``: the smoke check; ``demo_outage``: the scripted demo (with a registry)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    overrides = operator_overrides(registry, insecure_registries)
    relay: ListenerRelay | None = None
    if demo_outage is not None:
        # agents send through a relay the demo can cut; retries capped at 5 s so that the time an
        # edit needs after the outage shows the system, not a long backoff sleep of the agent
        relay = ListenerRelay(free_port(), 0)
        overrides |= {
            "listener_port_overwrite": relay.port,
            "agent_env": {**AGENT_ENV, "RETRY_MAX_DELAY": "5s"},
        }
    try:
        async with local_system(plane, skr_names, say, config_overrides=overrides) as system:
            if relay is not None:
                relay.target_port = system.listener_port
                await relay.restore()
                say(f"demo: agents reach the listener through a relay on 127.0.0.1:{relay.port}")
            ready = asyncio.create_task(system.wait_ready())
            stopped = asyncio.create_task(stop.wait())
            await asyncio.wait({ready, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set():
                ready.cancel()
                say("stopping")
                return 0
            stopped.cancel()
            ready.result()
            if registry is not None:
                await publish_sample_module(registry, plane["kcp"].kubeconfig_path, say)
            if relay is not None and demo_outage is not None:
                return await _run_demo(system, relay, demo_outage)
            if once:
                manifest = None
                if registry is not None:
                    await enable_module(system.runtimes[0].client)
                    say(f"--once: enabled module {MODULE} in the runtime's Kyma {SYNC_NAMESPACE}/default")
                    manifest = await wait_manifest_ready(system.kcp, system.runtimes[0].kyma, say)
                code = await _demonstrate(system)
                if code == 0 and manifest is not None:
                    await demonstrate_drift(system.runtimes[0].client, manifest, say)
                return code
            runtime = system.runtimes[0]
            skr_kubeconfig = RUN_DIR / f"{runtime.name}.kubeconfig"
            if registry is not None:
                print(session_text(runtime.name, RUN_DIR / "kcp.kubeconfig", skr_kubeconfig), flush=True)
            else:
                say(
                    f"running; try: KUBECONFIG={skr_kubeconfig.relative_to(REPO_ROOT)} kubectl -n "
                    f"{SYNC_NAMESPACE} patch kyma default "
                    """--type merge -p '{"spec":{"channel":"fast"}}'"""
                )
            say("press Ctrl-C to stop")
            crashed = asyncio.create_task(system.operator_stopped())
            stopped = asyncio.create_task(stop.wait())
            await asyncio.wait({crashed, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if crashed.done():
                # As in a cluster, where the process would exit and be restarted: say so and stop
                # instead of running on without an operator.
                say(f"OPERATOR STOPPED: {crashed.result()}; stopping the local system (run make run again)")
                return 1
            crashed.cancel()
            say("stopping")
            return 0
    except (TimeoutError, RuntimeError, KubeError) as exc:
        say(f"FAILED: {type(exc).__name__}: {exc}")
        return 1
    finally:
        if relay is not None:
            await relay.cut()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


async def _run_demo(system: LocalSystem, relay: ListenerRelay, outage: float) -> int:
    from localrun.demo import Demo

    demo = Demo(system, relay, outage, system.say)
    code = await demo.run()
    print("\n" + demo.table(), flush=True)
    system.say("demo: " + ("all steps OK" if code == 0 else "FAILED (see the table)") + "; stopping")
    return code


async def _demonstrate(system: LocalSystem) -> int:
    """``--once``: edit the first runtime's Kyma, follow its event to the reconcile that reads it."""
    runtime = system.runtimes[0]
    await system.quiet(runtime)
    current = await runtime.client.get(KYMAS, names.DEFAULT_REMOTE_KYMA_NAME, SYNC_NAMESPACE)
    old = current["spec"]["channel"]
    new = "fast" if old != "fast" else "regular"
    mark = len(system.reports)
    where = f"runtime Kyma {SYNC_NAMESPACE}/default in {runtime.name}"
    system.say(f"--once: editing {where}: spec.channel {old} -> {new}")
    written = time.monotonic()
    await runtime.client.patch(
        KYMAS, names.DEFAULT_REMOTE_KYMA_NAME, {"spec": {"channel": new}}, SYNC_NAMESPACE
    )
    routed = await system.wait_routed(runtime, after=written, deadline=10.0)
    report = await system.wait_targeted_reconcile(
        runtime,
        lambda r: is_event_reconcile(r) and r.started >= routed and f"channel={new}" in r.remote_spec,
        after=mark,
        deadline=10.0,
    )
    others = [r for r in system.reports[mark:] if r.request != runtime.request and is_event_reconcile(r)]
    system.say(
        f"--once: OK: the edit in {runtime.name} was routed as an event after "
        f"{(routed - written) * 1000:.0f} ms "
        f"and Kyma {report.request} was reconciled with channel={new} "
        f"{(report.started - written) * 1000:.0f} ms after the write ({len(others)} event reconciles of "
        "other Kymas); stopping"
    )
    return 0
