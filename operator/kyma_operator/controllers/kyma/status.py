"""What the watcher part of a Kyma reconcile writes into ``Kyma.status``: pure functions, no I/O.

* ``webhook_condition`` maps the installer's ``AgentStatus`` to condition ``SKRWebhook`` and the
  Kyma state with upstream's semantics: agent ready -> True / Ready; not ready yet -> False /
  Processing; pod in CrashLoopBackOff or ImagePullBackOff, invalid runtime data or a failed
  installation -> False / Error. Unlike upstream (reason always ``Ready``), the reason says what
  is wrong, e.g. ``AccessSecretNotFound`` or ``DeploymentNotReady``.
* ``heartbeat_condition`` (ours; upstream leaves a silent agent undetected, #3524): whether the
  runtime's agent sends heartbeats. It is informational and does not change the state, since a
  runtime can be fine while its agent is briefly unreachable; it shortens the safety-net interval.
* ``next_status`` merges desired conditions into the current status and returns ``None`` when
  nothing would change, so a steady-state reconcile writes nothing. Messages are fixed texts (no
  timestamps or counters) for the same reason; ``lastTransitionTime`` only moves on a status flip.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from kyma_operator.agentinstall import readiness
from kyma_operator.agentinstall.readiness import AgentStatus
from kyma_operator.api.kyma import KYMA_CONDITION_REASON, KymaConditionType, KymaStatus, ModuleStatus
from kyma_operator.api.meta import Condition, ConditionStatus, LastOperation, State, set_condition

SKR_WEBHOOK = KymaConditionType.SKR_WEBHOOK.value
CRDS_SYNC = KymaConditionType.CRDS_SYNC.value
WATCHER_HEARTBEAT = "SKRWatcherHeartbeat"
"""Ours: whether the runtime's agent is alive (from the listener's heartbeat tracker)."""

REASON_WEBHOOK_READY = "Ready"
REASON_RUNTIME_UNREACHABLE = "RuntimeUnreachable"
REASON_RUNTIME_SYNC_FAILED = "RuntimeKymaSyncFailed"
REASON_HEARTBEAT_RECEIVED = "HeartbeatReceived"
REASON_NO_HEARTBEAT = "NoHeartbeat"
REASON_HEARTBEAT_STALE = "HeartbeatStale"
REASON_NO_RUNTIME_ID = "NoRuntimeId"
REASON_CRDS_SYNC_FAILED = "CRDsSyncFailed"
REASON_CATALOG_SYNC_FAILED = "ModuleCatalogSyncFailed"


@dataclass(frozen=True)
class Outcome:
    """The state a reconcile arrived at, the conditions it determined and a one-line summary."""

    state: State
    conditions: tuple[Condition, ...]
    operation: str
    modules: tuple[ModuleStatus, ...] | None = None
    """The new ``status.modules`` when the module half ran; None leaves them as they are."""
    active_channel: str | None = None
    """``status.activeChannel`` (set only in Ready and Warning, as upstream)."""

    @property
    def failed(self) -> bool:
        return self.state is State.ERROR


def condition(condition_type: str, ok: bool, reason: str, message: str, now: datetime.datetime) -> Condition:
    return Condition(
        type=condition_type,
        status=ConditionStatus.TRUE if ok else ConditionStatus.FALSE,
        reason=reason,
        message=message,
        last_transition_time=now,
    )


def webhook_condition(agent: AgentStatus, now: datetime.datetime) -> tuple[State, Condition]:
    """State and ``SKRWebhook`` condition for the result of ``AgentInstaller.ensure``."""
    if agent.ready:
        return State.READY, condition(SKR_WEBHOOK, True, REASON_WEBHOOK_READY, agent.message, now)
    failed = agent.error or agent.reason == readiness.REASON_INSTALL_FAILED
    state = State.ERROR if failed else State.PROCESSING
    return state, condition(SKR_WEBHOOK, False, agent.reason, agent.message, now)


def crds_condition(ok: bool, applied: list[str], error: str, now: datetime.datetime) -> Condition:
    """``CRDsSync``: our CRDs in the runtime match KCP's (a fixed message: no write per apply)."""
    if ok:
        return condition(
            CRDS_SYNC, True, KYMA_CONDITION_REASON, "CRDs are in sync with the control plane", now
        )
    return condition(CRDS_SYNC, False, REASON_CRDS_SYNC_FAILED, error, now)


def unreachable_condition(reason: str, message: str, now: datetime.datetime) -> Condition:
    """``SKRWebhook`` False because the runtime could not be reached or prepared at all."""
    return condition(SKR_WEBHOOK, False, reason, message, now)


def heartbeat_condition(
    runtime_id: str, *, healthy: bool, ever_seen: bool, max_silence: float, now: datetime.datetime
) -> Condition:
    if not runtime_id:
        return condition(
            WATCHER_HEARTBEAT, False, REASON_NO_RUNTIME_ID, "the Kyma has no runtime-id label", now
        )
    if healthy:
        return condition(
            WATCHER_HEARTBEAT,
            True,
            REASON_HEARTBEAT_RECEIVED,
            f"the runtime's agent sends heartbeats (at most {max_silence:.0f}s apart)",
            now,
        )
    if not ever_seen:
        return condition(
            WATCHER_HEARTBEAT,
            False,
            REASON_NO_HEARTBEAT,
            "no heartbeat received from the runtime's agent since the listener started",
            now,
        )
    return condition(
        WATCHER_HEARTBEAT,
        False,
        REASON_HEARTBEAT_STALE,
        f"the runtime's agent has sent no heartbeat for more than {max_silence:.0f}s",
        now,
    )


def next_status(current: KymaStatus, outcome: Outcome, now: datetime.datetime) -> KymaStatus | None:
    """The status to write, or ``None`` when ``current`` already says all of ``outcome``.

    Conditions of other types (set by other controllers) are kept; ``lastOperation`` is rewritten
    only together with a real change (upstream rewrites its time on every status write).
    """
    conditions = [c.model_copy() for c in current.conditions]
    changed = False
    for wanted in outcome.conditions:
        changed = set_condition(conditions, wanted) or changed
    if current.state != outcome.state:
        changed = True
    if current.last_operation is None or current.last_operation.operation != outcome.operation:
        changed = True
    modules = current.modules if outcome.modules is None else list(outcome.modules)
    if modules != current.modules:
        changed = True
    active_channel = current.active_channel
    if outcome.state in (State.READY, State.WARNING) and outcome.active_channel:
        active_channel = outcome.active_channel
    if active_channel != current.active_channel:
        changed = True
    if not changed:
        return None
    return current.model_copy(
        update={
            "state": outcome.state,
            "conditions": conditions,
            "modules": modules,
            "active_channel": active_channel,
            "last_operation": LastOperation(operation=outcome.operation, last_update_time=now),
        }
    )


def status_patch(status: KymaStatus) -> dict[str, object]:
    """The JSON of ``status`` for a merge patch of the status subresource."""
    data: dict[str, object] = status.model_dump(mode="json", by_alias=True)
    return data
