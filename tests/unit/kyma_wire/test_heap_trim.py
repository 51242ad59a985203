"""``kyma_wire.heap_trim``: the heap is trimmed only after enough work since the last trim (the
agent: connections closed; the operator: CPU seconds), never in an idle process; the C library's
``malloc_trim`` is found and callable on glibc."""

from __future__ import annotations

import asyncio

import pytest

from kyma_wire.heap_trim import HeapTrimmer, libc_trim


class Counts:
    def __init__(self) -> None:
        self.work = 0.0
        self.trimmed = 0

    def trim(self) -> int:
        self.trimmed += 1
        return 1


def test_trims_once_per_min_work_done() -> None:
    counts = Counts()
    counts.work = 1000  # before the trimmer started: not counted
    trimmer = HeapTrimmer(lambda: counts.work, counts.trim, min_work=10)
    assert not trimmer.check() and counts.trimmed == 0
    counts.work += 9
    assert not trimmer.check()
    counts.work += 1
    assert trimmer.check() and counts.trimmed == 1
    assert not trimmer.check()  # nothing done since
    counts.work += 25
    assert trimmer.check() and trimmer.check() is False
    assert counts.trimmed == trimmer.trims == 2


def test_work_counts_in_fractions_as_cpu_seconds() -> None:
    counts = Counts()
    trimmer = HeapTrimmer(lambda: counts.work, counts.trim, min_work=5.0)
    counts.work += 4.99
    assert not trimmer.check()
    counts.work += 0.01
    assert trimmer.check() and counts.trimmed == 1


def test_without_malloc_trim_nothing_is_trimmed() -> None:
    counts = Counts()
    trimmer = HeapTrimmer(lambda: counts.work, None, min_work=1)
    counts.work += 100
    assert not trimmer.check() and trimmer.trims == 0
    trimmer.request()
    assert not trimmer.check() and trimmer.trims == 0


def test_every_checks_after_each_interval_of_the_callers_clock() -> None:
    counts = Counts()
    trimmer = HeapTrimmer(lambda: counts.work, counts.trim, min_work=1)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:  # the caller's clock: each interval does one unit of work
        slept.append(seconds)
        if len(slept) > 3:
            raise asyncio.CancelledError
        counts.work += 1 if len(slept) != 2 else 0

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(trimmer.every(30.0, sleep))
    assert slept == [30.0] * 4
    assert counts.trimmed == 2  # after intervals 1 and 3; interval 2 did nothing


def test_the_c_library_trim_is_callable_here() -> None:
    trim = libc_trim()
    assert trim is not None  # the agent's and the operator's images and this machine run glibc
    assert trim() in (0, 1)  # 1: memory was returned, 0: there was none to return


def test_with_quiet_it_trims_once_the_burst_is_over() -> None:
    counts = Counts()
    trimmer = HeapTrimmer(lambda: counts.work, counts.trim, min_work=5.0, quiet=2.5)
    for _ in range(4):  # a burst: a core busy through each interval
        counts.work += 10
        assert not trimmer.check()
    counts.work += 2.4  # it calmed down: everything since the last trim is returned now
    assert trimmer.check() and counts.trimmed == 1
    counts.work += 0.5  # idle: below min_work since the trim
    assert not trimmer.check()
    for _ in range(10):  # idle for long: min_work is reached slowly, at a quiet pace
        counts.work += 0.5
        trimmer.check()
    assert counts.trimmed == 2


def test_a_burst_that_ends_just_before_a_check_is_trimmed_at_the_next() -> None:
    counts = Counts()
    trimmer = HeapTrimmer(lambda: counts.work, counts.trim, min_work=5.0, quiet=2.5)
    counts.work += 6  # the burst ended within this interval: not quiet yet
    assert not trimmer.check()
    assert trimmer.check() and counts.trimmed == 1  # nothing since: quiet


def test_a_requested_trim_runs_at_the_next_quiet_check_whatever_the_work() -> None:
    counts = Counts()
    trimmer = HeapTrimmer(lambda: counts.work, counts.trim, min_work=5.0, quiet=2.5)
    counts.work += 1  # far below min_work
    assert not trimmer.check()
    trimmer.request()
    counts.work += 3  # busy since the last check: the request waits for calm
    assert not trimmer.check() and counts.trimmed == 0
    assert trimmer.check() and counts.trimmed == 1  # quiet now: trimmed on request
    assert not trimmer.check()  # the request was used up
    counts.work += 4.9  # and min_work counts again from that trim
    trimmer.check()
    assert counts.trimmed == 1
