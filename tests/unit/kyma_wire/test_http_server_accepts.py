"""A burst of new connections is set up a few per event-loop turn, and waits in the kernel's queue.

Why: asyncio accepts up to its ``backlog`` (100) connections at once and sets them all up in the next
turn; reconnecting attackers (issue 26: 1,000 held connections cut together reconnect together) then
held every admission behind that turn. ``Limits.accepts_per_turn`` bounds the set-up per turn; the
kernel's queue keeps ``Limits.listen_backlog`` (asyncio would shorten it to the batch).
"""

from __future__ import annotations

import asyncio
import select
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

from kyma_wire.http_server import HttpServer, Limits, Request, Response
from tests.polling import eventually

_BURST = 64


def _ok(request: Request) -> Response:
    return Response(200, b"ok")


@contextmanager
def _connecting(port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` non-blocking connects to ``port``, all started before the server runs again."""
    clients = []
    try:
        for _ in range(count):
            client = socket.socket()
            client.setblocking(False)
            client.connect_ex(("127.0.0.1", port))
            clients.append(client)
        yield clients
    finally:
        for client in clients:
            client.close()


def _connected(clients: list[socket.socket], within: float) -> int:
    """How many of ``clients`` the kernel completed (without the server accepting them), polled."""
    done: set[socket.socket] = set()
    deadline = time.monotonic() + within
    while len(done) < len(clients) and time.monotonic() < deadline:
        _, writable, _ = select.select([], [c for c in clients if c not in done], [], 0.05)
        done.update(c for c in writable if c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0)
    return len(done)


async def test_a_burst_is_admitted_a_few_connections_per_turn() -> None:
    server = HttpServer(
        _ok, host="127.0.0.1", port=0, name="accepts", limits=Limits(accepts_per_turn=4, max_connections=1000)
    )
    await server.start()
    assert server.port is not None
    loop = asyncio.get_running_loop()
    per_turn: list[int] = []
    ticking = True

    def tick(before: int) -> None:  # once per loop turn: how many were admitted since the last
        now = len(server.connections)
        per_turn.append(now - before)
        if ticking:
            loop.call_soon(tick, now)

    try:
        with _connecting(server.port, _BURST):
            loop.call_soon(tick, 0)
            await eventually(lambda: len(server.connections) == _BURST, "the whole burst admitted")
            ticking = False
        assert max(per_turn) <= 4, per_turn
        assert sum(per_turn) == _BURST
    finally:
        await server.stop()


async def test_the_kernel_queues_a_burst_the_server_has_not_accepted() -> None:
    """Asyncio listens again with the per-turn batch as the queue length: with a queue of 4, all but
    ~5 of these connects would wait for a SYN retry (1 s) instead of completing in the kernel."""
    server = HttpServer(
        _ok, host="127.0.0.1", port=0, name="queue", limits=Limits(accepts_per_turn=4, listen_backlog=1024)
    )
    await server.start()
    assert server.port is not None
    try:
        with _connecting(server.port, _BURST) as clients:
            # the event loop does not run here: nothing is accepted, the kernel alone completes them
            assert _connected(clients, within=0.9) == _BURST
    finally:
        await server.stop()
