"""Authentication of the internal hand-off requests between listener replicas (DESIGN.md §10).

Why HMAC and not mTLS: a replica that forwards an event vouches for an agent request it has
already verified; the holder only needs to know that the request comes from another operator
replica and was not altered or replayed. A shared secret in one KCP Secret that only the operator's
service account can read gives exactly that, with no CA, no certificate issuance or rotation per
pod, and no TLS handshake on the hot path. The bodies are not confidential (runtime ids and object
names, which every replica reads from KCP anyway), so integrity and authenticity suffice; run the
port on the pod network only (it is never exposed through the gateway).

The signature is HMAC-SHA256 over ``method``, ``path``, a unix ``timestamp``, a random ``nonce``
and the SHA-256 of the body. The receiver rejects a timestamp outside ``window`` seconds of its
clock and a nonce seen within the window (replay), compares in constant time, and the caller bounds
the body size before it gets here.

The key: the first replica creates the Secret ``HANDOFF_KEY_SECRET`` with 32 random bytes; a
replica that loses that race (``AlreadyExists``) reads the winner's key. Every replica therefore
ends with the same key without coordination beyond the API server.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from kcp_listener.replay import ReplayCache, ReplayVerdict
from kyma_operator.runtime.errors import AlreadyExists
from kyma_operator.runtime.resources import SECRETS, Resource
from kyma_wire.names import OPERATOR_NAME

__all__ = [
    "HANDOFF_KEY_FIELD",
    "HANDOFF_KEY_SECRET",
    "HandoffAuthError",
    "HandoffSigner",
    "HandoffVerifier",
    "SecretClient",
    "ensure_handoff_key",
]

HANDOFF_KEY_SECRET = f"{OPERATOR_NAME}-listener-handoff-key"
"""KCP Secret (in the operator namespace) holding the replicas' shared hand-off key."""
HANDOFF_KEY_FIELD = "key"
KEY_BYTES = 32

TIMESTAMP_HEADER = "x-klm-handoff-timestamp"
NONCE_HEADER = "x-klm-handoff-nonce"
SIGNATURE_HEADER = "x-klm-handoff-signature"

_MAX_NONCE = 64


class HandoffAuthError(Exception):
    """The request is not from a replica holding the key (``reason``: metric label)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _mac(key: bytes, method: str, path: str, timestamp: str, nonce: str, body: bytes) -> str:
    message = b"\n".join(
        (method.encode(), path.encode(), timestamp.encode(), nonce.encode(), hashlib.sha256(body).digest())
    )
    return hmac.new(key, message, hashlib.sha256).hexdigest()


class HandoffSigner:
    """Headers for one internal request (the forwarding side)."""

    def __init__(
        self,
        key: bytes,
        *,
        clock: Callable[[], float] = time.time,
        nonces: Callable[[], str] = lambda: secrets.token_hex(16),
    ) -> None:
        if len(key) < 16:
            raise ValueError("the hand-off key must have at least 16 bytes")
        self._key = key
        self._clock = clock
        self._nonces = nonces

    def headers(self, method: str, path: str, body: bytes) -> dict[str, str]:
        timestamp = str(int(self._clock()))
        nonce = self._nonces()
        return {
            TIMESTAMP_HEADER: timestamp,
            NONCE_HEADER: nonce,
            SIGNATURE_HEADER: _mac(self._key, method, path, timestamp, nonce, body),
        }


class HandoffVerifier:
    """Checks the receiving side; a request that passes is remembered (its nonce cannot pass again)."""

    def __init__(
        self,
        key: bytes,
        *,
        clock: Callable[[], float] = time.time,
        window: float = 30.0,
        max_entries: int = 200_000,
    ) -> None:
        if len(key) < 16:
            raise ValueError("the hand-off key must have at least 16 bytes")
        self._key = key
        self._clock = clock
        self._window = window
        self._seen = ReplayCache(max_age=window, skew=window, max_entries=max_entries, clock=clock)

    def verify(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> None:
        """Raise :class:`HandoffAuthError` unless the request is signed, fresh and new."""
        timestamp = headers.get(TIMESTAMP_HEADER, "")
        nonce = headers.get(NONCE_HEADER, "")
        signature = headers.get(SIGNATURE_HEADER, "")
        if not timestamp.isdigit() or not nonce or len(nonce) > _MAX_NONCE or not signature:
            raise HandoffAuthError("malformed")
        expected = _mac(self._key, method, path, timestamp, nonce, body)
        if not hmac.compare_digest(expected, signature):
            raise HandoffAuthError("bad-signature")
        created = int(timestamp)
        if abs(self._clock() - created) > self._window:
            raise HandoffAuthError("expired")
        verdict = self._seen.check("handoff", nonce)
        if verdict is ReplayVerdict.REPLAY:
            raise HandoffAuthError("replay")
        if verdict is ReplayVerdict.FULL:
            raise HandoffAuthError("replay-cache-full")
        self._seen.remember("handoff", nonce, created)


@runtime_checkable
class SecretClient(Protocol):
    """The two API calls the key bootstrap needs (``kyma_operator.runtime.kube.KubeClient``)."""

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]: ...

    async def create(
        self, res: Resource, body: dict[str, Any], *, field_manager: str | None = None
    ) -> dict[str, Any]: ...


def _key_of(secret: Mapping[str, Any]) -> bytes:
    encoded = (secret.get("data") or {}).get(HANDOFF_KEY_FIELD)
    if not isinstance(encoded, str):
        raise ValueError(f"Secret {HANDOFF_KEY_SECRET} has no {HANDOFF_KEY_FIELD!r}")
    key = base64.b64decode(encoded)
    if len(key) < 16:
        raise ValueError(f"Secret {HANDOFF_KEY_SECRET}: the key is shorter than 16 bytes")
    return key


async def ensure_handoff_key(
    client: SecretClient,
    namespace: str,
    *,
    generate: Callable[[], bytes] = lambda: secrets.token_bytes(KEY_BYTES),
) -> bytes:
    """The shared key: create the Secret with a fresh key, or read it if another replica was first."""
    key = generate()
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": HANDOFF_KEY_SECRET,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": OPERATOR_NAME},
        },
        "type": "Opaque",
        "data": {HANDOFF_KEY_FIELD: base64.b64encode(key).decode()},
    }
    try:
        created = await client.create(SECRETS, body, field_manager=OPERATOR_NAME)
    except AlreadyExists:
        return _key_of(await client.get(SECRETS, HANDOFF_KEY_SECRET, namespace))
    return _key_of(created)
