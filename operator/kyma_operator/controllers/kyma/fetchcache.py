"""A bounded cache of slow look-ups: concurrent misses of one key share one fetch, failures are
remembered with a growing retry delay.

Why: every Kyma that uses a module version needs its component descriptor, and upstream-form
ModuleTemplates carry none: it lives in the OCI registry. A fleet of Kymas reconciled after a new
template (or after a restart) must cost one registry round trip per component version, not one per
Kyma; a registry that is down must not be asked again by every Kyma's retry, yet a later success
must heal every Kyma without a restart. So:

* a hit costs nothing (no I/O, no await on anything slow);
* concurrent misses of one key wait for the same fetch (shielded: one waiter giving up does not
  cancel it for the others); at most ``concurrency`` fetches run at once;
* a failure is kept for ``retry_base * 2**(n-1)`` seconds (at most ``retry_max``) after the n-th
  failure in a row; until then ``get`` re-raises it (``RetryLater`` says when the next attempt is
  allowed), after that the next ``get`` fetches again; a success forgets the failures;
* at most ``max_entries`` keys are kept, least recently used dropped first.

Time comes from an injected ``Clock`` (unit tests move it by hand).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from kyma_operator.runtime.clock import Clock, RealClock

K = TypeVar("K")
V = TypeVar("V")


class RetryLater(Exception):
    """The last fetch of this key failed with ``error``; the next one is allowed at ``retry_at``."""

    def __init__(self, error: BaseException, retry_in: float, failures: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.retry_in = retry_in
        self.failures = failures


@dataclass
class _Failed:
    error: BaseException
    failures: int
    retry_at: float


@dataclass
class _Ok(Generic[V]):
    value: V


class FetchCache(Generic[K, V]):
    def __init__(
        self,
        fetch: Callable[[K], Awaitable[V]],
        *,
        clock: Clock | None = None,
        concurrency: int = 4,
        retry_base: float = 1.0,
        retry_max: float = 60.0,
        max_entries: int = 1024,
        retryable: Callable[[BaseException], bool] = lambda exc: isinstance(exc, Exception),
    ) -> None:
        if concurrency < 1 or max_entries < 1 or retry_base <= 0 or retry_max < retry_base:
            raise ValueError("FetchCache: concurrency/max_entries >= 1, 0 < retry_base <= retry_max")
        self._fetch = fetch
        self._clock = clock or RealClock()
        self._limit = asyncio.Semaphore(concurrency)
        self._retry_base = retry_base
        self._retry_max = retry_max
        self._max = max_entries
        self._retryable = retryable
        self._entries: OrderedDict[K, _Ok[V] | _Failed] = OrderedDict()
        self._inflight: dict[K, asyncio.Task[V]] = {}
        self.fetches = 0
        """Fetches started (a coalesced miss counts once)."""

    def __len__(self) -> int:
        return len(self._entries)

    def peek(self, key: K) -> V | None:
        """The cached value of ``key`` (no fetch, no failure)."""
        entry = self._entries.get(key)
        return entry.value if isinstance(entry, _Ok) else None

    def forget(self, key: K) -> None:
        self._entries.pop(key, None)

    async def get(self, key: K) -> V:
        """The value of ``key``: cached, fetched (shared with concurrent callers), or the remembered
        failure as ``RetryLater`` while its retry delay runs."""
        entry = self._entries.get(key)
        if isinstance(entry, _Ok):
            self._entries.move_to_end(key)
            return entry.value
        if isinstance(entry, _Failed):
            wait = entry.retry_at - self._clock.now()
            if wait > 0:
                raise RetryLater(entry.error, wait, entry.failures)
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(self._run(key, entry.failures if isinstance(entry, _Failed) else 0))
            task.add_done_callback(_retrieve)  # every waiter may have given up: no "never retrieved"
            self._inflight[key] = task
        return await asyncio.shield(task)

    async def _run(self, key: K, failures: int) -> V:
        try:
            async with self._limit:
                self.fetches += 1
                value = await self._fetch(key)
        except BaseException as exc:
            if self._retryable(exc):
                failures += 1
                delay = min(self._retry_base * 2 ** (failures - 1), self._retry_max)
                self._store(key, _Failed(exc, failures, self._clock.now() + delay))
                raise RetryLater(exc, delay, failures) from exc
            raise
        else:
            self._store(key, _Ok(value))
            return value
        finally:
            self._inflight.pop(key, None)

    def _store(self, key: K, entry: _Ok[V] | _Failed) -> None:
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)


def _retrieve(task: asyncio.Task[V]) -> None:
    if not task.cancelled():
        task.exception()
