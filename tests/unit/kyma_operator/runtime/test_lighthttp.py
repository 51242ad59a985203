"""The Lease thread's HTTP client held to httpx's behaviour: its head parser against h11's verdicts
(httpx's parser) on well-formed and hostile answers, and both transports against the same scripted
servers on 127.0.0.1 (same answers, same refusals); then what only the light client does itself:
keeping, expiring and replacing connections, the retry of a stale one, timeouts and cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import re
import ssl
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import h11
import pytest

from kyma_operator.runtime.asynchttp import AsyncHttp, HttpTransport
from kyma_operator.runtime.errors import KubeError, KubeTransportError
from kyma_operator.runtime.kubeconfig import ClusterAccess
from kyma_operator.runtime.lighthttp import (
    LightHttp,
    ProtocolError,
    _Answer,
    _Connection,
    chunk_size,
    parse_head,
)
from tests.polling import eventually

# -- the head parser against h11 --------------------------------------------------------------

HEADS = [
    b"HTTP/1.1 200 OK\r\nContent-Length: 5",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\nContent-Length: 9",
    b"HTTP/1.1 200 OK",
    b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 0",
    b"HTTP/1.1 200 \r\nContent-Length: 1",
    b"HTTP/1.1 200\r\nContent-Length: 1",
    b"HTTP/1.0 200 OK\r\nContent-Length: 2",
    b"HTTP/1.1 200 OK\r\ncontent-length:   7  ",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3, 3",
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0",
    b"HTTP/1.1 200 OK\r\nX-Empty:\r\nContent-Length: 1",
    b"HTTP/1.1 200 r\xe9ason \x7f\r\nX: caf\xe9 \x01\r\nContent-Length: 1",
    b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999",
    # hostile or malformed
    b"HTTP/1.1 2000 OK",
    b"HTTP/1.1 20 OK",
    b"HTTX/1.1 200 OK",
    b"HTTP/1.1  200 OK",
    b"garbage",
    b"",
    b"HTTP/1.1 200 O\x00K",
    b"HTTP/1.1 200 OK\r\nNo-Colon-Here",
    b"HTTP/1.1 200 OK\r\nBad Name: x",
    b"HTTP/1.1 200 OK\r\nX : a",
    b"HTTP/1.1 200 OK\r\n: no-name",
    b"HTTP/1.1 200 OK\r\nX: a\x00b",
    b"HTTP/1.1 200 OK\r\nX: a\x0bb",
    b"HTTP/1.1 200 OK\r\nContent-Length: -1",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1x",
    b"HTTP/1.1 200 OK\r\nContent-Length:",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3, 4",
    b"HTTP/1.1 200 OK\r\nContent-Length: 999999999999999999999",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
]

STRICTER_THAN_H11 = {
    # h11 joins a folded line into the header before it (obs-fold); an API server never folds
    b"HTTP/1.1 200 OK\r\nX: a\r\n continued\r\nContent-Length: 1",
    # h11 reads any HTTP/d.d; an API server speaks 1.1
    b"HTTP/2.0 200 OK\r\nContent-Length: 1",
}


def h11_after_a_get() -> h11.Connection:
    """An h11 client connection that sent a GET and waits for the answer."""
    connection = h11.Connection(h11.CLIENT)
    connection.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
    connection.send(h11.EndOfMessage())
    return connection


def h11_verdict(head: bytes) -> tuple[int, str] | None:
    """(status, framing) of h11's reading of ``head`` as the answer to a GET; None if refused."""
    connection = h11_after_a_get()
    connection.receive_data(head + b"\r\n\r\n")
    try:
        event = connection.next_event()
    except h11.RemoteProtocolError:
        return None
    assert isinstance(event, h11.Response), event
    reader = connection._reader  # h11's framing decision (pinned: h11 0.16 under httpcore 1.0.9)
    kind = type(reader).__name__
    if kind == "ContentLengthReader":
        return event.status_code, f"length {reader._length}"  # type: ignore[union-attr]
    return event.status_code, {"ChunkedReader": "chunked", "Http10Reader": "until close"}[kind]


def light_verdict(head: bytes) -> tuple[int, str] | None:
    """The same reading by ``parse_head``, of what the client reads as the head: up to the first
    empty line."""
    try:
        parsed = parse_head((head + b"\r\n\r\n").split(b"\r\n\r\n")[0])
    except ProtocolError:
        return None
    if parsed.chunked:
        return parsed.status, "chunked"
    if parsed.content_length is not None:
        return parsed.status, f"length {parsed.content_length}"
    return parsed.status, "until close"


@pytest.mark.parametrize("head", HEADS, ids=repr)
def test_the_head_parser_reads_and_refuses_what_h11_does(head: bytes) -> None:
    assert light_verdict(head) == h11_verdict(head)


def beyond_an_api_server(head: bytes) -> bool:
    """What h11 reads and this client refuses on purpose: a bare LF as line end, a folded header
    line, an HTTP version other than 1.0 and 1.1."""
    lines = (head + b"\r\n\r\n").split(b"\r\n\r\n")[0].split(b"\r\n")
    return (
        any(b"\n" in line for line in lines)
        or any(line[:1] in (b" ", b"\t") for line in lines[1:])
        or not lines[0].startswith((b"HTTP/1.0 ", b"HTTP/1.1 "))
    )


def test_mutated_heads_are_never_read_where_h11_refuses_them() -> None:
    """A fuzz test of the parser: 20,000 heads, each a well-formed one with one to three random
    edits from bytes that matter to HTTP framing (seeded: the same heads on every run)."""
    pieces = [b"\x00", b"\t", b" ", b"\r", b"\n", b"\r\n", b":", b",", b";", b"\x7f", b"\xff", b"0", b"9"]
    pieces += [b"a", b"-", b"\x0b", b"\r\n ", b"chunked", b"Content-Length: 4", b"Transfer-Encoding: chunked"]
    pieces += [b"HTTP/1.1 ", b"000"]
    rng = random.Random(20261129)
    compared = refused = stricter = 0
    for _ in range(20_000):
        head = bytearray(rng.choice(HEADS[:15]))
        for _ in range(rng.randint(1, 3)):
            at = rng.randint(0, len(head))
            edit = rng.random()
            if edit < 0.5:
                head[at:at] = rng.choice(pieces)
            elif edit < 0.8:
                del head[at : at + rng.randint(1, 3)]
            else:
                head[at : at + 1] = rng.choice(pieces)
        expected = h11_verdict(bytes(head))
        verdict = light_verdict(bytes(head))
        if expected is not None and verdict is None and beyond_an_api_server(bytes(head)):
            stricter += 1
            continue
        assert verdict == expected, bytes(head)
        compared += 1
        refused += expected is None
    assert compared > 15_000 and refused > 10_000, (compared, refused, stricter)


@pytest.mark.parametrize("head", sorted(STRICTER_THAN_H11), ids=repr)
def test_the_head_parser_refuses_the_oddities_h11_tolerates(head: bytes) -> None:
    assert h11_verdict(head) is not None
    assert light_verdict(head) is None


def test_an_http_1_0_answer_or_connection_close_ends_the_connection() -> None:
    assert parse_head(b"HTTP/1.0 200 OK\r\nContent-Length: 0").close
    assert parse_head(b"HTTP/1.1 200 OK\r\nConnection: keep-alive, Close").close
    assert not parse_head(b"HTTP/1.1 200 OK\r\nConnection: keep-alive").close
    assert parse_head(b"HTTP/1.1 429 Too Many\r\nRetry-After: 3").retry_after == "3"


@pytest.mark.parametrize(
    ("line", "size"),
    [(b"5", 5), (b"0005", 5), (b"fF", 255), (b"5;name=value", 5), (b"5  ", 5), (b"0", 0)],
)
def test_chunk_sizes_are_read_as_h11_reads_them(line: bytes, size: int) -> None:
    assert chunk_size(line) == size == h11_chunk(line)


@pytest.mark.parametrize("line", [b"", b"x", b"-5", b" 5", b"5 ;x", b"0x5", b"1" * 21])
def test_malformed_chunk_sizes_are_refused_as_h11_refuses_them(line: bytes) -> None:
    with pytest.raises(ProtocolError):
        chunk_size(line)
    assert h11_chunk(line) is None


def h11_chunk(line: bytes) -> int | None:
    """How many body bytes h11 reads from a chunk with this size line (None: refused)."""
    connection = h11_after_a_get()
    body = b"x" * 300
    connection.receive_data(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + line + b"\r\n" + body)
    try:
        assert isinstance(connection.next_event(), h11.Response)
        event = connection.next_event()
    except h11.RemoteProtocolError:
        return None
    if event is h11.NEED_DATA or isinstance(event, h11.EndOfMessage):
        return 0
    assert isinstance(event, h11.Data)
    return len(event.data)


class PiecesReader:
    """What ``_Answer`` reads a body from, handing out the given pieces one ``read`` at a time (as
    a connection does when the server's bytes arrive in those pieces), then the end."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = deque(pieces)

    async def read(self, limit: int) -> bytes:
        if not self.pieces:
            return b""
        piece = self.pieces.popleft()
        if len(piece) > limit:
            self.pieces.appendleft(piece[limit:])
        return piece[:limit]


async def light_chunked(body: bytes, cuts: list[int]) -> bytes | None:
    """The data of a chunked ``body`` as the client reads it when it arrives cut at ``cuts``;
    None where the client refuses it."""
    bounds = [0, *sorted(cuts), len(body)]
    reader = PiecesReader([body[a:b] for a, b in itertools.pairwise(bounds) if b > a])
    answer = _Answer(_Connection(reader, None), "GET")  # type: ignore[arg-type]
    head = parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked")
    try:
        return b"".join([piece async for piece in answer.body(head)])
    except ProtocolError:
        return None


def h11_chunked(body: bytes) -> bytes | None:
    """h11's reading of the same body, all of it received and then the end of the connection."""
    connection = h11_after_a_get()
    connection.receive_data(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
    connection.receive_data(b"")
    data = []
    try:
        assert isinstance(connection.next_event(), h11.Response)
        while not isinstance(event := connection.next_event(), h11.EndOfMessage):
            assert isinstance(event, h11.Data), event
            data.append(event.data)
    except h11.RemoteProtocolError:
        return None
    return b"".join(data)


def chunked_body(rng: random.Random) -> bytes:
    """A well-formed chunked body: 0-6 chunks of 1-30, 1-300 or 1-3,000 bytes, some with
    extensions, a trailer now and then."""
    parts = []
    for _ in range(rng.randint(0, 6)):
        data = bytes(rng.choices(b'{}[]:,"abc\r\n0', k=rng.randint(1, rng.choice([30, 300, 3000]))))
        extension = rng.choice([b"", b"", b";name=value", b"; x"])
        parts.append(b"%x%s\r\n%s\r\n" % (len(data), extension, data))
    trailer = rng.choice([b"", b"", b"X-Trailer: 1\r\n"])
    return b"".join(parts) + b"0\r\n" + trailer + b"\r\n"


async def test_chunked_bodies_cut_anywhere_are_read_as_h11_reads_them() -> None:
    """A fuzz test of the chunked body reader, which unframes every chunk one read of the
    connection holds: 3,000 bodies (half with one to three random edits, half of them at the
    framing), each arriving in random pieces, give h11's data or are refused where h11 refuses
    them (seeded)."""
    pieces = [b"\r", b"\n", b"\r\n", b";", b"0", b"9", b"f", b"x", b" ", b":", b"\r\n\r\n", b"0\r\n"]
    rng = random.Random(20261130)
    compared = refused = stricter = 0
    for index in range(3_000):
        body = bytearray(chunked_body(rng))
        if index % 2:
            for _ in range(rng.randint(1, 3)):
                framing = [match.start() for match in re.finditer(rb"\r\n", body)]
                # half the edits where the framing is: a chunk's CRLF, its size line's end
                at = rng.choice(framing) + rng.randint(0, 1) if framing and rng.random() < 0.5 else None
                at = rng.randint(0, len(body)) if at is None else at
                edit = rng.random()
                if edit < 0.5:
                    body[at:at] = rng.choice(pieces)
                elif edit < 0.8:
                    del body[at : at + rng.randint(1, 3)]
                else:
                    body[at : at + 1] = rng.choice(pieces)
        cuts = [rng.randint(0, len(body)) for _ in range(rng.randint(0, 8))]
        expected = h11_chunked(bytes(body))
        read = await light_chunked(bytes(body), cuts)
        if expected is not None and read is None and beyond_an_api_server_trailer(bytes(body)):
            stricter += 1
            continue
        assert read == expected, (bytes(body), cuts)
        compared += 1
        refused += expected is None
    assert compared > 2_900 and refused > 1_000, (compared, refused, stricter)


def beyond_an_api_server_trailer(body: bytes) -> bool:
    """What h11 reads and this client refuses on purpose after the last chunk: a trailer line
    ended by a bare LF or folded."""
    end = body.find(b"\r\n0\r\n")
    rest = body[end:] if end >= 0 else body
    return b"\n" in rest.replace(b"\r\n", b"") or b"\r\n " in rest or b"\r\n\t" in rest


# -- both transports against the same scripted server -----------------------------------------

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class ScriptedServer:
    """A raw TCP server on 127.0.0.1: each connection is handed to ``script``; counts connections."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.closed_by_client = 0
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.script(reader, writer)
            if not writer.is_closing():
                await reader.read()  # returns once the client closed the connection
                self.closed_by_client += 1
        except asyncio.IncompleteReadError as exc:  # the client closed it instead of sending more
            if not exc.partial:
                self.closed_by_client += 1
        except ConnectionError:
            pass
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def serving(script: Script) -> AsyncIterator[ScriptedServer]:
    scripted = ScriptedServer(script)
    server = await asyncio.start_server(scripted._serve, "127.0.0.1", 0)
    scripted.port = server.sockets[0].getsockname()[1]
    try:
        yield scripted
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await server.wait_closed()


def answering(*answers: bytes, keep_open: bool = True) -> Script:
    """Each request on a connection gets the next answer (raw bytes); then the connection is held
    open until the client closes it (``keep_open``) or closed."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for answer in answers:
            await read_request(reader)
            writer.write(answer)
            await writer.drain()
        if not keep_open:
            writer.close()
            return

    return script


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + await reader.readexactly(length)


def transports(port: int, slept: list[float], **light_options: Any) -> list[HttpTransport]:
    async def recorded_sleep(seconds: float) -> None:  # injected: records the wait, takes no time
        slept.append(seconds)

    access = ClusterAccess(f"http://127.0.0.1:{port}", ssl.create_default_context())
    options: dict[str, Any] = {"max_connections": 2, "request_timeout": 5.0, "sleep": recorded_sleep}
    return [AsyncHttp(access, **options), LightHttp(access, **options, **light_options)]


async def outcome(transport: HttpTransport, port: int, method: str = "GET") -> tuple[Any, ...]:
    body = b'{"a":1}' if method in ("PUT", "POST") else None
    try:
        status, data, retry_after = await transport.request(
            method, f"http://127.0.0.1:{port}/x?y=1", body, {"Accept": "application/json"}, f"{method} /x"
        )
    except KubeTransportError:
        return ("transport error",)
    return status, data, retry_after


CASES = {
    "content-length": [b'HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n{"a":1}'],
    "chunked": [
        b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{"a\r\n4;x=y\r\n":1}\r\n0\r\nT: 1\r\n\r\n'
    ],
    "until close": [b'HTTP/1.0 200 OK\r\n\r\n{"a":1}'],
    "no body": [b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n"],
    "an interim 100 first": [
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"
    ],
    "a refusal": [b'HTTP/1.1 409 Conflict\r\nContent-Length: 17\r\n\r\n{"kind":"Status"}'],
    "retry-after, then an answer": [
        b"HTTP/1.1 503 Unavailable\r\nRetry-After: 2\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
    ],
    "malformed status line": [b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n"],
    "not http at all": [b"SSH-2.0-OpenSSH_9.6\r\n\r\n"],
    "malformed header": [b"HTTP/1.1 200 OK\r\nBad Header\r\nContent-Length: 0\r\n\r\n"],
    "conflicting lengths": [b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"],
    "unknown transfer coding": [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nabc"],
    "head of 200 KiB": [b"HTTP/1.1 200 OK\r\nX: " + b"a" * 200_000 + b"\r\nContent-Length: 0\r\n\r\n"],
    "body cut short": [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"],
    "chunk cut short": [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\nabc"],
    "malformed chunk size": [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"],
    "chunk without its CRLF": [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n"
    ],
    "closed without an answer": [b""],
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("method", ["GET", "PUT"])
async def test_both_transports_answer_and_refuse_alike(case: str, method: str) -> None:
    answers = CASES[case]
    results = []
    for index in range(2):
        slept: list[float] = []
        async with serving(answering(*answers, keep_open=False)) as server:
            transport = transports(server.port, slept)[index]
            try:
                results.append((await outcome(transport, server.port, method), slept))
            finally:
                await transport.close()
    httpx_result, light_result = results
    assert light_result == httpx_result
    if case == "retry-after, then an answer":
        assert httpx_result == ((200, b"{}", None), [2.0])


async def test_a_streamed_get_hands_over_the_body_and_raises_a_refusal_typed() -> None:
    answers = [b'HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n{"items":[]}']
    answers += [
        b"HTTP/1.1 403 Forbidden\r\nContent-Length: 50\r\n\r\n"
        + b'{"kind":"Status","code":403,"message":"not you"}  '
    ]
    async with serving(answering(*answers)) as server:
        light = transports(server.port, [])[1]
        try:
            url = f"http://127.0.0.1:{server.port}/list"
            pieces = [piece async for piece in light.get_streamed(url, {}, "GET /list")]
            assert b"".join(pieces) == b'{"items":[]}'
            with pytest.raises(KubeError, match="not you") as refused:
                async for _ in light.get_streamed(url, {}, "GET /list"):
                    pass
            assert refused.value.status == 403
            assert server.connections == 1
        finally:
            await light.close()


async def streamed_outcome(transport: HttpTransport, port: int) -> tuple[Any, ...]:
    try:
        pieces = [
            piece async for piece in transport.get_streamed(f"http://127.0.0.1:{port}/list", {}, "GET /list")
        ]
    except KubeTransportError:
        return ("transport error",)
    except KubeError as refused:
        return ("refused", refused.status, str(refused))
    return ("listed", b"".join(pieces))


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_list_streamed_by_the_light_client_reads_and_refuses_as_httpx_does(case: str) -> None:
    """``KubeClient``'s lists (``stream_lists``): the same answers, refusals, transport errors and
    ``Retry-After`` waits as the httpx transport that streamed them before."""
    results = []
    for index in range(2):
        slept: list[float] = []
        async with serving(answering(*CASES[case], keep_open=False)) as server:
            transport = transports(server.port, slept, stream_lists=True)[index]
            try:
                results.append((await streamed_outcome(transport, server.port), slept))
            finally:
                await transport.close()
    httpx_result, light_result = results
    assert light_result == httpx_result
    if case == "retry-after, then an answer":
        assert httpx_result == (("listed", b"{}"), [2.0])
    if case == "chunked":
        assert httpx_result == (("listed", b'{"a":1}'), [])


# -- connections -------------------------------------------------------------------------------

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"


def light_client(port: int, **kwargs: Any) -> LightHttp:
    access = ClusterAccess(f"http://127.0.0.1:{port}", ssl.create_default_context())
    return LightHttp(access, **{"max_connections": 2, "request_timeout": 5.0, **kwargs})


async def test_requests_share_one_kept_alive_connection_until_the_server_says_close() -> None:
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"
    async with serving(answering(OK, OK, closing, OK)) as server:
        client = light_client(server.port)
        try:
            for method in ("GET", "PUT", "GET", "GET"):
                assert await outcome(client, server.port, method) == (200, b"{}", None)
            assert server.connections == 2, "one connection for three requests, a new one after close"
        finally:
            await client.close()
        await eventually(lambda: server.closed_by_client == 2, "connections closed", within=5)


async def test_a_connection_idle_longer_than_the_keepalive_expiry_is_replaced() -> None:
    now = [100.0]
    async with serving(answering(OK, OK)) as server:
        client = light_client(server.port, keepalive_expiry=30.0, monotonic=lambda: now[0])
        try:
            await outcome(client, server.port)
            now[0] += 29.0
            await outcome(client, server.port)
            assert server.connections == 1
            now[0] += 31.0
            await outcome(client, server.port)
            assert server.connections == 2
            await eventually(lambda: server.closed_by_client == 1, "expired one closed", within=5)
        finally:
            await client.close()


async def test_a_kept_connection_the_server_dropped_is_retried_once_but_never_for_post() -> None:
    # the server answers once per connection and then closes it without saying so
    async with serving(answering(OK, keep_open=False)) as server:
        client = light_client(server.port)
        try:
            assert await outcome(client, server.port) == (200, b"{}", None)
            # the next PUT finds the dropped connection (or fails on it) and is sent on a new one
            assert await outcome(client, server.port, "PUT") == (200, b"{}", None)
            assert server.connections == 2
        finally:
            await client.close()

    async def answer_then_vanish(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(OK)
        await writer.drain()
        await read_request(reader)  # takes the second request, then drops the connection unanswered
        writer.transport.abort()

    async with serving(answer_then_vanish) as server:
        client = light_client(server.port)
        try:
            assert await outcome(client, server.port, "POST") == (200, b"{}", None)
            assert await outcome(client, server.port, "POST") == ("transport error",)
            assert server.connections == 1, "a POST the server may have acted on is not sent again"
            assert await outcome(client, server.port, "GET") == (200, b"{}", None)
        finally:
            await client.close()


def deadlines_by_hand() -> tuple[list[tuple[float, asyncio.Timeout]], Callable[[float], asyncio.Timeout]]:
    """The client's ``timeout``: each deadline armed with none (the test expires it by hand: no
    real wait), recorded with the seconds asked for."""
    armed: list[tuple[float, asyncio.Timeout]] = []

    def by_hand(seconds: float) -> asyncio.Timeout:
        deadline = asyncio.timeout(None)
        armed.append((seconds, deadline))
        return deadline

    return armed, by_hand


async def test_an_answer_that_never_comes_times_out_and_its_connection_is_closed() -> None:
    half_answered = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab")  # and nothing more
        await writer.drain()
        half_answered.set()

    armed, by_hand = deadlines_by_hand()

    async with serving(silent) as server:
        client = light_client(server.port, request_timeout=0.3, timeout=by_hand)
        try:
            waiting = asyncio.ensure_future(
                client.request("GET", f"http://127.0.0.1:{server.port}/x", None, {}, "GET /x")
            )
            await half_answered.wait()
            assert [seconds for seconds, _ in armed] == [0.3], "one timeout per request, of request_timeout"
            armed[0][1].reschedule(asyncio.get_running_loop().time())
            with pytest.raises(KubeTransportError, match=r"timed out after 0\.3 s"):
                await waiting
            await eventually(lambda: server.closed_by_client == 1, "connection closed", within=5)
        finally:
            await client.close()


async def test_a_cancelled_request_closes_its_connection_and_frees_its_slot() -> None:
    answered = asyncio.Event()

    async def slow_first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        answered.set()  # the request arrived; its answer never will on this connection

    async with serving(slow_first) as server:
        client = light_client(server.port, max_connections=1)
        try:
            url = f"http://127.0.0.1:{server.port}/x"
            waiting = asyncio.ensure_future(client.request("GET", url, None, {}, "GET /x"))
            await answered.wait()
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await eventually(lambda: server.closed_by_client == 1, "connection closed", within=5)
            server.script = answering(OK)
            assert await outcome(client, server.port) == (200, b"{}", None), "the one slot is free again"
        finally:
            await client.close()


async def test_with_stream_lists_a_list_is_handed_on_as_it_arrives_and_holds_a_slot_meanwhile() -> None:
    """``KubeClient``'s transport: a list's first piece reaches the caller before the server has
    sent the rest (a shard's list is tens of MB: never held whole), and while it is in flight it
    counts against ``max_connections`` with the requests, as one pool bounded both before."""
    rest = asyncio.Event()
    arrived: list[bytes] = []

    async def list_then_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            request = await read_request(reader)
            arrived.append(request.split(b" ")[1])
            if request.startswith(b"GET /list"):
                writer.write(b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nA\r\n{"items":[\r\n')
                await writer.drain()
                await rest.wait()  # the rest only once the test says so
                writer.write(b"2\r\n]}\r\n0\r\n\r\n")
            else:
                writer.write(OK)
            await writer.drain()

    async with serving(list_then_answer) as server:
        client = light_client(server.port, max_connections=1, stream_lists=True)
        witness = light_client(server.port, max_connections=1)
        try:
            url = f"http://127.0.0.1:{server.port}"
            body = client.get_streamed(f"{url}/list", {}, "GET /list")
            assert await anext(body) == b'{"items":['
            waiting = asyncio.ensure_future(client.request("GET", f"{url}/x", None, {}, "GET /x"))
            # sent at the same moment by a client with a free slot: once it is in, /x would be too
            witnessed = await witness.request("GET", f"{url}/witness", None, {}, "GET /witness")
            assert witnessed == (200, b"{}", None)
            assert arrived == [b"/list", b"/witness"] and not waiting.done()
            rest.set()
            assert [piece async for piece in body] == [b"]}"]
            assert await waiting == (200, b"{}", None)
            assert arrived == [b"/list", b"/witness", b"/x"]
            assert client._fallback_http is None, "requests and lists build no httpx client (memory)"
        finally:
            await client.close()
            await witness.close()


async def test_a_streamed_list_times_out_per_piece_not_for_its_whole_length() -> None:
    """A list of tens of MB takes longer than one request's timeout to arrive, as httpx times out
    each read: the request and head get one deadline, each piece of the body a new one; a piece
    that never comes expires its own and closes the connection."""
    more = asyncio.Event()
    stalled = asyncio.Event()

    async def slow_list(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nA\r\n{"items":[\r\n')
        await writer.drain()
        await more.wait()
        writer.write(b"1\r\n{\r\n")  # and then nothing more
        await writer.drain()
        stalled.set()

    armed, by_hand = deadlines_by_hand()

    async with serving(slow_list) as server:
        client = light_client(server.port, request_timeout=0.3, timeout=by_hand, stream_lists=True)
        try:
            body = client.get_streamed(f"http://127.0.0.1:{server.port}/list", {}, "GET /list")
            assert await anext(body) == b'{"items":['
            assert len(armed) == 2, "one deadline for request and head, one for the first piece"
            more.set()
            assert await anext(body) == b"{"
            assert len(armed) == 3 and all(seconds == 0.3 for seconds, _ in armed)
            assert all(deadline.expired() is False for _, deadline in armed)
            waiting = asyncio.ensure_future(anext(body))
            await stalled.wait()
            await eventually(lambda: len(armed) == 4, "the next piece's deadline armed", within=5)
            armed[3][1].reschedule(asyncio.get_running_loop().time())
            with pytest.raises(KubeTransportError, match=r"GET /list: timed out after 0\.3 s"):
                await waiting
            await eventually(lambda: server.closed_by_client == 1, "connection closed", within=5)
        finally:
            await client.close()


async def test_a_list_left_half_read_closes_its_connection_and_frees_its_slot() -> None:
    async def list_then_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n{"items":[')  # 10 of 20 bytes

    async with serving(list_then_answer) as server:
        client = light_client(server.port, max_connections=1, stream_lists=True)
        try:
            body = client.get_streamed(f"http://127.0.0.1:{server.port}/list", {}, "GET /list")
            assert await anext(body) == b'{"items":['
            await body.aclose()  # the caller stops reading: the rest of the body would be unread
            await eventually(lambda: server.closed_by_client == 1, "connection closed", within=5)
            server.script = answering(OK)
            assert await outcome(client, server.port) == (200, b"{}", None), "the one slot is free again"
            assert server.connections == 2
        finally:
            await client.close()
