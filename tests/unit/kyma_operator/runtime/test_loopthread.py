"""The Lease thread's event loop: outcomes reach the caller's loop, work there goes on while the
caller's loop is blocked, and a cancelled caller waits for the clean-up there."""

from __future__ import annotations

import asyncio
import threading

import pytest

from kyma_operator.runtime.clock import FakeClock
from kyma_operator.runtime.loopthread import LoopThread


async def _until(check: threading.Event, what: str) -> None:
    """Wait (off the loop, with a deadline) until the thread has done something."""
    assert await asyncio.to_thread(check.wait, 10), what


async def test_a_coroutine_sleeping_on_an_injected_clock_there_returns_its_result_here(
    lease_thread: LoopThread,
) -> None:
    clock = FakeClock()
    asleep = threading.Event()

    async def renew() -> str:
        assert threading.current_thread().name == "test-leases"
        sleeping = asyncio.ensure_future(clock.sleep(1.5))
        asyncio.get_running_loop().call_soon(asleep.set)
        await sleeping
        return f"renewed at {clock.now():.1f}"

    task = asyncio.create_task(lease_thread.run(renew()))
    await _until(asleep, "the renewal sleeps")
    clock.advance(1.5)  # from this thread: the sleeper is woken on its own loop
    assert await task == "renewed at 1001.5"


async def test_the_thread_goes_on_while_the_callers_loop_is_blocked(lease_thread: LoopThread) -> None:
    done = threading.Event()

    async def renew() -> None:
        for _ in range(3):
            await asyncio.sleep(0)
        done.set()

    task = asyncio.create_task(lease_thread.run(renew()))
    await asyncio.sleep(0)  # handed over to the thread
    # a callback that does not yield (a large json.loads): this loop runs nothing meanwhile
    assert done.wait(10), "the thread's loop did not need this one"
    await task


async def test_an_error_there_is_raised_here(lease_thread: LoopThread) -> None:
    async def fail() -> None:
        raise ValueError("409 Conflict")

    with pytest.raises(ValueError, match="409 Conflict"):
        await lease_thread.run(fail())


async def test_cancelling_the_caller_cancels_there_and_waits_for_the_clean_up(
    lease_thread: LoopThread,
) -> None:
    clock = FakeClock()
    asleep = threading.Event()
    cleaned: list[str] = []

    async def lead() -> None:
        try:
            sleeping = asyncio.ensure_future(clock.sleep(3600))
            asyncio.get_running_loop().call_soon(asleep.set)
            await sleeping
        finally:
            await asyncio.sleep(0)  # the release of the Lease, awaited
            cleaned.append(threading.current_thread().name)

    task = asyncio.create_task(lease_thread.run(lead()))
    await _until(asleep, "leading")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == ["test-leases"], "the clean-up ran there, before the caller went on"


async def test_run_needs_a_started_thread() -> None:
    with pytest.raises(RuntimeError, match="not running"):
        await LoopThread("idle").run(asyncio.sleep(0))
