"""Poll with a deadline instead of sleeping: the one waiting helper for all integration tests.

Real API servers, informers and agents converge asynchronously; a test states the condition it
waits for and how long it may take, and fails with that description when it does not happen.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")


@overload
async def eventually(
    probe: Callable[[], Awaitable[T | None]], what: str = "", *, within: float = 15.0, interval: float = 0.02
) -> T: ...


@overload
async def eventually(
    probe: Callable[[], T | None], what: str = "", *, within: float = 15.0, interval: float = 0.02
) -> T: ...


async def eventually(
    probe: Callable[[], Any],
    what: str = "",
    *,
    within: float = 15.0,
    interval: float = 0.02,
) -> Any:
    """Call ``probe`` (sync or async) until it returns something truthy and return that value;
    raise ``AssertionError`` naming ``what`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    last: Any = None
    while True:
        outcome = probe()
        last = await outcome if inspect.isawaitable(outcome) else outcome
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {within}s waiting for {what or getattr(probe, '__name__', probe)}"
                f" (last: {last!r})"
            )
        await asyncio.sleep(interval)
