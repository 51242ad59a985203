"""All deadlines of one HTTP server's connections on ONE event-loop timer, in buckets.

Why not ``loop.call_later`` per connection: the agent's server re-arms a connection's deadline three
times per request (header, body, then keep-alive). Each ``call_later`` allocates a ``TimerHandle``
and copies the ``contextvars`` context; a cancelled handle stays in the loop's heap until its time
comes (a 15 s keep-alive re-armed at 500 requests/s leaves ~7,500 of them), and every one of those
is an object the cyclic collector walks: with 1,000 held connections a full collection took 16 ms
of the event loop (issue 26). Here an item is filed in the bucket of its time (``resolution``
seconds wide); a deadline that moves later is only written down (the item stays in its earlier
bucket, which re-files it when it comes due), one that moves earlier is moved to its bucket, and a
cleared one leaves its bucket at once (a closed connection is not kept alive by its old deadline).
A deadline fires at most ``resolution`` late, plus the turns of the loop that earlier expiries of
the same moment took: at most ``_EXPIRIES_PER_TURN`` items expire per callback (hundreds of held
connections opened together time out together, and closing them all in one callback held the loop
for 13 ms; 32 per callback still up to 2.6 ms), the rest in the next turns, with whatever else is
ready in between.
"""

from __future__ import annotations

import asyncio
import math
from typing import Protocol

__all__ = ["Deadlines", "Expiring"]

_EXPIRIES_PER_TURN = 8
"""Closing a held TLS connection costs the loop ~70-150 us: with 32 per callback one callback took up
to 2.6 ms under 1,000 hostile connections (``agent_hostile --loop-stalls``, ``slow_callbacks``), with
8 at most 1.1 ms."""


class Expiring(Protocol):
    """Something with a deadline: ``expired`` is called once it has passed."""

    deadline: float | None
    bucket: int | None
    """The bucket it is filed in (managed by ``Deadlines``)."""

    def expired(self) -> None: ...


class Deadlines:
    """Deadlines of many ``Expiring`` items on one timer (create it on the loop that uses it)."""

    def __init__(self, resolution: float = 0.05) -> None:
        self._loop = asyncio.get_running_loop()
        self._resolution = resolution
        self._buckets: dict[int, dict[Expiring, None]] = {}
        self._timer: asyncio.Handle | None = None
        self._timer_bucket: int | None = None
        self._due_now = False
        """Inside ``_due``: it schedules the next bucket when done."""

    def __len__(self) -> int:
        """Items filed."""
        return sum(len(items) for items in self._buckets.values())

    def set(self, item: Expiring, seconds: float) -> None:
        """``item.expired()`` after ``seconds`` (replacing its previous deadline)."""
        when = self._loop.time() + seconds
        item.deadline = when
        bucket = math.ceil(when / self._resolution)
        if item.bucket is None:
            self._file(item, bucket)
        elif bucket < item.bucket:
            self._unfile(item)
            self._file(item, bucket)
        # else it is filed in an earlier bucket and is re-filed when that one comes due

    def clear(self, item: Expiring) -> None:
        """No deadline for ``item``."""
        item.deadline = None
        if item.bucket is not None:
            self._unfile(item)

    def _unfile(self, item: Expiring) -> None:
        assert item.bucket is not None
        items = self._buckets.get(item.bucket)
        if items is not None:
            items.pop(item, None)
            if not items:
                del self._buckets[item.bucket]  # the timer finds nothing due and moves on
        item.bucket = None

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._buckets.clear()

    def _file(self, item: Expiring, bucket: int) -> None:
        item.bucket = bucket
        items = self._buckets.get(bucket)
        if items is None:
            self._buckets[bucket] = {item: None}
            if not self._due_now and (self._timer_bucket is None or bucket < self._timer_bucket):
                self._schedule(bucket)
        else:
            items[item] = None

    def _schedule(self, bucket: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_bucket = bucket
        self._timer = self._loop.call_at(bucket * self._resolution, self._due)

    def _due(self) -> None:
        self._timer = None
        self._timer_bucket = None
        now = self._loop.time()
        budget = _EXPIRIES_PER_TURN
        self._due_now = True
        try:
            for bucket in sorted(key for key in self._buckets if key * self._resolution <= now):
                items = self._buckets.get(bucket)
                if items is None:
                    continue  # emptied by an earlier expiry (cleared deadlines)
                while items and budget:  # an expiry may clear others of the bucket: one at a time
                    item = next(iter(items))
                    del items[item]
                    item.bucket = None
                    deadline = item.deadline
                    if deadline is None:
                        continue
                    if deadline <= now:
                        item.deadline = None
                        budget -= 1
                        item.expired()
                    else:
                        self._file(item, math.ceil(deadline / self._resolution))
                if not items:
                    self._buckets.pop(bucket, None)
                if not budget:
                    break
        finally:
            self._due_now = False
            if not budget and self._buckets:  # more are due: next turn, after what else is ready
                self._timer_bucket = min(self._buckets)
                self._timer = self._loop.call_soon(self._due)
            elif self._buckets:
                self._schedule(min(self._buckets))
