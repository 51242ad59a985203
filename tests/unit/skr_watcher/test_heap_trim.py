"""``skr_watcher.heap_trim``: the heap is trimmed only after enough connections closed since the last
trim, never on a quiet agent; the C library's ``malloc_trim`` is found and callable on glibc."""

from __future__ import annotations

from skr_watcher.heap_trim import HeapTrimmer, libc_trim


class Counts:
    def __init__(self) -> None:
        self.closed = 0
        self.trimmed = 0

    def trim(self) -> int:
        self.trimmed += 1
        return 1


def test_trims_once_per_min_closed_connections_closed() -> None:
    counts = Counts()
    counts.closed = 1000  # before the trimmer started: not counted
    trimmer = HeapTrimmer(lambda: counts.closed, counts.trim, min_closed=10)
    assert not trimmer.check() and counts.trimmed == 0
    counts.closed += 9
    assert not trimmer.check()
    counts.closed += 1
    assert trimmer.check() and counts.trimmed == 1
    assert not trimmer.check()  # nothing closed since
    counts.closed += 25
    assert trimmer.check() and trimmer.check() is False
    assert counts.trimmed == trimmer.trims == 2


def test_without_malloc_trim_nothing_is_trimmed() -> None:
    counts = Counts()
    trimmer = HeapTrimmer(lambda: counts.closed, None, min_closed=1)
    counts.closed += 100
    assert not trimmer.check() and trimmer.trims == 0


def test_the_c_library_trim_is_callable_here() -> None:
    trim = libc_trim()
    assert trim is not None  # the agent's image and this machine run glibc
    assert trim() in (0, 1)  # 1: memory was returned, 0: there was none to return
