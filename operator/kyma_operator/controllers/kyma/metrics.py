"""Upstream's Kyma metrics, with upstream's names and labels, so existing dashboards and alerts work.

* ``lifecycle_mgr_kyma_state{kyma_name,state,shoot,instance_id}``: 1 for the Kyma's current state,
  0 for the others (upstream sets every state so a query for ``state="Error"`` finds zeros too);
* ``lifecycle_mgr_module_state{module_name,kyma_name,state,shoot,instance_id}``: the same per
  module entry of ``status.modules``; series of modules that left the status are removed;
* ``lifecycle_mgr_requeue_reason_total{requeue_reason,requeue_type}``: why a Kyma reconcile asks
  to run again, ``intended`` (a planned poll) or ``unexpected`` (a failure);
* ``lifecycle_mgr_mandatory_module_state{module_name,kyma_name,state}``: mandatory modules.

``shoot`` is the Kyma's ``skr-domain`` annotation and ``instance_id`` its
``kyma-project.io/instance-id`` label (empty when missing). A deleted Kyma's series are removed at
once (upstream runs a cleanup job every 15 minutes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.meta import State
from kyma_operator.runtime.request import Request

KYMA_STATES = (State.READY, State.PROCESSING, State.WARNING, State.ERROR, State.DELETING)
MODULE_STATES = (*KYMA_STATES, State.UNMANAGED)

INTENDED = "intended"
UNEXPECTED = "unexpected"


class KymaMetrics:
    """Writes the metrics above into ``registry`` (a no-op without one)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self._enabled = registry is not None
        self._kyma_labels: dict[Request, tuple[str, str]] = {}
        self._modules: dict[Request, set[str]] = {}
        self._mandatory: dict[Request, set[str]] = {}
        if registry is None:
            return
        self.kyma_state = Gauge(
            "lifecycle_mgr_kyma_state",
            "Kyma state: 1 for the current state, 0 for the others.",
            ["kyma_name", "state", "shoot", "instance_id"],
            registry=registry,
        )
        self.module_state = Gauge(
            "lifecycle_mgr_module_state",
            "Module state per Kyma: 1 for the current state, 0 for the others.",
            ["module_name", "kyma_name", "state", "shoot", "instance_id"],
            registry=registry,
        )
        self.mandatory_state = Gauge(
            "lifecycle_mgr_mandatory_module_state",
            "Mandatory module state per Kyma: 1 for the current state, 0 for the others.",
            ["module_name", "kyma_name", "state"],
            registry=registry,
        )
        self.requeues = Counter(
            "lifecycle_mgr_requeue_reason",
            "Why Kyma reconciles asked to run again.",
            ["requeue_reason", "requeue_type"],
            registry=registry,
        )

    @staticmethod
    def _identity(kyma: Kyma) -> tuple[str, str]:
        return kyma.annotations.get(names.SKR_DOMAIN_ANNOTATION, ""), kyma.labels.get(
            names.INSTANCE_ID_LABEL, ""
        )

    def requeue(self, reason: str, kind: str = INTENDED) -> None:
        if self._enabled:
            self.requeues.labels(reason, kind).inc()

    def record(
        self,
        kyma: Kyma,
        state: State,
        modules: Iterable[tuple[str, State]] | None,
        mandatory: Mapping[str, State] | None = None,
    ) -> None:
        """The Kyma's state and (when the module half ran) its modules' states."""
        if not self._enabled:
            return
        request = Request(kyma.namespace, kyma.name)
        shoot, instance = self._identity(kyma)
        previous = self._kyma_labels.get(request)
        if previous is not None and previous != (shoot, instance):
            self.forget(request)
        self._kyma_labels[request] = (shoot, instance)
        for candidate in KYMA_STATES:
            self.kyma_state.labels(kyma.name, candidate.value, shoot, instance).set(
                1 if candidate is state else 0
            )
        if modules is not None:
            current: set[str] = set()
            for module, module_state in modules:
                current.add(module)
                for candidate in MODULE_STATES:
                    self.module_state.labels(module, kyma.name, candidate.value, shoot, instance).set(
                        1 if candidate is module_state else 0
                    )
            for gone in self._modules.get(request, set()) - current:
                self._remove_module(gone, kyma.name, shoot, instance)
            self._modules[request] = current
        if mandatory is not None:
            seen = set(mandatory)
            for module, module_state in mandatory.items():
                for candidate in MODULE_STATES:
                    self.mandatory_state.labels(module, kyma.name, candidate.value).set(
                        1 if candidate is module_state else 0
                    )
            for gone in self._mandatory.get(request, set()) - seen:
                for candidate in MODULE_STATES:
                    _remove(self.mandatory_state, gone, kyma.name, candidate.value)
            self._mandatory[request] = seen

    def _remove_module(self, module: str, kyma_name: str, shoot: str, instance: str) -> None:
        for candidate in MODULE_STATES:
            _remove(self.module_state, module, kyma_name, candidate.value, shoot, instance)

    def forget(self, request: Request) -> None:
        """Remove every series of a Kyma (deleted, or its identity labels changed)."""
        if not self._enabled:
            return
        labels = self._kyma_labels.pop(request, None)
        if labels is None:
            return
        shoot, instance = labels
        for candidate in KYMA_STATES:
            _remove(self.kyma_state, request.name, candidate.value, shoot, instance)
        for module in self._modules.pop(request, set()):
            self._remove_module(module, request.name, shoot, instance)
        for module in self._mandatory.pop(request, set()):
            for candidate in MODULE_STATES:
                _remove(self.mandatory_state, module, request.name, candidate.value)


def _remove(metric: Gauge, *labels: str) -> None:
    with contextlib.suppress(KeyError):
        metric.remove(*labels)
