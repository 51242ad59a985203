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
from collections.abc import Callable
from typing import Protocol

from fastapi import FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from kyma_wire.events import AgentEvent
from skr_watcher.admission import Decision, MalformedReview, allowed_response, decide, parse_review
from skr_watcher.clock import Clock
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

    def __init__(self, sink: EventSink, metrics: AgentMetrics, clock: Clock) -> None:
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
        outcome = decide(request, self._clock.now())
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


def webhook_app(handler: AdmissionHandler) -> FastAPI:
    """The admission app. The route is a plain Starlette route (no dependency injection): the
    handler parses the body itself, and this saves about a third of the framework's per-request cost."""
    app = FastAPI(title="skr-watcher", docs_url=None, redoc_url=None, openapi_url=None)

    async def validate(request: Request) -> Response:
        manager: str = request.path_params["manager"]
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > MAX_REVIEW_BYTES:
            status, payload = handler.too_large()
        elif length is not None:
            status, payload = handler.handle(manager, await request.body())
        else:
            body = await _read_capped(request)
            status, payload = handler.too_large() if body is None else handler.handle(manager, body)
        return Response(payload, status, _SECURITY_HEADERS, _JSON)

    app.add_route("/validate/{manager:path}", validate, methods=["POST"])
    return app


async def _read_capped(request: Request) -> bytes | None:
    """The body of a request without Content-Length, or None once it exceeds the limit."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_REVIEW_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def health_app(metrics: AgentMetrics, ready: Callable[[], bool]) -> FastAPI:
    """``/healthz`` (process alive), ``/readyz`` (webhook serving), ``/metrics`` (Prometheus)."""
    app = FastAPI(title="skr-watcher-health", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(b"ok", 200, media_type="text/plain")

    @app.get("/readyz")
    async def readyz() -> Response:
        if ready():
            return Response(b"ok", 200, media_type="text/plain")
        return Response(b"not ready", 503, media_type="text/plain")

    @app.get("/metrics")
    async def metrics_endpoint() -> Response:
        return Response(metrics.exposition(), 200, media_type=CONTENT_TYPE_LATEST)

    return app
