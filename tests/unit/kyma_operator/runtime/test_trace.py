"""The reconcile trace (``runtime/trace.py``): line format, and the CPU its ``end`` lines carry."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from kyma_operator.runtime.request import Request, Result
from kyma_operator.runtime.trace import TraceFile, TracingReconciler


class _Busy:
    """Spends CPU on its thread (``spin`` seconds of thread CPU), then returns."""

    def __init__(self, spin: float, fail: bool = False) -> None:
        self.spin = spin
        self.fail = fail

    async def reconcile(self, request: Request) -> Result:
        until = time.thread_time() + self.spin
        while time.thread_time() < until:
            pass
        if self.fail:
            raise RuntimeError("boom")
        return Result()


def _lines(path: Path) -> list[list[str]]:
    return [line.split(" ") for line in path.read_text().splitlines()]


def test_end_lines_carry_the_cpu_the_reconcile_spent(tmp_path: Path) -> None:
    path = tmp_path / "trace"
    trace = TraceFile(path, "r7")
    tracing = TracingReconciler(_Busy(0.02), trace, "kyma")
    wall_before = time.monotonic_ns()
    asyncio.run(tracing.reconcile(Request("ns", "k1")))
    trace.write("acquired", "shard", 3)
    trace.close()

    start, end, acquired = _lines(path)
    assert start[:4] == ["start", "kyma", "ns/k1", "r7"] and len(start) == 5
    assert end[:4] == ["end", "kyma", "ns/k1", "r7"] and len(end) == 6
    assert acquired[:4] == ["acquired", "shard", "3", "r7"] and len(acquired) == 5
    cpu_ns = int(end[5])
    assert cpu_ns >= 20_000_000  # the 20 ms of thread CPU the reconcile spun
    assert cpu_ns <= int(end[4]) - wall_before  # a thread's CPU cannot outgrow the wall time


def test_a_failed_reconcile_still_gets_its_end_line_with_cpu(tmp_path: Path) -> None:
    path = tmp_path / "trace"
    trace = TraceFile(path, "r0")
    tracing = TracingReconciler(_Busy(0.005, fail=True), trace, "manifest")
    with pytest.raises(RuntimeError, match="boom"):
        asyncio.run(tracing.reconcile(Request("ns", "m1")))
    trace.close()

    start, end = _lines(path)
    assert start[0] == "start" and end[:3] == ["end", "manifest", "ns/m1"]
    assert int(end[5]) >= 5_000_000
