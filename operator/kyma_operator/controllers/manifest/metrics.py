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
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge

from kyma_operator.api.meta import State
from kyma_operator.controllers.common.requeuemetrics import requeue_counter
from kyma_operator.runtime.request import Request


class ManifestMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._state = Gauge(
            "kyma_operator_manifest_state",
            "1 for the current state of each Manifest.",
            ["namespace", "name", "state"],
            registry=self.registry,
        )
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
        self._states: dict[Request, State] = {}
        self._requeues = requeue_counter(self.registry)  # shared with the Kyma controller

    def requeue(self, reasons: Iterable[tuple[str, str]]) -> None:
        """Count (reason, type) pairs in ``lifecycle_mgr_requeue_reason_total`` (``requeuereasons``)."""
        for reason, kind in reasons:
            self._requeues.labels(reason, kind).inc()

    def state(self, manifest: Request, state: State) -> None:
        previous = self._states.get(manifest)
        if previous == state:
            return
        if previous is not None:
            self._state.remove(manifest.namespace, manifest.name, previous.value)
        self._states[manifest] = state
        self._state.labels(manifest.namespace, manifest.name, state.value).set(1)

    def forget(self, manifest: Request) -> None:
        previous = self._states.pop(manifest, None)
        if previous is not None:
            self._state.remove(manifest.namespace, manifest.name, previous.value)

    def applied(self, count: int, *, drift: bool) -> None:
        if count:
            self._applied.inc(count)
            if drift:
                self._drift.inc(count)

    def pruned(self, count: int) -> None:
        if count:
            self._pruned.inc(count)
