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
from kyma_operator.api.resources import KYMAS, MANIFESTS
from kyma_operator.controllers.kyma.setup import CONTROLLER_NAME as KYMA_CONTROLLER
from kyma_operator.controllers.kyma.setup import KymaController
from kyma_operator.controllers.kyma.triggers import KymaTrigger
from kyma_operator.controllers.manifest.setup import CONTROLLER_NAME as MANIFEST_CONTROLLER
from kyma_operator.controllers.manifest.setup import ManifestController
from kyma_operator.controllers.manifest.triggers import ManifestTrigger
from kyma_operator.controllers.shared_informers import MANIFESTS_BY_KYMA_INDEX
from kyma_operator.remote.cache import SkrClientCache
from kyma_operator.remote.secrets import ACCESS_SECRET_SELECTOR, BY_KYMA_INDEX, kyma_index
from kyma_operator.runtime.bulk import bulk_adds
from kyma_operator.runtime.clock import Clock
from kyma_operator.runtime.controller import Controller, Reconciler, RequestGate
from kyma_operator.runtime.errors import KubeError
from kyma_operator.runtime.informer import JSON, FuncHandler, Informer, index_by_label
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.manager import Manager
from kyma_operator.runtime.request import Request, Result
from kyma_operator.runtime.resources import SECRETS, Resource
from kyma_operator.runtime.shardinformer import ShardCaches, ShardedInformer, sharded
from kyma_operator.runtime.sharding import ShardCoordinator, ShardingConfig
from kyma_operator.runtime.shardmap import SHARD_LABEL, parse_shard_label, shard_label_value, shard_of
from kyma_operator.runtime.streamedlists import StreamedLists

log = logging.getLogger(__name__)

ShardFunc = Callable[[Request], int]


def kyma_shard_key(kyma: Mapping[str, Any]) -> str:
    """The key a Kyma is sharded by: its runtime-id label, else its name."""
    meta = kyma.get("metadata") or {}
    labels = meta.get("labels") or {}
    runtime_id = labels.get(names.RUNTIME_ID_LABEL)
    return str(runtime_id) if runtime_id else str(meta.get("name") or "")


UNKNOWN_SHARD = -1
"""The shard of a request for an object a shard-scoped cache does not have (held elsewhere, or
gone long ago): no replica admits it (``ShardCoordinator.holds(-1)`` is false)."""


def kyma_shard(kymas: Informer, shards: int) -> ShardFunc:
    """The shard of a Kyma request: from the cached Kyma's runtime id, else its name.

    With shard-scoped caches an uncached Kyma is not necessarily gone (another replica holds it):
    its tombstone's shard if it was just deleted here, else ``UNKNOWN_SHARD``."""
    scoped = sharded(kymas)

    def shard(request: Request) -> int:
        obj = kymas.get(request.namespace, request.name)
        if obj is None and scoped is not None:
            buried = scoped.tombstone(request.namespace, request.name)
            return buried if buried is not None else UNKNOWN_SHARD
        key = kyma_shard_key(obj) if obj is not None else request.name
        return shard_of(key, shards)

    return shard


def manifest_shard(manifests: Informer, kymas: Informer, shards: int) -> ShardFunc:
    """The shard of a Manifest request: its Kyma's (cached), else its shard label, else its Kyma name's
    (shard-scoped caches: a Manifest not cached is its tombstone's shard or ``UNKNOWN_SHARD``)."""
    scoped = sharded(manifests)

    def shard(request: Request) -> int:
        obj = manifests.get(request.namespace, request.name)
        if obj is None and scoped is not None:
            buried = scoped.tombstone(request.namespace, request.name)
            return buried if buried is not None else UNKNOWN_SHARD
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


def manifest_object_shard(kymas: Informer, shards: int) -> Callable[[JSON], int]:
    """The shard of a Manifest object (for tombstones): its Kyma's, else its label, else its Kyma
    name's."""

    def shard(obj: JSON) -> int:
        meta = obj.get("metadata") or {}
        labels: dict[str, Any] = meta.get("labels") or {}
        kyma_name = str(labels.get(names.KYMA_NAME_LABEL) or "")
        kyma = kymas.get(meta.get("namespace"), kyma_name) if kyma_name else None
        if kyma is not None:
            return shard_of(kyma_shard_key(kyma), shards)
        labelled = parse_shard_label(labels.get(SHARD_LABEL), shards)
        if labelled is not None:
            return labelled
        return shard_of(kyma_name or str(meta.get("name") or ""), shards)

    return shard


def scoped_informers(
    client: KubeClient, namespace: str, shards: int, *, clock: Clock | None = None
) -> tuple[ShardedInformer, ShardedInformer]:
    """The Kyma and Manifest informers with shard-scoped caches (``--shard-scoped-caches``): the
    same names and indexes as the fleet-wide ones (``shared_informers``); each shard listed as a
    watch stream from the API server's watch cache (``StreamedLists``), the unlabelled objects
    paginated."""
    lists = StreamedLists(client)
    kymas = ShardedInformer(
        lists,
        KYMAS,
        namespace=namespace,
        shards=shards,
        shard_of=lambda obj: shard_of(kyma_shard_key(obj), shards),
        clock=clock,
        name="kymas",
        unlabelled_client=client,
    )
    manifests = ShardedInformer(
        lists,
        MANIFESTS,
        namespace=namespace,
        shards=shards,
        shard_of=manifest_object_shard(kymas, shards),
        indexers={MANIFESTS_BY_KYMA_INDEX: index_by_label(names.KYMA_NAME_LABEL)},
        clock=clock,
        name="manifests",
        unlabelled_client=client,
    )
    return kymas, manifests


def scoped_access_secrets(
    client: KubeClient, namespace: str, shards: int, kymas: Informer, *, clock: Clock | None = None
) -> ShardedInformer:
    """The access-Secret informer with shard-scoped caches: ``ACCESS_SECRET_SELECTOR`` and each
    part's shard selector (the holder labels a Kyma's Secret with the Kyma's shard, as its
    Manifests); same name and index as ``remote.secrets.access_secret_informer``. A Secret's shard
    (for tombstones) is its Kyma's, found as a Manifest's (``kyma-name`` label)."""
    return ShardedInformer(
        StreamedLists(client),
        SECRETS,
        namespace=namespace,
        shards=shards,
        shard_of=manifest_object_shard(kymas, shards),
        indexers={BY_KYMA_INDEX: kyma_index},
        clock=clock,
        name="kyma-access-secrets",
        unlabelled_client=client,
        base_selector=ACCESS_SECRET_SELECTOR,
    )


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

    def deferred(self, request: Request) -> bool:
        return self.coordinator.fenced(self.shard_for(request))


def enqueue_shard(
    controller: Controller, informer: Informer, shard_for: ShardFunc, reason: str
) -> Callable[[int], None]:
    """``on_acquired`` callback: every cached object of the shard once, with the controller's
    ``SHARD_ACQUIRED`` trigger (a full reconcile), as bulk work: behind events (``runtime/bulk.py``)."""

    def enqueue(shard: int) -> None:
        count = 0
        with bulk_adds():
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


async def label_kyma_and_manifests(
    client: KubeClient,
    kymas: Informer,
    manifests: Informer | None,
    kyma: JSON,
    shard: int,
    secrets: Informer | None = None,
) -> None:
    """Write ``SHARD_LABEL=<shard>`` on a Kyma and (``manifests``, ``secrets``: shard-scoped caches)
    on every cached Manifest and access Secret of it that lacks it or has another value. They come
    from this replica's view (the unlabelled ones are cached on every replica, the Kyma's shard's
    here); never from a list of the API server, which at 25,000 Manifests would read them all per
    Kyma. ``KubeError`` propagates."""
    meta = kyma.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    want = shard_label_value(shard)
    patch = {"metadata": {"labels": {SHARD_LABEL: want}}}
    if (meta.get("labels") or {}).get(SHARD_LABEL) != want:
        await _relabel(client, kymas, KYMAS, kyma, patch, shard)
    if manifests is not None:
        for item in manifests.by_index(MANIFESTS_BY_KYMA_INDEX, name):
            if _mislabelled(item, namespace, want):
                await _relabel(client, manifests, MANIFESTS, item, patch, shard)
    if secrets is not None:
        for item in secrets.by_index(BY_KYMA_INDEX, f"{namespace}/{name}"):
            if _mislabelled(item, namespace, want):
                await _relabel(client, secrets, SECRETS, item, patch, shard)


def _mislabelled(obj: JSON, namespace: str, want: str) -> bool:
    """An object of the Kyma in ``namespace``, not being deleted, without ``SHARD_LABEL=want``."""
    meta = obj.get("metadata") or {}
    if meta.get("namespace") != namespace or meta.get("deletionTimestamp"):
        return False
    return bool((meta.get("labels") or {}).get(SHARD_LABEL) != want)


async def _relabel(
    client: KubeClient, view: Informer, res: Resource, obj: JSON, patch: JSON, shard: int
) -> None:
    meta = obj.get("metadata") or {}
    scoped = sharded(view)
    if scoped is not None:  # before the write: its watch event may come before the response
        scoped.note_relabelled(obj, shard)
    try:
        await client.patch(res, str(meta.get("name") or ""), patch, str(meta.get("namespace") or ""))
    except BaseException:
        if scoped is not None:
            scoped.forget_relabelled(obj)
        raise


class ShardLabelling:
    """Wraps the Kyma reconciler: after each reconcile, writes the Kyma's ``SHARD_LABEL`` when it is
    missing or wrong (shard-scoped caches: also on its Manifests and access Secrets; a provisioner
    that rewrites a Secret's labels drops it back into the unlabelled part, where the reconcile
    still finds it, until this labels it again).

    Runs behind the gate, so only the shard's holder writes it (once per Kyma; the label lets
    informers filter by shard, and Manifests built later copy it). After the reconcile, as a merge
    patch: it never conflicts with the reconcile's own writes (which carry the cached
    resourceVersion), and the label change enqueues the Kyma once more."""

    def __init__(
        self,
        inner: Reconciler,
        client: KubeClient,
        kymas: Informer,
        shards: int,
        manifests: Informer | None = None,
        secrets: Informer | None = None,
    ) -> None:
        self.inner = inner
        self.client = client
        self.kymas = kymas
        self.shards = shards
        self.writes = 0
        scoped = sharded(kymas) is not None
        self.manifests = sharded(manifests) if manifests is not None and scoped else None
        """Shard-scoped caches: the Kyma's Manifests are labelled too (each shard's informer
        selects by the label, so an unlabelled Manifest would stay in every replica's cache)."""
        self.secrets = sharded(secrets) if secrets is not None and scoped else None
        """Shard-scoped access Secrets: the Kyma's access Secret is labelled too."""

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
        shard = shard_of(kyma_shard_key(obj), self.shards)
        want = shard_label_value(shard)
        labelled = (meta.get("labels") or {}).get(SHARD_LABEL) == want
        if labelled and not self._lone(request) and not self._secret_unlabelled(request, want):
            return
        try:
            await label_kyma_and_manifests(
                self.client, self.kymas, self.manifests, obj, shard, secrets=self.secrets
            )
            self.writes += 1
        except KubeError as exc:  # the label is an optimisation: the next reconcile tries again
            log.info("Kyma %s: could not set the shard label: %s", request, exc)

    def _lone(self, request: Request) -> bool:
        """A cached Manifest of the Kyma still without its shard label (created by a reconcile that
        read the Kyma before its label reached the cache)."""
        if self.manifests is None:
            return False
        found = self.manifests.unlabelled.by_index(MANIFESTS_BY_KYMA_INDEX, request.name)
        return any((obj.get("metadata") or {}).get("namespace") == request.namespace for obj in found)

    def _secret_unlabelled(self, request: Request, want: str) -> bool:
        """A cached access Secret of the Kyma without ``SHARD_LABEL=want`` (not labelled yet, its
        labels rewritten by a provisioner, or labelled for another shard this replica holds)."""
        if self.secrets is None:
            return False
        found = self.secrets.by_index(BY_KYMA_INDEX, f"{request.namespace}/{request.name}")
        return any(_mislabelled(obj, request.namespace, want) for obj in found)


class FixMisplaced:
    """Shard-scoped caches: a Kyma whose shard label names a shard other than its computed one
    (``--shards`` changed, or its runtime id) is cached only by the holder of the labelled shard,
    whose gate drops it. That holder writes the right label (on the Kyma, its Manifests and access
    Secrets: they carry the Kyma's label, so the same holder caches them), so the objects move to
    their real holder. An informer handler plus an ``on_acquired`` scan."""

    def __init__(
        self,
        client: KubeClient,
        kymas: Informer,
        manifests: Informer | None,
        coordinator: ShardCoordinator,
        secrets: Informer | None = None,
    ) -> None:
        self.client = client
        self.kymas = kymas
        self.manifests = manifests
        self.secrets = secrets
        self.coordinator = coordinator
        self._pending: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.fixed = 0

    def on_add(self, obj: JSON) -> None:
        self._check(obj, None)

    def on_update(self, old: JSON, new: JSON) -> None:
        self._check(new, None)

    def on_delete(self, obj: JSON) -> None:
        pass

    def __call__(self, shard: int) -> None:
        for obj in self.kymas.list():
            self._check(obj, shard)

    def _check(self, obj: JSON, acquired: int | None) -> None:
        meta = obj.get("metadata") or {}
        shards = self.coordinator.shards
        labelled = parse_shard_label((meta.get("labels") or {}).get(SHARD_LABEL), shards)
        if labelled is None or meta.get("deletionTimestamp"):
            return
        if acquired is not None and labelled != acquired:
            return
        if acquired is None and not self.coordinator.holds(labelled):
            return
        right = shard_of(kyma_shard_key(obj), shards)
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if right == labelled or key in self._pending:
            return
        self._pending.add(key)
        task = asyncio.get_running_loop().create_task(self._fix(key, obj, right))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fix(self, key: tuple[str, str], obj: JSON, right: int) -> None:
        try:
            await label_kyma_and_manifests(
                self.client, self.kymas, self.manifests, obj, right, secrets=self.secrets
            )
            self.fixed += 1
            log.info("Kyma %s/%s: shard label corrected to %d", key[0], key[1], right)
        except KubeError as exc:  # the next event or acquisition tries again
            log.info("Kyma %s/%s: could not correct the shard label: %s", key[0], key[1], exc)
        finally:
            self._pending.discard(key)


class StraySecrets:
    """Shard-scoped access Secrets: a Secret labelled for a shard this replica holds whose Kyma is
    not in this replica's view carries another shard's label than its Kyma (copied with a stale
    label, or its Kyma labelled elsewhere); its Kyma's holder would never see it. This replica
    removes the label, so the Secret joins the unlabelled part of every replica, where the Kyma's
    holder finds it and labels it with the Kyma's shard. An informer handler on the Secrets, one
    on the Kymas (``kyma_left``: a Kyma leaving this view, e.g. an unlabelled one labelled by its
    holder elsewhere, leaves its Secrets here without a Kyma) and an ``on_acquired`` scan (a
    shard's caches are synced before it is acquired)."""

    def __init__(
        self, client: KubeClient, kymas: Informer, secrets: ShardedInformer, coordinator: ShardCoordinator
    ) -> None:
        self.client = client
        self.kymas = kymas
        self.secrets = secrets
        self.coordinator = coordinator
        self._pending: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.unlabelled = 0

    def on_add(self, obj: JSON) -> None:
        self._check(obj, None)

    def on_update(self, old: JSON, new: JSON) -> None:
        self._check(new, None)

    def on_delete(self, obj: JSON) -> None:
        pass

    def __call__(self, shard: int) -> None:
        part = self.secrets.part(shard)
        for obj in part.list() if part is not None else []:
            self._check(obj, shard)

    def kyma_left(self, kyma: JSON) -> None:
        """A Kyma left this replica's view: check its cached access Secrets."""
        meta = kyma.get("metadata") or {}
        for obj in self.secrets.by_index(BY_KYMA_INDEX, f"{meta.get('namespace') or ''}/{meta.get('name')}"):
            self._check(obj, None)

    def _check(self, obj: JSON, acquired: int | None) -> None:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        labelled = parse_shard_label(labels.get(SHARD_LABEL), self.coordinator.shards)
        if labelled is None or (acquired is None and not self.coordinator.holds(labelled)):
            return
        namespace, kyma = str(meta.get("namespace") or ""), str(labels.get(names.KYMA_NAME_LABEL) or "")
        key = (namespace, str(meta.get("name") or ""))
        if self.kymas.get(namespace, kyma) is not None or key in self._pending:
            return
        self._pending.add(key)
        task = asyncio.get_running_loop().create_task(self._unlabel(key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _unlabel(self, key: tuple[str, str]) -> None:
        try:
            await self.client.patch(SECRETS, key[1], {"metadata": {"labels": {SHARD_LABEL: None}}}, key[0])
            self.unlabelled += 1
            log.info("access Secret %s/%s: its Kyma is not in this shard, shard label removed", *key)
        except KubeError as exc:  # the next event or acquisition tries again
            log.info("access Secret %s/%s: could not remove the shard label: %s", *key, exc)
        finally:
            self._pending.discard(key)


@dataclass
class Sharding:
    """The coordinator and the Kyma and Manifest controllers' gates, built before the Manager."""

    coordinator: ShardCoordinator
    kyma_shard: ShardFunc
    manifest_shard: ShardFunc
    kymas: Informer
    manifests: Informer
    gates: dict[str, RequestGate] = field(default_factory=dict)
    access_secrets: Informer | None = None
    """Shard-scoped access Secrets (``scoped_access_secrets``), else None (cached fleet-wide)."""
    client: KubeClient | None = None
    """Writes the shard labels (``FixMisplaced``, ``StraySecrets``); None: the coordinator's."""

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
        access_secrets: Informer | None = None,
        lease_client: KubeClient | None = None,
    ) -> Sharding:
        """``access_secrets``: the shard-scoped access-Secret informer, started and stopped per
        shard with the Kymas and Manifests (a shard is acted on once all three synced).
        ``lease_client``: the coordinator's client for its Leases (``runtime/leaseclient``: on the
        Lease thread); everything else uses ``client``."""
        secrets = sharded(access_secrets) if access_secrets is not None else None
        scoped = [part for part in (sharded(kymas), sharded(manifests), secrets) if part is not None]
        coordinator = ShardCoordinator(
            lease_client or client,
            config,
            clock=clock,
            caches_synced=synced,
            registry=registry,
            shard_caches=ShardCaches(*scoped) if scoped else None,
            # per-shard caches: replicas started together see each other before taking shards
            join_grace=config.renew_deadline if scoped else 0.0,
        )
        by_kyma = kyma_shard(kymas, config.shards)
        by_manifest = manifest_shard(manifests, kymas, config.shards)
        gates: dict[str, RequestGate] = {
            KYMA_CONTROLLER: ShardGate(coordinator, by_kyma, KYMA_CONTROLLER),
            MANIFEST_CONTROLLER: ShardGate(coordinator, by_manifest, MANIFEST_CONTROLLER),
        }
        return cls(coordinator, by_kyma, by_manifest, kymas, manifests, gates, secrets, client)

    def kyma_layer(self, client: KubeClient) -> Callable[[Reconciler], Reconciler]:
        """Wraps the Kyma reconciler so that it writes each Kyma's shard label (``ShardLabelling``)."""
        shards = self.coordinator.shards
        return lambda inner: ShardLabelling(
            inner, client, self.kymas, shards, self.manifests, secrets=self.access_secrets
        )

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
        if sharded(self.kymas) is not None:
            fix = FixMisplaced(
                self.client or self.coordinator.client,
                self.kymas,
                self.manifests,
                self.coordinator,
                self.access_secrets,
            )
            self.kymas.add_handler(fix)
            self.coordinator.on_acquired(fix)
        secrets = sharded(self.access_secrets) if self.access_secrets is not None else None
        if secrets is not None:
            stray = StraySecrets(
                self.client or self.coordinator.client, self.kymas, secrets, self.coordinator
            )
            secrets.add_handler(stray)
            self.kymas.add_handler(FuncHandler(on_delete=stray.kyma_left))
            self.coordinator.on_acquired(stray)
