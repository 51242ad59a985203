"""Hand-off key rotation on the wire: every pair of key sets a rotation can leave two replicas with.

A rotation reaches the replicas one after the other, so for a while a sender may hold the new key
set while the holder still has the old one, or the other way round; a replica of the single-key
version may still run. Each combination must authenticate; only replicas sharing no key refuse.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from kcp_listener.handoff_auth import (
    KEY_ID_HEADER,
    PREVIOUS_KEY_ID_HEADER,
    PREVIOUS_SIGNATURE_HEADER,
    SIGNATURE_HEADER,
    HandoffAuthError,
    HandoffSigner,
    HandoffVerifier,
)
from kcp_listener.handoff_keys import (
    LEGACY_KEY_ID,
    HandoffKey,
    HandoffKeyMetrics,
    HandoffKeyRing,
    HandoffKeySet,
)

PATH = "/internal/v1/handoff"
BODY = b'{"requests":[]}'
NOW = 1_800_000_000.0

OLD = HandoffKey("k1", b"o" * 32)
NEW = HandoffKey("k2", b"n" * 32)
NEXT = HandoffKey("k3", b"x" * 32)
BEFORE = HandoffKeySet(OLD)
"""Before the rotation."""
AFTER = HandoffKeySet(NEW, OLD)
"""After it: signs with both, accepts either."""


def headers(keys: HandoffKeySet | bytes, nonce: str = "n1") -> dict[str, str]:
    ring = keys if isinstance(keys, bytes) else HandoffKeyRing(keys)
    return HandoffSigner(ring, clock=lambda: NOW, nonces=lambda: nonce).headers("POST", PATH, BODY)


def verify(keys: HandoffKeySet, sent: dict[str, str]) -> str:
    return HandoffVerifier(HandoffKeyRing(keys), clock=lambda: NOW).verify("POST", PATH, sent, BODY)


def refusal(keys: HandoffKeySet, sent: dict[str, str]) -> str:
    with pytest.raises(HandoffAuthError) as caught:
        verify(keys, sent)
    return caught.value.reason


@pytest.mark.parametrize(
    ("sender", "receiver", "role"),
    [
        (BEFORE, BEFORE, "current"),
        (AFTER, AFTER, "current"),
        (AFTER, BEFORE, "current"),  # the holder has not seen the rotation: the previous signature
        (BEFORE, AFTER, "previous"),  # the sender has not seen it: the holder's previous key
    ],
    ids=["before", "after", "stale-receiver", "stale-sender"],
)
def test_replicas_on_either_side_of_a_rotation_authenticate(
    sender: HandoffKeySet, receiver: HandoffKeySet, role: str
) -> None:
    assert verify(receiver, headers(sender)) == role


def test_a_sender_signs_with_the_current_and_the_previous_key() -> None:
    sent = headers(AFTER)
    assert (sent[KEY_ID_HEADER], sent[PREVIOUS_KEY_ID_HEADER]) == ("k2", "k1")
    assert sent[SIGNATURE_HEADER] != sent[PREVIOUS_SIGNATURE_HEADER]
    assert PREVIOUS_SIGNATURE_HEADER not in headers(BEFORE)


def test_a_replica_of_the_single_key_version_still_authenticates_both_ways() -> None:
    """It sends no key id and reads only the first signature (the current key's)."""
    legacy = b"l" * 32
    migrated = HandoffKeySet(NEW, HandoffKey(LEGACY_KEY_ID, legacy))
    old_version = {k: v for k, v in headers(legacy).items() if k != KEY_ID_HEADER}
    assert verify(migrated, old_version) == "previous"
    assert verify(HandoffKeySet.single(legacy), old_version) == "current"
    # a new replica on a Secret still in the first format signs its first signature with that key
    assert HandoffVerifier(legacy, clock=lambda: NOW).verify("POST", PATH, headers(legacy), BODY) == "current"


def test_replicas_sharing_no_key_refuse_and_say_why() -> None:
    """Two rotations apart (the rotation after next dropped the only key the sender has)."""
    assert refusal(HandoffKeySet(NEXT, NEW), headers(BEFORE)) == "unknown-key"
    forged = HandoffKeySet(HandoffKey("k1", b"f" * 32))  # the same id, another secret
    assert refusal(forged, headers(BEFORE)) == "bad-signature"
    tampered = {**headers(AFTER), SIGNATURE_HEADER: "0" * 64, PREVIOUS_SIGNATURE_HEADER: "0" * 64}
    assert refusal(AFTER, tampered) == "bad-signature"


def test_a_non_ascii_signature_is_malformed_not_a_crash() -> None:
    assert refusal(AFTER, {**headers(AFTER), SIGNATURE_HEADER: "é" * 64}) == "malformed"
    assert refusal(AFTER, {**headers(AFTER), PREVIOUS_SIGNATURE_HEADER: "é"}) == "malformed"


def test_a_nonce_passes_once_whichever_key_verified_it() -> None:
    verifier = HandoffVerifier(HandoffKeyRing(AFTER), clock=lambda: NOW)
    verifier.verify("POST", PATH, headers(BEFORE, nonce="same"), BODY)
    with pytest.raises(HandoffAuthError, match="replay"):
        verifier.verify("POST", PATH, headers(AFTER, nonce="same"), BODY)


def test_a_replaced_ring_is_used_by_the_next_signature_and_verification() -> None:
    registry = CollectorRegistry()
    ring = HandoffKeyRing(BEFORE, HandoffKeyMetrics(registry))
    signer = HandoffSigner(ring, clock=lambda: NOW)
    verifier = HandoffVerifier(ring, clock=lambda: NOW)
    assert (
        registry.get_sample_value("kcp_listener_handoff_key_info", {"key_id": "k1", "role": "current"}) == 1
    )

    assert ring.replace(AFTER)
    assert signer.headers("POST", PATH, BODY)[KEY_ID_HEADER] == "k2"
    assert verifier.verify("POST", PATH, headers(HandoffKeySet(NEW)), BODY) == "current"
    assert not ring.replace(HandoffKeySet(NEW, OLD))  # equal content: unchanged
    info = {
        (s.labels["key_id"], s.labels["role"])
        for metric in registry.collect()
        if metric.name == "kcp_listener_handoff_key_info"
        for s in metric.samples
    }
    assert info == {("k2", "current"), ("k1", "previous")}  # the old series are gone
    ring.refused("invalid")
    updates = {
        result: registry.get_sample_value("kcp_listener_handoff_key_updates_total", {"result": result})
        for result in ("applied", "unchanged", "invalid")
    }
    assert updates == {"applied": 1, "unchanged": 1, "invalid": 1}
    assert ring.keys == AFTER


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: HandoffKey("k1", b"short"), "at least 16 bytes"),
        (lambda: HandoffKey("k 1", b"k" * 32), "key id 'k 1'"),
        (lambda: HandoffKey("", b"k" * 32), "key id ''"),
        (lambda: HandoffKeySet(OLD, HandoffKey("k1", b"p" * 32)), "the same id 'k1'"),
        (lambda: HandoffKeySet(OLD, HandoffKey("k0", OLD.secret)), "the same key"),
    ],
)
def test_invalid_keys_and_sets_are_refused_with_the_reason(build: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()


def test_a_key_never_shows_its_secret() -> None:
    assert "o" * 32 not in repr(AFTER) and "k1" in repr(AFTER)
