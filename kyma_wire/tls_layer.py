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
on an established connection waits for at most one handshake step. The SSL object itself is created
at the first step, so a connection that never sends a byte costs none. Renegotiation is off (a client
could otherwise make the server redo expensive handshakes on one connection) and no session tickets
are issued (``num_tickets = 0``: the API server's webhook client does not resume sessions, and each
ticket costs the server an encryption per handshake); both are set on the context by
``harden_server_context``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
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


class Shared:
    """What all connections of one server (one event loop) share: the receive buffer they read into
    in turn, and the queue of handshakes waiting for their next step."""

    def __init__(self, deadlines: Deadlines, size: int = _SHARED_READ) -> None:
        self.deadlines = deadlines
        """The server's deadlines (the handshakes' are among them)."""
        self.view = memoryview(bytearray(size))
        self._handshakes: dict[TlsConnection, None] = {}
        self._scheduled = False

    def handshake_later(self, connection: TlsConnection) -> None:
        """Queue ``connection``'s next handshake step (its bytes have arrived)."""
        self._handshakes[connection] = None
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._step)

    def forget(self, connection: TlsConnection) -> None:
        self._handshakes.pop(connection, None)

    def _step(self) -> None:
        """One handshake step per event-loop iteration, then what the loop has ready (see the module)."""
        self._scheduled = False
        if not self._handshakes:
            return
        connection = next(iter(self._handshakes))
        del self._handshakes[connection]
        if self._handshakes:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._step)
        connection.advance_handshake()


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
        "_shared",
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
        self._incoming.write(self._shared.view[:nbytes])
        if self._handshaken:
            self._deliver()
        elif self._incoming.pending > _MAX_HANDSHAKE_BYTES:
            self._fail()
        else:
            self._shared.handshake_later(self)

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

    def advance_handshake(self) -> None:
        """The next handshake step (queued by ``Shared``); once done, what arrived with it is read."""
        if self._closing:
            return
        if self._ssl is None:  # created on the first bytes: a silent connection costs no SSL object
            self._ssl = self._context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        if self._handshake():
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
