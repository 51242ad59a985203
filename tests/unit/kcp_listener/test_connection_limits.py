"""Hostile clients against the real listener server: slowloris, idle floods, slow bodies, clients that
never read, malformed requests. Short configured timeouts; every wait polls with a deadline. Each
test runs on both servers (``ListenerConfig.server``: uvicorn and the direct one)."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kcp_listener.config import ListenerConfig, ServerKind
from kcp_listener.connection_limits import LimitedProtocol
from kcp_listener.direct_server import DirectServer
from kcp_listener.handoff_server import HandoffServer
from kcp_listener.server import ListenerServer
from tests.unit.kcp_listener.sharded import cluster

TIMEOUT = 0.4
"""The timeouts a test is about, in seconds (``short``); the others are ``LONG``, so that a loaded
machine cannot make them fire first."""
LONG = 60.0
KINDS = ("header", "body", "idle", "write")
DEADLINE = 15.0
"""How long a test waits for what must happen (a loaded CI machine is slow, never this slow)."""


class App:
    """Reads the whole body, then answers 200 with ``size`` bytes (``/big``) or a short body."""

    def __init__(self) -> None:
        self.calls = 0
        self.disconnects = 0
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.calls += 1
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnects += 1
                return
            more = message.get("more_body", False)
        await self.release.wait()
        body = b"x" * (8 * 1024 * 1024) if scope["path"] == "/big" else b"ok"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


def short(*kinds: str) -> pytest.MarkDecorator:
    """Run the test with these timeouts at ``TIMEOUT`` and the others at ``LONG``."""
    return pytest.mark.parametrize(
        "served", [frozenset(kinds)], indirect=True, ids=["-".join(kinds) or "none"]
    )


@pytest.fixture(params=list(ServerKind))
def kind(request: pytest.FixtureRequest) -> ServerKind:
    return ServerKind(request.param)


@pytest.fixture
async def served(
    request: pytest.FixtureRequest, kind: ServerKind
) -> AsyncIterator[tuple[ListenerServer, App, dict[str, int]]]:
    fast: frozenset[str] = request.param
    app = App()
    refused: dict[str, int] = {}

    def count(reason: str) -> None:
        refused[reason] = refused.get(reason, 0) + 1

    timeouts = {f"{kind}_timeout_seconds": TIMEOUT if kind in fast else LONG for kind in KINDS}
    config = ListenerConfig(host="127.0.0.1", port=0, server=kind, **timeouts)
    listener = ListenerServer(config, app, on_rejected=count)
    task = asyncio.create_task(listener.run())
    await listener.wait_started()
    yield listener, app, refused
    app.release.set()
    await listener.shutdown()
    await asyncio.wait_for(task, DEADLINE)


def post(path: str = "/v2/x/event", body: bytes = b"{}", *, close: bool = False) -> bytes:
    connection = b"connection: close\r\n" if close else b""
    return b"POST %s HTTP/1.1\r\nhost: kcp\r\ncontent-length: %d\r\n%s\r\n%s" % (
        path.encode(),
        len(body),
        connection,
        body,
    )


async def closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection (fails after ``DEADLINE``)."""
    data = b""
    try:
        while chunk := await asyncio.wait_for(reader.read(65536), DEADLINE):
            data += chunk
    except ConnectionResetError:
        pass
    return data


async def trickle(writer: asyncio.StreamWriter, byte: bytes, every: float) -> None:
    """A slow client: one byte per ``every`` seconds until the server closes the connection."""
    try:
        while not writer.is_closing():
            writer.write(byte)
            await writer.drain()
            await asyncio.sleep(every)
    except ConnectionError:
        pass


async def until(condition: Any, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"not within {DEADLINE} s: {what}")
        await asyncio.sleep(0.01)


@short("header")
async def test_slowloris_headers_are_cut_at_the_header_timeout(
    served: tuple[ListenerServer, App, dict[str, int]],
) -> None:
    listener, app, refused = served
    loop = asyncio.get_running_loop()
    started = loop.time()  # before the server's clock for this connection starts
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(b"POST /v2/x/event HTTP/1.1\r\nhost: kcp\r\nx-slow: ")
    slow = asyncio.create_task(trickle(writer, b"a", TIMEOUT / 8))  # never idle, never done
    assert await closed_by_server(reader) == b""
    assert loop.time() - started >= TIMEOUT  # not before its deadline
    await slow
    writer.close()
    assert refused == {"header-timeout": 1}
    assert app.calls == 0


@short("header")
async def test_an_idle_flood_is_closed_and_a_good_client_is_served_meanwhile(
    served: tuple[ListenerServer, App, dict[str, int]],
) -> None:
    listener, app, refused = served
    flood = [await asyncio.open_connection("127.0.0.1", listener.port) for _ in range(100)]
    good_reader, good_writer = await asyncio.open_connection("127.0.0.1", listener.port)
    good_writer.write(post(close=True))
    assert (await closed_by_server(good_reader)).startswith(b"HTTP/1.1 200")
    good_writer.close()
    for reader, writer in flood:
        assert await closed_by_server(reader) == b""
        writer.close()
    await until(lambda: listener.open_connections == 0, "all connections closed")
    assert refused == {"header-timeout": 100}
    assert app.calls == 1


@short("idle")
async def test_a_kept_alive_connection_is_closed_when_idle(
    served: tuple[ListenerServer, App, dict[str, int]],
) -> None:
    listener, app, refused = served
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(post())
    answer = await closed_by_server(reader)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200")
    assert b"\r\nok\r\n" in answer or answer.endswith(b"\r\n\r\nok")  # chunked or with a length
    assert refused == {"idle-timeout": 1}
    assert app.calls == 1


@short("body")
async def test_a_slow_body_is_cut_at_the_body_timeout_and_the_app_sees_the_disconnect(
    served: tuple[ListenerServer, App, dict[str, int]], kind: ServerKind
) -> None:
    listener, app, refused = served
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(b"POST /v2/x/event HTTP/1.1\r\nhost: kcp\r\ncontent-length: 100000\r\n\r\n{")
    slow = asyncio.create_task(trickle(writer, b" ", TIMEOUT / 8))
    assert await closed_by_server(reader) == b""
    await slow
    writer.close()
    if kind is ServerKind.UVICORN:  # it streams the body to the application
        await until(lambda: app.disconnects == 1, "the application sees the disconnect")
    else:  # it calls the application with a complete body only
        assert app.calls == 0
    assert refused == {"body-timeout": 1}


@short("write")
async def test_a_client_that_never_reads_is_cut_at_the_write_timeout(
    served: tuple[ListenerServer, App, dict[str, int]],
) -> None:
    listener, app, refused = served
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", listener.port))
    _reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(post("/big"))  # 8 MiB answer, and the client reads none of it
    await until(lambda: refused.get("write-timeout") == 1, "the stalled connection is aborted")
    await until(lambda: listener.open_connections == 0, "the connection is gone")
    writer.close()
    assert refused == {"write-timeout": 1}
    assert app.calls == 1


@short()
async def test_a_slow_application_is_not_a_slow_client(
    served: tuple[ListenerServer, App, dict[str, int]], kind: ServerKind
) -> None:
    """Deadlines bound what the client sends and reads, never the time the listener takes to answer."""
    listener, app, refused = served
    app.release.clear()
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(post(close=True))
    await until(lambda: app.calls == 1, "the request reached the application")
    if kind is ServerKind.UVICORN:
        (connection,) = listener.connections._connections
        assert isinstance(connection, LimitedProtocol)
        listener.connections.sweep(asyncio.get_running_loop().time() + 1000)  # long past every timeout
        assert not connection.transport.is_closing()
    else:  # the connection has no deadline while its answer is awaited
        server = listener._server
        assert isinstance(server, DirectServer)
        (direct,) = server._server.connections
        assert direct.deadline is None
    app.release.set()
    assert (await closed_by_server(reader)).startswith(b"HTTP/1.1 200")
    writer.close()
    assert refused == {}


@short()
async def test_malformed_requests_are_counted_each_and_logged_rarely(
    served: tuple[ListenerServer, App, dict[str, int]], caplog: pytest.LogCaptureFixture
) -> None:
    listener, app, refused = served
    caplog.set_level(logging.INFO)
    for _ in range(20):
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        writer.write(b"GARBAGE\x00 / HTTP/1.1\r\n\r\n")
        assert (await closed_by_server(reader)).startswith(b"HTTP/1.1 400")
        writer.close()
    assert refused == {"malformed": 20}
    lines = [r for r in caplog.records if "malformed" in r.getMessage() or "Invalid HTTP" in r.getMessage()]
    assert len(lines) == 1  # one per reason every 10 s, not one per request
    assert app.calls == 0


async def test_the_hand_off_server_has_the_same_deadlines_and_counts_them() -> None:
    """The internal hand-off endpoint shares the protocol: anything on the pod network can connect."""
    config = ListenerConfig(
        header_timeout_seconds=TIMEOUT,
        body_timeout_seconds=TIMEOUT,
        idle_timeout_seconds=TIMEOUT,
        write_timeout_seconds=TIMEOUT,
    )
    replicas = cluster(["a"], config)
    node = replicas["a"]
    server = HandoffServer(node.app, host="127.0.0.1", port=0)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"POST /internal/v1/handoff HTTP/1.1\r\nhost: a\r\n")  # and never the rest
        assert await closed_by_server(reader) == b""
        writer.close()
        await until(
            lambda: node.sample("kcp_listener_connections_refused_total", {"reason": "header-timeout"}) == 1,
            "the timeout counted in the listener's metrics",
        )
    finally:
        await server.shutdown()
        await replicas.aclose()
