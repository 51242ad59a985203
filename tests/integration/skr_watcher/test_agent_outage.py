"""KCP unreachable: admissions are still answered, events wait, coalesce, arrive later, plus one resync."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from kyma_wire.events import Operation
from tests.controlplane.cluster import APIServer
from tests.integration.skr_watcher.harness import GROUP, WATCH_LABEL, WIDGETS, AgentRig, agent_rig, widget
from tests.integration.skr_watcher.receiver import Received, named

MERGE = "application/merge-patch+json"


@pytest.fixture(scope="module")
def rig(skr: APIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentRig]:
    tag = f"agent-out-{uuid.uuid4().hex[:6]}"
    # One sender task makes coalescing exact: everything admitted while it retries merges per object.
    directory = tmp_path_factory.mktemp("agent-outage")
    with agent_rig(skr, directory, tag, HEARTBEAT_INTERVAL="0", SENDER_TASKS="1") as rig:
        yield rig


def resyncs(rig: AgentRig) -> list[Received]:
    return rig.receiver.events(lambda r: r.event is not None and r.event.operation is Operation.RESYNC)


def test_outage_then_recovery_delivers_coalesced_events_and_one_resync(rig: AgentRig) -> None:
    ns = rig.namespace
    rig.receiver.wait_for(lambda: len(resyncs(rig)) == 1, what="start-up resync")
    changed_before = rig.agent.metric("watcher_admission_decision_total", decision="changed")
    rig.receiver.stop()

    rig.custom.create_namespaced_custom_object(
        GROUP, "v1", ns, WIDGETS, widget("burst", ns, rig.label, {"n": 0})
    )
    for n in range(1, 31):
        rig.custom.patch_namespaced_custom_object(
            GROUP, "v1", ns, WIDGETS, "burst", {"spec": {"n": n}}, _content_type=MERGE
        )
    for i in range(5):
        rig.core.create_namespaced_config_map(
            ns, {"metadata": {"name": f"during-{i}", "labels": {WATCH_LABEL: rig.label}}}
        )

    # every write was admitted by the agent (answered without waiting for KCP) and queued; ">=" because
    # the API server may repeat a webhook call after a connection reset
    assert rig.agent.metric("watcher_admission_decision_total", decision="changed") >= changed_before + 36
    assert rig.agent.metric("watcher_failed_kcp_total", error_reason="network") > 0
    assert rig.agent.metric("watcher_events_coalesced_total") > 0
    assert rig.receiver.events(named(ns, "burst")) == []

    rig.receiver.start()
    rig.receiver.wait_for(
        lambda: (
            all(rig.receiver.events(named(ns, f"during-{i}")) for i in range(5)) and len(resyncs(rig)) == 2
        ),
        what="delivery after the outage",
    )
    rig.receiver.wait_for(lambda: rig.agent.metric("watcher_queue_depth") == 0, what="empty queue")
    burst = rig.receiver.events(named(ns, "burst"))
    assert len(burst) == 1, burst  # 31 admissions of one object while KCP was down -> one event
    assert burst[0].event is not None and burst[0].event.operation is Operation.UPDATE
    assert all(len(rig.receiver.events(named(ns, f"during-{i}"))) == 1 for i in range(5))
    assert len(resyncs(rig)) == 2  # start-up + exactly one for the outage
    assert rig.receiver.rejected == []


def test_kcp_answering_503_is_retried_until_accepted(rig: AgentRig) -> None:
    ns = rig.namespace
    failures = rig.agent.metric("watcher_failed_kcp_total", error_reason="http-503")
    rig.receiver.status_override = 503
    try:
        rig.core.create_namespaced_config_map(
            ns, {"metadata": {"name": "busy", "labels": {WATCH_LABEL: rig.label}}}
        )
        rig.receiver.wait_for(
            lambda: rig.agent.metric("watcher_failed_kcp_total", error_reason="http-503") >= failures + 2,
            what="503 retries",
        )
    finally:
        rig.receiver.status_override = None
    rig.receiver.wait_for(lambda: bool(rig.receiver.events(named(ns, "busy"))), what="busy delivered")
    assert len(rig.receiver.events(named(ns, "busy"))) == 1


def test_graceful_shutdown_flushes_the_queue(rig: AgentRig) -> None:
    ns = rig.namespace
    rig.receiver.stop()
    for i in range(3):
        rig.core.create_namespaced_config_map(
            ns, {"metadata": {"name": f"late-{i}", "labels": {WATCH_LABEL: rig.label}}}
        )
    rig.receiver.start()
    assert rig.agent.stop() == 0  # SIGTERM right away: the queue is flushed before exit
    for i in range(3):
        assert len(rig.receiver.events(named(ns, f"late-{i}"))) == 1
    assert "send queue flushed" in rig.agent.log()
