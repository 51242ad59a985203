"""One uvicorn server embedded in a process that owns the event loop and the signals.

Why one helper: the agent (admissions and metrics), the listener and the operator's health and
metrics endpoints all run uvicorn inside their own asyncio process. Each needs the same things,
and each hand-rolled copy got one of them wrong at some point: no signal handlers of uvicorn's own
(the process decides when to stop), the socket bound by us (``port=0`` works, the bound port is
known before serving, a bind error names the address), "started" as an event, a graceful stop with
a deadline, and the socket closed only after uvicorn has finished with it (closing it earlier made
uvicorn's shutdown fail on fd -1).

Used by ``kcp_listener.server`` and ``kyma_operator.runtime.manager``. (The agent used it until
issue 18; it now serves with ``kyma_wire.http_server``, without uvicorn, for memory.)
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Iterable, Iterator
from typing import Any

import uvicorn

from kyma_wire.sockets import bind

__all__ = ["EmbeddedServer", "bind"]


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the embedding process owns the signals

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.listening.set()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's shutdown, then the connections it left open closed.

        uvicorn stops waiting for connections when its graceful timeout passes or ``force_exit`` is
        set, and returns with their transports still open: a request in flight at that moment kept
        its socket until the garbage collector found it ("unclosed transport" at a random later
        point, once a failed test). Aborting them here ends each one where it is.
        """
        await super().shutdown(sockets)
        left = abort_connections(self.server_state.connections)
        if left:
            await asyncio.sleep(0)  # their connection_lost runs, which releases the sockets


def abort_connections(connections: Iterable[asyncio.Protocol]) -> int:
    """Abort the transport of every connection still open; how many there were."""
    count = 0
    for connection in list(connections):
        transport = getattr(connection, "transport", None)
        if isinstance(transport, asyncio.BaseTransport) and not transport.is_closing():
            if isinstance(transport, asyncio.WriteTransport):
                transport.abort()
            else:
                transport.close()
            count += 1
    return count


class EmbeddedServer:
    """``await start()`` binds and serves; ``await stop()`` ends it gracefully; see the module docstring."""

    def __init__(
        self,
        app: Any,
        *,
        host: str,
        port: int,
        name: str,
        http: Any = "httptools",
        ssl_context: ssl.SSLContext | None = None,
        keep_alive: int = 5,
        graceful_seconds: float = 2.0,
    ) -> None:
        self.host = host
        self.requested_port = port
        self.name = name
        self.graceful_seconds = graceful_seconds
        factory = (lambda _config, _default: ssl_context) if ssl_context is not None else None
        self._config = uvicorn.Config(
            app,
            http=http,
            lifespan="off",
            access_log=False,
            log_config=None,
            server_header=False,
            timeout_graceful_shutdown=max(1, round(graceful_seconds)),
            timeout_keep_alive=keep_alive,
            ssl_context_factory=factory,
        )
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.port: int | None = None
        """The bound port (after ``start``)."""

    @property
    def task(self) -> asyncio.Task[None]:
        """uvicorn's serving task (done when the server stopped or failed)."""
        if self._task is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._task

    @property
    def serving(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        """Bind, serve, and return once accepting connections (raises if uvicorn fails to start)."""
        if self._task is not None:
            raise RuntimeError(f"{self.name} is already started")
        sock = bind(self.host, self.requested_port)
        self.port = sock.getsockname()[1]
        server = self._server = _Server(self._config)
        task = self._task = asyncio.create_task(server.serve(sockets=[sock]), name=self.name)
        task.add_done_callback(lambda _: sock.close())  # only after uvicorn is done with it
        listening = asyncio.create_task(server.listening.wait())
        try:
            await asyncio.wait({listening, task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            listening.cancel()
        if not server.listening.is_set():
            task.result()  # raises uvicorn's start-up error
            raise RuntimeError(f"{self.name} exited during start-up")

    def request_stop(self) -> None:
        """Stop accepting and finish in-flight requests (``stop`` waits for it)."""
        if self._server is not None:
            self._server.should_exit = True

    async def stop(self) -> None:
        """Graceful stop within ``graceful_seconds`` (+5 s), then forced; safe to call repeatedly."""
        server, task = self._server, self._task
        if server is None or task is None:
            return
        server.should_exit = True
        try:
            async with asyncio.timeout(self.graceful_seconds + 5):
                await asyncio.shield(task)
        except TimeoutError:
            server.force_exit = True
            await asyncio.gather(task, return_exceptions=True)
        except Exception:  # uvicorn failed while serving: it is stopped either way
            pass
