"""Why a Kyma reconcile ran, and the adapters through which the listener hands requests over.

A work queue keeps only keys, so "why" is lost once requests from several sources are deduplicated.
Every source of the Kyma controller therefore notes its reason in a ``TriggerLog`` before it adds
the request; the reconcile takes all reasons noted since its last run (a reconcile with none is a
requeue: backoff, readiness polling or the safety net). This is for logs and the local run's
output; reconcilers stay level-based and never branch on it.

* ``KymaEventSink``: the listener's ``RequestSink`` for Kymas, over the controller's channel source;
  notes "runtime event" and tells observers (the local run prints each routed event).
* ``ManifestRequestLog``: the listener's ``RequestSink`` for Manifests when the operator runs
  without a Manifest controller (no module source configured): a targeted Manifest request is
  logged and counted (``kyma_operator_manifest_requests_unhandled_total``) instead of silently
  dropped. With the controller, its ``ManifestEventSink`` takes the requests.
* ``NotingQueue``: the fan-out's ``DelayingQueue`` over the controller's work queue.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter

from kcp_listener.routing import ObjectRef
from kyma_operator.runtime.controller import ChannelSource
from kyma_operator.runtime.request import Request

log = logging.getLogger(__name__)

RUNTIME_EVENT = "runtime event"
RUNTIME_EVENT_REREAD = "runtime event, re-read"
KYMA_CHANGED = "KCP Kyma changed"
WATCHER_FANOUT = "Watcher change fan-out"
ACCESS_SECRET = "access Secret changed"
HEARTBEAT = "agent heartbeat health changed"

_MAX_REASONS = 8


class TriggerLog:
    """Reasons noted per request until its next reconcile takes them."""

    def __init__(self) -> None:
        self._reasons: dict[Request, dict[str, None]] = {}

    def note(self, request: Request, reason: str) -> None:
        reasons = self._reasons.setdefault(request, {})
        if len(reasons) < _MAX_REASONS:
            reasons[reason] = None

    def take(self, request: Request) -> tuple[str, ...]:
        return tuple(self._reasons.pop(request, {}))

    def __len__(self) -> int:
        return len(self._reasons)


class KymaEventSink:
    """``kcp_listener.routing.RequestSink`` for Kyma requests; see the module docstring."""

    def __init__(self, channel: ChannelSource, triggers: TriggerLog) -> None:
        self._channel = channel
        self._triggers = triggers
        self.observers: list[Callable[[Request], None]] = []
        """Called for every request the listener hands over (before it is queued)."""

    def offer(self, ref: ObjectRef) -> bool:
        request = Request(ref.namespace, ref.name)
        self._triggers.note(request, RUNTIME_EVENT)
        for observer in self.observers:
            observer(request)
        return self._channel.offer(request)

    def depth(self) -> int:
        return len(self._channel)


class ManifestRequestLog:
    """``RequestSink`` for Manifest requests until the Manifest controller exists: log and count."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.count = 0
        self._counter: Counter | None = None
        if registry is not None:
            self._counter = Counter(
                "kyma_operator_manifest_requests_unhandled",
                "Targeted Manifest reconciles requested by the listener while no Manifest controller runs.",
                registry=registry,
            )

    def offer(self, ref: ObjectRef) -> bool:
        self.count += 1
        if self._counter is not None:
            self._counter.inc()
        log.info("listener asked to reconcile Manifest %s: no Manifest controller yet, request counted", ref)
        return True

    def depth(self) -> int:
        return 0


class DelayingQueue(Protocol):
    def add_after(self, key: Request, delay: float) -> None: ...


class NotingQueue:
    """A ``DelayingQueue`` that notes ``reason`` for every request before delegating."""

    def __init__(self, queue: DelayingQueue, triggers: TriggerLog, reason: str) -> None:
        self._queue = queue
        self._triggers = triggers
        self._reason = reason

    def add_after(self, key: Request, delay: float) -> None:
        self._triggers.note(key, self._reason)
        self._queue.add_after(key, delay)
