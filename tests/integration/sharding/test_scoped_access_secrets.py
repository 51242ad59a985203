"""Shard-scoped access Secrets on the real KCP: a replica caches the access Secrets (the runtimes'
kubeconfigs) of the shards it holds plus the unlabelled ones, a hand-off moves them with the shard,
the holder labels an unlabelled (or provisioner-rewritten, or misplaced) Secret with its Kyma's
shard without the Secret ever leaving the view, and a whole operator pair keeps reconciling a Kyma
whose Secret a provisioner relabels.

The first tests drive two ``ShardCoordinator``s by hand on a ``FakeClock`` (as test_scoped_caches)
over real shard-scoped informers; the last runs two whole operators in this process against two
real runtimes (tests/controlplane).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest

from kyma_operator.api import names as api_names
from kyma_operator.api.resources import KYMAS
from kyma_operator.controllers.sharding import (
    FixMisplaced,
    ShardLabelling,
    StraySecrets,
    scoped_access_secrets,
    scoped_informers,
)
from kyma_operator.remote.secrets import AccessSecrets
from kyma_operator.runtime.clock import FakeClock
from kyma_operator.runtime.informer import FuncHandler, Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request, Result
from kyma_operator.runtime.resources import SECRETS
from kyma_operator.runtime.shardinformer import ShardCaches, ShardedInformer
from kyma_operator.runtime.sharding import ShardCoordinator, ShardingConfig
from kyma_operator.runtime.shardmap import SHARD_LABEL, shard_of
from kyma_wire.names import KYMA_NAME_LABEL
from localrun.kcp import SKR_CRD_PLURALS
from tests.controlplane.cluster import APIServer, free_port
from tests.controlplane.crds import apply_crds
from tests.integration.kyma_operator.harness import access_secret, operator_config, running_operator
from tests.integration.kyma_operator.harness import kyma_body as runtime_kyma
from tests.integration.sharding.test_scoped_caches import kyma_body
from tests.polling import eventually

SHARDS = 8
LABELLED = 24
UNLABELLED = 3
DURATION, DEADLINE, RETRY = 4.0, 3.0, 1.0
KUBECONFIG = b"apiVersion: v1\nkind: Config\nclusters: []\n"


def secret_body(namespace: str, i: int, *, labelled: bool) -> dict[str, Any]:
    body = access_secret(f"k{i}-kubeconfig", namespace, f"k{i}", KUBECONFIG)
    if labelled:
        body["metadata"]["labels"][SHARD_LABEL] = str(shard_of(f"rt-{i}", SHARDS))
    return body


@pytest.fixture(scope="session")
def skr_crds(skr: APIServer, skr_b: APIServer) -> tuple[APIServer, APIServer]:
    """Both runtimes serve the Kyma CRD (as tests/integration/kyma_operator/conftest.py)."""
    for server in (skr, skr_b):
        apply_crds(server.kubeconfig_path, plurals=SKR_CRD_PLURALS)
    return skr, skr_b


@pytest.fixture
async def fleet(kcp_client: KubeClient, kcp_namespace: str) -> dict[str, int]:
    """24 labelled Kymas with labelled access Secrets, 3 unlabelled ones with unlabelled Secrets
    (-> their shard); and a Secret the operator writes itself for k0 (not an access Secret)."""
    shards = {}
    for i in range(LABELLED + UNLABELLED):
        labelled = i < LABELLED
        await kcp_client.create(KYMAS, kyma_body(kcp_namespace, i, labelled=labelled))
        await kcp_client.create(SECRETS, secret_body(kcp_namespace, i, labelled=labelled))
        shards[f"k{i}"] = shard_of(f"rt-{i}", SHARDS)
    own = access_secret("k0-webhook-tls", kcp_namespace, "k0", b"not a kubeconfig")
    own["metadata"]["labels"][api_names.MANAGED_BY_LABEL] = api_names.OPERATOR_NAME
    await kcp_client.create(SECRETS, own)
    return shards


class Replica:
    """A coordinator over its own shard-scoped Kyma, Manifest and access-Secret informers (running)."""

    def __init__(self, client: KubeClient, namespace: str, name: str, clock: FakeClock) -> None:
        self.clock = clock
        self.kymas, self.manifests = scoped_informers(client, namespace, SHARDS)
        self.secrets = scoped_access_secrets(client, namespace, SHARDS, self.kymas)
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
            client, config, clock=clock, shard_caches=ShardCaches(self.kymas, self.manifests, self.secrets)
        )
        self.secrets_on_acquire: dict[int, set[str]] = {}
        self.coordinator.on_acquired(self._record)
        self.tasks = [asyncio.create_task(i.run()) for i in (self.kymas, self.manifests, self.secrets)]

    def _record(self, shard: int) -> None:
        part = self.secrets.part(shard)
        self.secrets_on_acquire[shard] = names(part) if part is not None else set()

    async def synced(self) -> None:
        for informer in (self.kymas, self.manifests, self.secrets):
            assert await informer.wait_synced(30)

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def names(informer: Informer) -> set[str]:
    return {str(obj["metadata"]["name"]) for obj in informer.list()}


def expected_secrets(fleet: dict[str, int], held: Iterable[int]) -> set[str]:
    """The access Secrets a replica holding ``held`` caches: its shards' plus every unlabelled one."""
    mine = set(held)
    return {
        f"{name}-kubeconfig" for name, shard in fleet.items() if shard in mine or int(name[1:]) >= LABELLED
    }


def unlabelled_secrets() -> set[str]:
    return {f"k{i}-kubeconfig" for i in range(LABELLED, LABELLED + UNLABELLED)}


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


class Events:
    """Records what the view's handlers see."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def on_add(self, obj: dict[str, Any]) -> None:
        self.seen.append(("add", obj["metadata"]["name"]))

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.seen.append(("update", new["metadata"]["name"]))

    def on_delete(self, obj: dict[str, Any]) -> None:
        self.seen.append(("delete", obj["metadata"]["name"]))


class Done:
    async def reconcile(self, request: Request) -> Result:
        return Result()


async def test_a_replica_caches_only_its_shards_access_secrets_and_a_hand_off_moves_them(
    fleet: dict[str, int], replicas: list[Replica]
) -> None:
    a, b = replicas
    clock = a.clock
    await a.synced()
    await b.synced()
    assert isinstance(a.secrets, ShardedInformer)
    # before any shard is held: the unlabelled access Secrets only (never the operator's own)
    assert names(a.secrets) == unlabelled_secrets()

    await rounds_until([a], clock, lambda: len(a.coordinator.held()) == SHARDS, "a holds every shard")
    assert names(a.secrets) == expected_secrets(fleet, range(SHARDS))
    # each shard's Secrets were cached before the shard was acted on
    for shard in range(SHARDS):
        want = {f"{n}-kubeconfig" for n, s in fleet.items() if s == shard and int(n[1:]) < LABELLED}
        assert a.secrets_on_acquire[shard] == want
    assert AccessSecrets(a.secrets).select(Request(a.kymas.namespace or "", "k0")).kubeconfig == KUBECONFIG

    def split() -> bool:
        held_a, held_b = a.coordinator.held(), b.coordinator.held()
        return len(held_a) == len(held_b) == SHARDS // 2 and not held_a & held_b

    await rounds_until([a, b], clock, split, "the shards split 4/4")
    held_a, held_b = a.coordinator.held(), b.coordinator.held()
    assert a.secrets.shards_cached == sorted(held_a) and b.secrets.shards_cached == sorted(held_b)
    assert names(a.secrets) == expected_secrets(fleet, held_a)
    assert names(b.secrets) == expected_secrets(fleet, held_b)
    assert names(a.secrets) & names(b.secrets) == unlabelled_secrets()
    for shard in held_b:
        want = {f"{n}-kubeconfig" for n, s in fleet.items() if s == shard and int(n[1:]) < LABELLED}
        assert b.secrets_on_acquire[shard] == want


async def test_the_holder_labels_an_unlabelled_access_secret_and_relabels_it_after_a_provisioner(
    kcp_client: KubeClient, kcp_namespace: str, fleet: dict[str, int], replicas: list[Replica]
) -> None:
    a, b = replicas
    await a.synced()
    await b.synced()
    await rounds_until([a], a.clock, lambda: len(a.coordinator.held()) == SHARDS, "a holds every shard")
    events = Events()
    a.secrets.add_handler(events)
    events.seen.clear()
    name = f"k{LABELLED}"
    secret = f"{name}-kubeconfig"
    shard = fleet[name]
    access = AccessSecrets(a.secrets)
    labelling = ShardLabelling(Done(), kcp_client, a.kymas, SHARDS, a.manifests, secrets=a.secrets)

    async def labelled_in_its_shard() -> bool:
        assert access.select(Request(kcp_namespace, name)).kubeconfig == KUBECONFIG  # never missing
        part = a.secrets.part(shard)
        live = await kcp_client.get(SECRETS, secret, kcp_namespace)
        return (
            part is not None
            and part.get(kcp_namespace, secret) is not None
            and a.secrets.unlabelled.get(kcp_namespace, secret) is None
            and not a.secrets.in_transit(kcp_namespace, secret)
            and live["metadata"]["labels"].get(SHARD_LABEL) == str(shard)
        )

    await labelling.reconcile(Request(kcp_namespace, name))
    await eventually(labelled_in_its_shard, "the access Secret labelled and cached in its shard")
    assert ("delete", secret) not in events.seen  # a move, not a deletion
    # b does not hold the shard: it no longer caches the Secret
    await eventually(lambda: b.secrets.get(kcp_namespace, secret) is None, "b drops the labelled Secret")

    # a provisioner rewrites the Secret's labels (and rotates the kubeconfig): back among the unlabelled
    live = await kcp_client.get(SECRETS, secret, kcp_namespace)
    live["metadata"]["labels"] = {KYMA_NAME_LABEL: name}
    rotated = KUBECONFIG + b"# rotated\n"
    live["data"] = {"config": base64.b64encode(rotated).decode()}
    await kcp_client.update(SECRETS, live)

    def found_unlabelled() -> bool:
        # (not asserted in between: the shard part's delete and the unlabelled part's add come on
        # two watches, and a delete first is a real gap, reported to the handlers as a deletion)
        cached = a.secrets.get(kcp_namespace, secret)
        return (
            cached is not None
            and a.secrets.unlabelled.get(kcp_namespace, secret) is not None
            and b.secrets.get(kcp_namespace, secret) is not None
            and access.select(Request(kcp_namespace, name)).kubeconfig == rotated
        )

    await eventually(found_unlabelled, "the rewritten Secret among the unlabelled, found by the Kyma")
    events.seen.clear()
    # the next labelling puts it back into its shard
    await labelling.reconcile(Request(kcp_namespace, name))

    async def back_in_its_shard() -> bool:
        part = a.secrets.part(shard)
        live = await kcp_client.get(SECRETS, secret, kcp_namespace)
        return (
            part is not None
            and part.get(kcp_namespace, secret) is not None
            and live["metadata"]["labels"].get(SHARD_LABEL) == str(shard)
        )

    await eventually(back_in_its_shard, "the access Secret labelled again")
    await eventually(lambda: b.secrets.get(kcp_namespace, secret) is None, "b drops it again")
    assert ("delete", secret) not in events.seen  # this replica's own relabel: a move
    assert access.select(Request(kcp_namespace, name)).kubeconfig == rotated


async def test_a_misplaced_kymas_access_secret_moves_with_it(
    kcp_client: KubeClient, kcp_namespace: str, replicas: list[Replica]
) -> None:
    a, _ = replicas
    i = 0
    right = shard_of(f"rt-{i}", SHARDS)
    wrong = (right + 1) % SHARDS  # in range, but not its shard (e.g. after --shards changed)
    kyma = kyma_body(kcp_namespace, i, labelled=False)
    kyma["metadata"]["labels"][SHARD_LABEL] = str(wrong)
    await kcp_client.create(KYMAS, kyma)
    secret = secret_body(kcp_namespace, i, labelled=False)
    secret["metadata"]["labels"][SHARD_LABEL] = str(wrong)
    await kcp_client.create(SECRETS, secret)
    await a.synced()
    fix = FixMisplaced(kcp_client, a.kymas, a.manifests, a.coordinator, a.secrets)
    a.kymas.add_handler(fix)
    a.coordinator.on_acquired(fix)
    await rounds_until([a], a.clock, lambda: len(a.coordinator.held()) == SHARDS, "a holds every shard")

    async def relabelled() -> bool:
        live = await kcp_client.get(SECRETS, f"k{i}-kubeconfig", kcp_namespace)
        part = a.secrets.part(right)
        return (
            live["metadata"]["labels"].get(SHARD_LABEL) == str(right)
            and part is not None
            and part.get(kcp_namespace, f"k{i}-kubeconfig") is not None
        )

    await eventually(relabelled, "the access Secret relabelled to its Kyma's shard with the Kyma")


async def test_a_secret_labelled_apart_from_its_kyma_is_unlabelled_and_then_labelled_by_the_kymas_holder(
    kcp_client: KubeClient, kcp_namespace: str, replicas: list[Replica]
) -> None:
    a, b = replicas
    await a.synced()
    await b.synced()
    for replica in (a, b):
        stray = StraySecrets(kcp_client, replica.kymas, replica.secrets, replica.coordinator)
        replica.secrets.add_handler(stray)
        replica.kymas.add_handler(FuncHandler(on_delete=stray.kyma_left))
        replica.coordinator.on_acquired(stray)

    def split() -> bool:
        held_a, held_b = a.coordinator.held(), b.coordinator.held()
        return len(held_a) == len(held_b) == SHARDS // 2 and not held_a & held_b

    await rounds_until([a, b], a.clock, split, "the shards split 4/4")
    i = next(i for i in range(100, 1000) if shard_of(f"rt-{i}", SHARDS) in b.coordinator.held())
    right, stale = shard_of(f"rt-{i}", SHARDS), min(a.coordinator.held())
    await kcp_client.create(KYMAS, kyma_body(kcp_namespace, i, labelled=True))  # b's
    secret = secret_body(kcp_namespace, i, labelled=False)
    secret["metadata"]["labels"][SHARD_LABEL] = str(stale)  # a copy with a stale label: a's shard
    await kcp_client.create(SECRETS, secret)
    name = f"k{i}-kubeconfig"

    # a caches it but has no Kyma for it: removes the label; b finds it among the unlabelled. The
    # labelling runs in a reconcile of a cached Kyma: b's Kyma and Secret caches are two watches,
    # the Secret's (through a's write) can come first, so b caching the Kyma is waited for too
    await eventually(lambda: b.secrets.unlabelled.get(kcp_namespace, name), "the Secret unlabelled")
    await eventually(lambda: b.kymas.get(kcp_namespace, f"k{i}"), "b caches the Kyma")
    labelling = ShardLabelling(Done(), kcp_client, b.kymas, SHARDS, b.manifests, secrets=b.secrets)
    await labelling.reconcile(Request(kcp_namespace, f"k{i}"))

    async def with_its_kyma() -> bool:
        live = await kcp_client.get(SECRETS, name, kcp_namespace)
        part = b.secrets.part(right)
        return (
            live["metadata"]["labels"].get(SHARD_LABEL) == str(right)
            and part is not None
            and part.get(kcp_namespace, name) is not None
            and a.secrets.get(kcp_namespace, name) is None
        )

    await eventually(with_its_kyma, "the Secret labelled with its Kyma's shard, cached by b only")
    assert AccessSecrets(b.secrets).select(Request(kcp_namespace, f"k{i}")).kubeconfig == KUBECONFIG

    # the same with an unlabelled Kyma: a sees it (unlabelled part) and keeps the Secret's stale
    # label until b labels the Kyma and it leaves a's view
    j = next(j for j in range(i + 1, 1000) if shard_of(f"rt-{j}", SHARDS) in b.coordinator.held())
    await kcp_client.create(KYMAS, kyma_body(kcp_namespace, j, labelled=False))
    await eventually(lambda: a.kymas.get(kcp_namespace, f"k{j}"), "a sees the unlabelled Kyma")
    await eventually(lambda: b.kymas.get(kcp_namespace, f"k{j}"), "b sees the unlabelled Kyma")
    secret = secret_body(kcp_namespace, j, labelled=False)
    secret["metadata"]["labels"][SHARD_LABEL] = str(stale)
    await kcp_client.create(SECRETS, secret)
    name = f"k{j}-kubeconfig"
    await eventually(lambda: a.secrets.get(kcp_namespace, name), "a caches the stale-labelled Secret")
    await labelling.reconcile(Request(kcp_namespace, f"k{j}"))  # b labels the Kyma (not the Secret)
    await eventually(lambda: b.secrets.unlabelled.get(kcp_namespace, name), "the Secret unlabelled")
    await labelling.reconcile(Request(kcp_namespace, f"k{j}"))
    right = shard_of(f"rt-{j}", SHARDS)

    def labelled_for_b() -> bool:
        part = b.secrets.part(right)
        return part is not None and part.get(kcp_namespace, name) is not None

    await eventually(labelled_for_b, "the Secret labelled with its Kyma's shard by b")


async def test_two_operators_label_access_secrets_and_reconcile_after_a_provisioner_relabels(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_b_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
) -> None:
    runtimes = dict(zip(("live-a", "live-b"), skr_crds, strict=True))
    for name, server in runtimes.items():
        await kcp_client.create(KYMAS, runtime_kyma(name, kcp_namespace, f"rt-{name}"))
        await kcp_client.create(
            SECRETS, access_secret(f"{name}-kubeconfig", kcp_namespace, name, server.kubeconfig)
        )
    shard = {name: shard_of(f"rt-{name}", SHARDS) for name in runtimes}
    webhook_url = f"https://127.0.0.1:{free_port()}"  # nothing listens: failurePolicy Ignore

    def config(replica: str) -> Any:
        return operator_config(
            kcp_namespace,
            sharding=True,
            shard_scoped_caches=True,
            shards=SHARDS,
            replica_id=replica,
            handoff_port=free_port(),
            webhook_url=webhook_url,
            leader_elect=True,
            leader_election_id=f"klm-{kcp_namespace}",
            leader_elect_lease_duration=4,
            leader_elect_renew_deadline=3,
            leader_elect_retry_period=0.5,
            failure_base_delay=1.0,
            failure_max_delay=1.0,
        )

    skrs = (skr_client, skr_b_client)
    async with contextlib.AsyncExitStack() as stack:
        r0 = await stack.enter_async_context(running_operator(kcp_client, config("r0"), skrs=skrs))
        r1 = await stack.enter_async_context(running_operator(kcp_client, config("r1"), skrs=skrs))
        c0, c1 = r0.operator.coordinator, r1.operator.coordinator
        assert c0 is not None and c1 is not None
        await eventually(lambda: len(c0.held()) == len(c1.held()) == SHARDS // 2, "4/4 split", within=60)
        s0, s1 = r0.operator.kyma.access_secrets, r1.operator.kyma.access_secrets
        assert isinstance(s0, ShardedInformer) and isinstance(s1, ShardedInformer)

        async def labelled_and_reconciled() -> bool:
            for name in runtimes:
                live = await kcp_client.get(SECRETS, f"{name}-kubeconfig", kcp_namespace)
                kyma = await kcp_client.get(KYMAS, name, kcp_namespace)
                state = (kyma.get("status") or {}).get("state")
                if live["metadata"]["labels"].get(SHARD_LABEL) != str(shard[name]) or state not in (
                    "Processing",
                    "Ready",
                ):
                    return False
            return True

        await eventually(
            labelled_and_reconciled, "both access Secrets labelled, both Kymas reconciled", within=60
        )

        def caches_follow_shards() -> bool:
            return all(
                len(s.unlabelled) == 0
                and names(s) == {f"{n}-kubeconfig" for n in runtimes if shard[n] in c.held()}
                for s, c in ((s0, c0), (s1, c1))
            )

        await eventually(
            caches_follow_shards, "each replica caches exactly its shards' access Secrets", within=30
        )

        # a provisioner rewrites live-a's Secret (labels replaced): the Kyma still reconciles, and
        # its holder labels the Secret again after a reconcile that found it among the unlabelled
        holder = r0 if shard["live-a"] in c0.held() else r1
        live = await kcp_client.get(SECRETS, "live-a-kubeconfig", kcp_namespace)
        live["metadata"]["labels"] = {KYMA_NAME_LABEL: "live-a"}
        rewritten = await kcp_client.update(SECRETS, live)
        since = len(holder.reports)
        kyma = await kcp_client.get(KYMAS, "live-a", kcp_namespace)
        kyma["spec"]["channel"] = "fast"  # a generation change: a reconcile
        await kcp_client.update(KYMAS, kyma)

        async def labelled_again() -> bool:
            live = await kcp_client.get(SECRETS, "live-a-kubeconfig", kcp_namespace)
            rv = int(live["metadata"]["resourceVersion"])
            return rv > int(rewritten["metadata"]["resourceVersion"]) and live["metadata"]["labels"].get(
                SHARD_LABEL
            ) == str(shard["live-a"])

        await eventually(labelled_again, "the rewritten Secret labelled again by its holder", within=30)
        await eventually(caches_follow_shards, "the Secret back in its shard's cache only", within=30)
        await holder.wait_report(
            lambda r: r.request.name == "live-a" and r.outcome in ("Processing", "Ready"),
            what="live-a reconciled after its Secret was rewritten",
            deadline=30,
            after=since,
        )
