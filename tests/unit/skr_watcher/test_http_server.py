"""The agent's HTTP/1.1 server over real sockets on 127.0.0.1: keep-alive, limits, slow clients, stop.

Raw bytes are written where a client library would refuse to send them (malformed, oversized,
pipelined, slow requests); answers are read until the server closes, with a deadline.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from kyma_wire.http_server import HttpServer, Limits, Request, Response
from tests.controlplane.pki import CertificateAuthority
from tests.hostile import attacks
from tests.hostile.stepped import SteppedLoop, cut_after_the_timeout

_DEADLINE = 10.0


def echo(request: Request) -> Response:
    if request.path == "/boom":
        raise RuntimeError("handler bug")
    if request.path == "/huge-answer":
        return Response(200, b"x" * (16 << 20))
    if request.body_too_large:
        return Response(413, b"too large", ((b"content-type", b"text/plain"),))
    text = f"{request.method} {request.path} {len(request.body)}".encode()
    return Response(
        200, text, ((b"content-type", b"text/plain"), (b"x-echo", request.header(b"x-in") or b""))
    )


@asynccontextmanager
async def serving(
    limits: Limits | None = None, ssl_context: ssl.SSLContext | None = None, graceful: float = 2.0
) -> AsyncIterator[HttpServer]:
    server = HttpServer(
        echo,
        host="127.0.0.1",
        port=0,
        name="test",
        limits=limits or Limits(),
        ssl_context=ssl_context,
        graceful_seconds=graceful,
    )
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def exchange(port: int, data: bytes) -> bytes:
    """Write ``data``, read until the server closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    try:
        return await read_until_closed(reader)
    finally:
        writer.close()


async def read_until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything until the server closes (b"" when it aborted the connection)."""
    try:
        return await asyncio.wait_for(reader.read(), _DEADLINE)
    except ConnectionResetError:
        return b""


def statuses(raw: bytes) -> list[int]:
    return [int(status) for status in re.findall(rb"HTTP/1\.1 (\d{3}) ", raw)]


async def test_keep_alive_serves_many_requests_on_one_connection() -> None:
    async with serving() as server, httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
        for i in range(3):
            response = await http.post("/validate/x", content=b"a" * i, headers={"x-in": str(i)})
            assert response.status_code == 200 and response.text == f"POST /validate/x {i}"
            assert response.headers["x-echo"] == str(i) and "date" in response.headers
        assert len(server.connections) == 1
        head = await http.head("/healthz")
        assert head.status_code == 200 and head.content == b"" and head.headers["content-length"] == "15"


async def test_pipelined_requests_are_answered_in_order() -> None:
    async with serving() as server:
        raw = await exchange(
            server.port or 0,
            b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
            b"GET /b%2Fc?q=1 HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
    assert statuses(raw) == [200, 200, 200]
    assert raw.index(b"POST /a 3") < raw.index(b"GET /b/c 0") < raw.index(b"GET /c 0")
    assert raw.count(b"connection: close") == 1


async def test_chunked_bodies_and_expect_continue() -> None:
    async with serving() as server:
        raw = await exchange(
            server.port or 0,
            b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n"
            b"Connection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
    assert statuses(raw) == [100, 200] and raw.endswith(b"POST /c 5")


async def test_http_1_0_closes_after_the_answer() -> None:
    async with serving() as server:
        raw = await exchange(server.port or 0, b"GET /old HTTP/1.0\r\n\r\n")
    assert statuses(raw) == [200] and b"connection: close" in raw


@pytest.mark.parametrize("chunked", [False, True])
async def test_oversized_bodies_get_the_handlers_answer_and_a_close(chunked: bool) -> None:
    async with serving(Limits(max_body_bytes=10)) as server:
        if chunked:
            request = b"POST /big HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n"
            request += b"8\r\n12345678\r\n"  # no last chunk: the server must not wait for one
        else:
            request = b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n"  # body never sent
        raw = await exchange(server.port or 0, request)
    assert statuses(raw) == [413] and b"connection: close" in raw and raw.endswith(b"too large")


async def test_a_body_at_the_limit_is_accepted() -> None:
    async with serving(Limits(max_body_bytes=10)) as server:
        raw = await exchange(
            server.port or 0,
            b"POST /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nConnection: close\r\n\r\n0123456789",
        )
    assert statuses(raw) == [200] and raw.endswith(b"POST /ok 10")


async def test_oversized_headers_get_431() -> None:
    async with serving(Limits(max_header_bytes=1024, max_headers=5)) as server:
        port = server.port or 0
        big = await exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 2000 + b"\r\n\r\n")
        long_url = await exchange(port, b"GET /" + b"u" * 2000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        many = await exchange(
            port, b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(6)) + b"\r\n"
        )
    for raw in (big, long_url, many):
        assert statuses(raw) == [431] and b"connection: close" in raw


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"NOT HTTP AT ALL\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n\r\n",
    ],
)
async def test_malformed_requests_get_4xx_and_a_close(request_bytes: bytes) -> None:
    async with serving() as server:
        raw = await exchange(server.port or 0, request_bytes)
    (status,) = statuses(raw)
    assert status in (400, 417) and b"connection: close" in raw


async def test_a_failing_handler_answers_500_and_closes() -> None:
    async with serving() as server:
        raw = await exchange(server.port or 0, b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\n")
    assert statuses(raw) == [500] and b"connection: close" in raw


def test_slow_clients_and_idle_connections_are_cut_off() -> None:
    async def scenario() -> None:
        limits = Limits(header_timeout=0.3, body_timeout=0.3, keep_alive_timeout=0.3)
        async with serving(limits) as server:
            target = attacks.Target("127.0.0.1", server.port or 0)

            def receiving() -> bool:
                return any(connection.receiving for connection in server.connections)

            def idle_after_an_answer() -> bool:
                return any(c.answered and not c.receiving for c in server.connections)

            def accepted() -> bool:
                return bool(server.connections)

            cases = {
                "slow headers": (b"GET / HTTP/1.1\r\nHost: x\r\n", receiving),  # never finished
                "slow body": (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nab", receiving),
                "idle": (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", idle_after_an_answer),  # then nothing
                "silent": (b"", accepted),  # connects, never sends
            }
            raw = {
                name: await cut_after_the_timeout(ready, target, request, trickle=False)
                for name, (request, ready) in cases.items()
            }
        assert statuses(raw["slow headers"]) == [408] and statuses(raw["slow body"]) == [408]
        assert statuses(raw["idle"]) == [200] and b"connection: close" not in raw["idle"]  # closed, no answer
        assert raw["silent"] == b""

    with asyncio.Runner(loop_factory=SteppedLoop) as runner:  # the test moves its clock
        runner.run(scenario())


async def test_a_client_that_does_not_read_a_big_answer_is_cut_after_the_write_timeout() -> None:
    async with serving(Limits(write_timeout=0.3, keep_alive_timeout=30.0)) as server:
        _reader, writer = await attacks.connect(
            attacks.Target("127.0.0.1", server.port or 0), receive_buffer=4096, limit=4096
        )
        try:
            writer.write(b"GET /huge-answer HTTP/1.1\r\nHost: x\r\n\r\n")  # 16 MiB, never read
            await writer.drain()
            deadline = asyncio.get_running_loop().time() + _DEADLINE
            while server.connections or server.timeouts == 0:
                assert asyncio.get_running_loop().time() < deadline, "the connection was never cut"
                await asyncio.sleep(0.02)
            assert server.timeouts == 1
        finally:
            writer.transport.abort()


async def test_at_the_cap_an_idle_connection_makes_room_and_busy_fresh_ones_refuse() -> None:
    async with serving(Limits(max_connections=1, shed_after=60.0)) as server:
        port = server.port or 0
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert b"200 OK" in await asyncio.wait_for(reader.readuntil(b"GET / 0"), _DEADLINE)
            # the first connection is idle now: the second displaces it and is answered
            assert statuses(await exchange(port, b"GET / HTTP/1.0\r\n\r\n")) == [200]
            assert await read_until_closed(reader) == b""
            assert server.shed == 1
        finally:
            writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"GET / HTTP/1.1\r\n")  # a fresh request arriving: not displaced
            await writer.drain()
            deadline = asyncio.get_running_loop().time() + _DEADLINE
            while not any(connection.receiving for connection in server.connections):
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.01)
            assert await exchange(port, b"GET / HTTP/1.0\r\n\r\n") == b""
            assert server.refused == 1
        finally:
            writer.close()


async def test_graceful_stop_finishes_the_request_under_way_and_closes_idle_ones() -> None:
    server = HttpServer(echo, host="127.0.0.1", port=0, name="test", graceful_seconds=_DEADLINE)
    await server.start()
    port = server.port or 0
    idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", port)
    busy_reader, busy_writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        busy_writer.write(b"POST /late HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab")
        await busy_writer.drain()
        deadline = asyncio.get_running_loop().time() + _DEADLINE
        while len(server.connections) < 2 or not any(c.receiving for c in server.connections):
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        stopping = asyncio.create_task(server.stop())
        assert await asyncio.wait_for(idle_reader.read(), _DEADLINE) == b""  # idle: closed at once
        assert not stopping.done()
        busy_writer.write(b"cd")
        raw = await asyncio.wait_for(busy_reader.read(), _DEADLINE)
        assert statuses(raw) == [200] and b"connection: close" in raw and raw.endswith(b"POST /late 4")
        await asyncio.wait_for(stopping, _DEADLINE)
        assert server.task.done()
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)
    finally:
        idle_writer.close()
        busy_writer.close()


async def test_graceful_stop_aborts_what_does_not_finish_in_time() -> None:
    server = HttpServer(echo, host="127.0.0.1", port=0, name="test", graceful_seconds=0.2)
    await server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port or 0)
    try:
        writer.write(b"POST /never HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n")
        await writer.drain()
        deadline = asyncio.get_running_loop().time() + _DEADLINE
        while not any(c.receiving for c in server.connections):  # arrived: not closed as idle
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        await server.stop()  # in this task: no loop turn between its return and the check below
        # released before stop() returns: a loop closed right after would otherwise leave the
        # socket to the garbage collector ("unclosed transport" in some later test)
        assert server.closed == 1 and not server.connections
        assert await read_until_closed(reader) == b""
    finally:
        writer.close()


async def test_tls(tmp_path: Path) -> None:
    ca = CertificateAuthority("test-ca")
    ca.issue("agent", ip_addresses=("127.0.0.1",), server=True).write(
        tmp_path / "tls.crt", tmp_path / "tls.key"
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client = ssl.create_default_context(cadata=ca.cert_pem.decode())
    async with (
        serving(ssl_context=context) as server,
        httpx.AsyncClient(base_url=f"https://127.0.0.1:{server.port}", verify=client) as http,
    ):
        for _ in range(2):
            response = await http.post("/validate/x", content=b"{}")
            assert response.status_code == 200 and response.text == "POST /validate/x 2"
        assert len(server.connections) == 1
