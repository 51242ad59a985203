"""The HTTP/1.1 client the listener hands events to other replicas with.

Why not httpx here: measured on the development machine (``benchmarks/results/listener.md``,
section "Hand-off"), one httpx request costs ~650-900 us of CPU (``httpx.Request`` alone ~120 us
for URL and header normalisation; httpcore's anyio backend most of the rest), while the same
exchange over asyncio streams costs ~100 us including the uvicorn server on the other end. With
three replicas two thirds of all agent events are handed off, so the client's cost decides the
listener's CPU per event. The hand-off has one fixed shape (one POST with a Content-Length body to
our own endpoint, one response with a Content-Length body), so the client needs little:

* responses are parsed by ``httptools`` (the parser uvicorn uses), not by hand;
* keep-alive connections per holder, at most ``max_connections`` per holder (a semaphore), an
  idle connection closed after ``idle_seconds`` (below the hand-off server's keep-alive of 60 s);
* one deadline per exchange (``timeout``), a shorter one for connecting;
* a request that fails on a REUSED connection before any response byte arrived (the server
  closed it while idle) is sent once more on a new connection, byte for byte: the hand-off
  server accepts each HMAC nonce once, so the request takes effect at most once either way;
* ``https://`` addresses use TLS with the system's trust store.

``HttpxHandoffClient`` adapts any httpx transport (tests use ``httpx.ASGITransport`` to run
replicas in one process).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from typing import Protocol
from urllib.parse import urlsplit

import httptools
import httpx

__all__ = ["HandoffClient", "HandoffTransportError", "HttpxHandoffClient", "StreamHandoffClient"]

_MAX_RESPONSE_BYTES = 4 * 1024 * 1024


class HandoffTransportError(Exception):
    """No usable answer: connection refused or lost, timeout, malformed or oversized response."""


class HandoffClient(Protocol):
    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        """``(status, body)`` of one POST; raises :class:`HandoffTransportError`."""
        ...

    async def aclose(self) -> None: ...


class _Response:
    """httptools callbacks: collects the body and notes completion and keep-alive."""

    __slots__ = ("body", "complete", "keep_alive", "parser", "size")

    def __init__(self) -> None:
        self.body: list[bytes] = []
        self.size = 0
        self.complete = False
        self.keep_alive = False
        self.parser = httptools.HttpResponseParser(self)

    def on_body(self, body: bytes) -> None:
        self.size += len(body)
        if self.size > _MAX_RESPONSE_BYTES:
            raise HandoffTransportError("response too large")
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True
        # only meaningful inside the callback: the parser resets its flags once the message is done
        self.keep_alive = self.parser.should_keep_alive()


class _Connection:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def close(self) -> None:
        self.writer.close()


class _Origin:
    """Connections to one ``scheme://host:port``."""

    def __init__(self, url: str, max_connections: int) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.tls = parts.scheme == "https"
        self.authority = parts.netloc.encode()
        self.idle: deque[_Connection] = deque()
        self.slots = asyncio.Semaphore(max_connections)
        self.active = 0


class StreamHandoffClient:
    """See the module docstring."""

    def __init__(
        self,
        *,
        max_connections: int = 8,
        timeout: float = 2.0,
        connect_timeout: float = 1.0,
        idle_seconds: float = 30.0,
    ) -> None:
        self._max_connections = max_connections
        self._timeout = timeout
        self._connect_timeout = min(connect_timeout, timeout)
        self._idle_seconds = idle_seconds
        self._origins: dict[str, _Origin] = {}
        self._targets: dict[str, tuple[_Origin, bytes]] = {}
        self._tls: ssl.SSLContext | None = None
        self._closed = False
        self._swept = time.monotonic()

    def _target(self, url: str) -> tuple[_Origin, bytes]:
        cached = self._targets.get(url)
        if cached is None:
            parts = urlsplit(url)
            key = f"{parts.scheme}://{parts.netloc}"
            origin = self._origins.get(key)
            if origin is None:
                origin = self._origins[key] = _Origin(url, self._max_connections)
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            cached = self._targets[url] = (origin, path.encode())
        return cached

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        if self._closed:
            raise HandoffTransportError("client closed")
        try:
            origin, path = self._target(url)
        except ValueError as error:
            raise HandoffTransportError(str(error)) from None
        head = [b"POST ", path, b" HTTP/1.1\r\nhost: ", origin.authority, b"\r\n"]
        for name, value in headers.items():
            head += (name.encode("latin-1"), b": ", value.encode("latin-1"), b"\r\n")
        head += (b"content-length: ", str(len(body)).encode(), b"\r\n\r\n")
        request = b"".join(head) + body
        origin.active += 1
        try:
            return await self._post(origin, request)
        finally:
            origin.active -= 1
            if time.monotonic() - self._swept > self._idle_seconds:
                self._sweep()

    async def _post(self, origin: _Origin, request: bytes) -> tuple[int, bytes]:
        try:
            async with origin.slots, asyncio.timeout(self._timeout):
                connection, reused = await self._connection(origin)
                try:
                    return await self._exchange(origin, connection, request)
                except _Stale:
                    if not reused:
                        raise HandoffTransportError("connection closed before the response") from None
                connection = await self._connect(origin)
                try:
                    return await self._exchange(origin, connection, request)
                except _Stale:
                    raise HandoffTransportError("connection closed before the response") from None
        except TimeoutError:
            raise HandoffTransportError("timeout") from None
        except OSError as error:
            raise HandoffTransportError(f"{type(error).__name__}: {error}") from None

    def _sweep(self) -> None:
        """Close connections idle too long; forget origins nobody uses (holders come and go)."""
        now = self._swept = time.monotonic()
        for key, origin in list(self._origins.items()):
            kept = deque(c for c in origin.idle if now - c.idle_since < self._idle_seconds)
            for connection in origin.idle:
                if connection not in kept:
                    connection.close()
            origin.idle = kept
            if not kept and not origin.active:
                del self._origins[key]
                for url in [u for u, (o, _) in self._targets.items() if o is origin]:
                    del self._targets[url]

    async def _connection(self, origin: _Origin) -> tuple[_Connection, bool]:
        now = time.monotonic()
        while origin.idle:
            connection = origin.idle.pop()
            if now - connection.idle_since < self._idle_seconds and not connection.reader.at_eof():
                return connection, True
            connection.close()
        return await self._connect(origin), False

    async def _connect(self, origin: _Origin) -> _Connection:
        tls: ssl.SSLContext | None = None
        if origin.tls:
            if self._tls is None:
                self._tls = ssl.create_default_context()
            tls = self._tls
        async with asyncio.timeout(self._connect_timeout):
            reader, writer = await asyncio.open_connection(origin.host, origin.port, ssl=tls)
        return _Connection(reader, writer)

    async def _exchange(self, origin: _Origin, connection: _Connection, request: bytes) -> tuple[int, bytes]:
        """One request and its response; raises :class:`_Stale` if nothing came back at all."""
        response = _Response()
        parser = response.parser
        received = False
        try:
            connection.writer.write(request)
            await connection.writer.drain()
            while not response.complete:
                data = await connection.reader.read(65536)
                if not data:
                    break
                received = True
                parser.feed_data(data)
        except (ConnectionError, httptools.HttpParserError) as error:
            connection.close()
            if not received and isinstance(error, ConnectionError):
                raise _Stale from None
            raise HandoffTransportError(f"{type(error).__name__}: {error}") from None
        except BaseException:
            connection.close()
            raise
        if not response.complete:
            connection.close()
            if not received:
                raise _Stale
            raise HandoffTransportError("connection closed during the response")
        if response.keep_alive and not self._closed:
            connection.idle_since = time.monotonic()
            origin.idle.append(connection)
        else:
            connection.close()
        return parser.get_status_code(), b"".join(response.body)

    async def aclose(self) -> None:
        self._closed = True
        for origin in self._origins.values():
            while origin.idle:
                origin.idle.pop().close()


class _Stale(Exception):
    """The connection gave no response at all (closed by the server while idle)."""


class HttpxHandoffClient:
    """:class:`HandoffClient` over an httpx transport (in-process ASGI apps in tests)."""

    def __init__(self, transport: httpx.AsyncBaseTransport, *, timeout: float = 2.0) -> None:
        self._transport = transport
        self._timeout = httpx.Timeout(timeout, connect=min(timeout, 1.0)).as_dict()

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        request = httpx.Request(
            "POST", url, content=body, headers=headers, extensions={"timeout": self._timeout}
        )
        try:
            response = await self._transport.handle_async_request(request)
            try:
                await response.aread()
            finally:
                await response.aclose()
        except httpx.HTTPError as error:
            raise HandoffTransportError(f"{type(error).__name__}: {error}") from None
        return response.status_code, response.content

    async def aclose(self) -> None:
        await self._transport.aclose()
