"""Authentication of the internal hand-off requests between listener replicas (docs/sharding-handoff.md).

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

The key comes from outside: in the operator, ``kyma_operator.listener.handoff_key`` keeps it in one
KCP Secret that the first replica creates (this package knows nothing of Kubernetes).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Mapping

from kcp_listener.replay import ReplayCache, ReplayVerdict

__all__ = [
    "MIN_KEY_BYTES",
    "HandoffAuthError",
    "HandoffSigner",
    "HandoffVerifier",
]

MIN_KEY_BYTES = 16

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
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"the hand-off key must have at least {MIN_KEY_BYTES} bytes")
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
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"the hand-off key must have at least {MIN_KEY_BYTES} bytes")
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
