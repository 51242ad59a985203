"""Where an operator process's memory goes: with ``KLM_MEMPROBE_FILE`` set (and Python's own
``PYTHONTRACEMALLOC=<frames>``), SIGUSR2 appends a ``tracemalloc`` summary to that file: the top
allocation sites by line and by file, and the traced total.

Why a ``sitecustomize``: the benchmark starts the real ``python -m kyma_operator``; putting this
directory first on its ``PYTHONPATH`` (``scale_bench --memprobe``) adds the probe without any
change to the operator. Not for production: tracemalloc slows the process and costs memory.
"""

from __future__ import annotations

import os
import signal
import time
import tracemalloc
from types import FrameType

_FILE = os.environ.get("KLM_MEMPROBE_FILE")


def _dump(signum: int, frame: FrameType | None) -> None:
    if _FILE is None or not tracemalloc.is_tracing():
        return
    snapshot = tracemalloc.take_snapshot().filter_traces(
        (
            tracemalloc.Filter(False, tracemalloc.__file__),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
        )
    )
    current, peak = tracemalloc.get_traced_memory()
    when = time.strftime("%H:%M:%S")
    lines = [f"== {when} pid {os.getpid()}: traced {current / 1e6:.1f} MB (peak {peak / 1e6:.1f} MB)"]
    lines.append("-- by file")
    for stat in snapshot.statistics("filename")[:25]:
        lines.append(f"{stat.size / 1e6:9.2f} MB {stat.count:9d} {stat.traceback[0].filename}")
    lines.append("-- by line")
    for stat in snapshot.statistics("lineno")[:40]:
        frame0 = stat.traceback[0]
        lines.append(f"{stat.size / 1e6:9.2f} MB {stat.count:9d} {frame0.filename}:{frame0.lineno}")
    lines.append("-- by traceback (top 12)")
    for stat in snapshot.statistics("traceback")[:12]:
        lines.append(f"{stat.size / 1e6:9.2f} MB {stat.count:9d}")
        lines.extend(f"      {f.filename}:{f.lineno}" for f in stat.traceback)
    with open(_FILE, "a") as out:
        out.write("\n".join(lines) + "\n")


if _FILE is not None:
    signal.signal(signal.SIGUSR2, _dump)
