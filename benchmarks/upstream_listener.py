"""Build and run upstream's Go watcher listener for the xfcc comparison in ``listener_bench``.

Why: DESIGN.md §7 asks for our listener in xfcc mode against the upstream Go listener, per core, in
the same run. ``upstream_listener/main.go`` serves upstream's listener package (the Go module
``github.com/kyma-project/runtime-watcher/listener``, pinned in ``upstream_listener/go.mod``); this
module builds it once into ``.cache/bin/upstream-watcher-listener`` (``benchmarks/gobuild.py``)
and runs it on 127.0.0.1.

The checksum database does not know the only version the module proxy serves (a pseudo-version
from 2023), so the build sets ``GONOSUMDB`` for that one module path: the hashes in our go.sum
(recorded from the proxy's download) are still checked on every build.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks import gobuild

SOURCE = Path(__file__).resolve().parent / "upstream_listener"
REPO = SOURCE.parents[1]
CACHE = REPO / ".cache" / "bin"
NAME = "upstream-watcher-listener"
MODULE = "github.com/kyma-project/runtime-watcher/listener"
PATH_PREFIX = "/v1/lifecycle-manager/event"
"""The contract of the served version (``/v<contract>/<component>/event``; today's is v2)."""


def build(cache: Path = CACHE) -> Path:
    """The binary, built first if missing or stale (needs Go and the module proxy)."""
    return gobuild.build(SOURCE, NAME, cache=cache, env={"GONOSUMDB": MODULE})


@dataclass
class RunningUpstream:
    port: int
    process: subprocess.Popen[str]
    counts: str = ""
    """What the server printed when it stopped (events received / verified / unknown / queued)."""


def _wait_port(port: int, process: subprocess.Popen[str], deadline: float = 30.0) -> None:
    until = time.monotonic() + deadline
    while time.monotonic() < until:
        if process.poll() is not None:
            raise RuntimeError(f"{NAME} exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{NAME} did not listen on {port} within {deadline:.0f} s")


@contextlib.contextmanager
def serve(port: int, runtime_ids: list[str], workdir: Path, *, cores: int = 1) -> Iterator[RunningUpstream]:
    """The upstream listener on 127.0.0.1:``port`` knowing ``runtime_ids``, on ``cores`` Go
    threads (GOMAXPROCS), stopped (SIGTERM) when the block ends."""
    binary = build()
    ids = workdir / "runtime-ids.txt"
    ids.write_text("".join(f"{i}\n" for i in runtime_ids))
    env = {**os.environ, "GOMAXPROCS": str(cores)}
    process = subprocess.Popen(
        [str(binary), "--addr", f"127.0.0.1:{port}", "--runtimes", str(ids)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    running = RunningUpstream(port, process)
    try:
        _wait_port(port, process)
        yield running
    finally:
        process.terminate()
        try:
            out, _ = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            out, _ = process.communicate()
        running.counts = (out or "").strip()
