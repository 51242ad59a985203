"""Shard-scoped caches: one view over one informer per held shard plus one for unlabelled objects.

Why: with ``--sharding --shard-scoped-caches`` a replica should cache (and resync) only the Kymas
and Manifests of the shards it holds, so that memory and work per replica follow its share
(docs/sharding.md). Objects carry ``shardmap.SHARD_LABEL`` (written by the holder); for every held
shard this view runs an informer with the selector ``SHARD_LABEL=<n>``, started when the shard is
acquired (the coordinator waits for its first list before acting on the shard) and stopped, its
cache dropped without events, when the shard is released. One small informer with the selector
``SHARD_LABEL notin (0,...,S-1)`` sees objects nobody has labelled yet (new ones, or labelled for
another shard count), on every replica; the holder of an object's computed shard labels it and it
moves into that shard's informer.

The controllers keep reading one ``Informer``: :class:`ShardedInformer` is one (same read API,
handlers, indexes), answering from the union of its parts. Moves between parts are not
deletions for the handlers: an add for a key another part still holds is an update, and the
unlabelled part's delete of an object this replica has just labelled (``note_relabelled``) is
swallowed. Deletions that handlers do see leave a tombstone (the shard the object was in), so a
request for an object that is gone can still be admitted by its shard's holder only.

A kind the operator caches only part of (the access Secrets: ``base_selector``) gets that selector
and the shard selector on every part. An object this replica relabels is "in transit" between the
unlabelled part's delete and its shard part's add (two watches, either may come first): the view
keeps answering with it meanwhile, so a reconcile in that gap does not find its Kyma's access
Secret or Manifest missing.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections import OrderedDict
from collections.abc import Callable

from kyma_operator.runtime.bulk import bulk_adds
from kyma_operator.runtime.clock import Clock
from kyma_operator.runtime.informer import (
    JSON,
    EventHandler,
    IndexFunc,
    Informer,
    ListWatcher,
    ObjectKey,
    Transform,
    lean_object,
    object_key,
)
from kyma_operator.runtime.metrics import RuntimeMetrics
from kyma_operator.runtime.resources import Resource
from kyma_operator.runtime.shardmap import SHARD_LABEL, shard_label_value

log = logging.getLogger(__name__)


def unlabelled_selector(shards: int) -> str:
    """Label selector of objects without a shard label of ``shards`` (not labelled yet, or labelled
    for another shard count): ``SHARD_LABEL notin (0,...,shards-1)`` also matches objects without
    the label."""
    values = ",".join(shard_label_value(shard) for shard in range(shards))
    return f"{SHARD_LABEL} notin ({values})"


_TOMBSTONES = 10_000
_RELABELLED = 10_000
_IN_TRANSIT = 10_000

ShardOf = Callable[[JSON], int]


def shard_selector(shard: int) -> str:
    """Label selector of one shard's objects."""
    return f"{SHARD_LABEL}={shard_label_value(shard)}"


class _PartEvents:
    """The one handler on each part: turns moves between parts into updates, then tells the
    view's handlers."""

    def __init__(self, view: ShardedInformer, part: int | None) -> None:
        self.view = view
        self.part = part

    def on_add(self, obj: JSON) -> None:
        key = object_key(obj)
        self.view._tombstones.pop(key, None)
        other = self.view._elsewhere(self.part, key)
        if self.part is not None:  # a move this replica announced is complete
            self.view._relabelled.pop(key, None)
        moving = self.view._in_transit.pop(key, None)
        if other is None and moving is not None:
            other = moving[1]
        for handler in self.view._handlers_of_view:
            if other is not None:
                self.view._call(handler.on_update, other, obj)
            else:
                self.view._call(handler.on_add, obj)

    def on_update(self, old: JSON, new: JSON) -> None:
        for handler in self.view._handlers_of_view:
            self.view._call(handler.on_update, old, new)

    def on_delete(self, obj: JSON) -> None:
        key = object_key(obj)
        if self.view._elsewhere(self.part, key) is not None:
            return  # moved to another held part (its add came first)
        if self.part is None:
            target = self.view._relabelled.pop(key, None)
            if target is not None:  # labelled by this replica: its shard part's add follows
                self.view._hold_in_transit(key, obj, target)
                return
        self.view._bury(key, obj)
        for handler in self.view._handlers_of_view:
            self.view._call(handler.on_delete, obj)


class ShardedInformer(Informer):
    """An ``Informer`` whose cache is the union of one informer per held shard and one for
    unlabelled objects (see the module docstring). ``run()`` runs the unlabelled part (``synced``
    follows it); ``start_shard``/``stop_shard`` add and drop shard parts while it runs."""

    def __init__(
        self,
        client: ListWatcher,
        res: Resource,
        *,
        shards: int,
        shard_of: ShardOf,
        namespace: str | None = None,
        indexers: dict[str, IndexFunc] | None = None,
        clock: Clock | None = None,
        transform: Transform | None = lean_object,
        name: str | None = None,
        unlabelled_client: ListWatcher | None = None,
        base_selector: str | None = None,
    ) -> None:
        self.base_selector = base_selector
        """Selects the objects of the kind this view caches at all (e.g. the access Secrets); every
        part's selector is it plus the part's shard selector."""
        super().__init__(
            client,
            res,
            namespace=namespace,
            label_selector=self._selector(unlabelled_selector(shards)),
            indexers=indexers,
            clock=clock,
            transform=transform,
            name=name,
        )
        self.shards = shards
        self.shard_of = shard_of
        """The shard an object belongs to (for tombstones)."""
        self._handlers_of_view: builtins.list[EventHandler] = []
        self._tombstones: OrderedDict[ObjectKey, int] = OrderedDict()
        self._relabelled: OrderedDict[ObjectKey, int] = OrderedDict()
        self._in_transit: OrderedDict[ObjectKey, tuple[int, JSON]] = OrderedDict()
        """Objects this replica labelled that left the unlabelled part before their shard part's
        add came: target shard and last state, answered by the view until that add."""
        self._parts: dict[int | None, Informer] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._unlabelled_client = unlabelled_client or client
        """Lists the unlabelled objects: paginated from etcd (the whole fleet on the first start
        with the flag) rather than from the watch cache in one response."""
        self.unlabelled = self._part(None, self._selector(unlabelled_selector(shards)))
        self.synced = self.unlabelled.synced

    def _selector(self, shard_part: str) -> str:
        return f"{self.base_selector},{shard_part}" if self.base_selector else shard_part

    def _part(self, shard: int | None, selector: str) -> Informer:
        suffix = "unlabelled" if shard is None else f"shard-{shard}"
        part = Informer(
            self._unlabelled_client if shard is None else self.client,
            self.resource,
            namespace=self.namespace,
            label_selector=selector,
            indexers=dict(self._indexers),
            clock=self._clock,
            transform=self._transform,
            metrics=self._metrics,
            name=f"{self.name}/{suffix}",
        )
        part.add_handler(_PartEvents(self, shard))
        self._parts[shard] = part
        return part

    def set_metrics(self, metrics: RuntimeMetrics) -> None:
        self._metrics = metrics
        for part in getattr(self, "_parts", {}).values():
            part.set_metrics(metrics)

    # -- shards --------------------------------------------------------------------------------

    @property
    def shards_cached(self) -> builtins.list[int]:
        """Shards with a running informer (sorted)."""
        return sorted(shard for shard in self._parts if shard is not None)

    def part(self, shard: int | None) -> Informer | None:
        """The informer of ``shard`` (None: of unlabelled objects), None if not cached."""
        return self._parts.get(shard)

    def start_shard(self, shard: int) -> None:
        """Start caching ``shard`` (no-op if it already is); call from the running event loop."""
        if shard in self._parts:
            return
        part = self._part(shard, self._selector(shard_selector(shard)))
        self._tasks[shard] = asyncio.get_running_loop().create_task(part.run(), name=f"informer {part.name}")
        log.info("%s: caching shard %d", self.name, shard)

    async def wait_shard_synced(self, shard: int, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Whether ``shard``'s first list is in (waiting up to ``timeout`` seconds)."""
        part = self._parts.get(shard)
        return part is not None and await part.wait_synced(timeout)

    def stop_shard(self, shard: int) -> None:
        """Stop caching ``shard`` and drop its objects (no events: a released shard's objects are
        not deleted, only no longer this replica's)."""
        self._parts.pop(shard, None)
        for key in [k for k, (target, _) in self._in_transit.items() if target == shard]:
            del self._in_transit[key]
        task = self._tasks.pop(shard, None)
        if task is not None:
            task.cancel()
            log.info("%s: dropped the cache of shard %d", self.name, shard)

    def note_relabelled(self, obj: JSON, shard: int) -> None:
        """This replica is giving ``obj`` the label of ``shard``: its leaving the unlabelled part is
        a move (call before the write: the watch event may arrive before the write's response)."""
        key = object_key(obj)
        self._relabelled[key] = shard
        self._relabelled.move_to_end(key)
        while len(self._relabelled) > _RELABELLED:
            self._relabelled.popitem(last=False)

    def forget_relabelled(self, obj: JSON) -> None:
        """The label write announced by ``note_relabelled`` failed."""
        self._relabelled.pop(object_key(obj), None)
        self._in_transit.pop(object_key(obj), None)

    def _hold_in_transit(self, key: ObjectKey, obj: JSON, target: int) -> None:
        if target not in self._parts:
            return  # labelled for a shard not cached here: it leaves this view (no event, as before)
        self._in_transit[key] = (target, obj)
        self._in_transit.move_to_end(key)
        while len(self._in_transit) > _IN_TRANSIT:
            self._in_transit.popitem(last=False)

    def in_transit(self, namespace: str | None, name: str) -> bool:
        """Whether the view answers for this object from its in-transit copy (see the module
        docstring)."""
        return (namespace or "", name) in self._in_transit

    def tombstone(self, namespace: str | None, name: str) -> int | None:
        """The shard of a recently deleted object no longer cached, else None."""
        return self._tombstones.get((namespace or "", name))

    def _bury(self, key: ObjectKey, obj: JSON) -> None:
        try:
            self._tombstones[key] = self.shard_of(obj)
        except Exception:  # a broken object must not stop the informer
            log.exception("%s: no shard for deleted %s", self.name, key)
            return
        self._tombstones.move_to_end(key)
        while len(self._tombstones) > _TOMBSTONES:
            self._tombstones.popitem(last=False)

    def _elsewhere(self, part: int | None, key: ObjectKey) -> JSON | None:
        for shard, other in self._parts.items():
            if shard != part:
                found = other._items.get(key)
                if found is not None:
                    return found
        return None

    # -- the Informer API over the parts ---------------------------------------------------------

    def add_handler(self, handler: EventHandler) -> None:
        self._handlers_of_view.append(handler)
        with bulk_adds():
            for obj in self.list():
                self._call(handler.on_add, obj)

    def add_indexer(self, name: str, func: IndexFunc) -> None:
        if name in self._indexers:
            raise ValueError(f"index {name!r} already exists")
        self._indexers[name] = func
        for part in self._parts.values():
            part.add_indexer(name, func)

    def get(self, namespace: str | None, name: str) -> JSON | None:
        key = (namespace or "", name)
        for part in self._parts.values():
            found = part._items.get(key)
            if found is not None:
                return found
        moving = self._in_transit.get(key)
        return moving[1] if moving is not None else None

    def list(self, namespace: str | None = None) -> builtins.list[JSON]:
        seen: dict[ObjectKey, JSON] = {}
        for part in self._parts.values():
            for obj in part.list(namespace):
                seen.setdefault(object_key(obj), obj)
        for key, (_, obj) in self._in_transit.items():
            if namespace is None or key[0] == namespace:
                seen.setdefault(key, obj)
        return builtins.list(seen.values())

    def keys(self) -> builtins.list[ObjectKey]:
        found: dict[ObjectKey, None] = {}
        for part in self._parts.values():
            found.update(dict.fromkeys(part.keys()))
        found.update(dict.fromkeys(self._in_transit))
        return builtins.list(found)

    def by_index(self, index_name: str, value: str) -> builtins.list[JSON]:
        # Read from the parts' indexes directly: a reconcile asks several times for a Kyma's
        # Manifests or Secret, and most parts hold nothing for it. A lookup plus a ``get`` with 6
        # held shards: 4.7 -> 1.8 us, against 0.8 us for one informer (benchmarks/results/scale.md);
        # tests/unit/kyma_operator/runtime/test_shardinformer.py holds it to the parts' answers.
        if index_name not in self._indexers:
            raise KeyError(index_name)
        seen: dict[ObjectKey, JSON] = {}
        for part in self._parts.values():
            keys = part._indices[index_name].get(value)
            if keys:
                items = part._items
                for key in keys:
                    seen.setdefault(key, items[key])
        if self._in_transit:
            index = self._indexers[index_name]
            for key, (_, obj) in self._in_transit.items():
                if key not in seen and value in index(obj):
                    seen[key] = obj
        return builtins.list(seen.values())

    def index_values(self, index_name: str) -> builtins.list[str]:
        found: dict[str, None] = {}
        for part in self._parts.values():
            found.update(dict.fromkeys(part.index_values(index_name)))
        index = self._indexers[index_name]
        for _, obj in self._in_transit.values():
            found.update(dict.fromkeys(index(obj)))
        return builtins.list(found)

    def __len__(self) -> int:
        return len(self.keys())

    def __bool__(self) -> bool:
        return True

    @property
    def resource_version(self) -> str:
        return self.unlabelled.resource_version

    async def run(self) -> None:
        """Run the unlabelled part until cancelled; then stop every shard part."""
        try:
            await self.unlabelled.run()
        finally:
            for shard in builtins.list(self._tasks):
                self.stop_shard(shard)


class ShardCaches:
    """The sharded informers of one replica, started and stopped together per shard (what
    ``runtime.sharding.ShardCoordinator`` calls on acquire and release)."""

    def __init__(self, *informers: ShardedInformer) -> None:
        self.informers = informers

    def start(self, shard: int) -> None:
        for informer in self.informers:
            informer.start_shard(shard)

    async def wait_synced(self, shard: int, timeout: float | None) -> bool:  # noqa: ASYNC109
        done = await asyncio.gather(*(i.wait_shard_synced(shard, timeout) for i in self.informers))
        return all(done)

    def stop(self, shard: int) -> None:
        for informer in self.informers:
            informer.stop_shard(shard)


def sharded(informer: Informer) -> ShardedInformer | None:
    """``informer`` as a ``ShardedInformer`` (shard-scoped caches), else None."""
    return informer if isinstance(informer, ShardedInformer) else None
