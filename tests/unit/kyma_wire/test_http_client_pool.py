"""The shared HTTP/1.1 client's pooling, bounds, idle expiry and malformed answers, against small real
TCP servers on 127.0.0.1 (what the listener's hand-off relies on; TLS in ``test_http_client.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from kyma_wire.http_client import HttpClient, HttpTransportError
from tests.unit.kyma_wire.test_http_client import Handler, read_request, server

OK = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"ok":true}'


@asynccontextmanager
async def tcp_server(handler: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    """A plain-TCP server on 127.0.0.1; yields its URL and one entry per accepted connection."""
    async with server(handler) as (port, connections):
        yield f"http://127.0.0.1:{port}/internal/v1/handoff", connections


async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while await read_request(reader) is not None:
        writer.write(OK)
        await writer.drain()


@pytest.fixture
async def client() -> AsyncIterator[HttpClient]:
    c = HttpClient(max_connections=2, timeout=2.0)
    yield c
    await c.aclose()


async def test_a_post_gets_the_status_and_body_and_the_connection_is_reused(
    client: HttpClient,
) -> None:
    seen: list[bytes] = []

    async def recording(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (request := await read_request(reader)) is not None:
            seen.append(request)
            writer.write(OK)
            await writer.drain()

    async with tcp_server(recording) as (url, connections):
        for _ in range(3):
            response = await client.post(url, b'{"a":1}', {"content-type": "application/json", "x-sig": "s"})
            assert (response.status_code, response.content) == (200, b'{"ok":true}')
        assert len(connections) == 1
    assert seen[0].startswith(b"POST /internal/v1/handoff HTTP/1.1\r\nhost: 127.0.0.1:")
    assert b"\r\nx-sig: s\r\n" in seen[0] and b"\r\ncontent-length: 7\r\n\r\n" in seen[0]
    assert seen[0].endswith(b'\r\n\r\n{"a":1}')


async def test_connections_per_origin_are_bounded(client: HttpClient) -> None:
    release = asyncio.Event()
    two_in = asyncio.Event()
    open_now = 0
    most = 0

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_now, most
        while await read_request(reader) is not None:
            open_now += 1
            most = max(most, open_now)
            if open_now == 2:
                two_in.set()
            await release.wait()
            open_now -= 1
            writer.write(OK)
            await writer.drain()

    async with tcp_server(slow) as (url, _connections):
        posts = [asyncio.create_task(client.post(url, b"{}", {})) for _ in range(5)]
        await asyncio.wait_for(two_in.wait(), 10)
        release.set()
        assert [response.status_code for response in await asyncio.gather(*posts)] == [200] * 5
    assert most == 2


async def test_a_connection_the_server_closed_is_replaced(client: HttpClient) -> None:
    async def one_per_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if await read_request(reader) is not None:
            writer.write(OK)  # keep-alive response, then the server closes anyway (idle timeout)
            await writer.drain()

    async with tcp_server(one_per_connection) as (url, connections):
        assert (await client.post(url, b"{}", {})).status_code == 200
        assert (await client.post(url, b"{}", {})).status_code == 200
        assert len(connections) == 2


async def test_refused_timeout_and_garbage_are_transport_errors() -> None:
    client = HttpClient(timeout=0.3)
    try:
        async with tcp_server(keep_alive) as (url, _):
            pass  # closed: nobody listens on that port any more
        with pytest.raises(HttpTransportError):
            await client.post(url, b"{}", {})

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            await reader.read()  # never answers

        async with tcp_server(silent) as (url, _):
            with pytest.raises(HttpTransportError, match="timeout"):
                await client.post(url, b"{}", {})

        async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(b"NOT HTTP AT ALL\r\n\r\n")
            await writer.drain()

        async with tcp_server(garbage) as (url, _):
            with pytest.raises(HttpTransportError):
                await client.post(url, b"{}", {})

        async def truncated(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(OK[:-3])  # the server dies mid-body

        async with tcp_server(truncated) as (url, _):
            with pytest.raises(HttpTransportError, match="during the response"):
                await client.post(url, b"{}", {})
    finally:
        await client.aclose()


async def test_a_closed_client_refuses_and_bad_urls_are_errors(client: HttpClient) -> None:
    with pytest.raises(HttpTransportError):
        await client.post("ftp://127.0.0.1:1/x", b"{}", {})
    await client.aclose()
    with pytest.raises(HttpTransportError, match="closed"):
        await client.post("http://127.0.0.1:1/x", b"{}", {})


async def test_idle_connections_are_closed_after_the_idle_time() -> None:
    client = HttpClient(idle_seconds=0.0)  # every connection is "too old" at once
    try:
        async with tcp_server(keep_alive) as (url, connections):
            assert (await client.post(url, b"{}", {})).status_code == 200
            assert (await client.post(url, b"{}", {})).status_code == 200
            assert len(connections) == 2
    finally:
        await client.aclose()
