"""Wires the Manifest controller: its sources, the reconciler, the controller, in one pass.

What enqueues a Manifest (docs/architecture.md, "What enqueues what"), each a ``Source`` with its reason:

* the Manifest informer: creation, spec (generation), label or annotation changes and deletion;
  our own status writes do not requeue;
* ``intake``: the listener's bounded, throttled entry: the runtime agent saw a module object change
  or go (or a module workload's status change), and its event names the owning Manifest
  (annotation ``deprecated-operator.kyma-project.io/owned-by``) -> that Manifest at once, so drift
  is repaired and readiness seen without a timer;
* the access-Secret informer: a runtime's kubeconfig Secret appearing or going, or a changed one
  -> the Manifests of that Kyma that are not Ready (a deleting Manifest waits for its Secret's
  removal, upstream e2e 23);
* with the deployer module's injection on (``pullsecret``): the KCP Secrets labelled
  ``operator.kyma-project.io/module-name`` -> the deployer's Manifests, so changed data reaches
  the runtime, and a relabelled or deleted source Secret the Manifest's status, at once;
* ``workloads``: the watch of a Processing Manifest's rolling-out workload -> that Manifest when
  the workload turns Ready (or Error) or goes;
* the reconcile's own requeues (backoff, readiness polling, event re-reads, the adaptive safety net).

Shared pieces (the Kyma informer, the access Secrets, the listener's heartbeat tracker) are built
by the caller and passed in; the runtime clients are this controller's own.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from kyma_operator.controllers.common.heartbeat import NO_AGENT_HEALTH, AgentHealth
from kyma_operator.controllers.common.layers import ReconcilerLayer, build_controller
from kyma_operator.controllers.common.secretsource import SecretChanges
from kyma_operator.controllers.manifest.config import ManifestControllerConfig
from kyma_operator.controllers.manifest.metrics import ManifestMetrics
from kyma_operator.controllers.manifest.pullsecret import deployer_manifests, kcp_secret_informer
from kyma_operator.controllers.manifest.reconciler import ManifestReconciler
from kyma_operator.controllers.manifest.source import ManifestSource
from kyma_operator.controllers.manifest.triggers import ManifestTrigger
from kyma_operator.controllers.manifest.workloads import WorkloadWatches
from kyma_operator.controllers.shared_informers import MANIFESTS_BY_KYMA_INDEX, manifest_informer
from kyma_operator.remote.cache import (
    DEFAULT_IDLE_TTL,
    ClientFactory,
    SkrClientCache,
    counting_client_factory,
)
from kyma_operator.remote.metrics import RuntimeApiRequests
from kyma_operator.remote.secrets import AccessSecrets
from kyma_operator.runtime.clock import Clock, utc_now
from kyma_operator.runtime.controller import (
    AnnotationsChanged,
    AnyOf,
    Controller,
    DeletionTimestampChanged,
    EnqueueForObject,
    EnqueueMapped,
    GenerationChanged,
    LabelsChanged,
    RequestGate,
)
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.intake import Intake
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.manager import Manager
from kyma_operator.runtime.request import Request

CONTROLLER_NAME = "manifest"
BY_KYMA_INDEX = MANIFESTS_BY_KYMA_INDEX


@dataclass
class ManifestController:
    controller: Controller
    reconciler: ManifestReconciler
    manifests: Informer
    skr_clients: SkrClientCache
    intake: Intake
    """The listener's entry into this controller (``kcp_listener.routing.RequestSink``)."""
    metrics: ManifestMetrics

    def add_to(self, manager: Manager) -> None:
        manager.add_informer(self.manifests)
        manager.add_controller(self.controller)
        manager.add_runnable(self.skr_clients, leader_only=False)  # closes idle runtime clients

    async def close(self) -> None:
        await self.skr_clients.close()


def _runtime_client_factory(
    config: ManifestControllerConfig, api_requests: RuntimeApiRequests | None
) -> ClientFactory:
    """Runtime clients with as many connections as the apply runs requests in parallel."""
    observer = api_requests.observer(CONTROLLER_NAME) if api_requests is not None else None
    return counting_client_factory(
        observer, max_concurrency=config.apply_concurrency, user_agent="kyma-operator/manifest"
    )


def build_manifest_controller(
    client: KubeClient,
    *,
    source: ManifestSource,
    kymas: Informer,
    access: AccessSecrets,
    config: ManifestControllerConfig | None = None,
    clock: Clock | None = None,
    wall_clock: Callable[[], datetime.datetime] = utc_now,
    client_factory: ClientFactory | None = None,
    registry: CollectorRegistry | None = None,
    manifests: Informer | None = None,
    health: AgentHealth = NO_AGENT_HEALTH,
    api_requests: RuntimeApiRequests | None = None,
    runtime_client_idle_ttl: float | None = DEFAULT_IDLE_TTL,
    request_gate: RequestGate | None = None,
    layers: Sequence[ReconcilerLayer] = (),
) -> ManifestController:
    """The controller (not started). ``kymas`` and ``access`` are shared with the Kyma controller;
    ``health`` (the listener's heartbeats) lengthens the safety net of healthy runtimes."""
    cfg = config or ManifestControllerConfig()
    if manifests is None:  # (an empty Informer is falsy: never "or")
        manifests = manifest_informer(client, cfg.namespace, clock=clock)
    skr_clients = SkrClientCache(
        access,
        factory=client_factory or _runtime_client_factory(cfg, api_requests),
        registry=registry,
        clock=clock,
        idle_ttl=runtime_client_idle_ttl,
    )
    metrics = ManifestMetrics(registry)
    # twice the poll's interval: the poll's next reconcile finds the watch open and extends it
    workloads = WorkloadWatches(
        limit=cfg.workload_watches, duration=2 * cfg.processing_interval, clock=clock, registry=registry
    )
    reconciler = ManifestReconciler(
        client,
        manifests=manifests,
        kymas=kymas,
        skr_clients=skr_clients,
        source=source,
        config=cfg,
        health=health,
        metrics=metrics,
        clock=clock,
        wall_clock=wall_clock,
        workloads=workloads,
    )
    controller = build_controller(
        CONTROLLER_NAME, reconciler, cfg, layers=layers, clock=clock, request_gate=request_gate
    )
    controller.watch(
        manifests,
        EnqueueForObject(),
        AnyOf(GenerationChanged(), LabelsChanged(), AnnotationsChanged(), DeletionTimestampChanged()),
        reason=ManifestTrigger.MANIFEST_CHANGED,
    )
    intake = Intake(
        ManifestTrigger.RUNTIME_EVENT,
        capacity=cfg.intake_capacity,
        throttle_window=cfg.event_throttle_window,
        clock=clock,
    )
    controller.add_source(intake)
    controller.add_source(workloads)

    def secret_changed(kyma: Request, what: str) -> list[Request]:
        found: list[Request] = []
        for obj in manifests.by_index(BY_KYMA_INDEX, kyma.name):
            if (obj.get("metadata") or {}).get("namespace") != kyma.namespace:
                continue
            if what == "changed" and (obj.get("status") or {}).get("state") == "Ready":
                continue
            found.append(Request.for_object(obj))
        return found

    controller.add_source(SecretChanges(access, secret_changed, reason=ManifestTrigger.ACCESS_SECRET))
    if cfg.inject_data_from_kcp:
        controller.watch(
            kcp_secret_informer(client, cfg.namespace, clock=clock),
            EnqueueMapped(deployer_manifests(manifests)),
            reason=ManifestTrigger.KCP_SECRET,
        )
    return ManifestController(
        controller=controller,
        reconciler=reconciler,
        manifests=manifests,
        skr_clients=skr_clients,
        intake=intake,
        metrics=metrics,
    )
