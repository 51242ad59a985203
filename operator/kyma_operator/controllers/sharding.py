"""The controllers' side of sharding: which shard a request belongs to, the per-request gate, the
shard label on Kymas, and the full re-enqueue of a shard this replica starts to hold.

Why here and not in ``runtime/``: the runtime knows Leases and requests, not Kymas. A Kyma request
belongs to the shard of its Kyma (``kyma_shard_key``: its runtime id, read from the Kyma cache);
a Manifest request to its Kyma's shard (via the ``kyma-name`` label, then the Manifest's own
``SHARD_LABEL``). The gate admits a request only while the coordinator holds its shard (and
counts it in flight, so a hand-over waits for it); anything else is dropped, since the holder has
it, or will enqueue everything of the shard when it acquires it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from kyma_operator.api import names
from kyma_operator.api.resources import KYMAS
from kyma_operator.controllers.kyma.setup import CONTROLLER_NAME as KYMA_CONTROLLER
from kyma_operator.controllers.kyma.setup import KymaController
from kyma_operator.controllers.kyma.triggers import KymaTrigger
from kyma_operator.controllers.manifest.setup import CONTROLLER_NAME as MANIFEST_CONTROLLER
from kyma_operator.controllers.manifest.setup import ManifestController
from kyma_operator.controllers.manifest.triggers import ManifestTrigger
from kyma_operator.remote.cache import SkrClientCache
from kyma_operator.runtime.clock import Clock
from kyma_operator.runtime.controller import Controller, Reconciler, RequestGate
from kyma_operator.runtime.errors import KubeError
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.manager import Manager
from kyma_operator.runtime.request import Request, Result
from kyma_operator.runtime.sharding import ShardCoordinator, ShardingConfig
from kyma_operator.runtime.shardmap import SHARD_LABEL, parse_shard_label, shard_label_value, shard_of

log = logging.getLogger(__name__)

ShardFunc = Callable[[Request], int]


def kyma_shard_key(kyma: Mapping[str, Any]) -> str:
    """The key a Kyma is sharded by: its runtime-id label, else its name."""
    meta = kyma.get("metadata") or {}
    labels = meta.get("labels") or {}
    runtime_id = labels.get(names.RUNTIME_ID_LABEL)
    return str(runtime_id) if runtime_id else str(meta.get("name") or "")


def kyma_shard(kymas: Informer, shards: int) -> ShardFunc:
    """The shard of a Kyma request: from the cached Kyma's runtime id, else its name."""

    def shard(request: Request) -> int:
        obj = kymas.get(request.namespace, request.name)
        key = kyma_shard_key(obj) if obj is not None else request.name
        return shard_of(key, shards)

    return shard


def manifest_shard(manifests: Informer, kymas: Informer, shards: int) -> ShardFunc:
    """The shard of a Manifest request: its Kyma's (cached), else its shard label, else its Kyma name's."""

    def shard(request: Request) -> int:
        obj = manifests.get(request.namespace, request.name)
        labels: dict[str, Any] = ((obj or {}).get("metadata") or {}).get("labels") or {}
        kyma_name = str(labels.get(names.KYMA_NAME_LABEL) or "")
        kyma = kymas.get(request.namespace, kyma_name) if kyma_name else None
        if kyma is not None:
            return shard_of(kyma_shard_key(kyma), shards)
        labelled = parse_shard_label(labels.get(SHARD_LABEL), shards)
        if labelled is not None:
            return labelled
        return shard_of(kyma_name or request.name, shards)

    return shard


class ShardGate:
    """``runtime.controller.RequestGate`` of one controller over the shard coordinator."""

    def __init__(self, coordinator: ShardCoordinator, shard_for: ShardFunc, controller: str) -> None:
        self.coordinator = coordinator
        self.shard_for = shard_for
        self._dropped: Counter = coordinator.metrics.dropped.labels(controller)

    def admit(self, request: Request) -> int | None:
        shard = self.shard_for(request)
        if self.coordinator.enter(shard):
            return shard
        self._dropped.inc()
        return None

    def release(self, ticket: int) -> None:
        self.coordinator.leave(ticket)


def enqueue_shard(
    controller: Controller, informer: Informer, shard_for: ShardFunc, reason: str
) -> Callable[[int], None]:
    """``on_acquired`` callback: every cached object of the shard once, with the controller's
    ``SHARD_ACQUIRED`` trigger (a full reconcile)."""

    def enqueue(shard: int) -> None:
        count = 0
        for obj in informer.list():
            request = Request.for_object(obj)
            if shard_for(request) == shard:
                controller.enqueue(request, reason)
                count += 1
        log.info("shard %d: %d %s enqueued for a full reconcile", shard, count, controller.name)

    return enqueue


def for_shard(
    informer: Informer, shard_for: ShardFunc, action: Callable[[Request], None]
) -> Callable[[int], None]:
    """A shard callback running ``action`` for every cached object of the shard."""

    def run(shard: int) -> None:
        for obj in informer.list():
            request = Request.for_object(obj)
            if shard_for(request) == shard:
                action(request)

    return run


class ReleaseClients:
    """``on_released`` callback: close the runtime clients of the shard's Kymas (memory and
    connections follow the shards a replica holds; the new holder opens its own)."""

    def __init__(self, caches: Sequence[SkrClientCache], kymas: Informer, shard_for: ShardFunc) -> None:
        self.caches = list(caches)
        self.kymas = kymas
        self.shard_for = shard_for
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = 0

    def __call__(self, shard: int) -> None:
        requests = [Request.for_object(obj) for obj in self.kymas.list()]
        mine = [r for r in requests if self.shard_for(r) == shard and any(r in c for c in self.caches)]
        if not mine:
            return
        task = asyncio.get_running_loop().create_task(self._evict(mine))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _evict(self, requests: list[Request]) -> None:
        for request in requests:
            for cache in self.caches:
                if await cache.evict(request, "shard-released"):
                    self.closed += 1


class ShardLabelling:
    """Wraps the Kyma reconciler: after each reconcile, writes the Kyma's ``SHARD_LABEL`` when it is
    missing or wrong.

    Runs behind the gate, so only the shard's holder writes it (once per Kyma; the label lets
    informers filter by shard, and Manifests built later copy it). After the reconcile, as a merge
    patch: it never conflicts with the reconcile's own writes (which carry the cached
    resourceVersion), and the label change enqueues the Kyma once more."""

    def __init__(self, inner: Reconciler, client: KubeClient, kymas: Informer, shards: int) -> None:
        self.inner = inner
        self.client = client
        self.kymas = kymas
        self.shards = shards
        self.writes = 0

    async def reconcile(self, request: Request) -> Result:
        try:
            return await self.inner.reconcile(request)
        finally:
            await self._label(request)

    async def _label(self, request: Request) -> None:
        obj = self.kymas.get(request.namespace, request.name)
        if obj is None:
            return
        meta = obj.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return
        want = shard_label_value(shard_of(kyma_shard_key(obj), self.shards))
        if (meta.get("labels") or {}).get(SHARD_LABEL) == want:
            return
        try:
            await self.client.patch(
                KYMAS, request.name, {"metadata": {"labels": {SHARD_LABEL: want}}}, request.namespace
            )
            self.writes += 1
        except KubeError as exc:  # the label is an optimisation: the next reconcile tries again
            log.info("Kyma %s: could not set the shard label: %s", request, exc)


@dataclass
class Sharding:
    """The coordinator and the Kyma and Manifest controllers' gates, built before the Manager."""

    coordinator: ShardCoordinator
    kyma_shard: ShardFunc
    manifest_shard: ShardFunc
    kymas: Informer
    manifests: Informer
    gates: dict[str, RequestGate] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        client: KubeClient,
        config: ShardingConfig,
        kymas: Informer,
        manifests: Informer,
        *,
        clock: Clock | None = None,
        registry: CollectorRegistry | None = None,
        synced: Callable[[], bool] = lambda: True,
    ) -> Sharding:
        coordinator = ShardCoordinator(client, config, clock=clock, caches_synced=synced, registry=registry)
        by_kyma = kyma_shard(kymas, config.shards)
        by_manifest = manifest_shard(manifests, kymas, config.shards)
        gates: dict[str, RequestGate] = {
            KYMA_CONTROLLER: ShardGate(coordinator, by_kyma, KYMA_CONTROLLER),
            MANIFEST_CONTROLLER: ShardGate(coordinator, by_manifest, MANIFEST_CONTROLLER),
        }
        return cls(coordinator, by_kyma, by_manifest, kymas, manifests, gates)

    def kyma_layer(self, client: KubeClient) -> Callable[[Reconciler], Reconciler]:
        """Wraps the Kyma reconciler so that it writes each Kyma's shard label (``ShardLabelling``)."""
        return lambda inner: ShardLabelling(inner, client, self.kymas, self.coordinator.shards)

    def attach(self, manager: Manager, kyma: KymaController, manifest: ManifestController | None) -> None:
        """Run the coordinator on every replica; on acquiring a shard re-enqueue its objects; on
        releasing it close its runtime clients and drop what the reconcilers remember of its
        objects, metric series included (the new holder exports them: no double counting). The
        gates and the Kyma's shard labelling are given to the controllers as they are built
        (``gates``, ``kyma_layer``)."""
        manager.add_runnable(self.coordinator, leader_only=False)
        self.coordinator.on_acquired(
            enqueue_shard(kyma.controller, self.kymas, self.kyma_shard, KymaTrigger.SHARD_ACQUIRED)
        )
        self.coordinator.on_released(for_shard(self.kymas, self.kyma_shard, kyma.reconciler.forget))
        caches = [kyma.skr_clients]
        if manifest is not None:
            self.coordinator.on_acquired(
                enqueue_shard(
                    manifest.controller, self.manifests, self.manifest_shard, ManifestTrigger.SHARD_ACQUIRED
                )
            )
            self.coordinator.on_released(
                for_shard(self.manifests, self.manifest_shard, manifest.reconciler.memories.forget)
            )
            caches.append(manifest.skr_clients)
        self.coordinator.on_released(ReleaseClients(caches, self.kymas, self.kyma_shard))
