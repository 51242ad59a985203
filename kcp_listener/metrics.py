"""The listener's Prometheus metrics, registered in an injected registry (never the global one).

Why: operators need to see what the intake does (accepted, rejected and why, back-pressure) and
upstream dashboards query ``watcher_listener_*`` names; upstream never updates several of them
(request errors, failed verification, a meaningful in-flight gauge). Here every metric is updated
on the request path and exercised by tests.

Why not ``prometheus_client.Counter`` objects: at thousands of events per second the client's
per-update locking costs ~1 us per call and a request updates about ten series. The request path
therefore bumps plain integers (one event loop, no threads) and a collector turns them into metric
families at scrape time; scrapes must run on the event loop (``/metrics`` is an ``async`` route,
the operator Manager serves its registry from the loop too).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["CONTROLLERS", "ListenerMetrics"]


class _Intake(Protocol):
    @property
    def coalesced(self) -> int: ...

    def depth(self) -> int: ...


CONTROLLERS = ("kyma", "manifest")
IDENTITY_KINDS = ("signature", "xfcc", "signature+xfcc")
"""How a request was authenticated: signature only (our agent without a gateway), XFCC only (the
upstream agent, or ``xfcc`` mode), both (our agent behind the gateway)."""
ROUTES = ("event", "events", "heartbeat", "other")
UPSTREAM_SERVER_NAME = "listener"
DURATION_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class _Histogram:
    __slots__ = ("buckets", "count", "sum")

    def __init__(self) -> None:
        self.buckets = [0] * (len(DURATION_BUCKETS) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.buckets[bisect_left(DURATION_BUCKETS, seconds)] += 1
        self.sum += seconds
        self.count += 1

    def cumulative(self) -> list[tuple[str, float]]:
        out, running = [], 0
        for bound, count in zip((*DURATION_BUCKETS, float("inf")), self.buckets, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
        return out


class ListenerMetrics:
    """Counters of one listener instance; see the module docstring for why they are plain ints."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests: dict[tuple[str, int], int] = {}
        self.auth_failures: dict[str, int] = {}
        self.rejected_events: dict[str, int] = {}
        self.enqueued = dict.fromkeys(CONTROLLERS, 0)
        self.identities = dict.fromkeys(IDENTITY_KINDS, 0)
        self.unrouted: dict[str, int] = {}
        self.replays = 0
        self.oversize = 0
        self.heartbeats = 0
        self.batches = 0
        self.batched_events = 0
        self.inflight = 0
        self.refused_connections: dict[str, int] = {}
        self.last_duration = 0.0
        self.durations = {route: _Histogram() for route in ROUTES}
        self._intakes: dict[str, _Intake] = {}
        registry.register(_Collector(self))

    # --- request path --------------------------------------------------------------------------------

    def track_intake(self, controller: str, intake: _Intake) -> None:
        """Report a controller intake's depth and coalesced offers at scrape time."""
        self._intakes[controller] = intake

    @property
    def coalesced(self) -> dict[str, int]:
        """Offers absorbed by each controller intake's throttle (per target, see the intake)."""
        return {c: (self._intakes[c].coalesced if c in self._intakes else 0) for c in CONTROLLERS}

    def observe(self, route: str, code: int, seconds: float) -> None:
        key = (route, code)
        requests = self.requests
        requests[key] = requests.get(key, 0) + 1
        histogram = self.durations[route]  # _Histogram.observe, inlined (once per request)
        histogram.buckets[bisect_left(DURATION_BUCKETS, seconds)] += 1
        histogram.sum += seconds
        histogram.count += 1
        self.last_duration = seconds

    def auth_failed(self, reason: str) -> None:
        self.auth_failures[reason] = self.auth_failures.get(reason, 0) + 1

    def authenticated(self, identity: str) -> None:
        """A request passed authentication by ``identity`` (one of ``IDENTITY_KINDS``)."""
        self.identities[identity] += 1

    def unrouted_event(self, reason: str) -> None:
        """An XFCC-only (upstream agent) event that named no Kyma, answered 200 like upstream."""
        self.unrouted[reason] = self.unrouted.get(reason, 0) + 1

    def rejected(self, reason: str) -> None:
        self.rejected_events[reason] = self.rejected_events.get(reason, 0) + 1

    def connection_refused(self, reason: str) -> None:
        """The HTTP server refused a request or closed a connection itself (``connection_limits``)."""
        self.refused_connections[reason] = self.refused_connections.get(reason, 0) + 1

    def too_large(self) -> None:
        self.oversize += 1

    def replayed(self) -> None:
        self.replays += 1

    def heartbeat(self) -> None:
        self.heartbeats += 1

    def batch(self, events: int) -> None:
        self.batches += 1
        self.batched_events += events


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _labelled(name: str, doc: str, label: str, values: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], value)
    return family


def _upstream(name: str, doc: str, value: float, gauge: bool = False) -> Metric:
    family = (GaugeMetricFamily if gauge else CounterMetricFamily)(name, doc, labels=["server_name"])
    family.add_metric([UPSTREAM_SERVER_NAME], value)
    return family


class _Collector(Collector):
    def __init__(self, metrics: ListenerMetrics) -> None:
        self._m = metrics

    def collect(self) -> Iterator[Metric]:
        m = self._m
        requests = dict(m.requests)
        by_code = CounterMetricFamily(
            "kcp_listener_requests",
            "HTTP requests on the listener routes by route kind and status code.",
            labels=["route", "code"],
        )
        for (route, code), value in sorted(requests.items()):
            by_code.add_metric([route, str(code)], value)
        yield by_code
        yield _labelled(
            "kcp_listener_auth_failures",
            "Requests rejected as unauthenticated, by reason.",
            "reason",
            dict(m.auth_failures),
        )
        yield _labelled(
            "kcp_listener_rejected_events",
            "Authenticated requests that enqueued nothing, by reason.",
            "reason",
            dict(m.rejected_events),
        )
        yield _labelled(
            "kcp_listener_authenticated_requests",
            "Requests that passed authentication, by identity kind (signature, xfcc, signature+xfcc);"
            " identity=xfcc without a signature comes from upstream agents.",
            "identity",
            dict(m.identities),
        )
        yield _labelled(
            "kcp_listener_unrouted_events",
            "Events of XFCC-only (upstream) agents that named no Kyma: answered 200 and dropped, by reason.",
            "reason",
            dict(m.unrouted),
        )
        yield _labelled(
            "kcp_listener_enqueued_requests",
            "Reconcile requests handed to a controller's intake.",
            "controller",
            dict(m.enqueued),
        )
        yield _labelled(
            "kcp_listener_coalesced_events",
            "Enqueues absorbed into a pending trailing request for the same target (throttling).",
            "controller",
            m.coalesced,
        )
        yield _labelled(
            "kcp_listener_connections_refused",
            "Requests the HTTP server refused before the application (malformed, header-too-large)"
            " and connections it closed (header-timeout, body-timeout, idle-timeout, write-timeout).",
            "reason",
            dict(m.refused_connections),
        )
        yield _counter(
            "kcp_listener_replayed_requests",
            "Signed requests rejected because their nonce was already used.",
            m.replays,
        )
        yield _counter(
            "kcp_listener_oversize_requests",
            "Requests rejected because the body exceeds the size limit.",
            m.oversize,
        )
        yield _counter("kcp_listener_heartbeats", "Accepted heartbeats.", m.heartbeats)
        yield _counter("kcp_listener_batches", "Authenticated batch requests (/events).", m.batches)
        yield _counter(
            "kcp_listener_batched_events",
            "Events received in batch requests (each also counted by its outcome).",
            m.batched_events,
        )
        depth = GaugeMetricFamily(
            "kcp_listener_intake_depth",
            "Requests waiting in a controller's intake (its work queue and pending throttled adds).",
            labels=["controller"],
        )
        for controller, intake in sorted(m._intakes.items()):
            depth.add_metric([controller], intake.depth())
        yield depth
        histogram = HistogramMetricFamily(
            "kcp_listener_request_duration_seconds",
            "Time from request start to response on the listener routes.",
            labels=["route"],
        )
        for route, hist in m.durations.items():
            histogram.add_metric([route], hist.cumulative(), hist.sum)
        yield histogram
        # Upstream-compatible names (runtime-watcher listener, label server_name="listener").
        total = sum(requests.values())
        errors = sum(value for (_, code), value in requests.items() if code >= 300)
        yield _upstream(
            "watcher_listener_requests",
            "Total number of requests received by the listener (upstream name).",
            total,
        )
        yield _upstream(
            "watcher_listener_exceeding_size_limit_requests",
            "Requests whose body exceeds the size limit (upstream name).",
            m.oversize,
        )
        yield _upstream(
            "watcher_listener_request_errors",
            "Requests answered with a non-2xx status (upstream name; never updated upstream).",
            errors,
        )
        yield _upstream(
            "watcher_listener_failed_verification_requests",
            "Requests that failed authentication (upstream name; never updated upstream).",
            sum(m.auth_failures.values()),
        )
        yield _upstream(
            "watcher_listener_inflight_requests",
            "Requests currently being handled (upstream name).",
            m.inflight,
            gauge=True,
        )
        yield _upstream(
            "watcher_listener_request_duration",
            "Duration of the last handled request in seconds (upstream name and semantics).",
            m.last_duration,
            gauge=True,
        )

    def describe(self) -> Iterator[Metric]:
        return iter(())
