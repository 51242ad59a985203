"""Time as a dependency, so queue delays, backoff and leases can be tested without sleeping.

Everything in the runtime that waits or measures durations takes a ``Clock``. ``RealClock`` uses
the event loop's monotonic time; ``FakeClock`` only moves when a test calls ``advance``, waking
exactly the sleepers and timers that became due, in deadline order.
"""

from __future__ import annotations

import asyncio
import datetime
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable


def utc_now() -> datetime.datetime:
    """Wall-clock time for timestamps written into objects (conditions, status); the one default of
    every ``wall_clock`` parameter (tests inject a fixed one)."""
    return datetime.datetime.now(datetime.UTC)


@runtime_checkable
class TimerHandle(Protocol):
    """A scheduled callback that can still be cancelled."""

    def cancel(self) -> None: ...


@runtime_checkable
class Clock(Protocol):
    """Monotonic time in seconds plus the ways to wait for it."""

    def now(self) -> float:
        """Monotonic seconds (arbitrary origin)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return after ``seconds`` of this clock's time."""
        ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` (in the event loop) after ``delay`` seconds of this clock's time."""
        ...


class RealClock:
    """Wall-independent monotonic time of the running system."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(max(0.0, delay), callback)


class _FakeTimer:
    __slots__ = ("callback", "cancelled", "deadline")

    def __init__(self, deadline: float, callback: Callable[[], None]) -> None:
        self.deadline = deadline
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A clock that stands still until ``advance`` is called.

    ``advance(seconds)`` moves time forward and runs every due timer callback synchronously, in
    deadline order (ties in scheduling order); coroutines blocked in ``sleep`` are resumed the next
    time the test yields to the event loop (``await asyncio.sleep(0)`` or ``await settle()``), or,
    sleeping on another thread's loop (``runtime/loopthread``), once that loop gets to it.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _FakeTimer]] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()
        """Guards the timers: a sleeper on another thread's loop adds to them while a test advances."""

    def now(self) -> float:
        return self._now

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        with self._lock:
            timer = _FakeTimer(self._now + max(0.0, delay), callback)
            heapq.heappush(self._timers, (timer.deadline, next(self._seq), timer))
        return timer

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        sleeper = threading.get_ident()

        def resolve() -> None:
            if not future.done():
                future.set_result(None)

        def wake() -> None:  # ``advance`` may be called from another thread than the sleeper's loop
            if threading.get_ident() == sleeper:
                resolve()
            else:
                loop.call_soon_threadsafe(resolve)

        timer = self.call_later(seconds, wake)
        try:
            await future
        finally:
            timer.cancel()

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` and fire everything that became due."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        target = self._now + seconds
        while True:
            with self._lock:
                if not self._timers or self._timers[0][0] > target:
                    break
                deadline, _, timer = heapq.heappop(self._timers)
                self._now = max(self._now, deadline)
            if not timer.cancelled:
                timer.callback()
        self._now = target

    @property
    def pending(self) -> int:
        """Number of scheduled, not cancelled timers and sleepers."""
        with self._lock:
            return sum(1 for _, _, timer in self._timers if not timer.cancelled)

    def next_deadline(self) -> float | None:
        """When the earliest pending timer fires, or None."""
        with self._lock:
            live = [deadline for deadline, _, timer in self._timers if not timer.cancelled]
        return min(live) if live else None

    async def wait_for_pending(self, count: int = 1, *, max_loops: int = 10_000) -> None:
        """Yield to the event loop until at least ``count`` timers/sleepers are pending.

        Lets a test wait until the code under test has reached its ``sleep`` without real waiting;
        raises if that never happens within ``max_loops`` loop iterations.
        """
        for _ in range(max_loops):
            if self.pending >= count:
                return
            await asyncio.sleep(0)
        raise AssertionError(f"expected {count} pending timers, have {self.pending}")


async def settle(loops: int = 20) -> None:
    """Let ready tasks run (``loops`` event-loop iterations) without letting any real time pass."""
    for _ in range(loops):
        await asyncio.sleep(0)
