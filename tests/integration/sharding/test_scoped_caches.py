"""Shard-scoped caches (``--shard-scoped-caches``) on the real KCP: a replica caches the Kymas and
Manifests of the shards it holds (plus unlabelled ones), a hand-off moves the cache with the shard,
and an unlabelled Kyma is labelled (with its Manifests) and reconciled by its holder only.

The first tests drive two ``ShardCoordinator``s by hand on a ``FakeClock`` (as test_coordinator)
over real shard-scoped informers; the last runs two whole operators in this process
(``build_operator``) with short Lease timings and a shared reconcile trace.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import pytest

from kyma_operator.api.resources import KYMAS, MANIFESTS
from kyma_operator.controllers.sharding import FixMisplaced, ShardLabelling, kyma_shard, scoped_informers
from kyma_operator.runtime.clock import FakeClock
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request, Result
from kyma_operator.runtime.shardinformer import ShardCaches, ShardedInformer
from kyma_operator.runtime.sharding import ShardCoordinator, ShardingConfig
from kyma_operator.runtime.shardmap import SHARD_LABEL, shard_of
from kyma_wire.names import KYMA_NAME_LABEL, RUNTIME_ID_LABEL
from tests.controlplane.cluster import free_port
from tests.integration.kyma_operator.harness import operator_config, running_operator
from tests.integration.sharding.fleet import overlaps, read_trace
from tests.polling import eventually

SHARDS = 8
LABELLED = 24
UNLABELLED = 3
DURATION, DEADLINE, RETRY = 4.0, 3.0, 1.0


def kyma_body(namespace: str, i: int, *, labelled: bool) -> dict[str, Any]:
    labels = {RUNTIME_ID_LABEL: f"rt-{i}"}
    if labelled:
        labels[SHARD_LABEL] = str(shard_of(f"rt-{i}", SHARDS))
    return {
        "metadata": {"name": f"k{i}", "namespace": namespace, "labels": labels},
        "spec": {"channel": "regular"},
    }


def manifest_body(namespace: str, i: int, *, labelled: bool) -> dict[str, Any]:
    labels = {KYMA_NAME_LABEL: f"k{i}"}
    if labelled:
        labels[SHARD_LABEL] = str(shard_of(f"rt-{i}", SHARDS))
    return {
        "metadata": {"name": f"k{i}-module", "namespace": namespace, "labels": labels},
        "spec": {"remote": True, "install": {"name": "raw-manifest", "source": {"repo": "r", "name": "n"}}},
    }


@pytest.fixture
async def fleet(kcp_client: KubeClient, kcp_namespace: str) -> dict[str, int]:
    """24 labelled Kymas with one labelled Manifest each, and 3 unlabelled Kymas -> their shard."""
    shards = {}
    for i in range(LABELLED + UNLABELLED):
        labelled = i < LABELLED
        await kcp_client.create(KYMAS, kyma_body(kcp_namespace, i, labelled=labelled))
        if labelled:
            await kcp_client.create(MANIFESTS, manifest_body(kcp_namespace, i, labelled=True))
        shards[f"k{i}"] = shard_of(f"rt-{i}", SHARDS)
    return shards


class Replica:
    """A coordinator over its own shard-scoped Kyma and Manifest informers (running)."""

    def __init__(self, client: KubeClient, namespace: str, name: str, clock: FakeClock) -> None:
        self.clock = clock
        self.kymas, self.manifests = scoped_informers(client, namespace, SHARDS)
        config = ShardingConfig(
            namespace=namespace,
            replica_id=name,
            address=f"https://{name}.internal:8083",
            shards=SHARDS,
            lease_duration=DURATION,
            renew_deadline=DEADLINE,
            retry_period=RETRY,
        )
        self.coordinator = ShardCoordinator(
            client, config, clock=clock, shard_caches=ShardCaches(self.kymas, self.manifests)
        )
        self.seen_on_acquire: dict[int, set[str]] = {}
        by_kyma = kyma_shard(self.kymas, SHARDS)
        self.coordinator.on_acquired(self._record(by_kyma))
        self.tasks = [asyncio.create_task(i.run()) for i in (self.kymas, self.manifests)]

    def _record(self, by_kyma: Any) -> Any:
        def record(shard: int) -> None:
            names = {
                o["metadata"]["name"] for o in self.kymas.list() if by_kyma(Request.for_object(o)) == shard
            }
            self.seen_on_acquire[shard] = names

        return record

    async def synced(self) -> None:
        assert await self.kymas.wait_synced(30) and await self.manifests.wait_synced(30)

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def names(informer: Informer) -> set[str]:
    return {str(obj["metadata"]["name"]) for obj in informer.list()}


def expected(fleet: dict[str, int], held: Iterable[int]) -> set[str]:
    """The Kymas a replica holding ``held`` caches: its shards' labelled ones plus every unlabelled one."""
    mine = set(held)
    return {name for name, shard in fleet.items() if shard in mine or int(name[1:]) >= LABELLED}


def expected_manifests(fleet: dict[str, int], held: Iterable[int]) -> set[str]:
    mine = set(held)
    return {f"{name}-module" for name, shard in fleet.items() if shard in mine and int(name[1:]) < LABELLED}


async def rounds_until(group: list[Replica], clock: FakeClock, done: Any, what: str) -> None:
    async def step() -> bool:
        for replica in group:
            await replica.coordinator.tick()
        clock.advance(RETRY / 4)
        return bool(done())

    await eventually(step, what, within=60, interval=0)


@pytest.fixture
async def replicas(kcp_client: KubeClient, kcp_namespace: str) -> AsyncIterator[list[Replica]]:
    clock = FakeClock()
    group = [Replica(kcp_client, kcp_namespace, name, clock) for name in ("a", "b")]
    yield group
    for replica in group:
        await replica.stop()


async def test_a_replica_caches_only_the_shards_it_holds_and_a_hand_off_moves_the_cache(
    fleet: dict[str, int], replicas: list[Replica]
) -> None:
    a, b = replicas
    clock = a.clock
    await a.synced()
    await b.synced()
    # only the unlabelled Kymas before any shard is held
    assert names(a.kymas) == {f"k{i}" for i in range(LABELLED, LABELLED + UNLABELLED)}
    assert len(a.manifests) == 0

    # a alone: holds every shard, caches the whole fleet
    await rounds_until([a], clock, lambda: len(a.coordinator.held()) == SHARDS, "a holds every shard")
    assert names(a.kymas) == set(fleet)
    assert len(a.manifests) == LABELLED
    # the caches were synced before the shard was acted on: on_acquired saw all of its Kymas
    for shard in range(SHARDS):
        assert a.seen_on_acquire[shard] == {n for n, s in fleet.items() if s == shard}

    # b joins: a hands half over, b acquires it
    def split() -> bool:
        held_a, held_b = a.coordinator.held(), b.coordinator.held()
        return len(held_a) == len(held_b) == SHARDS // 2 and not held_a & held_b

    await rounds_until([a, b], clock, split, "the shards split 4/4")
    held_a, held_b = a.coordinator.held(), b.coordinator.held()
    # each caches exactly its own shards' Kymas and Manifests (plus the unlabelled Kymas)
    assert a.kymas.shards_cached == sorted(held_a) and b.kymas.shards_cached == sorted(held_b)
    assert a.manifests.shards_cached == sorted(held_a) and b.manifests.shards_cached == sorted(held_b)
    assert names(a.kymas) == expected(fleet, held_a)
    assert names(b.kymas) == expected(fleet, held_b)
    assert names(a.manifests) == expected_manifests(fleet, held_a)
    assert names(b.manifests) == expected_manifests(fleet, held_b)
    assert names(a.kymas) & names(b.kymas) == {f"k{i}" for i in range(LABELLED, LABELLED + UNLABELLED)}
    # the new holder saw its shards' objects when it started acting on them
    for shard in held_b:
        assert b.seen_on_acquire[shard] == {n for n, s in fleet.items() if s == shard}


async def test_a_kyma_that_gets_its_label_moves_into_its_shard_cache_as_an_update(
    kcp_client: KubeClient, kcp_namespace: str, fleet: dict[str, int], replicas: list[Replica]
) -> None:
    a, b = replicas
    clock = a.clock
    await a.synced()
    await rounds_until([a], clock, lambda: len(a.coordinator.held()) == SHARDS, "a holds every shard")
    events: list[tuple[str, str]] = []

    class Log:
        def on_add(self, obj: dict[str, Any]) -> None:
            events.append(("add", obj["metadata"]["name"]))

        def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
            events.append(("update", new["metadata"]["name"]))

        def on_delete(self, obj: dict[str, Any]) -> None:
            events.append(("delete", obj["metadata"]["name"]))

    a.kymas.add_handler(Log())
    events.clear()
    name = f"k{LABELLED}"

    class Done:
        async def reconcile(self, request: Request) -> Result:
            return Result()

    labelling = ShardLabelling(Done(), kcp_client, a.kymas, SHARDS, a.manifests)
    await labelling.reconcile(Request(kcp_namespace, name))
    shard = fleet[name]
    part = a.kymas.part(shard)
    assert part is not None

    await eventually(
        lambda: part.get(kcp_namespace, name) and not a.kymas.unlabelled.get(kcp_namespace, name)
    )
    assert a.kymas.get(kcp_namespace, name) is not None
    assert ("delete", name) not in events  # a move, not a deletion
    assert ("update", name) in events or ("add", name) in events
    # b never cached it again (it was unlabelled: now it is in a's shard)
    await b.synced()
    await eventually(lambda: b.kymas.get(kcp_namespace, name) is None, "b no longer sees the labelled Kyma")


async def test_two_operators_label_and_reconcile_unlabelled_kymas_without_overlap(
    kcp_client: KubeClient, kcp_namespace: str, tmp_path: Path
) -> None:
    count = 16
    for i in range(count):
        await kcp_client.create(KYMAS, kyma_body(kcp_namespace, i, labelled=False))
    trace = tmp_path / "trace"

    def config(replica: str) -> Any:
        return operator_config(
            kcp_namespace,
            sharding=True,
            shards=SHARDS,
            shard_scoped_caches=True,
            replica_id=replica,
            handoff_port=free_port(),
            watcher_enabled=False,
            leader_elect=True,
            leader_election_id=f"klm-{kcp_namespace}",
            leader_elect_lease_duration=4,
            leader_elect_renew_deadline=3,
            leader_elect_retry_period=0.5,
            failure_base_delay=1.0,
            failure_max_delay=1.0,
            reconcile_trace_file=trace,
        )

    async with contextlib.AsyncExitStack() as stack:
        r0 = await stack.enter_async_context(running_operator(kcp_client, config("r0")))
        r1 = await stack.enter_async_context(running_operator(kcp_client, config("r1")))
        c0, c1 = r0.operator.coordinator, r1.operator.coordinator
        assert c0 is not None and c1 is not None

        def split() -> bool:
            return len(c0.held()) == len(c1.held()) == SHARDS // 2

        await eventually(split, "the shards split 4/4", within=60)
        held0, held1 = c0.held(), c1.held()
        since = (len(r0.reports), len(r1.reports))

        async def all_labelled_and_reconciled() -> bool:
            items = (await kcp_client.list(KYMAS, kcp_namespace)).items
            return len(items) == count and all(
                k["metadata"]["labels"].get(SHARD_LABEL)
                == str(shard_of(k["metadata"]["labels"][RUNTIME_ID_LABEL], SHARDS))
                and (k.get("status") or {}).get("state")
                for k in items
            )

        await eventually(all_labelled_and_reconciled, "every Kyma labelled and reconciled", within=60)
        k0, k1 = r0.operator.kyma.kymas, r1.operator.kyma.kymas
        assert isinstance(k0, ShardedInformer) and isinstance(k1, ShardedInformer)

        def caches_follow_shards() -> bool:
            return all(
                len(k.unlabelled) == 0
                and names(k) == {f"k{i}" for i in range(count) if shard_of(f"rt-{i}", SHARDS) in c.held()}
                for k, c in ((k0, c0), (k1, c1))
            )

        await eventually(caches_follow_shards, "each replica caches exactly its shards' Kymas", within=30)
        # since the split, each Kyma was reconciled only by its shard's holder
        assert (c0.held(), c1.held()) == (held0, held1)
        for running, held, first in ((r0, held0, since[0]), (r1, held1, since[1])):
            for report in running.reports[first:]:
                assert shard_of(f"rt-{report.request.name[1:]}", SHARDS) in held, report.line()
    assert overlaps(read_trace(trace)) == []


async def test_a_kyma_labelled_for_another_shard_count_is_relabelled_with_its_manifests(
    kcp_client: KubeClient, kcp_namespace: str, replicas: list[Replica]
) -> None:
    a, _ = replicas
    right = shard_of("rt-0", SHARDS)
    wrong = (right + 1) % SHARDS  # in range, but not its shard (e.g. after --shards changed)
    kyma = kyma_body(kcp_namespace, 0, labelled=False)
    kyma["metadata"]["labels"][SHARD_LABEL] = str(wrong)
    await kcp_client.create(KYMAS, kyma)
    manifest = manifest_body(kcp_namespace, 0, labelled=False)
    manifest["metadata"]["labels"][SHARD_LABEL] = str(wrong)
    await kcp_client.create(MANIFESTS, manifest)
    out_of_range = kyma_body(kcp_namespace, 1, labelled=False)
    out_of_range["metadata"]["labels"][SHARD_LABEL] = str(SHARDS + 3)
    await kcp_client.create(KYMAS, out_of_range)
    await a.synced()
    # a count this replica does not use: in the unlabelled part, where its holder labels it
    await eventually(lambda: a.kymas.unlabelled.get(kcp_namespace, "k1"), "k1 among the unlabelled")
    fix = FixMisplaced(kcp_client, a.kymas, a.manifests, a.coordinator)
    a.kymas.add_handler(fix)
    a.coordinator.on_acquired(fix)
    await rounds_until([a], a.clock, lambda: len(a.coordinator.held()) == SHARDS, "a holds every shard")

    async def relabelled() -> bool:
        k = await kcp_client.get(KYMAS, "k0", kcp_namespace)
        m = await kcp_client.get(MANIFESTS, "k0-module", kcp_namespace)
        labels = (k["metadata"]["labels"].get(SHARD_LABEL), m["metadata"]["labels"].get(SHARD_LABEL))
        return labels == (str(right), str(right))

    await eventually(relabelled, "the Kyma and its Manifest relabelled to the Kyma's shard")

    def in_its_shard() -> bool:
        part = a.kymas.part(right)
        return part is not None and part.get(kcp_namespace, "k0") is not None

    await eventually(in_its_shard, "k0 cached in its shard's informer")
    # counted after the last write's response, which may come after the probes saw the writes
    await eventually(lambda: fix.fixed == 1, "the fix counted once")
