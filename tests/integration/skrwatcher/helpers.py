"""Small test helpers: a settable wall clock and polling with a deadline."""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class WallClock:
    """A wall clock that only moves when told to (the stores take ``Callable[[], datetime]``)."""

    def __init__(self, start: datetime.datetime) -> None:
        self.current = start

    def __call__(self) -> datetime.datetime:
        return self.current

    def advance(self, delta: datetime.timedelta) -> None:
        self.current += delta


async def eventually(
    probe: Callable[[], Awaitable[T | None]],
    *,
    deadline: float = 10.0,
    interval: float = 0.05,
    what: str = "",
) -> T:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` after ``deadline`` seconds."""
    until = time.monotonic() + deadline
    last: T | None = None
    while time.monotonic() < until:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {deadline}s waiting for {what or probe!r} (last: {last!r})")
