"""Wires the Manifest controller: informers, the triggers that enqueue Manifests, the reconciler.

What enqueues a Manifest (DESIGN 4.5):

* the Manifest informer: creation, spec (generation), label or annotation changes and deletion;
  our own status writes do not requeue;
* the listener (``event_sink``): the runtime agent saw a module object change or go, and its event
  names the owning Manifest (annotation ``deprecated-operator.kyma-project.io/owned-by``) -> that
  Manifest at once, so drift is repaired without a timer;
* the access-Secret informer: a runtime's kubeconfig Secret appearing or going -> the Manifests of
  that Kyma that are not Ready (a deleting Manifest waits for its Secret's removal, upstream e2e 23);
* the reconcile's own requeues (backoff, readiness polling, the adaptive safety net).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from kcp_listener.routing import ObjectRef
from kyma_operator.api import names
from kyma_operator.controllers.kyma.heartbeat import HeartbeatSource
from kyma_operator.controllers.kyma.triggers import TriggerLog
from kyma_operator.controllers.manifest.metrics import ManifestMetrics
from kyma_operator.controllers.manifest.reconciler import (
    MANIFESTS,
    RUNTIME_EVENT,
    ManifestControllerConfig,
    ManifestReconciler,
    utc_now,
)
from kyma_operator.controllers.manifest.source import ManifestSource
from kyma_operator.remote.cache import ClientFactory, SkrClientCache
from kyma_operator.remote.secrets import AccessSecrets
from kyma_operator.runtime.clock import Clock
from kyma_operator.runtime.controller import (
    AnnotationsChanged,
    AnyOf,
    ChannelSource,
    Controller,
    DeletionTimestampChanged,
    EnqueueMapped,
    GenerationChanged,
    LabelsChanged,
)
from kyma_operator.runtime.informer import Informer, index_by_label
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.manager import Manager
from kyma_operator.runtime.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
)
from kyma_operator.runtime.request import Request

CONTROLLER_NAME = "manifest"
BY_KYMA_INDEX = "manifest/kyma-name"

MANIFEST_CHANGED = "Manifest changed"
ACCESS_SECRET = "access Secret changed"

JSON = dict[str, Any]


class ManifestEventSink:
    """``kcp_listener.routing.RequestSink`` for Manifest requests: a bounded channel into the
    controller; notes the reason and tells observers."""

    def __init__(self, channel: ChannelSource, triggers: TriggerLog) -> None:
        self._channel = channel
        self._triggers = triggers
        self.observers: list[Callable[[Request], None]] = []

    def offer(self, ref: ObjectRef) -> bool:
        request = Request(ref.namespace, ref.name)
        self._triggers.note(request, RUNTIME_EVENT)
        for observer in self.observers:
            observer(request)
        return self._channel.offer(request)

    def depth(self) -> int:
        return len(self._channel)


@dataclass
class ManifestController:
    controller: Controller
    reconciler: ManifestReconciler
    manifests: Informer
    skr_clients: SkrClientCache
    triggers: TriggerLog
    metrics: ManifestMetrics

    def add_to(self, manager: Manager) -> None:
        manager.add_informer(self.manifests)
        manager.add_controller(self.controller)

    def event_sink(self, maxsize: int = 4096) -> ManifestEventSink:
        return ManifestEventSink(self.controller.channel_source(maxsize), self.triggers)

    def use_heartbeats(self, heartbeats: HeartbeatSource) -> None:
        self.reconciler.heartbeats = heartbeats

    async def close(self) -> None:
        await self.skr_clients.close()


def _runtime_client_factory(config: ManifestControllerConfig) -> ClientFactory:
    """Runtime clients with as many connections as the apply runs requests in parallel."""

    def factory(kubeconfig: bytes) -> KubeClient:
        return KubeClient.from_kubeconfig_bytes(
            kubeconfig,
            max_concurrency=config.apply_concurrency,
            request_timeout=15.0,
            user_agent="kyma-operator/manifest",
        )

    return factory


def manifest_informer(client: KubeClient, namespace: str, *, clock: Clock | None = None) -> Informer:
    return Informer(
        client,
        MANIFESTS,
        namespace=namespace,
        indexers={BY_KYMA_INDEX: index_by_label(names.KYMA_NAME_LABEL)},
        clock=clock,
        name="manifests",
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
) -> ManifestController:
    """The controller (not started). ``kymas`` and ``access`` are shared with the Kyma controller;
    the runtime clients are this controller's own (their lifetime follows its reconciles)."""
    cfg = config or ManifestControllerConfig()
    manifests = manifests or manifest_informer(client, cfg.namespace, clock=clock)
    skr_clients = SkrClientCache(access, factory=client_factory or _runtime_client_factory(cfg))
    triggers = TriggerLog()
    metrics = ManifestMetrics(registry)
    reconciler = ManifestReconciler(
        client,
        manifests=manifests,
        kymas=kymas,
        skr_clients=skr_clients,
        source=source,
        config=cfg,
        triggers=triggers,
        metrics=metrics,
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

    def changed(obj: JSON) -> Iterable[Request]:
        request = Request.for_object(obj)
        triggers.note(request, MANIFEST_CHANGED)
        return (request,)

    controller.watch(
        manifests,
        EnqueueMapped(changed),
        AnyOf(GenerationChanged(), LabelsChanged(), AnnotationsChanged(), DeletionTimestampChanged()),
    )

    def secret_changed(kyma: Request, what: str) -> None:
        for obj in manifests.by_index(BY_KYMA_INDEX, kyma.name):
            if (obj.get("metadata") or {}).get("namespace") != kyma.namespace:
                continue
            if what == "changed" and (obj.get("status") or {}).get("state") == "Ready":
                continue
            request = Request.for_object(obj)
            triggers.note(request, ACCESS_SECRET)
            controller.enqueue(request)

    access.on_change(secret_changed)
    return ManifestController(
        controller=controller,
        reconciler=reconciler,
        manifests=manifests,
        skr_clients=skr_clients,
        triggers=triggers,
        metrics=metrics,
    )
