"""Last heartbeat per runtime, kept in memory and exported as metrics.

Why: upstream cannot tell a quiet runtime from one whose watcher died (kyma-project/
lifecycle-manager#3524). Agents post a heartbeat every interval; the listener records when it saw
each runtime, the Kyma controller reads ``is_healthy`` to shorten its safety-net interval and set
a condition, and Prometheus sees one timestamp series per runtime (5,000 series at upstream's
scale target, acceptable) plus an aggregate count of stale runtimes for alerting. Nothing is
written to the API server per heartbeat.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["HeartbeatTracker"]


class HeartbeatTracker:
    """Wall-clock (``time.time``-like) last-seen timestamps per runtime id."""

    def __init__(self, *, clock: Callable[[], float], max_silence: float) -> None:
        self._clock = clock
        self._max_silence = max_silence
        self._last_seen: dict[str, float] = {}

    def record(self, runtime_id: str, at: float | None = None) -> None:
        self._last_seen[runtime_id] = self._clock() if at is None else at

    def forget(self, runtime_id: str) -> None:
        """Drop a runtime (its Kyma was deleted) so the series disappears."""
        self._last_seen.pop(runtime_id, None)

    def last_seen(self, runtime_id: str) -> float | None:
        return self._last_seen.get(runtime_id)

    def is_healthy(self, runtime_id: str, max_silence: float | None = None) -> bool:
        seen = self._last_seen.get(runtime_id)
        silence = self._max_silence if max_silence is None else max_silence
        return seen is not None and self._clock() - seen <= silence

    def stale_runtimes(self, max_silence: float | None = None) -> list[str]:
        """Runtimes that sent a heartbeat once but none within ``max_silence``."""
        silence = self._max_silence if max_silence is None else max_silence
        deadline = self._clock() - silence
        return sorted(rid for rid, seen in self._last_seen.items() if seen < deadline)

    def __len__(self) -> int:
        return len(self._last_seen)

    def items(self) -> list[tuple[str, float]]:
        return list(self._last_seen.items())

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(_HeartbeatCollector(self))


class _HeartbeatCollector(Collector):
    def __init__(self, tracker: HeartbeatTracker) -> None:
        self._tracker = tracker

    def collect(self) -> Iterator[Metric]:
        last = GaugeMetricFamily(
            "kcp_listener_runtime_last_heartbeat_timestamp_seconds",
            "Unix time of the last heartbeat received from each runtime's agent.",
            labels=["runtime_id"],
        )
        for runtime_id, seen in self._tracker.items():
            last.add_metric([runtime_id], seen)
        yield last
        yield GaugeMetricFamily(
            "kcp_listener_runtimes_with_heartbeat",
            "Runtimes that have sent at least one heartbeat to this listener.",
            value=len(self._tracker),
        )
        yield GaugeMetricFamily(
            "kcp_listener_stale_runtimes",
            "Runtimes whose last heartbeat is older than the configured maximum silence.",
            value=len(self._tracker.stale_runtimes()),
        )

    def describe(self) -> Iterator[Metric]:
        return iter(())
