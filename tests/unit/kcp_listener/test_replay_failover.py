"""A new holder of a runtime's events refuses signatures from before it took over (plus skew).

Each listener keeps its own replay record; a request the previous holder accepted would otherwise
be accepted again after a failover, a shard move or a restart (docs/sharding-handoff.md, "Replays
across failovers"). Real intakes on a controllable clock; the real-process proof is
``tests/integration/kyma_operator/test_replay_failover.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from kcp_listener.config import ListenerConfig
from kyma_operator.listener.shards import RuntimeShardView
from kyma_wire.events import EventBatch, batch_path
from tests.unit.kcp_listener.harness import NOW, NS, Clock, Harness
from tests.unit.kcp_listener.sharded import Cluster, StaticShards, cluster, runtime_in_shard
from tests.unit.kcp_listener.test_app import event

SKEW = ListenerConfig().signature_skew_seconds
RT_MOVED = runtime_in_shard(1)


def copy(request: httpx.Request) -> httpx.Request:
    return httpx.Request(request.method, request.url, headers=request.headers, content=request.content)


def predates(answer: httpx.Response) -> bool:
    return (
        answer.status_code == 401
        and answer.json() == {"error": "unauthenticated", "reason": "predates-holder"}
        and answer.headers.get("retry-after") == "1"
    )


async def test_after_a_failover_the_new_leader_refuses_what_the_old_one_accepted() -> None:
    clock = Clock()
    old = Harness(ListenerConfig(), clock=clock)
    old.add_runtime("rt-1", "kyma-1")
    captured = old.request(event(), runtime_id="rt-1")
    assert (await old.send(captured)).status_code == 200
    assert (await old.send(copy(captured))).json()["reason"] == "replay"

    taken = NOW + 1.0  # the old leader was fenced, the new one took the Lease
    new = Harness(ListenerConfig(), clock=clock, held_from=taken)
    new.private_keys["rt-1"] = old.private_keys["rt-1"]
    new.directory.add_kyma(NS, "kyma-1", "rt-1")
    new.keys.set_keys("test/rt-1", "rt-1", {"v1": old.private_keys["rt-1"].public_key()})
    clock.now = taken + 1.0
    assert predates(await new.send(copy(captured)))
    # signed after the takeover, but within the skew: the old leader might have accepted it too
    assert predates(await new.post(event(), runtime_id="rt-1"))
    assert new.enqueued == []
    clock.now = taken + SKEW + 1.0
    assert (await new.post(event(), runtime_id="rt-1")).status_code == 200  # the agent's re-signed retry
    assert predates(await new.send(copy(captured)))  # the captured request, still inside its 60 s
    assert new.enqueued == [f"kyma:{NS}/kyma-1"]
    assert new.sample("kcp_listener_auth_failures_total", {"reason": "predates-holder"}) == 3
    await old.aclose()
    await new.aclose()


async def test_a_restarted_process_refuses_what_it_accepted_before() -> None:
    """The default of a process without leader election: it holds everything since it started."""
    clock = Clock()
    before = Harness(ListenerConfig(), clock=clock)
    before.add_runtime("rt-1", "kyma-1")
    captured = before.request(event(), runtime_id="rt-1")
    assert (await before.send(captured)).status_code == 200
    clock.now = NOW + 2.0
    restarted = Harness(ListenerConfig(), clock=clock, held_from=clock.now)
    restarted.private_keys["rt-1"] = before.private_keys["rt-1"]
    restarted.directory.add_kyma(NS, "kyma-1", "rt-1")
    restarted.keys.set_keys("test/rt-1", "rt-1", {"v1": before.private_keys["rt-1"].public_key()})
    assert predates(await restarted.send(copy(captured)))
    await before.aclose()
    await restarted.aclose()


@pytest.fixture
async def replicas() -> AsyncIterator[Cluster]:
    c = cluster(["a", "b", "c"])
    c.assign(1, "b")
    c.add_runtime(RT_MOVED, "kyma-m")
    yield c
    await c.aclose()


def shards(c: Cluster, node: str) -> StaticShards:
    view = c[node].handoff.shards
    assert isinstance(view, RuntimeShardView) and isinstance(view.view, StaticShards)
    return view.view


async def test_after_a_shard_moves_its_new_holder_refuses_what_the_old_one_accepted(
    replicas: Cluster,
) -> None:
    a, b, c = (replicas[n].harness for n in "abc")
    captured = c.request(event(), runtime_id=RT_MOVED)
    assert (await c.send(captured)).status_code == 200  # handed to b, accepted there
    assert b.enqueued == [f"kyma:{NS}/kyma-m"]

    taken = NOW + 1.0
    replicas.assign(1, "a")
    shards(replicas, "a").since[1] = taken
    replicas.clock.now = taken + 1.0
    assert predates(await a.send(copy(captured)))  # the new holder a never saw the nonce
    assert (await c.send(copy(captured))).json()["reason"] == "replay"  # c, b remember it themselves
    # signed after the move but within the skew, handed by c to the new holder: refused there
    assert predates(await c.post(event(), runtime_id=RT_MOVED))
    body = EventBatch.wire_of([event(), event()])
    early = await b.post(body, runtime_id=RT_MOVED, path=batch_path("lifecycle-manager"))
    assert early.status_code == 200 and early.headers.get("retry-after") == "1"
    assert [r["status"] for r in early.json()["results"]] == [401, 401]
    assert a.enqueued == []

    replicas.clock.now = taken + SKEW + 1.0
    assert (await b.post(event(), runtime_id=RT_MOVED)).status_code == 200  # re-signed: through
    assert a.enqueued == [f"kyma:{NS}/kyma-m"]
