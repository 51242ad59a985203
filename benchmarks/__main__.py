"""``make bench`` / ``python -m benchmarks``: run every benchmark, one after the other.

Each benchmark is its own script (``python -m benchmarks.<name> --help`` explains it) and writes its
figures to stdout; the recorded results with their commands and the machine they ran on are in
``benchmarks/results/<name>.md`` (copied there by hand after a quiet run). This runner only runs
them in a fixed order, each in its own process, with the settings the results files name
(``--quick``: short settings that prove every benchmark still works, in a few minutes; the figures
are then only indicative; the full settings also refresh the raw latency samples
``benchmarks/results/*.samples.json`` the plots are drawn from), ends with a table of what passed
and rewrites ``benchmarks/RESULTS.md`` and its plots
(``report.py``: every DESIGN target beside the recorded figure and upstream's; ``--report`` only
does that). Exit status: non-zero if any benchmark failed.

Benchmarks need the Go-built control plane binaries (``make binaries``); the listener benchmark
needs ``wrk`` (Debian package) and is reported as skipped without it.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.report import write_report

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Benchmark:
    name: str
    """Module ``benchmarks.<name>`` and results file ``benchmarks/results/<results>.md``."""
    results: str
    full: tuple[str, ...] = ()
    """Arguments of the recorded run (see the results file)."""
    quick: tuple[str, ...] = ()
    """Short arguments: does it still run?"""
    needs: tuple[str, ...] = field(default=())
    """Executables that must be on the PATH."""


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("runtime_bench", "runtime", quick=("--skip-cluster",)),
    Benchmark("controlplane_bench", "controlplane", ("--rounds", "3"), ("--rounds", "1")),
    Benchmark(
        "listener_bench",
        "listener",
        ("--duration", "10", "--rounds", "2"),
        ("--duration", "2", "--rounds", "1", "--runtimes", "500", "--rate", "500"),
        needs=("wrk",),
    ),
    Benchmark(
        "handoff_bench",
        "listener",
        ("--rounds", "3"),
        ("--events", "500", "--latency-events", "300", "--rounds", "1"),
    ),
    Benchmark(
        "slow_clients",
        "listener",
        (),
        ("--clients", "40", "--observe", "6", "--trickle", "0.5", "--timeout", "2"),
    ),
    Benchmark(
        "agent_bench",
        "agent",
        ("--duration", "20", "--rate", "500", "--rounds", "3", "--events", "10000", "--burst", "10000"),
        ("--duration", "2", "--rate", "200", "--rounds", "1", "--events", "500", "--burst", "500"),
    ),
    Benchmark(
        "agent_hostile",
        "agent_hostile",
        ("--duration", "20", "--held", "1000", "--endless", "8", "--endless-seconds", "20"),
        ("--duration", "2", "--held", "100", "--endless", "2", "--endless-seconds", "2"),
    ),
    Benchmark("failover_bench", "failover", ("--runs", "10"), ("--runs", "1")),
    Benchmark(
        "manifest_bench",
        "manifest",
        ("--installs", "6", "--drifts", "100", "--samples", "benchmarks/results/manifest.samples.json"),
        ("--installs", "2", "--drifts", "5", "--objects", "10"),
    ),
    Benchmark(
        "module_bench",
        "module",
        (
            *("--enables", "100", "--status-changes", "100"),
            *("--samples", "benchmarks/results/module.samples.json"),
        ),
        ("--enables", "5", "--status-changes", "5", "--idle-rounds", "2"),
    ),
    Benchmark("enable_steps", "enable_steps", ("--enables", "45"), ("--enables", "3")),
    Benchmark(
        "descriptor_bench",
        "descriptors",
        ("--rounds", "30", "--idle-rounds", "20"),
        ("--rounds", "3", "--idle-rounds", "2"),
    ),
    Benchmark(
        "helm_bench",
        "helm",
        ("--installs", "5", "--renders", "20", "--manifests", "100"),
        ("--installs", "2", "--renders", "3", "--manifests", "20"),
    ),
    Benchmark(
        "scale_bench",
        "scale",
        ("kymas", "--kymas", "5000", "--modules", "5"),
        ("kymas", "--kymas", "200", "--modules", "2", "--settle", "3"),
    ),
    Benchmark(
        "scale_bench",
        "scale",
        ("runtimes", "--runtimes", "10", "20", "40"),
        ("runtimes", "--runtimes", "2", "4", "--settle", "3"),
    ),
    Benchmark(
        "e2e_latency",
        "e2e",
        ("--writes", "200", "--burst-writes", "40", "--samples", "benchmarks/results/e2e.samples.json"),
        ("--writes", "20", "--burst-writes", "0"),
    ),
)


def _run(bench: Benchmark, *, quick: bool, python: str) -> tuple[str, float]:
    missing = [tool for tool in bench.needs if shutil.which(tool) is None]
    if missing:
        print(f"== {bench.name}: skipped, needs {', '.join(missing)} on the PATH", flush=True)
        return "skipped", 0.0
    args = bench.quick if quick else bench.full
    command = [python, "-m", f"benchmarks.{bench.name}", *args]
    print(f"== {bench.name}: {' '.join(command[1:])}", flush=True)
    started = time.monotonic()
    code = subprocess.call(command, cwd=REPO)
    return ("ok" if code == 0 else f"failed ({code})"), time.monotonic() - started


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="short settings: check that every benchmark runs (minutes)"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        choices=[b.name for b in BENCHMARKS],
        help="run only these benchmarks (default: all, in the listed order)",
    )
    parser.add_argument("--list", action="store_true", help="list the benchmarks and their arguments")
    parser.add_argument(
        "--report",
        action="store_true",
        help="only rewrite benchmarks/RESULTS.md from the recorded results files (runs nothing)",
    )
    args = parser.parse_args(argv)
    if args.report:
        print(f"wrote {write_report().relative_to(REPO)}")
        return 0
    selected = [b for b in BENCHMARKS if not args.only or b.name in args.only]
    if args.list:
        for bench in selected:
            full, quick = " ".join(bench.full) or "-", " ".join(bench.quick) or "-"
            print(f"{bench.name:20} full: {full}  quick: {quick}")
            print(f"{'':20} results: benchmarks/results/{bench.results}.md")
        return 0
    outcomes = [(bench, *_run(bench, quick=args.quick, python=sys.executable)) for bench in selected]
    print("\n| benchmark | outcome | seconds | results file |\n|---|---|---|---|")
    for bench, outcome, seconds in outcomes:
        print(f"| {bench.name} | {outcome} | {seconds:.0f} | benchmarks/results/{bench.results}.md |")
    print(
        f"wrote {write_report().relative_to(REPO)} from benchmarks/results/*.md (copy a run's figures "
        "there to record them)"
    )
    return 1 if any(outcome.startswith("failed") for _, outcome, _ in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
