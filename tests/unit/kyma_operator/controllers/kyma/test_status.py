"""Condition mapping and the write-only-on-change rule of the Kyma status (pure functions)."""

from __future__ import annotations

import datetime
import json

import pytest

from kyma_operator.agentinstall import readiness
from kyma_operator.agentinstall.readiness import AgentStatus
from kyma_operator.api.kyma import KymaStatus
from kyma_operator.api.meta import Condition, ConditionStatus, LastOperation, State
from kyma_operator.controllers.kyma import status as st
from kyma_operator.controllers.kyma.memory import KymaMemory
from kyma_operator.controllers.kyma.skrsync import RemoteKyma
from kyma_operator.controllers.kyma.statuswrite import observed, remember

T0 = datetime.datetime(2026, 11, 21, 10, 0, tzinfo=datetime.UTC)
T1 = T0 + datetime.timedelta(minutes=5)


@pytest.mark.parametrize(
    ("agent", "state", "condition_status"),
    [
        (AgentStatus(True, False, readiness.REASON_READY, "skrwebhook is synchronized"), State.READY, "True"),
        (
            AgentStatus(False, False, readiness.REASON_NOT_READY, "no ready replica"),
            State.PROCESSING,
            "False",
        ),
        (AgentStatus(False, False, readiness.REASON_MISSING, "no Deployment"), State.PROCESSING, "False"),
        (AgentStatus(False, True, "CrashLoopBackOff", "pod p is in CrashLoopBackOff"), State.ERROR, "False"),
        (AgentStatus(False, True, readiness.REASON_INVALID_RUNTIME, "no runtime id"), State.ERROR, "False"),
        (AgentStatus(False, False, readiness.REASON_INSTALL_FAILED, "runtime x: 500"), State.ERROR, "False"),
    ],
)
def test_agent_status_maps_to_state_and_skr_webhook_condition(
    agent: AgentStatus, state: State, condition_status: str
) -> None:
    got_state, condition = st.webhook_condition(agent, T0)
    assert got_state is state
    assert condition.type == "SKRWebhook"
    assert condition.status.value == condition_status
    assert (condition.reason, condition.message) == (agent.reason, agent.message)


def test_heartbeat_condition_reasons() -> None:
    def reason(runtime_id: str, healthy: bool, ever_seen: bool) -> tuple[ConditionStatus, str]:
        c = st.heartbeat_condition(runtime_id, healthy=healthy, ever_seen=ever_seen, max_silence=180, now=T0)
        assert c.type == st.WATCHER_HEARTBEAT
        return c.status, c.reason

    assert reason("rt", True, True) == (ConditionStatus.TRUE, st.REASON_HEARTBEAT_RECEIVED)
    assert reason("rt", False, False) == (ConditionStatus.FALSE, st.REASON_NO_HEARTBEAT)
    assert reason("rt", False, True) == (ConditionStatus.FALSE, st.REASON_HEARTBEAT_STALE)
    assert reason("", False, False) == (ConditionStatus.FALSE, st.REASON_NO_RUNTIME_ID)


def outcome(state: State, ok: bool, reason: str, message: str, now: datetime.datetime) -> st.Outcome:
    return st.Outcome(state, (st.condition(st.SKR_WEBHOOK, ok, reason, message, now),), f"op {reason}")


def test_next_status_is_none_when_nothing_changes() -> None:
    first = st.next_status(KymaStatus(), outcome(State.PROCESSING, False, "DeploymentNotReady", "m", T0), T0)
    assert first is not None
    assert first.state is State.PROCESSING
    assert first.last_operation == LastOperation(operation="op DeploymentNotReady", last_update_time=T0)
    # the same outcome later: no write (and so no new lastOperation time)
    assert st.next_status(first, outcome(State.PROCESSING, False, "DeploymentNotReady", "m", T1), T1) is None


def test_transition_time_moves_only_when_the_condition_status_flips() -> None:
    first = st.next_status(KymaStatus(), outcome(State.PROCESSING, False, "DeploymentMissing", "a", T0), T0)
    assert first is not None
    # same status False, other reason: written, but lastTransitionTime stays
    second = st.next_status(first, outcome(State.PROCESSING, False, "DeploymentNotReady", "b", T1), T1)
    assert second is not None
    assert second.conditions[0].reason == "DeploymentNotReady"
    assert second.conditions[0].last_transition_time == T0
    # False -> True: the transition time moves
    later = T1 + datetime.timedelta(minutes=1)
    third = st.next_status(second, outcome(State.READY, True, "Ready", "ok", later), later)
    assert third is not None
    assert third.conditions[0].last_transition_time == later
    assert third.state is State.READY


def test_conditions_of_other_types_are_kept() -> None:
    other = Condition(
        type="Modules", status=ConditionStatus.TRUE, reason="Ready", message="x", last_transition_time=T0
    )
    current = KymaStatus(conditions=[other])
    new = st.next_status(current, outcome(State.READY, True, "Ready", "ok", T1), T1)
    assert new is not None
    assert [c.type for c in new.conditions] == ["Modules", "SKRWebhook"]
    patch = st.status_patch(new)
    assert patch["state"] == "Ready"
    assert patch["lastOperation"] == {"operation": "op Ready", "lastUpdateTime": "2026-11-21T10:05:00Z"}
    conditions = patch["conditions"]
    assert isinstance(conditions, list)
    assert [c["type"] for c in conditions] == ["Modules", "SKRWebhook"]


def test_next_status_writes_modules_only_when_they_change() -> None:
    from kyma_operator.api.kyma import ModuleStatus

    base = outcome(State.READY, True, "Ready", "m", T0)
    entry = ModuleStatus(name="mod", state=State.PROCESSING, version="1.0.0")
    first = st.next_status(
        KymaStatus(), st.Outcome(base.state, base.conditions, base.operation, (entry,)), T0
    )
    assert first is not None and first.modules == [entry]
    same = st.Outcome(base.state, base.conditions, base.operation, (entry.model_copy(),))
    assert st.next_status(first, same, T1) is None
    assert st.next_status(first, base, T1) is None  # None: the module half did not run
    ready = st.Outcome(
        base.state, base.conditions, base.operation, (entry.model_copy(update={"state": State.READY}),)
    )
    changed = st.next_status(first, ready, T1)
    assert changed is not None and changed.modules[0].state is State.READY


def test_every_written_condition_observes_the_kymas_generation() -> None:
    """As upstream's UpdateCondition: a client that changed the spec tells the status for its change."""
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    ready = st.condition("Modules", True, "Ready", "all modules are Ready", now)
    outcome = st.Outcome(State.READY, (ready,), "kyma is ready")
    stamped = observed(outcome, 7)
    assert [c.observed_generation for c in stamped.conditions] == [7]
    assert observed(outcome, None) is outcome
    current = KymaStatus(state=State.READY, conditions=list(stamped.conditions))
    current.last_operation = LastOperation(operation="kyma is ready", last_update_time=now)
    assert st.next_status(current, stamped, now) is None  # at rest: nothing to write
    assert st.next_status(current, observed(outcome, 8), now) is not None  # a new generation: written


def test_status_remembered_for_the_runtime_copy_only_with_a_runtime_kyma() -> None:
    status = KymaStatus(
        state=State.READY, last_operation=LastOperation(operation="kyma is ready", last_update_time=T0)
    )
    single_cluster = KymaMemory()
    remember(single_cluster, status)
    assert single_cluster.last_status is None  # nothing to copy it into
    with_runtime = KymaMemory(
        remote=RemoteKyma({}, created=False, metadata_applied=False, namespace_applied=False)
    )
    remember(with_runtime, status)
    assert with_runtime.last_status is not None
    assert json.loads(with_runtime.last_status) == st.status_patch(status)
    with_runtime.remote = None  # a Kyma that lost its runtime Kyma drops what it kept
    remember(with_runtime, status)
    assert with_runtime.last_status is None
