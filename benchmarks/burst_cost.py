"""What the same Python work costs in CPU when it runs back to back, and when idle gaps separate it.

Why: a replica's full resync is not one busy stretch. Its safety-net requeues fall due as spread
as the start-up round that scheduled them, so three replicas that shared two cores at start-up
each resync with gaps between reconciles, while one replica alone resyncs back to back. On this
VM, work resumed after an idle gap runs slower (caches and CPU state lost to the host meanwhile),
so CPU per reconcile depends on how bursty the work is as well as on the code. This
measures that effect alone: a fixed chunk of dict and JSON work (about a millisecond, like part of
a reconcile) timed with ``time.thread_time`` back to back, then with 2 ms and 10 ms sleeps
between chunks, in alternating rounds.

``python -m benchmarks.burst_cost [--rounds N] [--seconds S] [--cpu C]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections.abc import Sequence
from typing import Any

GAPS = (0.0, 0.002, 0.010)


def fleet(count: int = 3000) -> list[dict[str, Any]]:
    """Kyma-shaped documents: labels and five module entries each."""
    return [
        {
            "metadata": {"name": f"kyma-{i:05d}", "labels": {f"l{j}": f"v{j}-{i}" for j in range(8)}},
            "spec": {"modules": [{"name": f"m{k}", "channel": "regular"} for k in range(5)]},
        }
        for i in range(count)
    ]


def chunk(kymas: list[dict[str, Any]], rng: random.Random) -> int:
    """One piece of work: serialize and parse 40 random documents."""
    total = 0
    for kyma in rng.sample(kymas, 40):
        total += len(json.loads(json.dumps(kyma))["spec"]["modules"])
    return total


def cpu_per_chunk(kymas: list[dict[str, Any]], gap: float, seconds: float, rng: random.Random) -> float:
    """Mean CPU seconds per chunk over ``seconds`` of wall time, sleeping ``gap`` after each."""
    cpu, count = 0.0, 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.thread_time()
        chunk(kymas, rng)
        cpu += time.thread_time() - started
        count += 1
        if gap:
            time.sleep(gap)  # the idle gap under test, not a wait for something
    return cpu / count


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of all gaps (default 3)")
    parser.add_argument(
        "--seconds", type=float, default=5.0, help="wall seconds per gap and round (default 5)"
    )
    parser.add_argument("--cpu", type=int, default=None, help="pin to this CPU (default: not pinned)")
    args = parser.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    kymas, rng = fleet(), random.Random(7)
    for round_ in range(args.rounds):
        figures = [cpu_per_chunk(kymas, gap, args.seconds, rng) for gap in GAPS]
        base = figures[0]
        print(
            f"round {round_ + 1}: "
            + "; ".join(
                f"{'back to back' if gap == 0 else f'{gap * 1000:g} ms gaps'} {cpu * 1e3:.3f} ms/chunk"
                + ("" if gap == 0 else f" (+{(cpu / base - 1) * 100:.0f} %)")
                for gap, cpu in zip(GAPS, figures, strict=True)
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
