"""Everything that enqueues reconciles is a ``Source``, bound to its controller's queue once.

controller-runtime's model: a controller is fed by sources (informer events, channels of external
events, timers), each started with the controller's queue. Here the contract is two methods:

* ``Source.bind(queue)``: called once when the source is added to a controller
  (``Controller.add_source``); from then on the source adds requests to ``queue``;
* ``RunnableSource.run()``: for sources with a loop of their own (a periodic sweep); the controller
  runs them while it runs (so, like the controller, only on the leader).

Every add names its reason (``Enqueuer.add(request, reason)``): the controller notes it where the key
is added, only if the add was accepted, and the reconcile reads it (``triggers.current_triggers``).

The kinds in this project: :class:`InformerSource` (Kubernetes watch events through predicates and a
mapper), ``intake.Intake`` (bounded, optionally throttled entry for events from outside Kubernetes:
the listener), the Kyma controller's heartbeat sweep (a timer) and the Watcher fan-out (one change
-> every Kyma, spread over time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from kyma_operator.runtime.request import Request

if TYPE_CHECKING:
    from kyma_operator.runtime.controller import Predicate, RequestMapper
    from kyma_operator.runtime.informer import Informer

__all__ = ["Enqueuer", "InformerSource", "RunnableSource", "Source"]

JSON = dict[str, Any]


class Enqueuer(Protocol):
    """What a source may do to its controller's work queue."""

    def add(self, request: Request, reason: str) -> None:
        """Queue ``request`` (deduplicated) and note ``reason`` for its next reconcile."""
        ...

    def add_after(self, request: Request, delay: float, reason: str) -> None:
        """Queue ``request`` after ``delay`` seconds and note ``reason`` when it is queued."""
        ...

    def is_queued(self, request: Request) -> bool:
        """Whether ``request`` waits in the queue now (an add would be absorbed)."""
        ...

    def __len__(self) -> int:
        """Requests waiting to be processed (not counting delayed ones and in-flight ones)."""
        ...

    def events_waiting(self) -> int:
        """Of them, those waiting for events (not bulk work: ``runtime/queue.py``)."""
        ...


class Source(Protocol):
    def bind(self, queue: Enqueuer) -> None: ...


@runtime_checkable
class RunnableSource(Protocol):
    def bind(self, queue: Enqueuer) -> None: ...

    async def run(self) -> None:
        """Run until cancelled (the controller starts and stops it)."""
        ...


class InformerSource:
    """Informer events -> predicates -> mapper -> queue adds with ``reason``."""

    def __init__(
        self,
        informer: Informer,
        mapper: RequestMapper,
        predicates: tuple[Predicate, ...] = (),
        *,
        reason: str,
    ) -> None:
        self.informer = informer
        self._mapper = mapper
        self._predicates = predicates
        self._reason = reason
        self._queue: Enqueuer | None = None
        from kyma_operator.runtime.controller import EnqueueForObject

        self._remap_old = not isinstance(mapper, EnqueueForObject)
        """Owners/mapped targets of an updated object may have changed: enqueue the old ones too."""

    def bind(self, queue: Enqueuer) -> None:
        if self._queue is not None:
            raise RuntimeError("source is already bound to a controller")
        self._queue = queue
        self.informer.add_handler(self)

    def _enqueue(self, obj: JSON) -> None:
        queue = self._queue
        assert queue is not None
        for request in self._mapper.requests_for(obj):
            queue.add(request, self._reason)

    def on_add(self, obj: JSON) -> None:
        if all(p.create(obj) for p in self._predicates):
            self._enqueue(obj)

    def on_update(self, old: JSON, new: JSON) -> None:
        if all(p.update(old, new) for p in self._predicates):
            self._enqueue(new)
            if self._remap_old:
                self._enqueue(old)

    def on_delete(self, obj: JSON) -> None:
        if all(p.delete(obj) for p in self._predicates):
            self._enqueue(obj)
