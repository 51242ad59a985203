"""Runs the listener application on one uvicorn server, as a runnable the operator Manager starts.

Why: upstream's listener is a controller-runtime ``Runnable`` that only the leader runs; ours is
the same shape (``async run()`` until cancelled, ``async shutdown()``) so the Manager can start it
when it becomes leader and stop it when it loses the Lease or the process ends. Details:

* one uvicorn server with ``httptools`` (and uvloop when the process runs on a uvloop loop, as
  ``python -m kcp_listener`` does), no access log, no lifespan, no signal handlers of its own
  (the process owner handles signals);
* the socket is bound here, so ``port=0`` works in tests and ``port`` tells the bound port;
* ``accepting`` turns False as soon as shutdown begins: the intake answers 503 while in-flight
  requests finish within ``graceful_seconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn

from kcp_listener.config import ListenerConfig
from kcp_listener.header_limits import bounded_headers_protocol

__all__ = ["ListenerServer"]

log = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, started: asyncio.Event) -> None:
        super().__init__(config)
        self._started_event = started

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self._started_event.set()


class ListenerServer:
    def __init__(self, config: ListenerConfig, app: Any = None, *, graceful_seconds: float = 5.0) -> None:
        self.config = config
        self.app = app
        self.graceful_seconds = graceful_seconds
        self._accepting = False
        self._port: int | None = None
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._started = asyncio.Event()

    @property
    def accepting(self) -> bool:
        """True while serving and not shutting down (feed this into the intake's ``serving``)."""
        return self._accepting

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the listener server is not running")
        return self._port

    @property
    def url(self) -> str:
        host = self.config.host if self.config.host not in ("0.0.0.0", "::") else "127.0.0.1"
        return f"http://{host}:{self.port}"

    async def wait_started(self) -> None:
        await self._started.wait()

    def _bind(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.config.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.config.host, self.config.port))
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        return sock

    async def run(self) -> None:
        """Serve until cancelled (then shut down gracefully) or until :meth:`shutdown`."""
        if self.app is None:
            raise RuntimeError("ListenerServer.app is not set")
        if self._task is not None:
            raise RuntimeError("the listener server is already running")
        sock = self._bind()
        self._port = sock.getsockname()[1]
        uv_config = uvicorn.Config(
            self.app,
            http=bounded_headers_protocol(self.config.max_header_bytes, self.config.max_header_count),
            lifespan="off",
            access_log=False,
            log_config=None,
            timeout_graceful_shutdown=max(1, round(self.graceful_seconds)),
            timeout_keep_alive=60,
            server_header=False,
        )
        self._started.clear()
        server = self._server = _Server(uv_config, self._started)
        task = self._task = asyncio.create_task(server.serve(sockets=[sock]), name="kcp-listener-http")
        # The socket goes only after uvicorn's own shutdown has finished with it, however often this
        # coroutine is cancelled (closing it earlier made uvicorn fail on fd -1 during teardown).
        task.add_done_callback(lambda _: sock.close())
        log.info("kcp listener serving on %s:%d (%s)", self.config.host, self._port, self.config.auth_mode)
        self._accepting = True
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            await self.shutdown()
            raise
        finally:
            self._accepting = False
            if task.done():
                self._task = None
                self._server = None
            else:  # cancelled again while shutting down: uvicorn finishes in the background
                server.should_exit = True

    async def shutdown(self) -> None:
        """Stop accepting events (503), let in-flight requests finish, close the socket."""
        self._accepting = False
        server, task = self._server, self._task
        if server is None or task is None:
            return
        server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(task), self.graceful_seconds + 5)
        except TimeoutError:
            server.force_exit = True
            await task
