"""A bad gateway Secret on a real KCP API server: reported, repaired when ours, never fatal to the fleet.

Mirrors upstream ``gateway_secret_server_cert_metric_test.go``: the metric
``lifecycle_mgr_gateway_secret_server_cert_close_to_expiry`` reads 0, then the step writes a foreign
self-signed ECDSA certificate (valid from an hour ago for 7 days) into the gateway Secret's
``tls.crt`` with a merge patch, and the metric reads 1. Ours on top (upstream leaves the Secret
broken: its ``tls.key`` no longer matches): the next look re-issues the server certificate from our
CA, keeps the bundle (so no runtime's certificate changes and every agent keeps connecting),
records a Warning Event on the Secret, and the next look after that reads 0. A Secret whose
managed-by label was removed is not ours: never written, the last good bundle stays in use.
``lifecycle_mgr_self_signed_cert_not_renew`` is 1 while a due runtime certificate cannot be stored.
"""

from __future__ import annotations

import base64
import datetime
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from prometheus_client import CollectorRegistry

from kyma_operator.api import names
from kyma_operator.controllers.watcher.events import EventRecorder
from kyma_operator.identity import metrics as m
from kyma_operator.identity import secret_layout as layout
from kyma_operator.identity.ca import KeyPair, issued_by
from kyma_operator.identity.metrics import IdentityMetrics
from kyma_operator.identity.store import GATEWAY_INVALID, GATEWAY_REPAIRED, IdentityConfig, IdentityStore
from kyma_operator.runtime.errors import KubeError
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import CORE_EVENTS, SECRETS
from tests.integration.kyma_operator.identity.helpers import WallClock

T0 = datetime.datetime(2026, 6, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)
GATEWAY = "klm-istio-gateway"


def _store(
    client: KubeClient, namespace: str, clock: WallClock, registry: CollectorRegistry
) -> IdentityStore:
    return IdentityStore(
        client,
        config=IdentityConfig(
            namespace=namespace, public_key_namespace=namespace, server_names=("listener.test",)
        ),
        wall_clock=clock,
        metrics=IdentityMetrics(registry),
        events=EventRecorder(client, component="identity-test", wall_clock=clock),
        trust_cache_seconds=0.0,  # every call is a look at the Secret, as a forced rotator step is
    )


def expiring_cert_pem(now: datetime.datetime) -> bytes:
    """Upstream's ``generateSelfSignedCertPEM(now-1h, now+7d)``: ECDSA P-256, CN "test", serial 1."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + 7 * DAY)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def gauge(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float | None:
    return registry.get_sample_value(name, labels or {})


def data_of(secret: dict[str, Any]) -> dict[str, bytes]:
    return {key: base64.b64decode(value) for key, value in secret["data"].items()}


async def events_for(client: KubeClient, namespace: str, reason: str) -> list[dict[str, Any]]:
    listed = await client.list(CORE_EVENTS, namespace)
    return [e for e in listed.items if e["involvedObject"]["name"] == GATEWAY and e["reason"] == reason]


async def write_foreign_cert(client: KubeClient, namespace: str, now: datetime.datetime) -> None:
    """Upstream's ``UpdateGatewaySecretWithExpiringCert``: a merge patch of ``tls.crt`` only."""
    pem = base64.b64encode(expiring_cert_pem(now)).decode()
    await client.patch(SECRETS, GATEWAY, {"data": {layout.TLS_CRT: pem}}, namespace)


async def test_a_foreign_expiring_server_cert_is_reported_and_repaired_and_runtimes_keep_working(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    ns, clock, registry = kcp_namespace, WallClock(T0), CollectorRegistry()
    store = _store(kcp_client, ns, clock, registry)
    before = await store.ensure_runtime(kyma_name="kyma-g", runtime_id="rt-g", skr_domain="g.example.com")
    assert gauge(registry, m.GATEWAY_CLOSE_TO_EXPIRY) == 0  # upstream: "Then the metric is set to 0"
    assert gauge(registry, m.GATEWAY_INVALID) == 0
    assert gauge(registry, m.CERT_NOT_RENEW, {"kyma_name": "kyma-g"}) is None  # only unrenewed ones
    good_secret = await kcp_client.get(SECRETS, GATEWAY, ns)
    good = data_of(good_secret)

    await write_foreign_cert(kcp_client, ns, clock())
    clock.advance(datetime.timedelta(minutes=1))
    # The Kyma path: no error (it was "private key does not match the certificate" for good).
    after = await store.ensure_runtime(kyma_name="kyma-g", runtime_id="rt-g", skr_domain="g.example.com")
    assert gauge(registry, m.GATEWAY_CLOSE_TO_EXPIRY) == 1  # upstream: "Then the metric is set to 1"
    assert gauge(registry, m.GATEWAY_INVALID) == 1
    assert store.gateway_problem is not None and "does not match" in store.gateway_problem
    assert gauge(registry, m.GATEWAY_REPAIRS + "_total") == 1

    # repaired: a server certificate of our CA matching the key; the bundle and stamp unchanged
    repaired = await kcp_client.get(SECRETS, GATEWAY, ns)
    data = data_of(repaired)
    pair = KeyPair(data[layout.TLS_CRT], data[layout.TLS_KEY]).validate()
    root = layout.root_from_secret(await kcp_client.get(SECRETS, "klm-watcher", ns))
    assert issued_by(pair.certificate, root.certificate)
    assert pair.cert_pem != good[layout.TLS_CRT]  # a new one, not the old one put back
    assert data[layout.CA_CRT] == good[layout.CA_CRT]
    assert repaired["metadata"]["annotations"] == good_secret["metadata"]["annotations"]
    # the runtime's agent keeps its certificate and bundle: nothing to roll out, nothing breaks
    assert after.leaf.cert_pem == before.leaf.cert_pem and after.bundle_pem == before.bundle_pem
    (event,) = await events_for(kcp_client, ns, GATEWAY_REPAIRED)
    assert event["type"] == "Warning" and "does not match" in event["message"]

    # the next look reads our certificate: the gauges clear, nothing is written
    writes = store.writes
    await store.ensure_trust(force=True)
    assert gauge(registry, m.GATEWAY_CLOSE_TO_EXPIRY) == 0
    assert gauge(registry, m.GATEWAY_INVALID) == 0
    assert store.writes == writes and store.gateway_problem is None

    # the same break again later: repaired again and recorded again (a new Event, not deduplicated)
    await write_foreign_cert(kcp_client, ns, clock())
    await store.ensure_trust(force=True)
    assert gauge(registry, m.GATEWAY_REPAIRS + "_total") == 2
    assert len(await events_for(kcp_client, ns, GATEWAY_REPAIRED)) == 2


async def test_a_broken_gateway_secret_that_is_not_ours_is_left_alone_and_the_last_good_bundle_used(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    ns, clock, registry = kcp_namespace, WallClock(T0), CollectorRegistry()
    store = _store(kcp_client, ns, clock, registry)
    before = await store.ensure_runtime(kyma_name="kyma-n", runtime_id="rt-n", skr_domain="n.example.com")
    await kcp_client.patch(SECRETS, GATEWAY, {"metadata": {"labels": {names.MANAGED_BY_LABEL: None}}}, ns)
    await write_foreign_cert(kcp_client, ns, clock())
    broken = await kcp_client.get(SECRETS, GATEWAY, ns)

    after = await store.ensure_runtime(kyma_name="kyma-n", runtime_id="rt-n", skr_domain="n.example.com")
    assert after.bundle_pem == before.bundle_pem and after.leaf.cert_pem == before.leaf.cert_pem
    assert gauge(registry, m.GATEWAY_INVALID) == 1 and gauge(registry, m.GATEWAY_CLOSE_TO_EXPIRY) == 1
    untouched = await kcp_client.get(SECRETS, GATEWAY, ns)
    assert untouched["metadata"]["resourceVersion"] == broken["metadata"]["resourceVersion"]
    (event,) = await events_for(kcp_client, ns, GATEWAY_INVALID)
    assert "last good trust bundle" in event["message"]

    # a process that never saw a good state cannot issue anything: a clear error, nothing written
    fresh_registry = CollectorRegistry()
    fresh = _store(kcp_client, ns, clock, fresh_registry)
    with pytest.raises(layout.SecretFormatError, match="no earlier good state"):
        await fresh.ensure_runtime(kyma_name="kyma-n", runtime_id="rt-n", skr_domain="n.example.com")
    assert gauge(fresh_registry, m.GATEWAY_INVALID) == 1  # reported all the same
    again = await kcp_client.get(SECRETS, GATEWAY, ns)
    assert again["metadata"]["resourceVersion"] == broken["metadata"]["resourceVersion"]


async def test_a_due_runtime_certificate_that_cannot_be_stored_sets_not_renew(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    ns, clock, registry = kcp_namespace, WallClock(T0), CollectorRegistry()
    store = _store(kcp_client, ns, clock, registry)
    await store.ensure_runtime(kyma_name="kyma-r", runtime_id="rt-r", skr_domain="r.example.com")
    labels = {"kyma_name": "kyma-r"}
    assert gauge(registry, m.CERT_NOT_RENEW, labels) is None
    # the API server refuses every change of an immutable Secret: the renewal cannot be stored
    leaf_secret = layout.leaf_secret_name("kyma-r")
    await kcp_client.patch(SECRETS, leaf_secret, {"immutable": True}, ns)
    clock.advance(31 * DAY)  # past the leaf's renew-before (60 d validity, renewed 30 d before expiry)
    with pytest.raises(KubeError):
        await store.ensure_runtime(kyma_name="kyma-r", runtime_id="rt-r", skr_domain="r.example.com")
    assert gauge(registry, m.CERT_NOT_RENEW, labels) == 1
    # once it can be stored again, renewed: the series goes (as upstream's cleanup)
    await kcp_client.delete(SECRETS, leaf_secret, ns)
    await store.ensure_runtime(kyma_name="kyma-r", runtime_id="rt-r", skr_domain="r.example.com")
    assert gauge(registry, m.CERT_NOT_RENEW, labels) is None
    # a runtime removed while its certificate is not renewed takes its series along
    await kcp_client.patch(SECRETS, leaf_secret, {"immutable": True}, ns)
    clock.advance(31 * DAY)
    with pytest.raises(KubeError):
        await store.ensure_runtime(kyma_name="kyma-r", runtime_id="rt-r", skr_domain="r.example.com")
    assert gauge(registry, m.CERT_NOT_RENEW, labels) == 1
    await kcp_client.delete(SECRETS, leaf_secret, ns)
    await store.remove_runtime(kyma_name="kyma-r", runtime_id="rt-r")
    assert gauge(registry, m.CERT_NOT_RENEW, labels) is None
