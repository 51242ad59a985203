"""Controllers: turn events into requests, and requests into ``reconcile`` calls with retries.

The shape is controller-runtime's: sources (informer events through handlers that map an object
to requests for itself, its owner or anything a map function says; or a channel fed by the
listener) put ``Request``s into a ``WorkQueue``; N workers take them, call the reconciler and
apply the outcome: exception -> rate-limited retry, ``Result.requeue_after`` -> forget the backoff
and retry after that delay, success -> forget. A key is never reconciled by two workers at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from kyma_operator.runtime.clock import Clock, RealClock
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.metrics import ControllerMetrics, RuntimeMetrics
from kyma_operator.runtime.queue import QueueShutDown, WorkQueue
from kyma_operator.runtime.ratelimit import RateLimiter, default_controller_rate_limiter
from kyma_operator.runtime.request import Request, Result

log = logging.getLogger(__name__)

JSON = dict[str, Any]


class Reconciler(Protocol):
    """Makes the world match one object's desired state. Level-based: read current state."""

    async def reconcile(self, request: Request) -> Result: ...


class TerminalError(Exception):
    """Raise from ``reconcile`` for an error that retrying cannot fix: logged, counted, not requeued."""


# -- predicates --------------------------------------------------------------------------------


class Predicate(Protocol):
    """Filters informer events before they are mapped to requests (all must pass)."""

    def create(self, obj: JSON) -> bool: ...

    def update(self, old: JSON, new: JSON) -> bool: ...

    def delete(self, obj: JSON) -> bool: ...


class _UpdateOnlyPredicate:
    """Base: creates and deletes always pass; subclasses decide updates."""

    def create(self, obj: JSON) -> bool:
        return True

    def delete(self, obj: JSON) -> bool:
        return True

    def update(self, old: JSON, new: JSON) -> bool:
        return True


def _meta(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


class GenerationChanged(_UpdateOnlyPredicate):
    """Updates pass only if ``metadata.generation`` changed (spec edits, not status writes)."""

    def update(self, old: JSON, new: JSON) -> bool:
        return _meta(old).get("generation") != _meta(new).get("generation")


class LabelsChanged(_UpdateOnlyPredicate):
    """Updates pass only if the labels changed."""

    def update(self, old: JSON, new: JSON) -> bool:
        return (_meta(old).get("labels") or {}) != (_meta(new).get("labels") or {})


class AnnotationsChanged(_UpdateOnlyPredicate):
    """Updates pass only if the annotations changed."""

    def update(self, old: JSON, new: JSON) -> bool:
        return (_meta(old).get("annotations") or {}) != (_meta(new).get("annotations") or {})


class ResourceVersionChanged(_UpdateOnlyPredicate):
    """Updates pass only if the resourceVersion changed (drops relist no-ops)."""

    def update(self, old: JSON, new: JSON) -> bool:
        return _meta(old).get("resourceVersion") != _meta(new).get("resourceVersion")


class StatusChanged(_UpdateOnlyPredicate):
    """Updates pass only if ``.status`` changed."""

    def update(self, old: JSON, new: JSON) -> bool:
        return old.get("status") != new.get("status")


class DeletionTimestampChanged(_UpdateOnlyPredicate):
    """Updates pass only if ``metadata.deletionTimestamp`` appeared/changed."""

    def update(self, old: JSON, new: JSON) -> bool:
        return _meta(old).get("deletionTimestamp") != _meta(new).get("deletionTimestamp")


class AnyOf:
    """Passes if any of the given predicates passes (``AnyOf(GenerationChanged(), LabelsChanged())``)."""

    def __init__(self, *predicates: Predicate) -> None:
        if not predicates:
            raise ValueError("AnyOf needs at least one predicate")
        self.predicates = predicates

    def create(self, obj: JSON) -> bool:
        return any(p.create(obj) for p in self.predicates)

    def update(self, old: JSON, new: JSON) -> bool:
        return any(p.update(old, new) for p in self.predicates)

    def delete(self, obj: JSON) -> bool:
        return any(p.delete(obj) for p in self.predicates)


class FuncPredicate(_UpdateOnlyPredicate):
    """Updates pass if ``func(old, new)`` is true."""

    def __init__(self, func: Callable[[JSON, JSON], bool]) -> None:
        self._func = func

    def update(self, old: JSON, new: JSON) -> bool:
        return self._func(old, new)


# -- handlers: object -> requests --------------------------------------------------------------


class RequestMapper(Protocol):
    """Maps an object to the requests it should trigger."""

    def requests_for(self, obj: JSON) -> Iterable[Request]: ...


class EnqueueForObject:
    """The object itself."""

    def requests_for(self, obj: JSON) -> Iterable[Request]:
        meta = _meta(obj)
        name = meta.get("name")
        return (Request(meta.get("namespace") or "", name),) if name else ()


class EnqueueForOwner:
    """The object's owners of ``owner_kind`` in ``owner_api_group`` (from ``ownerReferences``).

    With ``only_controller`` only the reference with ``controller: true`` counts. Owners are in the
    object's namespace unless ``owner_namespaced`` is False (cluster-scoped owners).
    """

    def __init__(
        self,
        owner_kind: str,
        owner_api_group: str,
        *,
        only_controller: bool = False,
        owner_namespaced: bool = True,
    ) -> None:
        self.owner_kind = owner_kind
        self.owner_api_group = owner_api_group
        self.only_controller = only_controller
        self.owner_namespaced = owner_namespaced

    def requests_for(self, obj: JSON) -> Iterable[Request]:
        meta = _meta(obj)
        namespace = (meta.get("namespace") or "") if self.owner_namespaced else ""
        requests = []
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") != self.owner_kind or not ref.get("name"):
                continue
            api_version = str(ref.get("apiVersion") or "")
            group = api_version.rpartition("/")[0]
            if group != self.owner_api_group:
                continue
            if self.only_controller and not ref.get("controller"):
                continue
            requests.append(Request(namespace, ref["name"]))
        return requests


class EnqueueMapped:
    """Whatever ``fn(obj)`` returns (e.g. the Kyma a Manifest belongs to)."""

    def __init__(self, fn: Callable[[JSON], Iterable[Request]]) -> None:
        self._fn = fn

    def requests_for(self, obj: JSON) -> Iterable[Request]:
        return self._fn(obj)


class _InformerSource:
    """Adapts informer events through predicates and a mapper into queue adds."""

    def __init__(
        self, controller: Controller, mapper: RequestMapper, predicates: tuple[Predicate, ...]
    ) -> None:
        self._controller = controller
        self._mapper = mapper
        self._predicates = predicates

    def _enqueue(self, obj: JSON) -> None:
        for request in self._mapper.requests_for(obj):
            self._controller.queue.add(request)

    def on_add(self, obj: JSON) -> None:
        if all(p.create(obj) for p in self._predicates):
            self._enqueue(obj)

    def on_update(self, old: JSON, new: JSON) -> None:
        if all(p.update(old, new) for p in self._predicates):
            self._enqueue(new)
            if not isinstance(self._mapper, EnqueueForObject):  # owners/mapped targets may have changed
                self._enqueue(old)

    def on_delete(self, obj: JSON) -> None:
        if all(p.delete(obj) for p in self._predicates):
            self._enqueue(obj)


# -- channel source ----------------------------------------------------------------------------


class ChannelSource:
    """A bounded channel of requests from outside Kubernetes (the listener's events).

    ``offer`` never blocks: False means the channel is full and the caller should push back
    (HTTP 429). The controller moves requests from the channel into its work queue, where they are
    deduplicated, so bursts for one object collapse into one reconcile.
    """

    def __init__(self, maxsize: int = 1024) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self.maxsize = maxsize
        self._channel: asyncio.Queue[Request] = asyncio.Queue(maxsize)

    def offer(self, request: Request) -> bool:
        """Enqueue without waiting; False if the channel is full."""
        try:
            self._channel.put_nowait(request)
        except asyncio.QueueFull:
            return False
        return True

    async def put(self, request: Request) -> None:
        """Enqueue, waiting for room."""
        await self._channel.put(request)

    def __len__(self) -> int:
        return self._channel.qsize()

    async def _pump(self, queue: WorkQueue[Request]) -> None:
        while True:
            queue.add(await self._channel.get())
            while not self._channel.empty():  # move a burst without a loop round-trip per item
                queue.add(self._channel.get_nowait())


# -- controller --------------------------------------------------------------------------------


class Controller:
    """Runs ``reconciler`` for queued requests on ``workers`` concurrent workers.

    ``run()`` once per controller: stopping shuts its queue down (like controller-runtime, a
    process that loses leadership exits and starts afresh).
    """

    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        *,
        workers: int = 1,
        rate_limiter: RateLimiter | None = None,
        clock: Clock | None = None,
        metrics: RuntimeMetrics | None = None,
        graceful_timeout: float = 30.0,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.name = name
        self.reconciler = reconciler
        self.workers = workers
        self.clock = clock or RealClock()
        self.graceful_timeout = graceful_timeout
        self.queue: WorkQueue[Request] = WorkQueue(
            name, rate_limiter=rate_limiter or default_controller_rate_limiter(self.clock), clock=self.clock
        )
        self._channels: list[ChannelSource] = []
        self._informers: list[Informer] = []
        self._metrics: ControllerMetrics | None = None
        if metrics is not None:
            self.set_metrics(metrics)
        self._running = False

    def set_metrics(self, metrics: RuntimeMetrics) -> None:
        """Report into ``metrics`` (the manager calls this for controllers it is given)."""
        self._metrics = metrics.controller(self.name)
        self.queue.set_metrics(self._metrics.queue)
        self._metrics.max_concurrent.set(self.workers)

    @property
    def has_metrics(self) -> bool:
        return self._metrics is not None

    @property
    def informers(self) -> list[Informer]:
        """Informers this controller watches (the manager waits for them to sync)."""
        return list(self._informers)

    # -- sources -------------------------------------------------------------------------------

    def watch(self, informer: Informer, handler: RequestMapper | None = None, *predicates: Predicate) -> None:
        """Enqueue requests for ``informer`` events: ``handler`` maps objects (default: the object)."""
        informer.add_handler(_InformerSource(self, handler or EnqueueForObject(), predicates))
        if informer not in self._informers:
            self._informers.append(informer)

    def channel_source(self, maxsize: int = 1024) -> ChannelSource:
        """A new bounded channel feeding this controller (see ``ChannelSource``)."""
        channel = ChannelSource(maxsize)
        self._channels.append(channel)
        return channel

    def enqueue(self, request: Request) -> None:
        """Add ``request`` directly (deduplicated)."""
        self.queue.add(request)

    # -- running -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Process requests until cancelled; then finish in-flight reconciles and stop."""
        if self._running:
            raise RuntimeError(f"controller {self.name} is already running")
        self._running = True
        stopping = asyncio.Event()
        pumps = [
            asyncio.create_task(ch._pump(self.queue), name=f"{self.name}-channel") for ch in self._channels
        ]
        workers = [
            asyncio.create_task(self._worker(stopping), name=f"{self.name}-worker-{i}")
            for i in range(self.workers)
        ]
        try:
            # asyncio.wait (unlike gather) does not cancel the workers when run() is cancelled.
            await asyncio.wait(workers, return_when=asyncio.FIRST_EXCEPTION)
            for task in workers:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        finally:
            stopping.set()
            for pump in pumps:
                pump.cancel()
            await self._stop_workers(workers)
            await asyncio.gather(*pumps, return_exceptions=True)
            self._running = False

    async def _stop_workers(self, workers: list[asyncio.Task[None]]) -> None:
        # Idle workers (waiting in get) end at once; busy ones finish their reconcile first.
        await self.queue.shutdown(drain=False)
        pending = [w for w in workers if not w.done()]
        if pending:
            _, still = await asyncio.wait(pending, timeout=self.graceful_timeout)
            for task in still:
                task.cancel()
            if still:
                await asyncio.gather(*still, return_exceptions=True)

    async def _worker(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                request = await self.queue.get()
            except QueueShutDown:
                return
            if stopping.is_set():
                self.queue.done(request)
                return
            await self._process(request)

    async def process_next(self) -> bool:
        """Take one request and reconcile it (for tests driving a controller step by step)."""
        try:
            request = await self.queue.get()
        except QueueShutDown:
            return False
        await self._process(request)
        return True

    async def _process(self, request: Request) -> None:
        metrics = self._metrics
        started = self.clock.now()
        if metrics is not None:
            metrics.active_workers.inc()
        try:
            result = await self.reconciler.reconcile(request)
        except asyncio.CancelledError:
            self.queue.add_rate_limited(request)
            raise
        except TerminalError as exc:
            log.error("%s: reconcile %s failed permanently: %s", self.name, request, exc)
            self.queue.forget(request)
            if metrics is not None:
                metrics.errors.inc()
                metrics.terminal_errors.inc()
                metrics.reconcile_error.inc()
        except Exception as exc:  # every failure is retried with backoff
            delay_hint = self.queue.num_requeues(request)
            log.warning(
                "%s: reconcile %s failed (%d earlier retries): %s: %s",
                self.name,
                request,
                delay_hint,
                type(exc).__name__,
                exc,
                exc_info=log.isEnabledFor(logging.DEBUG),
            )
            self.queue.add_rate_limited(request)
            if metrics is not None:
                metrics.errors.inc()
                metrics.reconcile_error.inc()
        else:
            if not isinstance(result, Result):
                log.error("%s: reconcile %s returned %r, not a Result", self.name, request, result)
                result = Result()
            if result.requeue_after:
                self.queue.forget(request)
                self.queue.add_after(request, result.requeue_after)
                if metrics is not None:
                    metrics.reconcile_requeue_after.inc()
            elif result.requeue:
                self.queue.add_rate_limited(request)
                if metrics is not None:
                    metrics.reconcile_requeue.inc()
            else:
                self.queue.forget(request)
                if metrics is not None:
                    metrics.reconcile_success.inc()
        finally:
            self.queue.done(request)
            if metrics is not None:
                metrics.active_workers.dec()
                metrics.reconcile_time.observe(max(0.0, self.clock.now() - started))
