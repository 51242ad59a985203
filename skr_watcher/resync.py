"""When to send a RESYNC event: once per outage or loss, as soon as KCP answers again.

Events can be lost while the agent cannot deliver them (queue overflow, definitive rejections) and
KCP may have missed changes while it was unreachable. A RESYNC event tells the listener to reconcile
the runtime's Kyma and all its Manifests, which covers every change before its delivery. This
tracker makes sure there is exactly one such event per manager and incident: it is scheduled on the
first successful answer after the incident and cleared when it is delivered.
"""

from __future__ import annotations

import datetime
from enum import Enum

from kyma_wire.events import AgentEvent, GroupVersionKind, ObjectKey, Operation
from kyma_wire.names import DEFAULT_REMOTE_KYMA_NAME, OPERATOR_GROUP, OPERATOR_VERSION, SKR_NAMESPACE

RUNTIME_KYMA = ObjectKey(namespace=SKR_NAMESPACE, name=DEFAULT_REMOTE_KYMA_NAME)
KYMA_GVK = GroupVersionKind(group=OPERATOR_GROUP, version=OPERATOR_VERSION, kind="Kyma")


def resync_event(observed_at: datetime.datetime) -> AgentEvent:
    """The runtime's Kyma ``kyma-system/default`` with operation RESYNC."""
    return AgentEvent(
        watched=RUNTIME_KYMA, watched_gvk=KYMA_GVK, operation=Operation.RESYNC, observed_at=observed_at
    )


class _State(Enum):
    NEEDED = "needed"
    SCHEDULED = "scheduled"


class ResyncTracker:
    """Per-manager state machine: (clean) -> NEEDED -> SCHEDULED -> (clean)."""

    def __init__(self) -> None:
        self._state: dict[str, _State] = {}

    def mark(self, manager: str) -> None:
        """Something may have been missed (unreachable KCP, dropped event). A RESYNC that is
        already scheduled still covers it, because it is delivered later."""
        self._state.setdefault(manager, _State.NEEDED)

    def should_schedule(self, manager: str) -> bool:
        """Call after KCP answered successfully for ``manager``. True means: queue a RESYNC now."""
        if self._state.get(manager) is _State.NEEDED:
            self._state[manager] = _State.SCHEDULED
            return True
        return False

    def schedule(self, manager: str) -> None:
        """A RESYNC was queued without waiting for a success (agent start)."""
        self._state[manager] = _State.SCHEDULED

    def delivered(self, manager: str) -> None:
        self._state.pop(manager, None)

    def lost(self, manager: str) -> None:
        """The scheduled RESYNC was dropped from the queue (overflow): send another one later."""
        self._state[manager] = _State.NEEDED

    def rejected(self, manager: str) -> None:
        """KCP definitively refused the RESYNC: give up rather than loop on it."""
        self._state.pop(manager, None)

    def pending(self) -> dict[str, str]:
        return {manager: state.value for manager, state in self._state.items()}
