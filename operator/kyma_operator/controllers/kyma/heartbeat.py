"""Agent liveness per runtime, as the Kyma controller sees it (upstream #3524: silent agents).

The listener records each runtime's last heartbeat in memory (``kcp_listener.health``). The Kyma
reconcile turns it into condition ``SKRWatcherHeartbeat`` and picks its safety-net interval from
it: long (default 30 min) while the agent is alive, upstream's 5 min otherwise, because then events
may be lost and only polling notices changes.

A heartbeat that stops arriving changes nothing in the API, so nothing would wake the Kyma: a
healthy Kyma would notice only at its next 30-minute safety net. ``HeartbeatSweep`` closes that
gap: every ``interval`` it compares, in memory, each runtime's health with what the Kyma's last
reconcile saw and enqueues the Kymas whose health flipped (no API call; 5,000 Kymas are 5,000
dictionary look-ups).

The other direction needs no timer: a heartbeat that arrives from a runtime whose Kyma's last
reconcile saw its agent silent (never seen, or silent too long) is itself the news. The listener
hands every recorded heartbeat to ``HeartbeatSweep.beat``, which enqueues that one Kyma at once, so
``SKRWatcherHeartbeat`` turns True within a reconcile of the agent's first heartbeat instead of at
the next sweep (up to ``--heartbeat-sweep-interval``, 30 s, later). One dictionary look-up per
heartbeat; a Kyma not reconciled yet, or one that saw the agent alive, is left alone (its next
reconcile reads the health anyway, and a Kyma under failure backoff is not woken early).

``kyma_operator_agent_health_changes_total{now,noticed_by}`` counts these enqueues (a Kyma whose
agent's health differs from what its last reconcile saw): ``now`` alive or silent, ``noticed_by``
heartbeat or sweep. A Kyma still queued when the next heartbeat or sweep comes is counted again (the
queue runs it once). A burst of ``now="silent"`` is an outage of the path from the runtimes.
"""

from __future__ import annotations

import logging
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter

from kyma_operator.api import names
from kyma_operator.controllers.common.heartbeat import AgentHealth
from kyma_operator.controllers.kyma.config import DEFAULT_HEARTBEAT_SWEEP_INTERVAL
from kyma_operator.runtime.bulk import bulk_adds
from kyma_operator.runtime.clock import Clock, RealClock
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.source import Enqueuer

log = logging.getLogger(__name__)


class KymaCache(Protocol):
    def list(self, namespace: str | None = None) -> list[JSON]: ...


class ObservedHealth:
    """The agent health each Kyma's last reconcile used (written by the reconciler)."""

    def __init__(self) -> None:
        self._seen: dict[Request, bool] = {}

    def record(self, request: Request, healthy: bool) -> None:
        self._seen[request] = healthy

    def forget(self, request: Request) -> None:
        self._seen.pop(request, None)

    def get(self, request: Request) -> bool | None:
        return self._seen.get(request)

    def __len__(self) -> int:
        return len(self._seen)


class HeartbeatSweep:
    """A timer ``Source``: enqueue Kymas whose agent health differs from what their last reconcile saw."""

    def __init__(
        self,
        kymas: KymaCache,
        observed: ObservedHealth,
        health: AgentHealth,
        *,
        reason: str,
        namespace: str | None = None,
        interval: float = DEFAULT_HEARTBEAT_SWEEP_INTERVAL,
        clock: Clock | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self._kymas = kymas
        self._observed = observed
        self._health = health
        self._reason = reason
        self._namespace = namespace
        self.interval = interval
        self._clock = clock or RealClock()
        self._queue: Enqueuer | None = None
        self.sweeps = 0
        self.enqueued = 0
        self.revived = 0
        """Kymas enqueued by ``beat`` (an agent seen alive again)."""
        changes = Counter(
            "kyma_operator_agent_health_changes_total",
            "Kymas enqueued because their agent's health differs from what their last reconcile "
            "saw, by the health now (alive, silent) and what noticed it (heartbeat, sweep).",
            ["now", "noticed_by"],
            registry=registry,
        )
        self._changes = {
            (alive, by): changes.labels("alive" if alive else "silent", by)
            for alive in (True, False)
            for by in ("heartbeat", "sweep")
        }

    def bind(self, queue: Enqueuer) -> None:
        if self._queue is not None:
            raise RuntimeError("sweep is already bound to a controller")
        self._queue = queue

    def sweep(self) -> int:
        """One comparison over all Kymas; returns how many were enqueued."""
        queue = self._queue
        if queue is None:
            raise RuntimeError("sweep is not bound to a controller")
        self.sweeps += 1
        health = self._health
        count = 0
        # bulk work (runtime/bulk.py), like a resync: when the listener comes back after an outage,
        # every runtime's agent is seen again at once, and thousands of condition updates must not
        # go before a user's change
        with bulk_adds():
            for obj in self._kymas.list(self._namespace):
                meta = obj.get("metadata") or {}
                runtime_id = (meta.get("labels") or {}).get(names.RUNTIME_ID_LABEL)
                if not runtime_id or not meta.get("name"):
                    continue
                request = Request(meta.get("namespace") or "", meta["name"])
                seen = self._observed.get(request)
                if seen is not None and seen != (alive := health.healthy(runtime_id)):
                    queue.add(request, self._reason)
                    self._changes[alive, "sweep"].inc()
                    count += 1
        if count:
            log.info("agent heartbeat health changed for %d runtime(s): reconciling their Kymas", count)
        self.enqueued += count
        return count

    def beat(self, runtime_id: str, namespace: str, name: str) -> bool:
        """A heartbeat of ``runtime_id``, the runtime of Kyma ``namespace/name``, was just recorded:
        enqueue that Kyma when its last reconcile saw the agent silent and the agent counts as alive
        now. Bulk work (``runtime/bulk.py``): after a listener outage every agent comes back within
        one heartbeat interval, and those condition updates must not go before a user's change.
        Returns whether the Kyma was enqueued."""
        queue = self._queue
        if queue is None:
            return False
        request = Request(namespace, name)
        if self._observed.get(request) is not False or not self._health.healthy(runtime_id):
            return False
        with bulk_adds():
            queue.add(request, self._reason)
        self.revived += 1
        self._changes[True, "heartbeat"].inc()
        return True

    async def run(self) -> None:
        while True:
            await self._clock.sleep(self.interval)
            self.sweep()
