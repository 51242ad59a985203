"""The listener replicas' shared hand-off keys, kept in one KCP Secret that every replica watches.

Why here and not in ``kcp_listener``: the listener knows nothing of Kubernetes (it takes a
``kcp_listener.handoff_keys.HandoffKeyRing``); keeping the keys in the API server is the operator's
part. The first replica creates the Secret ``HANDOFF_KEY_SECRET`` with 32 random bytes; a replica
that loses that race (``AlreadyExists``) reads the winner's keys. Every replica therefore ends with
the same keys without coordination beyond the API server. Only the operator's service account can
read the Secret (docs/sharding-handoff.md).

Rotation without a restart: every replica watches the Secret (an informer on its name, no
polling) and replaces its key ring on each change. A rotation is one update of the Secret that
moves ``key``/``key-id`` to ``previous-key``/``previous-key-id`` and writes a new ``key``/``key-id``
(:func:`rotated`, the automatic ``handoff_key_rotation``, or the kubectl commands in the doc).
Content that does not parse is refused with an error log and changes nothing (the keys in use
stay). A Secret of the first format (only ``key``) is a key set of one key with id ``legacy``.

Fields (``data``, base64 as always): ``key`` (>= 16 bytes, the key to sign with), ``key-id``
(default ``legacy``), optionally ``previous-key`` and ``previous-key-id`` (default ``legacy``);
annotation ``ROTATED_AT_ANNOTATION`` (RFC 3339) when the keys were last rotated (or created).
"""

from __future__ import annotations

import base64
import binascii
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from kcp_listener.handoff_keys import LEGACY_KEY_ID, HandoffKey, HandoffKeyRing, HandoffKeySet
from kyma_operator.runtime.errors import AlreadyExists
from kyma_operator.runtime.informer import FuncHandler, Informer, ListWatcher
from kyma_operator.runtime.resources import SECRETS, Resource
from kyma_wire.names import OPERATOR_NAME

__all__ = [
    "HANDOFF_KEY_FIELD",
    "HANDOFF_KEY_ID_FIELD",
    "HANDOFF_KEY_SECRET",
    "KEY_BYTES",
    "PREVIOUS_KEY_FIELD",
    "PREVIOUS_KEY_ID_FIELD",
    "ROTATED_AT_ANNOTATION",
    "HandoffKeyError",
    "SecretClient",
    "apply_key_secret",
    "ensure_handoff_key",
    "ensure_handoff_keys",
    "handoff_key_informer",
    "key_set_of",
    "new_key_id",
    "rotated",
    "rotated_at",
    "watch_handoff_keys",
]

log = logging.getLogger(__name__)

HANDOFF_KEY_SECRET = f"{OPERATOR_NAME}-listener-handoff-key"
"""KCP Secret (in the operator namespace) holding the replicas' shared hand-off keys."""
HANDOFF_KEY_FIELD = "key"
HANDOFF_KEY_ID_FIELD = "key-id"
PREVIOUS_KEY_FIELD = "previous-key"
PREVIOUS_KEY_ID_FIELD = "previous-key-id"
ROTATED_AT_ANNOTATION = "operator.kyma-project.io/handoff-key-rotated-at"
KEY_BYTES = 32


class HandoffKeyError(ValueError):
    """The key Secret's content is not a valid key set (the message says which field and why)."""


@runtime_checkable
class SecretClient(Protocol):
    """The two API calls the key bootstrap needs (``kyma_operator.runtime.kube.KubeClient``)."""

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]: ...

    async def create(
        self, res: Resource, body: dict[str, Any], *, field_manager: str | None = None
    ) -> dict[str, Any]: ...


def new_key_id(now: float) -> str:
    """A readable, unique id: UTC time of creation plus 4 random hex digits."""
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(2)}"


def _field(data: Mapping[str, Any], name: str) -> bytes | None:
    encoded = data.get(name)
    if encoded is None:
        return None
    if not isinstance(encoded, str):
        raise HandoffKeyError(f"Secret {HANDOFF_KEY_SECRET}: {name!r} is not a string")
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise HandoffKeyError(f"Secret {HANDOFF_KEY_SECRET}: {name!r} is not base64") from None


def _key_id(data: Mapping[str, Any], name: str) -> str:
    raw = _field(data, name)
    if raw is None:
        return LEGACY_KEY_ID
    try:
        return raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise HandoffKeyError(f"Secret {HANDOFF_KEY_SECRET}: {name!r} is not ASCII") from None


def _key(data: Mapping[str, Any], field: str, id_field: str) -> HandoffKey | None:
    secret = _field(data, field)
    if secret is None:
        if data.get(id_field) is not None:
            raise HandoffKeyError(f"Secret {HANDOFF_KEY_SECRET}: {id_field!r} without {field!r}")
        return None
    try:
        return HandoffKey(_key_id(data, id_field), secret)
    except ValueError as error:
        raise HandoffKeyError(f"Secret {HANDOFF_KEY_SECRET}: {field!r}/{id_field!r}: {error}") from None


def key_set_of(secret: Mapping[str, Any]) -> HandoffKeySet:
    """The Secret's key set; :class:`HandoffKeyError` naming the field if the content is invalid."""
    data = secret.get("data")
    if not isinstance(data, Mapping):
        raise HandoffKeyError(f"Secret {HANDOFF_KEY_SECRET} has no data")
    current = _key(data, HANDOFF_KEY_FIELD, HANDOFF_KEY_ID_FIELD)
    if current is None:
        raise HandoffKeyError(f"Secret {HANDOFF_KEY_SECRET} has no {HANDOFF_KEY_FIELD!r}")
    previous = _key(data, PREVIOUS_KEY_FIELD, PREVIOUS_KEY_ID_FIELD)
    try:
        return HandoffKeySet(current, previous)
    except ValueError as error:
        raise HandoffKeyError(f"Secret {HANDOFF_KEY_SECRET}: {error}") from None


def rotated_at(secret: Mapping[str, Any]) -> float | None:
    """When the keys were last rotated or created (the annotation); ``None``: absent or unreadable
    (a Secret of the first format: the rotator then counts from when it first saw it)."""
    stamp = ((secret.get("metadata") or {}).get("annotations") or {}).get(ROTATED_AT_ANNOTATION)
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _stamp(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def rotated(
    secret: Mapping[str, Any],
    *,
    now: float,
    generate: Callable[[], bytes] = lambda: secrets.token_bytes(KEY_BYTES),
) -> dict[str, Any]:
    """The Secret after one rotation (to ``update`` with its ``resourceVersion``: a concurrent
    rotation conflicts): the current key becomes the previous one, a new key the current one, the
    old previous key is dropped. Invalid content raises :class:`HandoffKeyError` (nothing to write)."""
    keys = key_set_of(secret)
    fresh = HandoffKey(new_key_id(now), generate())
    HandoffKeySet(fresh, keys.current)  # the same checks as a replica reading it
    meta = dict(secret.get("metadata") or {})
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        ROTATED_AT_ANNOTATION: _stamp(now),
    }
    data = {
        **(secret.get("data") or {}),
        HANDOFF_KEY_FIELD: _b64(fresh.secret),
        HANDOFF_KEY_ID_FIELD: _b64(fresh.id.encode()),
        PREVIOUS_KEY_FIELD: _b64(keys.current.secret),
        PREVIOUS_KEY_ID_FIELD: _b64(keys.current.id.encode()),
    }
    return {**secret, "metadata": meta, "data": data}


async def ensure_handoff_keys(
    client: SecretClient,
    namespace: str,
    *,
    generate: Callable[[], bytes] = lambda: secrets.token_bytes(KEY_BYTES),
    clock: Callable[[], float] = time.time,
) -> HandoffKeySet:
    """The shared keys: create the Secret with a fresh key, or read it if another replica was first."""
    now = clock()
    key = HandoffKey(new_key_id(now), generate())
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": HANDOFF_KEY_SECRET,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": OPERATOR_NAME},
            "annotations": {ROTATED_AT_ANNOTATION: _stamp(now)},
        },
        "type": "Opaque",
        "data": {HANDOFF_KEY_FIELD: _b64(key.secret), HANDOFF_KEY_ID_FIELD: _b64(key.id.encode())},
    }
    try:
        created = await client.create(SECRETS, body, field_manager=OPERATOR_NAME)
    except AlreadyExists:
        return key_set_of(await client.get(SECRETS, HANDOFF_KEY_SECRET, namespace))
    return key_set_of(created)


async def ensure_handoff_key(client: SecretClient, namespace: str) -> bytes:
    """The current key only (callers that sign with one key)."""
    return (await ensure_handoff_keys(client, namespace)).current.secret


def handoff_key_informer(client: ListWatcher, namespace: str) -> Informer:
    """Watches the one key Secret (field selector on its name: no other Secret is cached)."""
    return Informer(
        client,
        SECRETS,
        namespace=namespace,
        field_selector=f"metadata.name={HANDOFF_KEY_SECRET}",
        name="kcp-listener-handoff-key",
    )


def apply_key_secret(ring: HandoffKeyRing, secret: Mapping[str, Any]) -> bool:
    """Use the Secret's keys from now on; invalid content is logged and changes nothing (false)."""
    try:
        keys = key_set_of(secret)
    except HandoffKeyError as error:
        ring.refused("invalid")
        log.error("hand-off keys not changed: %s (the keys in use stay: %s)", error, ring.keys)
        return False
    if ring.replace(keys):
        log.info("hand-off keys now %s", keys)
    return True


def _deleted(ring: HandoffKeyRing, _secret: dict[str, Any]) -> None:
    ring.refused("deleted")
    log.warning(
        "Secret %s deleted: this replica keeps its hand-off keys %s; a replica started now "
        "creates new ones the others do not hold (to rotate, update the Secret instead)",
        HANDOFF_KEY_SECRET,
        ring.keys,
    )


def watch_handoff_keys(informer: Informer, ring: HandoffKeyRing) -> None:
    """Every add/update of the key Secret replaces ``ring``'s keys (invalid content: none)."""

    def apply(secret: dict[str, Any]) -> None:
        apply_key_secret(ring, secret)

    informer.add_handler(
        FuncHandler(
            on_add=apply,
            on_update=lambda _old, new: apply(new),
            on_delete=lambda secret: _deleted(ring, secret),
        )
    )
