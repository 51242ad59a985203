"""Per-target throttling of enqueues (leading + trailing edge), so event storms cost few reconciles.

Why: a work queue only deduplicates requests that are still waiting; once a reconcile has started,
the next event for the same object queues another one. A runtime that emits 10,000 events for one
Kyma within a second (a controller fighting over a field, a mass relabel) would therefore cause
thousands of reconciles of that Kyma. Events are hints and reconcilers are level-based, so the
listener forwards at most one request per target per ``window``:

* the first event for a target is forwarded at once (no added latency for isolated events);
* further events within ``window`` of the last forward are absorbed into ONE trailing request,
  forwarded when the window ends, so the reconcile after the burst sees its final state.

Ten thousand events in one second with ``window=0.5`` s give three requests (t=0, 0.5, 1.0).
Memory is bounded by the targets forwarded within the last window. If the inner sink is full when a
trailing request fires, it is retried one window later (the hint is never dropped silently).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from kcp_listener.routing import ObjectRef, RequestSink

__all__ = ["CoalescingSink", "LoopTimer", "Timer"]


class _Handle(Protocol):
    def cancel(self) -> None: ...


class Timer(Protocol):
    """Monotonic time and delayed callbacks (the operator runtime's ``Clock`` satisfies it)."""

    def now(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> _Handle: ...


class LoopTimer:
    """``Timer`` on the running event loop and ``time.monotonic``."""

    def now(self) -> float:
        return time.monotonic()

    def call_later(self, delay: float, callback: Callable[[], None]) -> _Handle:
        return asyncio.get_running_loop().call_later(max(0.0, delay), callback)


class CoalescingSink:
    """A ``RequestSink`` that throttles each target to one forward per ``window`` seconds."""

    def __init__(
        self,
        inner: RequestSink,
        *,
        window: float,
        timer: Timer,
        on_coalesced: Callable[[], None] | None = None,
    ) -> None:
        if window <= 0:
            raise ValueError("window must be positive")
        self._inner = inner
        self._window = window
        self._timer = timer
        self._on_coalesced = on_coalesced
        self._last: dict[ObjectRef, float] = {}
        self._order: deque[tuple[float, ObjectRef]] = deque()
        self._trailing: dict[ObjectRef, _Handle] = {}
        self.forwarded = 0
        self.coalesced = 0

    def depth(self) -> int:
        return self._inner.depth()

    @property
    def pending(self) -> int:
        """Trailing requests scheduled but not yet forwarded."""
        return len(self._trailing)

    def _prune(self, now: float) -> None:
        order, last = self._order, self._last
        while order and now - order[0][0] >= self._window:
            at, ref = order.popleft()
            if last.get(ref) == at and ref not in self._trailing:
                del last[ref]

    def _forwarded(self, ref: ObjectRef, now: float) -> None:
        self.forwarded += 1
        self._last[ref] = now
        self._order.append((now, ref))

    def offer(self, ref: ObjectRef) -> bool:
        now = self._timer.now()
        order = self._order
        if order and now - order[0][0] >= self._window:
            self._prune(now)
        last = self._last.get(ref)
        if last is None or now - last >= self._window:
            trailing = self._trailing
            if trailing and ref in trailing:  # a retry after a full inner sink is pending: this replaces it
                trailing.pop(ref).cancel()
            if not self._inner.offer(ref):
                return False
            self.forwarded += 1
            self._last[ref] = now
            order.append((now, ref))
            return True
        self.coalesced += 1
        if self._on_coalesced is not None:
            self._on_coalesced()
        if ref not in self._trailing:
            self._trailing[ref] = self._timer.call_later(last + self._window - now, lambda: self._fire(ref))
        return True

    def _fire(self, ref: ObjectRef) -> None:
        self._trailing.pop(ref, None)
        now = self._timer.now()
        if self._inner.offer(ref):
            self._forwarded(ref, now)
        else:
            self._trailing[ref] = self._timer.call_later(self._window, lambda: self._fire(ref))
