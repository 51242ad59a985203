"""Batched delivery through the real agent process: the real SKR API server calls it concurrently.

Writes that come faster than the agent's batch interval reach KCP in batches (one signed request
for many events, every event exactly once); against a KCP without the batch route (upstream's
listener answers 404) the agent switches to single events once and loses nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from kyma_wire.events import Operation
from tests.controlplane.cluster import APIServer
from tests.integration.skr_watcher.harness import WATCH_LABEL, AgentRig, agent_rig
from tests.integration.skr_watcher.receiver import named


@pytest.fixture(scope="module")
def rig(skr: APIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentRig]:
    tag = f"agent-batch-{uuid.uuid4().hex[:6]}"
    directory = tmp_path_factory.mktemp("agent-batch")
    # a wide interval, so that concurrent writes from this test reliably share requests
    with agent_rig(skr, directory, tag, BATCH_INTERVAL="200ms", RESYNC_ON_START="false") as rig:
        yield rig


def create_many(rig: AgentRig, prefix: str, count: int) -> list[str]:
    names = [f"{prefix}-{i}" for i in range(count)]

    def create(name: str) -> None:
        rig.core.create_namespaced_config_map(
            rig.namespace, {"metadata": {"name": name, "labels": {WATCH_LABEL: rig.label}}}
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(create, names))
    return names


def arrived_once(rig: AgentRig, names: list[str]) -> bool:
    return all(len(rig.receiver.events(named(rig.namespace, name, Operation.CREATE))) == 1 for name in names)


def test_concurrent_writes_reach_kcp_in_batches_each_event_once(rig: AgentRig) -> None:
    names = create_many(rig, "batched", 40)
    rig.receiver.wait_for(lambda: arrived_once(rig, names), what="40 CREATE events")
    assert rig.receiver.batches and max(rig.receiver.batches) > 1
    assert rig.receiver.rejected == []  # every batch's one signature verified, no nonce reused
    assert rig.agent.metric("watcher_kcp_batches_total") == len(rig.receiver.batches)
    assert rig.agent.metric("watcher_kcp_requests_total") < 40


def test_a_kcp_without_the_batch_route_gets_single_events(rig: AgentRig) -> None:
    # KCP answers 503 while the writes are admitted: the events wait in the agent's queue, so batches
    # are tried once it answers again (also when this machine is too slow for writes to come faster
    # than the batch interval), and the answer is a KCP without the batch route
    rig.receiver.status_override = 503
    rig.receiver.batch_route = False
    try:
        batches_before = len(rig.receiver.batches)
        names = create_many(rig, "single", 20)
        rig.receiver.status_override = None
        rig.receiver.wait_for(lambda: arrived_once(rig, names), what="20 CREATE events")
        assert len(rig.receiver.batches) == batches_before
        assert rig.receiver.batches_refused >= 1
        # one switch to single events, however many batches were under way when the 404s came
        assert rig.agent.metric("watcher_kcp_batch_fallbacks_total") == 1
        assert rig.agent.metric("watcher_events_dropped_total", reason="rejected") == 0
    finally:
        rig.receiver.status_override = None
        rig.receiver.batch_route = True
