"""Wires the Watcher controller: three namespaced informers, the handlers that map their events to
Watcher requests, and the controller itself.

* Watchers: spec, label and deletion changes (status writes, including our own, do not requeue);
* Gateways: any change enqueues every Watcher of the namespace (there are few), so a host edit or a
  relabelled Gateway is reflected in the VirtualServices immediately;
* VirtualServices: any change or deletion enqueues the owning Watcher, so an edited or deleted
  VirtualService is repaired immediately rather than on the next periodic requeue (upstream).

``add_to(manager)`` registers everything with a ``runtime.manager.Manager``; ``run()`` runs it on its
own (tests, tools).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.resources import WATCHERS, resource_for
from kyma_operator.controllers.watcher.events import EventRecorder
from kyma_operator.controllers.watcher.reconciler import WatcherControllerConfig, WatcherReconciler
from kyma_operator.runtime.clock import Clock
from kyma_operator.runtime.controller import (
    AnyOf,
    Controller,
    DeletionTimestampChanged,
    EnqueueForObject,
    EnqueueForOwner,
    EnqueueMapped,
    GenerationChanged,
    LabelsChanged,
)
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.manager import Manager
from kyma_operator.runtime.request import Request

CONTROLLER_NAME = "watcher"


@dataclass
class WatcherController:
    controller: Controller
    reconciler: WatcherReconciler
    watchers: Informer
    gateways: Informer
    virtual_services: Informer

    @property
    def informers(self) -> list[Informer]:
        return [self.watchers, self.gateways, self.virtual_services]

    def requeue_all(self, reason: str) -> None:
        """Reconcile every Watcher of the namespace again (e.g. the gateway Secret's state changed)."""
        for obj in self.watchers.list(self.reconciler.config.namespace):
            self.controller.enqueue(Request.for_object(obj), reason)

    def add_to(self, manager: Manager) -> None:
        for informer in self.informers:
            manager.add_informer(informer)
        manager.add_controller(self.controller)

    async def run(self) -> None:
        """Informers and controller until cancelled (without a manager)."""
        tasks = [
            asyncio.create_task(informer.run(), name=f"informer-{informer.name}")
            for informer in self.informers
        ]
        try:
            for informer in self.informers:
                await informer.synced.wait()
            await self.controller.run()
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task


def build_watcher_controller(
    client: KubeClient,
    *,
    config: WatcherControllerConfig | None = None,
    clock: Clock | None = None,
    wall_clock: Callable[[], datetime.datetime] | None = None,
    record_events: bool = True,
) -> WatcherController:
    cfg = config or WatcherControllerConfig()
    namespace = cfg.namespace
    watchers = Informer(client, WATCHERS, namespace=namespace, clock=clock, name="watchers")
    gateways = Informer(
        client,
        resource_for(names.GATEWAY, cfg.istio_version),
        namespace=namespace,
        clock=clock,
        name="gateways",
    )
    virtual_services = Informer(
        client,
        resource_for(names.VIRTUAL_SERVICE, cfg.istio_version),
        namespace=namespace,
        clock=clock,
        name="virtualservices",
    )
    extra: dict[str, Any] = {} if wall_clock is None else {"wall_clock": wall_clock}
    events = EventRecorder(client, component="watcher-controller", **extra) if record_events else None
    reconciler = WatcherReconciler(
        client,
        watchers=watchers,
        gateways=gateways,
        virtual_services=virtual_services,
        config=cfg,
        events=events,
        **extra,
    )
    controller = Controller(CONTROLLER_NAME, reconciler, workers=cfg.workers, clock=clock)

    def watchers_of_namespace(gateway: dict[str, Any]) -> Iterable[Request]:
        gateway_ns = (gateway.get("metadata") or {}).get("namespace") or ""
        return [Request.for_object(obj) for obj in watchers.list(gateway_ns)]

    controller.watch(
        watchers, EnqueueForObject(), AnyOf(GenerationChanged(), LabelsChanged(), DeletionTimestampChanged())
    )
    controller.watch(gateways, EnqueueMapped(watchers_of_namespace))
    controller.watch(virtual_services, EnqueueForOwner(names.WATCHER.kind, names.WATCHER.group))
    return WatcherController(
        controller=controller,
        reconciler=reconciler,
        watchers=watchers,
        gateways=gateways,
        virtual_services=virtual_services,
    )
