"""``kyma_wire.http_server`` with handlers that return an awaitable answer (the listener's hand-offs
and FastAPI routes): answered in order behind and ahead of in-place answers, a failing or cancelled
answer closes the connection, a client gone meanwhile leaves the server serving, and a graceful
stop waits for the awaited answer and then closes. Real sockets on 127.0.0.1; no sleeps: every wait
is a read with a deadline or a poll of the server's state."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager

from kyma_wire.http_server import HttpServer, Limits, Request, Response
from tests.hostile import attacks
from tests.hostile.attacks import Target, statuses

_DEADLINE = 10.0


class Handler:
    """``/now/<n>`` is answered in place; ``/later/<n>`` when the test releases it; ``/fail`` raises."""

    def __init__(self) -> None:
        self.waiting: dict[str, asyncio.Future[None]] = {}

    def __call__(self, request: Request) -> Response | Awaitable[Response]:
        if request.path.startswith("/now/"):
            return Response(200, request.path.encode())
        return self._later(request.path)

    async def _later(self, path: str) -> Response:
        released = self.waiting[path] = asyncio.get_running_loop().create_future()
        await released
        if path == "/fail":
            raise RuntimeError("the awaited answer failed")
        return Response(201, path.encode())

    async def reached(self, path: str) -> None:
        """Polls (with a deadline) until the request for ``path`` is being answered."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _DEADLINE
        while path not in self.waiting:
            assert loop.time() < deadline, f"{path} never reached the handler"
            await asyncio.sleep(0.005)

    async def release(self, path: str) -> None:
        await self.reached(path)
        self.waiting[path].set_result(None)


@asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[tuple[HttpServer, Target]]:
    server = HttpServer(handler, host="127.0.0.1", port=0, name="awaited", limits=Limits(header_timeout=5.0))
    await server.start()
    try:
        yield server, Target("127.0.0.1", server.port or 0)
    finally:
        await server.stop()


def get(path: str, *, close: bool = False) -> bytes:
    connection = b"connection: close\r\n" if close else b""
    return b"GET %s HTTP/1.1\r\nhost: x\r\n%s\r\n" % (path.encode(), connection)


async def test_awaited_and_in_place_answers_keep_the_pipelined_order() -> None:
    handler = Handler()
    async with serving(handler) as (_server, target):
        pipeline = b"".join(get(f"/{kind}/{n}") for n, kind in enumerate(("now", "later", "now", "later"), 1))
        pipeline += get("/now/5", close=True)
        exchange = asyncio.create_task(attacks.exchange(target, pipeline))
        await handler.release("/later/2")
        await handler.release("/later/4")
        outcome = await asyncio.wait_for(exchange, _DEADLINE)
        assert outcome.closed
        assert statuses(outcome.answer) == [200, 201, 200, 201, 200]
        bodies = [b"/now/1", b"/later/2", b"/now/3", b"/later/4", b"/now/5"]
        positions = [outcome.answer.index(body) for body in bodies]
        assert positions == sorted(positions)


async def test_a_failing_awaited_answer_is_a_500_and_a_close() -> None:
    handler = Handler()
    async with serving(handler) as (_server, target):
        exchange = asyncio.create_task(attacks.exchange(target, get("/fail") + get("/now/never")))
        await handler.release("/fail")
        outcome = await asyncio.wait_for(exchange, _DEADLINE)
        assert outcome.closed and statuses(outcome.answer) == [500]


async def test_a_client_gone_while_its_answer_is_awaited_leaves_the_server_serving() -> None:
    handler = Handler()
    async with serving(handler) as (server, target):
        _reader, writer = await asyncio.open_connection(target.host, target.port)
        writer.write(get("/later/gone"))
        await writer.drain()
        await handler.reached("/later/gone")
        writer.close()  # unseen until the answer: the connection does not read while it is awaited
        await handler.release("/later/gone")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _DEADLINE
        while server.connections:
            assert loop.time() < deadline, "the connection was never closed"
            await asyncio.sleep(0.005)
        outcome = await attacks.exchange(target, get("/now/after", close=True))
        assert statuses(outcome.answer) == [200]


async def test_a_graceful_stop_waits_for_the_awaited_answer_then_closes() -> None:
    handler = Handler()
    server = HttpServer(handler, host="127.0.0.1", port=0, name="awaited", graceful_seconds=_DEADLINE)
    await server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(get("/later/stop"))
    await writer.drain()
    await handler.reached("/later/stop")
    stopping = asyncio.create_task(server.stop())
    await handler.release("/later/stop")
    answer = await asyncio.wait_for(reader.read(), _DEADLINE)  # until the server closes
    await asyncio.wait_for(stopping, _DEADLINE)
    writer.close()
    assert statuses(answer) == [201]
    assert b"connection: close" in answer
