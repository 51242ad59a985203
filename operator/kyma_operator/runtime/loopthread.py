"""An event loop in a thread of its own, for work that must not wait behind the main loop's.

Why: Lease renewals are fenced by time (``runtime/leader.py``: a renewal later than the renew
deadline pauses the leader's work, and one that fails for that long ends the process). On the main
event loop a renewal's answer waits until every callback ready before it has run; at start-up with
``--shard-scoped-caches`` those are the shard lists' decoding (item by item since
``runtime/liststream``; before it one ``json.loads`` of up to 23 MB each) and the informers' first
handler calls. In a thread with a loop of its own the renewal waits for at most one such call:
CPython hands the GIL to a waiting thread every ``sys.getswitchinterval()`` (5 ms) between
bytecodes, and a single C call (one item's ``raw_decode``) is the longest it can be held. What
runs here must not touch the main loop's objects: it uses its own HTTP client, publishes plain
values (a float, a bool: atomic under the GIL) and calls back into the main loop only through
``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class LoopThread:
    """A daemon thread running one event loop; ``run`` awaits a coroutine there from another loop."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError(f"loop thread {self.name} is not running")
        return self._loop

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread and its loop (returns once the loop runs)."""
        if self.running:
            return
        started = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            loop.call_soon(started.set)
            try:
                loop.run_forever()
                pending = asyncio.all_tasks(loop)
                for task in pending:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

        self._thread = threading.Thread(target=main, name=self.name, daemon=True)
        self._thread.start()
        started.wait()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on this thread's loop and return its outcome to the calling loop.

        Cancelling the caller cancels ``coro`` there and waits until it has ended (its clean-up,
        such as releasing a Lease, is done when this returns)."""
        if self._loop is None:
            coro.close()  # never started: no "never awaited" warning
            raise RuntimeError(f"loop thread {self.name} is not running")
        loop = self._loop
        caller = asyncio.get_running_loop()
        outcome: asyncio.Future[T] = caller.create_future()
        box: list[asyncio.Task[T]] = []

        def copy(task: asyncio.Task[T]) -> None:
            if outcome.done():
                return
            if task.cancelled():
                outcome.cancel()
            elif (exc := task.exception()) is not None:
                outcome.set_exception(exc)
            else:
                outcome.set_result(task.result())

        def begin() -> None:  # in the thread; always before ``cancel`` (FIFO)
            task = loop.create_task(coro)
            box.append(task)
            task.add_done_callback(lambda done: caller.call_soon_threadsafe(copy, done))

        def cancel() -> None:  # in the thread
            for task in box:
                task.cancel()

        loop.call_soon_threadsafe(begin)
        try:
            return await asyncio.shield(outcome)
        except asyncio.CancelledError:
            if not outcome.done():
                loop.call_soon_threadsafe(cancel)
                with contextlib.suppress(BaseException):
                    await outcome
            raise

    async def stop(self, timeout: float = 10.0) -> None:  # noqa: ASYNC109
        """Stop the loop (its tasks are cancelled) and wait for the thread to end."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        with contextlib.suppress(RuntimeError):  # already closed
            loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, timeout)
        if thread.is_alive():
            log.warning("loop thread %s did not stop within %.0f s", self.name, timeout)
        self._thread = None
        self._loop = None
