"""A work queue with client-go semantics for asyncio workers.

Why not ``asyncio.Queue``: a controller needs (1) dedup: a key added many times before a worker
takes it is processed once, (2) exclusivity: a key re-added while a worker processes it waits in a
dirty set and is queued again only when that worker calls ``done`` — so the same key is never in
two workers at once, (3) delayed adds (heaps, one timer) and (4) per-key rate-limited retries.

Two lanes, like controller-runtime's priority queue (v0.20): a key is added either *now* (an event:
a watched object changed, the listener reported a runtime change) or as *bulk* work (``low=True``:
an informer's list at start-up, a relist or a newly acquired shard, and every delayed add when it
falls due: safety-net resyncs, retries, fan-outs spread over time). ``get`` hands out the event lane
first, each lane in FIFO order. Why: a replica that starts, takes over or acquires shards lists
thousands of Kymas at once (5,000 x ~3.5 ms = ~17 s of reconciles); in one FIFO a user's change made
meanwhile waited behind all of them. Bulk work runs whenever no event is waiting, and while it waits
at most ``EVENTS_PER_BULK`` events are handed out in a row before one bulk request: an event storm
faster than the workers delays bulk work (safety-net resyncs) but cannot starve it (the starvation
reported for controller-runtime's queue, kubernetes-sigs/controller-runtime#3496). A key queued
as bulk that gets an event moves to the event lane (the entry it leaves behind in the bulk deque is
skipped when reached); a key queued for an event stays there when bulk work asks for it again.

A delayed add may carry an ``early`` allowance: when the timer fires for another key's deadline,
every key whose allowance has begun falls due with it. Why: periodic safety-net requeues
(``Result.periodic``) fall due as spread out as the reconciles that scheduled them. A start-up round
that shared the CPU with other processes, or shards acquired one by one, left every later resync of
that replica scattered over seconds, with idle gaps between its reconciles, round after round (on
the VM measured, a reconcile after an idle gap costs more CPU: ``benchmarks/results/scale.md``).
With an allowance the keys due shortly after the first one run back to back, and so does every
later round. Nothing falls due before the first pending deadline (an allowance only lets a key join
a timer that fires anyway), and requeues that already run back to back stay as they were: the
workers reach each key about at its deadline.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

from kyma_operator.runtime.clock import Clock, RealClock, TimerHandle
from kyma_operator.runtime.metrics import QueueMetrics
from kyma_operator.runtime.ratelimit import RateLimiter, default_controller_rate_limiter

K = TypeVar("K", bound=Hashable)

EVENTS_PER_BULK = 32
"""While bulk work waits, events handed out in a row before one bulk request is."""


class QueueShutDown(Exception):
    """``get`` on a queue that was shut down and has nothing left to hand out."""


class WorkQueue(Generic[K]):
    """Dedup, exclusive-processing, delaying, rate-limited work queue.

    Protocol for a worker: ``key = await queue.get()``, process it, then always ``queue.done(key)``;
    on failure ``queue.add_rate_limited(key)``, on success ``queue.forget(key)``.
    """

    def __init__(
        self,
        name: str = "",
        *,
        rate_limiter: RateLimiter | None = None,
        clock: Clock | None = None,
        metrics: QueueMetrics | None = None,
    ) -> None:
        self.name = name
        self._clock = clock or RealClock()
        self.rate_limiter: RateLimiter = rate_limiter or default_controller_rate_limiter(self._clock)
        self._queue: deque[K] = deque()
        """The event lane."""
        self._bulk: deque[tuple[int, K]] = deque()
        """The bulk lane: (entry number, key). Entries left behind by a key that moved to the event
        lane are skipped when reached (their number is no longer the key's)."""
        self._bulk_keys: dict[K, int] = {}
        """Dirty keys whose pending add is bulk work -> the number of their entry in ``_bulk``
        (0 while the key is being processed: it gets an entry on ``done``)."""
        self._bulk_entries = itertools.count(1)
        self._taken_as_event: set[K] = set()
        """Keys being processed that were handed out from the event lane."""
        self._delayed_events: set[K] = set()
        """Keys whose pending delayed add is an event (``add_after(..., low=False)``)."""
        self._queued = 0
        """Keys in either lane waiting for a worker (what ``len`` reports)."""
        self._bulk_queued = 0
        """Of them, in the bulk lane."""
        self._events_in_a_row = 0
        """Events handed out since the last bulk request, while bulk work waited."""
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._added_at: dict[K, float] = {}
        self._started_at: dict[K, float] = {}
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._idle_waiters: list[asyncio.Future[None]] = []
        # Delayed adds: heap of (ready_at, seq, key); _waiting holds the authoritative ready time.
        self._delayed: list[tuple[float, int, K]] = []
        self._waiting: dict[K, float] = {}
        # Delayed adds that may fall due early: heap of (earliest, seq, key); _earliest holds the
        # authoritative earliest time of a pending key (absent: no allowance).
        self._early: list[tuple[float, int, K]] = []
        self._earliest: dict[K, float] = {}
        self._seq = itertools.count()
        self._timer: TimerHandle | None = None
        self._timer_at: float | None = None
        self._shutting_down = False
        self._metrics: QueueMetrics | None = None
        if metrics is not None:
            self.set_metrics(metrics)

    # -- configuration -------------------------------------------------------------------------

    def set_metrics(self, metrics: QueueMetrics) -> None:
        """Report into ``metrics`` from now on (the manager attaches its registry this way)."""
        self._metrics = metrics
        metrics.set_in_flight_provider(self._in_flight)
        metrics.depth.set(self._queued)
        metrics.bulk_depth.set(self._bulk_queued)

    @property
    def clock(self) -> Clock:
        return self._clock

    # -- adding --------------------------------------------------------------------------------

    def add(self, key: K, *, low: bool = False) -> None:
        """Queue ``key`` unless it is already queued; if it is being processed, queue it after ``done``.

        ``low``: bulk work (see the module docstring); an event add of a key queued as bulk work
        moves it to the event lane.
        """
        if self._shutting_down:
            return
        if key in self._dirty:
            if not low and key in self._bulk_keys:
                del self._bulk_keys[key]
                if key not in self._processing:
                    self._queue.append(key)  # its bulk entry is skipped when reached
                    self._bulk_queued -= 1
                    if self._metrics is not None:
                        self._metrics.promotions.inc()
                        self._metrics.bulk_depth.set(self._bulk_queued)
            return
        self._dirty.add(key)
        if low:
            self._bulk_keys[key] = 0
        if self._metrics is not None:
            self._metrics.adds.inc()
        if key in self._processing:
            return
        self._push(key)

    def _push(self, key: K) -> None:
        if key in self._bulk_keys:
            entry = next(self._bulk_entries)
            self._bulk_keys[key] = entry
            self._bulk.append((entry, key))
            self._bulk_queued += 1
        else:
            self._queue.append(key)
        self._queued += 1
        self._added_at[key] = self._clock.now()
        if self._metrics is not None:
            self._metrics.depth.set(self._queued)
            self._metrics.bulk_depth.set(self._bulk_queued)
        self._wake_one()

    def add_after(self, key: K, delay: float, *, low: bool = True, early: float = 0.0) -> None:
        """Add ``key`` after ``delay`` seconds; an earlier pending delayed add of the same key wins.

        Bulk work when it falls due, unless ``low`` is False (a request put back for a moment that
        was an event keeps its place ahead of bulk work); one event add among the pending ones of a
        key makes its due add an event. ``early``: seconds before its deadline the key may fall due
        together with another key whose deadline came (see the module docstring); 0: exactly then.
        """
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key, low=low)
            return
        if not low:
            self._delayed_events.add(key)
        ready_at = self._clock.now() + delay
        current = self._waiting.get(key)
        if current is not None and current <= ready_at:
            return
        self._waiting[key] = ready_at
        seq = next(self._seq)
        heapq.heappush(self._delayed, (ready_at, seq, key))
        if early > 0:
            earliest = ready_at - min(early, delay)
            self._earliest[key] = earliest
            heapq.heappush(self._early, (earliest, seq, key))
        else:
            self._earliest.pop(key, None)
        if self._timer_at is None or ready_at < self._timer_at:
            self._schedule(ready_at)

    def add_rate_limited(self, key: K) -> None:
        """Add ``key`` after the rate limiter's delay for it (counts as a retry)."""
        if self._shutting_down:
            return
        if self._metrics is not None:
            self._metrics.retries.inc()
        self.add_after(key, self.rate_limiter.when(key))

    def forget(self, key: K) -> None:
        """Reset ``key``'s failure history in the rate limiter."""
        self.rate_limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        """How many rate-limited retries ``key`` has had since it was last forgotten."""
        return self.rate_limiter.num_requeues(key)

    # -- delayed adds --------------------------------------------------------------------------

    def _schedule(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = self._clock.call_later(at - self._clock.now(), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        if self._shutting_down:
            return
        now = self._clock.now()
        while self._delayed and self._delayed[0][0] <= now:
            ready_at, _, key = heapq.heappop(self._delayed)
            if self._waiting.get(key) == ready_at:  # else superseded, or fell due early
                self._fall_due(key)
        # Keys whose early allowance has begun fall due with the one whose deadline came. Their
        # entries in ``_delayed`` stay behind and are skipped (no longer in ``_waiting``).
        while self._early and self._early[0][0] <= now:
            earliest, _, key = heapq.heappop(self._early)
            if self._earliest.get(key) == earliest:
                self._fall_due(key)
        while self._delayed:
            ready_at, _, key = self._delayed[0]
            if self._waiting.get(key) == ready_at:
                self._schedule(ready_at)
                return
            heapq.heappop(self._delayed)

    def _fall_due(self, key: K) -> None:
        del self._waiting[key]
        self._earliest.pop(key, None)
        if key in self._delayed_events:
            self._delayed_events.discard(key)
            self.add(key)
        else:
            self.add(key, low=True)

    # -- taking --------------------------------------------------------------------------------

    async def get(self) -> K:
        """Wait for the next key and mark it as processing. Raises ``QueueShutDown`` when shut down."""
        while not self._queued:
            if self._shutting_down:
                raise QueueShutDown(self.name)
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled() and self._queued:
                    self._wake_one()  # pass the wake-up on to another getter
                raise
            finally:
                if not waiter.done():
                    waiter.cancel()
        return self._take()

    def get_nowait(self) -> K | None:
        """Take the next key without waiting, or None if there is none."""
        return self._take() if self._queued else None

    def _take(self) -> K:
        if self._queue and not (self._bulk_queued and self._events_in_a_row >= EVENTS_PER_BULK):
            key = self._queue.popleft()
            self._taken_as_event.add(key)
            self._events_in_a_row = self._events_in_a_row + 1 if self._bulk_queued else 0
        else:
            while True:
                entry, key = self._bulk.popleft()
                if self._bulk_keys.get(key) == entry:
                    del self._bulk_keys[key]
                    self._bulk_queued -= 1
                    break
            self._events_in_a_row = 0
        self._queued -= 1
        self._processing.add(key)
        self._dirty.discard(key)
        now = self._clock.now()
        self._started_at[key] = now
        added = self._added_at.pop(key, now)
        if self._metrics is not None:
            self._metrics.depth.set(self._queued)
            self._metrics.bulk_depth.set(self._bulk_queued)
            self._metrics.queue_duration.observe(max(0.0, now - added))
        return key

    def done(self, key: K) -> None:
        """Finish processing ``key``; if it was re-added meanwhile it is queued again now."""
        if key not in self._processing:
            return
        self._processing.discard(key)
        self._taken_as_event.discard(key)
        started = self._started_at.pop(key, None)
        if self._metrics is not None and started is not None:
            self._metrics.work_duration.observe(max(0.0, self._clock.now() - started))
        if key in self._dirty:
            self._push(key)
        elif not self._processing and not self._queued:
            self._wake_idle()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _wake_idle(self) -> None:
        waiters, self._idle_waiters = self._idle_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- state ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._queued

    @property
    def bulk(self) -> int:
        """Keys waiting in the bulk lane (part of ``len``)."""
        return self._bulk_queued

    @property
    def processing(self) -> frozenset[K]:
        return frozenset(self._processing)

    @property
    def waiting(self) -> int:
        """Number of keys waiting for a delayed add."""
        return len(self._waiting)

    def taken_as_event(self, key: K) -> bool:
        """Whether ``key``, being processed, was handed out from the event lane."""
        return key in self._taken_as_event

    def is_queued(self, key: K) -> bool:
        return key in self._dirty and key not in self._processing

    def ready_at(self, key: K) -> float | None:
        """When a delayed add of ``key`` becomes due (clock time), or None."""
        return self._waiting.get(key)

    def earliest_at(self, key: K) -> float | None:
        """From when ``key``'s pending delayed add may fall due with another key's (its deadline less
        its early allowance); None when it has none or nothing is pending."""
        return self._earliest.get(key)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def _in_flight(self) -> tuple[float, float]:
        now = self._clock.now()
        durations = [now - started for started in list(self._started_at.values())]
        return (sum(durations), max(durations, default=0.0))

    async def wait_idle(self) -> None:
        """Wait until nothing is queued or processing (delayed adds don't count)."""
        while self._queued or self._processing:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._idle_waiters.append(waiter)
            await waiter

    # -- shutdown ------------------------------------------------------------------------------

    async def shutdown(self, drain: bool = True) -> None:
        """Stop accepting adds and drop pending delayed adds; wake all getters.

        Keys already queued are still handed out by ``get`` (client-go semantics); once the queue
        is empty ``get`` raises ``QueueShutDown``. With ``drain`` this waits until every queued
        key has been taken and every taken key is ``done`` (so it needs running workers).
        """
        if not self._shutting_down:
            self._shutting_down = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
                self._timer_at = None
            self._delayed.clear()
            self._waiting.clear()
            self._early.clear()
            self._earliest.clear()
            self._delayed_events.clear()
            for waiter in self._waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._waiters.clear()
        if drain:
            await self.wait_idle()
