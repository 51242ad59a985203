"""A replica's periodic full resync counted in machine instructions (valgrind's callgrind).

Why: "CPU-seconds per replica for a full resync" is the §10 target, but on this VM restarts of the
same code spend up to 31 % different CPU-seconds on the same resync (``results/scale.md``, run S),
and the machine has no PMU (no ``perf`` counters). Counted by callgrind, one replica's resync of
5,000 Kymas repeated to 0.2 % an hour apart (runs CG1/CG4). ``scale_bench --count-instructions DIR``
measures that way, alongside the CPU-seconds it always reports.

How: each operator is started under ``valgrind --tool=callgrind --instr-atstart=no`` (instrumentation
off: the start-up runs uninstrumented, still 10-50x slower than natively). The benchmark follows the
reconcile trace; when it sees the replica's first resync reconcile start it switches instrumentation
on (``callgrind_control -i on PID``), and once every Kyma that replica kept in its start-up round has
been reconciled again (``resync_window.replica_windows``) it dumps the counters
(``callgrind_control -d``) and switches it off. The dump is the whole process (every thread: the
Lease thread too), as CPU-seconds are. The first few resync reconciles run before the switch lands:
the figure per reconcile is the dump's instructions over the resync reconciles that started after
the switch was sent, and the resync's total is that times all of the replica's resync reconciles.
The reconciles under way while the switch landed (``straddling``) bound the error of that split.

Under valgrind a process runs 50-140x slower with instrumentation on: use long Lease timings
(``--lease-timings 900/240/30``) and a ``--resync-interval`` longer than the start-up.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.resync_window import Resync, TraceReader, replica_windows

EVENTS_LINE = "events:"
TOTALS_LINE = "totals:"
SUMMARY_LINE = "summary:"


class CallgrindMissing(RuntimeError):
    """valgrind or callgrind_control is not installed (Debian package ``valgrind``)."""


def require_callgrind() -> None:
    """Raise ``CallgrindMissing`` with one clear line if the tools are not on PATH."""
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if missing:
        raise CallgrindMissing(
            f"--count-instructions needs {' and '.join(missing)} on PATH (Debian package valgrind)"
        )


def callgrind_prefix(out_dir: Path) -> list[str]:
    """The command prefix that runs a process under callgrind, instrumentation off, its dumps in
    ``out_dir`` as ``cg.<pid>.<n>``. ``--fair-sched=yes``: valgrind runs one thread at a time; without
    it the Lease thread can wait seconds behind the main thread and miss renewals."""
    return [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--fair-sched=yes",
        f"--callgrind-out-file={out_dir / 'cg.%p'}",
    ]


def parse_totals(text: str) -> dict[str, int]:
    """Event name -> count of one callgrind dump: its ``events:`` line names the columns of its
    ``totals:`` line (or ``summary:``, older writers)."""
    events: list[str] | None = None
    totals: list[str] | None = None
    summary: list[str] | None = None
    for line in text.splitlines():
        if line.startswith(EVENTS_LINE):
            events = line[len(EVENTS_LINE) :].split()
        elif line.startswith(TOTALS_LINE):
            totals = line[len(TOTALS_LINE) :].split()
        elif line.startswith(SUMMARY_LINE):
            summary = line[len(SUMMARY_LINE) :].split()
    counts = totals if totals is not None else summary
    if events is None or counts is None:
        raise ValueError("not a callgrind dump: no events: and totals: lines")
    if len(counts) > len(events):
        raise ValueError(f"callgrind dump: {len(counts)} totals for {len(events)} events")
    # trailing zero counts may be left out
    return {event: int(counts[i]) if i < len(counts) else 0 for i, event in enumerate(events)}


def dumps_of(out_dir: Path, pid: int) -> list[Path]:
    """The numbered dumps of ``pid`` (``cg.<pid>.<n>``, oldest first)."""
    found = [path for path in out_dir.glob(f"cg.{pid}.*") if path.name.split(".")[-1].isdigit()]
    return sorted(found, key=lambda path: int(path.name.split(".")[-1]))


async def callgrind_control(*args: str, limit: float = 120.0) -> None:
    """Run ``callgrind_control ARGS``; raise with its output unless it answered ``OK``."""
    process = await asyncio.create_subprocess_exec(
        "callgrind_control",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), limit)
    text = out.decode(errors="replace")
    if process.returncode != 0 or "OK." not in text:
        raise RuntimeError(f"callgrind_control {' '.join(args)}: {text.strip() or process.returncode}")


@dataclass(frozen=True)
class CountedResync:
    """One replica's resync as counted by callgrind."""

    replica: str
    events: dict[str, int]
    """Counts of the dump (``Ir``: instructions executed)."""
    resync_reconciles: int
    """The replica's resync reconciles (its whole window)."""
    counted_reconciles: int
    """Those that started after instrumentation was switched on."""
    straddling: int
    """Reconciles under way while the switch on or the dump was on its way (partly counted)."""
    window: Resync
    counted_seconds: float
    """Wall seconds from the switch on to the dump."""

    @property
    def per_reconcile(self) -> float:
        return self.events.get("Ir", 0) / max(1, self.counted_reconciles)

    @property
    def resync_total(self) -> float:
        """Instructions of the whole resync: per reconcile x every resync reconcile."""
        return self.per_reconcile * self.resync_reconciles

    def describe(self) -> str:
        return (
            f"{self.events.get('Ir', 0):,} instructions in {self.counted_seconds:.1f} s over "
            f"{self.counted_reconciles} of its {self.resync_reconciles} resync reconciles "
            f"({self.straddling} straddling a switch): {self.per_reconcile:,.0f} per reconcile, "
            f"the whole resync {self.resync_total:,.0f}"
        )


def _started_after(trace: TraceReader, replica: str, since: float) -> list[tuple[float, str]]:
    return sorted((at, subject) for at, subject, who in trace.starts if who == replica and at >= since)


def split_window(
    trace: TraceReader, replica: str, since: float, switched_on: tuple[float, float], dumped_at: float
) -> tuple[int, int, int]:
    """(resync reconciles, those that started after the switch on was sent, those under way while a
    switch was on its way) of ``replica`` from the trace, each started from ``since`` on and before
    the dump; ``switched_on`` is (sent, answered)."""
    starts = [(at, subject) for at, subject in _started_after(trace, replica, since) if at < dumped_at]
    ends = sorted((at, subject) for at, subject, who in trace.ends if who == replica and at >= since)
    spans = []
    pending = {subject: at for at, subject in starts}
    for at, subject in ends:
        begun = pending.pop(subject, None)
        if begun is not None:
            spans.append((begun, at))
    sent, answered = switched_on
    counted = sum(1 for at, _ in starts if at >= sent)
    straddling = sum(
        1 for begun, ended in spans if (begun < answered and ended > sent) or (begun < dumped_at < ended)
    )
    return len(starts), counted, straddling


async def count_resync(
    pid: int,
    replica: str,
    trace: TraceReader,
    since: float,
    start_up_done: float,
    out_dir: Path,
    deadline: float,
    alive: Callable[[], None],
    poll: float = 0.05,
) -> CountedResync:
    """Count ``replica``'s resync (process ``pid``, resync reconciles from ``since`` on): switch
    callgrind on at its first resync reconcile, dump once its window closed. ``alive()`` raises if
    the operator exited."""
    trace.read()
    if _started_after(trace, replica, since):
        raise RuntimeError(
            f"{replica}: its resync began before counting could start (raise --resync-interval)"
        )
    while not _started_after(trace, replica, since):
        alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{replica}: no resync reconcile before the deadline")
        await asyncio.sleep(poll)
        trace.read()
    sent = time.monotonic()
    await callgrind_control("-i", "on", str(pid))
    answered = time.monotonic()
    windows: dict[str, Resync] | None = None
    while windows is None:
        alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{replica}: its resync did not reach every Kyma it kept")
        await asyncio.sleep(poll)
        trace.read()
        windows = replica_windows(trace, {replica: since}, start_up_done)
    dumped_at = time.monotonic()
    before = dumps_of(out_dir, pid)
    await callgrind_control("-d", f"resync-{replica}", str(pid))
    await callgrind_control("-i", "off", str(pid))
    fresh = [path for path in dumps_of(out_dir, pid) if path not in before]
    if len(fresh) != 1:
        raise RuntimeError(f"{replica}: expected one new callgrind dump in {out_dir}, found {len(fresh)}")
    trace.read()
    total, counted, straddling = split_window(trace, replica, since, (sent, answered), dumped_at)
    return CountedResync(
        replica=replica,
        events=parse_totals(fresh[0].read_text()),
        resync_reconciles=total,
        counted_reconciles=counted,
        straddling=straddling,
        window=windows[replica],
        counted_seconds=dumped_at - answered,
    )


@dataclass
class CountLedger:
    """Where the dumps go, and the one-replica resync of this run that the others are shares of."""

    out_dir: Path
    reference: float | None = None
    """Instructions of the one-replica (no sharding) resync counted in this run, if any yet."""

    def record(self, is_reference: bool, counted: CountedResync) -> str:
        """Note ``counted``; the text ``, N % of one replica's`` once a reference was counted."""
        if is_reference:
            self.reference = counted.resync_total
            return ""
        if not self.reference:
            return ""
        return f", {counted.resync_total / self.reference:.1%} of one replica's"
