"""Unit tests of the listener's parts: XFCC, replay cache, heartbeats, key store, routing, config."""

from __future__ import annotations

import base64
import copy
import pickle
import random
from urllib.parse import quote

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from kcp_listener.config import AuthMode, ListenerConfig
from kcp_listener.health import HeartbeatTracker
from kcp_listener.keystore import KeyStore, secret_name
from kcp_listener.replay import ReplayCache, ReplayVerdict
from kcp_listener.routing import InMemoryDirectory, ListSink, ObjectRef, Router, RoutingError, Targets
from kcp_listener.xfcc import XfccError, XfccParser
from kyma_wire.events import AgentEvent, GroupVersionKind, ObjectKey, Operation
from kyma_wire.keys import public_key_pem
from kyma_wire.names import KCP_NAMESPACE, OPERATOR_NAME, SKR_NAMESPACE
from tests.unit.kcp_listener.harness import Clock, client_cert_pem, istio_xfcc

# --- XFCC ----------------------------------------------------------------------------------------------


def test_xfcc_istio_format() -> None:
    assert XfccParser().runtime_id(istio_xfcc("c7f2a0e1-runtime")) == "c7f2a0e1-runtime"


def test_xfcc_takes_the_first_element_and_first_cert() -> None:
    first, second = (quote(client_cert_pem(cn), safe="") for cn in ("first", "second"))
    header = f'Cert="{first}";URI=,Cert="{second}"'
    assert XfccParser().runtime_id(header) == "first"


def test_xfcc_unquoted_cert_value() -> None:
    assert XfccParser().runtime_id("Hash=x;Cert=" + quote(client_cert_pem("rt"), safe="")) == "rt"


def test_xfcc_cache_is_bounded_and_still_correct() -> None:
    parser = XfccParser(cache_entries=2)
    headers = {name: istio_xfcc(name) for name in ("a", "b", "c")}
    for _ in range(2):
        for name, header in headers.items():
            assert parser.runtime_id(header) == name
    assert len(parser._cache) == 2


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (None, "xfcc-missing"),
        ("", "xfcc-missing"),
        ("By=x;Hash=y", "xfcc-no-cert"),
        ("Cert=%ZZnot-pem", "xfcc-bad-cert"),
        ('Cert="caf%C3%A9"', "xfcc-bad-cert"),
        ("Cert=" + "A" * 40000, "xfcc-too-large"),
    ],
)
def test_xfcc_rejections(header: str | None, reason: str) -> None:
    with pytest.raises(XfccError) as info:
        XfccParser().runtime_id(header)
    assert info.value.reason == reason


def test_xfcc_empty_cn() -> None:
    with pytest.raises(XfccError) as info:
        XfccParser().runtime_id(istio_xfcc(""))
    assert info.value.reason == "xfcc-empty-cn"


# --- replay cache ------------------------------------------------------------------------------------


def test_replay_cache_remembers_until_the_window_closes() -> None:
    clock = Clock(1000.0)
    cache = ReplayCache(max_age=60, skew=5, max_entries=10, clock=clock)
    assert cache.check("k", "n1") is ReplayVerdict.NEW
    cache.remember("k", "n1", created=1000)
    assert cache.check("k", "n1") is ReplayVerdict.REPLAY
    assert cache.check("other-key", "n1") is ReplayVerdict.NEW
    clock.now = 1064.9
    assert cache.check("k", "n1") is ReplayVerdict.REPLAY
    clock.now = 1065.0
    assert cache.check("k", "n1") is ReplayVerdict.NEW
    assert len(cache) == 0


def test_replay_cache_is_bounded_and_never_forgets_live_nonces() -> None:
    clock = Clock(1000.0)
    cache = ReplayCache(max_age=60, skew=5, max_entries=3, clock=clock)
    for i in range(3):
        cache.remember("k", f"n{i}", created=1000 + i)
    assert cache.check("k", "new") is ReplayVerdict.FULL
    assert cache.check("k", "n0") is ReplayVerdict.REPLAY
    clock.now = 1065.0  # n0 expired
    assert cache.check("k", "new") is ReplayVerdict.NEW
    assert len(cache) == 2


def test_replay_cache_future_created_expires_later() -> None:
    clock = Clock(1000.0)
    cache = ReplayCache(max_age=60, skew=5, max_entries=3, clock=clock)
    cache.remember("k", "late", created=1005)
    cache.remember("k", "early", created=940)
    clock.now = 1004.9  # "early" is kept until created + 65 = 1005 (after that the time check rejects it)
    assert cache.check("k", "early") is ReplayVerdict.REPLAY
    clock.now = 1005
    assert cache.check("k", "early") is ReplayVerdict.NEW
    clock.now = 1069
    assert cache.check("k", "late") is ReplayVerdict.REPLAY
    clock.now = 1070
    assert cache.check("k", "late") is ReplayVerdict.NEW


def test_replay_cache_answers_like_an_exact_model() -> None:
    """Random traffic on a fake clock (jumps, idle gaps, skewed ``created``, re-used nonces):
    every verdict equals that of a plain dict of exact expiry times, and memory stays bounded."""
    rng = random.Random(7)
    clock = Clock(1000.0)
    cache = ReplayCache(max_age=60, skew=5, max_entries=1_000_000, clock=clock)
    model: dict[tuple[str, str], float] = {}
    nonces = [f"n{i}" for i in range(400)]
    for step in range(20_000):
        clock.now += rng.choice((0.0, 0.001, 0.3, 0.7, 1.0, 2.5)) if step % 2000 else 400.0
        key = (rng.choice(("a:v1", "b:v1")), rng.choice(nonces))
        expected = ReplayVerdict.REPLAY if model.get(key, -1.0) > clock.now else ReplayVerdict.NEW
        assert cache.check(*key) is expected, step
        if rng.random() < 0.8:
            created = int(clock.now) + rng.randint(-70, 5)
            cache.remember(*key, created=created)
            model[key] = max(created + 65.0, clock.now, model.get(key, 0.0))
        if step % 500 == 0:
            live = sum(1 for at in model.values() if at > clock.now)
            recent = sum(1 for at in model.values() if at > clock.now - 2)
            assert live <= len(cache) <= recent  # an entry outlives its expiry by at most ~a second


def test_replay_cache_after_a_long_idle_gap_and_a_clock_step_back() -> None:
    clock = Clock(1000.0)
    cache = ReplayCache(max_age=60, skew=5, max_entries=10, clock=clock)
    cache.remember("k", "n1", created=1000)
    clock.now = 10_000_000.0  # months idle: no walk over every second in between
    assert cache.check("k", "n2") is ReplayVerdict.NEW
    assert len(cache) == 0
    cache.remember("k", "n2", created=int(clock.now))
    clock.now -= 30  # wall clock stepped back: nothing is forgotten early
    assert cache.check("k", "n2") is ReplayVerdict.REPLAY
    clock.now += 30 + 65
    assert cache.check("k", "n2") is ReplayVerdict.NEW


def test_replay_cache_rejects_bad_bound() -> None:
    with pytest.raises(ValueError):
        ReplayCache(max_age=60, skew=5, max_entries=0, clock=Clock())


# --- heartbeats ----------------------------------------------------------------------------------------


def test_heartbeat_tracker_and_metrics() -> None:
    clock = Clock(1000.0)
    tracker = HeartbeatTracker(clock=clock, max_silence=60)
    registry = CollectorRegistry()
    tracker.register(registry)
    assert tracker.last_seen("a") is None
    assert not tracker.is_healthy("a")
    tracker.record("a")
    tracker.record("b", at=900.0)
    assert tracker.last_seen("a") == 1000.0
    assert tracker.is_healthy("a") and not tracker.is_healthy("b")
    assert tracker.is_healthy("b", max_silence=100)
    assert tracker.stale_runtimes() == ["b"]
    sample = registry.get_sample_value
    assert sample("kcp_listener_runtime_last_heartbeat_timestamp_seconds", {"runtime_id": "b"}) == 900.0
    assert sample("kcp_listener_runtimes_with_heartbeat") == 2
    assert sample("kcp_listener_stale_runtimes") == 1
    clock.now = 1061
    assert sample("kcp_listener_stale_runtimes") == 2
    tracker.forget("b")
    assert sample("kcp_listener_runtime_last_heartbeat_timestamp_seconds", {"runtime_id": "b"}) is None
    assert len(tracker) == 1


# --- key store ------------------------------------------------------------------------------------------


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def secret(name: str, data: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": KCP_NAMESPACE}, "data": data}


def test_keystore_applies_versions_and_skips_bad_entries() -> None:
    registry = CollectorRegistry()
    store = KeyStore(registry)
    v1, v2 = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    ec_pem = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    store.apply_secret(
        secret(
            secret_name("rt-1"),
            {
                "runtime-id": b64("rt-1"),
                "v1.pub": b64(public_key_pem(v1.public_key())),
                "v2.pub": b64(public_key_pem(v2.public_key())),
                "bad version.pub": b64(public_key_pem(v2.public_key())),
                "v3.pub": "%%% not base64",
                "v4.pub": b64(ec_pem),
                "v5.pub": b64("garbage"),
                "README": b64("ignored"),
            },
        )
    )
    assert store.runtimes() == {"rt-1": ["v1", "v2"]}
    assert [k.public_bytes_raw() for k in store.public_keys("rt-1:v1")] == [
        v1.public_key().public_bytes_raw()
    ]
    assert store.public_keys("rt-1:v3") == ()
    assert registry.get_sample_value("kcp_listener_invalid_signing_keys_total") == 4
    assert registry.get_sample_value("kcp_listener_trusted_signing_keys") == 2


def test_keystore_update_and_delete() -> None:
    store = KeyStore()
    v1 = Ed25519PrivateKey.generate()
    obj = secret("s", {"runtime-id": b64("rt-1"), "v1.pub": b64(public_key_pem(v1.public_key()))})
    store.apply_secret(obj)
    assert store.public_keys("rt-1:v1")
    store.apply_secret(secret("s", {"runtime-id": b64("rt-1")}))
    assert not store.public_keys("rt-1:v1")
    store.apply_secret(obj)
    store.delete_secret(obj)
    assert store.runtimes() == {}


def test_keystore_merges_secrets_of_one_runtime_and_drops_invalid_runtime() -> None:
    store = KeyStore()
    a, b = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    store.apply_secret(secret("a", {"runtime-id": b64("rt"), "v1.pub": b64(public_key_pem(a.public_key()))}))
    store.apply_secret(secret("b", {"runtime-id": b64("rt"), "v1.pub": b64(public_key_pem(b.public_key()))}))
    assert len(store.public_keys("rt:v1")) == 2
    store.apply_secret(secret("b", {"runtime-id": b64("not a runtime id!")}))
    assert len(store.public_keys("rt:v1")) == 1
    store.apply_secret(secret("a", {}))
    assert store.runtimes() == {}


# --- routing ------------------------------------------------------------------------------------------


def watch_event(**kwargs: object) -> AgentEvent:
    return AgentEvent(
        watched=ObjectKey(namespace=SKR_NAMESPACE, name="default"),
        watched_gvk=GroupVersionKind(version="v1", kind="ConfigMap"),
        **kwargs,
    )


def test_router_decisions() -> None:
    directory = InMemoryDirectory()
    kyma = directory.add_kyma(KCP_NAMESPACE, "k1", "rt-1")
    directory.add_kyma(KCP_NAMESPACE, "k2", "rt-2")
    m1 = directory.add_manifest(KCP_NAMESPACE, "m1", "k1")
    directory.add_manifest(KCP_NAMESPACE, "m2", "k2")
    router = Router(directory)
    assert router.route("rt-1", watch_event()).kymas == (kyma,)
    assert router.route("rt-1", watch_event(owner=ObjectKey(name="m1"))).manifests == (m1,)
    resync = router.route("rt-1", watch_event(operation=Operation.RESYNC, owner=ObjectKey(name="m1")))
    assert (resync.kymas, resync.manifests) == ((kyma,), (m1,))
    # the runtime's Kyma copy carries owned-by=<kcp ns>/<kyma>: that names the Kyma, not a Manifest
    kyma_copy = AgentEvent(
        watched=ObjectKey(namespace=SKR_NAMESPACE, name="default"),
        watched_gvk=GroupVersionKind(group="operator.kyma-project.io", version="v1beta2", kind="Kyma"),
        owner=ObjectKey(namespace=KCP_NAMESPACE, name="k1"),
    )
    assert router.route("rt-1", kyma_copy) == Targets(kymas=(kyma,))
    for runtime_id, event, reason in (
        ("rt-9", watch_event(), "unknown-runtime"),
        ("rt-1", watch_event(owner=ObjectKey(name="m2")), "foreign-owner"),
        ("rt-1", watch_event(owner=ObjectKey(name="m9")), "unknown-owner"),
        ("rt-1", watch_event(owner=ObjectKey(namespace="elsewhere", name="m1")), "unknown-owner"),
    ):
        with pytest.raises(RoutingError) as info:
            router.route(runtime_id, event)
        assert info.value.reason == reason


def test_routed_request_is_a_value() -> None:
    ref = ObjectRef(KCP_NAMESPACE, "k1")
    assert ref == ObjectRef(KCP_NAMESPACE, "k1") and hash(ref) == hash(ObjectRef(KCP_NAMESPACE, "k1"))
    assert {ref: 1}[ObjectRef(KCP_NAMESPACE, "k1")] == 1
    assert sorted([ObjectRef("b", "a"), ObjectRef("a", "b")]) == [ObjectRef("a", "b"), ObjectRef("b", "a")]
    assert (
        repr(ref) == f"ObjectRef(namespace='{KCP_NAMESPACE}', name='k1')"
        and str(ref) == f"{KCP_NAMESPACE}/k1"
    )
    assert pickle.loads(pickle.dumps(ref)) == ref and copy.copy(ref) == ref
    assert ref._replace(name="k2") == ObjectRef(KCP_NAMESPACE, "k2")
    with pytest.raises(AttributeError):
        ref.name = "k2"  # type: ignore[misc]


def test_list_sink_is_bounded() -> None:
    sink = ListSink[ObjectRef](capacity=1)
    assert sink.offer(ObjectRef("a", "b"))
    assert not sink.offer(ObjectRef("a", "c"))
    assert sink.depth() == 1


# --- config ------------------------------------------------------------------------------------------


def test_config_defaults() -> None:
    config = ListenerConfig()
    assert config.managers == (OPERATOR_NAME,)
    assert config.auth_mode is AuthMode.SIGNATURE
    assert (config.host, config.port, config.namespace) == ("127.0.0.1", 8082, KCP_NAMESPACE)
    assert config.max_body_bytes == 16384
    assert AuthMode.BOTH.needs_signature and AuthMode.BOTH.needs_xfcc
    assert not AuthMode.XFCC.needs_signature and not AuthMode.SIGNATURE.needs_xfcc


@pytest.mark.parametrize(
    "bad",
    [
        {"managers": []},
        {"managers": ["Bad_Name"]},
        {"managers": ["a", "a"]},
        {"auth_mode": "none"},
        {"public_origin": "https://host/path"},
        {"port": 70000},
        {"unknown": 1},
    ],
)
def test_config_rejects_bad_values(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ListenerConfig.model_validate(bad)


def test_config_accepts_origin() -> None:
    assert (
        ListenerConfig(public_origin="https://events.example:8443").public_origin
        == "https://events.example:8443"
    )
