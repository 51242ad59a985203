"""Why a Kyma reconcile ran: the reasons the Kyma controller's sources add requests with.

Each source of the Kyma controller (see ``setup.py``) adds its requests with one of these reasons
(``kyma_operator.runtime.triggers``); the reconcile logs them and the local run prints them. A
reconcile with none is a requeue (backoff, readiness polling or the safety net).

``ManifestRequestLog`` is the listener's Manifest intake when the operator runs without a Manifest
controller (``--manifest-controller-enabled=false``): a targeted Manifest request is logged and
counted (``kyma_operator_manifest_requests_unhandled_total``) instead of silently dropped.
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter

from kyma_operator.controllers.watcher.fanout import FANOUT_REASON
from kyma_operator.runtime.request import Request

log = logging.getLogger(__name__)

RUNTIME_EVENT = "runtime event"
RUNTIME_EVENT_REREAD = "runtime event, re-read"
RUNTIME_EVENT_REREADS = tuple(f"{RUNTIME_EVENT_REREAD} {n}" for n in (1, 2, 3))
"""The trigger notes of the re-reads after a runtime event (one per ``event_settle_delays``)."""
KYMA_CHANGED = "KCP Kyma changed"
WATCHER_FANOUT = FANOUT_REASON
ACCESS_SECRET = "access Secret changed"
HEARTBEAT = "agent heartbeat health changed"


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
