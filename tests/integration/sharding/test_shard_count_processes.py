"""Real operator processes: one started with another ``--shards`` than the running replica holds no
shard, reports the mismatch (log, metric, ``/readyz``) while the first keeps reconciling, and
shares the shards once restarted with the group's count.

``python -m kyma_operator --sharding`` processes on the session's KCP (``fleet.Fleet``: short Lease
timings, no Watcher, Kymas without access Secrets fail fast with a status and are retried), the
shared reconcile trace showing who reconciled what. Everything is polled with deadlines.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kyma_operator.api.resources import KYMAS
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.shardmap import SHARD_LABEL, shard_of
from kyma_wire.names import RUNTIME_ID_LABEL
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.operator_process import _get
from tests.integration.sharding.fleet import SHARDS, Fleet, gauge, holders, overlaps, read_trace, settled
from tests.polling import eventually

KYMA_COUNT = 8
MISMATCH = "kyma_operator_shard_config_mismatch"


def kyma(name: str, namespace: str, runtime_id: str) -> dict[str, object]:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {RUNTIME_ID_LABEL: runtime_id}},
        "spec": {"channel": "regular"},
    }


@pytest.fixture
async def fleet(kcp_crds: APIServer, kcp_namespace: str, tmp_path: Path) -> AsyncIterator[Fleet]:
    fleet = Fleet(Path(kcp_crds.kubeconfig_path), kcp_namespace, tmp_path / "trace.log")
    try:
        yield fleet
    finally:
        await fleet.stop()


async def test_a_replica_with_another_shard_count_holds_nothing_until_restarted_with_the_groups(
    kcp_client: KubeClient, kcp_namespace: str, fleet: Fleet
) -> None:
    for i in range(KYMA_COUNT):
        await kcp_client.create(KYMAS, kyma(f"kyma-{i}", kcp_namespace, f"rt-{i}"))
    await fleet.start("r0")
    await fleet.wait_joined("r0")

    async def held_by(*replicas: str) -> dict[int, str] | None:
        found = await holders(kcp_client, kcp_namespace)
        return found if settled(found, replicas) else None

    await eventually(lambda: held_by("r0"), "r0 holds all 16 shards", within=30, interval=0.2)

    async def reconciled(names: set[str]) -> bool:
        items = (await kcp_client.list(KYMAS, kcp_namespace)).items
        done = {
            k["metadata"]["name"]
            for k in items
            if (k.get("status") or {}).get("state") and k["metadata"]["labels"].get(SHARD_LABEL)
        }
        return names <= done

    first = {f"kyma-{i}" for i in range(KYMA_COUNT)}
    await eventually(lambda: reconciled(first), "r0 reconciled every Kyma", within=30, interval=0.2)

    # r1 starts with --shards=8: it refuses and says so; r0 keeps every shard and keeps working
    odd = await fleet.start("r1", shards=8)
    await fleet.wait_joined("r1")
    error = "r1: shard count mismatch: --shards=8 differs from --shards=16 of the running replica(s) r0"
    await eventually(lambda: error in odd.text(), "r1 logged the mismatch", within=30)
    await eventually(lambda: gauge(odd, MISMATCH) == 1.0, f"{MISMATCH} 1 on r1", within=15)
    status, text = _get(f"http://127.0.0.1:{odd.health}/readyz")
    assert status == 503 and "reason: --shards=8 differs from --shards=16" in text, text
    r0 = fleet.processes["r0"]
    await eventually(lambda: "r0: replica r1 announces --shards=8" in r0.text(), "r0 warned", within=15)
    assert gauge(r0, MISMATCH) == 0.0 and r0.readyz() == 200
    assert await held_by("r0") is not None  # nothing taken by r1, not even shards 8..15's numbers
    await kcp_client.create(KYMAS, kyma("kyma-new", kcp_namespace, "rt-new"))
    await eventually(lambda: reconciled({"kyma-new"}), "r0 reconciled a new Kyma", within=30, interval=0.2)
    assert [line for line in read_trace(fleet.trace) if line.replica == "r1"] == []
    assert sum(1 for line in odd.text().splitlines() if error in line) == 1  # once, not every round

    # restarted with the group's count, r1 takes its share
    odd.signal(signal.SIGTERM)
    await odd.wait(20)
    again = await fleet.start("r1")
    await eventually(lambda: held_by("r0", "r1"), "16 shards split 8/8 over r0, r1", within=90, interval=0.2)
    await eventually(lambda: again.readyz() == 200 and gauge(again, MISMATCH) == 0.0, "r1 ready", within=15)
    mine = {s for s, h in (await holders(kcp_client, kcp_namespace)).items() if h == "r1"}
    theirs = {f"{kcp_namespace}/kyma-{i}" for i in range(KYMA_COUNT) if shard_of(f"rt-{i}", SHARDS) in mine}
    assert theirs  # (8 Kymas over 16 shards: r1's half has some)

    def r1_reconciles_its_share() -> bool:
        trace = read_trace(fleet.trace)
        return theirs <= {line.subject for line in trace if line.replica == "r1" and line.event == "start"}

    await eventually(r1_reconciles_its_share, "r1 reconciled its shards' Kymas", within=30, interval=0.2)
    await fleet.stop()
    assert overlaps(read_trace(fleet.trace)) == [], fleet.output()
