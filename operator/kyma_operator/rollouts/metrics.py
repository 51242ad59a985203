"""Fleet-rollout metrics (docs/rollouts.md §10.3), exported by the leader.

Why a collector over the run informer for the gauges: a run's phase, frontier and counts are in
its status already (the leader wrote them); rendering them at scrape time from the informer keeps
one source of truth and drops a deleted run's series at once, as the Kyma metrics do. The counters
and histograms (halts, reverts, halt latency, wave duration, Manifest writes) count transitions the
leader records when it writes them, so a replayed reconcile does not count twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from kyma_operator.runtime.informer import Informer

PHASES = (
    "Progressing",
    "Soaking",
    "AwaitingApproval",
    "Paused",
    "Halted",
    "Reverting",
    "Reverted",
    "Completed",
    "Aborted",
    "Superseded",
    "Invalid",
)
KYMA_STATES = ("upgraded", "ready", "failed", "waiting", "pending")
HALT_REASONS = ("failure_budget", "progress_deadline", "revert_failed")

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
_WAVE_BUCKETS = (1.0, 5.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 4 * 3600.0, 24 * 3600.0)


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


class RolloutMetrics:
    """The §10.3 metrics in ``registry`` (no-ops without one); gauges read ``rollouts`` at scrape time."""

    def __init__(self, registry: CollectorRegistry | None, rollouts: Informer | None = None) -> None:
        self.enabled = registry is not None
        if registry is None:
            return
        if rollouts is not None:
            registry.register(_RunCollector(rollouts))
        self.halts = Counter(
            "kyma_operator_rollout_halts",
            "Rollout runs halted, by module and reason.",
            ["module", "reason"],
            registry=registry,
        )
        self.halt_latency = Histogram(
            "kyma_operator_rollout_halt_latency_seconds",
            "From the first failure seen in a Manifest to the halt written.",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.wave_duration = Histogram(
            "kyma_operator_rollout_wave_duration_seconds",
            "From a wave's release to its soak passed.",
            ["module"],
            buckets=_WAVE_BUCKETS,
            registry=registry,
        )
        self.reverts = Counter(
            "kyma_operator_rollout_reverts",
            "Rollout runs that started a revert.",
            ["module"],
            registry=registry,
        )
        self.manifest_writes = Counter(
            "kyma_operator_rollout_manifest_writes",
            "Manifest writes a rollout caused: to the new version (upgrade) or back (revert).",
            ["module", "kind"],
            registry=registry,
        )
        self.fleet_view_running = Gauge(
            "kyma_operator_rollout_fleet_view_running",
            "1 while the leader's own fleet-wide Kyma and Manifest view for rollouts runs "
            "(shard-scoped caches; run only while a run is unfinished or a start is being decided).",
            registry=registry,
        )

    def halted(self, module: str, reason: str, latency: float | None) -> None:
        if not self.enabled:
            return
        self.halts.labels(module, reason).inc()
        if latency is not None:
            self.halt_latency.observe(max(0.0, latency))

    def reverted(self, module: str) -> None:
        if self.enabled:
            self.reverts.labels(module).inc()

    def wave_soaked(self, module: str, seconds: float) -> None:
        if self.enabled:
            self.wave_duration.labels(module).observe(max(0.0, seconds))

    def fleet_view(self, running: bool) -> None:
        if self.enabled:
            self.fleet_view_running.set(1 if running else 0)

    def manifest_written(self, module: str, kind: str) -> None:
        if self.enabled:
            self.manifest_writes.labels(module, kind).inc()


class _RunCollector:
    """``kyma_operator_rollout_phase``, ``_wave`` and ``_kymas`` from the runs' status."""

    def __init__(self, rollouts: Informer) -> None:
        self._rollouts = rollouts

    def describe(self) -> list[Metric]:
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        phase, wave, kymas = self._families()
        for run in self._rollouts.list():
            meta, spec, status = _dict(run.get("metadata")), _dict(run.get("spec")), _dict(run.get("status"))
            name = str(meta.get("name") or "")
            module, channel = str(spec.get("module") or ""), str(spec.get("channel") or "")
            current = str(status.get("phase") or "")
            for candidate in PHASES:
                phase.add_metric(
                    [
                        name,
                        module,
                        channel,
                        str(spec.get("fromVersion") or ""),
                        str(spec.get("toVersion") or ""),
                        candidate,
                    ],
                    1.0 if candidate == current else 0.0,
                )
            frontier = _dict(status.get("frontier"))
            wave.add_metric([name, module, channel], float(frontier.get("wave") or 0))
            for entry in status.get("waves") or []:
                entry = _dict(entry)
                for state in KYMA_STATES:
                    kymas.add_metric(
                        [name, str(entry.get("name") or ""), state], float(entry.get(state) or 0)
                    )
            totals = _dict(status.get("totals"))
            kymas.add_metric([name, "", "held"], float(totals.get("held") or 0))
        yield from (phase, wave, kymas)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "kyma_operator_rollout_phase",
                "Rollout run phase: 1 for the current phase, 0 for the others.",
                labels=["rollout", "module", "channel", "from_version", "to_version", "phase"],
            ),
            GaugeMetricFamily(
                "kyma_operator_rollout_wave",
                "Index of the rollout run's frontier wave.",
                labels=["rollout", "module", "channel"],
            ),
            GaugeMetricFamily(
                "kyma_operator_rollout_kymas",
                "Kymas of a rollout run per wave and state (held: not in a released wave).",
                labels=["rollout", "wave", "state"],
            ),
        )
