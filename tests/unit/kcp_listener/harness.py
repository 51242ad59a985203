"""An in-process listener with in-memory directory, sinks and keys, driven through httpx."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from urllib.parse import quote

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.x509.oid import NameOID
from prometheus_client import CollectorRegistry

from kcp_listener.app import ASGIApp, build_asgi
from kcp_listener.config import ListenerConfig
from kcp_listener.handoff import Handoff
from kcp_listener.health import HeartbeatTracker
from kcp_listener.intake import EventIntake
from kcp_listener.keystore import KeyStore
from kcp_listener.metrics import ListenerMetrics
from kcp_listener.routing import InMemoryDirectory, ListSink, ObjectRef, RequestSink, Router
from kyma_wire.events import event_path, heartbeat_path
from kyma_wire.names import KCP_NAMESPACE, OPERATOR_NAME
from kyma_wire.profile import make_key_id
from tests.rfc9421_reference import EventSigner

NOW = 1_800_000_000.0
NS = KCP_NAMESPACE
MANAGER = OPERATOR_NAME
BASE_URL = "http://kcp.test"


@dataclass
class Clock:
    now: float = NOW

    def __call__(self) -> float:
        return self.now


def client_cert_pem(common_name: str) -> str:
    """A self-signed client certificate with the given CN (what the gateway would forward)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)] if common_name else [])
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "klm-watcher")]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=90))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def istio_xfcc(common_name: str) -> str:
    """``X-Forwarded-Client-Cert`` exactly as Envoy's SANITIZE_SET writes it for the gateway."""
    pem = client_cert_pem(common_name)
    cert = x509.load_pem_x509_certificate(pem.encode())
    digest = cert.fingerprint(hashes.SHA256()).hex()
    return (
        f"By=spiffe://cluster.local/ns/{KCP_NAMESPACE}/sa/{OPERATOR_NAME};"
        f"Hash={digest};"
        f'Cert="{quote(pem, safe="")}";'
        f'Subject="CN={common_name}";URI='
    )


@dataclass
class Harness:
    config: ListenerConfig
    clock: Clock = field(default_factory=Clock)
    directory: InMemoryDirectory = field(default_factory=InMemoryDirectory)
    kyma_sink: ListSink[ObjectRef] = field(default_factory=ListSink[ObjectRef])
    manifest_sink: ListSink[ObjectRef] = field(default_factory=ListSink[ObjectRef])
    kyma_intake: RequestSink | None = None
    """When set, Kyma requests go here (a real controller's ``Intake``) instead of ``kyma_sink``."""
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    serving: bool = True
    private_keys: dict[str, Ed25519PrivateKey] = field(default_factory=dict)
    handoff: Handoff | None = None
    """Sharded: events of shards held elsewhere are handed off (``tests/unit/kcp_listener/sharded.py``)."""
    held_from: float = 0.0
    """Unsharded: wall-clock time this listener took over (signatures older + skew are refused);
    0: it has always held everything (no previous holder). Sharded: per shard, ``StaticShards.since``."""

    def __post_init__(self) -> None:
        self.keys = KeyStore(self.registry)
        self.heartbeats = HeartbeatTracker(
            clock=self.clock, max_silence=self.config.heartbeat_max_silence_seconds
        )
        self.heartbeats.register(self.registry)
        self.metrics = ListenerMetrics(self.registry)
        self.intake = EventIntake(
            self.config,
            keys=self.keys,
            router=Router(self.directory),
            kyma_sink=self.kyma_intake or self.kyma_sink,
            manifest_sink=self.manifest_sink,
            heartbeats=self.heartbeats,
            metrics=self.metrics,
            serving=lambda: self.serving,
            clock=self.clock,
            handoff=self.handoff,
            held_since=self.handoff.held_since if self.handoff is not None else (lambda _r: self.held_from),
        )
        self.app: ASGIApp = build_asgi(self.intake)
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url=BASE_URL)

    def add_runtime(
        self, runtime_id: str, kyma: str, manifests: Iterable[str] = (), version: str = "v1"
    ) -> None:
        self.directory.add_kyma(NS, kyma, runtime_id)
        for manifest in manifests:
            self.directory.add_manifest(NS, manifest, kyma)
        key = Ed25519PrivateKey.generate()
        self.private_keys[runtime_id] = key
        self.keys.set_keys(f"test/{runtime_id}", runtime_id, {version: key.public_key()})

    def request(
        self,
        body: bytes,
        *,
        runtime_id: str = "rt-1",
        path: str | None = None,
        sign: bool = True,
        key: Ed25519PrivateKey | None = None,
        version: str = "v1",
        at: float | None = None,
        xfcc: str | None = None,
        method: str = "POST",
    ) -> httpx.Request:
        url = BASE_URL + (path or event_path(MANAGER))
        request = httpx.Request(method, url, content=body, headers={"content-type": "application/json"})
        if sign:
            signer_key = key or self.private_keys[runtime_id]
            EventSigner(signer_key, make_key_id(runtime_id, version), clock=lambda: at or self.clock()).sign(
                request
            )
        if xfcc is not None:
            request.headers["x-forwarded-client-cert"] = xfcc
        return request

    async def send(self, request: httpx.Request) -> httpx.Response:
        return await self.client.send(request)

    async def post(self, body: bytes, **kwargs: object) -> httpx.Response:
        return await self.send(self.request(body, **kwargs))  # type: ignore[arg-type]

    def sample(self, name: str, labels: dict[str, str] | None = None) -> float:
        value = self.registry.get_sample_value(name, labels or {})
        return 0.0 if value is None else value

    @property
    def enqueued(self) -> list[str]:
        return [f"kyma:{ref}" for ref in self.kyma_sink.items] + [
            f"manifest:{ref}" for ref in self.manifest_sink.items
        ]

    async def aclose(self) -> None:
        await self.client.aclose()


async def chunks(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


__all__ = ["MANAGER", "NOW", "NS", "Clock", "Harness", "chunks", "event_path", "heartbeat_path", "istio_xfcc"]
