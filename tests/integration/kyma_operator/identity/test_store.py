"""The identity store against a real KCP API server: Secrets, steady state, rotation, bad input."""

from __future__ import annotations

import datetime

import pytest

from kcp_listener.keystore import KeyStore
from kyma_operator.identity import secret_layout as layout
from kyma_operator.identity.bundle import RotationPolicy
from kyma_operator.identity.ca import issued_by, subject_alt_names, subject_common_name
from kyma_operator.identity.signing_keys import SigningPolicy
from kyma_operator.identity.store import IdentityConfig, IdentityStore
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import SECRETS
from tests.integration.kyma_operator.identity.helpers import WallClock

T0 = datetime.datetime(2026, 6, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)


def _store(client: KubeClient, namespace: str, clock: WallClock) -> IdentityStore:
    return IdentityStore(
        client,
        config=IdentityConfig(
            namespace=namespace, public_key_namespace=namespace, server_names=("listener.test",)
        ),
        policy=RotationPolicy(),
        signing_policy=SigningPolicy(),
        wall_clock=clock,
    )


async def _secret_versions(client: KubeClient, namespace: str) -> dict[str, str]:
    listed = await client.list(SECRETS, namespace)
    return {s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in listed.items}


async def test_bootstrap_then_steady_state_writes_nothing(kcp_client: KubeClient, kcp_namespace: str) -> None:
    clock = WallClock(T0)
    store = _store(kcp_client, kcp_namespace, clock)
    identity = await store.ensure_runtime(kyma_name="kyma-a", runtime_id="rt-a", skr_domain="a.example.com")
    assert subject_common_name(identity.leaf.certificate) == "rt-a"
    assert "a.example.com" in subject_alt_names(identity.leaf.certificate)
    assert identity.key_id == "rt-a:v1"
    versions = await _secret_versions(kcp_client, kcp_namespace)
    assert set(versions) == {
        "klm-watcher",
        "klm-istio-gateway",
        "kyma-a-webhook-tls",
        "kyma-a-watcher-signing",
        "rt-a-watcher-signing-key",
    }
    gateway = await kcp_client.get(SECRETS, "klm-istio-gateway", kcp_namespace)
    assert gateway["metadata"]["annotations"][layout.CA_ADDED_TO_BUNDLE_AT] == "2026-06-01T00:00:00Z"

    # A fresh store (e.g. after a restart or leader change) reads the same state and writes nothing.
    writes_before = store.writes
    clock.advance(DAY)
    again = await _store(kcp_client, kcp_namespace, clock).ensure_runtime(
        kyma_name="kyma-a", runtime_id="rt-a", skr_domain="a.example.com"
    )
    await store.ensure_runtime(kyma_name="kyma-a", runtime_id="rt-a", skr_domain="a.example.com")
    assert again.leaf == identity.leaf
    assert again.signing_key == identity.signing_key
    assert store.writes == writes_before
    assert await _secret_versions(kcp_client, kcp_namespace) == versions


async def test_ca_rotation_reaches_the_runtime_certificate(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    clock = WallClock(T0)
    store = _store(kcp_client, kcp_namespace, clock)
    first = await store.ensure_runtime(kyma_name="k", runtime_id="rt", skr_domain="d.example.com")
    old_root = (await store.ensure_trust()).root

    clock.advance(29 * DAY)  # the CA enters its renew-before window
    second = await store.ensure_runtime(kyma_name="k", runtime_id="rt", skr_domain="d.example.com")
    state = await store.ensure_trust()
    assert state.root != old_root
    assert second.renewed == "issued before the current CA was added to the trust bundle"
    assert issued_by(second.leaf.certificate, state.root.certificate)
    # both CAs are trusted; the server still presents the old one during the grace period
    assert state.trust.contains(old_root.certificate) and state.trust.contains(state.root.certificate)
    assert issued_by(state.trust.server.certificate, old_root.certificate)
    assert second.bundle_pem != first.bundle_pem

    clock.advance(RotationPolicy().server_switch_grace)
    switched = await store.ensure_trust()
    assert issued_by(switched.trust.server.certificate, switched.root.certificate)


async def test_broken_ca_secret_is_reported_not_replaced(kcp_client: KubeClient, kcp_namespace: str) -> None:
    await kcp_client.create(
        SECRETS,
        layout.secret_body(
            name="klm-watcher", namespace=kcp_namespace, data={"tls.crt": b"nonsense", "tls.key": b"x"}
        ),
    )
    store = _store(kcp_client, kcp_namespace, WallClock(T0))
    with pytest.raises(layout.SecretFormatError, match="klm-watcher"):
        await store.ensure_trust()
    kept = await kcp_client.get(SECRETS, "klm-watcher", kcp_namespace)
    assert layout.decode(kept)["tls.crt"] == b"nonsense"


async def test_missing_domain_writes_nothing(kcp_client: KubeClient, kcp_namespace: str) -> None:
    store = _store(kcp_client, kcp_namespace, WallClock(T0))
    with pytest.raises(ValueError, match="skr-domain"):
        await store.ensure_runtime(kyma_name="k", runtime_id="rt", skr_domain="")
    assert await _secret_versions(kcp_client, kcp_namespace) == {}


async def test_signing_key_rotation_publishes_before_the_agent_switches(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    """The listener's own key store, fed from the published Secret, trusts a key before the agent uses it."""
    clock = WallClock(T0)
    policy = SigningPolicy()
    store = _store(kcp_client, kcp_namespace, clock)
    keys = KeyStore()

    async def listener_view() -> None:
        keys.apply_secret(await kcp_client.get(SECRETS, "rt-watcher-signing-key", kcp_namespace))

    def trusted(identity_key_id: str, public: bytes) -> bool:
        return any(k.public_bytes_raw() == public for k in keys.public_keys(identity_key_id))

    first = await store.ensure_runtime(kyma_name="k", runtime_id="rt", skr_domain="d.example.com")
    await listener_view()
    assert trusted(first.key_id, first.signing_key.private_key().public_key().public_bytes_raw())

    clock.advance(policy.rotate_after)  # publish v2; the agent keeps v1
    published = await store.ensure_runtime(kyma_name="k", runtime_id="rt", skr_domain="d.example.com")
    await listener_view()
    assert published.key_id == "rt:v1"
    assert keys.runtimes() == {"rt": ["v1", "v2"]}

    clock.advance(policy.activation_delay)  # the agent switches; v1 is still trusted
    switched = await store.ensure_runtime(kyma_name="k", runtime_id="rt", skr_domain="d.example.com")
    await listener_view()
    assert switched.key_id == "rt:v2"
    assert trusted("rt:v2", switched.signing_key.private_key().public_key().public_bytes_raw())
    assert trusted("rt:v1", first.signing_key.private_key().public_key().public_bytes_raw())

    clock.advance(policy.overlap)  # v1 retired
    await store.ensure_runtime(kyma_name="k", runtime_id="rt", skr_domain="d.example.com")
    await listener_view()
    assert keys.runtimes() == {"rt": ["v2"]}

    await store.remove_runtime(kyma_name="k", runtime_id="rt")
    assert set(await _secret_versions(kcp_client, kcp_namespace)) == {"klm-watcher", "klm-istio-gateway"}


async def test_a_rotation_by_another_writer_is_picked_up_after_the_cache_time(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    clock = WallClock(T0)
    ticks = [0.0]
    config = IdentityConfig(namespace=kcp_namespace, public_key_namespace=kcp_namespace)
    a = IdentityStore(kcp_client, config=config, wall_clock=clock, monotonic=lambda: ticks[0])
    b = IdentityStore(kcp_client, config=config, wall_clock=clock)
    before = await a.ensure_trust()
    rotated = await b.rotate_ca()  # e.g. a former leader, or an operator forcing a rotation
    assert rotated.root != before.root
    ticks[0] = 59.0
    assert (await a.ensure_trust()).root == before.root  # still cached
    ticks[0] = 60.0
    refreshed = await a.ensure_trust()
    assert refreshed.root == rotated.root
    identity = await a.ensure_runtime(kyma_name="k", runtime_id="rt", skr_domain="d.example.com")
    assert issued_by(identity.leaf.certificate, rotated.root.certificate)
