"""Runs the listener application on one HTTP server, as a runnable the operator Manager starts.

Why: upstream's listener is a controller-runtime ``Runnable`` that only the leader runs; ours is
the same shape (``async run()`` until cancelled, ``async shutdown()``) so the Manager can start it
when it becomes leader and stop it when it loses the Lease or the process ends. Details:

* by default (``ListenerConfig.server = "direct"``) ``kcp_listener.direct_server``: the agent's
  server, ``kyma_wire.http_server``, event routes answered without a task per request, the same
  limits and deadlines;
* with ``server = "uvicorn"``, one ``embedded_server.EmbeddedServer`` (uvicorn with ``httptools``,
  bounded request headers, ``header_limits``, and deadlines on header and body reads, idle
  connections and stalled writes, ``connection_limits``; uvloop when the process runs on a uvloop
  loop, as ``python -m kyma_operator.listener`` does), no access log, no lifespan;
* no signal handlers of its own (the process owner handles them);
* the socket is bound there, so ``port=0`` works in tests and ``port`` tells the bound port;
* ``accepting`` turns False as soon as shutdown begins: the intake answers 503 while in-flight
  requests finish within ``graceful_seconds``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from embedded_server import EmbeddedServer
from kcp_listener.config import ListenerConfig, ServerKind
from kcp_listener.connection_limits import ConnectionWatch, keep_alive_of, limited_protocol, timeouts_of
from kcp_listener.direct_server import DirectServer

__all__ = ["ListenerServer"]

log = logging.getLogger(__name__)


class ListenerServer:
    def __init__(
        self,
        config: ListenerConfig,
        app: Any = None,
        *,
        graceful_seconds: float = 5.0,
        on_rejected: Callable[[str], None] | None = None,
    ) -> None:
        """``on_rejected``: called with the reason of every connection the server itself refuses or
        closes (malformed, header-too-large, header/body/idle/write-timeout); see ``connection_limits``."""
        self.config = config
        self.connections = ConnectionWatch(timeouts_of(config), on_rejected)
        self.app = app
        self.graceful_seconds = graceful_seconds
        self._accepting = False
        self._server: EmbeddedServer | DirectServer | None = None
        self._started = asyncio.Event()

    @property
    def accepting(self) -> bool:
        """True while serving and not shutting down (feed this into the intake's ``serving``)."""
        return self._accepting

    @property
    def port(self) -> int:
        if self._server is None or self._server.port is None:
            raise RuntimeError("the listener server is not running")
        return self._server.port

    @property
    def url(self) -> str:
        host = self.config.host if self.config.host not in ("0.0.0.0", "::") else "127.0.0.1"
        return f"http://{host}:{self.port}"

    @property
    def open_connections(self) -> int:
        """Client connections open now."""
        server = self._server
        if isinstance(server, DirectServer):
            return server.open_connections
        return len(self.connections)

    @property
    def receiving_connections(self) -> int | None:
        """Client connections in the middle of a request now; None on the uvicorn server, which
        does not tell."""
        server = self._server
        return server.receiving_connections if isinstance(server, DirectServer) else None

    async def wait_started(self) -> None:
        await self._started.wait()

    async def run(self) -> None:
        """Serve until cancelled (then shut down gracefully) or until :meth:`shutdown`."""
        if self.app is None:
            raise RuntimeError("ListenerServer.app is not set")
        if self._server is not None and self._server.serving:
            raise RuntimeError("the listener server is already running")
        config = self.config
        server: EmbeddedServer | DirectServer
        if config.server is ServerKind.DIRECT:
            server = DirectServer(self.app, config, self.connections, graceful_seconds=self.graceful_seconds)
        else:
            server = EmbeddedServer(
                self.app,
                host=self.config.host,
                port=self.config.port,
                name="kcp-listener-http",
                http=limited_protocol(config.max_header_bytes, config.max_header_count, self.connections),
                keep_alive=keep_alive_of(self.connections.timeouts),
                graceful_seconds=self.graceful_seconds,
            )
        self._server = server
        self._started.clear()
        await server.start()
        self._started.set()
        log.info("kcp listener serving on %s:%d (%s)", self.config.host, self.port, self.config.auth_mode)
        self._accepting = True
        try:
            await asyncio.shield(server.task)
        except asyncio.CancelledError:
            self._accepting = False
            await server.stop()
            raise
        finally:
            self._accepting = False
            self.connections.close()

    async def shutdown(self) -> None:
        """Stop accepting events (503), let in-flight requests finish, close the socket."""
        self._accepting = False
        if self._server is not None:
            await self._server.stop()
