"""What this process remembers of each Kyma between its reconciles: one record, one ``forget``.

Reconciles are level-based (they read the Kyma, its runtime and its Manifests every time); the
memory only saves work and carries the settle schedule:

* ``round``: the outcome of the last full runtime round (CRDs, runtime Kyma, agent) and the
  runtime Kyma's ``spec.modules``/``spec.channel`` it read. A reconcile woken by Manifest changes
  alone reuses it (the same flow, without re-reading the runtime): Manifest state reaches the
  Kyma's status in one KCP write instead of a ~100 ms runtime round.
* ``remote_spec`` / ``remote``: the runtime Kyma as last read (is a runtime event's change visible
  yet? see ``settle``).
* ``settle``: the pending re-read after a runtime event (``common.settle``).
* ``checks_due``: when the runtime's agent and catalog are to be checked, after a reconcile woken
  by edits alone wrote Manifests and left them out (``KymaReconciler._leave_checks``); a reconcile
  from that moment on does not reuse the round, and the first full one checks.
* ``crds_in_sync`` / ``catalog_in_sync``: digests of the runtime's CRDs and catalog as last found in
  sync, so that the next full reconcile reads their metadata only (``insync``).
* ``last_status`` / ``remote_written``: the KCP status as last written or found (compact JSON, only
  for a Kyma with a runtime Kyma), and the digest of what was last copied into the runtime Kyma (to
  skip unchanged copies).

A Kyma that is gone, deleted or whose shard moved to another replica is forgotten as a whole
(``KymaMemories.forget``), its observed agent health and metric series with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kyma_operator.agentinstall.readiness import AgentStatus
from kyma_operator.controllers.common.settle import Settle
from kyma_operator.controllers.kyma import status as st
from kyma_operator.controllers.kyma.heartbeat import ObservedHealth
from kyma_operator.controllers.kyma.insync import InSync
from kyma_operator.controllers.kyma.metrics import KymaMetrics
from kyma_operator.controllers.kyma.skrsync import RemoteKyma
from kyma_operator.controllers.kyma.triggers import KymaTrigger
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.request import Request

_ROUND_REUSERS = frozenset({KymaTrigger.MANIFEST_CHANGED})
_NOTES = frozenset({KymaTrigger.RUNTIME_EVENT_REREAD, KymaTrigger.RUNTIME_CHECKS_DUE})
_EDITS = frozenset({KymaTrigger.RUNTIME_EVENT, KymaTrigger.KYMA_CHANGED, KymaTrigger.MANIFEST_CHANGED})


def woken_by_edits(triggers: frozenset[KymaTrigger], look: int | None) -> bool:
    """A reconcile woken by edits alone (a runtime event or its re-read, a KCP Kyma edit, Manifest
    changes), not by a timer, a catalog change, the agent's health or an access Secret: such a
    reconcile may leave the runtime's agent and catalog checks for later (``checks_due``)."""
    causes = triggers - _NOTES
    return causes <= _EDITS and (bool(causes) or look is not None)


@dataclass(frozen=True)
class RuntimeRound:
    """From a Kyma's last full reconcile: the runtime's spec.modules/channel and the outcome of
    everything but the modules (agent, CRDs, heartbeat)."""

    spec_source: JSON
    base: st.Outcome
    agent: AgentStatus
    """The agent as last checked (a reconcile that leaves the check for later reports it)."""

    @property
    def agent_requeue(self) -> float | None:
        return self.agent.requeue_after


@dataclass(slots=True)
class KymaMemory:
    round: RuntimeRound | None = None
    remote_spec: str | None = None
    """Digest of the runtime Kyma's spec as the last reconcile read it."""
    remote: RemoteKyma | None = None
    remote_written: str | None = None
    """Digest of the status last copied into the runtime Kyma."""
    last_status: bytes | None = None
    """The KCP status as last written or found unchanged, compact JSON (copied into the runtime
    Kyma; only kept while ``remote`` is known)."""
    settle: Settle = field(default_factory=Settle)
    crds_in_sync: InSync | None = None
    catalog_in_sync: InSync | None = None
    """The runtime's CRDs and catalog as the last full reconcile found them in sync (``insync``)."""
    checks_due: float | None = None
    """Clock time from which the agent and catalog checks left out by a reconcile are due."""

    def reusable_round(
        self, triggers: frozenset[KymaTrigger], look: int | None, now: float
    ) -> RuntimeRound | None:
        """The last runtime round, if this reconcile may reuse it: woken by Manifest changes alone,
        no re-read due now, not before the first re-read of a runtime event (that one looks for
        a runtime write the event overtook; the later ones only cover a slow API server), and no
        left-out checks due (``checks_due``)."""
        if self.round is None or look is not None or self.settle.pending == 1:
            return None
        if self.checks_due is not None and now >= self.checks_due:
            return None
        causes = triggers - _NOTES
        return self.round if causes and causes <= _ROUND_REUSERS else None


class KymaMemories:
    """Every Kyma's ``KymaMemory``, with the per-Kyma state kept elsewhere (agent health seen by the
    heartbeat sweep, metric series) dropped by the same ``forget``."""

    def __init__(self, observed_health: ObservedHealth, metrics: KymaMetrics) -> None:
        self._memories: dict[Request, KymaMemory] = {}
        self.observed_health = observed_health
        self.metrics = metrics

    def __getitem__(self, request: Request) -> KymaMemory:
        memory = self._memories.get(request)
        if memory is None:
            memory = self._memories[request] = KymaMemory()
        return memory

    def get(self, request: Request) -> KymaMemory | None:
        return self._memories.get(request)

    def forget(self, request: Request) -> None:
        self._memories.pop(request, None)
        self.observed_health.forget(request)
        self.metrics.forget(request)

    def __len__(self) -> int:
        return len(self._memories)
