"""A small keep-alive HTTP/1.1 client on asyncio streams: the agent's KCP client and the listener's hand-off.

Why not httpx: in the agent (every customer node) httpx with httpcore and anyio is ~3.4 MB of
resident memory (``benchmarks/results/agent.md``); in the listener one httpx request costs
~650-900 us of CPU (``httpx.Request`` alone ~120 us for URL and header normalisation; httpcore's
anyio backend most of the rest), while the same exchange over asyncio streams costs ~100 us
(``benchmarks/results/listener.md``, section "Hand-off"). Both users have one fixed shape (a POST
with a Content-Length body to one known endpoint, a response with a Content-Length or chunked body),
so the client needs little:

* responses are parsed by ``httptools`` (llhttp, the parser uvicorn uses), not by hand;
* keep-alive connections per origin, at most ``max_connections`` per origin (a semaphore), an idle
  connection closed after ``idle_seconds``;
* one deadline per exchange (``timeout``: writing the request and reading the whole response), a
  shorter one for connecting (TCP and the TLS handshake);
* TLS with the given ``ssl.SSLContext`` (the agent's: KCP's CA bundle and the client certificate for
  mTLS) or the system trust store; SNI and certificate check against the URL's host or the given
  ``server_hostname``;
* a request that fails on a REUSED connection before any response byte arrived (the server closed
  it while idle) is sent once more on a new connection: with the headers from ``refresh`` when given
  (the agent re-signs, so the resend carries a fresh nonce), else byte for byte (the hand-off server
  accepts each HMAC nonce once, so that request takes effect at most once either way).

Errors are :class:`HttpTransportError` (:class:`HttpTimeoutError` for deadlines): connection refused
or lost, TLS failures, malformed or oversized responses. Tests and in-process rigs adapt httpx
transports to the same :class:`HttpTransport` interface (``kyma_wire.httpx_transport``); the agent
process never imports httpx.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Protocol
from urllib.parse import urlsplit

import httptools

__all__ = ["HttpClient", "HttpResponse", "HttpTimeoutError", "HttpTransport", "HttpTransportError"]

_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
_MAX_HEADER_BYTES = 64 * 1024

HeaderSource = Callable[[], Mapping[str, str]]


class HttpTransportError(Exception):
    """No usable answer: connection refused or lost, TLS failure, malformed or oversized response."""


class HttpTimeoutError(HttpTransportError):
    """The connection or the exchange did not finish within its deadline."""


class HttpResponse:
    """Status, headers (names lower-cased; repeated fields joined with ``", "``) and body."""

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


class HttpTransport(Protocol):
    """What :class:`HttpClient` offers; the httpx adapter offers the same for tests."""

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], *, refresh: HeaderSource | None = None
    ) -> HttpResponse: ...

    async def aclose(self) -> None: ...


class _Response:
    """httptools callbacks: collects headers and body, notes completion and keep-alive."""

    __slots__ = ("body", "complete", "header_bytes", "headers", "keep_alive", "parser", "size")

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.header_bytes = 0
        self.body: list[bytes] = []
        self.size = 0
        self.complete = False
        self.keep_alive = False
        self.parser = httptools.HttpResponseParser(self)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_bytes += len(name) + len(value)
        if self.header_bytes > _MAX_HEADER_BYTES:
            raise HttpTransportError("response headers too large")
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        previous = self.headers.get(key)
        self.headers[key] = text if previous is None else f"{previous}, {text}"

    def on_body(self, body: bytes) -> None:
        self.size += len(body)
        if self.size > _MAX_RESPONSE_BYTES:
            raise HttpTransportError("response too large")
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


class HttpClient:
    """See the module docstring."""

    def __init__(
        self,
        *,
        max_connections: int = 8,
        timeout: float = 2.0,
        connect_timeout: float = 1.0,
        idle_seconds: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> None:
        self._max_connections = max_connections
        self._timeout = timeout
        self._connect_timeout = min(connect_timeout, timeout)
        self._idle_seconds = idle_seconds
        self._origins: dict[str, _Origin] = {}
        self._targets: dict[str, tuple[_Origin, bytes]] = {}
        self._tls = ssl_context
        self._server_hostname = server_hostname
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

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], *, refresh: HeaderSource | None = None
    ) -> HttpResponse:
        """POST ``body``; raises :class:`HttpTransportError` when no complete answer arrives."""
        if self._closed:
            raise HttpTransportError("client closed")
        try:
            origin, path = self._target(url)
        except ValueError as error:
            raise HttpTransportError(str(error)) from None
        request = _encode(origin, path, headers, body)
        again = (lambda: _encode(origin, path, refresh(), body)) if refresh is not None else None
        origin.active += 1
        try:
            return await self._post(origin, request, again)
        finally:
            origin.active -= 1
            if time.monotonic() - self._swept > self._idle_seconds:
                self._sweep()

    async def _post(self, origin: _Origin, request: bytes, again: Callable[[], bytes] | None) -> HttpResponse:
        try:
            async with origin.slots, asyncio.timeout(self._timeout):
                connection, reused = await self._connection(origin)
                try:
                    return await self._exchange(origin, connection, request)
                except _Stale:
                    if not reused:
                        raise HttpTransportError("connection closed before the response") from None
                connection = await self._connect(origin)
                try:
                    return await self._exchange(origin, connection, again() if again else request)
                except _Stale:
                    raise HttpTransportError("connection closed before the response") from None
        except TimeoutError:
            raise HttpTimeoutError("timeout") from None
        except ssl.SSLError as error:
            raise HttpTransportError(f"TLS: {error}") from None
        except OSError as error:
            raise HttpTransportError(f"{type(error).__name__}: {error}") from None

    def _sweep(self) -> None:
        """Close connections idle too long; forget origins nobody uses (hand-off holders come and go)."""
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
        async with asyncio.timeout(self._connect_timeout):
            if origin.tls:
                if self._tls is None:
                    self._tls = ssl.create_default_context()
                reader, writer = await asyncio.open_connection(
                    origin.host,
                    origin.port,
                    ssl=self._tls,
                    server_hostname=self._server_hostname or origin.host,
                    ssl_handshake_timeout=self._connect_timeout,
                )
            else:
                reader, writer = await asyncio.open_connection(origin.host, origin.port)
        return _Connection(reader, writer)

    async def _exchange(self, origin: _Origin, connection: _Connection, request: bytes) -> HttpResponse:
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
            raise HttpTransportError(f"{type(error).__name__}: {error}") from None
        except BaseException:
            connection.close()
            raise
        if not response.complete:
            connection.close()
            if not received:
                raise _Stale
            raise HttpTransportError("connection closed during the response")
        if response.keep_alive and not self._closed:
            connection.idle_since = time.monotonic()
            origin.idle.append(connection)
        else:
            connection.close()
        return HttpResponse(parser.get_status_code(), response.headers, b"".join(response.body))

    async def aclose(self) -> None:
        self._closed = True
        for origin in self._origins.values():
            while origin.idle:
                origin.idle.pop().close()


def _encode(origin: _Origin, path: bytes, headers: Mapping[str, str], body: bytes) -> bytes:
    head = [b"POST ", path, b" HTTP/1.1\r\nhost: ", origin.authority, b"\r\n"]
    for name, value in headers.items():
        head += (name.encode("latin-1"), b": ", value.encode("latin-1"), b"\r\n")
    head += (b"content-length: ", str(len(body)).encode(), b"\r\n\r\n")
    return b"".join(head) + body


class _Stale(Exception):
    """The connection gave no response at all (closed by the server while idle)."""
