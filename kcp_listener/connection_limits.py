"""Deadlines on the listener's connections: header read, body read, idle keep-alive, stalled writes.

Why: uvicorn only closes a keep-alive connection that stays idle after a response. A connection
that sends nothing, sends its headers a byte at a time (slowloris), stops in the middle of its body,
or never reads its answers is kept for ever: 300 such connections were held for 70 s and none was
closed (upstream's Go listener closes them after 60 s). Each costs a socket, buffers and a slot
the gateway could give to an agent. The limits, all at most 60 s (``ListenerConfig``):

* header read (``header_timeout``): from the connection's start, or from the first byte of a
  keep-alive connection's next request, until the header section is complete;
* body read (``body_timeout``): from the end of the headers to the end of the body, while the
  server is reading (a pipelined request waiting for its turn is not the client's fault);
* idle (``idle_timeout``): from a response to the first byte of the next request;
* write (``write_timeout``): while the socket's send buffer stays full (a client that never reads).

A connection past its deadline is closed (aborted when its writes are stalled: nothing more would
be delivered); nothing reaches the application for it. Each is counted by reason through
``on_rejected`` (the listener's metric ``kcp_listener_connections_refused``) and logged at most once
per reason every few seconds (``kyma_wire.log_limit``).

How, cheaply: the request path only stores a deadline (one ``loop.time()`` per phase: request
start, headers complete, response complete); one sweeper task per server visits the open
connections a few times per shortest timeout and closes the late ones. No timer per request or
connection is created or cancelled. The sweeper runs while the server has connections and ends
with the last one, so no lifecycle has to be managed (``ConnectionWatch.close`` stops it at once).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from kcp_listener.config import ListenerConfig
from kcp_listener.header_limits import BoundedHeadersProtocol
from kcp_listener.one_write import OneWriteCycle

__all__ = ["ConnectionTimeouts", "ConnectionWatch", "LimitedProtocol", "limited_protocol", "timeouts_of"]

HEADER_TIMEOUT = "header-timeout"
BODY_TIMEOUT = "body-timeout"
IDLE_TIMEOUT = "idle-timeout"
WRITE_TIMEOUT = "write-timeout"

_NEVER = math.inf


@dataclass(frozen=True, slots=True)
class ConnectionTimeouts:
    header: float = 10.0
    body: float = 30.0
    idle: float = 60.0
    write: float = 30.0

    def __post_init__(self) -> None:
        for name in ("header", "body", "idle", "write"):
            if not getattr(self, name) > 0:
                raise ValueError(f"the {name} timeout must be positive")

    @property
    def sweep_interval(self) -> float:
        """How often the sweeper looks: a connection is closed at most this much after its deadline."""
        return min(1.0, max(0.01, min(self.header, self.body, self.idle, self.write) / 8))


class ConnectionWatch:
    """The open connections of one server and the task that closes those past their deadline."""

    def __init__(
        self, timeouts: ConnectionTimeouts, on_rejected: Callable[[str], None] | None = None
    ) -> None:
        self.timeouts = timeouts
        self.on_rejected = on_rejected
        self.closed: dict[str, int] = {}
        """Connections closed per reason (also passed to ``on_rejected``)."""
        self._connections: set[LimitedProtocol] = set()
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._connections)

    def add(self, connection: LimitedProtocol) -> None:
        self._connections.add(connection)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._sweep(), name="connection-deadlines")

    def discard(self, connection: LimitedProtocol) -> None:
        self._connections.discard(connection)

    def count(self, reason: str) -> None:
        self.closed[reason] = self.closed.get(reason, 0) + 1
        if self.on_rejected is not None:
            self.on_rejected(reason)

    def close(self) -> None:
        """Stop the sweeper (the server has stopped; a new connection would start it again)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()

    def sweep(self, now: float) -> None:
        """Close every connection past its deadline at loop time ``now``."""
        for connection in [c for c in self._connections if c.deadline <= now]:
            reason = connection.expired(now)
            if reason is not None:
                self._connections.discard(connection)
                self.count(reason)
                connection.time_out(reason)

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.timeouts.sweep_interval
        try:
            while self._connections:
                await asyncio.sleep(interval)
                self.sweep(loop.time())
        finally:
            if self._task is asyncio.current_task():
                self._task = None


class LimitedProtocol(BoundedHeadersProtocol):
    """``BoundedHeadersProtocol`` plus the connection deadlines (see :func:`limited_protocol`)."""

    watch: ConnectionWatch

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadline = _NEVER
        """Loop time of the earliest deadline (read or write); the sweeper checks it first."""
        self._read_deadline = _NEVER
        self._read_reason = HEADER_TIMEOUT
        self._write_deadline = _NEVER

    def _read(self, seconds: float, reason: str) -> None:
        self._read_reason = reason
        self._read_deadline = at = self.loop.time() + seconds
        self.deadline = min(at, self._write_deadline)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._read(self.watch.timeouts.header, HEADER_TIMEOUT)
        self.watch.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.watch.discard(self)
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._read_reason is not HEADER_TIMEOUT:  # from idle: the header clock starts now
            self._read(self.watch.timeouts.header, HEADER_TIMEOUT)

    def on_headers_complete(self) -> None:
        self._read(self.watch.timeouts.body, BODY_TIMEOUT)
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and type(cycle) is RequestResponseCycle:
            cycle.__class__ = OneWriteCycle  # head and body in one write (``one_write``)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._read_reason = ""
        self._read_deadline = _NEVER
        self.deadline = self._write_deadline

    def on_response_complete(self) -> None:
        super().on_response_complete()
        cycle = self.cycle
        if not self._in_headers and (cycle is None or cycle.response_complete):
            self._read(self.watch.timeouts.idle, IDLE_TIMEOUT)

    def pause_writing(self) -> None:
        super().pause_writing()
        self._write_deadline = self.loop.time() + self.watch.timeouts.write
        self.deadline = min(self._read_deadline, self._write_deadline)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._write_deadline = _NEVER
        self.deadline = self._read_deadline

    def expired(self, now: float) -> str | None:
        """The reason this connection is past a deadline at ``now``, or None."""
        if self._write_deadline <= now:
            return WRITE_TIMEOUT
        if self._read_deadline <= now:
            flow = self.flow
            if flow is not None and flow.read_paused:  # we stopped reading (pipelining): not late
                self._read_deadline = now + self.watch.timeouts.body
                self.deadline = min(self._read_deadline, self._write_deadline)
                return None
            return self._read_reason
        return None

    def time_out(self, reason: str) -> None:
        self.rejected(reason)
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if reason == WRITE_TIMEOUT:
            transport.abort()  # its buffers would never drain
        else:
            transport.close()

    def rejected(self, reason: str) -> None:
        super().rejected(reason)
        if reason not in _TIMEOUTS:  # timeouts are counted by the watch
            self.watch.count(reason)


_TIMEOUTS = frozenset({HEADER_TIMEOUT, BODY_TIMEOUT, IDLE_TIMEOUT, WRITE_TIMEOUT})


def limited_protocol(
    max_header_bytes: int, max_header_count: int, watch: ConnectionWatch
) -> type[LimitedProtocol]:
    """A protocol class with these header limits and deadlines (uvicorn instantiates it per connection)."""
    return type(
        "ListenerHttpProtocol",
        (LimitedProtocol,),
        {"max_header_bytes": max_header_bytes, "max_header_count": max_header_count, "watch": watch},
    )


def timeouts_of(config: ListenerConfig) -> ConnectionTimeouts:
    return ConnectionTimeouts(
        header=config.header_timeout_seconds,
        body=config.body_timeout_seconds,
        idle=config.idle_timeout_seconds,
        write=config.write_timeout_seconds,
    )


def keep_alive_of(timeouts: ConnectionTimeouts) -> int:
    """uvicorn's own keep-alive timer (whole seconds): never shorter than ours, which decides."""
    return max(1, math.ceil(timeouts.idle))
