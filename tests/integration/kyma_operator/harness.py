"""Runs the real operator (``kyma_operator.app``) against the session's KCP and SKR API servers.

Each test gets its own KCP namespace (Kymas, access Secrets, Watchers, PKI) and its own runtime
namespace ``<ns>-skr`` and webhook configuration ``<ns>-webhook`` in the shared SKRs, so tests do
not see each other's objects. Reconciles are observed through the reconciler's report hook.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import functools
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kyma_operator.agentinstall import artefacts
from kyma_operator.api import names
from kyma_operator.api.resources import WATCHERS, resource_for
from kyma_operator.app import Operator, build_operator
from kyma_operator.config import OperatorConfig
from kyma_operator.controllers.kyma.report import KymaReport as ReconcileReport
from kyma_operator.controllers.manifest.reconciler import ManifestReport
from kyma_operator.controllers.manifest.source import ManifestSource
from kyma_operator.runtime.clock import utc_now
from kyma_operator.runtime.errors import AlreadyExists, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import NAMESPACES, SECRETS, VALIDATING_WEBHOOK_CONFIGURATIONS, Resource
from skr_watcher.agent import Agent
from tests.controlplane.binaries import REPO_ROOT
from tests.controlplane.cluster import free_port
from tests.integration.kyma_operator.identity.e2e import agent_config, write_agent_files
from tests.polling import eventually

KYMAS = resource_for(names.KYMA)
DEFAULT_WATCHER = REPO_ROOT / "manifests" / "kcp" / "watcher-kyma.yaml"
MODULE_RESOURCES_WATCHER = REPO_ROOT / "manifests" / "kcp" / "watcher-module-resources.yaml"


def default_watcher(namespace: str, path: Path = DEFAULT_WATCHER) -> dict[str, Any]:
    """Upstream's default Kyma Watcher (manifests/kcp/watcher-kyma.yaml), or another Watcher file
    of ``manifests/kcp``, in ``namespace``."""
    body: dict[str, Any] = yaml.safe_load(Path(path).read_text())
    body["metadata"]["namespace"] = namespace
    body["spec"]["serviceInfo"]["namespace"] = namespace
    return body


def kyma_body(name: str, namespace: str, runtime_id: str, channel: str = "regular") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {names.RUNTIME_ID_LABEL: runtime_id},
            "annotations": {names.SKR_DOMAIN_ANNOTATION: f"{runtime_id}.example.com"},
        },
        "spec": {"channel": channel},
    }


def access_secret(name: str, namespace: str, kyma: str, kubeconfig: bytes) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {names.KYMA_NAME_LABEL: kyma}},
        "data": {"config": base64.b64encode(kubeconfig).decode()},
    }


@dataclass
class RunningOperator:
    operator: Operator
    namespace: str
    reports: list[ReconcileReport] = field(default_factory=list)
    routed: list[Request] = field(default_factory=list)
    manifest_reports: list[ManifestReport] = field(default_factory=list)
    routed_manifests: list[Request] = field(default_factory=list)

    @property
    def sync_namespace(self) -> str:
        return self.operator.config.sync_namespace

    @property
    def webhook_configuration(self) -> str:
        return self.operator.config.webhook_configuration_name

    def request(self, name: str) -> Request:
        return Request(self.namespace, name)

    def reports_for(self, name: str) -> list[ReconcileReport]:
        return [r for r in self.reports if r.request == self.request(name)]

    async def wait_report(
        self,
        predicate: Callable[[ReconcileReport], bool],
        *,
        what: str,
        deadline: float = 15.0,
        after: int = 0,
    ) -> ReconcileReport:
        """The first report (from index ``after`` on) matching ``predicate``, polling until ``deadline``."""
        until = time.monotonic() + deadline
        while time.monotonic() < until:
            for report in self.reports[after:]:
                if predicate(report):
                    return report
            await asyncio.sleep(0.02)
        seen = "\n  ".join(r.line() for r in self.reports[after:][-10:])
        raise AssertionError(f"timed out after {deadline}s waiting for {what}; last reports:\n  {seen}")


async def settled(running: RunningOperator, *names: str, deadline: float = 15.0) -> None:
    """Each Kyma had a reconcile that wrote nothing (converged), and the work queue is idle.

    A reconcile that writes the Kyma's status is not always followed by another one: its own status
    write triggers none, and the Manifest events it waited for may all have come before it. So once
    the queue is idle without a converged report, the Kyma is queued again: at a fixed point that
    reconcile writes nothing; otherwise its writes bring the next one.
    """
    queue = running.operator.kyma.controller.queue

    def converged(name: str) -> bool:
        return any(
            r.request.name == name and not r.status_written and r.outcome in ("Processing", "Ready")
            for r in running.reports
        )

    def converged_or_requeued(name: str) -> bool:
        if converged(name):
            return True
        if not len(queue) and not queue.processing:
            queue.add(Request(running.namespace, name))
        return False

    for name in names:
        await eventually(functools.partial(converged_or_requeued, name), f"{name} converged", within=deadline)
    await asyncio.wait_for(queue.wait_idle(), deadline)


def operator_config(namespace: str, **overrides: Any) -> OperatorConfig:
    listener_port = free_port()
    values: dict[str, Any] = {
        "namespace": namespace,
        "istio_namespace": namespace,
        "leader_elect": False,
        "health_port": 0,
        "metrics_port": None,
        "listener_enabled": False,
        "listener_port": listener_port,
        "kcp_addr": f"127.0.0.1:{listener_port}",
        "sync_namespace": f"{namespace}-skr",
        "webhook_configuration_name": f"{namespace}-webhook",
        "webhook_url": f"https://127.0.0.1:{free_port()}",  # nothing listens: failurePolicy Ignore
        "additional_dns_names": ("127.0.0.1",),
        "agent_env": {"KCP_SCHEME": "http"},
        "failure_base_delay": 0.2,
        "failure_max_delay": 2.0,
        "kyma_workers": 2,
    }
    values.update(overrides)
    return OperatorConfig(**values)


@contextlib.asynccontextmanager
async def running_operator(
    kcp: KubeClient,
    config: OperatorConfig,
    *,
    skrs: tuple[KubeClient, ...] = (),
    manifest_source: ManifestSource | None = None,
    maintenance_clock: Callable[[], datetime.datetime] | None = None,
    wall_clock: Callable[[], datetime.datetime] = utc_now,
) -> AsyncIterator[RunningOperator]:
    """The operator under its Manager until the block ends; ``skrs`` are cleaned of its webhook config.

    The default Kyma Watcher exists before the operator starts (a Watcher created later would fan
    out to every Kyma, which some tests must not see).
    """
    with contextlib.suppress(AlreadyExists):
        await kcp.create(WATCHERS, default_watcher(config.namespace))
    operator = await build_operator(
        config,
        kcp,
        manifest_source=manifest_source,
        maintenance_clock=maintenance_clock,
        wall_clock=wall_clock,
        # each test's namespace is new: no listener held its runtimes' events before, so there are
        # no predecessor's replays to refuse and an agent's first signed event needs no wait
        listener_leading_since=lambda: 0.0,
    )
    running = RunningOperator(operator, config.namespace)
    operator.kyma.reconciler.observers.append(running.reports.append)
    operator.kyma.intake.observers.append(running.routed.append)
    if operator.manifest is not None:
        operator.manifest.reconciler.observers.append(running.manifest_reports.append)
        operator.manifest.intake.observers.append(running.routed_manifests.append)
    task = asyncio.create_task(operator.run())
    try:
        await asyncio.wait_for(operator.manager.started.wait(), 15.0)
        yield running
    finally:
        await operator.shutdown()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for skr in skrs:
            with contextlib.suppress(NotFound):
                await skr.delete(VALIDATING_WEBHOOK_CONFIGURATIONS, config.webhook_configuration_name)
            with contextlib.suppress(NotFound):
                await skr.delete(NAMESPACES, config.sync_namespace)


async def create_runtime(
    kcp: KubeClient, namespace: str, name: str, runtime_id: str, kubeconfig: bytes | None
) -> dict[str, Any]:
    """A Kyma and (if ``kubeconfig``) its access Secret."""
    if kubeconfig is not None:
        await kcp.create(SECRETS, access_secret(f"{name}-kubeconfig", namespace, name, kubeconfig))
    return await kcp.create(KYMAS, kyma_body(name, namespace, runtime_id))


@contextlib.asynccontextmanager
async def runtime_agent(
    running: RunningOperator, skr: KubeClient, runtime_id: str, port: int, directory: Path, **env: str
) -> AsyncIterator[Agent]:
    """The runtime's agent in this process, as a kubelet would run it: with the credentials the
    operator installed into the runtime (Secret ``skr-webhook-tls``), listening on ``port`` (the
    webhook URL the operator was configured with); yields once the listener trusts its key.
    ``env``: more agent settings (``identity.e2e.agent_config``: no heartbeats, no resync at start)."""
    secret = await eventually(
        lambda: _get_or_none(skr, SECRETS, artefacts.SECRET_NAME, running.sync_namespace),
        "the agent Secret installed in the runtime",
    )
    files = write_agent_files(secret, directory)
    listener = running.operator.listener
    assert listener is not None
    intake = listener.intake

    def accepting() -> bool:
        # A listener refuses signatures created before it took the runtime's events + skew (the
        # replay rule across restarts and failovers, kcp_listener.intake); these tests measure the
        # event path of a listener that serves, so the agent starts once it accepts (at once for
        # ``running_operator``'s listener, which holds the fresh namespace's runtimes since 0.0).
        after = intake.accepts_signed_after(runtime_id)
        return after is not None and int(time.time()) > after

    await eventually(accepting, f"the listener accepts {runtime_id}'s newly signed events")
    agent = Agent(
        agent_config(files, kcp_addr=running.operator.kcp_addr, scheme="http", WEBHOOK_PORT=str(port), **env)
    )
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await asyncio.wait_for(agent.started.wait(), 10.0)
        await eventually(
            lambda: bool(listener.keys.public_keys(f"{runtime_id}:v1")),
            f"the listener trusts {runtime_id}'s published key",
        )
        yield agent
    finally:
        stop.set()
        await asyncio.gather(task, return_exceptions=True)


async def _get_or_none(client: KubeClient, res: Resource, name: str, namespace: str) -> dict[str, Any] | None:
    try:
        return await client.get(res, name, namespace)
    except NotFound:
        return None
