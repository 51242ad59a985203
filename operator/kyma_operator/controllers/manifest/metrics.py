"""Prometheus metrics of the Manifest controller.

* ``kyma_operator_manifest_state{namespace,name,state}``: 1 for each Manifest's current state;
* ``kyma_operator_manifest_objects_applied_total``: runtime objects written by server-side apply
  (creations and repairs; a steady reconcile writes none);
* ``kyma_operator_manifest_drift_repairs_total``: of those, objects re-applied although the module
  version had been synced before (drift in the runtime);
* ``kyma_operator_manifest_objects_pruned_total``: delete requests of prune and uninstall;
* ``lifecycle_mgr_requeue_reason_total{requeue_reason,requeue_type}``: upstream's Manifest requeue
  reasons (``requeuereasons``), in the counter the Kyma controller shares.
Pull-cache hits and misses are counted by the source (``oci``).

The state series is rendered at scrape time from the controller's one record per Manifest (as the
Kyma states, ``controllers.kyma.metrics``), on ``/metrics`` as text 100 Manifests at a time
(``runtime.exposition``), not kept as a prometheus_client child per Manifest.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from kyma_operator.api.meta import State
from kyma_operator.controllers.common.requeuemetrics import requeue_counter
from kyma_operator.runtime.exposition import chunked, escape, family_header
from kyma_operator.runtime.request import Request

_STATE = "kyma_operator_manifest_state"
_STATE_HELP = "1 for the current state of each Manifest."


class ManifestMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._states: dict[Request, State] = {}
        self.registry.register(_StateCollector(self._states))
        self._applied = Counter(
            "kyma_operator_manifest_objects_applied",
            "Runtime objects written by server-side apply (created or repaired).",
            registry=self.registry,
        )
        self._drift = Counter(
            "kyma_operator_manifest_drift_repairs",
            "Runtime objects re-applied after drift of an already synced module version.",
            registry=self.registry,
        )
        self._pruned = Counter(
            "kyma_operator_manifest_objects_pruned",
            "Delete requests for runtime objects no longer rendered (prune and uninstall).",
            registry=self.registry,
        )
        self._requeues = requeue_counter(self.registry)  # shared with the Kyma controller

    def requeue(self, reasons: Iterable[tuple[str, str]]) -> None:
        """Count (reason, type) pairs in ``lifecycle_mgr_requeue_reason_total`` (``requeuereasons``)."""
        for reason, kind in reasons:
            self._requeues.labels(reason, kind).inc()

    def state(self, manifest: Request, state: State) -> None:
        self._states[manifest] = state

    def forget(self, manifest: Request) -> None:
        self._states.pop(manifest, None)

    def applied(self, count: int, *, drift: bool) -> None:
        if count:
            self._applied.inc(count)
            if drift:
                self._drift.inc(count)

    def pruned(self, count: int) -> None:
        if count:
            self._pruned.inc(count)


class _StateCollector:
    """``kyma_operator_manifest_state``: as metrics (``collect``) or as text in chunks (``expose``,
    a ``runtime.exposition.BulkCollector``)."""

    def __init__(self, states: dict[Request, State]) -> None:
        self._states = states

    def describe(self) -> list[Metric]:
        return [GaugeMetricFamily(_STATE, _STATE_HELP, labels=["namespace", "name", "state"])]

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(_STATE, _STATE_HELP, labels=["namespace", "name", "state"])
        for request, state in list(self._states.items()):
            family.add_metric([request.namespace, request.name, state.value], 1.0)
        yield family

    def expose(self) -> Iterator[str]:
        """What ``generate_latest`` renders of ``collect()`` (labels sorted by name)."""
        yield family_header(_STATE, _STATE_HELP)
        states = self._states
        for chunk in chunked(list(states)):  # keys only: no tuple per Manifest (controllers.kyma.metrics)
            yield "".join(
                f'{_STATE}{{name="{escape(r.name)}",namespace="{escape(r.namespace)}",state="{s}"}} 1.0\n'
                for r in chunk
                if (s := states.get(r)) is not None
            )
