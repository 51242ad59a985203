"""The resync counted in instructions (``benchmarks/instruction_count.py``): the callgrind dump's
totals, the split of a window into counted reconciles, and one count of a real process under valgrind
whose reconcile trace is written by the operator's own ``TraceFile``."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import textwrap
import time
from pathlib import Path

import pytest

from benchmarks.instruction_count import (
    CountedResync,
    CountLedger,
    callgrind_prefix,
    count_resync,
    dumps_of,
    parse_totals,
    split_window,
)
from benchmarks.resync_window import Resync, TraceReader
from tests.controlplane.binaries import REPO_ROOT
from tests.polling import eventually

DUMP = """# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 7932
part: 1

desc: Trigger: Client Request: resync

positions: line
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
summary: 35543606400 10519906671 6386608616 510643732 346939881 148323807 8441 1445228 773370

ob=(8) /usr/lib/x86_64-linux-gnu/libc.so.6
fn=(6178) __strcmp_avx2
249 20401 0 0 5893 0 0 1

totals: 35543606391 10519906671 6386608610 510643730 346939881 148323807 8439 1445228 773370
"""


def test_totals_are_named_by_the_events_line() -> None:
    counts = parse_totals(DUMP)
    assert counts["Ir"] == 35_543_606_391  # totals, not the summary written before the cost lines
    assert (counts["D1mr"], counts["DLmw"]) == (346_939_881, 773_370)


def test_trailing_zero_totals_may_be_left_out_and_a_summary_alone_is_read() -> None:
    assert parse_totals("events: Ir Dr Dw\ntotals: 12\n") == {"Ir": 12, "Dr": 0, "Dw": 0}
    assert parse_totals("events: Ir\nsummary: 7\n") == {"Ir": 7}


@pytest.mark.parametrize(
    "text",
    ["", "events: Ir\n", "totals: 5\n", "events: Ir\ntotals: 1 2\n", "events: Ir\ntotals: many\n"],
)
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_totals(text)


def test_dumps_are_ordered_by_number_and_the_final_file_is_not_one(tmp_path: Path) -> None:
    for name in ("cg.42", "cg.42.10", "cg.42.2", "cg.43.1", "cg.42.1"):
        (tmp_path / name).write_text("")
    assert [p.name for p in dumps_of(tmp_path, 42)] == ["cg.42.1", "cg.42.2", "cg.42.10"]


def _line(event: str, subject: str, replica: str, seconds: float) -> str:
    return f"{event} kyma {subject} {replica} {int(seconds * 1e9)}\n"


def test_a_window_is_split_at_the_switches(tmp_path: Path) -> None:
    trace = TraceReader(tmp_path / "trace")
    with (tmp_path / "trace").open("w") as out:
        out.write(_line("start", "ns/a", "r0", 1))  # start-up round: not the resync
        out.write(_line("end", "ns/a", "r0", 2))
        for i, kyma in enumerate(("ns/a", "ns/b", "ns/c", "ns/d")):  # resync from 100 on, 1 s each
            out.write(_line("start", kyma, "r0", 100 + i))
            out.write(_line("end", kyma, "r0", 100.9 + i))
        out.write(_line("start", "ns/x", "r1", 101))  # another replica's
        out.write(_line("start", "ns/a", "r0", 110))  # after the dump: not the window's
    trace.read()
    # on sent at 100.5 (a under way: straddles), answered at 101.2 (b under way too); dump at 103.5
    # (d under way). Counted: those started after the switch was sent: b, c, d.
    assert split_window(trace, "r0", 50, (100.5, 101.2), 103.5) == (4, 3, 3)
    assert split_window(trace, "r0", 50, (99.0, 99.1), 104) == (4, 4, 0)


def _counted(total: int, ir: int, reconciles: int = 10) -> CountedResync:
    return CountedResync("r0", {"Ir": ir}, total, reconciles, 0, Resync(0, 1, {"r0": total}, 0), 1.0)


def test_the_resync_total_scales_the_counted_reconciles_to_all_of_them() -> None:
    counted = _counted(total=40, ir=1_000_000)
    assert counted.per_reconcile == 100_000
    assert counted.resync_total == 4_000_000
    assert "100,000 per reconcile" in counted.describe()


def test_shares_are_of_the_one_replica_count_of_the_same_run(tmp_path: Path) -> None:
    ledger = CountLedger(tmp_path)
    assert ledger.record(False, _counted(10, 100)) == ""  # no reference yet
    assert ledger.record(True, _counted(100, 1000, reconciles=50)) == ""  # 2,000 in all
    assert ledger.record(False, _counted(38, 380, reconciles=19)) == ", 38.0% of one replica's"


FAKE_OPERATOR = """
import os, sys, time
from pathlib import Path
from kyma_operator.runtime.trace import TraceFile

trace, go, stop = TraceFile(Path(sys.argv[1]), "r0"), Path(sys.argv[2]), Path(sys.argv[3])
kymas = [f"ns/k{i}" for i in range(20)]
for kyma in kymas:  # the start-up round
    trace.write("start", "kyma", kyma)
    trace.write("end", "kyma", kyma, 0)
while not go.exists():  # idle until the resync is due
    time.sleep(0.02)
for kyma in kymas:  # the resync: the same work per reconcile, then a wait as for the API server
    trace.write("start", "kyma", kyma)
    total = sum(i * i for i in range(20_000))
    time.sleep(0.05)
    trace.write("end", "kyma", kyma, 0)
while not stop.exists():
    time.sleep(0.02)
"""


@pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("callgrind_control") is None,
    reason="valgrind is not installed (Debian package valgrind); benchmarks/instruction_count.py needs it",
)
async def test_a_resync_of_a_process_under_valgrind_is_counted(tmp_path: Path) -> None:
    script = tmp_path / "fake_operator.py"
    script.write_text(textwrap.dedent(FAKE_OPERATOR))
    trace_path, go, stop = tmp_path / "trace", tmp_path / "go", tmp_path / "stop"
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}:{REPO_ROOT / 'operator'}"}
    process = await asyncio.create_subprocess_exec(
        *callgrind_prefix(tmp_path),
        sys.executable,
        str(script),
        str(trace_path),
        str(go),
        str(stop),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        trace = TraceReader(trace_path)

        def start_up_round_done() -> bool:
            trace.read()
            return len(trace.ends) == 20

        await eventually(start_up_round_done, "the start-up round in the trace", within=60)
        # the resync takes 20 x 50 ms at least: the switch (about 0.1 s) lands during it
        since = start_up_done = time.monotonic()
        go.write_text("")

        def alive() -> None:
            assert process.returncode is None, "the process under valgrind exited"

        counted = await count_resync(
            process.pid, "r0", trace, since, start_up_done, tmp_path, time.monotonic() + 120, alive
        )
    finally:
        stop.write_text("")
        try:
            await asyncio.wait_for(process.wait(), 60)
        except TimeoutError:
            process.kill()
            await process.wait()
    assert process.returncode == 0, (await process.stderr.read()).decode() if process.stderr else ""
    assert counted.resync_reconciles == 20
    assert 1 <= counted.counted_reconciles < 20  # the first ones ran before the switch landed
    assert counted.window.reconciles == {"r0": 20}
    # each reconcile: 20,000 rounds of a Python generator (tens of instructions each at least)
    assert counted.events["Ir"] > 20_000 * 20 * counted.counted_reconciles
    assert counted.per_reconcile < 50_000_000
    assert len(dumps_of(tmp_path, process.pid)) == 1
