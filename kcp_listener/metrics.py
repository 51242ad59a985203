"""The listener's Prometheus metrics, registered in an injected registry (never the global one).

Why: operators need to see what the intake does (accepted, rejected and why, back-pressure) and
upstream dashboards query ``watcher_listener_*`` names; upstream never updates several of them
(request errors, failed verification, a meaningful in-flight gauge). Here every metric is updated
on the request path and exercised by tests. Label children are resolved once up front so the hot
path does dictionary look-ups, not label validation.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["CONTROLLERS", "ListenerMetrics"]

CONTROLLERS = ("kyma", "manifest")
UPSTREAM_SERVER_NAME = "listener"
_DURATION_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class ListenerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "kcp_listener_requests",
            "HTTP requests on the listener routes by route kind and status code.",
            ["route", "code"],
            registry=registry,
        )
        self.auth_failures = Counter(
            "kcp_listener_auth_failures",
            "Requests rejected as unauthenticated, by reason.",
            ["reason"],
            registry=registry,
        )
        self.replays = Counter(
            "kcp_listener_replayed_requests",
            "Signed requests rejected because their nonce was already used.",
            registry=registry,
        )
        self.oversize = Counter(
            "kcp_listener_oversize_requests",
            "Requests rejected because the body exceeds the size limit.",
            registry=registry,
        )
        self.rejected_events = Counter(
            "kcp_listener_rejected_events",
            "Authenticated requests that enqueued nothing, by reason.",
            ["reason"],
            registry=registry,
        )
        self.enqueued = Counter(
            "kcp_listener_enqueued_requests",
            "Reconcile requests handed to a controller's intake.",
            ["controller"],
            registry=registry,
        )
        self.coalesced = Counter(
            "kcp_listener_coalesced_events",
            "Enqueues absorbed into a pending trailing request for the same target (throttling).",
            ["controller"],
            registry=registry,
        )
        self.heartbeats = Counter(
            "kcp_listener_heartbeats",
            "Accepted heartbeats.",
            registry=registry,
        )
        self.intake_depth = Gauge(
            "kcp_listener_intake_depth",
            "Requests waiting in a controller's listener intake (channel source).",
            ["controller"],
            registry=registry,
        )
        self.duration = Histogram(
            "kcp_listener_request_duration_seconds",
            "Time from request start to response on the listener routes.",
            ["route"],
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )
        # Upstream-compatible names (runtime-watcher listener, label server_name="listener").
        self.upstream_requests = Counter(
            "watcher_listener_requests",
            "Total number of requests received by the listener (upstream name).",
            ["server_name"],
            registry=registry,
        ).labels(UPSTREAM_SERVER_NAME)
        self.upstream_oversize = Counter(
            "watcher_listener_exceeding_size_limit_requests",
            "Requests whose body exceeds the size limit (upstream name).",
            ["server_name"],
            registry=registry,
        ).labels(UPSTREAM_SERVER_NAME)
        self.upstream_errors = Counter(
            "watcher_listener_request_errors",
            "Requests answered with a non-2xx status (upstream name; never updated upstream).",
            ["server_name"],
            registry=registry,
        ).labels(UPSTREAM_SERVER_NAME)
        self.upstream_failed_verification = Counter(
            "watcher_listener_failed_verification_requests",
            "Requests that failed authentication (upstream name; never updated upstream).",
            ["server_name"],
            registry=registry,
        ).labels(UPSTREAM_SERVER_NAME)
        self.upstream_inflight = Gauge(
            "watcher_listener_inflight_requests",
            "Requests currently being handled (upstream name).",
            ["server_name"],
            registry=registry,
        ).labels(UPSTREAM_SERVER_NAME)
        self.upstream_duration = Gauge(
            "watcher_listener_request_duration",
            "Duration of the last handled request in seconds (upstream name and semantics).",
            ["server_name"],
            registry=registry,
        ).labels(UPSTREAM_SERVER_NAME)
        self._codes: dict[tuple[str, int], Counter] = {}
        self._durations = {route: self.duration.labels(route) for route in ("event", "heartbeat", "other")}
        self._auth: dict[str, Counter] = {}
        self._rejected: dict[str, Counter] = {}
        self._enqueued = {controller: self.enqueued.labels(controller) for controller in CONTROLLERS}

    def track_depth(self, controller: str, depth: Callable[[], int]) -> None:
        """Report a controller intake's current depth at scrape time."""
        self.intake_depth.labels(controller).set_function(lambda: float(depth()))

    def observe(self, route: str, code: int, seconds: float) -> None:
        child = self._codes.get((route, code))
        if child is None:
            child = self._codes[(route, code)] = self.requests.labels(route, str(code))
        child.inc()
        self.upstream_requests.inc()
        if code >= 300:
            self.upstream_errors.inc()
        self._durations.get(route, self._durations["other"]).observe(seconds)
        self.upstream_duration.set(seconds)

    def auth_failed(self, reason: str) -> None:
        child = self._auth.get(reason)
        if child is None:
            child = self._auth[reason] = self.auth_failures.labels(reason)
        child.inc()
        self.upstream_failed_verification.inc()

    def rejected(self, reason: str) -> None:
        child = self._rejected.get(reason)
        if child is None:
            child = self._rejected[reason] = self.rejected_events.labels(reason)
        child.inc()

    def enqueued_to(self, controller: str, count: int = 1) -> None:
        self._enqueued[controller].inc(count)

    def too_large(self) -> None:
        self.oversize.inc()
        self.upstream_oversize.inc()
