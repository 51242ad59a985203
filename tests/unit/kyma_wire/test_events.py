"""The wire bodies stay byte-identical and upstream-compatible whatever the models are called in code."""

from __future__ import annotations

import datetime

from kyma_wire import names
from kyma_wire.events import AgentEvent, GroupVersionKind, Heartbeat, ObjectKey, Operation


def test_agent_event_body_is_byte_identical_to_the_documented_contract() -> None:
    event = AgentEvent(
        watched=ObjectKey(namespace="kyma-system", name="default"),
        watched_gvk=GroupVersionKind(group="operator.kyma-project.io", version="v1beta2", kind="Kyma"),
        operation=Operation.UPDATE,
        owner=ObjectKey(namespace="kcp-system", name="m1"),
        observed_at=datetime.datetime(2026, 11, 21, 10, 0, 0, 123456, tzinfo=datetime.UTC),
    )
    assert event.to_wire() == (
        b'{"watched":{"namespace":"kyma-system","name":"default"},'
        b'"watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"},'
        b'"operation":"UPDATE","owner":{"namespace":"kcp-system","name":"m1"},'
        b'"observedAt":"2026-11-21T10:00:00.123456Z"}'
    )


def test_upstream_agent_body_parses() -> None:
    body = (
        b'{"watched":{"Namespace":"kyma-system","Name":"default"},"watchedGvk":{"version":"v1","kind":"K"}}'
    )
    event = AgentEvent.model_validate_json(body)
    assert event.watched == ObjectKey(namespace="kyma-system", name="default")
    assert event.operation is None and event.owner is None


def test_heartbeat_body() -> None:
    sent = datetime.datetime(2026, 11, 21, 10, 0, tzinfo=datetime.UTC)
    assert Heartbeat(sent_at=sent, queue_depth=2, agent_version="1").to_wire() == (
        b'{"sentAt":"2026-11-21T10:00:00Z","queueDepth":2,"agentVersion":"1"}'
    )


def test_shared_names_are_spelled_as_upstream() -> None:
    # The one place these literals may appear: the compatibility surface with upstream.
    assert names.OPERATOR_NAME == "lifecycle-manager"
    assert names.KCP_NAMESPACE == "kcp-system"
    assert names.SKR_NAMESPACE == "kyma-system"
    assert names.RUNTIME_ID_LABEL == "kyma-project.io/runtime-id"
    assert names.OWNED_BY_ANNOTATION == "deprecated-operator.kyma-project.io/owned-by"
    assert names.MANAGED_BY_LABEL == "operator.kyma-project.io/managed-by"
