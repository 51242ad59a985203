"""WorkQueue: client-go semantics on a fake clock (no real waiting anywhere)."""

from __future__ import annotations

import asyncio
import random

import pytest
from prometheus_client import CollectorRegistry

from kyma_operator.runtime import (
    FakeClock,
    ItemExponentialFailureRateLimiter,
    QueueShutDown,
    RuntimeMetrics,
    WorkQueue,
    settle,
)


def make_queue(clock: FakeClock | None = None, **kwargs: object) -> WorkQueue[str]:
    clock = clock or FakeClock()
    return WorkQueue("test", clock=clock, **kwargs)  # type: ignore[arg-type]


async def test_dedup_before_processing() -> None:
    queue = make_queue()
    for key in ["a", "b", "a", "a", "c", "b"]:
        queue.add(key)
    assert len(queue) == 3
    assert [await queue.get() for _ in range(3)] == ["a", "b", "c"]


async def test_readd_while_processing_is_deferred_until_done() -> None:
    queue = make_queue()
    queue.add("a")
    key = await queue.get()
    queue.add("a")
    queue.add("a")
    assert len(queue) == 0, "a key being processed must not be handed out again"
    assert queue.get_nowait() is None
    queue.done(key)
    assert len(queue) == 1
    assert await queue.get() == "a"
    queue.done("a")
    assert len(queue) == 0


async def test_one_key_never_in_two_workers() -> None:
    queue = make_queue()
    active: set[str] = set()
    overlaps: list[str] = []
    processed: list[str] = []
    release = asyncio.Event()

    async def worker() -> None:
        while True:
            try:
                key = await queue.get()
            except QueueShutDown:
                return
            if key in active:
                overlaps.append(key)
            active.add(key)
            await release.wait()
            processed.append(key)
            active.discard(key)
            queue.done(key)

    workers = [asyncio.create_task(worker()) for _ in range(4)]
    queue.add("a")
    await settle()
    for _ in range(5):
        queue.add("a")  # while "a" is processing
        queue.add("b")
        await settle()
    assert queue.processing == {"a", "b"}
    release.set()
    await queue.shutdown(drain=True)
    await asyncio.gather(*workers)
    assert overlaps == []
    assert sorted(processed) == ["a", "a", "b", "b"]  # each re-added while processing: once more


async def test_getters_block_until_add_and_are_served_fifo() -> None:
    queue = make_queue()
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await settle()
    assert not first.done() and not second.done()
    queue.add("x")
    queue.add("y")
    assert {await first, await second} == {"x", "y"}


async def test_cancelled_getter_does_not_lose_a_key() -> None:
    queue = make_queue()
    getter = asyncio.create_task(queue.get())
    await settle()
    getter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await getter
    queue.add("x")
    assert await queue.get() == "x"


async def test_delayed_adds_fire_in_deadline_order() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add_after("late", 3.0)
    queue.add_after("early", 1.0)
    queue.add_after("middle", 2.0)
    queue.add_after("now", 0)
    assert [queue.get_nowait()] == ["now"]
    assert queue.waiting == 3
    clock.advance(0.999)
    assert len(queue) == 0
    clock.advance(0.001)
    assert queue.get_nowait() == "early"
    clock.advance(5)
    assert [queue.get_nowait(), queue.get_nowait()] == ["middle", "late"]
    assert queue.waiting == 0


async def test_add_after_keeps_the_earliest_deadline() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add_after("a", 5.0)
    queue.add_after("a", 1.0)  # earlier wins
    queue.add_after("a", 3.0)  # later is ignored
    assert queue.ready_at("a") == clock.now() + 1.0
    clock.advance(1.0)
    assert queue.get_nowait() == "a"
    queue.done("a")
    clock.advance(10)
    assert len(queue) == 0, "the superseded deadlines must not add the key again"


async def test_delayed_add_of_queued_key_dedups() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("a")
    queue.add_after("a", 1.0)
    clock.advance(1.0)
    assert len(queue) == 1


async def test_rate_limited_adds_back_off_exponentially_and_forget_resets() -> None:
    clock = FakeClock()
    queue = make_queue(clock, rate_limiter=ItemExponentialFailureRateLimiter(0.005, 1000.0))
    expected = [0.005, 0.01, 0.02, 0.04]
    for delay in expected:
        start = clock.now()
        queue.add_rate_limited("a")
        assert queue.ready_at("a") == pytest.approx(start + delay)
        clock.advance(delay / 2)
        assert len(queue) == 0
        clock.advance(delay / 2)
        assert queue.get_nowait() == "a"
        queue.done("a")
    assert queue.num_requeues("a") == 4
    queue.forget("a")
    assert queue.num_requeues("a") == 0
    queue.add_rate_limited("a")
    assert queue.ready_at("a") == pytest.approx(clock.now() + 0.005)


async def test_shutdown_drains_in_flight_and_queued_then_get_raises() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("a")
    queue.add("b")
    queue.add_after("delayed", 1.0)
    key = await queue.get()
    drained = asyncio.create_task(queue.shutdown(drain=True))
    await settle()
    assert not drained.done()
    queue.add("new")  # ignored after shutdown
    assert await queue.get() == "b"  # still handed out
    queue.done("b")
    await settle()
    assert not drained.done(), "must wait for the in-flight key"
    queue.done(key)
    await drained
    clock.advance(5)
    with pytest.raises(QueueShutDown):
        await queue.get()
    assert queue.waiting == 0


async def test_shutdown_wakes_blocked_getters() -> None:
    queue = make_queue()
    getters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await settle()
    await queue.shutdown(drain=False)
    for getter in getters:
        with pytest.raises(QueueShutDown):
            await getter


async def test_metrics_are_reported() -> None:
    clock = FakeClock()
    metrics = RuntimeMetrics(CollectorRegistry())
    queue: WorkQueue[str] = WorkQueue("q", clock=clock, metrics=metrics.queue("q"))
    queue.add("a")
    queue.add("a")
    queue.add("b")
    clock.advance(2.0)
    key = await queue.get()
    clock.advance(3.0)
    registry = metrics.registry
    labels = {"controller": "q", "name": "q"}
    assert registry.get_sample_value("workqueue_adds_total", labels) == 2
    assert registry.get_sample_value("workqueue_depth", labels) == 1
    assert registry.get_sample_value("workqueue_unfinished_work_seconds", labels) == 3.0
    assert registry.get_sample_value("workqueue_longest_running_processor_seconds", labels) == 3.0
    queue.done(key)
    queue.add_rate_limited("c")
    assert registry.get_sample_value("workqueue_retries_total", labels) == 1
    assert registry.get_sample_value("workqueue_queue_duration_seconds_count", labels) == 1
    assert registry.get_sample_value("workqueue_queue_duration_seconds_sum", labels) == 2.0
    assert registry.get_sample_value("workqueue_work_duration_seconds_sum", labels) == 3.0
    assert registry.get_sample_value("workqueue_unfinished_work_seconds", labels) == 0.0


def _due(queue: WorkQueue[str]) -> set[str]:
    """Every key handed out now (and done at once)."""
    keys = set()
    while (key := queue.get_nowait()) is not None:
        keys.add(key)
        queue.done(key)
    return keys


async def test_keys_within_their_early_allowance_fall_due_with_a_deadline() -> None:
    clock = FakeClock(start=0.0)
    queue = make_queue(clock)
    queue.add_after("a", 10.0, early=3.0)
    queue.add_after("b", 12.0, early=3.0)  # may come from 9.0
    queue.add_after("c", 14.0, early=3.0)  # may come from 11.0
    queue.add_after("x", 11.5)  # no allowance: exactly at its deadline
    clock.advance(9.999)
    assert _due(queue) == set(), "an allowance alone never fires: nothing before the first deadline"
    clock.advance(0.001)
    assert _due(queue) == {"a", "b"}
    assert queue.waiting == 2
    assert queue.ready_at("c") == 14.0
    clock.advance(1.4)
    assert _due(queue) == set(), "x has no allowance: it does not come with anything early"
    clock.advance(0.1)
    assert _due(queue) == {"x", "c"}
    clock.advance(10.0)
    assert _due(queue) == set(), "the deadlines of keys that fell due early must not add them again"
    assert queue.waiting == 0


async def test_an_earlier_add_without_allowance_takes_the_allowance_away() -> None:
    clock = FakeClock(start=0.0)
    queue = make_queue(clock)
    queue.add_after("a", 10.0, early=8.0)  # may come from 2.0
    queue.add_after("a", 5.0)  # earlier, exact: wins, and its allowance is gone
    queue.add_after("a", 9.0, early=8.0)  # later: ignored
    queue.add_after("z", 4.0)
    clock.advance(4.0)
    assert _due(queue) == {"z"}
    clock.advance(1.0)
    assert _due(queue) == {"a"}
    assert queue.waiting == 0


async def test_an_early_release_follows_the_plain_model_over_random_adds() -> None:
    """The queue against a plain simulation: the timer fires at the earliest deadline among the
    keys still waiting, and then every key whose deadline or earliest time has come falls due."""
    rng = random.Random(7)
    for _ in range(20):
        clock = FakeClock(start=0.0)
        queue = make_queue(clock)
        pending: dict[str, tuple[float, float]] = {}
        for i in range(60):
            delay = rng.uniform(0.5, 50.0)
            early = rng.choice([0.0, 0.0, rng.uniform(0.0, 10.0)])
            queue.add_after(f"k{i}", delay, early=early)
            pending[f"k{i}"] = (delay, delay - min(early, delay))
        while pending:
            fire = min(deadline for deadline, _ in pending.values())
            expected = {
                key for key, (deadline, earliest) in pending.items() if min(deadline, earliest) <= fire
            }
            clock.advance(fire - clock.now())
            assert _due(queue) == expected
            for key in expected:
                del pending[key]
        assert queue.waiting == 0
