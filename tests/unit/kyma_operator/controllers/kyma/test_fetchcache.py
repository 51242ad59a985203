"""FetchCache: hits cost nothing, concurrent misses share one fetch, concurrency is bounded,
failures are remembered with a growing retry delay on an injected clock, and a later success heals."""

from __future__ import annotations

import asyncio

import pytest

from kyma_operator.controllers.kyma.fetchcache import FetchCache, RetryLater
from kyma_operator.runtime.clock import FakeClock, settle


class Source:
    """A fetch whose answers the test releases by hand."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.running = 0
        self.peak = 0
        self.gates: dict[str, asyncio.Event] = {}
        self.failing: set[str] = set()

    def gate(self, key: str) -> asyncio.Event:
        return self.gates.setdefault(key, asyncio.Event())

    async def fetch(self, key: str) -> str:
        self.calls.append(key)
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await self.gate(key).wait()
        finally:
            self.running -= 1
        if key in self.failing:
            raise RuntimeError(f"{key} is down")
        return f"value of {key}"


async def test_concurrent_misses_share_one_fetch_and_hits_cost_nothing() -> None:
    source = Source()
    cache: FetchCache[str, str] = FetchCache(source.fetch, clock=FakeClock())
    waiters = [asyncio.create_task(cache.get("a")) for _ in range(50)]
    await settle()
    assert source.calls == ["a"]
    source.gate("a").set()
    assert await asyncio.gather(*waiters) == ["value of a"] * 50
    assert await cache.get("a") == "value of a"
    assert cache.peek("a") == "value of a"
    assert source.calls == ["a"] and cache.fetches == 1


async def test_a_cancelled_waiter_does_not_cancel_the_fetch_for_the_others() -> None:
    source = Source()
    cache: FetchCache[str, str] = FetchCache(source.fetch, clock=FakeClock())
    first = asyncio.create_task(cache.get("a"))
    second = asyncio.create_task(cache.get("a"))
    await settle()
    first.cancel()
    await settle()
    source.gate("a").set()
    assert await second == "value of a"
    assert first.cancelled()
    assert source.calls == ["a"]


async def test_at_most_concurrency_fetches_run_at_once() -> None:
    source = Source()
    cache: FetchCache[str, str] = FetchCache(source.fetch, clock=FakeClock(), concurrency=2)
    tasks = [asyncio.create_task(cache.get(k)) for k in "abcde"]
    await settle()
    assert source.running == 2
    for key in "abcde":
        source.gate(key).set()
    assert len(await asyncio.gather(*tasks)) == 5
    assert source.peak == 2


async def test_failures_wait_out_a_growing_delay_then_a_success_heals() -> None:
    clock = FakeClock()
    source = Source()
    source.failing.add("a")
    source.gate("a").set()
    cache: FetchCache[str, str] = FetchCache(source.fetch, clock=clock, retry_base=1.0, retry_max=4.0)

    with pytest.raises(RetryLater) as first:
        await cache.get("a")
    assert first.value.failures == 1 and first.value.retry_in == 1.0
    assert str(first.value.error) == "a is down"
    # within the delay: the remembered failure, no new fetch
    clock.advance(0.5)
    with pytest.raises(RetryLater) as again:
        await cache.get("a")
    assert again.value.retry_in == pytest.approx(0.5) and len(source.calls) == 1
    clock.advance(0.5)
    with pytest.raises(RetryLater) as second:
        await cache.get("a")
    assert second.value.failures == 2 and second.value.retry_in == 2.0 and len(source.calls) == 2
    for delay in (2.0, 4.0, 4.0):  # doubles, capped at retry_max
        clock.advance(delay)
        with pytest.raises(RetryLater) as later:
            await cache.get("a")
        assert later.value.retry_in == min(2 * delay, 4.0)
    assert len(source.calls) == 5
    # the registry is back: the next attempt after the delay heals, and the failures are forgotten
    source.failing.clear()
    clock.advance(4.0)
    assert await cache.get("a") == "value of a"
    assert len(source.calls) == 6
    assert await cache.get("a") == "value of a" and len(source.calls) == 6


async def test_errors_that_are_not_retryable_are_not_remembered() -> None:
    calls = 0

    async def fetch(key: str) -> str:
        nonlocal calls
        calls += 1
        raise KeyError(key)

    cache: FetchCache[str, str] = FetchCache(
        fetch, clock=FakeClock(), retryable=lambda exc: isinstance(exc, RuntimeError)
    )
    for _ in range(2):
        with pytest.raises(KeyError):
            await cache.get("a")
    assert calls == 2 and len(cache) == 0


async def test_least_recently_used_entries_go_beyond_max_entries() -> None:
    source = Source()
    for key in "abc":
        source.gate(key).set()
    cache: FetchCache[str, str] = FetchCache(source.fetch, clock=FakeClock(), max_entries=2)
    await cache.get("a")
    await cache.get("b")
    await cache.get("a")  # a is now the most recently used
    await cache.get("c")
    assert len(cache) == 2
    assert cache.peek("a") is not None and cache.peek("b") is None and cache.peek("c") is not None


def test_invalid_settings_are_refused() -> None:
    async def fetch(key: str) -> str:
        return key

    with pytest.raises(ValueError):
        FetchCache(fetch, concurrency=0)
    with pytest.raises(ValueError):
        FetchCache(fetch, retry_base=2.0, retry_max=1.0)
