"""A reconcile trace for tests and debugging: one line per reconcile start and end, appended to a file.

Why: "no Kyma is ever reconciled by two replicas at once" must be checked across processes. Each
process wraps its reconcilers in :class:`TracingReconciler` and appends
``start|end <controller> <namespace/name> <replica> <monotonic ns>`` lines (and, with sharding,
``acquired|released shard <n> <replica> <ns>``) to one shared file with
``O_APPEND`` (each line is one ``write``, so lines of different processes never interleave);
``CLOCK_MONOTONIC`` is system-wide on Linux, so intervals of processes on one machine compare.
An ``end`` line has a sixth field: the CPU nanoseconds its thread spent while the reconcile ran
(``CLOCK_THREAD_CPUTIME_ID``; other tasks of the event loop are included while the reconcile awaits).
Why: the CPU a replica spends on a resync is its reconciles plus everything around them (queue,
timers, Lease work, idle wake-ups); on a machine shared by several replicas the two must be told
apart to see whether a reconcile itself costs more (``benchmarks/resync_window.py``).
Off unless ``--reconcile-trace-file`` is set.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from kyma_operator.runtime.controller import Reconciler
from kyma_operator.runtime.request import Request, Result


class TraceFile:
    """The shared trace file (opened once, append-only)."""

    def __init__(self, path: Path, replica: str) -> None:
        self.replica = replica
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, event: str, kind: str, subject: object, cpu_ns: int | None = None) -> None:
        """One line ``<event> <kind> <subject> <replica> <monotonic ns>`` (kind: a controller, or
        ``shard`` for ``acquired``/``released`` lines of the shard coordinator), then ``cpu_ns``
        when given."""
        tail = "" if cpu_ns is None else f" {cpu_ns}"
        os.write(self._fd, f"{event} {kind} {subject} {self.replica} {time.monotonic_ns()}{tail}\n".encode())

    def close(self) -> None:
        os.close(self._fd)


class TracingReconciler:
    """Wraps ``inner``: a ``start`` line before and an ``end`` line (with the thread's CPU
    meanwhile) after every reconcile."""

    def __init__(self, inner: Reconciler, trace: TraceFile, controller: str) -> None:
        self.inner = inner
        self.trace = trace
        self.controller = controller

    async def reconcile(self, request: Request) -> Result:
        self.trace.write("start", self.controller, request)
        cpu_before = time.thread_time_ns()
        try:
            return await self.inner.reconcile(request)
        finally:
            self.trace.write("end", self.controller, request, time.thread_time_ns() - cpu_before)
