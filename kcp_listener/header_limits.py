"""Bounded request headers for the listener's HTTP server: 431 instead of reading megabytes.

Why: the listener may be reachable without the gateway in front (local runs, a misconfigured
Service), and uvicorn's httptools protocol reads a request's header section to its end, however
large, before the application sees anything: an 8 MB header was read completely and then refused
with 401. This protocol counts what the parser delivers while a request's headers are still being
read (every chunk that ends still inside the header section, then the request line and every
header name and value once they are complete) and answers ``431 Request Header Fields Too Large``
and closes the connection as soon as the size or the number of headers is over the limit (after a
short lingering close, so the client can read the answer); nothing reaches the application and
nothing more is parsed.

Cost on the accepted path: no callback per header; one check per chunk and one sum over the
request's headers when they are complete (the wrk runs of ``benchmarks/listener_bench.py`` go
through this protocol). Chunks that end inside the header section are counted as they arrive, so
an endless header is cut off after the limit plus at most one read.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from kyma_wire.log_limit import RateLimitedLog

__all__ = ["BoundedHeadersProtocol", "bounded_headers_protocol"]

_BODY = b'{"error":"request header fields too large"}'
_RESPONSE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-type: application/json\r\n"
    b"content-length: %d\r\n"
    b"connection: close\r\n\r\n%s" % (len(_BODY), _BODY)
)


_LINGER_SECONDS = 1.0

_MALFORMED = "Invalid HTTP request received."

log = logging.getLogger(__name__)
_limited_log = RateLimitedLog(log)
"""uvicorn logs a warning per malformed request: a client could write the log at will."""


class _TooLarge(Exception):
    pass


class BoundedHeadersProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` with limits on header bytes and count (see :func:`bounded_headers_protocol`)."""

    max_header_bytes = 64 * 1024
    max_header_count = 100

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_headers = True
        self._header_bytes = 0
        self._header_count = 0
        self._rejected = False

    def data_received(self, data: bytes) -> None:
        if self._rejected:
            return
        in_headers = self._in_headers
        self._feed(data)
        if in_headers and self._in_headers and not self._rejected:
            # The whole chunk was header bytes (the parser may buffer a partial header line).
            self._header_bytes += len(data)
            if self._header_bytes > self.max_header_bytes:
                self._reject()

    def _feed(self, data: bytes) -> None:
        """uvicorn's ``data_received``, with its one warning line per malformed request rate-limited."""
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if not self._rejected:
                self.rejected("malformed")
            self.send_400_response(_MALFORMED)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self.rejected("upgrade")

    def rejected(self, reason: str) -> None:
        """A request refused by the protocol (``malformed``, ``upgrade``, ``header-too-large``, or a
        timeout): one log line per reason every few seconds; subclasses also count it."""
        if reason != "header-too-large":
            _limited_log.log(reason, "HTTP request refused (%s) from %s", reason, _peer(self.client))

    def on_message_begin(self) -> None:
        self._in_headers = True
        self._header_bytes = 0
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_headers = False
        headers = self.headers
        if len(headers) > self.max_header_count or (
            len(self.url) + sum(len(name) + len(value) for name, value in headers) > self.max_header_bytes
        ):
            self._reject_in_callback()
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        if not self._rejected:  # a rejection from a callback surfaces as a parser error
            super().send_400_response(msg)

    def _reject(self) -> None:
        if self._rejected:
            return
        self._rejected = True
        self.rejected("header-too-large")
        transport = self.transport
        transport.write(_RESPONSE)
        # Lingering close (as nginx does): closing with unread input makes the kernel send a reset,
        # which can destroy the 431 before the client reads it. Half-close, discard what still
        # arrives (``data_received`` ignores it, unparsed) and close for good after a second.
        if transport.can_write_eof():
            transport.write_eof()
            asyncio.get_running_loop().call_later(_LINGER_SECONDS, transport.close)
        else:
            transport.close()

    def _reject_in_callback(self) -> None:
        self._reject()
        raise _TooLarge  # stops the parser; uvicorn's parser-error path then sees ``_rejected``


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "unknown"


def bounded_headers_protocol(max_header_bytes: int, max_header_count: int) -> type[BoundedHeadersProtocol]:
    """A protocol class with these limits (uvicorn instantiates the class per connection)."""
    return type(
        "ListenerHttpProtocol",
        (BoundedHeadersProtocol,),
        {"max_header_bytes": max_header_bytes, "max_header_count": max_header_count},
    )
