"""A request cancelled during its TLS handshake leaves no socket behind (``runtime.tlscancel``).

Each scenario runs on its own event loop, which is closed before the garbage collector is asked:
a socket nobody closed then shows up as a ResourceWarning naming the server's port. The plain
httpx transport is the library behaviour the module works around (if a release fixes it, the first
test says so and the wrapper can go).
"""

from __future__ import annotations

import asyncio
import gc
import ssl
import warnings

import httpx
import pytest

from kyma_operator.runtime.tlscancel import cancel_safe

DEADLINE = 10.0


async def _cancel_during_handshake(transport: httpx.AsyncHTTPTransport) -> int:
    """Connect to a server that accepts TCP and never answers the TLS ClientHello, cancel the
    request while it waits, close the client; the server's port."""
    arrived = asyncio.Event()
    held: list[asyncio.StreamWriter] = []

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read(1)  # the ClientHello's first byte: the client is in its handshake
        arrived.set()
        await reader.read()  # until the client goes away (or the server stops)

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port: int = server.sockets[0].getsockname()[1]
    client = httpx.AsyncClient(transport=transport)
    try:
        request = asyncio.create_task(client.get(f"https://127.0.0.1:{port}/"))
        await asyncio.wait_for(arrived.wait(), DEADLINE)
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
    finally:
        await client.aclose()
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()
    return port


def _leaked_sockets(transport: httpx.AsyncHTTPTransport) -> list[str]:
    """ResourceWarnings about sockets to the scenario's server, once its loop is closed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gc.collect()  # what earlier tests left is not this test's business
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        port = asyncio.run(_cancel_during_handshake(transport))
        gc.collect()
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, ResourceWarning) and f", {port})" in str(w.message)
    ]


def _transport() -> httpx.AsyncHTTPTransport:
    return httpx.AsyncHTTPTransport(verify=ssl.create_default_context())


def test_the_plain_transport_leaks_the_socket_of_a_cancelled_handshake() -> None:
    leaked = _leaked_sockets(_transport())
    assert leaked and all("unclosed" in message for message in leaked)


def test_a_cancel_safe_transport_closes_it() -> None:
    assert _leaked_sockets(cancel_safe(_transport())) == []


def test_requests_still_work_and_wrapping_twice_is_harmless() -> None:
    async def scenario() -> tuple[int, bytes]:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        transport = cancel_safe(cancel_safe(httpx.AsyncHTTPTransport()))
        try:
            async with httpx.AsyncClient(transport=transport) as client:
                response = await asyncio.wait_for(client.get(f"http://127.0.0.1:{port}/"), DEADLINE)
            return response.status_code, response.content
        finally:
            server.close()
            await server.wait_closed()

    assert asyncio.run(scenario()) == (200, b"ok")


def test_a_transport_of_another_shape_is_refused() -> None:
    transport = httpx.AsyncHTTPTransport()
    transport._pool = object()  # type: ignore[assignment]
    with pytest.raises(TypeError, match="tlscancel"):
        cancel_safe(transport)
