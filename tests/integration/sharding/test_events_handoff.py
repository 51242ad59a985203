"""Agent events through three real sharded operator processes: hand-off to the holder, and kill -9.

What is real: the session's KCP API server, three ``python -m kyma_operator --sharding`` processes
(shard Leases, membership Leases publishing each hand-off address, the hand-off key Secret they
race to create), each one's public listener and internal hand-off endpoint, and signed agent
requests (RFC 9421, the runtimes' public keys in KCP). Kymas have no access Secret: a reconcile
fails fast with a status and is retried only after 300 s here, so after the start-up every
``start kyma`` line in the shared trace is caused by an event or a shard move.

1. For a Kyma whose shard replica A holds: a single event to B, a batch to C and a heartbeat to B
   -> A reconciles exactly that Kyma (nobody else does), A's listener records the heartbeat.
2. kill -9 A while agents keep sending events for A's Kymas to B (retrying 503) -> every event
   ends 2xx, and a reconcile of its Kyma started on the new holder after the accepted attempt.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from kyma_operator.runtime.kube import KubeClient
from kyma_wire.events import EventBatch, Heartbeat, batch_path, event_path, heartbeat_path
from tests.controlplane.cluster import APIServer
from tests.integration.kcp_listener.helpers import MANAGER, event
from tests.integration.kyma_operator.operator_process import _get
from tests.integration.sharding.agents import Agents, create_runtimes, kill_while_sending
from tests.integration.sharding.fleet import (
    SHARDS,
    Fleet,
    Holdings,
    Line,
    holders,
    leader,
    read_trace,
    settled,
)
from tests.polling import eventually

REPLICAS = ("r0", "r1", "r2")
QUIET = ("--failure-base-delay=300", "--failure-max-delay=300")


def starts(trace: Path, subject: str, after_ns: int) -> list[tuple[str, int]]:
    return [
        (line.replica, line.at)
        for line in read_trace(trace)
        if line.kind == "kyma" and line.event == "start" and line.subject == subject and line.at > after_ns
    ]


def kyma_starts(trace: Path, after_ns: int) -> list[Line]:
    return [ln for ln in read_trace(trace) if ln.kind == "kyma" and ln.event == "start" and ln.at > after_ns]


def forwarded(port: int) -> float:
    _, text = _get(f"http://127.0.0.1:{port}/metrics")
    prefix = 'kcp_listener_handoff_forwarded_events_total{result="delivered"}'
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith(prefix))


def heartbeat_seen(port: int, runtime_id: str) -> bool:
    status, text = _get(f"http://127.0.0.1:{port}/metrics")
    prefix = f'kcp_listener_runtime_last_heartbeat_timestamp_seconds{{runtime_id="{runtime_id}"}}'
    return status == 200 and any(line.startswith(prefix) for line in text.splitlines())


@pytest.fixture
async def fleet(kcp_crds: APIServer, kcp_namespace: str, tmp_path: Path) -> AsyncIterator[Fleet]:
    fleet = Fleet(Path(kcp_crds.kubeconfig_path), kcp_namespace, tmp_path / "trace.log", *QUIET)
    try:
        yield fleet
    finally:
        await fleet.stop()


async def test_events_reach_the_holder_and_none_is_lost_when_it_is_killed(
    kcp_client: KubeClient, kcp_namespace: str, fleet: Fleet
) -> None:
    runtimes, keys = await create_runtimes(kcp_client, kcp_namespace, 24, SHARDS)
    for replica in REPLICAS:
        await fleet.start(replica)
    # measured from when all three run, not from their spawning (start-up is the machine's speed)
    await fleet.wait_joined(*REPLICAS)

    async def split_evenly() -> dict[int, str] | None:
        found = await holders(kcp_client, kcp_namespace)
        return found if settled(found, REPLICAS) else None

    owners = await eventually(split_evenly, "16 shards spread over r0, r1, r2", within=40, interval=0.2)
    await eventually(
        lambda: all(p.readyz() == 200 for p in fleet.processes.values()), "all three ready", within=15
    )
    # A = the leader: the listener path must not need it
    a = await leader(kcp_client, kcp_namespace)
    b, c = (r for r in REPLICAS if r != a)
    mine = [rt for rt in runtimes if owners[rt.shard] == a]
    assert len(mine) >= 2, owners
    target = mine[0]
    shard_of_kyma = {rt.kyma: rt.shard for rt in mine}
    port = {r: p.listener for r, p in fleet.processes.items()}

    async with httpx.AsyncClient(timeout=5) as http:
        agents = Agents(http, keys)
        # 1. single event to B, batch to C, heartbeat to B: the holder A acts on exactly that Kyma
        sent_ns = time.monotonic_ns()
        logged = {r: len(p.output) for r, p in fleet.processes.items()}
        # right after a rebalance a replica's view of the other holders may lag one coordinator
        # round: it answers 503 and the agent retries (docs/sharding-handoff.md)
        single = await agents.deliver(port[b], event_path(MANAGER), event(), target, within=10)
        assert single.accepted, single.statuses

        async def batch_accepted() -> list[int] | None:
            body = EventBatch.wire_of([event(), event()])
            answer = await agents.post(port[c], batch_path(MANAGER), body, target.runtime_id)
            statuses = [r["status"] for r in answer.json()["results"]] if answer.status_code == 200 else []
            early.append(statuses[0] if statuses else answer.status_code)  # per event: all alike
            return statuses if statuses == [200, 200] else None

        early: list[int] = []
        await eventually(batch_accepted, "the batch accepted (503 retried)", within=10, interval=0.25)
        beat = Heartbeat.model_validate({"sentAt": "2027-01-01T00:00:00Z"}).to_wire()
        heartbeat = await agents.deliver(port[b], heartbeat_path(MANAGER), beat, target, within=10)
        assert heartbeat.accepted, heartbeat.statuses
        # 401 (with Retry-After): signed before the holder took the shard, within the skew (docs)
        assert {*single.statuses, *early, *heartbeat.statuses} <= {200, 401, 503}
        started_by: set[str] = set()

        def only_the_holder_started_it() -> bool:
            started_by.clear()
            started_by.update(r for r, _ in starts(fleet.trace, target.kyma, sent_ns))
            return started_by == {a}

        try:
            await eventually(only_the_holder_started_it, "the holder reconciles the Kyma", within=10)
        except AssertionError as failed:
            raise AssertionError(
                f"{failed}; started it since the events: {sorted(started_by)}, holder {a}, "
                f"statuses B {single.statuses} C {early} B {heartbeat.statuses}"
            ) from None
        await eventually(
            lambda: heartbeat_seen(fleet.processes[a].metrics, target.runtime_id),
            "the holder's listener recorded the heartbeat",
            within=5,
        )
        for other in (b, c):
            assert not heartbeat_seen(fleet.processes[other].metrics, target.runtime_id)

        # every attempt the holder answered counts as delivered (its 401 predates-holder too, within
        # the skew after it took the shard: the agent retries those signed anew); 503s do not
        handed = {
            b: sum(s in (200, 401) for s in (*single.statuses, *heartbeat.statuses)),
            c: 2 * sum(s in (200, 401) for s in early),  # a batch of two events
        }
        assert handed[b] >= 2 and handed[c] >= 2
        for sender, count in handed.items():
            assert forwarded(fleet.processes[sender].metrics) == count

        # the events caused reconciles of that Kyma only, on A only (the start-up's shard moves and
        # shard-label writes may still cause others: the reconciler logs each one with its cause)
        def caused() -> set[tuple[str, str]]:
            return {
                (r, line.split("reconcile Kyma ", 1)[1].split(" ", 1)[0])
                for r, p in fleet.processes.items()
                for line in p.output[logged[r] :]
                if "reconcile Kyma " in line and "runtime event" in line.split("]", 1)[0]
            }

        await eventually(lambda: caused() == {(a, target.kyma)}, "A logged the event-caused reconcile")

        # 2. kill -9 A while its runtimes' agents keep sending events to B, retrying 503
        outcome = await kill_while_sending(fleet, kcp_client, a, mine, Agents(http, keys), port[b])

    assert [d for d in outcome.deliveries if not d.accepted] == []
    assert any(set(d.statuses) - {200} for d in outcome.exposed), "the hand-off was never visible"
    await eventually(
        lambda: outcome.unreconciled(fleet.trace, a) == [],
        "every accepted event reached a reconcile",
        within=10,
    )
    # and no Kyma of the moved shards was reconciled by a replica that did not hold its shard then
    # (the trace's acquired/released lines: a shard may pass through a replica on its way)
    started = [ln for ln in kyma_starts(fleet.trace, sent_ns) if ln.subject in shard_of_kyma]
    held = Holdings.of(read_trace(fleet.trace))
    strangers = [ln for ln in started if not held.held(ln.replica, shard_of_kyma[ln.subject], ln.at)]
    assert strangers == [], [
        (ln, {r: spans for (r, shard), spans in held.spans.items() if shard == shard_of_kyma[ln.subject]})
        for ln in strangers[:3]
    ]
    print(
        f"{len(outcome.exposed)} events sent during the hand-off, all reconciled;"
        f" kill -> first accepted event of a moved shard {outcome.first_accepted_after_kill_s():.2f} s"
    )
