"""Signing-key rotation with overlap on a fake clock: publish, switch, retire."""

from __future__ import annotations

import datetime

import pytest

from kyma_operator.identity.signing_keys import (
    KeyRing,
    SigningKey,
    SigningPolicy,
    advance,
    next_action_at,
    rotate,
    version_number,
)

T0 = datetime.datetime(2026, 5, 1, tzinfo=datetime.UTC)
POLICY = SigningPolicy(
    rotate_after=datetime.timedelta(days=30),
    activation_delay=datetime.timedelta(seconds=60),
    overlap=datetime.timedelta(hours=24),
)


def test_first_key_is_active_at_once() -> None:
    ring = advance(None, now=T0, policy=POLICY)
    assert ring.active == "v1"
    assert [k.version for k in ring.published()] == ["v1"]
    assert advance(ring, now=T0 + datetime.timedelta(days=1), policy=POLICY) == ring
    assert next_action_at(ring, POLICY) == T0 + POLICY.rotate_after


def test_rotation_publishes_first_then_switches_then_retires() -> None:
    ring = advance(None, now=T0, policy=POLICY)
    t = T0 + POLICY.rotate_after
    ring = advance(ring, now=t, policy=POLICY)
    # publish: v2 is trusted but the agent still signs with v1
    assert ring.active == "v1"
    assert [k.version for k in ring.published()] == ["v1", "v2"]
    assert ring.pending is not None and ring.pending.version == "v2"
    assert next_action_at(ring, POLICY) == t + POLICY.activation_delay
    assert advance(ring, now=t + datetime.timedelta(seconds=59), policy=POLICY) == ring

    # switch: the agent gets v2; v1 stays trusted for the overlap
    t_switch = t + POLICY.activation_delay
    ring = advance(ring, now=t_switch, policy=POLICY)
    assert ring.active == "v2"
    assert [k.version for k in ring.published()] == ["v1", "v2"]
    assert ring.keys[0].retire_at == t_switch + POLICY.overlap
    assert next_action_at(ring, POLICY) == t_switch + POLICY.overlap

    # retire
    assert advance(ring, now=t_switch + POLICY.overlap - datetime.timedelta(seconds=1), policy=POLICY) == ring
    ring = advance(ring, now=t_switch + POLICY.overlap, policy=POLICY)
    assert [k.version for k in ring.published()] == ["v2"]
    assert ring.active == "v2"


def test_on_demand_rotation_and_public_half() -> None:
    ring = advance(None, now=T0, policy=POLICY)
    rotated = rotate(ring, now=T0)
    assert rotated.pending is not None
    assert rotate(rotated, now=T0) is rotated  # one pending key at a time
    key = rotated.active_key
    assert key.private_key().public_key().public_bytes_raw()
    assert b"BEGIN PUBLIC KEY" in key.public_pem()


def test_invalid_rings_and_versions_are_rejected() -> None:
    key = SigningKey.generate("v1", T0)
    with pytest.raises(ValueError, match="not in the ring"):
        KeyRing(keys=(key,), active="v2")
    with pytest.raises(ValueError, match="ordered"):
        KeyRing(keys=(SigningKey.generate("v2", T0), key), active="v1")
    with pytest.raises(ValueError, match="invalid signing key version"):
        version_number("2")
    with pytest.raises(ValueError, match="rotate_after"):
        SigningPolicy(rotate_after=datetime.timedelta(seconds=1))
