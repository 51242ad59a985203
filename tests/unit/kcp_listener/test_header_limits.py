"""The listener's HTTP server bounds request headers: 431 and close, the application never sees them.

On both servers (``ListenerConfig.server``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kcp_listener.config import ListenerConfig, ServerKind
from kcp_listener.server import ListenerServer


class App:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.calls += 1
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})


@pytest.fixture(params=list(ServerKind))
async def server(request: pytest.FixtureRequest) -> AsyncIterator[tuple[ListenerServer, App]]:
    app = App()
    config = ListenerConfig(
        host="127.0.0.1", port=0, max_header_bytes=8 * 1024, max_header_count=20, server=request.param
    )
    listener = ListenerServer(config, app)
    task = asyncio.create_task(listener.run())
    await listener.wait_started()
    yield listener, app
    await listener.shutdown()
    await asyncio.wait_for(task, 10)


async def exchange(port: int, head: bytes, chunk: int = 64 * 1024) -> tuple[bytes, int]:
    """Send ``head`` (stopping early if the server closes), return its answer and the bytes sent."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answer = asyncio.create_task(reader.read())  # read while writing: the server may answer early
    sent = 0
    try:
        for start in range(0, len(head), chunk):
            if answer.done():
                break
            writer.write(head[start : start + chunk])
            await writer.drain()
            sent += len(head[start : start + chunk])
    except ConnectionError:
        pass
    received = await asyncio.wait_for(answer, 10)
    writer.close()
    return received, sent


def request(*headers: bytes) -> bytes:
    return (
        b"POST /v2/lifecycle-manager/event HTTP/1.1\r\nhost: kcp\r\nconnection: close\r\n"
        + b"content-length: 0\r\n"
        + b"".join(h + b"\r\n" for h in headers)
        + b"\r\n"
    )


async def test_a_normal_request_reaches_the_application(server: tuple[ListenerServer, App]) -> None:
    listener, app = server
    answer, _ = await exchange(listener.port, request(b"x-a: 1") + b"")
    assert answer.startswith(b"HTTP/1.1 204")
    assert app.calls == 1


async def test_an_oversized_header_is_refused_with_431_without_reading_it_all(
    server: tuple[ListenerServer, App],
) -> None:
    listener, app = server
    huge = request(b"x-big: " + b"a" * 8 * 1024 * 1024)
    answer, sent = await exchange(listener.port, huge)
    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large")
    assert b"request header fields too large" in answer
    assert sent < len(huge)  # the server closed long before 8 MB were written
    assert app.calls == 0


async def test_too_many_headers_are_refused_with_431(server: tuple[ListenerServer, App]) -> None:
    listener, app = server
    answer, _ = await exchange(listener.port, request(*(b"x-h%d: v" % i for i in range(30))))
    assert answer.startswith(b"HTTP/1.1 431")
    assert app.calls == 0
