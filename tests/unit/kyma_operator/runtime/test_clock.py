"""FakeClock: deterministic time for every runtime test."""

from __future__ import annotations

import asyncio

import pytest

from kyma_operator.runtime import FakeClock, settle


async def test_sleepers_wake_in_deadline_order_only_when_advanced() -> None:
    clock = FakeClock(start=0.0)
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append((name, clock.now()))

    tasks = [asyncio.create_task(sleeper(n, s)) for n, s in (("b", 2.0), ("a", 1.0), ("c", 3.0))]
    await clock.wait_for_pending(3)
    clock.advance(0.5)
    await settle()
    assert woke == []
    clock.advance(2.0)
    await settle()
    assert [name for name, _ in woke] == ["a", "b"]
    clock.advance(1.0)
    await asyncio.gather(*tasks)
    assert [name for name, _ in woke] == ["a", "b", "c"]
    assert clock.now() == 3.5


async def test_call_later_runs_in_order_and_can_be_cancelled() -> None:
    clock = FakeClock(start=0.0)
    fired: list[tuple[str, float]] = []
    clock.call_later(2, lambda: fired.append(("two", clock.now())))
    handle = clock.call_later(1, lambda: fired.append(("one", clock.now())))
    clock.call_later(1, lambda: fired.append(("one-b", clock.now())))
    handle.cancel()
    assert clock.pending == 2
    assert clock.next_deadline() == 1.0
    clock.advance(5)
    assert fired == [("one-b", 1.0), ("two", 2.0)]


async def test_cancelled_sleep_leaves_no_timer() -> None:
    clock = FakeClock()
    task = asyncio.create_task(clock.sleep(1.0))  # virtual seconds: FakeClock never waits
    await clock.wait_for_pending(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert clock.pending == 0


def test_time_does_not_go_back() -> None:
    with pytest.raises(ValueError):
        FakeClock().advance(-1)
