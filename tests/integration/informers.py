"""Informers run for the length of a test block: started, synced (with a deadline), then cancelled
and drained, so that no watch outlives its test."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable

from kyma_operator.runtime.informer import Informer


@contextlib.asynccontextmanager
async def running_informers(informers: Iterable[Informer], *, within: float = 10.0) -> AsyncIterator[None]:
    started = list(informers)
    tasks = [asyncio.create_task(informer.run()) for informer in started]
    try:
        for informer in started:
            assert await informer.wait_synced(within), f"informer {informer.name} not synced in {within} s"
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
