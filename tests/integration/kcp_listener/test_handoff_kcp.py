"""Two sharded listener replicas against the real KCP API server hand events to each other.

What is real: the KCP API server (Kymas, Manifests, signing-key Secrets, the hand-off key Secret
the replicas create or read), informers and Controllers per replica, both replicas' public and
hand-off servers (uvicorn on 127.0.0.1) and TCP between them, and the agent's own delivery code
(``skr_watcher.delivery``) retrying on 503. The ShardView is a hand-written table
(``tests/unit/kcp_listener/sharded.StaticShards``) standing in for the Lease coordinator.
"""

from __future__ import annotations

import asyncio
import base64
import random
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from nacl.signing import SigningKey
from prometheus_client import CollectorRegistry

from kcp_listener.config import ListenerConfig
from kyma_operator.listener.handoff_key import HANDOFF_KEY_FIELD, HANDOFF_KEY_SECRET, ensure_handoff_key
from kyma_operator.listener.kube import KYMAS, MANIFESTS
from kyma_operator.listener.wiring import OperatorListener
from kyma_operator.runtime.controller import Controller
from kyma_operator.runtime.intake import Intake
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import SECRETS
from kyma_operator.runtime.shardmap import Replica
from kyma_wire.events import AgentEvent, EventBatch, Heartbeat, batch_path, event_path, heartbeat_path
from kyma_wire.profile import make_key_id
from skr_watcher.clock import SystemClock
from skr_watcher.delivery import Delivery
from skr_watcher.kcp_client import KcpClient
from skr_watcher.metrics import AgentMetrics
from skr_watcher.queue import SendQueue
from skr_watcher.retry import RetryBackoff
from skr_watcher.signer import FastEventSigner
from tests.integration.kcp_listener.helpers import DEADLINE, MANAGER, event, key_secret, kyma, manifest
from tests.integration.kcp_listener.test_listener_kcp import Recorder, running
from tests.polling import eventually
from tests.rfc9421_reference import EventSigner
from tests.unit.kcp_listener.sharded import StaticShards, runtime_in_shard

RT_A = runtime_in_shard(0, prefix="int")
RT_B = runtime_in_shard(1, prefix="int")


@dataclass
class ReplicaUnderTest:
    name: str
    listener: OperatorListener
    registry: CollectorRegistry
    kymas: Recorder
    manifests: Recorder
    controllers: tuple[Controller, Controller]

    @property
    def address(self) -> str:
        server = self.listener.handoff_server
        assert server is not None
        return f"http://127.0.0.1:{server.port}"

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float:
        return self.registry.get_sample_value(name, labels or {}) or 0.0


@dataclass
class Pair:
    namespace: str
    a: ReplicaUnderTest
    b: ReplicaUnderTest
    owners: dict[int, Replica]
    keys: dict[str, Ed25519PrivateKey]
    http: httpx.AsyncClient

    async def post_to_a(self, path: str, body: bytes, runtime_id: str) -> httpx.Response:
        request = self.http.build_request(
            "POST",
            self.a.listener.server.url + path,
            content=body,
            headers={"content-type": "application/json"},
        )
        EventSigner(self.keys[runtime_id], make_key_id(runtime_id, "v1")).sign(request)
        return await self.http.send(request)


def dead_address() -> str:
    """An address nobody listens on (a port bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def replica(name: str, ns: str, client: KubeClient, owners: dict[int, Replica]) -> ReplicaUnderTest:
    kymas, manifests = Recorder(), Recorder()
    kyma_controller, manifest_controller = (
        Controller(f"kyma-{name}", kymas),
        Controller(f"manifest-{name}", manifests),
    )
    kyma_intake, manifest_intake = Intake("runtime event", capacity=64), Intake("runtime event", capacity=64)
    kyma_controller.add_source(kyma_intake)
    manifest_controller.add_source(manifest_intake)
    registry = CollectorRegistry()
    listener = OperatorListener(
        ListenerConfig(namespace=ns, port=0, handoff_port=0),
        client=client,
        registry=registry,
        kyma_sink=kyma_intake,
        manifest_sink=manifest_intake,
        shards=StaticShards(name, owners),
    )
    return ReplicaUnderTest(
        name, listener, registry, kymas, manifests, (kyma_controller, manifest_controller)
    )


@pytest.fixture
async def pair(kcp_client: KubeClient, kcp_namespace: str) -> AsyncIterator[Pair]:
    ns = kcp_namespace
    keys = {RT_A: Ed25519PrivateKey.generate(), RT_B: Ed25519PrivateKey.generate()}
    for runtime_id, kyma_name in ((RT_A, "kyma-a"), (RT_B, "kyma-b")):
        await kcp_client.create(KYMAS, kyma(ns, kyma_name, runtime_id))
        await kcp_client.create(SECRETS, key_secret(ns, runtime_id, {"v1": keys[runtime_id]}))
    for name, owner in (("kyma-a-istio", "kyma-a"), ("kyma-b-istio", "kyma-b"), ("kyma-b-keda", "kyma-b")):
        await kcp_client.create(MANIFESTS, manifest(ns, name, owner))
    owners: dict[int, Replica] = {}
    a, b = replica("a", ns, kcp_client, owners), replica("b", ns, kcp_client, owners)
    runs = []
    for r in (a, b):
        runs += [informer.run for informer in r.listener.informers]
        runs += [controller.run for controller in r.controllers]
        runs.append(r.listener.run)
    async with running(*runs):
        for r in (a, b):
            await r.listener.server.wait_started()
            await eventually(r.listener.serving, f"replica {r.name} serving", within=DEADLINE)
        owners[0] = Replica("a", a.address)
        owners[1] = Replica("b", b.address)
        async with httpx.AsyncClient() as http:
            yield Pair(ns, a, b, owners, keys, http)


def forwarded(r: ReplicaUnderTest, result: str) -> float:
    return r.sample("kcp_listener_handoff_forwarded_events_total", {"result": result})


def enqueued(r: ReplicaUnderTest, controller: str) -> float:
    return r.sample("kcp_listener_enqueued_requests_total", {"controller": controller})


async def test_the_replicas_share_one_key_from_a_kcp_secret(pair: Pair, kcp_client: KubeClient) -> None:
    secret = await kcp_client.get(SECRETS, HANDOFF_KEY_SECRET, pair.namespace)
    assert len(base64.b64decode(secret["data"][HANDOFF_KEY_FIELD])) == 32


async def test_concurrent_first_replicas_agree_on_the_key(kcp_client: KubeClient, kcp_namespace: str) -> None:
    keys = await asyncio.gather(*(ensure_handoff_key(kcp_client, kcp_namespace) for _ in range(4)))
    assert len(set(keys)) == 1
    assert len(keys[0]) == 32


async def test_an_event_sent_to_the_non_holder_is_reconciled_by_the_holder_once(pair: Pair) -> None:
    response = await pair.post_to_a(event_path(MANAGER), event(), RT_B)
    assert response.status_code == 200, response.text
    await eventually(lambda: pair.b.kymas.seen, "the holder reconciles kyma-b")
    assert pair.b.kymas.seen == [Request(pair.namespace, "kyma-b")]
    assert enqueued(pair.b, "kyma") == 1  # counted when enqueued, before b answered a
    assert enqueued(pair.a, "kyma") == 0 and pair.a.kymas.seen == []
    assert forwarded(pair.a, "delivered") == 1
    assert pair.b.sample("kcp_listener_handoff_received_requests_total", {"result": "accepted"}) == 1
    local = await pair.post_to_a(event_path(MANAGER), event(), RT_A)
    assert local.status_code == 200
    await eventually(lambda: pair.a.kymas.seen, "replica a reconciles its own kyma-a")
    assert forwarded(pair.a, "delivered") == 1


async def test_a_batch_and_a_heartbeat_reach_the_holder(pair: Pair) -> None:
    body = EventBatch.wire_of([event(owner="kyma-b-keda"), event(owner="kyma-a-istio"), event()])
    response = await pair.post_to_a(batch_path(MANAGER), body, RT_B)
    assert response.status_code == 200, response.text
    assert [r["status"] for r in response.json()["results"]] == [200, 404, 200]
    await eventually(lambda: pair.b.kymas.seen and pair.b.manifests.seen, "the holder reconciles both")
    assert pair.b.manifests.seen == [Request(pair.namespace, "kyma-b-keda")]
    assert pair.b.kymas.seen == [Request(pair.namespace, "kyma-b")]
    assert enqueued(pair.b, "manifest") == 1 and enqueued(pair.b, "kyma") == 1
    assert pair.a.kymas.seen == [] and pair.a.manifests.seen == []

    beat = Heartbeat.model_validate({"sentAt": "2027-01-01T00:00:00Z"}).to_wire()
    assert (await pair.post_to_a(heartbeat_path(MANAGER), beat, RT_B)).status_code == 200
    assert pair.b.listener.heartbeats.last_seen(RT_B) is not None
    assert pair.a.listener.heartbeats.last_seen(RT_B) is None


async def test_holder_down_is_503_and_the_agent_delivers_once_it_is_back(pair: Pair) -> None:
    pair.owners[1] = Replica("b", dead_address())
    refused = await pair.post_to_a(event_path(MANAGER), event(), RT_B)
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "1"
    del pair.owners[1]  # and while nobody holds the shard
    assert (await pair.post_to_a(event_path(MANAGER), event(), RT_B)).status_code == 503
    assert forwarded(pair.a, "failed") == 1 and forwarded(pair.a, "no-holder") == 1

    pair.owners[1] = Replica("b", dead_address())
    metrics = AgentMetrics()
    client = KcpClient(
        pair.a.listener.server.url,
        ssl_context=None,
        signer=FastEventSigner(
            SigningKey(pair.keys[RT_B].private_bytes_raw()), make_key_id(RT_B, "v1")
        ),  # the agent signs with PyNaCl
    )
    delivery = Delivery(
        client=client,
        queue=SendQueue(100),
        metrics=metrics,
        clock=SystemClock(),
        backoff=RetryBackoff(0.05, 0.2, random.Random(7)),
        sender_tasks=1,
        heartbeat_interval=0,
    )
    delivery.start()
    try:
        delivery.submit(MANAGER, AgentEvent.model_validate_json(event(owner="kyma-b-istio")))
        await eventually(lambda: forwarded(pair.a, "failed") >= 3, "the agent retried through 503s")
        assert pair.b.manifests.seen == []
        pair.owners[1] = Replica("b", pair.b.address)  # the holder is reachable again
        await eventually(lambda: pair.b.manifests.seen, "the retried event reaches the holder")
        # the agent saw KCP fail, so it follows up with a RESYNC (the Kyma and all its Manifests)
        await eventually(
            lambda: pair.b.kymas.seen and len(set(pair.b.manifests.seen)) == 2,
            "the agent's resync reaches the holder",
        )
    finally:
        await delivery.stop(flush_within=2)
        await client.aclose()
    assert pair.b.manifests.seen[0] == Request(pair.namespace, "kyma-b-istio")
    assert set(pair.b.manifests.seen) == {Request(pair.namespace, n) for n in ("kyma-b-istio", "kyma-b-keda")}
    assert pair.b.kymas.seen == [Request(pair.namespace, "kyma-b")]
    assert metrics.registry.get_sample_value("watcher_events_sent_total") == 2  # the event, the resync
    assert pair.a.manifests.seen == [] and pair.a.kymas.seen == []
