"""A replica started with another ``--shards`` than its group holds no shard, says so, and recovers.

Coordinators in one process on the real KCP API server (their Leases are real), rounds driven by
hand on one ``FakeClock`` as in ``test_coordinator``: "dead" is a replica whose rounds stop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

import httpx
import pytest
from prometheus_client import CollectorRegistry

from kyma_operator.runtime.clock import FakeClock
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.manager import Manager
from kyma_operator.runtime.resources import LEASES
from kyma_operator.runtime.sharding import ShardCoordinator, ShardingConfig
from kyma_operator.runtime.shardmap import SHARD_LEASE_LABEL, SHARDS_ANNOTATION
from tests.polling import eventually

DURATION, DEADLINE, RETRY = 4.0, 3.0, 1.0


def coordinator(
    client: KubeClient,
    namespace: str,
    replica: str,
    shards: int,
    clock: FakeClock,
    registry: CollectorRegistry | None = None,
) -> ShardCoordinator:
    config = ShardingConfig(
        namespace=namespace,
        replica_id=replica,
        address=f"https://{replica}.internal:8083",
        shards=shards,
        lease_duration=DURATION,
        renew_deadline=DEADLINE,
        retry_period=RETRY,
    )
    return ShardCoordinator(client, config, clock=clock, registry=registry)


async def rounds(group: Iterable[ShardCoordinator], count: int, clock: FakeClock) -> None:
    members = list(group)
    for _ in range(count):
        for c in members:
            await c.tick()
        clock.advance(RETRY)


async def shard_lease_holders(client: KubeClient, namespace: str) -> dict[str, str]:
    listed = await client.list(LEASES, namespace, label_selector=f"{SHARD_LEASE_LABEL}=klm")
    return {
        str(lease["metadata"]["name"]): str((lease.get("spec") or {}).get("holderIdentity") or "")
        for lease in listed.items
        if str(lease["metadata"]["name"]).startswith("klm-shard-")
    }


def mismatch(c: ShardCoordinator) -> float:
    return float(c.metrics.mismatch._value.get())


def errors_of(caplog: pytest.LogCaptureFixture, replica: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.ERROR and r.getMessage().startswith(f"{replica}: shard count mismatch")
    ]


async def test_a_joiner_with_another_count_holds_nothing_reports_it_and_one_with_the_same_count_shares(
    kcp_client: KubeClient, kcp_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kyma_operator.runtime")
    clock = FakeClock()
    a = coordinator(kcp_client, kcp_namespace, "a", 16, clock)
    await rounds([a], 2, clock)
    assert a.held() == frozenset(range(16))
    member = await kcp_client.get(LEASES, "klm-member-a", kcp_namespace)
    assert member["metadata"]["annotations"][SHARDS_ANNOTATION] == "16"
    count_lease = await kcp_client.get(LEASES, "klm-shards", kcp_namespace)
    assert count_lease["metadata"]["annotations"][SHARDS_ANNOTATION] == "16"

    b = coordinator(kcp_client, kcp_namespace, "b", 32, clock)
    b_acquired: list[int] = []
    b.on_acquired(b_acquired.append)
    await rounds([b, a], 4, clock)
    # b refuses: holds nothing, acquired nothing (also none of the shards 16..31 nobody has), not ready
    assert b.held() == frozenset() and b_acquired == []
    holders = await shard_lease_holders(kcp_client, kcp_namespace)
    assert all(holder in ("a", "") for holder in holders.values())
    assert mismatch(b) == 1.0 and not b.ready and b.holder(0) is None
    assert "--shards=32" in b.not_ready_reason and "--shards=16" in b.not_ready_reason
    assert "replica(s) a " in b.not_ready_reason
    assert len(errors_of(caplog, "b")) == 1  # once, not every round
    (error,) = errors_of(caplog, "b")
    assert "32" in error and "16" in error and " a " in error
    # a keeps working: all shards, b left out of the share, ready, no mismatch of its own
    assert a.held() == frozenset(range(16))
    assert [m.identity for m in a.members()] == ["a"] and a.ready and mismatch(a) == 0.0
    assert a.not_ready_reason == ""
    warned = [r.getMessage() for r in caplog.records if r.getMessage().startswith("a: replica b announces")]
    assert len(warned) == 1 and "--shards=32" in warned[0]

    # b is stopped and started again with the group's count: it gets its share, no mismatch left
    await b.leave_all()
    b = coordinator(kcp_client, kcp_namespace, "b", 16, clock)
    await rounds([b, a, b], 3, clock)
    assert sorted(len(c.held()) for c in (a, b)) == [8, 8]
    assert a.held() | b.held() == frozenset(range(16)) and not a.held() & b.held()
    assert mismatch(b) == 0.0 and b.ready and b.not_ready_reason == ""
    assert [m.identity for m in a.members()] == ["a", "b"]


async def test_the_group_takes_a_new_count_once_the_last_replica_with_the_old_one_is_gone(
    kcp_client: KubeClient, kcp_namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kyma_operator.runtime")
    clock = FakeClock()
    a = coordinator(kcp_client, kcp_namespace, "a", 16, clock)
    b = coordinator(kcp_client, kcp_namespace, "b", 8, clock)
    await rounds([a, b], 3, clock)
    assert a.held() == frozenset(range(16)) and b.held() == frozenset() and mismatch(b) == 1.0
    # a dies (kill -9: no release): b still refuses while a's Leases have not expired on its clock
    await rounds([b], int(DURATION / RETRY) - 1, clock)
    assert b.held() == frozenset() and mismatch(b) == 1.0 and not b.ready
    # past the lease duration nobody uses 16: b records 8 and takes every one of its shards
    await rounds([b], 3, clock)
    assert b.held() == frozenset(range(8)) and mismatch(b) == 0.0 and b.ready
    count_lease = await kcp_client.get(LEASES, "klm-shards", kcp_namespace)
    assert count_lease["metadata"]["annotations"][SHARDS_ANNOTATION] == "8"
    assert any("changed the group's shard count from 16 to 8" in r.getMessage() for r in caplog.records)
    # the old replica comes back with 16: now it is the one that refuses
    await rounds([a, b], 3, clock)
    assert a.held() == frozenset() and mismatch(a) == 1.0 and not a.ready
    assert b.held() == frozenset(range(8))
    holders = await shard_lease_holders(kcp_client, kcp_namespace)
    assert all(holders[f"klm-shard-{shard}"] == "b" for shard in range(8))
    assert all(holders[f"klm-shard-{shard}"] != "a" for shard in range(8, 16))


async def test_two_replicas_with_different_counts_starting_at_once_never_both_hold_shards(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    clock = FakeClock()
    a = coordinator(kcp_client, kcp_namespace, "a", 16, clock)
    b = coordinator(kcp_client, kcp_namespace, "b", 12, clock)
    for _ in range(6):
        await asyncio.gather(a.tick(), b.tick())  # both list before either wrote: one wins the create
        assert not (a.held() and b.held())
        clock.advance(RETRY)
    winner, loser = (a, b) if a.held() else (b, a)
    assert winner.held() == frozenset(range(winner.shards))
    assert loser.held() == frozenset() and mismatch(loser) == 1.0 and mismatch(winner) == 0.0


async def test_readyz_and_metrics_of_a_refusing_replica_say_what_is_wrong(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    clock = FakeClock()
    a = coordinator(kcp_client, kcp_namespace, "a", 16, clock)
    registry = CollectorRegistry()
    b = coordinator(kcp_client, kcp_namespace, "b", 4, clock, registry)
    manager = Manager(
        kcp_client,
        name="shard-count-test",
        namespace=kcp_namespace,
        health_port=0,
        registry=registry,
        readiness=lambda: b.ready,
        readiness_reason=lambda: b.not_ready_reason,
    )
    await rounds([a, b], 2, clock)
    task = asyncio.create_task(manager.run())
    try:
        await eventually(lambda: manager.started.is_set() or task.done(), "manager start")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{manager.health_port}", timeout=5) as http:
            ready = await http.get("/readyz")
            assert ready.status_code == 503
            assert "shards=False reason: --shards=4 differs from --shards=16" in ready.text
            assert "restart it with --shards=16" in ready.text
            metrics = (await http.get("/metrics")).text
            assert "kyma_operator_shard_config_mismatch 1.0" in metrics
            assert "kyma_operator_shards_held 0.0" in metrics
            await b.leave_all()  # restarted with the group's count: ready, no mismatch
            b = coordinator(kcp_client, kcp_namespace, "b", 16, clock)
            await rounds([b, a, b], 3, clock)
            assert b.held() and b.not_ready_reason == ""
            ready = await http.get("/readyz")
            assert ready.status_code == 200 and "reason" not in ready.text
    finally:
        await manager.shutdown()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_deleted_shard_count_lease_is_recreated_by_the_replicas_holding_shards(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    clock = FakeClock()
    a = coordinator(kcp_client, kcp_namespace, "a", 16, clock)
    b = coordinator(kcp_client, kcp_namespace, "b", 32, clock)
    await rounds([a, b], 2, clock)
    assert a.held() == frozenset(range(16)) and b.held() == frozenset()
    await kcp_client.delete(LEASES, "klm-shards", kcp_namespace)
    # b comes first, but a (16) holds shard Leases: b writes nothing and takes none of them, nor any
    # of 16..31; a recreates the Lease with 16 and keeps working throughout
    for _ in range(4):
        for c in (b, a):
            await c.tick()
            assert a.held() == frozenset(range(16)) and b.held() == frozenset()
            holders = set((await shard_lease_holders(kcp_client, kcp_namespace)).values())
            assert "b" not in holders
        clock.advance(RETRY)
    count_lease = await kcp_client.get(LEASES, "klm-shards", kcp_namespace)
    assert count_lease["metadata"]["annotations"][SHARDS_ANNOTATION] == "16"
    assert mismatch(b) == 1.0 and mismatch(a) == 0.0
