"""The hand-off key Secret's content: both formats, every kind of bad content, one rotation.

Bad content must give an error that names the field and change nothing: a replica keeps the keys
it uses (``apply_key_secret``), a rotation writes nothing (``rotated`` raises before building).
The watch and the rotator against a real API server: tests/integration/sharding/test_key_rotation.py.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kcp_listener.handoff_keys import (
    LEGACY_KEY_ID,
    HandoffKey,
    HandoffKeyMetrics,
    HandoffKeyRing,
    HandoffKeySet,
)
from kyma_operator.config import ConfigError, load_config
from kyma_operator.listener.handoff_key import (
    HANDOFF_KEY_SECRET,
    ROTATED_AT_ANNOTATION,
    HandoffKeyError,
    apply_key_secret,
    key_set_of,
    new_key_id,
    rotated,
    rotated_at,
)

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def b64(raw: bytes | str) -> str:
    return base64.b64encode(raw.encode() if isinstance(raw, str) else raw).decode()


def secret(**data: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": HANDOFF_KEY_SECRET,
            "resourceVersion": "7",
            "creationTimestamp": "2027-01-01T00:00:00Z",
        },
        "data": {k.replace("_", "-"): v for k, v in data.items()},
    }


FULL = secret(key=b64("n" * 32), key_id=b64("k2"), previous_key=b64("o" * 32), previous_key_id=b64("k1"))


def test_the_first_format_is_one_legacy_key() -> None:
    assert key_set_of(secret(key=b64("l" * 32))) == HandoffKeySet.single(b"l" * 32, LEGACY_KEY_ID)


def test_a_rotated_secret_is_the_current_and_the_previous_key() -> None:
    keys = key_set_of(FULL)
    assert keys == HandoffKeySet(HandoffKey("k2", b"n" * 32), HandoffKey("k1", b"o" * 32))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"metadata": {}}, "has no data"),
        (secret(), "has no 'key'"),
        (secret(key_id=b64("k1")), "'key-id' without 'key'"),
        (secret(key="not base64!"), "'key' is not base64"),
        (secret(key=b64("short")), "at least 16 bytes"),
        (secret(key=b64("n" * 32), key_id=b64("bad id")), "key id 'bad id'"),
        (secret(key=b64("n" * 32), key_id=b64(b"\xff\xfe")), "'key-id' is not ASCII"),
        (secret(key=b64("n" * 32), previous_key_id=b64("k1")), "'previous-key-id' without 'previous-key'"),
        (secret(key=b64("n" * 32), previous_key=b64("o" * 32)), "the same id 'legacy'"),
        (
            secret(
                key=b64("n" * 32), key_id=b64("k2"), previous_key=b64("n" * 32), previous_key_id=b64("k1")
            ),
            "the same key",
        ),
        (
            secret(key=b64("n" * 32), key_id=b64("k2"), previous_key=b64("tiny"), previous_key_id=b64("k1")),
            "16 bytes",
        ),
    ],
    ids=[
        "no-data",
        "empty",
        "id-only",
        "not-base64",
        "short",
        "bad-id",
        "binary-id",
        "previous-id-only",
        "both-legacy",
        "same-secret",
        "short-previous",
    ],
)
def test_bad_content_is_a_clear_error_and_changes_nothing(content: dict[str, Any], message: str) -> None:
    with pytest.raises(HandoffKeyError, match=message) as caught:
        key_set_of(content)
    assert HANDOFF_KEY_SECRET in str(caught.value)

    registry = CollectorRegistry()
    ring = HandoffKeyRing(key_set_of(FULL), HandoffKeyMetrics(registry))
    before = copy.deepcopy(content)
    assert not apply_key_secret(ring, content)
    assert ring.keys == key_set_of(FULL)
    assert registry.get_sample_value("kcp_listener_handoff_key_updates_total", {"result": "invalid"}) == 1
    with pytest.raises(HandoffKeyError):
        rotated(content, now=NOW)
    assert content == before


def test_a_rotation_moves_the_current_key_to_previous_and_drops_the_old_previous() -> None:
    after = rotated(FULL, now=NOW, generate=lambda: b"x" * 32)
    keys = key_set_of(after)
    assert keys.previous == HandoffKey("k2", b"n" * 32)
    assert keys.current.secret == b"x" * 32
    assert keys.current.id.startswith("20270115T080000Z-")
    assert after["metadata"]["resourceVersion"] == "7"  # a concurrent rotation conflicts
    assert after["metadata"]["annotations"][ROTATED_AT_ANNOTATION] == "2027-01-15T08:00:00Z"
    assert rotated_at(after) == NOW
    assert key_set_of(FULL).current.secret == b"n" * 32  # the input is not changed


def test_a_first_format_secret_rotates_into_the_second() -> None:
    after = rotated(secret(key=b64("l" * 32)), now=NOW, generate=lambda: b"x" * 32)
    keys = key_set_of(after)
    assert keys.previous == HandoffKey(LEGACY_KEY_ID, b"l" * 32)
    assert keys.current.secret == b"x" * 32


def test_the_rotation_time_is_the_annotation() -> None:
    stamped = {"metadata": {"annotations": {ROTATED_AT_ANNOTATION: "2027-01-01T00:00:00Z"}}}
    assert rotated_at(stamped) == 1_798_761_600.0
    assert rotated_at(FULL) is None  # the first format: not rotated by the operator yet
    assert rotated_at({"metadata": {"annotations": {ROTATED_AT_ANNOTATION: "garbage"}}}) is None
    assert new_key_id(NOW).startswith("20270115T080000Z-") and new_key_id(NOW) != new_key_id(NOW)


def test_the_rotation_interval_flag() -> None:
    assert load_config([], {}).handoff_key_rotation_interval == 604800.0
    assert load_config(["--handoff-key-rotation-interval=0"], {}).handoff_key_rotation_interval == 0
    assert load_config(["--handoff-key-rotation-interval=3600"], {}).handoff_key_rotation_interval == 3600
    with pytest.raises(ConfigError, match="at least 600"):
        load_config(["--handoff-key-rotation-interval=60"], {})
