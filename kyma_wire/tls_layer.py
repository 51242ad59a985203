"""Server-side TLS for the agent's HTTP server on ``ssl.MemoryBIO``: a small footprint per connection.

Why not ``loop.create_server(ssl=...)``: asyncio's ``SSLProtocol`` (CPython 3.11 ``sslproto.py``)
gives every connection its own 256 KiB read buffer (``max_size``, zero-filled, so resident at once)
plus its memory BIOs and a write backlog. The agent's webhook port keeps up to 1,000 connections
open (issue 26): 1,000 held TLS connections took the agent to 323 MiB with them held and 622 MiB
after reconnect churn (the freed 256 KiB blocks fragment the heap), past the pod's 200 Mi limit.

Here one object per connection is both the TCP protocol and the transport the HTTP protocol writes
to. Bytes arrive in ONE buffer shared by all connections of the server (``BufferedProtocol``: the
event loop reads into it and hands it on at once, before anything else runs), go into the
connection's incoming ``MemoryBIO``, and are decrypted a record at a time (``_RECORD``: TLS records
are at most 16 KiB) into the HTTP protocol's ``data_received``. What a connection keeps between
reads is OpenSSL's ``SSL`` object (Python sets ``SSL_MODE_RELEASE_BUFFERS``: its record buffers are
freed while idle) and two mostly empty BIOs.

The HTTP protocol sees the connection from the TCP accept on, so a handshake counts against the
connection cap like any other connection; the handshake itself must finish within
``handshake_timeout`` (else the connection is aborted and counted). A handshake step costs the
server ~0.25 ms of CPU (ECDHE and a signature), and reconnecting attackers bring them in bursts
(hundreds of held connections cut by the same timeout reconnect together): run in the callback that
read them, a burst held every admission on an established connection behind it (issue 26: p99 16 ms
under 1,000 held connections). So handshake steps wait in a queue (``Shared``) and run one per
event-loop iteration: between two of them the loop serves whatever else is ready, and an admission
on an established connection waits for at most one handshake step. With an executor (the server's
``Limits.handshake_thread``) the first step of each handshake, the costly one (the client's hello
answered with the key exchange and a signature), runs on that thread instead, one at a time:
OpenSSL releases the GIL while it computes, so the loop goes on serving admissions and the kernel,
not the loop's turn order, decides who gets the core (the agent under 1,000 reconnecting attackers,
pinned to one core: admission p99 3.3-5.3 ms against 3.5-6.2 ms in alternating runs,
``benchmarks/results/agent_hostile.md``). The thread only ever touches the connection's SSL object
and its two BIOs, and only while its step runs; bytes that arrive meanwhile wait in a buffer of
their own (at most ``_MAX_HANDSHAKE_BYTES``) and are handed to the SSL object when the step is back
on the loop. The later steps (the client's ``Finished``: a MAC check) stay on the loop, so a
client's first request, sent right behind its ``Finished``, is read as it arrives. The SSL object
itself is created at the first step, so a connection that never sends a byte costs none.
Renegotiation is off (a client could otherwise make the server redo expensive handshakes on one
connection) and no session tickets are issued (``num_tickets = 0``: the API server's webhook client
does not resume sessions, and each ticket costs the server an encryption per handshake); both are
set on the context by ``harden_server_context``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from kyma_wire.deadlines import Deadlines

__all__ = ["Shared", "TlsConnection", "harden_server_context"]

_RECORD = 16 * 1024
"""Bytes decrypted per ``SSLObject.read`` (the largest TLS record)."""
_SHARED_READ = 64 * 1024
"""The size of the server's shared receive buffer."""
_MAX_HANDSHAKE_BYTES = 64 * 1024
"""More bytes than this waiting before the handshake is done: not a TLS client (cut)."""


def harden_server_context(context: ssl.SSLContext) -> None:
    """No renegotiation, no session tickets (see the module docstring)."""
    context.options |= ssl.OP_NO_RENEGOTIATION
    context.num_tickets = 0


_WANT_READ = object()
"""A handshake step's outcome: the step is done, the handshake needs the client's next bytes."""


def _handshake_step(sslobj: ssl.SSLObject) -> object:
    """Run on the handshake thread: one ``do_handshake`` (OpenSSL runs it without the GIL)."""
    try:
        sslobj.do_handshake()
    except ssl.SSLWantReadError:
        return _WANT_READ
    except (ssl.SSLError, ssl.CertificateError, ValueError) as exc:
        return exc
    return None


def _outcome(done: Future[object]) -> object:
    """A finished step's outcome; a step that could not run (its executor shut down) failed."""
    if done.cancelled():
        return ssl.SSLError("the handshake thread has stopped")
    error = done.exception()
    return error if error is not None else done.result()


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[object], None], outcome: object) -> None:
    """From the handshake thread: hand a step's outcome to the loop (gone if the loop has closed)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, outcome)


class Shared:
    """What all connections of one server (one event loop) share: the receive buffer they read into
    in turn, the queues of handshakes waiting for their next step and, if set, the handshake thread."""

    def __init__(
        self, deadlines: Deadlines, size: int = _SHARED_READ, *, executor: Executor | None = None
    ) -> None:
        self.deadlines = deadlines
        """The server's deadlines (the handshakes' are among them)."""
        self.view = memoryview(bytearray(size))
        self._first: dict[TlsConnection, None] = {}
        """Connections whose first handshake step (the client's hello) waits."""
        self._later: dict[TlsConnection, None] = {}
        """Connections whose next handshake step waits (the client's ``Finished``: cheap)."""
        self._scheduled = False
        self._executor = executor
        """Runs first handshake steps off the loop thread, one at a time (``None``: on the loop)."""
        self.in_flight: TlsConnection | None = None
        """The connection whose first step runs on the handshake thread now."""

    def handshake_later(self, connection: TlsConnection, *, first: bool) -> None:
        """Queue ``connection``'s next handshake step (its bytes have arrived)."""
        (self._first if first else self._later)[connection] = None
        self._schedule()

    def forget(self, connection: TlsConnection) -> None:
        self._first.pop(connection, None)
        self._later.pop(connection, None)

    def _runnable(self) -> bool:
        return bool(self._later) or (bool(self._first) and self.in_flight is None)

    def _schedule(self) -> None:
        if not self._scheduled and self._runnable():
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._step)

    def _step(self) -> None:
        """One handshake step on the loop per iteration, then what the loop has ready (see the module);
        with a handshake thread, a first step goes there whenever it is free."""
        self._scheduled = False
        executor = self._executor
        if executor is not None and self._first and self.in_flight is None:
            connection = next(iter(self._first))
            del self._first[connection]
            if connection.advance_handshake(executor):
                self.in_flight = connection
            self._schedule()
            return
        queue = self._later or (self._first if executor is None else None)
        if not queue:
            return
        connection = next(iter(queue))
        del queue[connection]
        self._schedule()
        connection.advance_handshake(None)

    def step_done(self, connection: TlsConnection) -> None:
        """The handshake thread finished ``connection``'s step: it is free for the next one."""
        if self.in_flight is connection:
            self.in_flight = None
        self._schedule()


class TlsConnection(asyncio.BufferedProtocol, asyncio.Transport):
    """The TCP protocol of one TLS connection and the transport of its HTTP protocol ``app``."""

    __slots__ = (
        "_app",
        "_closing",
        "_context",
        "_handshake_timeout",
        "_handshaken",
        "_incoming",
        "_on_handshake_timeout",
        "_outgoing",
        "_paused",
        "_pending",
        "_shared",
        "_spoken",
        "_ssl",
        "_tcp",
        "bucket",
        "deadline",
    )

    def __init__(
        self,
        context: ssl.SSLContext,
        app: asyncio.Protocol,
        shared: Shared,
        *,
        handshake_timeout: float,
        on_handshake_timeout: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self._context = context
        self._app = app
        self._shared = shared
        self._handshake_timeout = handshake_timeout
        self._on_handshake_timeout = on_handshake_timeout
        self._tcp: asyncio.Transport | None = None
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl: ssl.SSLObject | None = None
        self._handshaken = False
        self._closing = False
        self._paused = False
        """The app paused reading: decrypted data waits in the SSL object."""
        self._spoken = False
        """The server has sent handshake bytes: the client's hello (the costly step) was answered."""
        self._pending: bytearray | None = None
        """Bytes that arrived while a handshake step ran on the handshake thread (the BIO is its)."""
        self.deadline: float | None = None
        self.bucket: int | None = None

    # --- the TCP side (asyncio.BufferedProtocol) -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._tcp = transport  # type: ignore[assignment]
        self._shared.deadlines.set(self, self._handshake_timeout)
        self._app.connection_made(self)  # counts against the cap from now on (or is refused)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._shared.view

    def buffer_updated(self, nbytes: int) -> None:
        if self._closing:
            return
        if self._shared.in_flight is self:
            pending = self._pending
            if pending is None:
                pending = self._pending = bytearray()
            pending += self._shared.view[:nbytes]
            if len(pending) > _MAX_HANDSHAKE_BYTES:
                self._fail()
            return
        self._incoming.write(self._shared.view[:nbytes])
        if self._handshaken:
            self._deliver()
        elif self._incoming.pending > _MAX_HANDSHAKE_BYTES:
            self._fail()
        else:
            self._shared.handshake_later(self, first=not self._spoken)

    def eof_received(self) -> bool | None:
        if self._handshaken and not self._closing:
            return self._app.eof_received()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._cancel_timer()
        self._shared.forget(self)
        self._ssl = None
        self._app.connection_lost(exc)

    def pause_writing(self) -> None:
        self._app.pause_writing()

    def resume_writing(self) -> None:
        self._app.resume_writing()

    # --- TLS ------------------------------------------------------------------------------------------------

    def advance_handshake(self, executor: Executor | None) -> bool:
        """The next handshake step (queued by ``Shared``); once done, what arrived with it is read.
        With ``executor``, the step runs there and ``_step_done`` finishes it: True."""
        if self._closing:
            return False
        if self._ssl is None:  # created on the first bytes: a silent connection costs no SSL object
            self._ssl = self._context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        if executor is not None:
            loop = asyncio.get_running_loop()
            future = executor.submit(_handshake_step, self._ssl)
            future.add_done_callback(lambda done: _call_soon(loop, self._step_done, _outcome(done)))
            return True
        if self._handshake():
            self._deliver()
        return False

    def _step_done(self, outcome: object) -> None:
        """Back on the loop thread after the first step ran on the handshake thread."""
        self._shared.step_done(self)
        pending, self._pending = self._pending, None
        if self._closing:
            return
        if pending:
            self._incoming.write(pending)
        if outcome is _WANT_READ:
            self._flush()
            if pending:
                self._shared.handshake_later(self, first=not self._spoken)
            return
        if outcome is not None:
            self._flush()  # the alert, if any
            self._refuse()
            return
        self._handshaken = True
        self._cancel_timer()
        self._flush()
        self._deliver()

    def _handshake(self) -> bool:
        """Advance the handshake; True once it is done."""
        assert self._ssl is not None
        try:
            self._ssl.do_handshake()
        except ssl.SSLWantReadError:
            self._flush()
            return False
        except (ssl.SSLError, ssl.CertificateError, ValueError):
            self._flush()  # the alert, if any
            self._refuse()
            return False
        self._handshaken = True
        self._cancel_timer()
        self._flush()
        return True

    def _refuse(self) -> None:
        """A failed handshake: close after the alert."""
        self._closing = True
        self._cancel_timer()
        self._shared.forget(self)
        if self._tcp is not None:
            self._tcp.close()

    def expired(self) -> None:
        """The handshake did not finish in time (called by ``Deadlines``)."""
        if not self._handshaken and not self._closing:
            if self._on_handshake_timeout is not None:
                self._on_handshake_timeout()
            self._fail()

    def _deliver(self) -> None:
        """Decrypt what has arrived into the app, a record at a time, until it pauses or closes."""
        sslobj = self._ssl
        while sslobj is not None and not self._closing and not self._paused:
            try:
                data = sslobj.read(_RECORD)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:  # the client's close_notify
                data = b""
            except ssl.SSLError:
                self._fail()
                return
            if not data:
                self._flush()
                if self._app.eof_received() is not True:
                    self.close()
                return
            self._app.data_received(data)
            sslobj = self._ssl
        self._flush()

    def _flush(self) -> None:
        if self._outgoing.pending and self._tcp is not None:
            self._spoken = True
            data = self._outgoing.read()
            if not self._tcp.is_closing():
                self._tcp.write(data)

    def _fail(self) -> None:
        self._closing = True
        self._cancel_timer()
        self._shared.forget(self)
        if self._tcp is not None:
            self._tcp.abort()

    def _cancel_timer(self) -> None:
        self._shared.deadlines.clear(self)

    # --- the app side (asyncio.Transport) -------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or self._ssl is None or not self._handshaken:
            return
        try:
            self._ssl.write(data)
        except ssl.SSLError:
            self._fail()
            return
        self._flush()

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def can_write_eof(self) -> bool:
        return False

    def close(self) -> None:
        """Send close_notify after what is written, then close the TCP connection once flushed."""
        if self._closing:
            return
        self._closing = True
        self._cancel_timer()
        self._shared.forget(self)
        if self._ssl is not None and self._handshaken:
            with contextlib.suppress(ssl.SSLError, ValueError):  # the client's close_notify has not come
                self._ssl.unwrap()
            self._flush()
        if self._tcp is not None:
            self._tcp.close()

    def abort(self) -> None:
        self._closing = True
        self._cancel_timer()
        self._shared.forget(self)
        if self._tcp is not None:
            self._tcp.abort()

    def is_closing(self) -> bool:
        return self._closing or self._tcp is None or self._tcp.is_closing()

    def pause_reading(self) -> None:
        self._paused = True
        if self._tcp is not None:
            self._tcp.pause_reading()

    def resume_reading(self) -> None:
        if not self._paused:
            return
        self._paused = False
        if self._tcp is not None and not self._closing:
            self._tcp.resume_reading()
            asyncio.get_running_loop().call_soon(self._resume)

    def _resume(self) -> None:
        if self._handshaken and not self._closing:
            self._deliver()  # records that arrived before the pause

    def is_reading(self) -> bool:
        return not self._paused and not self._closing

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if self._tcp is not None:
            self._tcp.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._tcp.get_write_buffer_size() if self._tcp is not None else 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return self._ssl
        if name == "peercert":
            return self._ssl.getpeercert() if self._ssl is not None else default
        if self._tcp is None:
            return default
        return self._tcp.get_extra_info(name, default)
