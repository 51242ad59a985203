"""The listener served by ``kyma_wire.http_server``: event routes answered inside the parser callbacks.

Why: in xfcc mode the listener's CPU per event was set by uvicorn's per-request machinery, not by
the listener's own logic (``benchmarks/results/listener.md``: py-spy put uvicorn's task, scope and
ASGI message dicts and its writes ahead of the intake; Go's listener served an event in 50-90 us
of CPU, ours in 55-113 us). The agent's server (now ``kyma_wire.http_server``) answers a request in
``data_received`` with no task at all, and already enforces what the listener needs: header bytes
counted as they arrive (431), header/body/idle/write timeouts, a connection cap that sheds idle
and slow connections first, pipelining in order, one write per answer.

What runs where (``ListenerConfig.server = "direct"``):

* ``POST /v2/<manager>/event|events|heartbeat``: :class:`DirectHandler` calls the same
  ``EventIntake.process`` as ``app.FastPath`` (same checks, replies, metrics) synchronously and
  returns the answer; only an event handed to another replica (``handoff``) is awaited, as a task;
* everything else (``/metrics``, ``/readyz``, OpenAPI, docs, unknown paths) goes to the same
  FastAPI application through a minimal ASGI call (one task per such request: they are rare);
* connection refusals and timeouts are counted by ``on_rejected`` with the listener's reasons
  (``header-too-large``, ``malformed``, ``header-timeout``, ``body-timeout``, ``idle-timeout``,
  ``write-timeout``, ``shed``, ``refused``, ``not-reading``); refusals are answered with the
  listener's JSON error bodies.

The default server (``--listener-server uvicorn``, or ``--server uvicorn`` standalone, selects
uvicorn). Differences from the uvicorn server: a body over the route's limit is answered 413 and
the connection closed (the rest is never read); malformed requests get a JSON 400 instead of
uvicorn's text; a connection that times out is closed without an answer on both; at most
``MAX_CONNECTIONS`` connections (at the cap the idlest or slowest is shed first).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any

from kcp_listener.app import FastPath, intake_fields
from kcp_listener.config import ListenerConfig
from kcp_listener.connection_limits import (
    BODY_TIMEOUT,
    HEADER_TIMEOUT,
    IDLE_TIMEOUT,
    WRITE_TIMEOUT,
    ConnectionWatch,
)
from kcp_listener.intake import EventIntake, Reply, error_reply
from kyma_wire.http_server import HttpServer, Limits, Request, Response
from kyma_wire.log_limit import RateLimitedLog

__all__ = ["MAX_CONNECTIONS", "DirectHandler", "DirectServer"]

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 10_000
"""Open connections per listener (a gateway pools a few; at the cap the idlest/slowest are shed)."""

ASGIApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]

_ERRORS = {
    400: error_reply(400, {"error": "malformed request"}),
    408: error_reply(408, {"error": "request not received in time"}),
    413: error_reply(413, {"error": "request body too large"}),
    417: error_reply(417, {"error": "unsupported expectation"}),
    431: error_reply(431, {"error": "request header fields too large"}),
    500: error_reply(500, {"error": "internal error"}),
}
_PHASES = {"header": HEADER_TIMEOUT, "body": BODY_TIMEOUT, "idle": IDLE_TIMEOUT, "write": WRITE_TIMEOUT}
_REASONS = {"headers_too_large": "header-too-large", "not_reading": "not-reading"}
_SKIPPED = frozenset({b"content-length", b"transfer-encoding", b"connection"})
"""Response headers the server writes itself."""


def _response(reply: Reply) -> Response:
    return Response(reply.status, reply.body, reply.headers)


def error_response(status: int, message: str) -> Response:
    """The server's own refusals, as the listener's fixed JSON bodies (never the request's text)."""
    return _response(_ERRORS.get(status) or error_reply(status, {"error": "request refused"}))


class DirectHandler:
    """``kyma_wire.http_server`` handler: events in place, the rest through the ASGI application."""

    def __init__(self, app: Any, *, server: tuple[str, int] | None = None) -> None:
        """``app``: what ``build_asgi`` returned (with the fast path, its intake serves the events)."""
        self.intake: EventIntake | None = app.intake if isinstance(app, FastPath) else None
        self.asgi: ASGIApp = app.app if isinstance(app, FastPath) else app
        self.server = server

    def __call__(self, request: Request) -> Response | Awaitable[Response]:
        intake = self.intake
        matched = intake.route_of(request.path) if intake is not None else None
        if matched is None or intake is None:
            return self._asgi(request)
        manager, route = matched
        started = perf_counter()
        method = request.method
        if method != "POST":
            reply = intake.not_allowed(method)
        else:
            body: bytes | None = request.body
            if request.body_too_large or len(request.body) > intake.body_limit(route):
                body = None
            target = request.target.decode("latin-1")
            processed = intake.process(
                method, manager, route, target, "http", intake_fields(request.headers), body
            )
            if not isinstance(processed, Reply):
                return self._later(intake, route, processed, started)
            reply = processed
        intake.metrics.observe(route, reply.status, perf_counter() - started)
        return Response(reply.status, reply.body, reply.headers)

    @staticmethod
    async def _later(intake: EventIntake, route: str, reply: Awaitable[Reply], started: float) -> Response:
        """An event handed to another replica: its answer comes from there."""
        metrics = intake.metrics
        metrics.inflight += 1
        try:
            done = await reply
        finally:
            metrics.inflight -= 1
        metrics.observe(route, done.status, perf_counter() - started)
        return _response(done)

    async def _asgi(self, request: Request) -> Response:
        """One request through the ASGI application (FastAPI: metrics, readiness, OpenAPI, docs)."""
        if request.body_too_large:
            return error_response(413, "request body too large")
        raw_path, _, query = request.target.partition(b"?")
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "server": self.server,
            "client": None,
            "scheme": "http",
            "method": request.method,
            "root_path": "",
            "path": request.path,
            "raw_path": raw_path,
            "query_string": query,
            "headers": request.headers,
            "state": {},
        }
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": request.body, "more_body": False}
            await asyncio.get_running_loop().create_future()  # nothing more: waits until cancelled
            raise AssertionError("unreachable")

        status = 500
        headers: list[tuple[bytes, bytes]] = []
        chunks: list[bytes] = []

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers.extend(
                    (name.lower(), value)
                    for name, value in message.get("headers", ())
                    if name.lower() not in _SKIPPED
                )
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        try:
            await self.asgi(scope, receive, send)
        except Exception:
            log.exception("kcp listener: unexpected error handling %s", request.path)
            return error_response(500, "internal error")
        return Response(status, b"".join(chunks), tuple(headers))


class DirectServer:
    """``kyma_wire.http_server.HttpServer`` with the listener's limits; the shape of ``EmbeddedServer``."""

    def __init__(
        self, app: Any, config: ListenerConfig, watch: ConnectionWatch, *, graceful_seconds: float
    ) -> None:
        timeouts = watch.timeouts
        self._watch = watch
        self._log = RateLimitedLog(log)  # per server: one server's refusals do not mute another's
        self._handler = DirectHandler(app)
        self._server = HttpServer(
            self._handler,
            host=config.host,
            port=config.port,
            name="kcp-listener-http",
            limits=Limits(
                max_header_bytes=config.max_header_bytes,
                max_headers=config.max_header_count,
                max_body_bytes=max(config.max_body_bytes, config.max_batch_bytes),
                header_timeout=timeouts.header,
                body_timeout=timeouts.body,
                keep_alive_timeout=timeouts.idle,
                write_timeout=timeouts.write,
                max_connections=MAX_CONNECTIONS,
                first_request_timeout=timeouts.header,
                linger_seconds=1.0,  # as ``header_limits``: the 431 must reach the client
                answer_timeouts=False,  # as the uvicorn server and upstream's Go listener: just close
            ),
            graceful_seconds=graceful_seconds,
            observe=self._observe,
            on_timeout=self._timed_out,
            error=error_response,
        )

    def _observe(self, reason: str) -> None:
        self._refused(_REASONS.get(reason, reason))

    def _timed_out(self, phase: str) -> None:
        self._refused(_PHASES.get(phase, phase))

    def _refused(self, reason: str) -> None:
        """Counted each time; logged once per reason every few seconds (a client writes the log)."""
        self._watch.count(reason)
        if reason != "header-too-large":
            self._log.log(reason, "HTTP request refused (%s)", reason)

    @property
    def port(self) -> int | None:
        return self._server.port

    @property
    def open_connections(self) -> int:
        return len(self._server.connections)

    @property
    def receiving_connections(self) -> int:
        """Connections in the middle of a request (its head or body arriving)."""
        return sum(1 for connection in self._server.connections if connection.receiving)

    @property
    def task(self) -> asyncio.Task[None]:
        return self._server.task

    @property
    def serving(self) -> bool:
        try:
            return not self._server.task.done()
        except RuntimeError:
            return False

    async def start(self) -> None:
        await self._server.start()
        self._handler.server = (self._server.host, self._server.port or 0)

    async def stop(self) -> None:
        await self._server.stop()
