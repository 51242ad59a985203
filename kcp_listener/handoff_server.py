"""The internal hand-off endpoint: where other replicas deliver events of shards this one holds.

Why a server of its own (``--handoff-port``, default 8083) rather than a route on the public
listener: the public port is what the gateway exposes to every runtime; the hand-off route trusts
its caller to have authenticated the agent already, so it must never be reachable from there. On
its own port it is reachable on the pod network only, and its authentication (HMAC with the
replicas' shared key, ``handoff_auth``) is independent of the agents' credentials.

Pipeline, cheapest check first, nothing enqueued unless all pass: path (404) - method (405) -
body size, also for chunked bodies (413) - HMAC signature, timestamp window, nonce (401) - body
model (400) - manager known (404) - this replica holds the runtime's shard and serves (503) -
the listener's own replay check of the agent's nonce and its routing (``EventIntake.accept_handoff``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from pydantic import ValidationError

from embedded_server import EmbeddedServer
from kcp_listener.app import Receive, Scope, Send
from kcp_listener.connection_limits import ConnectionWatch, keep_alive_of, limited_protocol, timeouts_of
from kcp_listener.handoff import (
    HANDOFF_PATH,
    HandoffAnswers,
    HandoffEnvelope,
    HandoffMetrics,
    HandoffResponse,
)
from kcp_listener.handoff_auth import HandoffAuthError, HandoffVerifier
from kcp_listener.intake import EventIntake
from kyma_wire.log_limit import RateLimitedLog

__all__ = ["HandoffApp", "HandoffServer"]

log = logging.getLogger(__name__)
_limited_log = RateLimitedLog(log)
"""Anything on the pod network can send bad hand-off requests: it must not write one line each."""


def _json(status: int, payload: dict[str, Any]) -> tuple[int, bytes]:
    return status, json.dumps(payload, separators=(",", ":")).encode()


class HandoffApp:
    """ASGI app of the hand-off route; see the module docstring for the order of the checks."""

    def __init__(
        self, intake: EventIntake, verifier: HandoffVerifier, metrics: HandoffMetrics, *, max_body_bytes: int
    ) -> None:
        self.intake = intake
        self.verifier = verifier
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self._managers = frozenset(intake.config.managers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        status, body, extra = await self._handle(scope, receive)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *extra,
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _handle(self, scope: Scope, receive: Receive) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        received = self.metrics.received
        if scope["path"] != HANDOFF_PATH:
            received.labels("not-found").inc()
            return (*_json(404, {"error": "not found"}), [])
        if scope["method"] != "POST":
            return (*_json(405, {"error": "method not allowed"}), [(b"allow", b"POST")])
        body = await self._read(receive)
        if body is None:
            received.labels("too-large").inc()
            return (*_json(413, {"error": "body too large"}), [(b"connection", b"close")])
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            key = self.verifier.verify("POST", HANDOFF_PATH, headers, body)
        except HandoffAuthError as error:
            received.labels("unauthenticated").inc()
            self.metrics.refused.labels(error.reason).inc()
            _limited_log.log(error.reason, "hand-off request rejected: %s", error.reason)
            return (*_json(401, {"error": "unauthenticated", "reason": error.reason}), [])
        self.metrics.verified.labels(key).inc()
        try:
            requests = HandoffEnvelope.model_validate_json(body).requests
        except ValidationError:
            received.labels("invalid").inc()
            return (*_json(400, {"error": "invalid body"}), [])
        if any(request.manager not in self._managers for request in requests):
            received.labels("not-found").inc()
            return (*_json(404, {"error": "unknown manager"}), [])
        if not self.intake.serving:
            received.labels("not-serving").inc()
            return (*_json(503, {"error": "not serving"}), [(b"retry-after", b"1")])
        answers: list[HandoffResponse | None] = []
        for request in requests:
            answer = self.intake.accept_handoff(request)
            received.labels("not-holder" if answer is None else "accepted").inc()
            answers.append(answer)
        return 200, HandoffAnswers.wire_of(answers), []

    async def _read(self, receive: Receive) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            more = message.get("more_body", False)
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
        return b"".join(chunks)


class HandoffServer:
    """Serves :class:`HandoffApp` on ``host:port`` until cancelled or :meth:`shutdown`."""

    def __init__(self, app: HandoffApp, *, host: str, port: int, graceful_seconds: float = 2.0) -> None:
        self.app = app
        self.host = host
        self.requested_port = port
        config = app.intake.config
        self.connections = ConnectionWatch(timeouts_of(config), app.intake.metrics.connection_refused)
        self._server = EmbeddedServer(
            app,
            host=host,
            port=port,
            name="kcp-listener-handoff",
            # the same header bounds (431 beyond them) and connection deadlines as the public server:
            # the port is internal, but anything on the pod network can connect before the HMAC check
            http=limited_protocol(config.max_header_bytes, config.max_header_count, self.connections),
            keep_alive=keep_alive_of(self.connections.timeouts),
            graceful_seconds=graceful_seconds,
        )

    @property
    def port(self) -> int:
        if self._server.port is None:
            raise RuntimeError("the hand-off server is not running")
        return self._server.port

    async def start(self) -> None:
        await self._server.start()
        log.info("kcp listener hand-off endpoint on %s:%d", self.host, self.port)

    async def run(self) -> None:
        await self.start()
        try:
            await asyncio.shield(self._server.task)
        except asyncio.CancelledError:
            await self._server.stop()
            self.connections.close()
            raise

    async def shutdown(self) -> None:
        await self._server.stop()
        self.connections.close()
