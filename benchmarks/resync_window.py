"""The periodic full resync of a running operator group, read from its reconcile trace, and the CPU
each replica spent on it.

Why a module of its own: "CPU per replica for a full resync" must not count the start-up (imports,
lists, shard hand-offs). The operator's real resync is the safety-net requeue of every Ready Kyma
after ``--kyma-healthy-interval`` (single-cluster Kymas count as healthy): started with a short
interval S, every Kyma reconciled during start-up is reconciled again about S later by whichever
replica holds its shard. Nothing periodic can start before ``started + S``, so the resync is every
Kyma reconcile that starts at or after that moment; it is done when every Kyma of the fleet has a
reconcile ``end`` line after it. The trace (``--reconcile-trace-file``: ``start|end kyma
<namespace/name> <replica> <CLOCK_MONOTONIC ns>``) and the benchmark's ``time.monotonic`` are the
same clock, so the window's ends are looked up in each replica's CPU samples (``/proc/<pid>/stat``,
taken every poll): CPU = samples at the last poll before the window opened and the first after it
closed. Idle CPU (Lease renewals, watches) in the quiet gap before the window is reported beside it.
An ``end`` line also carries the CPU its thread spent during the reconcile (``in_reconciles``): the
window's CPU minus that is what the process spent around its reconciles (queue, timers, wake-ups),
and the reconciles' own median shows whether a reconcile itself cost more in one group than in
another (three replicas sharing two cores, against one replica alone).

Staggered (``scale_bench --stagger-resyncs D``): replica i runs with the interval S + i x D, so the
replicas' resyncs follow each other instead of sharing the machine's two cores with each other (on
real nodes, each replica has its own). Each replica's window is then its own (``replica_windows``):
from its first reconcile at or after its own ``started + S_i`` until each Kyma whose last start-up
reconcile was its own has been reconciled again by it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class TraceReader:
    """Follows a reconcile trace file: Kyma reconcile starts and ends as (monotonic s, subject)."""

    path: Path
    starts: list[tuple[float, str, str]] = field(default_factory=list)
    ends: list[tuple[float, str, str]] = field(default_factory=list)
    cpu: list[tuple[float, str, float]] = field(default_factory=list)
    """(end, replica, CPU seconds of the reconcile) of every ``end`` line that carries its CPU."""
    _offset: int = 0
    _rest: bytes = b""

    def read(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as stream:
            stream.seek(self._offset)
            data = stream.read()
        self._offset += len(data)
        lines = (self._rest + data).split(b"\n")
        self._rest = lines.pop()
        for raw in lines:
            parts = raw.decode().split()
            if len(parts) not in (5, 6) or parts[1] != "kyma":
                continue
            event, _, subject, replica, ns, *cpu_ns = parts
            entry = (int(ns) / 1e9, subject, replica)
            if event == "start":
                self.starts.append(entry)
            elif event == "end":
                self.ends.append(entry)
                if cpu_ns:
                    self.cpu.append((entry[0], replica, int(cpu_ns[0]) / 1e9))


@dataclass
class Resync:
    """The resync window of one group and what happened in it."""

    opened: float
    closed: float
    reconciles: dict[str, int]
    """Resync reconciles per replica."""
    before: int
    """Kyma reconciles started between the end of the start-up round and the window (expected 0)."""


def resync_window(trace: TraceReader, expected: int, since: float, start_up_done: float) -> Resync | None:
    """The window once every one of ``expected`` Kymas has a reconcile that ended after ``since``
    (= group start + the resync interval); None while not."""
    done = {subject for at, subject, _ in trace.ends if at >= since}
    if len(done) < expected:
        return None
    starts = [(at, replica) for at, _, replica in trace.starts if at >= since]
    opened = min(at for at, _ in starts)
    closed = max(at for at, _, _ in trace.ends if at >= since)
    per_replica: dict[str, int] = {}
    for _, replica in starts:
        per_replica[replica] = per_replica.get(replica, 0) + 1
    before = sum(1 for at, _, _ in trace.starts if start_up_done < at < since)
    return Resync(opened, closed, per_replica, before)


def replica_windows(
    trace: TraceReader, since: dict[str, float], start_up_done: float
) -> dict[str, Resync] | None:
    """Each replica's own resync window (see the module docstring): ``since`` maps a replica's trace
    name to its ``started + interval``; None while a replica's window is still open."""
    holder: dict[str, str] = {}
    for at, subject, replica in sorted(trace.starts):
        if at <= start_up_done:
            holder[subject] = replica  # the last start-up reconcile: the replica that kept the Kyma
    windows: dict[str, Resync] = {}
    for replica, after in since.items():
        held = {subject for subject, who in holder.items() if who == replica}
        ends = [(at, subject) for at, subject, who in trace.ends if who == replica and at >= after]
        if not held <= {subject for _, subject in ends}:
            return None
        starts = [at for at, _, who in trace.starts if who == replica and at >= after]
        before = sum(1 for at, _, who in trace.starts if who == replica and start_up_done < at < after)
        windows[replica] = Resync(min(starts), max(at for at, _ in ends), {replica: len(starts)}, before)
    return windows


@dataclass(frozen=True)
class ReconcileCpu:
    """The CPU a replica's reconciles spent (their ``end`` lines) within a window."""

    reconciles: int
    total: float
    """CPU seconds of all of them."""
    median: float
    """CPU seconds of the median reconcile."""
    window: float
    """Seconds of the window they were read from."""

    @property
    def busy(self) -> float | None:
        """Share of the window spent in reconciles: a resync that runs back to back is busy about
        95 % of its window; one scattered like a start-up round that shared the CPU with other
        processes, less (and each of its reconciles dearer; ``results/scale.md``)."""
        return self.total / self.window if self.window > 0 else None


def in_reconciles(trace: TraceReader, replica: str, opened: float, closed: float) -> ReconcileCpu | None:
    """CPU of ``replica``'s reconciles that ended within [opened, closed]; None if none carried it."""
    spent = sorted(cpu for at, who, cpu in trace.cpu if who == replica and opened <= at <= closed)
    if not spent:
        return None
    return ReconcileCpu(len(spent), sum(spent), spent[(len(spent) - 1) // 2], closed - opened)


def cpu_between(samples: list[tuple[float, float]], opened: float, closed: float) -> float:
    """CPU seconds from the last sample at or before ``opened`` to the first at or after ``closed``."""
    before = [cpu for at, cpu in samples if at <= opened]
    after = [cpu for at, cpu in samples if at >= closed]
    if not before or not after:
        raise ValueError("no CPU sample on both sides of the window")
    return after[0] - before[-1]


def idle_rate(samples: list[tuple[float, float]], start: float, end: float) -> float:
    """CPU seconds per second between ``start`` and ``end`` (the quiet gap before the resync)."""
    inside = [(at, cpu) for at, cpu in samples if start <= at <= end]
    if len(inside) < 2 or inside[-1][0] - inside[0][0] < 1.0:
        return float("nan")
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
