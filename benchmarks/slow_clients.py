"""300 slow clients against the real listener: how long each is held, and is everyone else served?

Why: DESIGN.md §12 wants the listener to close slow connections within 60 s (upstream's Go listener
does); before issue 26 uvicorn held all 300 for the whole 70 s observation. This bench starts the
listener server process of ``benchmarks.listener_server`` (the real ``ListenerServer``, intake and
controllers, its default timeouts unless told otherwise), then holds, at once:

* ``--clients``/4 that connect and send nothing,
* ``--clients``/4 slowloris clients (a header byte every ``--trickle`` seconds, never finishing),
* ``--clients``/4 slow bodies (complete headers, then a body byte every ``--trickle`` seconds),
* ``--clients``/4 that send one request, read its answer and then stay idle (keep-alive),

and sends signed events from a good client every 0.5 s meanwhile. It reports, per kind, how many
the server closed within ``--observe`` seconds and when (min/median/max), and whether the good
events were all answered 200 (with their p99). ``--tree DIR`` runs another checkout's listener
(e.g. the main branch before the change) with the same clients.

    python -m benchmarks.slow_clients                       # defaults: 300 clients, 75 s
    python -m benchmarks.slow_clients --tree /work/main     # the same against another checkout
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.listener_bench import HOST, REPO, Runtimes, presign, server

KINDS = ("silent", "slowloris", "slow-body", "idle-keepalive")


async def _until_closed(reader: asyncio.StreamReader, limit: float) -> float | None:
    """Seconds until the server closed the connection (EOF or reset), None if still open at ``limit``."""
    started = time.monotonic()
    try:
        while await asyncio.wait_for(reader.read(65536), max(0.001, limit - (time.monotonic() - started))):
            pass
    except TimeoutError:
        return None
    except ConnectionError:
        pass
    return time.monotonic() - started


async def _trickle(writer: asyncio.StreamWriter, every: float) -> None:
    try:
        while not writer.is_closing():
            await asyncio.sleep(every)
            writer.write(b"a")
            await writer.drain()
    except ConnectionError:
        pass


async def _client(kind: str, port: int, observe: float, trickle: float, first: bytes) -> float | None:
    reader, writer = await asyncio.open_connection(HOST, port)
    task: asyncio.Task[None] | None = None
    try:
        if kind == "slowloris":
            writer.write(b"POST /v2/lifecycle-manager/event HTTP/1.1\r\nhost: kcp\r\nx-slow: ")
            task = asyncio.create_task(_trickle(writer, trickle))
        elif kind == "slow-body":
            writer.write(
                b"POST /v2/lifecycle-manager/event HTTP/1.1\r\nhost: kcp\r\n"
                b"content-type: application/json\r\ncontent-length: 1000\r\n\r\n{"
            )
            task = asyncio.create_task(_trickle(writer, trickle))
        elif kind == "idle-keepalive":
            writer.write(first)
            await reader.readuntil(b"}")  # the 401/200 answer's JSON body ends the exchange
        return await _until_closed(reader, observe)
    finally:
        if task is not None:
            task.cancel()
        writer.close()


async def _good(port: int, runtimes: Runtimes, count: int, every: float) -> list[tuple[int, float]]:
    """``count`` signed events, each signed just before it is sent, on a new connection each."""
    out: list[tuple[int, float]] = []
    for index in range(count):
        raw = presign(runtimes, [index % len(runtimes.ids)], port)[0].raw(port)
        started = time.perf_counter()
        reader, writer = await asyncio.open_connection(HOST, port)
        writer.write(raw)
        line = await reader.readline()
        out.append((int(line.split()[1]), time.perf_counter() - started))
        writer.close()
        await asyncio.sleep(every)
    return out


async def _run(port: int, args: argparse.Namespace, runtimes: Runtimes) -> None:
    per_kind = args.clients // len(KINDS)
    first = presign(runtimes, [0], port)[0].raw(port)
    observe, trickle = args.observe, args.trickle
    clients = {
        kind: [asyncio.create_task(_client(kind, port, observe, trickle, first)) for _ in range(per_kind)]
        for kind in KINDS
    }
    good = asyncio.create_task(_good(port, runtimes, int(args.observe / 0.5), 0.5))
    print(f"{'kind':<16}{'clients':>8}{'closed':>8}{'min s':>8}{'median s':>10}{'max s':>8}")
    for kind, tasks in clients.items():
        held = await asyncio.gather(*tasks)
        closed = [t for t in held if t is not None]
        figures = (
            f"{min(closed):>8.1f}{statistics.median(closed):>10.1f}{max(closed):>8.1f}"
            if closed
            else f"{'-':>8}{'-':>10}{'-':>8}"
        )
        print(f"{kind:<16}{len(tasks):>8}{len(closed):>8}{figures}")
    answers = await good
    ok = sum(1 for status, _ in answers if status == 200)
    latencies = sorted(seconds for _, seconds in answers)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000
    print(f"good events meanwhile: {ok}/{len(answers)} answered 200, p99 {p99:.1f} ms (new connection each)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=300, help="slow clients in all (a quarter per kind)")
    parser.add_argument("--observe", type=float, default=75.0, help="seconds to watch each client")
    parser.add_argument("--trickle", type=float, default=2.0, help="seconds between a slow client's bytes")
    parser.add_argument("--tree", type=Path, default=REPO, help="checkout whose listener runs")
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="set the header, body, idle and write timeouts of the listener to this (default: its own)",
    )
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"tree {args.tree}; {args.clients} slow clients, observed {args.observe:.0f} s"
    )
    runtimes = Runtimes.generate(20)
    options: dict[str, object] = {}
    if args.timeout is not None:
        options = {f"{name}_timeout": args.timeout for name in ("header", "body", "idle", "write")}
    with tempfile.TemporaryDirectory() as tmp:
        fixture = Path(tmp) / "runtimes.json"
        runtimes.write_fixture(fixture)
        with server("listener", fixture, args.tree, sink="count", **options) as port:
            asyncio.run(_run(port, args, runtimes))


if __name__ == "__main__":
    main()
