"""The HTTP face of the agent: ``POST /validate/<manager>`` for the API server, plus health/metrics.

The admission endpoint must answer within milliseconds whatever KCP does, so it only parses the
review, runs change detection and hands a resulting event to the send queue (no awaits on I/O
besides reading the body). Every review with a readable uid gets ``allowed: true``; only a body
without any usable uid gets a 400 with a clear message (the API server then applies the webhook's
``failurePolicy: Ignore``). Health and Prometheus endpoints are a separate plain-HTTP app, served on
the metrics port.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol

from kyma_wire.events import AgentEvent
from skr_watcher.admission import Decision, MalformedReview, allowed_response, decide, parse_review
from skr_watcher.clock import AgentClock
from skr_watcher.exposition import CONTENT_TYPE as METRICS_CONTENT_TYPE
from skr_watcher.metrics import AgentMetrics

log = logging.getLogger(__name__)

MAX_REVIEW_BYTES = 8 * 1024 * 1024
"""An AdmissionReview carries object and oldObject (etcd limits each to 1.5 MiB by default)."""
_MANAGER = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")
_JSON = "application/json"
_SECURITY_HEADERS = {
    "strict-transport-security": "max-age=31536000; includeSubDomains",
    "content-security-policy": "default-src 'self'",
}


class EventSink(Protocol):
    def submit(self, manager: str, event: AgentEvent) -> None: ...


def _problem(message: str) -> bytes:
    return json.dumps({"error": message}).encode()


class AdmissionHandler:
    """Turns one request body into (HTTP status, response body); no I/O, no awaits."""

    def __init__(self, sink: EventSink, metrics: AgentMetrics, clock: AgentClock) -> None:
        self._sink = sink
        self._metrics = metrics
        self._clock = clock

    def too_large(self) -> tuple[int, bytes]:
        self._metrics.admission_requests.inc()
        self._metrics.admission_errors.labels("too-large").inc()
        return 413, _problem(f"AdmissionReview larger than {MAX_REVIEW_BYTES} bytes")

    def handle(self, manager: str, body: bytes) -> tuple[int, bytes]:
        started = time.perf_counter()
        try:
            return self._handle(manager, body)
        finally:
            self._metrics.admission_duration.observe(time.perf_counter() - started)

    def _handle(self, manager: str, body: bytes) -> tuple[int, bytes]:
        metrics = self._metrics
        metrics.admission_requests.inc()
        try:
            review = parse_review(body)
        except MalformedReview as error:
            metrics.admission_errors.labels(error.reason).inc()
            metrics.admission_decisions.labels(Decision.INVALID.value).inc()
            if error.uid is None:
                log.warning("rejected malformed AdmissionReview on /validate/%s: %s", manager, error)
                return 400, _problem(f"malformed AdmissionReview: {error}")
            log.warning("malformed AdmissionReview uid=%s on /validate/%s: %s", error.uid, manager, error)
            return 200, allowed_response(error.uid, error.api_version)
        request = review.request
        if not _MANAGER.match(manager):
            metrics.admission_errors.labels("invalid-manager").inc()
            metrics.admission_decisions.labels(Decision.INVALID.value).inc()
            log.warning("AdmissionReview uid=%s on invalid path /validate/%s: no event", request.uid, manager)
            return 200, allowed_response(request.uid, review.api_version)
        outcome = decide(request, self._clock.utc_now())
        metrics.admission_decisions.labels(outcome.decision.value).inc()
        if outcome.event is not None:
            self._sink.submit(manager, outcome.event)
        elif outcome.reason:
            metrics.admission_errors.labels(outcome.reason).inc()
            log.warning(
                "AdmissionReview uid=%s %s %s/%s (subresource %r): no event (%s)",
                request.uid,
                request.operation,
                request.namespace,
                request.name,
                request.sub_resource,
                outcome.reason,
            )
        return 200, allowed_response(request.uid, review.api_version)


def webhook_app(handler: AdmissionHandler) -> ASGIApp:
    """The admission app: ``POST /validate/<manager>``, as a plain ASGI callable.

    No web framework: the route is one path prefix and the handler parses the body itself, so a
    framework would only add per-request objects (FastAPI/Starlette cost about a third of the
    agent's admission time) and ~10 MB of imports to every customer node.
    """

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await _lifespan_unsupported(scope, receive, send)
            return
        path: str = scope["path"]
        if not path.startswith(_VALIDATE) or len(path) == len(_VALIDATE):
            await _respond(send, 404, _NOT_FOUND, _JSON_HEADERS)
            return
        if scope["method"] != "POST":
            await _respond(send, 405, _NOT_ALLOWED, _POST_ONLY)
            return
        manager = path[len(_VALIDATE) :]
        length = _header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > MAX_REVIEW_BYTES:
            status, payload = handler.too_large()
        else:
            try:
                body = await _read_capped(receive, MAX_REVIEW_BYTES)
            except _Disconnected:
                return  # nobody to answer
            if body is None:
                status, payload = handler.too_large()
            else:
                status, payload = handler.handle(manager, body)
        await _respond(send, status, payload, _ADMISSION_HEADERS)

    return app


class _Disconnected(Exception):
    """The client went away while sending its body."""


async def _read_capped(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None once it exceeds ``limit`` (the rest is not kept)."""
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk: bytes = message.get("body", b"")
        more = message.get("more_body", False)
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def health_app(metrics: AgentMetrics, ready: Callable[[], bool]) -> ASGIApp:
    """``/healthz`` (process alive), ``/readyz`` (webhook serving), ``/metrics`` (Prometheus)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await _lifespan_unsupported(scope, receive, send)
            return
        path = scope["path"]
        if path not in ("/healthz", "/readyz", "/metrics"):
            await _respond(send, 404, _NOT_FOUND, _JSON_HEADERS)
        elif scope["method"] not in ("GET", "HEAD"):
            await _respond(send, 405, _NOT_ALLOWED, _GET_ONLY)
        elif path == "/metrics":
            await _respond(send, 200, metrics.exposition(), _METRICS_HEADERS)
        elif path == "/readyz" and not ready():
            await _respond(send, 503, b"not ready", _TEXT_HEADERS)
        else:
            await _respond(send, 200, b"ok", _TEXT_HEADERS)

    return app


# --- ASGI plumbing -----------------------------------------------------------------------------------

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_VALIDATE = "/validate/"
_NOT_FOUND = b'{"error":"not found"}'
_NOT_ALLOWED = b'{"error":"method not allowed"}'
_JSON_HEADERS = ((b"content-type", b"application/json"),)
_ADMISSION_HEADERS = (
    *_JSON_HEADERS,
    *((name.encode(), value.encode()) for name, value in _SECURITY_HEADERS.items()),
)
_POST_ONLY = (*_JSON_HEADERS, (b"allow", b"POST"))
_GET_ONLY = (*_JSON_HEADERS, (b"allow", b"GET"))
_TEXT_HEADERS = ((b"content-type", b"text/plain; charset=utf-8"),)
_METRICS_HEADERS = ((b"content-type", METRICS_CONTENT_TYPE.encode()),)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


async def _respond(send: Send, status: int, body: bytes, headers: tuple[tuple[bytes, bytes], ...]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _lifespan_unsupported(scope: Scope, receive: Receive, send: Send) -> None:
    """The servers run with ``lifespan="off"``; anything else (websocket) is not served."""
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1000})
