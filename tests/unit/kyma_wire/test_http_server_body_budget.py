"""``Limits.max_buffered_body_bytes``: the bodies of all connections together stay under a bound.

Why: ``max_body_bytes`` bounds one request; 40 connections each sending a body just under the
agent's 8 MiB limit took it to 348 MiB (its pod's limit is 200 Mi). At the bound the connection
whose body has been arriving longest is cut (a stalled client) if older than ``shed_after``, else
the request whose piece does not fit is answered 503 and closed. Every wait is a poll or a read with
a deadline; the servers run on this test's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from kyma_wire.http_server import HttpServer, Limits, Request, Response
from tests.hostile import attacks
from tests.hostile.attacks import Target, statuses
from tests.polling import eventually

_BODY = 64 * 1024
_BUDGET = 100 * 1024
_DEADLINE = 10.0


def _echo_size(request: Request) -> Response:
    return Response(200, str(len(request.body)).encode())


@asynccontextmanager
async def body_server(*, shed_after: float) -> AsyncIterator[tuple[HttpServer, list[str]]]:
    cut: list[str] = []
    server = HttpServer(
        _echo_size,
        host="127.0.0.1",
        port=0,
        name="bodies",
        limits=Limits(
            max_body_bytes=_BODY,
            max_buffered_body_bytes=_BUDGET,
            body_timeout=30.0,
            shed_after=shed_after,
        ),
        observe=cut.append,
    )
    await server.start()
    try:
        yield server, cut
    finally:
        await server.stop()


def _head(length: int = _BODY) -> bytes:
    return b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % length


async def _open(server: HttpServer, data: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await attacks.connect(Target("127.0.0.1", server.port or 0))
    writer.write(data)
    await writer.drain()
    return reader, writer


async def test_a_body_that_does_not_fit_beside_young_ones_is_answered_503_and_the_others_go_on() -> None:
    async with body_server(shed_after=30.0) as (server, cut):
        first_reader, first = await _open(server, _head() + b"a" * 60_000)
        await eventually(lambda: server.buffered_body_bytes == 60_000, "the first body held")
        second_reader, second = await _open(server, _head() + b"b" * 60_000)
        refused = await attacks.read_until_closed(second_reader, _DEADLINE)
        assert refused.closed and statuses(refused.answer) == [503]
        assert b"too many request bytes in flight" in refused.answer
        assert cut == ["body_budget"] and server.buffered_body_bytes == 60_000
        first.write(b"a" * (_BODY - 60_000))  # the first one completes and is answered whole
        answer = await attacks.read_answer(first_reader, _DEADLINE)
        assert statuses(answer) == [200] and answer.endswith(str(_BODY).encode())
        await eventually(lambda: server.buffered_body_bytes == 0, "the answered body released")
        first.transport.abort()
        second.transport.abort()


async def test_a_stalled_body_is_cut_to_make_room_for_a_new_one() -> None:
    async with body_server(shed_after=0.0) as (server, cut):
        stalled_reader, stalled = await _open(server, _head() + b"a" * 60_000)
        await eventually(lambda: server.buffered_body_bytes == 60_000, "the stalled body held")
        fresh_reader, fresh = await _open(server, _head() + b"b" * _BODY)
        assert statuses(await attacks.read_answer(fresh_reader, _DEADLINE)) == [200]
        cutoff = await attacks.read_until_closed(stalled_reader, _DEADLINE)
        assert cutoff.closed and cutoff.answer == b""  # cut, not answered
        assert cut == ["body_budget"] and server.shed == 1
        await eventually(lambda: server.buffered_body_bytes == 0, "every body released")
        stalled.transport.abort()
        fresh.transport.abort()


async def test_many_connections_sending_bodies_never_hold_more_than_the_bound() -> None:
    async with body_server(shed_after=30.0) as (server, cut):
        peak = 0
        writers = []
        for index in range(40):
            _, writer = await _open(server, _head() + bytes([97 + index % 26]) * 40_000)
            writers.append(writer)
            peak = max(peak, server.buffered_body_bytes)
        await eventually(lambda: len(cut) == 40 - _BUDGET // 40_000, "the bodies that do not fit refused")
        assert peak <= _BUDGET and server.buffered_body_bytes == (_BUDGET // 40_000) * 40_000
        for writer in writers:
            writer.transport.abort()
        await eventually(lambda: server.buffered_body_bytes == 0 and not server.connections, "all released")


def test_a_bound_below_one_request_is_refused() -> None:
    with pytest.raises(ValueError, match="could never be read"):
        HttpServer(
            _echo_size,
            host="127.0.0.1",
            port=0,
            name="bad",
            limits=Limits(max_body_bytes=_BODY, max_buffered_body_bytes=_BODY - 1),
        )
