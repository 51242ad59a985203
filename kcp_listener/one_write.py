"""One socket write per response: the status line and headers go out with the body.

Why: uvicorn's ``RequestResponseCycle.send`` writes the status line and headers to the transport
on ``http.response.start`` and the body on ``http.response.body``: two ``send()`` system calls
(and, on a loopback or a gateway connection, two segments) for every response. The listener's
answers are a few dozen bytes each; in the xfcc benchmark those two writes were about a third of
the server's CPU samples (py-spy, ``benchmarks/results/listener.md``), where Go's ``net/http``
buffers a response and writes it once.

How: :class:`OneWriteCycle` lets uvicorn build and check the head exactly as before (the same
code, with the transport's ``write`` captured), holds the bytes, and hands them to the transport
together with the first body chunk: same bytes on the wire, in the same order, one write. Nothing
is held when the start cannot be written at once (the socket is paused or gone): then uvicorn's
own path runs. A head is held at most until the application's next message; an application that
starts a response and then waits before its first body chunk (a long stream) would delay its head
by that much: the listener has no such route (every answer is one complete body).
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

__all__ = ["OneWriteCycle"]


class _Capture:
    """Stands in for the transport while uvicorn writes a response head: keeps the bytes."""

    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data


class _Prefixed:
    """The real transport, with ``head`` put in front of the first write (or written before a close)."""

    __slots__ = ("_head", "transport")

    def __init__(self, transport: Any, head: bytes) -> None:
        self.transport = transport
        self._head: bytes | None = head

    def write(self, data: bytes) -> None:
        head, self._head = self._head, None
        self.transport.write(head + data if head is not None else data)

    def flush(self) -> None:
        """Write the head if no body write took it (HEAD request, refused body message)."""
        head, self._head = self._head, None
        if head is not None:
            self.transport.write(head)

    def close(self) -> None:
        """As uvicorn's close after a response or a failing application: the head goes out first."""
        self.flush()
        self.transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


class OneWriteCycle(RequestResponseCycle):
    """uvicorn's request/response cycle with the response head written together with the body.

    Installed by the listener's protocol on each cycle it creates (``cycle.__class__``), so
    uvicorn's constructor and its ``run_asgi`` stay untouched. Between the start and the first
    body message the cycle's transport is a :class:`_Prefixed` holding the head; a close in that
    time (uvicorn's answer to an application failing after its start) writes the head first.
    """

    async def send(self, message: Any) -> None:
        held = self.transport
        if isinstance(held, _Prefixed):
            try:
                await super().send(message)
            finally:
                self.transport = held.transport
                if not self.disconnected:
                    held.flush()
            return
        if message["type"] != "http.response.start" or self.response_started:
            await super().send(message)
            return
        if self.flow.write_paused or self.disconnected:
            await super().send(message)  # uvicorn's path: waits for the socket, or drops it
            return
        capture = self.transport = _Capture()  # type: ignore[assignment]
        try:
            await super().send(message)  # no await inside: the socket is writable
        finally:
            self.transport = held
        if capture.data:
            self.transport = _Prefixed(held, capture.data)  # type: ignore[assignment]
