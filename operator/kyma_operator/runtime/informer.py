"""List+watch informer: a local, indexed cache of one resource type plus change notifications.

Controllers must not poll the API server; they read from this cache and are woken by its events.
The informer lists (paginated), then watches from the list's resourceVersion with bookmarks,
resumes after disconnects from the last seen resourceVersion with jittered backoff, and when the
server says the version is gone (HTTP 410 or an ERROR event with code 410) it relists and emits
the differences as synthetic add/update/delete events, so handlers never miss a change.

Cached objects are shared, not copied: treat them as read-only (``copy.deepcopy`` before editing).
They are kept lean (``lean_object``, controller-runtime's cache ``TransformFunc``): what the operator
never reads from a cached object is dropped before it is stored, and the strings every object
repeats are shared, because at 5,000 Kymas the caches are most of the operator's memory.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import random
import sys
from collections.abc import AsyncGenerator, Callable
from typing import Any, Protocol

from kyma_operator.runtime.backoff import ReconnectBackoff
from kyma_operator.runtime.bulk import bulk_adds
from kyma_operator.runtime.clock import Clock, RealClock
from kyma_operator.runtime.errors import Gone, KubeError, TooManyRequests
from kyma_operator.runtime.kube import ObjectList, WatchEvent
from kyma_operator.runtime.metrics import RuntimeMetrics
from kyma_operator.runtime.resources import Resource

log = logging.getLogger(__name__)

JSON = dict[str, Any]
ObjectKey = tuple[str, str]
IndexFunc = Callable[[JSON], list[str]]
Transform = Callable[[JSON], JSON]


class ListWatcher(Protocol):
    """What an informer needs from a client (``KubeClient`` implements it)."""

    async def list_all(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        transform: Transform | None = None,
    ) -> ObjectList:
        """Every object, each passed through ``transform`` (if given) page by page, so a large
        list is never held untransformed as a whole."""
        ...

    def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
    ) -> AsyncGenerator[WatchEvent, None]: ...


class EventHandler(Protocol):
    """Receives cache changes. Called synchronously on the event loop: keep it quick (enqueue)."""

    def on_add(self, obj: JSON) -> None: ...

    def on_update(self, old: JSON, new: JSON) -> None: ...

    def on_delete(self, obj: JSON) -> None: ...


class FuncHandler:
    """An ``EventHandler`` from optional callables."""

    def __init__(
        self,
        on_add: Callable[[JSON], None] | None = None,
        on_update: Callable[[JSON, JSON], None] | None = None,
        on_delete: Callable[[JSON], None] | None = None,
    ) -> None:
        self._add = on_add
        self._update = on_update
        self._delete = on_delete

    def on_add(self, obj: JSON) -> None:
        if self._add is not None:
            self._add(obj)

    def on_update(self, old: JSON, new: JSON) -> None:
        if self._update is not None:
            self._update(old, new)

    def on_delete(self, obj: JSON) -> None:
        if self._delete is not None:
            self._delete(obj)


def object_key(obj: JSON) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


def index_by_namespace(obj: JSON) -> list[str]:
    """Index function: the object's namespace (client-go's ``NamespaceIndex``)."""
    return [(obj.get("metadata") or {}).get("namespace") or ""]


def index_by_label(label: str) -> IndexFunc:
    """Index function: the value of one label (objects without it are not indexed)."""

    def index(obj: JSON) -> list[str]:
        value = ((obj.get("metadata") or {}).get("labels") or {}).get(label)
        return [value] if value is not None else []

    return index


def index_by_owner_uid(obj: JSON) -> list[str]:
    """Index function: the UIDs of the object's owner references."""
    return [ref["uid"] for ref in (obj.get("metadata") or {}).get("ownerReferences") or [] if ref.get("uid")]


def strip_managed_fields(obj: JSON) -> JSON:
    """Drop ``metadata.managedFields`` (often half an object's size)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"
"""``kubectl apply``'s copy of the whole object (client-side apply): never read by the operator."""

_SHARED_STRING_MAX = 64


def _shared(value: Any) -> Any:
    if isinstance(value, str):
        return sys.intern(value) if len(value) <= _SHARED_STRING_MAX else value
    if isinstance(value, dict):
        return {sys.intern(k): _shared(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shared(v) for v in value]
    return value


def lean_object(obj: JSON) -> JSON:
    """Default cache transform: what a cached object needs, stored small.

    Drops ``metadata.managedFields`` and the ``kubectl.kubernetes.io/last-applied-configuration``
    annotation (nothing in the operator reads them from a cache: server-side apply and the few
    readers of managedFields use live objects), and shares the strings that every object repeats:
    keys and short values (names, labels, kinds, states) are interned, so 25,000 Manifests hold one
    copy of ``"operator.kyma-project.io/kyma-name"`` instead of 25,000 (a parsed Manifest shrinks
    from ~9 KB to ~4 KB, see benchmarks/results/scale.md). Idempotent; returns a new dict.
    """
    strip_managed_fields(obj)
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        annotations = meta.get("annotations")
        if isinstance(annotations, dict) and LAST_APPLIED_ANNOTATION in annotations:
            annotations.pop(LAST_APPLIED_ANNOTATION)
    lean: JSON = _shared(obj)
    return lean


class Informer:
    """Cache + events for ``res`` (optionally one namespace / label selector). ``run()`` until cancelled."""

    def __init__(
        self,
        client: ListWatcher,
        res: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        indexers: dict[str, IndexFunc] | None = None,
        clock: Clock | None = None,
        transform: Transform | None = lean_object,
        page_size: int = 500,
        watch_timeout: tuple[int, int] = (300, 600),
        backoff: ReconnectBackoff | None = None,
        metrics: RuntimeMetrics | None = None,
        name: str | None = None,
    ) -> None:
        self.client = client
        self.resource = res
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.name = name or str(res)
        self._clock = clock or RealClock()
        self._transform = transform
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._backoff = backoff or ReconnectBackoff(0.1, 30.0)
        self._handlers: builtins.list[EventHandler] = []
        self._items: dict[ObjectKey, JSON] = {}
        self._indexers: dict[str, IndexFunc] = dict(indexers or {})
        self._indices: dict[str, dict[str, set[ObjectKey]]] = {name: {} for name in self._indexers}
        self._index_values: dict[ObjectKey, dict[str, builtins.list[str]]] = {}
        self._resource_version = ""
        self.synced = asyncio.Event()
        self._metrics: RuntimeMetrics | None = None
        if metrics is not None:
            self.set_metrics(metrics)
        self.relists = 0
        self.watch_starts = 0

    def set_metrics(self, metrics: RuntimeMetrics) -> None:
        self._metrics = metrics

    # -- handlers and indexes ------------------------------------------------------------------

    def add_handler(self, handler: EventHandler) -> None:
        """Register ``handler``; if the cache is already filled, it gets an add for every object."""
        self._handlers.append(handler)
        with bulk_adds():
            for obj in builtins.list(self._items.values()):
                self._call(handler.on_add, obj)

    def add_indexer(self, name: str, func: IndexFunc) -> None:
        """Add a named index (allowed at any time; existing objects are indexed immediately)."""
        if name in self._indexers:
            raise ValueError(f"index {name!r} already exists")
        self._indexers[name] = func
        self._indices[name] = {}
        for key, obj in self._items.items():
            values = self._safe_index(name, func, obj)
            self._index_values.setdefault(key, {})[name] = values
            for value in values:
                self._indices[name].setdefault(value, set()).add(key)

    # -- cache reads ---------------------------------------------------------------------------

    def get(self, namespace: str | None, name: str) -> JSON | None:
        """The cached object (``namespace`` None or ``""`` for cluster-scoped), or None."""
        return self._items.get((namespace or "", name))

    def list(self, namespace: str | None = None) -> builtins.list[JSON]:
        """All cached objects, or those of one namespace."""
        if namespace is None:
            return builtins.list(self._items.values())
        return [obj for (ns, _), obj in self._items.items() if ns == namespace]

    def keys(self) -> builtins.list[ObjectKey]:
        return builtins.list(self._items)

    def by_index(self, index_name: str, value: str) -> builtins.list[JSON]:
        """Objects whose index function returned ``value``. ``KeyError`` for an unknown index."""
        keys = self._indices[index_name].get(value, ())
        return [self._items[key] for key in keys]

    def index_values(self, index_name: str) -> builtins.list[str]:
        return builtins.list(self._indices[index_name])

    def __len__(self) -> int:
        return len(self._items)

    @property
    def resource_version(self) -> str:
        """The last resourceVersion seen (from a list, an event or a bookmark)."""
        return self._resource_version

    async def wait_synced(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Wait for the first complete list; False if ``timeout`` (real seconds) passed first."""
        if self.synced.is_set():
            return True
        try:
            async with asyncio.timeout(timeout):
                await self.synced.wait()
        except TimeoutError:
            return False
        return True

    def reset(self) -> None:
        """Drop the cache, its indexes and its resourceVersion, without events, and wait for a list
        again (``synced`` cleared). Only while ``run()`` is not running: the next ``run()`` lists
        afresh and its handlers get an add for every object, as at the first start. For an informer
        run on demand (``rollouts/fleet_view.FleetView``): a stopped informer holds no memory."""
        self._items = {}
        self._indices = {name: {} for name in self._indexers}
        self._index_values = {}
        self._resource_version = ""
        self.synced.clear()

    # -- the loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        """List, then watch forever (until cancelled), recovering from every failure."""
        need_list = True
        while True:
            try:
                if need_list:
                    await self._relist()
                    need_list = False
                    self._backoff.reset()
                await self._watch_once()
            except asyncio.CancelledError:
                raise
            except Gone as exc:
                log.info(
                    "%s: resourceVersion %s expired (%s); relisting", self.name, self._resource_version, exc
                )
                need_list = True
            except Exception as exc:  # any failure: back off and retry
                delay = self._backoff.next()
                if self._metrics is not None:
                    self._metrics.informer_watch_restarts.labels(self.name).inc()
                # The API server refused the watch itself (e.g. "too large resource version" after
                # a restore): resuming from the same point would fail again, so relist instead.
                # Transport failures and throttling resume from the last resourceVersion.
                if isinstance(exc, KubeError) and exc.status >= 400 and exc.status != 429:
                    need_list = True
                # 429: the API server asks to come back later (a just-created CRD's storage still
                # initialising, or throttling): expected and retried, counted by the restarts
                # metric; not a warning (``kyma install`` prints the operator's warnings)
                throttled = isinstance(exc, TooManyRequests)
                log.log(
                    logging.INFO if throttled else logging.WARNING,
                    "%s: %s; retrying in %.2fs",
                    self.name,
                    _describe(exc),
                    delay,
                )
                await self._clock.sleep(delay)

    async def _watch_once(self) -> None:
        timeout = random.randint(*self._watch_timeout)
        started = self._clock.now()
        received = False
        self.watch_starts += 1
        stream = self.client.watch(
            self.resource,
            self.namespace,
            resource_version=self._resource_version,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=timeout,
            allow_bookmarks=True,
        )
        async with contextlib.aclosing(stream):
            async for event in stream:
                received = True
                self._handle_event(event)
                self._backoff.reset()
        # A normal end (server-side timeout) is re-watched at once; a stream that closes at once
        # without any event is treated like an error, so a misbehaving server is not hammered.
        if not received and self._clock.now() - started < 1.0:
            raise KubeError(0, "WatchClosed", "watch ended immediately without events")

    def _handle_event(self, event: WatchEvent) -> None:
        if self._metrics is not None:
            self._metrics.informer_events.labels(self.name, event.type).inc()
        obj = event.object
        if event.type == "ERROR":
            code = int(obj.get("code") or 0)
            if code == 410:
                raise Gone(410, str(obj.get("reason") or "Expired"), str(obj.get("message") or ""))
            raise KubeError(code, str(obj.get("reason") or "WatchError"), str(obj.get("message") or obj))
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if event.type == "BOOKMARK":
            if rv:
                self._resource_version = rv
            return
        if self._transform is not None:
            obj = self._transform(obj)
        key = object_key(obj)
        if event.type == "DELETED":
            old = self._remove(key)
            self._dispatch_delete(obj if obj.get("metadata") else (old or obj))
        else:
            old = self._store(key, obj)
            if old is None:
                self._dispatch_add(obj)
            else:
                self._dispatch_update(old, obj)
        if rv:
            self._resource_version = rv

    async def _relist(self) -> None:
        listed = await self.client.list_all(
            self.resource,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            page_size=self._page_size,
            transform=self._transform,
        )
        self.relists += 1
        if self._metrics is not None:
            self._metrics.informer_relists.labels(self.name).inc()
        seen: set[ObjectKey] = set()
        with bulk_adds():  # a list's requests wait behind events (runtime/bulk.py)
            for item in listed.items:
                obj = item  # transformed by list_all, page by page
                key = object_key(obj)
                seen.add(key)
                old = self._items.get(key)
                if old is None:
                    self._store(key, obj)
                    self._dispatch_add(obj)
                elif _rv(old) != _rv(obj):
                    self._store(key, obj)
                    self._dispatch_update(old, obj)
            for key in [key for key in self._items if key not in seen]:
                old = self._remove(key)
                if old is not None:
                    self._dispatch_delete(old)
        self._resource_version = listed.resource_version
        self.synced.set()

    # -- cache writes --------------------------------------------------------------------------

    def _store(self, key: ObjectKey, obj: JSON) -> JSON | None:
        old = self._items.get(key)
        self._items[key] = obj
        if self._indexers:
            self._unindex(key)
            values_by_index: dict[str, builtins.list[str]] = {}
            for name, func in self._indexers.items():
                values = self._safe_index(name, func, obj)
                values_by_index[name] = values
                index = self._indices[name]
                for value in values:
                    index.setdefault(value, set()).add(key)
            self._index_values[key] = values_by_index
        return old

    def _remove(self, key: ObjectKey) -> JSON | None:
        old = self._items.pop(key, None)
        if self._indexers:
            self._unindex(key)
        return old

    def _unindex(self, key: ObjectKey) -> None:
        previous = self._index_values.pop(key, None)
        if not previous:
            return
        for name, values in previous.items():
            index = self._indices[name]
            for value in values:
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

    def _safe_index(self, name: str, func: IndexFunc, obj: JSON) -> builtins.list[str]:
        try:
            return builtins.list(func(obj))
        except Exception:  # a broken index function must not stop the informer
            log.exception("%s: index function %r failed for %s", self.name, name, object_key(obj))
            return []

    # -- dispatch ------------------------------------------------------------------------------

    def _dispatch_add(self, obj: JSON) -> None:
        for handler in self._handlers:
            self._call(handler.on_add, obj)

    def _dispatch_update(self, old: JSON, new: JSON) -> None:
        for handler in self._handlers:
            self._call(handler.on_update, old, new)

    def _dispatch_delete(self, obj: JSON) -> None:
        for handler in self._handlers:
            self._call(handler.on_delete, obj)

    def _call(self, func: Callable[..., None], *args: JSON) -> None:
        try:
            func(*args)
        except Exception:  # one broken handler must not starve the others
            log.exception("%s: event handler %r failed", self.name, func)


def _rv(obj: JSON) -> str | None:
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    return str(rv) if rv is not None else None


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
