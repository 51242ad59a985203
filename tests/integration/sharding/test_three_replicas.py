"""Three real operator processes sharding one KCP: even split, kill -9, restart, SIGSTOP.

``python -m kyma_operator --sharding --shards 16 --replica-id r<i>`` three times against the
session's KCP, short Lease timings (4 s lease, 3 s renew deadline, 0.5 s retry), no Watcher, and
36 Kymas without access Secrets (each reconcile fails fast with a status and is retried every 3 s:
steady work to watch). Every process appends ``start|end kyma <ns/name> <replica> <ns>`` per
reconcile and ``acquired|released shard <n> <replica> <ns>`` per shard hand-off to one trace file
(``--reconcile-trace-file``, O_APPEND, CLOCK_MONOTONIC shared by the processes). The tests check
from the outside: the shard Leases' holders, the Kymas' status and shard label, and in the trace
that no Kyma was ever reconciled by two replicas at overlapping times.
"""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kyma_operator.api.resources import KYMAS
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.shardmap import SHARD_LABEL, shard_of
from kyma_wire.names import RUNTIME_ID_LABEL
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.operator_process import LEASE_FLAGS
from tests.integration.sharding.fleet import (
    SHARDS,
    Fleet,
    Line,
    holders,
    kymas_exported,
    leader,
    overlaps,
    read_trace,
    settled,
    shards_held,
)
from tests.polling import eventually

KYMA_COUNT = 36
REPLICAS = ("r0", "r1", "r2")


def test_the_detector_sees_overlaps_and_open_intervals() -> None:
    trace = [
        Line("start", "kyma", "ns/a", "r0", 0),
        Line("start", "kyma", "ns/b", "r1", 5),
        Line("end", "kyma", "ns/b", "r1", 6),
        Line("start", "kyma", "ns/a", "r1", 50),  # inside r0's long interval
        Line("end", "kyma", "ns/a", "r1", 60),
        Line("end", "kyma", "ns/a", "r0", 100),
        Line("start", "kyma", "ns/b", "r0", 7),  # never ended (paused): open to the end
        Line("start", "kyma", "ns/b", "r2", 900),
        Line("end", "kyma", "ns/b", "r2", 901),
    ]
    assert len(overlaps(trace)) == 2
    assert overlaps(trace[:3]) == []


@pytest.fixture
async def kymas(kcp_client: KubeClient, kcp_namespace: str) -> dict[str, int]:
    """36 Kymas (runtime ids rt-0..rt-35) -> their shard."""
    shards = {}
    for i in range(KYMA_COUNT):
        name = f"kyma-{i}"
        await kcp_client.create(
            KYMAS,
            {
                "metadata": {
                    "name": name,
                    "namespace": kcp_namespace,
                    "labels": {RUNTIME_ID_LABEL: f"rt-{i}"},
                },
                "spec": {"channel": "regular"},
            },
        )
        shards[f"{kcp_namespace}/{name}"] = shard_of(f"rt-{i}", SHARDS)
    return shards


@pytest.fixture
async def fleet(kcp_crds: APIServer, kcp_namespace: str, tmp_path: Path) -> AsyncIterator[Fleet]:
    fleet = Fleet(Path(kcp_crds.kubeconfig_path), kcp_namespace, tmp_path / "trace.log")
    try:
        yield fleet
    finally:
        await fleet.stop()


async def test_three_replicas_share_fail_over_rebalance_and_never_reconcile_one_kyma_twice(
    kcp_client: KubeClient, kcp_namespace: str, kymas: dict[str, int], fleet: Fleet
) -> None:
    assert "--leader-elect-lease-duration=4" in LEASE_FLAGS
    for replica in REPLICAS:
        await fleet.start(replica)
    # the split is measured from when all three run: a process's start-up (imports, first lists)
    # takes as long as the machine makes it, and is not what coordination is judged by
    await fleet.wait_joined(*REPLICAS)

    # 1. even split, every Kyma reconciled (status written) and labelled with its shard
    async def split_evenly() -> dict[int, str] | None:
        found = await holders(kcp_client, kcp_namespace)
        return found if settled(found, REPLICAS) else None

    await eventually(split_evenly, "16 shards spread 5/5/6 over r0, r1, r2", within=60, interval=0.2)

    async def all_reconciled() -> bool:
        items = (await kcp_client.list(KYMAS, kcp_namespace)).items
        return len(items) == KYMA_COUNT and all(
            (k.get("status") or {}).get("state")
            and k["metadata"]["labels"].get(SHARD_LABEL)
            == str(kymas[f"{kcp_namespace}/{k['metadata']['name']}"])
            for k in items
        )

    await eventually(all_reconciled, "every Kyma has a status and its shard label", within=30, interval=0.2)
    await eventually(
        lambda: all(p.readyz() == 200 for p in fleet.processes.values()), "all three ready", within=15
    )

    # each replica sets its gauge at the end of its round, after its Lease writes: it may lag the
    # Leases read above by a round
    def held_evenly() -> list[float] | None:
        held = sorted(shards_held(p) for p in fleet.processes.values())
        return held if held == [5, 5, 6] else None

    await eventually(held_evenly, "kyma_operator_shards_held 5/5/6", within=15, interval=0.2)

    # 2. kill -9 a replica that is not the leader: its shards are taken over, its Kymas reconciled
    lead = await leader(kcp_client, kcp_namespace)
    victim = next(r for r in REPLICAS if r != lead)
    survivors = tuple(r for r in REPLICAS if r != victim)
    victim_shards = {s for s, h in (await holders(kcp_client, kcp_namespace)).items() if h == victim}
    killed_ns = time.monotonic_ns()
    await fleet.processes[victim].stop()  # SIGKILL

    async def taken_over() -> dict[int, str] | None:
        found = await holders(kcp_client, kcp_namespace)
        return found if settled(found, survivors) else None

    after_kill = await eventually(
        taken_over, "the killed replica's shards taken over", within=15, interval=0.1
    )
    victim_kymas = {k for k, s in kymas.items() if s in victim_shards}

    def reconciled_after_kill() -> bool:
        started = {
            line.subject
            for line in read_trace(fleet.trace)
            if line.event == "start"
            and line.at > killed_ns
            and line.replica == after_kill[kymas[line.subject]]
        }
        return victim_kymas <= started

    await eventually(
        reconciled_after_kill, "every Kyma of the taken shards reconciled by its new holder", within=15
    )

    # 3. start it again: rebalanced over three
    await fleet.start(victim)
    await fleet.wait_joined(victim)
    await eventually(split_evenly, "rebalanced over three replicas", within=60, interval=0.2)
    # the Leases are written before a replica acts on a shard (its caches synced, then a full
    # reconcile of the shard's Kymas): pausing it in between would freeze that burst mid-reconcile,
    # which resumes after the taker's and is an overlap no fencing can prevent (fencing gates starts)
    await eventually(held_evenly, "every shard acted on after the rebalance", within=15, interval=0.2)

    # 4. SIGSTOP a holder (not the leader) for longer than the Lease; on resume it acts on nothing
    #    before it has re-acquired a shard
    lead = await leader(kcp_client, kcp_namespace)
    paused = next(r for r in REPLICAS if r != lead)
    others = tuple(r for r in REPLICAS if r != paused)
    fleet.processes[paused].signal(signal.SIGSTOP)

    async def paused_taken_over() -> dict[int, str] | None:
        found = await holders(kcp_client, kcp_namespace)
        return found if settled(found, others) else None

    await eventually(paused_taken_over, "the paused replica's shards taken over", within=20, interval=0.1)
    resumed_ns = time.monotonic_ns()
    fleet.processes[paused].signal(signal.SIGCONT)
    await eventually(split_evenly, "rebalanced after the resume", within=30, interval=0.2)

    # 5. per-Kyma metric series follow the shards: after all the moves, each Kyma is exported by
    #    exactly one replica (a giver drops the series of the shards it released or lost)
    def exported_once() -> bool:
        names = [n for p in fleet.processes.values() for n in kymas_exported(p)]
        return sorted(names) == sorted(k.split("/", 1)[1] for k in kymas)

    await eventually(
        exported_once, "every Kyma's state exported by exactly one replica", within=20, interval=0.2
    )
    await fleet.stop()

    lines = read_trace(fleet.trace)
    acquired_at: dict[int, int] = {}
    for line in lines:
        if line.replica == paused and line.event == "acquired" and line.at > resumed_ns:
            acquired_at.setdefault(int(line.subject), line.at)
    early = [
        line
        for line in lines
        if line.replica == paused
        and line.kind == "kyma"
        and line.event == "start"
        and line.at > resumed_ns
        and not (kymas[line.subject] in acquired_at and acquired_at[kymas[line.subject]] < line.at)
    ]
    assert early == [], f"paused replica reconciled before re-acquiring: {early[:5]}"
    # 6. the detector: never two replicas on one Kyma at once, over the whole run
    found = overlaps(lines)
    assert found == [], "\n".join(found[:10]) + "\n" + fleet.output()
    assert sum(1 for line in lines if line.event == "start") > 3 * KYMA_COUNT
