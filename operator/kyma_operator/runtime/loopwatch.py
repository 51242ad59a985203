"""How late the event loop runs: a timer that should fire every ``interval`` and logs when it did not.

Why: Lease renewals (leader election, shard Leases) run on the event loop, and a renewal that is
late past the renew deadline fences the replica or, for the leader, ends the process. Whether a
late renewal was the API server's doing or this process's (a callback that did not yield: a large
``json.loads``, a long transform; or a process that got no CPU) cannot be told from the renewal
alone. This watch tells: a stall of the loop is logged with how much CPU the loop's thread spent
in it (near the stall's length: our own code held the loop; far below it: the process was waiting
for a CPU), and every stall is observed in ``kyma_operator_event_loop_stall_seconds``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Histogram

from kyma_operator.runtime.clock import Clock, RealClock

log = logging.getLogger(__name__)


class LoopWatch:
    """Sleeps ``interval`` over and over; a wake-up later than ``report_over`` is a stall."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        cpu_now: Callable[[], float] = time.thread_time,
        interval: float = 0.25,
        report_over: float = 0.5,
        registry: CollectorRegistry | None = None,
    ) -> None:
        if interval <= 0 or report_over <= 0:
            raise ValueError("interval and report_over must be positive")
        self.clock = clock or RealClock()
        self._cpu_now = cpu_now
        self.interval = interval
        self.report_over = report_over
        self.stalls: list[tuple[float, float, float]] = []
        """(monotonic start, seconds late, CPU seconds of the loop's thread meanwhile) of the
        latest stalls (at most 100)."""
        self.longest = 0.0
        self._histogram = Histogram(
            "kyma_operator_event_loop_stall_seconds",
            "How much later than due the event loop ran a periodic timer (reported above 0.5 s).",
            buckets=(0.5, 1.0, 2.0, 3.0, 5.0, 7.0, 10.0, 20.0),
            registry=registry if registry is not None else CollectorRegistry(),
        )

    async def run(self) -> None:
        """Until cancelled."""
        while True:
            await self.tick()

    async def tick(self) -> float:
        """One sleep; returns how late it woke (seconds)."""
        started = self.clock.now()
        cpu = self._cpu_now()
        await self.clock.sleep(self.interval)
        late = self.clock.now() - started - self.interval
        if late > self.report_over:
            spent = self._cpu_now() - cpu
            self.longest = max(self.longest, late)
            self.stalls = [*self.stalls[-99:], (started, late, spent)]
            self._histogram.observe(late)
            log.warning(
                "event loop stalled %.2f s (due at monotonic %.3f; its thread used %.2f s CPU meanwhile)",
                late,
                started + self.interval,
                spent,
            )
        return late
