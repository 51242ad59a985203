"""The operator's heap trimming: on its clock, after a burst of CPU work once it is over, counted in
the two metrics; and the operator process wires it (its metrics are on ``/metrics`` of a built
operator's registry)."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from kyma_operator.runtime import heaptrim
from kyma_operator.runtime.clock import FakeClock
from kyma_operator.runtime.heaptrim import HeapTrimming


async def test_trims_on_its_clock_after_a_burst_once_it_is_quiet() -> None:
    clock = FakeClock()
    registry = CollectorRegistry()
    cpu = [0.0]
    trims: list[float] = []

    def trim() -> int:
        trims.append(cpu[0])
        return 1

    trimming = HeapTrimming(registry=registry, clock=clock, cpu_now=lambda: cpu[0], trim=trim)
    task = asyncio.create_task(trimming.run())

    async def interval(cpu_spent: float) -> None:
        await clock.wait_for_pending(1)
        cpu[0] += cpu_spent
        clock.advance(heaptrim.INTERVAL)
        for _ in range(3):  # the woken sleeper checks, then sleeps again
            await asyncio.sleep(0)

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
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
