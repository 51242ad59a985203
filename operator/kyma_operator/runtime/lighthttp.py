"""A small HTTP/1.1 client on asyncio streams for the API requests of every ``KubeClient``.

Why (first for the Lease thread, then for every client: ``runtime/kube.py``): every Lease request
(the shard coordinator's list and renewals, the leader election's GET and PUT) goes through the
Lease thread, and a sharded replica sends several per second at idle; every write of a reconcile
goes through the main event loop. CPU of the sending thread per GET / PUT / list of 20 Leases
against a real API server over TLS (``benchmarks/lease_http.py``, results in
``benchmarks/results/scale.md`` and ``kube-client.md``): httpx (``AsyncHttp``)
1.8 / 3.2 / 2.8 ms, aiohttp 0.6 / 1.1 / 0.6 ms, the stdlib's blocking ``http.client`` 0.4 / 0.6 /
0.5 ms, a plain TLS socket with the answer read by hand 0.10 / 0.23 / 0.22 ms; this client 0.33 /
0.65 / 0.59 ms. Those milliseconds are not only the Lease thread's own: each request wakes the
thread several times, and every wake-up takes the GIL from the main thread in the middle of a
reconcile; a replica holding 16 shards spent a quarter more CPU per reconciled Kyma than one
without sharding, with the Deployment's Lease timings. This client does the least a Lease request
needs: one write, reads until the answer is complete, a connection kept for the next request.
aiohttp would be the library to take instead (a second HTTP stack, not installed with the
operator); ``http.client`` blocks, and the Lease thread's renewals run concurrently.

What it does (and what it leaves to ``asynchttp.AsyncHttp``, which it delegates to):

* requests and GETs (lists) over a bounded pool of kept-alive connections; a connection idle
  longer than ``keepalive_expiry`` or closed by the server is not reused; a list is read whole
  (the Lease thread's: a few KB) or, with ``stream_lists`` (``KubeClient``'s: a shard's list is
  tens of MB), handed on piece by piece as it arrives;
* answers framed by ``Content-Length``, ``Transfer-Encoding: chunked`` or the end of the
  connection; ``Connection: close`` is honoured; 1xx interim answers are skipped;
* the ``Retry-After`` retries of ``asynchttp`` (the same rule, ``asynchttp.retrying``), and one
  retry on a new connection when a reused one fails before any byte of the answer arrived (the
  server closed it meanwhile), except for POST and PATCH;
* a timeout for the whole request; for a streamed list, for the request and the answer's head and
  then for each piece of the body (httpx times out each read); a cancelled or failed request and
  a list left half read close their connection;
* anything malformed (status line, header line, framing, chunk size, more than 64 KiB of head) is
  a ``KubeTransportError``, as httpx's protocol errors are;
* watches, and clusters reached through a proxy, go through ``AsyncHttp`` unchanged.

``tests/unit/kyma_operator/runtime/test_lighthttp.py`` holds the parser to h11's (httpx's parser)
verdicts on well-formed and hostile answers and on 20,000 mutated ones (a seeded fuzz test), and
runs both transports against the same scripted servers; ``tests/integration/kyma_operator/runtime/
test_leaseclient.py`` compares both against a real API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import NoReturn
from urllib.parse import urlsplit

from kyma_operator.runtime.asynchttp import NOT_RETRIED, AsyncHttp, retrying
from kyma_operator.runtime.errors import KubeTransportError, error_from_status
from kyma_operator.runtime.kubeconfig import ClusterAccess

MAX_HEAD_BYTES = 64 * 1024
"""Status line and headers of one answer (the API server sends well under 1 KiB)."""
_CHUNK_LINE_BYTES = 1024
_READ_BYTES = 64 * 1024

# h11's grammar (``h11._abnf``, the parser under httpx), so that this client refuses what httpx refuses
_STATUS_LINE = re.compile(rb"HTTP/(1\.[01]) ([0-9]{3})(?: (?:[ \t]|[^\x00\s])*)?")
_HEADER_FIELD = re.compile(
    rb"([-!#$%&'*+.^_`|~0-9a-zA-Z]+):[ \t]*((?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?)[ \t]*"
)
_CONTENT_LENGTH = re.compile(rb"[0-9]{1,20}")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;.*)?[ \t]*")


class ProtocolError(ValueError):
    """The server's answer is not HTTP/1.1 as this client reads it."""


@dataclass(frozen=True)
class Head:
    """Status and the headers this client acts on, of one answer."""

    status: int
    content_length: int | None
    chunked: bool
    close: bool
    retry_after: str | None


def parse_head(data: bytes) -> Head:
    """The answer's head (status line and header lines, without the final empty line).

    ``ProtocolError`` where h11 refuses too: a malformed status line or header line (a folded one
    included), a non-numeric or conflicting ``Content-Length``, more than one ``Transfer-Encoding``
    header or one that is not exactly ``chunked``, a status below 100. Stricter than h11 where an
    API server never goes: HTTP/1.0 and 1.1 only, lines end with CRLF (not a bare LF), no folded
    header lines."""
    lines = data.split(b"\r\n")
    status_line = _STATUS_LINE.fullmatch(lines[0])
    if status_line is None or status_line.group(2) < b"100":
        raise ProtocolError(f"malformed status line {lines[0][:80]!r}")
    content_length: bytes | None = None
    chunked = False
    close = status_line.group(1) == b"1.0"
    retry_after: str | None = None
    for line in lines[1:]:
        field = _HEADER_FIELD.fullmatch(line)
        if field is None:
            raise ProtocolError(f"malformed header line {line[:80]!r}")
        name, value = field.group(1).lower(), field.group(2)
        if name == b"content-length":
            lengths = {length.strip() for length in value.split(b",")}
            length = lengths.pop()
            if lengths or _CONTENT_LENGTH.fullmatch(length) is None:
                raise ProtocolError(f"bad Content-Length {value[:40]!r}")
            if content_length not in (None, length):
                raise ProtocolError("conflicting Content-Length headers")
            content_length = length
        elif name == b"transfer-encoding":
            if chunked:
                raise ProtocolError("more than one Transfer-Encoding header")
            if value.lower() != b"chunked":
                raise ProtocolError(f"unsupported Transfer-Encoding {value[:40]!r}")
            chunked = True
        elif name == b"connection":
            close = close or b"close" in (part.strip().lower() for part in value.split(b","))
        elif name == b"retry-after":
            retry_after = value.decode("latin-1")
    return Head(
        status=int(status_line.group(2)),
        content_length=None if chunked or content_length is None else int(content_length),
        chunked=chunked,
        close=close,
        retry_after=retry_after,
    )


def chunk_size(line: bytes) -> int:
    """The size of a chunk from its size line (chunk extensions ignored); ``ProtocolError`` if malformed."""
    match = _CHUNK_SIZE.fullmatch(line)
    if match is None:
        raise ProtocolError(f"malformed chunk size line {line[:80]!r}")
    return int(match.group(1), 16)


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0
    reused: bool = False

    def close(self) -> None:
        """Closed at once, without TLS's close_notify exchange: a graceful close would leave the
        socket open until the server answers, and a loop stopped meanwhile leaks it."""
        self.writer.transport.abort()


class _Answer:
    """Reads one answer from a connection: the head, then the body in pieces."""

    def __init__(self, connection: _Connection, method: str) -> None:
        self._reader = connection.reader
        self._method = method
        self.received = False
        """Some byte of the answer arrived (a failure after that is not retried)."""
        self.reusable = False
        """The body was read to its end and the server keeps the connection open."""
        self._leftover = False
        """Bytes arrived after the body's end (no answer of ours): the connection is not reused."""

    async def head(self) -> Head:
        while True:
            data = await self._read_head()
            head = parse_head(data)
            if not 100 <= head.status < 200:
                return head

    async def _read_head(self) -> bytes:
        try:
            data = await self._reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                self.received = True
                raise ProtocolError("connection closed in the middle of the answer's head") from exc
            raise ConnectionResetError("server closed the connection without answering") from exc
        except asyncio.LimitOverrunError as exc:
            self.received = True
            raise ProtocolError(f"answer head longer than {MAX_HEAD_BYTES} bytes") from exc
        self.received = True
        return data[:-4]

    async def body(self, head: Head) -> AsyncGenerator[bytes, None]:
        no_body = self._method == "HEAD" or head.status in (204, 304)
        if no_body or head.content_length == 0:
            self.reusable = not head.close
            return
        if head.chunked:
            async for piece in self._chunked():
                yield piece
            if self._leftover:
                return
        elif head.content_length is not None:
            left = head.content_length
            while left:
                piece = await self._reader.read(min(left, _READ_BYTES))
                if not piece:
                    raise ProtocolError(f"connection closed with {left} bytes of the body missing")
                left -= len(piece)
                yield piece
        else:  # framed by the end of the connection
            while piece := await self._reader.read(_READ_BYTES):
                yield piece
            return
        self.reusable = not head.close

    async def _chunked(self) -> AsyncGenerator[bytes, None]:
        """The data of a chunked body, one piece per read of the connection: however many chunks a
        read holds (an API server sends a list in chunks of ~2 KB), they are unframed at once and
        handed on together, not one piece per chunk."""
        data = b""
        size = -1
        """Bytes of the current chunk still to come; -1 while its size line is awaited, -2 after
        the last chunk (trailer lines follow, up to an empty line)."""
        crlf = False
        """The current chunk's data is complete and its CRLF is awaited."""
        while True:
            pieces: list[bytes] = []
            at = 0
            while True:
                if size > 0:
                    piece = data[at : at + size]
                    if not piece:
                        break
                    pieces.append(piece)
                    at += len(piece)
                    size -= len(piece)
                    crlf = size == 0
                    continue
                if crlf:
                    if len(data) - at < 2:
                        break
                    if data[at : at + 2] != b"\r\n":
                        raise ProtocolError("chunk not followed by CRLF")
                    at += 2
                    crlf = False
                    size = -1
                end = data.find(b"\r\n", at)
                if end < 0:
                    if len(data) - at > _CHUNK_LINE_BYTES:
                        raise ProtocolError("chunk size line too long")
                    break
                line = data[at:end]
                at = end + 2
                if len(line) + 2 > _CHUNK_LINE_BYTES:
                    raise ProtocolError("chunk size line too long")
                if size == -2:  # a trailer line; the empty one ends the body
                    if not line:
                        if at < len(data):  # bytes after the body: never reuse this connection
                            self._leftover = True
                        if pieces:
                            yield b"".join(pieces)
                        return
                    if _HEADER_FIELD.fullmatch(line) is None:
                        raise ProtocolError(f"malformed trailer line {line[:80]!r}")
                    continue
                size = chunk_size(line)
                if size == 0:
                    size = -2
            if pieces:
                yield b"".join(pieces)
            more = await self._reader.read(_READ_BYTES)
            if not more:
                raise ProtocolError("connection closed in the middle of a chunked body")
            data = data[at:] + more


_Opened = tuple[_Connection, _Answer]
"""A connection whose answer's head was read and whose body is left to the caller."""


class LightHttp:
    """Requests and streamed GETs to one API server over kept-alive connections; watches (and a
    cluster behind a proxy) through ``AsyncHttp``. The interface of ``AsyncHttp``."""

    def __init__(
        self,
        access: ClusterAccess,
        *,
        max_connections: int,
        request_timeout: float,
        keepalive_expiry: float = 30.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        timeout: Callable[[float], asyncio.Timeout] = asyncio.timeout,
        stream_lists: bool = False,
    ) -> None:
        """``stream_lists``: lists (``get_streamed``) are handed on as they arrive (a shard's list
        is tens of MB) and each piece has ``request_timeout`` of its own; otherwise they are read
        whole under one (the Lease thread's lists are a few KB). Either way a list in flight holds
        one of the ``max_connections`` slots it shares with the requests."""
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self._access = access
        self._fallback_http: AsyncHttp | None = None
        """Built on first use (a watch, or a cluster behind a proxy): a runtime client that only
        sends requests and lists never pays for an httpx client."""
        server = urlsplit(access.server)
        self._direct = access.proxy is None and server.scheme in ("http", "https")
        self._tls: ssl.SSLContext | None = access.ssl_context if server.scheme == "https" else None
        self._host = server.hostname or ""
        self._port = server.port or (443 if server.scheme == "https" else 80)
        self._sni = access.tls_server_name or self._host
        self._timeout = request_timeout
        self._keepalive_expiry = keepalive_expiry
        self._sleep = sleep
        self._monotonic = monotonic
        self._deadline = timeout
        """Arms the whole-request timeout (``asyncio.timeout``; a test expires it by hand)."""
        self._max_connections = max_connections
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: deque[_Connection] = deque()
        self._closed = False
        self._stream_lists = stream_lists

    async def request(
        self, method: str, url: str, body: bytes | None, headers: dict[str, str], what: str
    ) -> tuple[int, bytes, str | None]:
        """(status, body, Retry-After) of one request; transport failures as ``KubeTransportError``."""
        if not self._direct:
            return await self._fallback().request(method, url, body, headers, what)

        message = _request(method, url, body, headers)

        async def once() -> tuple[int, bytes, str | None]:
            chunks: list[bytes] = []
            async with self._slots:
                head, _ = await self._exchange(message, method, what, chunks.append)
            return head.status, b"".join(chunks), head.retry_after

        return await retrying(method, once, self._sleep)

    async def get_streamed(self, url: str, headers: dict[str, str], what: str) -> AsyncGenerator[bytes, None]:
        """The body of a GET: read whole before the first piece is handed on (Lease lists are a
        few KB), or with ``stream_lists`` handed on piece by piece as it arrives."""
        if not self._direct:
            async with contextlib.AsyncExitStack() as held:
                if self._stream_lists:  # in flight with the requests: ``max_connections`` bounds both
                    await held.enter_async_context(self._slots)
                body = await held.enter_async_context(
                    contextlib.aclosing(self._fallback().get_streamed(url, headers, what))
                )
                async for piece in body:
                    yield piece
            return
        if self._stream_lists:
            async with contextlib.aclosing(self._streamed(url, headers, what)) as body:
                async for piece in body:
                    yield piece
            return
        status, data, retry_after = await self.request("GET", url, None, headers, what)
        if status != 200:
            raise error_from_status(status, data, retry_after)
        yield data

    def stream(
        self, url: str, headers: dict[str, str], read_timeout: float | None, what: str
    ) -> AsyncGenerator[bytes, None]:
        """A watch: through ``AsyncHttp``."""
        return self._fallback().stream(url, headers, read_timeout, what)

    async def close(self) -> None:
        """Every kept connection's socket is closed when this returns."""
        self._closed = True
        kept = list(self._idle)
        self._idle.clear()
        for connection in kept:
            connection.close()
        for connection in kept:
            with contextlib.suppress(Exception):
                await connection.writer.wait_closed()
        if self._fallback_http is not None:
            await self._fallback_http.close()

    def _fallback(self) -> AsyncHttp:
        if self._fallback_http is None:
            self._fallback_http = AsyncHttp(
                self._access,
                max_connections=self._max_connections,
                request_timeout=self._timeout,
                keepalive_expiry=self._keepalive_expiry,
                sleep=self._sleep,
            )
        return self._fallback_http

    async def _exchange(
        self,
        message: bytes,
        method: str,
        what: str,
        sink: Callable[[bytes], object],
        *,
        leave_ok_body: bool = False,
    ) -> tuple[Head, _Opened | None]:
        """Send one request and hand the answer's body to ``sink``, all within ``request_timeout``.
        With ``leave_ok_body`` the body of a 200 answer is left unread and its connection returned
        (``_Opened``) for the caller to read; the caller holds a slot."""
        connection = None
        try:
            async with self._deadline(self._timeout):
                connection, answer, head = await self._open(message, method)
                if leave_ok_body and head.status == 200:
                    return head, (connection, answer)
                async for piece in answer.body(head):
                    sink(piece)
        except BaseException as exc:
            self._fail(exc, connection, what)
        self._done(connection, answer)
        return head, None

    async def _streamed(self, url: str, headers: dict[str, str], what: str) -> AsyncGenerator[bytes, None]:
        """A list's body as it arrives: the request and the answer's head within ``request_timeout``,
        then each piece of the body within ``request_timeout`` of the one before (as httpx times
        out each read), so a list of tens of MB is never held whole and never cut for its size.
        The slot is held until the body is read or abandoned; an abandoned body closes the
        connection. A 429/503 with ``Retry-After`` is sent again (``asynchttp.retrying``); any
        other answer but 200 raises its typed error."""
        message = _request("GET", url, None, headers)
        async with self._slots:
            answered: tuple[Head, _Opened | None] | None = None

            async def send() -> tuple[int, bytes, str | None]:
                nonlocal answered
                refusal: list[bytes] = []
                answered = await self._exchange(message, "GET", what, refusal.append, leave_ok_body=True)
                head = answered[0]
                return head.status, b"".join(refusal), head.retry_after

            status, refusal, retry_after = await retrying("GET", send, self._sleep)
            if answered is None or answered[1] is None:
                raise error_from_status(status, refusal, retry_after)
            head, (connection, answer) = answered[0], answered[1]
            try:
                async with contextlib.aclosing(answer.body(head)) as pieces:
                    while True:
                        async with self._deadline(self._timeout):
                            piece = await anext(pieces, None)
                        if piece is None:
                            break
                        yield piece
            except BaseException as exc:  # a failed read, or the caller left (GeneratorExit)
                self._fail(exc, connection, what)
            self._done(connection, answer)

    async def _open(self, message: bytes, method: str) -> tuple[_Connection, _Answer, Head]:
        """Send one request and read its answer's head, on a kept connection or a new one. Sent
        again on a new connection when a reused one fails before any byte of the answer arrived
        (the server closed it meanwhile), except for POST and PATCH. A failure closes the
        connection and is raised as it is (the caller translates it)."""
        retry_stale = method not in NOT_RETRIED
        while True:
            connection = None
            answer = None
            try:
                connection = await self._connection()
                connection.writer.write(message)
                await connection.writer.drain()
                answer = _Answer(connection, method)
                return connection, answer, await answer.head()
            except BaseException as exc:
                if connection is not None:
                    connection.close()
                stale = (
                    isinstance(exc, OSError | EOFError)
                    and not isinstance(exc, TimeoutError)
                    and connection is not None
                    and connection.reused
                    and not (answer and answer.received)
                )
                if not (retry_stale and stale):
                    raise
                retry_stale = False

    def _fail(self, exc: BaseException, connection: _Connection | None, what: str) -> NoReturn:
        """Close ``connection`` (if any) and raise: a transport failure as ``KubeTransportError``,
        anything else (cancelled, a failure of the caller's sink, the caller leaving a stream) as
        it is."""
        if connection is not None:
            connection.close()
        if isinstance(exc, TimeoutError):  # before OSError, of which it is a subclass
            raise KubeTransportError(f"{what}: timed out after {self._timeout:g} s") from exc
        if isinstance(exc, ProtocolError):
            raise KubeTransportError(f"{what}: RemoteProtocolError: {exc}") from exc
        if isinstance(exc, OSError | EOFError):
            raise _transport_error(exc, what) from exc
        raise exc

    def _done(self, connection: _Connection, answer: _Answer) -> None:
        """Keep the connection for the next request if its answer was read to the end and the
        server keeps it open; else close it."""
        if answer.reusable and not self._closed:
            connection.idle_since = self._monotonic()
            connection.reused = True
            self._idle.append(connection)
        else:
            connection.close()

    async def _connection(self) -> _Connection:
        now = self._monotonic()
        while self._idle:
            connection = self._idle.pop()
            if now - connection.idle_since <= self._keepalive_expiry and not connection.reader.at_eof():
                return connection
            connection.close()
        reader, writer = await asyncio.open_connection(
            self._host,
            self._port,
            ssl=self._tls,
            server_hostname=self._sni if self._tls is not None else None,
            limit=MAX_HEAD_BYTES,
        )
        return _Connection(reader, writer)


def _request(method: str, url: str, body: bytes | None, headers: dict[str, str]) -> bytes:
    """The request as sent: request line, ``Host``, the caller's headers, a ``Content-Length``
    for a body (and for every POST, PUT and PATCH), the body."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {parts.netloc}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body or b'')}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def _transport_error(exc: BaseException, what: str) -> KubeTransportError:
    if isinstance(exc, ssl.SSLError | ssl.CertificateError):
        return KubeTransportError(f"{what}: TLS error: {exc}", tls=True)
    return KubeTransportError(f"{what}: {type(exc).__name__}: {exc}")
