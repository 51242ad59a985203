"""The loop watch reports a wake-up later than its threshold, with the CPU its thread spent in it."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from kyma_operator.runtime.clock import FakeClock
from kyma_operator.runtime.loopwatch import LoopWatch


async def _tick_after(watch: LoopWatch, clock: FakeClock, seconds: float) -> float:
    task = asyncio.create_task(watch.tick())
    await clock.wait_for_pending(1)
    clock.advance(seconds)
    return await task


async def test_a_late_wake_up_is_a_stall_with_the_cpu_spent_in_it() -> None:
    clock = FakeClock()
    cpu = iter([10.0, 10.4])
    registry = CollectorRegistry()
    watch = LoopWatch(
        clock=clock, cpu_now=lambda: next(cpu), interval=0.25, report_over=0.5, registry=registry
    )

    late = await _tick_after(watch, clock, 2.25)

    assert late == pytest.approx(2.0)
    assert watch.longest == pytest.approx(2.0)
    assert [(start, round(stall, 3), round(spent, 3)) for start, stall, spent in watch.stalls] == [
        (1000.0, 2.0, 0.4)
    ]
    assert registry.get_sample_value("kyma_operator_event_loop_stall_seconds_count") == 1.0


async def test_a_wake_up_within_the_threshold_is_no_stall() -> None:
    clock = FakeClock()
    registry = CollectorRegistry()
    watch = LoopWatch(clock=clock, cpu_now=lambda: 0.0, interval=0.25, report_over=0.5, registry=registry)

    late = await _tick_after(watch, clock, 0.5)

    assert late == pytest.approx(0.25)
    assert watch.stalls == []
    assert registry.get_sample_value("kyma_operator_event_loop_stall_seconds_count") == 0.0


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        LoopWatch(interval=0)
