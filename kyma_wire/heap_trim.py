"""Give the heap's free pages back to the kernel after bursts of work (glibc ``malloc_trim``).

Why: blocks that ``malloc`` hands out (TLS state and buffers, list bodies, JSON strings, large dict
tables) are freed between live ones after a burst, where ``free`` never returns them to the kernel:
the process keeps its high-water mark. Measured:

* the agent (``benchmarks/results/agent_hostile.md``, issue 26): with 1,000 hostile connections
  held and reconnecting, 21 of its 49 MiB of heap were free but resident, and another 20 MiB after
  the attack ended; ``malloc_trim(0)`` returned both;
* the operator (``benchmarks/results/scale.md``, issue 28): after the shard lists and the start-up
  round of 5,000 Kymas, a trim returned 5-9 MB of each of three sharded replicas' (of +49-61 MB over
  their base) and 2 MB of one replica's, in 0.5-2.4 ms.

``malloc_trim`` walks the free blocks and costs the event loop roughly 0.4 ms per MiB returned, so a
trimmer runs it at most once per check interval and only after enough work since it last ran
(connections closed for the agent; CPU seconds spent for the operator, once a burst is over): an
idle process never pays it. A process that just let go of much memory at once (the operator dropping
a shard's cache when the shard moves to another replica) asks for a trim with ``request()``: the
next check trims however little work was done since the last one. Not on glibc (no
``malloc_trim``): nothing is trimmed.
"""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

__all__ = ["HeapTrimmer", "libc_trim"]


def libc_trim() -> Callable[[], int] | None:
    """``malloc_trim(0)`` of the C library, or None where there is none (not glibc)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: int(trim(0))


class HeapTrimmer:
    """Trims the heap when ``work()`` (a count that only grows) grew by ``min_work`` since the last
    trim; with ``quiet``, only once it grew by less than ``quiet`` since the check before (the burst
    is over: trimming in the middle of one would hand back pages the burst faults in again)."""

    def __init__(
        self,
        work: Callable[[], float],
        trim: Callable[[], int] | None,
        *,
        min_work: float,
        quiet: float | None = None,
        observe: Callable[[float], None] | None = None,
    ) -> None:
        """``observe``: called with the seconds each trim took (a metric)."""
        self._work = work
        self._trim = trim
        self._min_work = min_work
        self._quiet = quiet
        self._observe = observe
        self._seen = self._checked = work()
        self._requested = False
        self.trims = 0

    def request(self) -> None:
        """Trim at the next check even if less than ``min_work`` was done since the last trim
        (still only once it is quiet, with ``quiet``): much memory was just let go of."""
        self._requested = True

    def check(self) -> bool:
        """Trim now if enough work was done since the last trim or a trim was requested (and it
        has calmed down, with ``quiet``); True when it trimmed."""
        work = self._work()
        since_check, self._checked = work - self._checked, work
        if self._trim is None or (work - self._seen < self._min_work and not self._requested):
            return False
        if self._quiet is not None and since_check >= self._quiet:
            return False
        done, self._seen = work - self._seen, work
        self._requested = False
        started = time.perf_counter()
        returned = self._trim()
        took = time.perf_counter() - started
        self.trims += 1
        if self._observe is not None:
            self._observe(took)
        log.debug(
            "heap trimmed after %g work in %.1f ms: %s",
            done,
            took * 1e3,
            "memory returned" if returned else "none to return",
        )
        return True

    async def every(self, interval: float, sleep: Callable[[float], Awaitable[None]]) -> None:
        """``check()`` every ``interval`` seconds (``sleep``: the caller's clock), until cancelled."""
        while True:
            await sleep(interval)
            self.check()
