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

Key rotation (``handoff_keys``): the signer signs with the current key (``x-klm-handoff-signature``,
``-key-id``) and, during a rotation, also with the previous one (``-previous-signature``,
``-previous-key-id``); the verifier accepts a signature by any key of its set. A request without
key id (a replica of the single-key version) is checked against every key, so replicas of both
versions keep talking during an upgrade; the single-key version reads only the first signature,
which is the current key's.

The keys come from outside: in the operator, ``kyma_operator.listener.handoff_key`` keeps them in
one KCP Secret that the first replica creates and every replica watches (this package knows
nothing of Kubernetes).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Mapping

from kcp_listener.handoff_keys import MIN_KEY_BYTES, HandoffKey, HandoffKeyRing, HandoffKeySet
from kcp_listener.replay import ReplayCache, ReplayVerdict

__all__ = [
    "MIN_KEY_BYTES",
    "HandoffAuthError",
    "HandoffSigner",
    "HandoffVerifier",
]

TIMESTAMP_HEADER = "x-klm-handoff-timestamp"
NONCE_HEADER = "x-klm-handoff-nonce"
SIGNATURE_HEADER = "x-klm-handoff-signature"
KEY_ID_HEADER = "x-klm-handoff-key-id"
PREVIOUS_SIGNATURE_HEADER = "x-klm-handoff-previous-signature"
PREVIOUS_KEY_ID_HEADER = "x-klm-handoff-previous-key-id"

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


def _ring(keys: bytes | HandoffKeyRing) -> HandoffKeyRing:
    """A fixed ring of one key (``LEGACY_KEY_ID``) for plain bytes; a ring as it is."""
    if isinstance(keys, HandoffKeyRing):
        return keys
    if len(keys) < MIN_KEY_BYTES:
        raise ValueError(f"the hand-off key must have at least {MIN_KEY_BYTES} bytes")
    return HandoffKeyRing(HandoffKeySet.single(keys))


class HandoffSigner:
    """Headers for one internal request (the forwarding side): signed with every key of the ring."""

    def __init__(
        self,
        keys: bytes | HandoffKeyRing,
        *,
        clock: Callable[[], float] = time.time,
        nonces: Callable[[], str] = lambda: secrets.token_hex(16),
    ) -> None:
        self._ring = _ring(keys)
        self._clock = clock
        self._nonces = nonces

    def headers(self, method: str, path: str, body: bytes) -> dict[str, str]:
        timestamp = str(int(self._clock()))
        nonce = self._nonces()
        keys = self._ring.keys
        headers = {
            TIMESTAMP_HEADER: timestamp,
            NONCE_HEADER: nonce,
            SIGNATURE_HEADER: _mac(keys.current.secret, method, path, timestamp, nonce, body),
            KEY_ID_HEADER: keys.current.id,
        }
        if (previous := keys.previous) is not None:
            headers[PREVIOUS_SIGNATURE_HEADER] = _mac(previous.secret, method, path, timestamp, nonce, body)
            headers[PREVIOUS_KEY_ID_HEADER] = previous.id
        return headers


class HandoffVerifier:
    """Checks the receiving side; a request that passes is remembered (its nonce cannot pass again).

    Refusal reasons (``HandoffAuthError.reason``, a metric label): ``malformed`` (headers missing
    or invalid), ``unknown-key`` (every signature names a key id this replica does not hold),
    ``bad-signature``, ``expired``, ``replay``, ``replay-cache-full``.
    """

    def __init__(
        self,
        keys: bytes | HandoffKeyRing,
        *,
        clock: Callable[[], float] = time.time,
        window: float = 30.0,
        max_entries: int = 200_000,
    ) -> None:
        self._ring = _ring(keys)
        self._clock = clock
        self._window = window
        self._seen = ReplayCache(max_age=window, skew=window, max_entries=max_entries, clock=clock)

    def verify(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> str:
        """The role (``current``/``previous``) of the key that verified the request; raise
        :class:`HandoffAuthError` unless it is signed by a key of the ring, fresh and new."""
        timestamp = headers.get(TIMESTAMP_HEADER, "")
        nonce = headers.get(NONCE_HEADER, "")
        signature = headers.get(SIGNATURE_HEADER, "")
        previous = headers.get(PREVIOUS_SIGNATURE_HEADER, "")
        if (
            not timestamp.isdigit()
            or not nonce
            or len(nonce) > _MAX_NONCE
            or not signature
            or not signature.isascii()
            or not previous.isascii()
        ):
            raise HandoffAuthError("malformed")
        keys = self._ring.keys
        signed = [(headers.get(KEY_ID_HEADER), signature)]
        if previous:
            signed.append((headers.get(PREVIOUS_KEY_ID_HEADER), previous))
        known = False
        matched: HandoffKey | None = None
        for key_id, candidate in signed:
            if key_id is None:  # a sender of the single-key version: any key may be its key
                candidates: tuple[HandoffKey, ...] = keys.keys
            else:
                key = keys.by_id(key_id)
                candidates = () if key is None else (key,)
            known = known or bool(candidates)
            for key in candidates:
                expected = _mac(key.secret, method, path, timestamp, nonce, body)
                if hmac.compare_digest(expected, candidate):
                    matched = key
                    break
            if matched is not None:
                break
        if matched is None:
            raise HandoffAuthError("bad-signature" if known else "unknown-key")
        created = int(timestamp)
        if abs(self._clock() - created) > self._window:
            raise HandoffAuthError("expired")
        verdict = self._seen.check("handoff", nonce)
        if verdict is ReplayVerdict.REPLAY:
            raise HandoffAuthError("replay")
        if verdict is ReplayVerdict.FULL:
            raise HandoffAuthError("replay-cache-full")
        self._seen.remember("handoff", nonce, created)
        return keys.role_of(matched)
