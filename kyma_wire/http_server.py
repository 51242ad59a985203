"""The agent's HTTP/1.1 server: asyncio protocol + httptools parser, synchronous handlers.

Why not uvicorn: the agent runs on every customer node, and uvicorn (with click, its config and
logging machinery, the ASGI adapters) costs it ~3 MB of resident memory and a task plus several
dicts per request. The agent's two endpoints never await anything while answering (an admission is
parsed, decided and queued in place; health and metrics are read from memory), so a handler here is
a plain function ``Request -> Response`` called from the protocol's ``data_received`` the moment a
request is complete: no task, no ASGI messages. The HTTP parsing itself is httptools (llhttp, the
parser uvicorn used for the agent before), never hand-written.

What it does for the clients it has (the kube-apiserver's webhook client: HTTP/1.1, keep-alive,
``Content-Length`` bodies; Prometheus and kubelet probes):

* keep-alive and pipelining (answers in order), ``Transfer-Encoding: chunked`` bodies,
  ``Expect: 100-continue``, HEAD without a body, HTTP/1.0 closes unless asked to keep alive;
* bounded input: request target + headers at most ``max_header_bytes`` and ``max_headers`` lines
  (else 431), counted AS THEY ARRIVE: httptools buffers a header name or value until it ends, so
  a header that never ends would otherwise grow without bound (issue 26: eight such connections
  took the agent from 44 to 492 MiB). While a request's head is being read, at most the bytes
  left under the limit (plus one) are fed to the parser at a time, so the parser never holds more
  than about twice the limit for one connection. Body at most ``max_body_bytes`` (else the
  handler's ``Request.body_too_large`` answer, normally 413, then the connection closes: the rest
  of the body is never read); malformed requests get 400 and a close; with ``max_buffered_body_bytes``
  the bodies of all connections together are bounded too (many connections each sending a body just
  under the limit took the agent to 348 MiB with 40 of them): at the bound the connection whose body
  has been arriving longest is cut if it is older than ``shed_after``, else the new piece's request
  gets 503 and a close;
* slow clients: the request line and headers must arrive within ``header_timeout`` of the first
  byte (slowloris), the body within ``body_timeout`` of the headers (else 408 and a close); an
  idle keep-alive connection is closed after ``keep_alive_timeout``; a client that does not read
  its answers is cut off ``write_timeout`` after the answers began to pile up, and one that keeps
  pipelining requests meanwhile at once (its answers would otherwise pile up in memory);
* TLS on ``kyma_wire.tls_layer`` (not asyncio's ``SSLProtocol``, whose 256 KiB read buffer per
  connection took 1,000 held connections to 323 MiB): a connection counts against the cap from the
  TCP accept on, and its handshake must finish within ``header_timeout``;
* at most ``max_connections`` connections per server (each port has its own, so the metrics port
  can never starve the webhook port): at the cap, a new connection displaces, in this order, the
  connection idle for longest that never completed a request (a handshake, a held-open socket),
  the one whose first request has been arriving for more than ``shed_after`` seconds (a slow or
  stalled client: a healthy request arrives in milliseconds), then the same two among clients
  that have been answered before (the API server's pooled connections are shed last); only when
  every connection is busy with a fresh request is the new one refused. So held-open connections,
  idle or slow, cannot keep the API server's admissions or the kubelet's probes out;
* new connections are taken from the kernel's queue ``accepts_per_turn`` at a time, so a burst of
  (re)connecting clients is set up over several event-loop turns with admissions served in between;
* graceful stop: stop accepting, close idle connections at once, let requests that are arriving
  finish (answered with ``Connection: close``) within ``graceful_seconds``, then abort the rest.

A handler may also return an awaitable of its ``Response`` (the listener's events handed to
another replica over HTTP, its documented API served by FastAPI): the connection then stops reading,
the answer is written when the awaitable is done, and requests that had already arrived pipelined
behind it are answered after it, in order. Only such a handler creates a task, and only for that
request; the common path stays synchronous.

Shared by the agent (``skr_watcher.agent``) and the listener (``kcp_listener.direct_server``); here,
in ``kyma_wire``, because the agent may import nothing else of ours.

Not thread-safe: everything runs on the event loop that called ``start``, except, with
``Limits.handshake_thread``, the first step of each TLS handshake (``kyma_wire.tls_layer``).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import cast
from urllib.parse import unquote

import httptools

from kyma_wire.deadlines import Deadlines
from kyma_wire.sockets import bind
from kyma_wire.tls_layer import Shared, TlsConnection

__all__ = ["ErrorResponse", "Handler", "HttpServer", "Limits", "Request", "Response", "plain_error"]

log = logging.getLogger(__name__)

Header = tuple[bytes, bytes]


@dataclass(slots=True)
class Request:
    method: str
    path: str
    headers: list[Header] = field(default_factory=list)
    """Names lower-cased, in arrival order."""
    body: bytes = b""
    body_too_large: bool = False
    """The body exceeded ``max_body_bytes``: it was not read; the answer closes the connection."""
    target: bytes = b""
    """The request target as sent (raw path and ``?query``, not unquoted)."""

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes = b""
    headers: Sequence[Header] = ()
    """Without ``content-length`` (the server writes it)."""


Handler = Callable[[Request], "Response | Awaitable[Response]"]
"""Answers a request, at once or (rarely: it costs a task) by an awaitable of the answer."""
ErrorResponse = Callable[[int, str], Response]
"""The answer to a request the server refuses itself (status, reason): 400, 408, 417, 431, 500."""

_REASONS = {
    100: b"Continue",
    200: b"OK",
    400: b"Bad Request",
    404: b"Not Found",
    405: b"Method Not Allowed",
    408: b"Request Timeout",
    413: b"Content Too Large",
    417: b"Expectation Failed",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    503: b"Service Unavailable",
}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_DEADLINE_RESOLUTION = 0.05
"""Seconds: a timeout fires at most this late (``kyma_wire.deadlines``)."""


class _Date:
    """The ``Date`` header value, formatted at most once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def now(self) -> bytes:
        second = int(time.time())
        if second != self._second:
            self._second = second
            self._value = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(second)).encode()
        return self._value


_DATE = _Date()


def render(response: Response, *, head: bool, close: bool) -> bytes:
    """The wire form of an HTTP/1.1 response (``head``: headers only)."""
    status = response.status
    parts = [
        b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown")),
        b"date: " + _DATE.now() + b"\r\n",
    ]
    for name, value in response.headers:
        parts.append(name + b": " + value + b"\r\n")
    parts.append(b"content-length: %d\r\n" % len(response.body))
    if close:
        parts.append(b"connection: close\r\n")
    parts.append(b"\r\n")
    if not head:
        parts.append(response.body)
    return b"".join(parts)


class _RequestError(Exception):
    """Stops parsing: answer ``status`` and close."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Limits:
    """What one server allows a client (seconds for the timeouts; see the module docstring)."""

    max_header_bytes: int = 64 * 1024
    max_headers: int = 100
    max_body_bytes: int = 1024 * 1024
    header_timeout: float = 10.0
    body_timeout: float = 10.0
    keep_alive_timeout: float = 15.0
    write_timeout: float = 30.0
    max_connections: int = 1000
    shed_after: float = 1.0
    first_request_timeout: float | None = None
    """How long a new connection may stay silent (``None``: ``keep_alive_timeout``)."""
    linger_seconds: float = 0.0
    """After refusing a request (400, 413, 431...), read and discard for this long before closing (a
    lingering close, as nginx does): closing with unread input makes the kernel send a reset, which
    can destroy the answer before the client reads it. 0: close at once."""
    answer_timeouts: bool = True
    """Answer 408 to a request that did not arrive in time (else just close, as Go's ``net/http``)."""
    accepts_per_turn: int = 16
    """New connections taken from the kernel's queue per event-loop turn (the rest wait in the queue,
    ``listen_backlog`` long, for the next turns). asyncio's loop accepts up to its ``backlog`` at once
    (100 by default) and sets them all up in the next turn: a burst of reconnecting attackers then
    held every admission behind ~5 ms of connection set-up."""
    listen_backlog: int = 1024
    """The kernel's queue of connections not yet accepted."""
    max_buffered_body_bytes: int | None = None
    """Request body bytes held in memory at once across all connections of the server (``None``:
    only ``max_body_bytes`` per request). When a piece of a body would pass it, the connection whose
    body has been arriving longest is cut, if for ``shed_after`` seconds or more (a stalled client);
    else this request is answered 503 and its connection closed."""
    handshake_thread: bool = False
    """TLS only: run the costly first step of each handshake (the client's hello: key exchange and
    signature) on a thread of the server's own, one at a time, instead of on the event loop (see
    ``kyma_wire.tls_layer``)."""


class _NoCallbacks:
    pass


_NO_PARSER = httptools.HttpRequestParser(_NoCallbacks())
"""A connection's parser until its first bytes and after its close: an idle or closed connection
holds no parser of its own (a parser holds bound methods of its connection, a reference cycle that
only a full collection would break once the connection has lived long)."""


class _Connection(asyncio.Protocol):
    """One client connection: parse, call the handler, write the answer, police the limits."""

    __slots__ = (
        "_body",
        "_body_size",
        "_buffered",
        "_closing",
        "_deadlines",
        "_head_bytes",
        "_header_bytes",
        "_headers",
        "_heads",
        "_in_head",
        "_limits",
        "_loop",
        "_parser",
        "_pending",
        "_pending_close",
        "_pending_head",
        "_queued",
        "_receiving",
        "_server",
        "_too_large",
        "_transport",
        "_url",
        "_write_paused",
        "answered",
        "bucket",
        "deadline",
        "pool",
        "since",
    )

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._limits = server.limits
        self._loop = asyncio.get_running_loop()
        self._parser = _NO_PARSER
        self._transport: asyncio.Transport | None = None
        self._deadlines = server.deadlines
        self.deadline: float | None = None
        """When the current state's timeout ends (see ``kyma_wire.deadlines``)."""
        self.bucket: int | None = None
        self.pool: dict[_Connection, None] | None = None
        """The server's list this connection is in (``HttpServer._unlist``), if any."""
        self._closing = False
        self._write_paused = False
        self.answered = False
        """At least one request was answered on this connection (a client with a history)."""
        self.since = self._loop.time()
        """When the connection entered its current state (idle, receiving, not reading)."""
        # the request being received
        self._receiving = False
        self._in_head = True
        """Between requests or inside a request's head: the bytes fed are counted."""
        self._head_bytes = 0
        self._heads = 0
        """Heads completed so far (tells ``data_received`` that a head ended inside a piece)."""
        self._url = b""
        self._headers: list[Header] = []
        self._header_bytes = 0
        self._body: list[bytes] = []
        self._body_size = 0
        self._buffered = 0
        """Body bytes of the request being read held here (counted in the server's budget)."""
        self._too_large = False
        # an answer being awaited (see ``Handler``), and the requests that arrived behind it
        self._pending: asyncio.Future[Response] | None = None
        self._pending_close = False
        self._pending_head = False
        self._queued: deque[tuple[Request, bool]] | None = None

    # --- asyncio.Protocol -----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses, but are ones
        self._transport = transport
        if not self._server.admit(self):
            transport.abort()
            self._closing = True
            return
        first = self._limits.first_request_timeout
        self._arm(self._limits.keep_alive_timeout if first is None else first)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._cancel_timer()
        self.release_body()
        self._server.forget(self)
        self._queued = None  # a pending answer is dropped when it comes (``_resolved``)
        # break the reference cycles (parser, transport): freed now, not at the next full collection
        self._parser = _NO_PARSER
        self._transport = None

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        try:
            self._feed(data)
        except httptools.HttpParserCallbackError as error:
            cause = error.__context__
            if isinstance(cause, _Stop):
                return  # answered and closing: the rest of the data is not read
            if isinstance(cause, _RequestError):
                self._fail(cause.status, str(cause))
            else:  # a bug in a callback: answer, log, close
                log.error("HTTP request handling failed", exc_info=cause or error)
                self._fail(500, "internal error")
        except _RequestError as error:
            self._fail(error.status, str(error))
        except httptools.HttpParserUpgrade:
            self._fail(400, "protocol upgrades are not supported")
        except httptools.HttpParserError as error:
            self._fail(400, f"malformed HTTP request: {error}")

    def _feed(self, data: bytes) -> None:
        """Feed the parser; inside a head, never more than the bytes left under the limit (+1)."""
        limit = self._limits.max_header_bytes
        if self._parser is _NO_PARSER:
            self._parser = httptools.HttpRequestParser(self)
        feed = self._parser.feed_data
        while data and not self._closing:
            if not self._in_head:
                feed(data)  # a body: its size is policed by on_body
                return
            room = limit - self._head_bytes + 1
            piece = data if len(data) <= room else data[:room]
            data = data[len(piece) :]
            heads = self._heads
            feed(piece)
            if self._closing:
                return
            if self._heads == heads:  # the whole piece belonged to the head still being read
                self._head_bytes += len(piece)
                if self._head_bytes > limit:
                    raise _RequestError(431, f"request target and headers larger than {limit} bytes")
            # else a head ended inside the piece; a next head that began in it is counted from the
            # next piece on (at most one piece, i.e. the limit, uncounted)

    def eof_received(self) -> bool | None:
        return None  # close our side too (a half-open client gets no more answers)

    def pause_writing(self) -> None:
        """The client does not read its answers: read no more requests, give it a deadline."""
        self._write_paused = True
        self.since = self._loop.time()
        self._server.receiving(self)
        if self._transport is not None:
            self._transport.pause_reading()
        self._arm(self._limits.write_timeout)

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._transport is None or self._closing or self._pending is not None:
            return
        self._transport.resume_reading()
        if self._receiving:
            self._arm(self._limits.body_timeout if not self._in_head else self._limits.header_timeout)
        else:
            self._idle()

    # --- httptools callbacks ----------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._receiving = True
        self.since = self._loop.time()
        self._server.receiving(self)
        self._url = b""
        self._headers = []
        self._header_bytes = 0
        self.release_body()
        self._body_size = 0
        self._too_large = False
        self._arm(self._limits.header_timeout)

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count_header_bytes(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        # _count_header_bytes inlined: this runs for every header of every request
        size = self._header_bytes = self._header_bytes + len(name) + len(value) + 4
        limits = self._limits
        if size > limits.max_header_bytes:
            raise _RequestError(
                431, f"request target and headers larger than {limits.max_header_bytes} bytes"
            )
        headers = self._headers
        if len(headers) >= limits.max_headers:
            raise _RequestError(431, f"more than {limits.max_headers} header fields")
        headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._heads += 1
        if self._parser.should_upgrade():  # websocket, h2c, CONNECT: none is served here
            raise _RequestError(400, "protocol upgrades are not supported")
        length = self._header_value(b"content-length")
        if length is not None and length.isdigit() and int(length) > self._limits.max_body_bytes:
            self._too_large = True
            self._complete()  # answer now; the body is never read
            return
        expect = self._header_value(b"expect")
        if expect is not None and self._transport is not None:
            if expect.lower() != b"100-continue":
                raise _RequestError(417, "unsupported expectation")
            self._transport.write(_CONTINUE)
        if not self._write_paused:
            self._arm(self._limits.body_timeout)

    def on_body(self, body: bytes) -> None:
        if self._too_large:
            return
        self._body_size += len(body)
        if self._body_size > self._limits.max_body_bytes:
            self._too_large = True
            self.release_body()
            self._complete()
            return
        if self._limits.max_buffered_body_bytes is not None and not self._server.hold_body(self, len(body)):
            raise _RequestError(503, "too many request bytes in flight on this server; retry later")
        self._buffered += len(body)
        self._body.append(body)

    def release_body(self) -> None:
        """Drop the body read so far (handed to the request, or never to be used) from the budget."""
        self._body = []
        if self._buffered:
            self._server.body_released(self, self._buffered)
            self._buffered = 0

    @property
    def buffered_body(self) -> int:
        """Body bytes of the request being read held by this connection."""
        return self._buffered

    def on_message_complete(self) -> None:
        self._in_head = True
        self._head_bytes = 0
        if self._receiving:
            self._complete()

    # --- internals -----------------------------------------------------------------------------------------

    def _count_header_bytes(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > self._limits.max_header_bytes:
            limit = self._limits.max_header_bytes
            raise _RequestError(431, f"request target and headers larger than {limit} bytes")

    def _header_value(self, name: bytes) -> bytes | None:
        for key, value in self._headers:
            if key == name:
                return value
        return None

    def _complete(self) -> None:
        """The request is here (or too large to read): answer it."""
        self._receiving = False
        if self._write_paused:
            # pipelining while not reading the answers: they would pile up in memory
            self._server.observe("not_reading")
            self.abort()
            raise _Stop
        url = self._url
        raw_path = url.split(b"?", 1)[0].decode("latin-1")
        method = self._parser.get_method().decode("ascii", "replace")
        request = Request(
            method=method,
            path=unquote(raw_path) if "%" in raw_path else raw_path,
            headers=self._headers,
            body=self._body[0] if len(self._body) == 1 else b"".join(self._body),
            body_too_large=self._too_large,
            target=url,
        )
        self.release_body()
        close = self._too_large or self._server.stopping or not self._parser.should_keep_alive()
        if self._pending is not None:  # an earlier answer is awaited: this one follows it, in order
            if self._queued is None:
                self._queued = deque()
            self._queued.append((request, close))
            if close:  # nothing after it is parsed (its answer closes the connection)
                raise _Stop
            return
        if not self._answer(request, close):
            if close:
                raise _Stop
            return
        if close or self._closing:
            raise _Stop
        if not self._write_paused:  # else pause_writing armed the write deadline
            self._idle()

    def _answer(self, request: Request, close: bool) -> bool:
        """Answer ``request`` now (True), or start awaiting its answer (False: reading stops)."""
        try:
            response = self._server.handler(request)
        except Exception:
            log.exception("handler failed for %s %s", request.method, request.path)
            self._send(self._server.error(500, "internal error"), head=request.method == "HEAD", close=True)
            return True
        if isinstance(response, Response):
            self._send(response, head=request.method == "HEAD", close=close)
            return True
        future = asyncio.ensure_future(response)
        self._pending = future
        self._pending_close = close
        self._pending_head = request.method == "HEAD"
        self._server.busy(self)  # not a candidate to shed while its answer is being made
        self._cancel_timer()  # the wait is the server's, not the client's
        if self._transport is not None:
            self._transport.pause_reading()
        future.add_done_callback(self._resolved)
        return False

    def _send(self, response: Response, *, head: bool, close: bool) -> None:
        close = close or self._server.stopping
        self._write(render(response, head=head, close=close))
        self.answered = True
        if close:
            self._close()

    def _resolved(self, future: asyncio.Future[Response]) -> None:
        """An awaited answer is done: write it, then answer what queued up behind it."""
        self._pending = None
        if self._transport is None or self._transport.is_closing():
            return  # the client left (or the server aborted it): nothing to write to
        if future.cancelled():
            self.abort()
            return
        error = future.exception()
        if error is not None:
            log.error("handler failed", exc_info=error)
            self._send(self._server.error(500, "internal error"), head=self._pending_head, close=True)
            return
        self._send(future.result(), head=self._pending_head, close=self._pending_close)
        queued = self._queued
        while queued and not self._closing:
            request, close = queued.popleft()
            if not self._answer(request, close):
                return
        if self._closing or self._transport is None:
            return
        if not self._write_paused:
            self._transport.resume_reading()
            if self._receiving:
                self._arm(self._limits.body_timeout if not self._in_head else self._limits.header_timeout)
            else:
                self._idle()

    def _idle(self) -> None:
        self.since = self._loop.time()
        self._server.idle(self)
        self._arm(self._limits.keep_alive_timeout)

    def _fail(self, status: int, message: str) -> None:
        """Answer an unusable request with ``status`` and close."""
        self.release_body()
        if status == 503:
            self._server.observe("body_budget")
        elif status >= 500:
            log.warning("closing an HTTP connection: %s", message)
        elif status == 431:
            self._server.observe("headers_too_large")
        elif status != 408:  # timeouts are reported by expired
            self._server.observe("malformed")
        self._write(render(self._server.error(status, message), head=False, close=True))
        transport = self._transport
        linger = self._limits.linger_seconds
        if linger > 0 and transport is not None and transport.can_write_eof():
            self._closing = True  # what still arrives is discarded (``data_received``)
            self._cancel_timer()
            self._server.busy(self)
            transport.write_eof()
            self._loop.call_later(linger, transport.close)
            self._deadlines.set(self, linger + self._limits.write_timeout)  # see ``_close``
            return
        self._close()

    def _write(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def _close(self) -> None:
        self._closing = True
        self._cancel_timer()
        self._server.busy(self)
        transport = self._transport
        if transport is not None:
            transport.close()  # after the buffered answer is written
            if transport.get_write_buffer_size():
                # a client that does not read it would keep the connection (and its slot) for good
                self._deadlines.set(self, self._limits.write_timeout)

    @property
    def receiving(self) -> bool:
        """A request has started to arrive and is not answered yet."""
        return self._receiving

    def close_if_idle(self) -> None:
        """Graceful stop: an idle connection closes now, one receiving a request after its answer."""
        if self._pending is not None:
            self._pending_close = True  # after the awaited answer
        elif not self._receiving and not self._closing:
            self._close()

    def abort(self) -> None:
        self._closing = True
        self._cancel_timer()
        self._server.busy(self)
        if self._transport is not None:
            self._transport.abort()

    def _arm(self, seconds: float) -> None:
        if self._closing:
            self._deadlines.clear(self)
        else:
            self._deadlines.set(self, seconds)

    def _cancel_timer(self) -> None:
        self._deadlines.clear(self)

    def expired(self) -> None:
        """The current state's timeout has passed (called by ``Deadlines``)."""
        if self._closing:
            if self._transport is not None:  # its last answer still unread after the write timeout
                self._server.timeouts += 1
                self._server.timed_out("write")
                self._transport.abort()
            return
        if self._pending is not None and not self._write_paused:
            self._arm(self._limits.body_timeout)  # not read while its answer is awaited: not late
            return
        self._server.timeouts += 1
        if self._write_paused:
            phase = "write"
        elif self._receiving:
            phase = "header" if self._in_head else "body"
        else:
            phase = "idle" if self.answered else "header"
        self._server.timed_out(phase)
        if self._write_paused:
            self.abort()  # it does not read: writing more would not help
        elif self._receiving and self._limits.answer_timeouts:
            self._fail(408, "request not received in time")
        elif self._receiving:
            self._close()
        else:
            self._close()  # idle keep-alive connection


def _ignore(reason: str) -> None:
    pass


def plain_error(status: int, message: str) -> Response:
    """The default :data:`ErrorResponse`: the reason as plain text."""
    return Response(status, message.encode(), ((b"content-type", b"text/plain; charset=utf-8"),))


class _Stop(Exception):
    """Raised from a callback after the connection was closed: ignore the rest of the data."""


class HttpServer:
    """``await start()`` binds and serves; ``await stop()`` ends it gracefully (see the module)."""

    def __init__(
        self,
        handler: Handler,
        *,
        host: str,
        port: int,
        name: str,
        ssl_context: ssl.SSLContext | None = None,
        limits: Limits = Limits(),
        graceful_seconds: float = 2.0,
        observe: Callable[[str], None] | None = None,
        on_timeout: Callable[[str], None] | None = None,
        error: ErrorResponse = plain_error,
        handshake_executor: Executor | None = None,
    ) -> None:
        self.handler = handler
        self._handshake_executor = handshake_executor
        """Where TLS handshakes' first steps run (``Limits.handshake_thread``: a thread of the server's
        own, made at start and ended at stop, when none is given)."""
        self._owns_executor = False
        self.observe = observe or _ignore
        """Called with the reason whenever the server cuts a client short: ``shed``, ``refused``,
        ``timeout``, ``not_reading``, ``malformed`` (400/417), ``headers_too_large`` (431),
        ``body_budget`` (cut or answered 503 at ``max_buffered_body_bytes``)."""
        self.on_timeout = on_timeout
        """If set, called instead of ``observe`` for a connection's timeout, with its phase:
        ``header`` (a request's head, or a new connection's first byte), ``body``, ``idle``, ``write``."""
        self.error = error
        self.host = host
        self.requested_port = port
        self.name = name
        self.ssl_context = ssl_context
        budget = limits.max_buffered_body_bytes
        if budget is not None and budget < limits.max_body_bytes:
            raise ValueError(
                f"max_buffered_body_bytes ({budget}) is below max_body_bytes ({limits.max_body_bytes}):"
                " a request of the allowed size could never be read"
            )
        self.limits = limits
        self.graceful_seconds = graceful_seconds
        self.connections: set[_Connection] = set()
        self._fresh_idle: dict[_Connection, None] = {}
        """Idle connections that never completed a request, longest idle first (shed first)."""
        self._fresh_receiving: dict[_Connection, None] = {}
        """Connections receiving their first request (or not reading), longest first."""
        self._idle: dict[_Connection, None] = {}
        """Idle connections that were answered before, longest idle first."""
        self._receiving: dict[_Connection, None] = {}
        """Connections with a history receiving a request (or not reading), longest first."""
        self.stopping = False
        self.shed = 0
        """Connections closed to make room for new ones."""
        self.refused = 0
        """New connections refused at the cap (every connection busy with a fresh request)."""
        self.timeouts = 0
        """Connections cut by a timeout (header, body, keep-alive or write)."""
        self.closed = 0
        """Connections closed so far, for whatever reason."""
        self.buffered_body_bytes = 0
        """Request body bytes held in memory now, all connections together."""
        self._bodies: dict[_Connection, None] = {}
        """Connections holding body bytes, in the order their bodies began to arrive."""
        self.port: int | None = None
        """The bound port (after ``start``)."""
        self._server: asyncio.Server | None = None
        self._deadlines: Deadlines | None = None
        self._stopped: asyncio.Event | None = None
        self._drained: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def task(self) -> asyncio.Task[None]:
        """Done when the server has stopped."""
        if self._task is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._task

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError(f"{self.name} is already started")
        sock = bind(self.host, self.requested_port)
        self.port = sock.getsockname()[1]
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                self._protocol_factory(), sock=sock, backlog=self.limits.accepts_per_turn
            )
            # asyncio's ``backlog`` is both how many it accepts per turn and the kernel's queue (it
            # listens again with it): give the queue back its own length
            sock.listen(self.limits.listen_backlog)
        except BaseException:
            sock.close()
            raise
        self._stopped = asyncio.Event()
        self._drained = asyncio.Event()
        self._task = asyncio.create_task(self._until_stopped(self._stopped), name=self.name)

    @property
    def deadlines(self) -> Deadlines:
        """The connections' deadlines (one timer for the server, on the loop that first asks)."""
        if self._deadlines is None:
            self._deadlines = Deadlines(_DEADLINE_RESOLUTION)
        return self._deadlines

    def _protocol_factory(self) -> Callable[[], asyncio.BaseProtocol]:
        context = self.ssl_context
        if context is None:
            return lambda: _Connection(self)
        executor = self._handshake_executor
        if executor is None and self.limits.handshake_thread:
            executor = self._handshake_executor = ThreadPoolExecutor(
                1, thread_name_prefix=f"{self.name}-handshake"
            )
            self._owns_executor = True
        shared = Shared(self.deadlines, executor=executor)
        timeout = self.limits.header_timeout

        def tls() -> asyncio.BaseProtocol:
            return TlsConnection(
                context, _Connection(self), shared, handshake_timeout=timeout, on_handshake_timeout=self._late
            )

        return tls

    def timed_out(self, phase: str) -> None:
        """A connection's ``phase`` timed out (see ``on_timeout``)."""
        if self.on_timeout is not None:
            self.on_timeout(phase)
        else:
            self.observe("not_reading" if phase == "write" else "timeout")

    def _late(self) -> None:
        """A TLS handshake did not finish in time (the connection is aborted)."""
        self.timeouts += 1
        self.observe("timeout")

    @staticmethod
    async def _until_stopped(stopped: asyncio.Event) -> None:
        await stopped.wait()

    # --- connection bookkeeping (called by the connections) -------------------------------------------

    def admit(self, connection: _Connection) -> bool:
        """Make room for a new connection (see the module docstring); False: refuse it."""
        if self.stopping:
            return False
        if len(self.connections) >= self.limits.max_connections and not self._shed():
            self.refused += 1
            self.observe("refused")
            return False
        self.connections.add(connection)
        self._fresh_idle[connection] = None
        connection.pool = self._fresh_idle
        return True

    def hold_body(self, connection: _Connection, size: int) -> bool:
        """Room for ``size`` more body bytes of ``connection`` under ``max_buffered_body_bytes``;
        False: there is none (see ``Limits``)."""
        budget = self.limits.max_buffered_body_bytes
        if budget is None:
            return True
        while self.buffered_body_bytes + size > budget:
            oldest = next(iter(self._bodies), None)
            if oldest is connection:  # it is the oldest itself: the next one, if any, is younger
                oldest = next(iter(list(self._bodies)[1:]), None)
            now = asyncio.get_running_loop().time()
            if oldest is None or now - oldest.since < self.limits.shed_after:
                return False
            oldest.release_body()  # at once: abort's connection_lost comes later
            oldest.abort()
            self.shed += 1
            self.observe("body_budget")
        self.buffered_body_bytes += size
        self._bodies.setdefault(connection, None)
        return True

    def body_released(self, connection: _Connection, size: int) -> None:
        """``connection`` no longer holds ``size`` body bytes."""
        self.buffered_body_bytes -= size
        self._bodies.pop(connection, None)

    def _shed(self) -> bool:
        """Close one connection to make room, in the order of the module docstring."""
        now = asyncio.get_running_loop().time()
        for idle, slow in ((self._fresh_idle, self._fresh_receiving), (self._idle, self._receiving)):
            if idle:
                idlest = next(iter(idle))
                self._unlist(idlest)
                self.connections.discard(idlest)
                idlest.close_if_idle()
                break
            slowest = next(iter(slow), None)
            if slowest is not None and now - slowest.since >= self.limits.shed_after:
                self._unlist(slowest)
                self.connections.discard(slowest)
                slowest.abort()
                break
        else:
            return False
        self.shed += 1
        self.observe("shed")
        return True

    @staticmethod
    def _unlist(connection: _Connection) -> None:
        pool = connection.pool
        if pool is not None:
            pool.pop(connection, None)
            connection.pool = None

    def idle(self, connection: _Connection) -> None:
        """``connection`` waits for its next request (the longest idle are shed first)."""
        if connection in self.connections:
            self._unlist(connection)
            pool = self._idle if connection.answered else self._fresh_idle
            pool[connection] = None
            connection.pool = pool

    def receiving(self, connection: _Connection) -> None:
        """``connection`` is receiving a request or not reading its answers (since ``since``)."""
        if connection in self.connections:
            self._unlist(connection)
            pool = self._receiving if connection.answered else self._fresh_receiving
            pool[connection] = None
            connection.pool = pool

    def busy(self, connection: _Connection) -> None:
        """``connection`` is closing: no longer a candidate to shed."""
        self._unlist(connection)

    def forget(self, connection: _Connection) -> None:
        """``connection`` is closed."""
        self.closed += 1
        self._unlist(connection)
        self.connections.discard(connection)
        if self.stopping and not self.connections and self._drained is not None:
            self._drained.set()

    async def stop(self) -> None:
        """Graceful stop within ``graceful_seconds``, then the remaining connections are aborted."""
        server, stopped, drained = self._server, self._stopped, self._drained
        if server is None or stopped is None or drained is None or stopped.is_set():
            return
        self.stopping = True
        server.close()
        for connection in list(self.connections):
            connection.close_if_idle()
        if self.connections:
            try:
                async with asyncio.timeout(self.graceful_seconds):
                    await drained.wait()
            except TimeoutError:
                for connection in list(self.connections):
                    connection.abort()
        self.connections.clear()
        for pool in (self._fresh_idle, self._fresh_receiving, self._idle, self._receiving):
            pool.clear()
        await server.wait_closed()
        self.deadlines.close()
        if self._owns_executor and self._handshake_executor is not None:
            self._handshake_executor.shutdown(wait=True)  # a step in flight ends within a millisecond
        stopped.set()
        await self.task
