"""A controller's bounded, optionally throttled entry for requests from outside Kubernetes.

Why: the KCP listener turns signed runtime events into targeted reconciles. It must never block,
must push back when the controller falls behind (HTTP 429 + Retry-After, so the agent retries), and
an event storm for one object must not become a storm of reconciles. ``Intake`` is that one hop
from the listener into the controller's work queue, and a ``Source`` like any other:

* ``offer(request) -> bool`` never blocks. A request already waiting in the queue is absorbed
  (deduplicated, always accepted; waiting as bulk work, it moves ahead of it); otherwise it is
  refused once ``capacity`` requests wait for events. Bulk work (a start-up's or an acquired
  shard's thousands of listed Kymas) does not count: events are served before it, so a replica
  that just took over answers its runtimes' events instead of pushing them back for the length
  of its first round. Refused offers leave no trace (no reason noted, nothing queued).
* Throttling (``throttle_window`` > 0): per target a leading and a trailing edge. The first offer
  is queued at once (no added latency for isolated events); further offers within ``window`` of the
  last forward are absorbed into ONE trailing add when the window ends, so the reconcile after a
  burst sees its final state. 10,000 offers in one second with ``window=0.5`` give three adds
  (t=0, 0.5, 1.0). Memory is bounded by the targets forwarded within the last window; a trailing add
  refused for capacity is retried one window later (the hint is never dropped silently).
* ``observers`` see every offered request (the local run prints each routed event).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from kyma_operator.runtime.clock import Clock, RealClock, TimerHandle
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.source import Enqueuer

__all__ = ["Intake"]


class Intake:
    """See the module docstring. Bound to one controller (``Controller.add_source``)."""

    def __init__(
        self,
        reason: str,
        *,
        capacity: int = 4096,
        throttle_window: float = 0.0,
        clock: Clock | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        if throttle_window < 0:
            raise ValueError("throttle_window must not be negative")
        self.reason = reason
        self.capacity = capacity
        self.window = throttle_window
        self._clock = clock or RealClock()
        self._queue: Enqueuer | None = None
        self._last: dict[Request, float] = {}
        self._order: deque[tuple[float, Request]] = deque()
        self._trailing: dict[Request, TimerHandle] = {}
        self.observers: list[Callable[[Request], None]] = []
        """Called for every offered request, before throttling and capacity decide (what was routed)."""
        self.forwarded = 0
        """Adds handed to the work queue."""
        self.coalesced = 0
        """Offers absorbed into a pending trailing add (throttling)."""
        self.refused = 0

    def bind(self, queue: Enqueuer) -> None:
        if self._queue is not None:
            raise RuntimeError("intake is already bound to a controller")
        self._queue = queue

    def depth(self) -> int:
        """Requests waiting in the controller's queue plus trailing adds not yet due."""
        return (len(self._queue) if self._queue is not None else 0) + len(self._trailing)

    @property
    def pending(self) -> int:
        """Trailing adds scheduled but not yet forwarded."""
        return len(self._trailing)

    def _admit(self, request: Request) -> bool:
        queue = self._queue
        if queue is None:
            raise RuntimeError("intake is not bound to a controller")
        if not queue.is_queued(request) and queue.events_waiting() >= self.capacity:
            self.refused += 1
            return False
        queue.add(request, self.reason)
        self.forwarded += 1
        return True

    def offer(self, request: Request) -> bool:
        """Queue ``request`` (throttled); False if the controller's queue is full (push back)."""
        for observer in self.observers:
            observer(request)
        if self.window <= 0:
            return self._admit(request)
        now = self._clock.now()
        order = self._order
        if order and now - order[0][0] >= self.window:
            self._prune(now)
        last = self._last.get(request)
        if last is None or now - last >= self.window:
            trailing = self._trailing
            if trailing and request in trailing:  # a retry after a full queue is pending: this replaces it
                trailing.pop(request).cancel()
            if not self._admit(request):
                return False
            self._last[request] = now
            order.append((now, request))
            return True
        self.coalesced += 1
        if request not in self._trailing:
            self._trailing[request] = self._clock.call_later(
                last + self.window - now, lambda: self._fire(request)
            )
        return True

    def _prune(self, now: float) -> None:
        order, last = self._order, self._last
        while order and now - order[0][0] >= self.window:
            at, request = order.popleft()
            if last.get(request) == at and request not in self._trailing:
                del last[request]

    def _fire(self, request: Request) -> None:
        self._trailing.pop(request, None)
        now = self._clock.now()
        if self._admit(request):
            self._last[request] = now
            self._order.append((now, request))
        else:
            self._trailing[request] = self._clock.call_later(self.window, lambda: self._fire(request))
