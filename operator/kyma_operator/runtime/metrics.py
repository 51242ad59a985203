"""Prometheus metrics of the runtime, named like controller-runtime's so dashboards carry over.

All metrics live in one ``CollectorRegistry`` per manager (injectable, never the global default
registry), so several managers can run in one process (tests, benchmarks) without clashing.
``workqueue_unfinished_work_seconds`` and ``workqueue_longest_running_processor_seconds`` are
computed at scrape time from the queues' in-flight items instead of by a polling task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kyma_operator.runtime.exposition import ExpositionRegistry

# controller-runtime: prometheus.ExponentialBuckets(10e-9, 10, 12)
_QUEUE_BUCKETS = tuple(1e-8 * 10.0**i for i in range(12))
_RECONCILE_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
)  # fmt: skip

InFlightProvider = Callable[[], tuple[float, float]]
"""Returns (sum of seconds all in-flight items have been processing, longest single one)."""


class _InFlightCollector(Collector):
    def __init__(self) -> None:
        self.providers: dict[str, InFlightProvider] = {}

    def collect(self) -> Iterator[Metric]:
        unfinished = GaugeMetricFamily(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed "
            "by work_duration. Large values indicate stuck threads.",
            labels=["controller", "name"],
        )
        longest = GaugeMetricFamily(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            labels=["controller", "name"],
        )
        for name, provider in list(self.providers.items()):
            total, single = provider()
            unfinished.add_metric([name, name], total)
            longest.add_metric([name, name], single)
        yield unfinished
        yield longest

    def describe(self) -> Iterator[Metric]:
        return iter(())


class QueueMetrics:
    """The workqueue metrics of one named queue (label children resolved once)."""

    def __init__(self, metrics: RuntimeMetrics, name: str) -> None:
        labels = (name, name)
        self.name = name
        self.depth = metrics.workqueue_depth.labels(*labels)
        self.bulk_depth = metrics.workqueue_bulk_depth.labels(*labels)
        self.promotions = metrics.workqueue_promotions.labels(*labels)
        self.adds = metrics.workqueue_adds.labels(*labels)
        self.queue_duration = metrics.workqueue_queue_duration.labels(*labels)
        self.work_duration = metrics.workqueue_work_duration.labels(*labels)
        self.retries = metrics.workqueue_retries.labels(*labels)
        self._metrics = metrics

    def set_in_flight_provider(self, provider: InFlightProvider) -> None:
        self._metrics._in_flight.providers[self.name] = provider


class ControllerMetrics:
    """The reconcile metrics of one controller."""

    def __init__(self, metrics: RuntimeMetrics, name: str) -> None:
        self.name = name
        self.reconcile_success = metrics.reconcile_total.labels(name, "success")
        self.reconcile_error = metrics.reconcile_total.labels(name, "error")
        self.reconcile_requeue = metrics.reconcile_total.labels(name, "requeue")
        self.reconcile_requeue_after = metrics.reconcile_total.labels(name, "requeue_after")
        self.errors = metrics.reconcile_errors.labels(name)
        self.terminal_errors = metrics.terminal_reconcile_errors.labels(name)
        self.reconcile_time = metrics.reconcile_time.labels(name)
        self.active_workers = metrics.active_workers.labels(name)
        self.max_concurrent = metrics.max_concurrent_reconciles.labels(name)
        self.started = metrics.reconcile_started.labels(name)
        self.gated = metrics.reconcile_gated.labels(name)
        self.queue = metrics.queue(name)


class RuntimeMetrics:
    """Every runtime metric, registered in ``registry`` (a fresh one if not given: an
    ``ExpositionRegistry``, whose ``/metrics`` comes in chunks)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else ExpositionRegistry()
        r = self.registry
        q_labels = ["controller", "name"]
        self.workqueue_depth = Gauge("workqueue_depth", "Current depth of workqueue", q_labels, registry=r)
        self.workqueue_adds = Counter(
            "workqueue_adds_total", "Total number of adds handled by workqueue", q_labels, registry=r
        )
        self.workqueue_bulk_depth = Gauge(
            "kyma_operator_workqueue_bulk_depth",
            "Of workqueue_depth, the keys waiting as bulk work (lists, resyncs, retries) behind events",
            q_labels,
            registry=r,
        )
        self.workqueue_promotions = Counter(
            "kyma_operator_workqueue_promotions_total",
            "Keys waiting as bulk work that an event moved ahead to the event lane",
            q_labels,
            registry=r,
        )
        self.workqueue_queue_duration = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            q_labels,
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        self.workqueue_work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            q_labels,
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        self.workqueue_retries = Counter(
            "workqueue_retries_total", "Total number of retries handled by workqueue", q_labels, registry=r
        )
        self._in_flight = _InFlightCollector()
        r.register(self._in_flight)
        self.reconcile_total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ["controller", "result"],
            registry=r,
        )
        self.reconcile_started = Counter(
            "kyma_operator_reconcile_started_total",
            "Reconciles started per controller (controller_runtime_reconcile_total counts finished ones)",
            ["controller"],
            registry=r,
        )
        self.reconcile_gated = Counter(
            "kyma_operator_reconcile_gated_total",
            "Reconciles not started because this replica's leadership was not confirmed (fencing)",
            ["controller"],
            registry=r,
        )
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            ["controller"],
            registry=r,
        )
        self.terminal_reconcile_errors = Counter(
            "controller_runtime_terminal_reconcile_errors_total",
            "Total number of terminal reconciliation errors per controller",
            ["controller"],
            registry=r,
        )
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ["controller"],
            buckets=_RECONCILE_BUCKETS,
            registry=r,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            ["controller"],
            registry=r,
        )
        self.max_concurrent_reconciles = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            ["controller"],
            registry=r,
        )
        self.leader_election_master_status = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
            "1 indicates master. 'name' is the string used to identify the lease.",
            ["name"],
            registry=r,
        )
        self.informer_events = Counter(
            "informer_events_total",
            "Watch events received per informer and event type (ours, not controller-runtime's)",
            ["resource", "type"],
            registry=r,
        )
        self.informer_relists = Counter(
            "informer_relists_total",
            "Full lists per informer (initial list, 410 Gone recovery)",
            ["resource"],
            registry=r,
        )
        self.informer_watch_restarts = Counter(
            "informer_watch_restarts_total",
            "Watch streams that ended with an error and were re-established after a backoff",
            ["resource"],
            registry=r,
        )

    def queue(self, name: str) -> QueueMetrics:
        return QueueMetrics(self, name)

    def controller(self, name: str) -> ControllerMetrics:
        return ControllerMetrics(self, name)
