"""The controllers' side of sharding on the real KCP: shard of a cached Kyma, the shard label
written by the holder after a reconcile, runtime clients closed when a shard is released."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import yaml

from kyma_operator.api.resources import KYMAS
from kyma_operator.controllers.sharding import ReleaseClients, ShardLabelling, kyma_shard
from kyma_operator.remote import AccessSecret, SkrClientCache
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request, Result
from kyma_operator.runtime.shardmap import SHARD_LABEL, shard_of
from kyma_wire.names import RUNTIME_ID_LABEL
from tests.polling import eventually

SHARDS = 4
COUNT = 12


@pytest.fixture
async def kymas(kcp_client: KubeClient, kcp_namespace: str) -> AsyncIterator[Informer]:
    for i in range(COUNT):
        await kcp_client.create(
            KYMAS,
            {
                "metadata": {
                    "name": f"k{i}",
                    "namespace": kcp_namespace,
                    "labels": {RUNTIME_ID_LABEL: f"rt-{i}"},
                },
                "spec": {"channel": "regular"},
            },
        )
    informer = Informer(kcp_client, KYMAS, namespace=kcp_namespace, name="kymas")
    task = asyncio.create_task(informer.run())
    await informer.wait_synced(30)
    yield informer
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


class Done:
    def __init__(self) -> None:
        self.calls: list[Request] = []

    async def reconcile(self, request: Request) -> Result:
        self.calls.append(request)
        return Result()


def runtime_kubeconfig() -> bytes:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    ).encode()


class OneSecretEach:
    """Every Kyma has an access Secret (clients are built, never connected)."""

    def select(self, kyma: Request) -> AccessSecret:
        return AccessSecret(
            kyma.namespace, f"{kyma.name}-kubeconfig", f"uid-{kyma.name}", "1", runtime_kubeconfig()
        )


async def test_the_shard_of_a_kyma_follows_its_runtime_id(kymas: Informer, kcp_namespace: str) -> None:
    shard = kyma_shard(kymas, SHARDS)
    for i in range(COUNT):
        assert shard(Request(kcp_namespace, f"k{i}")) == shard_of(f"rt-{i}", SHARDS)
    assert shard(Request(kcp_namespace, "gone")) == shard_of("gone", SHARDS)  # not cached: its name


async def test_the_holder_writes_the_shard_label_after_the_reconcile(
    kymas: Informer, kcp_client: KubeClient, kcp_namespace: str
) -> None:
    inner = Done()
    labelling = ShardLabelling(inner, kcp_client, kymas, SHARDS)
    request = Request(kcp_namespace, "k3")
    assert await labelling.reconcile(request) == Result() and inner.calls == [request]
    kyma = await kcp_client.get(KYMAS, "k3", kcp_namespace)
    assert kyma["metadata"]["labels"][SHARD_LABEL] == str(shard_of("rt-3", SHARDS))
    await eventually(lambda: (kymas.get(kcp_namespace, "k3") or {})["metadata"]["labels"].get(SHARD_LABEL))
    await labelling.reconcile(request)
    assert labelling.writes == 1  # already right: no second write


async def test_releasing_a_shard_closes_its_kymas_runtime_clients_only(
    kymas: Informer, kcp_namespace: str
) -> None:
    cache = SkrClientCache(OneSecretEach())
    requests = [Request(kcp_namespace, f"k{i}") for i in range(COUNT)]
    for request in requests:
        await cache.get(request)
    shard = kyma_shard(kymas, SHARDS)
    released = shard(requests[0])
    release = ReleaseClients([cache], kymas, shard)
    release(released)
    gone = {r for r in requests if shard(r) == released}
    await eventually(lambda: all(r not in cache for r in gone), "clients of the released shard closed")
    assert all(r in cache for r in requests if r not in gone)
    assert release.closed == len(gone)
    await cache.close()
