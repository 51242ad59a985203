"""A connection closing after an answer its client never reads is cut after the write timeout.

Why: closing waits until the answer is written (``transport.close``); a client that does not read
(``Connection: close``, a refusal, a shed idle connection) kept the connection open for good: its
deadline was cancelled when it began to close, so its slot under the connection cap was never
given back (a few such clients fill the cap; closing connections are never shed), and a server on
uvloop, whose ``wait_closed`` waits for every connection it accepted, would wait for a shed one.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

from kyma_wire.http_server import HttpServer, Limits, Request, Response
from tests.polling import eventually

_LARGE = Response(200, b"x" * (16 << 20))
"""More than the kernel buffers of a client that does not read (its receive buffer is kept small)."""


def _large(request: Request) -> Response:
    return _LARGE


@contextmanager
def _never_reading(port: int, request: bytes) -> Iterator[socket.socket]:
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(("127.0.0.1", port))
    client.sendall(request)
    try:
        yield client
    finally:
        client.close()


async def test_an_answer_with_close_that_is_never_read_is_cut_after_the_write_timeout() -> None:
    cut: list[str] = []
    server = HttpServer(
        _large,
        host="127.0.0.1",
        port=0,
        name="closing",
        limits=Limits(write_timeout=0.3, keep_alive_timeout=30.0),
        on_timeout=cut.append,
    )
    await server.start()
    assert server.port is not None
    try:
        with _never_reading(server.port, b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"):
            await eventually(lambda: server.closed == 1, "the never-reading client cut", within=10)
            assert not server.connections
            assert cut == ["write"]
    finally:
        await server.stop()


async def test_a_refused_request_whose_answer_is_never_read_is_cut() -> None:
    """The lingering close after a refusal (431 here) waits for the answer to be written, too."""
    server = HttpServer(
        _large,
        host="127.0.0.1",
        port=0,
        name="refusing",
        limits=Limits(max_header_bytes=64, write_timeout=0.3, linger_seconds=0.2),
        error=lambda status, reason: _LARGE,
    )
    await server.start()
    assert server.port is not None
    try:
        with _never_reading(server.port, b"GET /" + b"a" * 200 + b" HTTP/1.1\r\n\r\n"):
            await eventually(lambda: server.closed == 1, "the never-reading client cut", within=10)
            assert not server.connections
    finally:
        await server.stop()
