"""``make run``: the whole system on this machine, until Ctrl-C: KCP + SKRs, operator, listener, agents.

What runs:

* one etcd and kube-apiservers for KCP and ``--skrs N`` runtimes (``skr-1``..), CRDs installed;
* in KCP, from ``manifests/kcp``: namespaces, RBAC, listener Service, the default Watchers and the
  ``klm-watcher`` Gateway (its host overlaid with 127.0.0.1: there is no Istio locally, the Gateway
  only tells the operator which address agents send to, and agents reach the listener directly);
* per runtime an admin-kubeconfig access Secret and a Kyma ``rt-<skr>`` (runtime id = name);
* the operator in this process (Watcher, Kyma and Manifest controllers, CA rotation, the listener on
  127.0.0.1), with webhook URL mode: each runtime's API server calls its agent on 127.0.0.1;
* per runtime a real agent process (``python -m skr_watcher``), started by ``LocalAgent`` the way a
  kubelet would: environment from the Deployment the operator installed, credential files from
  the ``skr-webhook-tls`` Secret (kept up to date under ``.local/run/<skr>/ssl``), and its
  readiness reported into the Deployment's status (no kube-controller-manager runs here).

An edit of a runtime's Kyma (``KUBECONFIG=.local/run/skr-1.kubeconfig kubectl edit kyma -n
kyma-system default``) then shows up as a routed event and a targeted reconcile. ``--once`` brings
everything up, makes such an edit itself, waits for the targeted reconcile and stops again.
``--module`` also runs a local OCI registry and installs a sample module into the first runtime
(``localmodule``); with ``--once`` a module object is then deleted and restored by its event.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kyma_operator.api import names
from kyma_operator.app import Operator, build_operator
from kyma_operator.config import OperatorConfig
from kyma_operator.controllers.kyma.reconciler import ReconcileReport
from kyma_operator.controllers.kyma.triggers import RUNTIME_EVENT, RUNTIME_EVENT_REREAD
from kyma_operator.controllers.manifest.reconciler import ManifestReport
from kyma_operator.controllers.watcher.reconciler import resource_for
from kyma_operator.runtime.errors import KubeError
from kyma_operator.runtime.informer import FuncHandler, Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    DEPLOYMENTS,
    NAMESPACES,
    SECRETS,
    SERVICE_ACCOUNTS,
    SERVICES,
    Resource,
)
from skr_watcher import artefacts
from tests.controlplane.binaries import REPO_ROOT
from tests.controlplane.cluster import APIServer, ControlPlane, free_port, rss_bytes
from tests.controlplane.crds import apply_crds
from tests.controlplane.localmodule import demonstrate_drift, install_sample_module
from tests.registry.server import LocalRegistry

RUN_DIR = REPO_ROOT / ".local" / "run"
KCP_MANIFESTS = REPO_ROOT / "manifests" / "kcp"
KCP_NAMESPACE = names.KCP_NAMESPACE
SYNC_NAMESPACE = names.SKR_NAMESPACE
FIELD_MANAGER = "localrun"

# CRDs an SKR gets from KCP (upstream syncs Kyma, ModuleTemplate and ModuleReleaseMeta CRDs).
SKR_CRD_PLURALS = ("kymas", "moduletemplates", "modulereleasemetas")

KYMAS = resource_for(names.KYMA)
_MANIFEST_KINDS: dict[tuple[str, str], Resource] = {
    (r.api_version, r.kind): r
    for r in (
        NAMESPACES,
        SERVICE_ACCOUNTS,
        CLUSTER_ROLES,
        CLUSTER_ROLE_BINDINGS,
        SERVICES,
        resource_for(names.GATEWAY),
        resource_for(names.WATCHER),
    )
}
_PR_SET_PDEATHSIG = 1

Say = Callable[[str], None]


def make_say(stream: Any = None) -> Say:
    def say(message: str) -> None:
        now = time.time()
        stamp = time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"
        print(f"{stamp} {message}", file=stream or sys.stdout, flush=True)

    return say


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Runtime:
    """One local runtime: its API server, client and the Kyma standing for it in KCP."""

    name: str
    server: APIServer
    client: KubeClient
    agent_port: int

    @property
    def kyma(self) -> str:
        return f"rt-{self.name}"

    @property
    def runtime_id(self) -> str:
        return self.kyma

    @property
    def request(self) -> Request:
        return Request(KCP_NAMESPACE, self.kyma)

    @property
    def webhook_url(self) -> str:
        return f"https://127.0.0.1:{self.agent_port}"


# -- KCP set-up --------------------------------------------------------------------------------


def kcp_documents(gateway_host: str, skip: Collection[str] = ()) -> list[dict[str, Any]]:
    """``manifests/kcp`` in kustomization order, with the Gateway host overlaid; ``skip``: file names."""
    (kustomization,) = [
        d for d in yaml.safe_load_all((KCP_MANIFESTS / "kustomization.yaml").read_text()) if d
    ]
    documents = []
    for name in kustomization["resources"]:
        if name in skip:
            continue
        for doc in yaml.safe_load_all((KCP_MANIFESTS / name).read_text()):
            if not doc:
                continue
            if doc["kind"] == "Gateway":
                for server in doc["spec"]["servers"]:
                    server["hosts"] = [gateway_host]
            documents.append(doc)
    return documents


async def apply_kcp_manifests(
    kcp: KubeClient, gateway_host: str = "127.0.0.1", skip: Collection[str] = ()
) -> list[str]:
    applied = []
    for doc in kcp_documents(gateway_host, skip):
        resource = _MANIFEST_KINDS[(doc["apiVersion"], doc["kind"])]
        await kcp.apply(resource, doc, field_manager=FIELD_MANAGER)
        applied.append(f"{doc['kind']}/{doc['metadata']['name']}")
    return applied


async def register_runtime(kcp: KubeClient, runtime: Runtime) -> None:
    """The access Secret (admin kubeconfig of the runtime) and the Kyma, as provisioning would."""
    await kcp.apply(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": f"{runtime.kyma}-kubeconfig",
                "namespace": KCP_NAMESPACE,
                "labels": {names.KYMA_NAME_LABEL: runtime.kyma},
            },
            "data": {"config": base64.b64encode(runtime.server.kubeconfig).decode()},
        },
        field_manager=FIELD_MANAGER,
    )
    await kcp.apply(
        KYMAS,
        {
            "apiVersion": KYMAS.api_version,
            "kind": KYMAS.kind,
            "metadata": {
                "name": runtime.kyma,
                "namespace": KCP_NAMESPACE,
                "labels": {names.RUNTIME_ID_LABEL: runtime.runtime_id},
                "annotations": {names.SKR_DOMAIN_ANNOTATION: f"{runtime.name}.local.kyma.dev"},
            },
            "spec": {"channel": "regular"},
        },
        field_manager=FIELD_MANAGER,
    )


def operator_config(kcp: APIServer, runtimes: Sequence[Runtime], listener_port: int) -> OperatorConfig:
    return OperatorConfig(
        kubeconfig=kcp.kubeconfig_path,
        namespace=KCP_NAMESPACE,
        leader_elect=True,
        health_port=0,
        metrics_port=None,
        listener_port=listener_port,
        listener_port_overwrite=listener_port,  # agents reach the listener directly, no gateway
        sync_namespace=SYNC_NAMESPACE,
        additional_dns_names=("127.0.0.1",),  # API servers call the agents by IP (webhook URL mode)
        agent_env={"KCP_SCHEME": "http", "HEARTBEAT_INTERVAL": "10s", "SHUTDOWN_TIMEOUT": "2s"},
        agent_readiness_poll=1.0,
        heartbeat_max_silence=35.0,
        webhook_urls={runtime.kyma: runtime.webhook_url for runtime in runtimes},
        failure_base_delay=1.0,
        failure_max_delay=10.0,
    )


# -- the agent of one runtime ------------------------------------------------------------------


class LocalAgent:
    """Runs a runtime's agent as a local process, as its kubelet would run the installed Deployment.

    Waits for the operator to install the Deployment and the ``skr-webhook-tls`` Secret, writes the
    Secret's keys as files (again whenever the Secret changes: the agent reloads rotated files),
    starts ``python -m skr_watcher`` with the Deployment's environment (``/app/etc/ssl`` mapped to
    the files, ``WEBHOOK_PORT`` = the port the webhook URL names, bound to 127.0.0.1), and reports
    its readiness in the Deployment's status, which is what the operator's ``SKRWebhook``
    condition reads.
    """

    def __init__(self, runtime: Runtime, say: Say, *, directory: Path) -> None:
        self.runtime = runtime
        self.say = say
        self.directory = directory
        self.process: asyncio.subprocess.Process | None = None
        self.metrics_port = 0
        self.ready = asyncio.Event()
        self._secret = asyncio.Event()
        self._deployment: dict[str, Any] | None = None
        self._deployment_seen = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []

    @property
    def ssl_dir(self) -> Path:
        return self.directory / "ssl"

    def _write_files(self, secret: dict[str, Any]) -> None:
        self.ssl_dir.mkdir(parents=True, exist_ok=True)
        for key, value in (secret.get("data") or {}).items():
            path = self.ssl_dir / key
            data = base64.b64decode(value)
            if not path.exists() or path.read_bytes() != data:
                tmp = path.with_suffix(".tmp")
                tmp.write_bytes(data)
                tmp.chmod(0o600)
                tmp.replace(path)
        self._secret.set()

    def _remember_deployment(self, deployment: dict[str, Any]) -> None:
        self._deployment = deployment
        self._deployment_seen.set()

    def environment(self, deployment: dict[str, Any]) -> dict[str, str]:
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        mount = next(m["mountPath"] for m in container.get("volumeMounts", []) if m["name"] == "ssl")
        env: dict[str, str] = {}
        for entry in container.get("env", []):
            if "value" in entry:
                value = str(entry["value"])
                env[entry["name"]] = (
                    value.replace(mount, str(self.ssl_dir)) if value.startswith(mount) else value
                )
        self.metrics_port = free_port()
        env.update(
            {
                "POD_NAME": f"skr-webhook-{self.runtime.name}",
                "BIND_ADDRESS": "127.0.0.1",
                "WEBHOOK_PORT": str(self.runtime.agent_port),
                "METRICS_PORT": str(self.metrics_port),
            }
        )
        return env

    async def run(self) -> None:
        """Until cancelled: wait for the installation, run the agent, report readiness."""
        skr = self.runtime.client
        secrets = Informer(
            skr, SECRETS, namespace=SYNC_NAMESPACE, field_selector=f"metadata.name={artefacts.SECRET_NAME}"
        )
        secrets.add_handler(
            FuncHandler(on_add=self._write_files, on_update=lambda _o, n: self._write_files(n))
        )
        deployments = Informer(
            skr,
            DEPLOYMENTS,
            namespace=SYNC_NAMESPACE,
            field_selector=f"metadata.name={artefacts.SERVICE_NAME}",
        )
        deployments.add_handler(
            FuncHandler(
                on_add=self._remember_deployment, on_update=lambda _o, n: self._remember_deployment(n)
            )
        )
        self._tasks = [asyncio.create_task(secrets.run()), asyncio.create_task(deployments.run())]
        try:
            await self._secret.wait()
            await self._deployment_seen.wait()
            assert self._deployment is not None
            await self._start(self.environment(self._deployment))
            await self._report_ready()
            assert self.process is not None
            code = await self.process.wait()
            self.say(f"agent for {self.runtime.name} exited with code {code}")
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self.stop()

    async def _start(self, env: dict[str, str]) -> None:
        full_env = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(REPO_ROOT),
            "PYTHONDONTWRITEBYTECODE": "1",
            **env,
        }
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "skr_watcher",
            env=full_env,
            cwd=str(REPO_ROOT),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
        self._tasks.append(asyncio.create_task(self._relay()))
        self.say(
            f"agent for {self.runtime.name} started (pid {self.process.pid}): webhook "
            f"{self.runtime.webhook_url}/validate/<manager>, sends to {env.get('KCP_SCHEME', 'https')}://"
            f"{env.get('KCP_ADDR')}, credentials in {self.ssl_dir}"
        )

    async def _relay(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        while line := await self.process.stdout.readline():
            text = line.decode(errors="replace").rstrip()
            if text and "/heartbeat" not in text:  # one per interval: noise here
                self.say(f"  [agent {self.runtime.name}] {text}")

    async def _report_ready(self) -> None:
        url = f"http://127.0.0.1:{self.metrics_port}/readyz"
        loop = asyncio.get_running_loop()

        def probe() -> bool:
            try:
                with urllib.request.urlopen(url, timeout=1) as response:
                    return bool(response.status == 200)
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                return False

        while not await loop.run_in_executor(None, probe):
            if self.process is not None and self.process.returncode is not None:
                return
            await asyncio.sleep(0.05)  # a kubelet's readiness probe period, shortened
        deployment = self._deployment or {}
        generation = (deployment.get("metadata") or {}).get("generation") or 1
        await self.runtime.client.patch_status(
            DEPLOYMENTS,
            artefacts.SERVICE_NAME,
            {
                "status": {
                    "observedGeneration": generation,
                    "replicas": 1,
                    "updatedReplicas": 1,
                    "readyReplicas": 1,
                    "availableReplicas": 1,
                }
            },
            SYNC_NAMESPACE,
        )
        self.ready.set()
        self.say(f"agent for {self.runtime.name} running on {self.runtime.webhook_url} (ready)")

    async def stop(self) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 10.0)
        except TimeoutError:
            process.kill()
            await process.wait()


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
            for runtime in self.runtimes:
                kyma = self.operator.kyma.kymas.get(KCP_NAMESPACE, runtime.kyma) or {}
                ready = (kyma.get("status") or {}).get("state") == "Ready"
                trusted = runtime.runtime_id in listener.keys.runtimes()
                if ready and trusted and runtime.kyma in pending:
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
        window = listener.config.coalesce_window_seconds if listener is not None else 0.0
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
    return RUNTIME_EVENT in report.triggers or RUNTIME_EVENT_REREAD in report.triggers


@contextlib.asynccontextmanager
async def local_system(
    plane: ControlPlane,
    skr_names: Sequence[str],
    say: Say,
    *,
    verbose: bool = True,
    skip_manifests: Collection[str] = (),
    config_overrides: Mapping[str, Any] | None = None,
) -> AsyncIterator[LocalSystem]:
    """Set up KCP, start the operator and one agent per runtime; stop all of it on exit.

    ``skip_manifests``: files of ``manifests/kcp`` not to apply (benchmarks: one Watcher only).
    ``config_overrides``: operator settings on top of the local defaults (e.g. the module registry).
    """
    kcp_server = plane["kcp"]
    kcp = KubeClient.from_kubeconfig_file(kcp_server.kubeconfig_path)
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

        assert operator.kyma_events is not None
        operator.kyma_events.observers.append(routed)
        operator.kyma.reconciler.observers.append(reconciled)
        tasks.append(asyncio.create_task(operator.run(), name="operator"))
        await asyncio.wait_for(operator.manager.started.wait(), 30.0)
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


async def run_local(
    plane: ControlPlane,
    skr_names: Sequence[str],
    *,
    once: bool,
    say: Say,
    registry: LocalRegistry | None = None,
) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    overrides: dict[str, Any] = {}
    if registry is not None:
        overrides = {
            "oci_insecure_registries": (registry.host,),
            "module_cache_dir": RUN_DIR / "module-cache",
        }
    try:
        async with local_system(plane, skr_names, say, config_overrides=overrides) as system:
            ready = asyncio.create_task(system.wait_ready())
            stopped = asyncio.create_task(stop.wait())
            await asyncio.wait({ready, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if stop.is_set():
                ready.cancel()
                say("stopping")
                return 0
            stopped.cancel()
            ready.result()
            module = None
            if registry is not None:
                module = await install_sample_module(
                    registry,
                    system.kcp,
                    system.runtimes[0].kyma,
                    kcp_namespace=KCP_NAMESPACE,
                    sync_namespace=SYNC_NAMESPACE,
                    say=say,
                )
            if once:
                code = await _demonstrate(system)
                if code == 0 and module is not None:
                    await demonstrate_drift(system.runtimes[0].client, module, say)
                return code
            kubeconfig = (RUN_DIR / f"{system.runtimes[0].name}.kubeconfig").relative_to(REPO_ROOT)
            say(
                f"running; try: KUBECONFIG={kubeconfig} kubectl -n {SYNC_NAMESPACE} patch kyma default "
                """--type merge -p '{"spec":{"channel":"fast"}}'"""
            )
            say("press Ctrl-C to stop")
            await stop.wait()
            say("stopping")
            return 0
    except (TimeoutError, RuntimeError, KubeError) as exc:
        say(f"FAILED: {type(exc).__name__}: {exc}")
        return 1
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--skrs", type=int, default=1, help="number of runtime (SKR) API servers (default 1)")
    parser.add_argument(
        "--module",
        action="store_true",
        help="also run a local OCI registry and install a sample module into the first runtime",
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="start everything, edit a runtime Kyma, wait for its targeted reconcile, stop (a smoke check)",
    )
    args = parser.parse_args(argv)
    if args.skrs < 1:
        parser.error("--skrs must be at least 1")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    say = make_say()
    skr_names = [f"skr-{i + 1}" for i in range(args.skrs)]
    names_ = ["kcp", *skr_names]
    started = time.monotonic()
    say(f"starting local control planes: {', '.join(names_)}")
    try:
        with ControlPlane(names_) as plane:
            installed = apply_crds(plane["kcp"].kubeconfig_path)
            for name in skr_names:
                apply_crds(plane[name].kubeconfig_path, plurals=SKR_CRD_PLURALS)
            RUN_DIR.mkdir(parents=True, exist_ok=True)
            say(f"ready in {time.monotonic() - started:.1f}s; {len(installed)} CRDs installed in KCP")
            for name, server in plane.servers.items():
                path = RUN_DIR / f"{name}.kubeconfig"
                path.write_bytes(server.kubeconfig)
                path.chmod(0o600)
                rss = rss_bytes(server.pid) // 2**20 if server.pid else 0
                print(
                    f"  {name:8} {server.url}  kubeconfig: {path}  (kube-apiserver RSS {rss} MiB)", flush=True
                )
            say("e.g.: KUBECONFIG=.local/run/kcp.kubeconfig kubectl get kymas -A  (any Kubernetes client)")
            with contextlib.ExitStack() as stack:
                registry = stack.enter_context(LocalRegistry()) if args.module else None
                if registry is not None:
                    say(f"local OCI registry (plain HTTP) on {registry.host}")
                code = asyncio.run(run_local(plane, skr_names, once=args.once, say=say, registry=registry))
            say(f"stopped everything after {time.monotonic() - started:.1f}s")
            return code
    except KeyboardInterrupt:
        say("interrupted; stopped")
        return 130


if __name__ == "__main__":
    sys.exit(main())
