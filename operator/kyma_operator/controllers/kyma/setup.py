"""Wires the Kyma controller: its sources, the reconciler, the controller, in one pass.

What enqueues a Kyma (DESIGN 4.5, the watcher part), each a ``Source`` with its reason:

* the Kyma informer: creation, spec (generation) or label changes and deletion; our own status
  writes do not requeue (upstream's ``GenerationChanged OR LabelChanged`` filter);
* ``intake``: the listener's bounded, throttled entry: a signed event from the runtime -> exactly
  that Kyma, at once;
* the Watcher fan-out (passed in ``sources`` by the operator): a Watcher or trust-bundle change
  re-renders every runtime's agent, rate-limited;
* the access-Secret informer: a kubeconfig Secret appearing or going, or a changed kubeconfig of a
  Kyma that is not Ready (a rotation of a healthy runtime's kubeconfig is picked up lazily);
* the heartbeat sweep (a timer, only with a heartbeat tracker): the runtime's agent went silent or
  came back;
* the reconcile's own requeues (backoff, readiness polling, adaptive safety net).

Shared pieces (the Kyma informer, the listener's heartbeat tracker, the fan-out) are built by the
caller first and passed in; nothing is attached after construction.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from kyma_operator.api.resources import KYMAS
from kyma_operator.controllers.kyma.heartbeat import HeartbeatSource, HeartbeatSweep, ObservedHealth
from kyma_operator.controllers.kyma.installers import Installers
from kyma_operator.controllers.kyma.modulesync import ModuleSync
from kyma_operator.controllers.kyma.reconciler import KymaControllerConfig, KymaReconciler, utc_now
from kyma_operator.controllers.kyma.triggers import ACCESS_SECRET, HEARTBEAT, KYMA_CHANGED, RUNTIME_EVENT
from kyma_operator.remote.cache import ClientFactory, SkrClientCache, default_client_factory
from kyma_operator.remote.secrets import AccessSecrets, access_secret_informer
from kyma_operator.runtime.clock import Clock
from kyma_operator.runtime.controller import (
    AnyOf,
    Controller,
    DeletionTimestampChanged,
    EnqueueForObject,
    GenerationChanged,
    LabelsChanged,
)
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.intake import Intake
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.manager import Manager
from kyma_operator.runtime.ratelimit import operator_rate_limiter
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.source import Source

CONTROLLER_NAME = "kyma"

JSON = dict[str, Any]


@dataclass
class KymaController:
    controller: Controller
    reconciler: KymaReconciler
    kymas: Informer
    access_secrets: Informer
    skr_clients: SkrClientCache
    intake: Intake
    """The listener's entry into this controller (``kcp_listener.routing.RequestSink``)."""
    sweep: HeartbeatSweep | None

    @property
    def informers(self) -> list[Informer]:
        return [self.kymas, self.access_secrets]

    def add_to(self, manager: Manager) -> None:
        for informer in self.informers:
            manager.add_informer(informer)
        manager.add_controller(self.controller)

    def enqueue(self, request: Request, reason: str) -> None:
        self.controller.enqueue(request, reason)

    async def close(self) -> None:
        """Close the runtime clients (after the manager stopped)."""
        await self.skr_clients.close()


def build_kyma_controller(
    client: KubeClient,
    *,
    installers: Installers,
    config: KymaControllerConfig | None = None,
    clock: Clock | None = None,
    wall_clock: Callable[[], datetime.datetime] = utc_now,
    client_factory: ClientFactory = default_client_factory,
    registry: CollectorRegistry | None = None,
    kymas: Informer | None = None,
    heartbeats: HeartbeatSource | None = None,
    sources: Sequence[Source] = (),
) -> KymaController:
    """The Kyma controller over ``kymas`` (shared with the listener; built here if not given).

    ``heartbeats``: the listener's tracker (condition ``SKRWatcherHeartbeat``, adaptive safety net,
    sweep); without it every runtime's agent counts as unhealthy. ``sources``: further triggers
    (the Watcher fan-out).
    """
    cfg = config or KymaControllerConfig()
    if kymas is None:  # (an empty Informer is falsy: never "or")
        kymas = Informer(client, KYMAS, namespace=cfg.namespace, clock=clock, name="kymas")
    secrets_informer = access_secret_informer(client, cfg.namespace, clock=clock)
    access = AccessSecrets(secrets_informer)
    skr_clients = SkrClientCache(access, factory=client_factory, registry=registry)
    observed = ObservedHealth()
    reconciler = KymaReconciler(
        client,
        kymas=kymas,
        skr_clients=skr_clients,
        installers=installers,
        config=cfg,
        heartbeats=heartbeats,
        observed_health=observed,
        clock=clock,
        wall_clock=wall_clock,
        modules=ModuleSync(client, sync_namespace=cfg.sync_namespace) if cfg.modules else None,
    )
    rate_limiter = operator_rate_limiter(cfg.failure_base_delay, cfg.failure_max_delay, clock=clock)
    controller = Controller(
        CONTROLLER_NAME, reconciler, workers=cfg.workers, rate_limiter=rate_limiter, clock=clock
    )
    controller.watch(
        kymas,
        EnqueueForObject(),
        AnyOf(GenerationChanged(), LabelsChanged(), DeletionTimestampChanged()),
        reason=KYMA_CHANGED,
    )
    intake = Intake(
        RUNTIME_EVENT, capacity=cfg.intake_capacity, throttle_window=cfg.event_throttle_window, clock=clock
    )
    controller.add_source(intake)

    def secret_changed(request: Request, what: str) -> None:
        if what == "changed":
            obj = kymas.get(request.namespace, request.name)
            if obj is not None and (obj.get("status") or {}).get("state") == "Ready":
                return  # a rotated kubeconfig of a healthy runtime is used from the next reconcile on
        controller.enqueue(request, ACCESS_SECRET)

    access.on_change(secret_changed)
    sweep: HeartbeatSweep | None = None
    if heartbeats is not None:
        sweep = HeartbeatSweep(
            kymas,
            observed,
            heartbeats,
            reason=HEARTBEAT,
            namespace=cfg.namespace,
            interval=cfg.heartbeat_sweep_interval,
            clock=clock,
        )
        controller.add_source(sweep)
    for source in sources:
        controller.add_source(source)
    return KymaController(
        controller=controller,
        reconciler=reconciler,
        kymas=kymas,
        access_secrets=secrets_informer,
        skr_clients=skr_clients,
        intake=intake,
        sweep=sweep,
    )
