"""Attack clients for HTTP/1.1 servers, parameterised by a ``Target`` (host, port, optional TLS).

Why a package of its own: every HTTP server we run (the agent's webhook and metrics ports, the
listener, the hand-off, the operator's endpoints) must withstand the same clients (DESIGN.md §12),
so the clients live here once and each server's tests (and ``benchmarks/agent_hostile.py``) run
them against a real server. Each attack returns what a client can observe (bytes answered, whether
and when the server closed), never asserts: the caller decides what its server must do.

Nothing here sleeps to wait for the server: reads and closes are awaited with a deadline. The only
pauses are the attacks' own pacing (a slowloris client sends a byte per ``interval``).
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass

__all__ = [
    "CHUNKED_ABUSE",
    "MALFORMED",
    "Held",
    "Outcome",
    "Target",
    "endless_header",
    "exchange",
    "held_connections",
    "huge_body",
    "never_reading",
    "pipelining_flood",
    "read_answer",
    "read_until_closed",
    "slowloris",
    "statuses",
]

DEADLINE = 10.0
"""Longest wait for any answer or close (a server that takes longer has failed the attack)."""


@dataclass(frozen=True, slots=True)
class Target:
    host: str
    port: int
    ssl: ssl.SSLContext | None = None
    path: str = "/"
    """A path the server answers with GET (used where an attack needs a valid request)."""

    def get(self, extra: bytes = b"") -> bytes:
        return b"GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (self.path.encode(), self.host.encode(), extra)


@dataclass(frozen=True, slots=True)
class Outcome:
    answer: bytes
    """What the server sent before it closed (b"" if it aborted at once)."""
    closed: bool
    """The server closed (or reset) the connection within the deadline."""
    sent: int = 0
    """Bytes the attack got to send."""
    seconds: float = 0.0
    """From the start of the attack until the server closed."""


def statuses(raw: bytes) -> list[int]:
    return [int(status) for status in re.findall(rb"HTTP/1\.[01] (\d{3}) ", raw)]


class _ReadsBeforeReset(asyncio.StreamReader):
    """A reader that hands out what arrived before the connection was reset or broke, then ends.

    A socket does that (``recv`` returns the queued bytes, then ``ECONNRESET``), but asyncio's
    ``StreamReader.read`` raises the transport's error (``ECONNRESET``, or ``EPIPE`` from a write
    after the reset) before its buffered bytes: an answer the server sent just before a reset (its
    close with our unread input in its buffer) would be lost to the client though it arrived.
    ``exception()`` still reports the error."""

    reset: Exception | None = None

    def set_exception(self, exc: Exception) -> None:
        if isinstance(exc, ConnectionError):
            self.reset = exc
            self.feed_eof()
        else:
            super().set_exception(exc)

    def exception(self) -> Exception | None:
        return self.reset or super().exception()


async def connect(
    target: Target, *, receive_buffer: int | None = None, limit: int = 2**20
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection like ``asyncio.open_connection``'s, with a reader that keeps what arrived
    before a reset (``_ReadsBeforeReset``)."""
    loop = asyncio.get_running_loop()
    reader = _ReadsBeforeReset(limit=limit, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    server_hostname = target.host if target.ssl else None
    if receive_buffer is not None:  # before connect: the window the server may fill
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.setblocking(False)
        await loop.sock_connect(sock, (target.host, target.port))
        transport, _ = await loop.create_connection(
            lambda: protocol, sock=sock, ssl=target.ssl, server_hostname=server_hostname
        )
    else:
        transport, _ = await loop.create_connection(
            lambda: protocol, target.host, target.port, ssl=target.ssl, server_hostname=server_hostname
        )
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


async def read_until_closed(reader: asyncio.StreamReader, deadline: float = DEADLINE) -> Outcome:
    """Everything until the server closes; ``closed`` False when it did not within ``deadline``."""
    chunks: list[bytes] = []
    started = time.monotonic()
    try:
        async with asyncio.timeout(deadline):
            while chunk := await reader.read(65536):
                chunks.append(chunk)
    except TimeoutError:
        return Outcome(b"".join(chunks), closed=False)
    except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
        pass
    return Outcome(b"".join(chunks), closed=True, seconds=time.monotonic() - started)


async def read_answer(reader: asyncio.StreamReader, deadline: float = DEADLINE) -> bytes:
    """One keep-alive answer: the head, then ``content-length`` bytes."""
    async with asyncio.timeout(deadline):
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        return head + await reader.readexactly(length)


async def exchange(target: Target, data: bytes, deadline: float = DEADLINE) -> Outcome:
    """Write ``data`` (ignoring a reset while writing), read until the server closes."""
    reader, writer = await connect(target)
    try:
        with suppress(ConnectionResetError, BrokenPipeError):
            writer.write(data)
            await writer.drain()
        outcome = await read_until_closed(reader, deadline)
        return Outcome(outcome.answer, outcome.closed, len(data), outcome.seconds)
    finally:
        writer.close()


MALFORMED: Sequence[bytes] = (
    b"NOT HTTP AT ALL\r\n\r\n",
    b"GET\r\n\r\n",
    b"GET / HTTP/9.9\r\nHost: x\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
    b"GET / HTTP/1.1\r\nHo\x00st: x\r\n\r\n",
    b"GET /\x7f HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET / HTTP/1.1\r\n Folded: x\r\n\r\n",
    b"GET / HTTP/1.1\nHost: x\n\n\x00\x00",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(32),  # a TLS hello on a plain port
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n",
)
"""Request heads no server of ours may answer with 2xx; each should get a 4xx and a close."""

CHUNKED_ABUSE: Sequence[bytes] = (
    b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcdefghij\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked, identity\r\n\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n\r\n0\r\n\r\n",
)
"""Broken chunked framing (smuggling material): a 4xx and a close, never 2xx."""


async def endless_header(
    target: Target, *, give_up_after: int, chunk: int = 16384, name: bool = False
) -> Outcome:
    """A header value (or with ``name``, a header name) that never ends: how much the server reads.

    Sends ``chunk`` bytes at a time, while reading concurrently, until the server answers or closes,
    or ``give_up_after`` bytes are sent (then ``closed`` is False: it kept reading). ``sent``
    includes what was still in flight in the socket buffers when the answer came.
    """
    reader, writer = await connect(target)
    started = time.monotonic()
    answer = asyncio.create_task(read_until_closed(reader))
    sent = 0
    try:
        head = b"GET %s HTTP/1.1\r\nHost: %s\r\n" % (target.path.encode(), target.host.encode())
        writer.write(head + (b"" if name else b"X-Endless: "))
        sent = len(head)
        block = b"a" * chunk
        while sent < give_up_after and not answer.done():
            try:
                writer.write(block)
                async with asyncio.timeout(DEADLINE):
                    await writer.drain()
            except (ConnectionResetError, BrokenPipeError):
                break
            except TimeoutError:  # the server stopped reading but did not close
                break
            sent += chunk
            await asyncio.sleep(0)  # let the reader see an answer (drain does not yield)
        if not answer.done() and sent >= give_up_after:
            answer.cancel()
            return Outcome(b"", closed=False, sent=sent, seconds=time.monotonic() - started)
        outcome = await answer
        return Outcome(outcome.answer, outcome.closed, sent, time.monotonic() - started)
    finally:
        answer.cancel()
        writer.close()


async def huge_body(target: Target, *, size: int, chunked: bool) -> Outcome:
    """Announce (``Content-Length``) or stream (chunked) a ``size``-byte body; stop when answered."""
    reader, writer = await connect(target)
    started = time.monotonic()
    answer = asyncio.create_task(read_until_closed(reader))
    sent = 0
    path = target.path.encode()
    try:
        if chunked:
            writer.write(b"POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" % path)
        else:
            writer.write(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (path, size))
        block = b"b" * 65536
        frame = b"%x\r\n%s\r\n" % (len(block), block) if chunked else block
        while sent < size and not answer.done():
            try:
                writer.write(frame)
                async with asyncio.timeout(DEADLINE):
                    await writer.drain()
            except (ConnectionResetError, BrokenPipeError, TimeoutError):
                break
            sent += len(block)
            await asyncio.sleep(0)  # let the reader see an answer (drain does not yield)
        outcome = await answer
        return Outcome(outcome.answer, outcome.closed, sent, time.monotonic() - started)
    finally:
        answer.cancel()
        writer.close()


async def pipelining_flood(target: Target, count: int) -> Outcome:
    """``count`` GETs in one write, the last asking to close; the answers are read."""
    requests = target.get() * (count - 1) + target.get(b"Connection: close\r\n")
    return await exchange(target, requests)


async def slowloris(target: Target, *, interval: float, give_up_after: float) -> Outcome:
    """A request head sent one byte per ``interval``, never finished: when does the server cut it?"""
    reader, writer = await connect(target)
    started = time.monotonic()
    sent = 0
    try:
        head = b"GET %s HTTP/1.1\r\nHost: %s\r\nX-Slow: " % (target.path.encode(), target.host.encode())
        writer.write(head)
        sent = len(head)
        while time.monotonic() - started < give_up_after:
            try:
                async with asyncio.timeout(interval):
                    outcome = await read_until_closed(reader, give_up_after)
                return Outcome(outcome.answer, True, sent, time.monotonic() - started)
            except TimeoutError:  # the server is still waiting: one more byte
                pass
            try:
                writer.write(b"s")
                await writer.drain()
            except (ConnectionResetError, BrokenPipeError):
                # The server answered and closed between the read above and this write: its answer
                # arrived before the reset and waits in the reader.
                outcome = await read_until_closed(reader, interval)
                return Outcome(outcome.answer, True, sent, time.monotonic() - started)
            sent += 1
        return Outcome(b"", False, sent, time.monotonic() - started)
    finally:
        writer.close()


async def never_reading(target: Target, *, request: bytes, give_up_after: float) -> Outcome:
    """Send ``request`` over and over and never read the answers: when does the server cut it?

    The client reads at most a few KiB into its own buffers, so the server's answers pile up on its
    side. Whether the connection is gone is seen by writing (a reset connection fails the write),
    never by reading.
    """
    reader, writer = await connect(target, receive_buffer=4096, limit=4096)
    started = time.monotonic()
    sent = 0
    try:
        while time.monotonic() - started < give_up_after:
            if writer.transport.is_closing() or reader.exception() is not None:
                return Outcome(b"", True, sent, time.monotonic() - started)
            try:
                if writer.transport.get_write_buffer_size() < 65536:
                    writer.write(request)
                    sent += len(request)
                async with asyncio.timeout(0.05):
                    await writer.drain()
            except (ConnectionResetError, BrokenPipeError):
                return Outcome(b"", True, sent, time.monotonic() - started)
            except TimeoutError:  # our send buffer is full: the server stopped reading
                pass
            await asyncio.sleep(0)  # drain does not yield while our buffer is short: let others run
        return Outcome(b"", False, sent, time.monotonic() - started)
    finally:
        writer.transport.abort()


@dataclass(slots=True)
class Held:
    """Connections an attack holds open."""

    connections: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]

    def closed(self) -> int:
        """How many the server has closed so far (seen as EOF or reset by our side)."""
        return sum(1 for reader, writer in self.connections if _gone(reader, writer))


def _gone(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    return reader.at_eof() or reader.exception() is not None or writer.transport.is_closing()


@asynccontextmanager
async def held_connections(target: Target, count: int, *, send: bytes = b"") -> AsyncIterator[Held]:
    """Open ``count`` connections, write ``send`` on each (e.g. half a request), hold them."""
    held = Held([])
    try:
        for _ in range(count):
            reader, writer = await connect(target)
            if send:
                writer.write(send)
            held.connections.append((reader, writer))
        yield held
    finally:
        for _, writer in held.connections:
            writer.transport.abort()
