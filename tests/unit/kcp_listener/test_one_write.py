"""The one-write response path (``kcp_listener.one_write``) against uvicorn's plain path.

The listener's protocol writes a response's head together with its first body chunk; these tests
send the same raw requests to a real listener server and to a plain uvicorn server (same app,
httptools, no ``OneWriteCycle``) and require the same bytes back, for every shape of answer an
ASGI app can give: a complete body, a streamed (chunked) one, no body, HEAD, an app that fails
before or after starting its answer, pipelined requests and ``Connection: close``."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from embedded_server import EmbeddedServer
from kcp_listener.config import ListenerConfig, ServerKind
from kcp_listener.server import ListenerServer

DEADLINE = 15.0


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        more = message.get("more_body", False)
    path = scope["path"]
    if path == "/fail-before":
        raise RuntimeError("before the answer")
    if path == "/chunked":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-kind", b"stream")]})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": True})
        await send({"type": "http.response.body", "body": b"second"})
        return
    if path == "/empty":
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body"})
        return
    body = b'{"status":"accepted"}'
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 202, "headers": headers})
    if path == "/fail-after":
        raise RuntimeError("after the start")
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def servers() -> AsyncIterator[tuple[int, int]]:
    # uvicorn's cycle is what this module changes (the direct server writes once by construction)
    listener = ListenerServer(ListenerConfig(host="127.0.0.1", port=0, server=ServerKind.UVICORN), app)
    task = asyncio.create_task(listener.run())
    await listener.wait_started()
    plain = EmbeddedServer(app, host="127.0.0.1", port=0, name="plain-uvicorn", keep_alive=60)
    await plain.start()
    assert plain.port is not None
    yield listener.port, plain.port
    await plain.stop()
    await listener.shutdown()
    await asyncio.wait_for(task, DEADLINE)


def request(method: str, path: str, *, close: bool = False, body: bytes = b"{}") -> bytes:
    connection = b"connection: close\r\n" if close else b""
    return (
        b"%s %s HTTP/1.1\r\nhost: listener\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n%s\r\n%s" % (method.encode(), path.encode(), len(body), connection, body)
    )


async def exchange(port: int, data: bytes) -> bytes:
    """Send ``data``, then read until the server closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), DEADLINE)
    finally:
        writer.close()


def without_date(response: bytes) -> bytes:
    return re.sub(rb"date: [^\r]*\r\n", b"", response)


CASES = {
    "complete": request("POST", "/v2/x/event", close=True),
    "chunked": request("POST", "/chunked", close=True),
    "no-body": request("POST", "/empty", close=True),
    "head": request("HEAD", "/v2/x/event", close=True, body=b""),
    "fails-before-start": request("POST", "/fail-before", close=True),
    "fails-after-start": request("POST", "/fail-after"),
    "pipelined": request("POST", "/v2/x/event")
    + request("POST", "/chunked")
    + request("POST", "/empty")
    + request("POST", "/v2/x/event", close=True),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_the_listener_answers_byte_for_byte_like_plain_uvicorn(
    servers: tuple[int, int], case: str
) -> None:
    listener_port, plain_port = servers
    ours = await exchange(listener_port, CASES[case])
    theirs = await exchange(plain_port, CASES[case])
    assert ours.startswith(b"HTTP/1.1 ")
    assert without_date(ours) == without_date(theirs)


async def test_a_client_gone_before_the_answer_leaves_the_server_serving(servers: tuple[int, int]) -> None:
    listener_port, _ = servers
    _reader, writer = await asyncio.open_connection("127.0.0.1", listener_port)
    writer.write(request("POST", "/v2/x/event")[:-1])  # the last body byte never comes
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    answer = await exchange(listener_port, request("POST", "/v2/x/event", close=True))
    assert answer.startswith(b"HTTP/1.1 202 Accepted\r\n")
    assert answer.endswith(b'{"status":"accepted"}')
