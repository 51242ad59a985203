"""Wires the Kyma controller: informers, the triggers that enqueue Kymas, the reconciler.

What enqueues a Kyma (DESIGN 4.5, the watcher part):

* the Kyma informer: creation, spec (generation) or label changes and deletion; our own status
  writes do not requeue (upstream's ``GenerationChanged OR LabelChanged`` filter);
* the listener (``event_sink``): a signed event from the runtime -> exactly that Kyma, at once;
* the Watcher fan-out (``attach_watcher_feature``): a Watcher or trust-bundle change re-renders
  every runtime's agent, rate-limited;
* the access-Secret informer: a kubeconfig Secret appearing or going, or a changed kubeconfig of a
  Kyma that is not Ready (a rotation of a healthy runtime's kubeconfig is picked up lazily);
* the heartbeat sweep: the runtime's agent went silent or came back;
* the reconcile's own requeues (backoff, readiness polling, adaptive safety net).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from kyma_operator.controllers.kyma.heartbeat import HeartbeatSource, HeartbeatSweep, ObservedHealth
from kyma_operator.controllers.kyma.installers import Installers
from kyma_operator.controllers.kyma.reconciler import KymaControllerConfig, KymaReconciler, utc_now
from kyma_operator.controllers.kyma.skrsync import KYMAS
from kyma_operator.controllers.kyma.triggers import (
    ACCESS_SECRET,
    HEARTBEAT,
    KYMA_CHANGED,
    WATCHER_FANOUT,
    KymaEventSink,
    NotingQueue,
    TriggerLog,
)
from kyma_operator.controllers.watcher.feature import WatcherFeature
from kyma_operator.remote.cache import ClientFactory, SkrClientCache, default_client_factory
from kyma_operator.remote.secrets import AccessSecrets, access_secret_informer
from kyma_operator.runtime.clock import Clock
from kyma_operator.runtime.controller import (
    AnyOf,
    Controller,
    DeletionTimestampChanged,
    EnqueueMapped,
    GenerationChanged,
    LabelsChanged,
)
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.manager import Manager
from kyma_operator.runtime.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
)
from kyma_operator.runtime.request import Request

CONTROLLER_NAME = "kyma"

JSON = dict[str, Any]


@dataclass
class KymaController:
    controller: Controller
    reconciler: KymaReconciler
    kymas: Informer
    access_secrets: Informer
    skr_clients: SkrClientCache
    sweep: HeartbeatSweep
    triggers: TriggerLog

    @property
    def informers(self) -> list[Informer]:
        return [self.kymas, self.access_secrets]

    def add_to(self, manager: Manager) -> None:
        for informer in self.informers:
            manager.add_informer(informer)
        manager.add_controller(self.controller)
        manager.add_runnable(self.sweep, leader_only=True)

    def enqueue(self, request: Request, reason: str) -> None:
        self.triggers.note(request, reason)
        self.controller.enqueue(request)

    def event_sink(self, maxsize: int = 4096) -> KymaEventSink:
        """The listener's Kyma ``RequestSink``: a bounded channel into this controller."""
        return KymaEventSink(self.controller.channel_source(maxsize), self.triggers)

    def use_heartbeats(self, heartbeats: HeartbeatSource, max_silence: float) -> None:
        """Read agent liveness from the listener's tracker (condition, safety-net interval, sweep)."""
        self.reconciler.heartbeats = heartbeats
        if self.reconciler.config.heartbeat_max_silence is None:
            self.reconciler.heartbeat_max_silence = max_silence
        self.sweep.heartbeats = heartbeats

    def attach_watcher_feature(self, feature: WatcherFeature) -> None:
        """Let Watcher and trust-bundle changes fan out to every Kyma (rate-limited)."""
        feature.attach_kyma_controller(
            self.kymas, NotingQueue(self.controller.queue, self.triggers, WATCHER_FANOUT)
        )

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
) -> KymaController:
    cfg = config or KymaControllerConfig()
    kymas = kymas or Informer(client, KYMAS, namespace=cfg.namespace, clock=clock, name="kymas")
    secrets_informer = access_secret_informer(client, cfg.namespace, clock=clock)
    access = AccessSecrets(secrets_informer)
    skr_clients = SkrClientCache(access, factory=client_factory, registry=registry)
    triggers = TriggerLog()
    observed = ObservedHealth()
    reconciler = KymaReconciler(
        client,
        kymas=kymas,
        skr_clients=skr_clients,
        installers=installers,
        config=cfg,
        triggers=triggers,
        observed_health=observed,
        clock=clock,
        wall_clock=wall_clock,
    )
    rate_limiter = MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(cfg.failure_base_delay, cfg.failure_max_delay),
        BucketRateLimiter(1000.0, 2000, clock=clock),
    )
    controller = Controller(
        CONTROLLER_NAME, reconciler, workers=cfg.workers, rate_limiter=rate_limiter, clock=clock
    )

    def kyma_changed(obj: JSON) -> Iterable[Request]:
        request = Request.for_object(obj)
        triggers.note(request, KYMA_CHANGED)
        return (request,)

    controller.watch(
        kymas,
        EnqueueMapped(kyma_changed),
        AnyOf(GenerationChanged(), LabelsChanged(), DeletionTimestampChanged()),
    )

    def secret_changed(request: Request, what: str) -> None:
        if what == "changed":
            obj = kymas.get(request.namespace, request.name)
            if obj is not None and (obj.get("status") or {}).get("state") == "Ready":
                return  # a rotated kubeconfig of a healthy runtime is used from the next reconcile on
        triggers.note(request, ACCESS_SECRET)
        controller.enqueue(request)

    access.on_change(secret_changed)

    def sweep_enqueue(request: Request) -> None:
        triggers.note(request, HEARTBEAT)
        controller.enqueue(request)

    sweep = HeartbeatSweep(
        kymas,
        observed,
        sweep_enqueue,
        namespace=cfg.namespace,
        interval=cfg.heartbeat_sweep_interval,
        clock=clock,
    )
    return KymaController(
        controller=controller,
        reconciler=reconciler,
        kymas=kymas,
        access_secrets=secrets_informer,
        skr_clients=skr_clients,
        sweep=sweep,
        triggers=triggers,
    )
