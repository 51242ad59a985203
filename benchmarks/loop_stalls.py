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

It also times a fixed piece of pure-Python work (``_probe_work``, ~0.1 ms) on the loop thread every
``_PROBE_EVERY`` seconds (``speed_probe``: its CPU time, median and p90): identical work, so a run
whose probe is slower ran on a slower CPU (the benchmark VM's host varies), not a costlier agent.
The probe costs the loop ~0.2 % of a core. Benchmark-only: it subclasses the
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
    slow_callbacks: dict[str, list[float]] = {}  # callback name -> [count over 0.5 ms, their CPU s, max]
    iterations: list[float] = []  # one of each per process
    full_collections: list[float] = []
    young_collections: list[float] = []  # generations 0 and 1
    gc_started = 0.0
    probes: list[float] = []  # CPU time of each run of the fixed probe work
    next_probe = 0.0
    signals = 0
    written = False


class _TimedLoop(asyncio.SelectorEventLoop):
    def _run_once(self) -> None:
        started = time.thread_time()
        super()._run_once()  # type: ignore[misc]
        if not _State.written:
            _State.iterations.append(time.thread_time() - started)
            now = time.monotonic()
            if now >= _State.next_probe:
                _State.next_probe = now + _PROBE_EVERY
                probe_started = time.thread_time()
                _probe_work()
                _State.probes.append(time.thread_time() - probe_started)


_PROBE_EVERY = 0.05
"""Seconds between two runs of the speed probe."""


def _probe_work() -> int:
    """Fixed interpreter work (~0.1 ms on the benchmark machine): dict, str and int operations."""
    table: dict[str, int] = {}
    for index in range(300):
        key = f"k{index}"
        table[key] = index * 7
    return sum(value for key, value in table.items() if key.endswith(("1", "3", "7")))


_SLOW_CALLBACK = 0.0005
"""A callback using more CPU than this is named in ``slow_callbacks`` (what makes a turn long)."""


def _callback_name(handle: asyncio.Handle) -> str:
    callback: Any = handle._callback  # type: ignore[attr-defined]
    owner = getattr(callback, "__self__", None)
    name = getattr(callback, "__qualname__", repr(callback))
    if isinstance(owner, asyncio.Task):
        return f"task {owner.get_coro().__qualname__}"  # type: ignore[union-attr]
    if owner is not None and not name.startswith(type(owner).__name__):
        name = f"{type(owner).__name__}.{name}"
    return name


def _time_callbacks() -> None:
    """Wrap ``Handle._run`` (benchmark only): each callback's CPU, and which ones are slow."""
    run = asyncio.events.Handle._run

    def timed(handle: asyncio.Handle) -> None:
        started = time.thread_time()
        run(handle)
        spent = time.thread_time() - started
        if spent > _SLOW_CALLBACK and not _State.written:
            entry = _State.slow_callbacks.setdefault(_callback_name(handle), [0, 0.0, 0.0])
            entry[0] += 1
            entry[1] += spent
            entry[2] = max(entry[2], spent)

    asyncio.events.Handle._run = timed  # type: ignore[method-assign,assignment]


class _Policy(asyncio.DefaultEventLoopPolicy):
    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return _TimedLoop()


def _gc_callback(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _State.gc_started = time.thread_time()
    elif not _State.written:
        spent = time.thread_time() - _State.gc_started
        (_State.full_collections if info["generation"] == 2 else _State.young_collections).append(spent)


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
        result = statistics(_State.iterations, _State.full_collections)
        young = _State.young_collections
        result["young_gc"] = len(young)
        result["young_gc_over_0_5ms"] = sum(1 for spent in young if spent > _SLOW_CALLBACK)
        result["young_gc_max_ms"] = max(young, default=0.0) * 1000
        probes = sorted(_State.probes)
        result["speed_probe"] = {
            "samples": len(probes),
            "p50_us": probes[len(probes) // 2] * 1e6 if probes else 0.0,
            "p90_us": probes[int(len(probes) * 0.9)] * 1e6 if probes else 0.0,
        }
        slow = sorted(_State.slow_callbacks.items(), key=lambda item: -item[1][1])
        result["slow_callbacks"] = [
            {"callback": name, "over_0_5ms": int(count), "cpu_ms": spent * 1000, "max_ms": longest * 1000}
            for name, (count, spent, longest) in slow[:15]
        ]
        _State.out.write_text(json.dumps(result))


def _signal(signum: int, frame: object) -> None:
    _State.signals += 1
    if _State.signals == 1:
        _State.iterations.clear()
        _State.full_collections.clear()
        _State.young_collections.clear()
        _State.slow_callbacks.clear()
        _State.probes.clear()
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
    _time_callbacks()
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        _write()


if __name__ == "__main__":
    main()
