"""Why a Kyma reconcile ran: the one typed definition of the Kyma controller's triggers.

Each source of the Kyma controller (see ``setup.py``) adds its requests with one ``KymaTrigger``
(``kyma_operator.runtime.triggers``); the reconcile logs them and the local run prints them. A
reconcile with none is a requeue (backoff, readiness polling or the safety net). Reconciles stay
level-based: a trigger never selects what a full reconcile would not do. The reconciler reads them
only as members of this enum (a renamed trigger fails type checking), for three things: a runtime
event starts the settle re-reads (``common.settle``), a reconcile woken by Manifest changes alone
may reuse the last runtime round (``memory.KymaMemory.reusable_round``), and a reconcile woken by
edits alone may leave the runtime's agent and catalog checks for a moment later
(``memory.woken_by_edits``).

``ManifestRequestLog`` is the listener's Manifest intake when the operator runs without a Manifest
controller (``--manifest-controller-enabled=false``): a targeted Manifest request is logged and
counted (``kyma_operator_manifest_requests_unhandled_total``) instead of silently dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter

from kyma_operator.controllers.common import triggers as shared
from kyma_operator.controllers.watcher.fanout import FANOUT_REASON
from kyma_operator.runtime.request import Request

log = logging.getLogger(__name__)


class KymaTrigger(StrEnum):
    RUNTIME_EVENT = shared.RUNTIME_EVENT
    """The listener's intake: a signed event from the runtime's agent."""
    RUNTIME_EVENT_REREAD = shared.RUNTIME_EVENT_REREAD
    """A settle re-read after a runtime event (noted for logs; scheduled in the Kyma's memory)."""
    KYMA_CHANGED = "KCP Kyma changed"
    WATCHER_FANOUT = FANOUT_REASON
    ACCESS_SECRET = shared.ACCESS_SECRET
    HEARTBEAT = "agent heartbeat health changed"
    MANIFEST_CHANGED = shared.MANIFEST_CHANGED
    CATALOG_CHANGED = "module catalog changed"
    CATALOG_REFRESH = "runtime catalog refresh"
    IMAGE_PULL_SECRET = "SKR image pull Secret changed"
    """The ``--skr-image-pull-secret`` Secret in KCP changed: every runtime's copy follows."""
    RUNTIME_CHECKS_DUE = "runtime checks due"
    """The agent and catalog checks that a reconcile writing Manifests left for later
    (``KymaMemory.checks_due``; noted for logs, like the settle re-read)."""
    SHARD_ACQUIRED = shared.SHARD_ACQUIRED
    """This replica started to hold the Kyma's shard: one full reconcile."""

    @classmethod
    def of(cls, reasons: Iterable[str]) -> frozenset[KymaTrigger]:
        """The reasons of a reconcile as members (a reason of no member is ignored)."""
        return shared.members_of(cls, reasons)


class ManifestRequestLog:
    """The listener's Manifest intake until the Manifest controller exists: log and count."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.count = 0
        self._counter: Counter | None = None
        if registry is not None:
            self._counter = Counter(
                "kyma_operator_manifest_requests_unhandled",
                "Targeted Manifest reconciles requested by the listener while no Manifest controller runs.",
                registry=registry,
            )

    def offer(self, request: Request) -> bool:
        self.count += 1
        if self._counter is not None:
            self._counter.inc()
        log.info(
            "listener asked to reconcile Manifest %s: no Manifest controller yet, request counted", request
        )
        return True

    def depth(self) -> int:
        return 0

    coalesced = 0
