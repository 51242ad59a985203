"""The operator's heap trimming: on its clock, after a burst of CPU work once it is over, counted in
the two metrics; and at the next quiet check after a shard was released, however little CPU that
took."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from kyma_operator.runtime import heaptrim
from kyma_operator.runtime.clock import FakeClock
from kyma_operator.runtime.heaptrim import HeapTrimming


class Running:
    """A ``HeapTrimming`` on a ``FakeClock`` with injected CPU time, recording the CPU time of each
    trim."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.registry = CollectorRegistry()
        self.cpu = 0.0
        self.trims: list[float] = []
        self.trimming = HeapTrimming(
            registry=self.registry, clock=self.clock, cpu_now=lambda: self.cpu, trim=self._trim
        )
        self.task = asyncio.create_task(self.trimming.run())

    def _trim(self) -> int:
        self.trims.append(self.cpu)
        return 1

    async def interval(self, cpu_spent: float) -> None:
        await self.clock.wait_for_pending(1)
        self.cpu += cpu_spent
        self.clock.advance(heaptrim.INTERVAL)
        await self.clock.wait_for_pending(1)  # the woken sleeper has checked and sleeps again

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def test_trims_on_its_clock_after_a_burst_once_it_is_quiet() -> None:
    running = Running()
    interval, trims, registry = running.interval, running.trims, running.registry
    await interval(heaptrim.INTERVAL)  # a busy core
    await interval(heaptrim.INTERVAL)
    assert trims == []
    await interval(0.1)  # the burst is over
    assert trims == [2 * heaptrim.INTERVAL + 0.1]
    for _ in range(5):
        await interval(0.2)  # idle: 1 CPU s in all, not enough for another trim
    assert len(trims) == 1
    assert registry.get_sample_value("kyma_operator_heap_trims_total") == 1.0
    seconds = registry.get_sample_value("kyma_operator_heap_trim_seconds_total")
    assert seconds is not None and 0.0 <= seconds < 1.0
    await running.stop()


async def test_a_released_shard_is_trimmed_at_the_next_quiet_check() -> None:
    running = Running()
    await running.interval(0.2)
    running.trimming.request(7)  # as the coordinator's on_released calls it, with the shard
    await running.interval(heaptrim.QUIET_CPU_SECONDS)  # the release's interval was busy: not yet
    assert running.trims == []
    await running.interval(0.1)
    assert running.trims == [0.2 + heaptrim.QUIET_CPU_SECONDS + 0.1]  # far below CPU_SECONDS
    await running.interval(0.1)
    assert len(running.trims) == 1  # one trim per request
    await running.stop()
