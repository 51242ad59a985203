"""Runs a Python module on an event loop that records the CPU time of every loop iteration.

Why: on the shared benchmark machine (load average 10+) an admission's latency is mostly the time
its processes wait for a core, so a p99 measured from the client says little about the agent. What
the agent itself costs a waiting admission is the work of the loop iteration in front of it: its
CPU time (``time.thread_time``), which waiting for a core does not inflate. Used by
``benchmarks/agent_hostile.py --loop-stalls``.

Run: ``python benchmarks/loop_stalls.py OUT.json -m MODULE [ARGS...]`` (as a script, so it also
runs another checkout's agent: it imports only the standard library); the statistics are written to
``OUT.json`` when the module returns (the agent: on SIGTERM). A first SIGUSR1 starts the count
afresh (the measured phase begins), a second one writes ``OUT.json`` at once and ends it.
Benchmark-only: it subclasses the
selector event loop and times ``_run_once`` (a private method of asyncio, stable in 3.11).
"""

from __future__ import annotations

import asyncio
import gc
import json
import runpy
import signal
import sys
import time
from pathlib import Path
from typing import Any


class _State:
    out = Path()
    iterations: list[float] = []  # one of each per process
    full_collections: list[float] = []
    gc_started = 0.0
    signals = 0
    written = False


class _TimedLoop(asyncio.SelectorEventLoop):
    def _run_once(self) -> None:
        started = time.thread_time()
        super()._run_once()  # type: ignore[misc]
        if not _State.written:
            _State.iterations.append(time.thread_time() - started)


class _Policy(asyncio.DefaultEventLoopPolicy):
    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return _TimedLoop()


def _gc_callback(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _State.gc_started = time.thread_time()
    elif info["generation"] == 2 and not _State.written:
        _State.full_collections.append(time.thread_time() - _State.gc_started)


def statistics(iterations: list[float], full_collections: list[float]) -> dict[str, Any]:
    """Percentiles of iteration CPU (ms), and the CPU-weighted p99: the iteration length a request
    arriving at a random moment of busy time waits behind, 99 % of the time at most."""
    ordered = sorted(iterations)
    total = sum(ordered)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000 if ordered else 0.0

    weighted, seen = 0.0, 0.0
    for value in ordered:
        seen += value
        if seen >= total * 0.99:
            weighted = value * 1000
            break
    return {
        "iterations": len(ordered),
        "cpu_s": total,
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
        "p999_ms": pct(0.999),
        "max_ms": ordered[-1] * 1000 if ordered else 0.0,
        "over_2ms": sum(1 for value in ordered if value > 0.002),
        "cpu_weighted_p99_ms": weighted,
        "full_gc": len(full_collections),
        "full_gc_max_ms": max(full_collections, default=0.0) * 1000,
    }


def _write() -> None:
    if not _State.written:
        _State.written = True
        _State.out.write_text(json.dumps(statistics(_State.iterations, _State.full_collections)))


def _signal(signum: int, frame: object) -> None:
    _State.signals += 1
    if _State.signals == 1:
        _State.iterations.clear()
        _State.full_collections.clear()
    else:
        _write()


def main() -> None:
    out, flag, module, *args = sys.argv[1:]
    if flag != "-m":
        raise SystemExit(f"usage: {sys.argv[0]} OUT.json -m MODULE [ARGS...]")
    _State.out = Path(out)
    signal.signal(signal.SIGUSR1, _signal)
    asyncio.set_event_loop_policy(_Policy())
    gc.callbacks.append(_gc_callback)
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        _write()


if __name__ == "__main__":
    main()
