"""The operator's heap trimming: freed memory back to the kernel once a burst of work is over.

Why: a replica's bursts (the shard lists at start-up or after a hand-over, a start-up round or a
full resync of thousands of Kymas) allocate list bodies, decoded items, patches and models, and
free most of it again between the cached objects that stay. glibc keeps those holes resident, so
a settled replica stayed at its burst's high-water mark instead of what its caches hold (issue 28:
memory per replica should follow the shards it holds). Measured at 5,000 Kymas
(``benchmarks/results/scale.md``, "heap trim"): three scoped replicas settled at +61 / +49 / +51 MB
over their base instead of +70 / +55 / +54 MB; one replica alone +161 instead of +163 MB; each
trim took 0.5-2.4 ms. The trim itself is ``kyma_wire.heap_trim``; this module decides when and
counts it in metrics; it runs on real time (a clock can be injected for tests).

When: every ``INTERVAL`` seconds, if the process spent ``CPU_SECONDS`` of CPU since the last trim
and the interval just past took less than ``QUIET_CPU_SECONDS`` (the burst is over; trimming in
the middle of one hands back pages it faults in again). An idle replica (0.01-0.03 CPU s/s)
trims every few minutes at most. A replica that releases a shard drops that shard's cache with
little CPU spent, so the release asks for a trim (``request``, wired in ``app.py``): the next quiet
check returns what glibc holds free of it, instead of waiting for 5 CPU seconds of other work. Most
of a dropped cache is small objects whose pools Python keeps for reuse, so the gain is small:
measured at 5,000 Kymas, 25 s after a hand-over of 5 shards, the two holders were 2-4 MB lower
than without the request (``benchmarks/shard_bench.py``, one run each; ``results/scale.md``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter

from kyma_operator.runtime.clock import Clock, RealClock
from kyma_wire.heap_trim import HeapTrimmer, libc_trim

INTERVAL = 10.0
"""Seconds between two checks."""
CPU_SECONDS = 5.0
"""CPU seconds spent since the last trim that make a check trim."""
QUIET_CPU_SECONDS = 2.5
"""... once the interval before the check took less CPU than this (a quarter of a core)."""


class HeapTrimming:
    """A runnable (every replica, leader or not) that trims the heap after each burst of work."""

    def __init__(
        self,
        *,
        registry: CollectorRegistry,
        clock: Clock | None = None,
        cpu_now: Callable[[], float] = time.process_time,
        trim: Callable[[], int] | None = None,
    ) -> None:
        """``trim``: the C library's ``malloc_trim`` by default (none: nothing is ever trimmed)."""
        self.clock = clock or RealClock()
        self._trims = Counter(
            "kyma_operator_heap_trims",
            "Times freed heap memory was returned to the kernel after a burst of work (malloc_trim).",
            registry=registry,
        )
        self._seconds = Counter(
            "kyma_operator_heap_trim_seconds",
            "Seconds the event loop spent returning freed heap memory to the kernel.",
            registry=registry,
        )
        self.trimmer = HeapTrimmer(
            cpu_now,
            trim if trim is not None else libc_trim(),
            min_work=CPU_SECONDS,
            quiet=QUIET_CPU_SECONDS,
            observe=self._observe,
        )

    def _observe(self, seconds: float) -> None:
        self._trims.inc()
        self._seconds.inc(seconds)

    def request(self, _shard: int | None = None) -> None:
        """Trim at the next quiet check, however little CPU was spent since the last trim (a
        shard's cache was dropped); ``_shard``: as the coordinator's ``on_released`` passes it."""
        self.trimmer.request()

    async def run(self) -> None:
        """Until cancelled."""
        await self.trimmer.every(INTERVAL, self.clock.sleep)
