"""The HTTP face of the agent: ``POST /validate/<manager>`` for the API server, plus health/metrics.

The admission endpoint must answer within milliseconds whatever KCP does, so it only parses the
review, runs change detection and hands a resulting event to the send queue (no awaits at all: the
server calls it with the complete body). Every review with a readable uid gets ``allowed: true``;
only a body without any usable uid gets a 400 with a clear message (the API server then applies the
webhook's ``failurePolicy: Ignore``). Health and Prometheus endpoints are a separate plain-HTTP
handler, served on the metrics port.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from typing import Protocol

from kyma_wire.events import AgentEvent
from kyma_wire.http_server import Handler, Request, Response
from kyma_wire.log_limit import RateLimitedLog
from skr_watcher.admission import Decision, MalformedReview, allowed_response, decide, parse_review
from skr_watcher.clock import AgentClock
from skr_watcher.config import MAX_REVIEW_BYTES
from skr_watcher.exposition import CONTENT_TYPE as METRICS_CONTENT_TYPE
from skr_watcher.metrics import AgentMetrics

log = logging.getLogger(__name__)

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

    def __init__(
        self, sink: EventSink, metrics: AgentMetrics, clock: AgentClock, *, log_interval: float = 10.0
    ) -> None:
        self._sink = sink
        self._metrics = metrics
        self._clock = clock
        self._log = RateLimitedLog(log, interval=log_interval, clock=clock.monotonic)
        """Whoever reaches the port can send malformed reviews: one line per reason and interval
        (every one is counted in ``watcher_admission_request_error_total``)."""

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
                self._log.log(
                    error.reason, "rejected malformed AdmissionReview on /validate/%s: %s", manager, error
                )
                return 400, _problem(f"malformed AdmissionReview: {error}")
            self._log.log(
                error.reason,
                "malformed AdmissionReview uid=%s on /validate/%s: %s",
                error.uid,
                manager,
                error,
            )
            return 200, allowed_response(error.uid, error.api_version)
        request = review.request
        if not _MANAGER.match(manager):
            metrics.admission_errors.labels("invalid-manager").inc()
            metrics.admission_decisions.labels(Decision.INVALID.value).inc()
            self._log.log(
                "invalid-manager",
                "AdmissionReview uid=%s on invalid path /validate/%s: no event",
                request.uid,
                manager,
            )
            return 200, allowed_response(request.uid, review.api_version)
        outcome = decide(request, self._clock.utc_now())
        metrics.admission_decisions.labels(outcome.decision.value).inc()
        if outcome.event is not None:
            self._sink.submit(manager, outcome.event)
        elif outcome.reason:
            metrics.admission_errors.labels(outcome.reason).inc()
            self._log.log(
                outcome.reason,
                "AdmissionReview uid=%s %s %s/%s (subresource %r): no event (%s)",
                request.uid,
                request.operation,
                request.namespace,
                request.name,
                request.sub_resource,
                outcome.reason,
            )
        return 200, allowed_response(request.uid, review.api_version)


def webhook_app(handler: AdmissionHandler) -> Handler:
    """The admission endpoint, ``POST /validate/<manager>``, for ``kyma_wire.http_server``.

    No web framework: the route is one path prefix and the handler parses the body itself, so a
    framework would only add per-request objects and ~10 MB of imports to every customer node. The
    server enforces ``MAX_REVIEW_BYTES`` (with or without ``Content-Length``) and flags the request.
    """

    def app(request: Request) -> Response:
        path = request.path
        if not path.startswith(_VALIDATE) or len(path) == len(_VALIDATE):
            return _NOT_FOUND
        if request.method != "POST":
            return _POST_ONLY
        if request.body_too_large:
            status, payload = handler.too_large()
        else:
            status, payload = handler.handle(path[len(_VALIDATE) :], request.body)
        return Response(status, payload, _ADMISSION_HEADERS)

    return app


def health_app(metrics: AgentMetrics, ready: Callable[[], bool]) -> Handler:
    """``/healthz`` (process alive), ``/readyz`` (webhook serving), ``/metrics`` (Prometheus)."""

    def app(request: Request) -> Response:
        path = request.path
        if path not in ("/healthz", "/readyz", "/metrics"):
            return _NOT_FOUND
        if request.method not in ("GET", "HEAD"):
            return _GET_ONLY
        if request.body_too_large:
            return Response(413, b'{"error":"request body too large"}', _JSON_HEADERS)
        if path == "/metrics":
            return Response(200, metrics.exposition(), _METRICS_HEADERS)
        if path == "/readyz" and not ready():
            return Response(503, b"not ready", _TEXT_HEADERS)
        return Response(200, b"ok", _TEXT_HEADERS)

    return app


_VALIDATE = "/validate/"
_JSON_HEADERS = ((b"content-type", b"application/json"),)
_ADMISSION_HEADERS = (
    *_JSON_HEADERS,
    *((name.encode(), value.encode()) for name, value in _SECURITY_HEADERS.items()),
)
_NOT_FOUND = Response(404, b'{"error":"not found"}', _JSON_HEADERS)
_POST_ONLY = Response(405, b'{"error":"method not allowed"}', (*_JSON_HEADERS, (b"allow", b"POST")))
_GET_ONLY = Response(405, b'{"error":"method not allowed"}', (*_JSON_HEADERS, (b"allow", b"GET")))
_TEXT_HEADERS = ((b"content-type", b"text/plain; charset=utf-8"),)
_METRICS_HEADERS = ((b"content-type", METRICS_CONTENT_TYPE.encode()),)
