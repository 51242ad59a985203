"""Prometheus metrics of one agent instance.

Each ``AgentMetrics`` owns its ``Registry`` (no module-level globals), so tests and
benchmarks can run several agents in one process and read exact values. Upstream's names are kept
where the meaning matches (``watcher_admission_request_total``, ``watcher_admission_request_error_total``,
``watcher_kcp_requests_total``, ``watcher_failed_kcp_total{error_reason}``); the rest describe what
upstream cannot have: the queue, coalescing, drops, resyncs and heartbeats.
"""

from __future__ import annotations

from skr_watcher.exposition import Counter, Gauge, Histogram, Registry

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_DELIVERY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class AgentMetrics:
    def __init__(self, registry: Registry | None = None) -> None:
        self.registry = registry if registry is not None else Registry()
        r = self.registry
        # admission side
        self.admission_requests = Counter(
            "watcher_admission_request", "Admission reviews received.", registry=r
        )
        self.admission_errors = Counter(
            "watcher_admission_request_error",
            "Admission reviews that could not be interpreted, by reason.",
            ["reason"],
            registry=r,
        )
        self.admission_decisions = Counter(
            "watcher_admission_decision",
            "Admission reviews by decision (changed, unchanged, dry_run, unsupported_*, invalid).",
            ["decision"],
            registry=r,
        )
        self.admission_duration = Histogram(
            "watcher_admission_duration_seconds",
            "Time spent handling one admission review inside the agent.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        # queue
        self.events_queued = Counter("watcher_events_queued", "Events put into the send queue.", registry=r)
        self.events_coalesced = Counter(
            "watcher_events_coalesced", "Events merged into an entry that was already waiting.", registry=r
        )
        self.events_dropped = Counter(
            "watcher_events_dropped",
            "Events given up on (overflow: queue full; rejected: definitive 4xx from KCP).",
            ["reason"],
            registry=r,
        )
        self.events_superseded = Counter(
            "watcher_events_superseded",
            "Undelivered events abandoned because a newer event for the same object was queued.",
            registry=r,
        )
        self.queue_depth = Gauge("watcher_queue_depth", "Entries waiting in the send queue.", registry=r)
        self.resync_events = Counter(
            "watcher_resync_events", "RESYNC events queued after an outage or a loss.", registry=r
        )
        # sending
        self.kcp_requests = Counter(
            "watcher_kcp_requests", "HTTP requests to KCP (events and heartbeats, every attempt).", registry=r
        )
        self.kcp_failures = Counter(
            "watcher_failed_kcp", "Failed requests to KCP, by reason.", ["error_reason"], registry=r
        )
        self.events_sent = Counter("watcher_events_sent", "Events accepted by KCP.", registry=r)
        self.batches = Counter(
            "watcher_kcp_batches", "Batch requests to KCP (/v2/<manager>/events, every attempt).", registry=r
        )
        self.batched_events = Counter(
            "watcher_kcp_batched_events", "Events carried by batch requests (every attempt).", registry=r
        )
        self.batch_fallbacks = Counter(
            "watcher_kcp_batch_fallbacks",
            "Times the agent switched to single events because the listener had no batch route (404/405).",
            registry=r,
        )
        self.send_duration = Histogram(
            "watcher_kcp_request_duration_seconds",
            "Duration of one HTTP request to KCP.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.delivery_latency = Histogram(
            "watcher_event_delivery_latency_seconds",
            "From the first queued change of an entry to its acceptance by KCP.",
            buckets=_DELIVERY_BUCKETS,
            registry=r,
        )
        self.last_success = Gauge(
            "watcher_last_successful_send_timestamp_seconds",
            "Unix time of the last request KCP accepted.",
            registry=r,
        )
        self.heartbeats = Counter("watcher_heartbeats", "Heartbeats by result.", ["result"], registry=r)
        self.http_cut = Counter(
            "watcher_http_connections_cut",
            "Client connections the webhook or metrics port cut short, by port and reason (shed, refused,"
            " timeout, not_reading, malformed, headers_too_large, body_budget).",
            ["port", "reason"],
            registry=r,
        )
        self.tls_reloads = Counter(
            "watcher_tls_reloads",
            "Reloads of rotated certificate/key files, by result.",
            ["result"],
            registry=r,
        )

    def exposition(self) -> bytes:
        return self.registry.exposition()
