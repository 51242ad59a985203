"""Upstream's Kyma metrics, with upstream's names and labels, so existing dashboards and alerts work.

* ``lifecycle_mgr_kyma_state{kyma_name,state,shoot,instance_id}``: 1 for the Kyma's current state,
  0 for the others (upstream sets every state so a query for ``state="Error"`` finds zeros too);
* ``lifecycle_mgr_module_state{module_name,kyma_name,state,shoot,instance_id}``: the same per
  module entry of ``status.modules``; series of modules that left the status are removed;
* ``lifecycle_mgr_requeue_reason_total{requeue_reason,requeue_type}``: why a Kyma reconcile asks
  to run again, ``intended`` (a planned poll) or ``unexpected`` (a failure); shared with the
  Manifest controller (``common.requeuemetrics``); ``kyma_deletion`` once per finished deletion;
* ``lifecycle_mgr_mandatory_module_state{module_name,kyma_name,state}``: mandatory modules;
* ``lifecycle_mgr_mandatory_modules``: how many mandatory modules the catalog offers (upstream's
  count of mandatory ModuleTemplates), read from the catalog informers at scrape time.

``shoot`` is the Kyma's ``skr-domain`` annotation and ``instance_id`` its
``kyma-project.io/instance-id`` label (empty when missing). A deleted Kyma's series are removed at
once (upstream runs a cleanup job every 15 minutes).

The state series are rendered at scrape time from one small record per Kyma (a custom collector),
not kept as prometheus_client children: "every state of every module of every Kyma" is 35 series
per Kyma with 5 modules, ~1 KB each as children, ~175 MB at 5,000 Kymas (benchmarks/results/scale.md);
the record is a few hundred bytes, and the exposition is the same. On ``/metrics`` the collector
renders that text itself, 100 Kymas at a time (``runtime.exposition``: ``generate_latest`` would
build a sample object per line, 4.7 s of CPU and +129 MB per scrape at 5,000 Kymas).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.meta import State
from kyma_operator.controllers.common.requeuemetrics import INTENDED, UNEXPECTED, requeue_counter
from kyma_operator.runtime.exposition import chunked, escape, family_header
from kyma_operator.runtime.request import Request

KYMA_STATES = (State.READY, State.PROCESSING, State.WARNING, State.ERROR, State.DELETING)
MODULE_STATES = (*KYMA_STATES, State.UNMANAGED)

__all__ = ["INTENDED", "UNEXPECTED", "KymaMetrics"]


class KymaMetrics:
    """Writes the metrics above into ``registry`` (a no-op without one)."""

    def __init__(
        self, registry: CollectorRegistry | None = None, *, mandatory_count: Callable[[], int] | None = None
    ) -> None:
        self._enabled = registry is not None
        self._kymas: dict[Request, tuple[State, str, str]] = {}
        """Per Kyma: (state, shoot, instance_id)."""
        self._modules: dict[Request, dict[str, State]] = {}
        self._mandatory: dict[Request, dict[str, State]] = {}
        if registry is None:
            return
        registry.register(_StateCollector(self))
        if mandatory_count is not None:
            registry.register(_MandatoryCount(mandatory_count))
        self.requeues = requeue_counter(registry)  # shared with the Manifest controller

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
        self._kymas[request] = (state, *self._identity(kyma))
        if modules is not None:
            self._modules[request] = dict(modules)
        if mandatory is not None:
            self._mandatory[request] = dict(mandatory)

    def forget(self, request: Request) -> None:
        """Remove every series of a Kyma (deleted, or its identity labels changed)."""
        self._kymas.pop(request, None)
        self._modules.pop(request, None)
        self._mandatory.pop(request, None)


_KYMA_STATE = (
    "lifecycle_mgr_kyma_state",
    "Kyma state: 1 for the current state, 0 for the others.",
    ["kyma_name", "state", "shoot", "instance_id"],
)
_MODULE_STATE = (
    "lifecycle_mgr_module_state",
    "Module state per Kyma: 1 for the current state, 0 for the others.",
    ["module_name", "kyma_name", "state", "shoot", "instance_id"],
)
_MANDATORY_STATE = (
    "lifecycle_mgr_mandatory_module_state",
    "Mandatory module state per Kyma: 1 for the current state, 0 for the others.",
    ["module_name", "kyma_name", "state"],
)


class _StateCollector:
    """The state series of ``KymaMetrics``, rendered at scrape time: as metrics (``collect``) or
    directly as text, in chunks (``expose``, a ``runtime.exposition.BulkCollector``)."""

    def __init__(self, metrics: KymaMetrics) -> None:
        self._metrics = metrics

    def describe(self) -> list[Metric]:
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        kyma_state, module_state, mandatory_state = self._families()
        m = self._metrics
        for request, (state, shoot, instance) in list(m._kymas.items()):
            name = request.name
            for candidate in KYMA_STATES:
                kyma_state.add_metric(
                    [name, candidate.value, shoot, instance], 1.0 if candidate is state else 0.0
                )
            for module, module_now in (m._modules.get(request) or {}).items():
                for candidate in MODULE_STATES:
                    module_state.add_metric(
                        [module, name, candidate.value, shoot, instance],
                        1.0 if candidate is module_now else 0.0,
                    )
        for request, mandatory in list(m._mandatory.items()):
            for module, module_now in mandatory.items():
                for candidate in MODULE_STATES:
                    mandatory_state.add_metric(
                        [module, request.name, candidate.value], 1.0 if candidate is module_now else 0.0
                    )
        yield from (kyma_state, module_state, mandatory_state)

    def expose(self) -> Iterator[str]:
        """What ``generate_latest`` renders of ``collect()``, ``exposition.CHUNK_OBJECTS`` Kymas at a time
        (labels in its order: sorted by name)."""
        m = self._metrics
        # the keys only, each record looked up as its chunk is rendered: a snapshot of the items
        # would allocate a tuple per Kyma, enough to set off full garbage collections mid-scrape
        kymas = list(m._kymas)
        yield family_header(_KYMA_STATE[0], _KYMA_STATE[1])
        for chunk in chunked(kymas):
            lines: list[str] = []
            for request in chunk:
                if (record := m._kymas.get(request)) is None:
                    continue  # forgotten since the scrape began
                state, shoot, instance = record
                head = f'{_KYMA_STATE[0]}{{{_ids(request, instance)},shoot="{escape(shoot)}",state="'
                lines.extend(f'{head}{c.value}"}} {_value(c is state)}\n' for c in KYMA_STATES)
            yield "".join(lines)
        yield family_header(_MODULE_STATE[0], _MODULE_STATE[1])
        for chunk in chunked(kymas):
            lines = []
            for request in chunk:
                record, modules = m._kymas.get(request), m._modules.get(request)
                if record is None or not modules:
                    continue
                _, shoot, instance = record
                head = f"{_MODULE_STATE[0]}{{{_ids(request, instance)},module_name="
                tail = f'",shoot="{escape(shoot)}",state="'
                for module, module_now in modules.items():
                    prefix = f'{head}"{escape(module)}{tail}'
                    lines.extend(f'{prefix}{c.value}"}} {_value(c is module_now)}\n' for c in MODULE_STATES)
            yield "".join(lines)
        yield family_header(_MANDATORY_STATE[0], _MANDATORY_STATE[1])
        for mandatory_chunk in chunked(list(m._mandatory)):
            lines = []
            for request in mandatory_chunk:
                name = escape(request.name)
                for module, module_now in (m._mandatory.get(request) or {}).items():
                    prefix = (
                        f'{_MANDATORY_STATE[0]}{{kyma_name="{name}",module_name="{escape(module)}",state="'
                    )
                    lines.extend(f'{prefix}{c.value}"}} {_value(c is module_now)}\n' for c in MODULE_STATES)
            yield "".join(lines)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(*_KYMA_STATE[:2], labels=_KYMA_STATE[2]),
            GaugeMetricFamily(*_MODULE_STATE[:2], labels=_MODULE_STATE[2]),
            GaugeMetricFamily(*_MANDATORY_STATE[:2], labels=_MANDATORY_STATE[2]),
        )


def _ids(request: Request, instance: str) -> str:
    """The labels that sort before the others: ``instance_id`` and ``kyma_name``."""
    return f'instance_id="{escape(instance)}",kyma_name="{escape(request.name)}"'


def _value(current: bool) -> str:
    return "1.0" if current else "0.0"


class _MandatoryCount:
    """``lifecycle_mgr_mandatory_modules`` at scrape time."""

    def __init__(self, count: Callable[[], int]) -> None:
        self._count = count

    def describe(self) -> list[Metric]:
        return [self._family()]

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        family.add_metric([], float(self._count()))
        yield family

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "lifecycle_mgr_mandatory_modules", "Indicates the count of mandatory ModuleTemplates"
        )
