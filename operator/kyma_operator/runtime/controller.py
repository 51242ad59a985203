"""Controllers: requests from sources into ``reconcile`` calls, with retries.

The shape is controller-runtime's: sources (``source.py``: informer events through predicates and
mappers, the listener's bounded ``intake.Intake``, sweeps, fan-outs) are bound to the controller's
``WorkQueue`` once, each add carrying its reason; N workers take requests, call the reconciler with
the request's reasons as ``triggers.current_triggers()``, and apply the outcome: exception ->
rate-limited retry, ``Result.requeue_after`` -> forget the backoff and retry after that delay,
success -> forget. A key is never reconciled by two workers at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from kyma_operator.runtime.bulk import adding_in_bulk
from kyma_operator.runtime.clock import Clock, RealClock
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.mappers import (
    EnqueueForObject,
    EnqueueForOwner,
    EnqueueMapped,
    RequestMapper,
)
from kyma_operator.runtime.metrics import ControllerMetrics, RuntimeMetrics
from kyma_operator.runtime.predicates import (
    AnnotationsChanged,
    AnyOf,
    DeletionTimestampChanged,
    FuncPredicate,
    GenerationChanged,
    LabelsChanged,
    Predicate,
    ResourceVersionChanged,
    StatusChanged,
)
from kyma_operator.runtime.queue import QueueShutDown, WorkQueue
from kyma_operator.runtime.ratelimit import RateLimiter, default_controller_rate_limiter
from kyma_operator.runtime.request import Request, Result
from kyma_operator.runtime.source import Enqueuer, InformerSource, RunnableSource, Source
from kyma_operator.runtime.triggers import TriggerLog

__all__ = [
    "AnnotationsChanged",
    "AnyOf",
    "Controller",
    "DeletionTimestampChanged",
    "EnqueueForObject",
    "EnqueueForOwner",
    "EnqueueMapped",
    "FuncPredicate",
    "GenerationChanged",
    "LabelsChanged",
    "Predicate",
    "Reconciler",
    "RequestGate",
    "RequestMapper",
    "ResourceVersionChanged",
    "StatusChanged",
    "TerminalError",
]

log = logging.getLogger(__name__)

JSON = dict[str, Any]


class Reconciler(Protocol):
    """Makes the world match one object's desired state. Level-based: read current state."""

    async def reconcile(self, request: Request) -> Result: ...


class RequestGate(Protocol):
    """Decides per request whether this process may reconcile it (sharding: does it hold the shard?).

    ``admit`` returns a ticket (the request is counted in flight until ``release(ticket)``) or
    None: the request is dropped (forgotten, not retried; whoever may act on it has it queued),
    unless ``deferred`` says it is this process's but may not be acted on right now (sharding: the
    shard is held but fenced while its renewal is late): then it is retried ``gate_retry`` later."""

    def admit(self, request: Request) -> int | None: ...

    def release(self, ticket: int) -> None: ...

    def deferred(self, request: Request) -> bool: ...


class TerminalError(Exception):
    """A failure retrying cannot fix (bad spec): logged, not requeued until the next event."""


class _NotingQueue:
    """The controller's ``Enqueuer``: adds to the work queue and notes the reason of each add.

    An add made while an informer dispatches a list is bulk work (``runtime/bulk.py``): it waits
    behind the events in the queue's bulk lane."""

    def __init__(self, queue: WorkQueue[Request], triggers: TriggerLog) -> None:
        self._queue = queue
        self._triggers = triggers

    def add(self, request: Request, reason: str) -> None:
        queue = self._queue
        if queue.shutting_down:
            return
        self._triggers.note(request, reason)
        queue.add(request, low=adding_in_bulk())

    def add_after(self, request: Request, delay: float, reason: str) -> None:
        queue = self._queue
        if queue.shutting_down:
            return
        if delay <= 0:  # bulk work like every delayed add, whatever the delay
            self._triggers.note(request, reason)
            queue.add(request, low=True)
            return
        queue.add_after(request, delay)
        if queue.ready_at(request) is not None:
            self._triggers.note(request, reason)

    def is_queued(self, request: Request) -> bool:
        return self._queue.is_queued(request)

    def __len__(self) -> int:
        return len(self._queue)

    def events_waiting(self) -> int:
        return len(self._queue) - self._queue.bulk


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
        request_gate: RequestGate | None = None,
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
        self.triggers = TriggerLog()
        """Reasons of accepted adds until their reconcile takes them (``triggers.current_triggers``)."""
        self.enqueuer: Enqueuer = _NotingQueue(self.queue, self.triggers)
        """What sources are bound to (every add names its reason)."""
        self._sources: list[Source] = []
        self._informers: list[Informer] = []
        self._metrics: ControllerMetrics | None = None
        if metrics is not None:
            self.set_metrics(metrics)
        self._running = False
        self._gate: Callable[[], bool] | None = None
        self.gate_retry = 1.0
        """Seconds after which a request held back by the gate is tried again."""
        self.gated = 0
        """Reconciles not started because the gate was closed."""
        self.request_gate = request_gate
        """Sharding: asked per request whether this replica may reconcile it (given at construction;
        a controller with one runs on every replica, see ``Manager``)."""
        self._request_gate: RequestGate | None = None
        self.dropped = 0
        """Requests dropped because the request gate did not admit them (shard held elsewhere)."""

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

    def add_source(self, source: Source) -> None:
        """Bind ``source`` to this controller's queue; a ``RunnableSource`` runs while the controller runs."""
        source.bind(self.enqueuer)
        self._sources.append(source)
        informer = getattr(source, "informer", None)
        if isinstance(informer, Informer) and informer not in self._informers:
            self._informers.append(informer)

    def watch(
        self,
        informer: Informer,
        handler: RequestMapper | None = None,
        *predicates: Predicate,
        reason: str | None = None,
    ) -> None:
        """Enqueue requests for ``informer`` events: ``handler`` maps objects (default: the object).

        ``reason`` (default: "<informer name> changed") is noted for the reconciles it triggers.
        """
        self.add_source(
            InformerSource(
                informer,
                handler or EnqueueForObject(),
                predicates,
                reason=reason or f"{informer.name} changed",
            )
        )

    def enqueue(self, request: Request, reason: str) -> None:
        """Add ``request`` directly (deduplicated), noting ``reason``."""
        self.enqueuer.add(request, reason)

    # -- running -------------------------------------------------------------------------------

    async def run(
        self, gate: Callable[[], bool] | None = None, request_gate: RequestGate | None = None
    ) -> None:
        """Process requests until cancelled; then finish in-flight reconciles and stop.

        ``gate`` (the manager passes "still leading"): checked before every reconcile; while it is
        False no reconcile starts and taken requests are put back (``gate_retry`` seconds later).
        ``request_gate`` (sharding): asked per request after ``gate``; a request it does not admit
        is dropped.
        """
        if self._running:
            raise RuntimeError(f"controller {self.name} is already running")
        self._gate = gate
        self._request_gate = request_gate if request_gate is not None else self.request_gate
        self._running = True
        stopping = asyncio.Event()
        pumps = [
            asyncio.create_task(source.run(), name=f"{self.name}-source-{type(source).__name__}")
            for source in self._sources
            if isinstance(source, RunnableSource)
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
            # Give the loop a turn between reconciles: ``queue.get`` returns at once while keys are
            # queued, and a reconcile answered from caches alone (a converged single-cluster Kyma:
            # nothing to write) never suspends, so a worker would otherwise run a whole backlog
            # (a shard's 1,700 Kymas after an acquire, a full resync) without letting Lease
            # renewals, probes or the listener run: 3 replicas at 5,000 Kymas lost their Leases.
            await asyncio.sleep(0)

    async def process_next(self) -> bool:
        """Take one request and reconcile it (for tests driving a controller step by step)."""
        try:
            request = await self.queue.get()
        except QueueShutDown:
            return False
        await self._process(request)
        return True

    def _retry_gated(self, request: Request) -> None:
        """Counted as gated and tried again after ``gate_retry`` (not reconciled now, not lost), in
        the lane it was taken from: an event put back for a moment stays ahead of bulk work."""
        self.gated += 1
        if self._metrics is not None:
            self._metrics.gated.inc()
        event = self.queue.taken_as_event(request)
        self.queue.done(request)
        self.queue.add_after(request, self.gate_retry, low=not event)

    async def _process(self, request: Request) -> None:
        gate = self._gate
        if gate is not None and not gate():
            # Not (certainly) leading: start nothing; the request waits until leadership is
            # confirmed again or the process steps down (another replica then reconciles it).
            self._retry_gated(request)
            return
        ticket: int | None = None
        request_gate = self._request_gate
        if request_gate is not None:
            ticket = request_gate.admit(request)
            if ticket is None and request_gate.deferred(request):
                # Ours, fenced for a moment (a late renewal): no reconcile now, and not lost either.
                self._retry_gated(request)
                return
            if ticket is None:
                # Not this replica's shard: the holder has it queued (and re-enqueues everything
                # of a shard when it acquires one), so forget it here.
                self.dropped += 1
                self.triggers.take(request)
                self.queue.forget(request)
                self.queue.done(request)
                return
        metrics = self._metrics
        started = self.clock.now()
        if metrics is not None:
            metrics.started.inc()
            metrics.active_workers.inc()
        token = self.triggers.activate(request)
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
            if result.reason is not None and (result.requeue_after or result.requeue):
                self.triggers.note(request, result.reason)
            if result.requeue_after:
                self.queue.forget(request)
                self.queue.add_after(request, result.requeue_after, early=result.early)
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
            self.triggers.deactivate(token)
            if request_gate is not None and ticket is not None:
                request_gate.release(ticket)
            self.queue.done(request)
            if metrics is not None:
                metrics.active_workers.dec()
                metrics.reconcile_time.observe(max(0.0, self.clock.now() - started))
