"""Sharded listener replicas in one process: a hand-written ShardView, in-process HTTP between them.

Each replica is a :class:`~tests.unit.kcp_listener.harness.Harness` with a ``Handoff``; its
hand-off endpoint (the real ``HandoffApp``) is reachable at ``http://<name>.internal:8083`` through
:class:`Network`, an httpx transport that dispatches to the replicas' ASGI apps (and refuses
connections to replicas marked down). All replicas share one clock, one hand-off key, the same
Kymas and the same runtime signing keys, as replicas reading one KCP would.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from prometheus_client import CollectorRegistry

from kcp_listener.config import ListenerConfig
from kcp_listener.handoff import Forwarder, Handoff, HandoffMetrics
from kcp_listener.handoff_auth import HandoffSigner, HandoffVerifier
from kcp_listener.handoff_server import HandoffApp
from kyma_operator.listener.shards import RuntimeShardView
from kyma_operator.runtime.shardmap import Replica, shard_of
from kyma_wire.httpx_transport import HttpxTransport
from tests.unit.kcp_listener.harness import NS, Clock, Harness

KEY = b"0123456789abcdef0123456789abcdef"
SHARDS = 4


@dataclass
class StaticShards:
    """A ShardView over a shared ``owners`` table (shard -> holder), as replica ``me`` sees it."""

    me: str
    owners: dict[int, Replica]
    shards: int = SHARDS
    since: dict[int, float] = field(default_factory=dict)
    """Wall-clock time each shard was taken (``held_since``); absent: held since 0."""

    def holds(self, shard: int) -> bool:
        replica = self.owners.get(shard)
        return replica is not None and replica.identity == self.me

    def held_since(self, shard: int) -> float | None:
        return self.since.get(shard, 0.0) if self.holds(shard) else None

    def holder(self, shard: int) -> Replica | None:
        return self.owners.get(shard)


def runtime_in_shard(shard: int, prefix: str = "rt", shards: int = SHARDS) -> str:
    """The first ``<prefix>-<n>`` whose shard is ``shard``."""
    n = 0
    while shard_of(f"{prefix}-{n}", shards) != shard:
        n += 1
    return f"{prefix}-{n}"


def address(name: str) -> str:
    return f"http://{name}.internal:8083"


@dataclass
class Network(httpx.AsyncBaseTransport):
    """In-process HTTP to the replicas' hand-off apps; a replica in ``down`` refuses connections."""

    apps: dict[str, httpx.ASGITransport] = field(default_factory=dict)
    down: set[str] = field(default_factory=set)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host.removesuffix(".internal")
        app = self.apps.get(host)
        if app is None or host in self.down:
            raise httpx.ConnectError("connection refused", request=request)
        return await app.handle_async_request(request)


@dataclass
class Node:
    name: str
    harness: Harness
    app: HandoffApp
    forwarder: Forwarder
    handoff: Handoff

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float:
        return self.harness.sample(name, labels)


@dataclass
class Cluster:
    nodes: dict[str, Node]
    owners: dict[int, Replica]
    network: Network
    clock: Clock

    def __getitem__(self, name: str) -> Node:
        return self.nodes[name]

    def assign(self, shard: int, name: str | None) -> None:
        """Shard ``shard`` now held by replica ``name`` (None: by nobody)."""
        if name is None:
            self.owners.pop(shard, None)
        else:
            self.owners[shard] = Replica(name, address(name))

    def add_runtime(self, runtime_id: str, kyma: str | None, manifests: Iterable[str] = ()) -> None:
        """The same Kyma, Manifests and signing key on every replica (they all read one KCP);
        ``kyma=None``: the runtime's signing key only."""
        key = Ed25519PrivateKey.generate()
        manifests = tuple(manifests)
        for node in self.nodes.values():
            h = node.harness
            if kyma is not None:
                h.directory.add_kyma(NS, kyma, runtime_id)
                for manifest in manifests:
                    h.directory.add_manifest(NS, manifest, kyma)
            h.private_keys[runtime_id] = key
            h.keys.set_keys(f"test/{runtime_id}", runtime_id, {"v1": key.public_key()})

    async def aclose(self) -> None:
        for node in self.nodes.values():
            await node.forwarder.aclose()
            await node.harness.aclose()


def cluster(
    names: Iterable[str], config: ListenerConfig | None = None, key: bytes = KEY, parallel: int = 4
) -> Cluster:
    config = config or ListenerConfig()
    clock = Clock()
    owners: dict[int, Replica] = {}
    network = Network()
    nodes: dict[str, Node] = {}
    for name in names:
        registry = CollectorRegistry()
        metrics = HandoffMetrics(registry)
        forwarder = Forwarder(
            HandoffSigner(key, clock=clock),
            metrics,
            client=HttpxTransport(network, timeout=2.0),
            parallel=parallel,
        )

        def current(f: Forwarder = forwarder) -> Forwarder | None:
            return f

        handoff = Handoff(RuntimeShardView(StaticShards(name, owners)), metrics, current)
        harness = Harness(config, clock=clock, registry=registry, handoff=handoff)
        app = HandoffApp(
            harness.intake,
            HandoffVerifier(key, clock=clock),
            metrics,
            max_body_bytes=config.handoff_max_body_bytes,
        )
        network.apps[name] = httpx.ASGITransport(app=app)
        nodes[name] = Node(name, harness, app, forwarder, handoff)
    return Cluster(nodes, owners, network, clock)
