"""The hand-off key set (current + previous key, with ids) and the ring the signer and verifier read.

Why a set and not one key: rotating the replicas' shared hand-off key must not refuse a single
hand-off, yet the replicas learn of a new key one after the other (each watches the key Secret;
``kyma_operator.listener.handoff_key``). So a rotation keeps the old key as ``previous``, and:

* a sender signs every internal request with **both** keys it knows (``handoff_auth``): a holder
  that has not seen the rotation yet still finds the signature of the key it knows;
* a receiver accepts a request whose signature matches **any** key of its set, so a sender that has
  not seen the rotation yet (signing with the old key only) still gets through.

A request is refused only if sender and receiver share no key at all, i.e. when a key is dropped
(the rotation after next) before every replica has seen the rotation that introduced its
successor; rotations are therefore spaced far apart (docs/sharding-handoff.md). Accepting a
signature by either key is no weaker than one key: an attacker needs one of the two keys either
way, and both are read from the same Secret.

:class:`HandoffKeyRing` is the mutable holder a watch replaces the set in; it exports which key
ids are in use (``kcp_listener_handoff_key_info``). This package knows nothing of Kubernetes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = [
    "KEY_ID_PATTERN",
    "LEGACY_KEY_ID",
    "MIN_KEY_BYTES",
    "HandoffKey",
    "HandoffKeyMetrics",
    "HandoffKeyRing",
    "HandoffKeySet",
]

MIN_KEY_BYTES = 16
LEGACY_KEY_ID = "legacy"
"""Id of a key given without one (a Secret of the first format, holding only ``key``)."""
KEY_ID_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


@dataclass(frozen=True)
class HandoffKey:
    """One HMAC key and its id (the id is sent with the signature; it is no secret)."""

    id: str
    secret: bytes

    def __post_init__(self) -> None:
        if not KEY_ID_PATTERN.match(self.id):
            raise ValueError(f"key id {self.id!r}: 1-64 characters of A-Z a-z 0-9 . _ -")
        if len(self.secret) < MIN_KEY_BYTES:
            raise ValueError(f"key {self.id!r}: the hand-off key must have at least {MIN_KEY_BYTES} bytes")

    def __repr__(self) -> str:  # never the secret in a log line or an assertion message
        return f"HandoffKey(id={self.id!r})"


@dataclass(frozen=True)
class HandoffKeySet:
    """The key to sign with and, during a rotation, the one it replaced (still accepted)."""

    current: HandoffKey
    previous: HandoffKey | None = None

    def __post_init__(self) -> None:
        if self.previous is not None:
            if self.previous.id == self.current.id:
                raise ValueError(f"the current and the previous key have the same id {self.current.id!r}")
            if self.previous.secret == self.current.secret:
                raise ValueError("the current and the previous key are the same key")

    @classmethod
    def single(cls, secret: bytes, key_id: str = LEGACY_KEY_ID) -> HandoffKeySet:
        return cls(HandoffKey(key_id, secret))

    @property
    def keys(self) -> tuple[HandoffKey, ...]:
        return (self.current,) if self.previous is None else (self.current, self.previous)

    def by_id(self, key_id: str) -> HandoffKey | None:
        for key in self.keys:
            if key.id == key_id:
                return key
        return None

    def role_of(self, key: HandoffKey) -> str:
        return "current" if key is self.current else "previous"


class HandoffKeyMetrics:
    """Which key ids a replica uses, and how its key Secret's updates went."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.info = Gauge(
            "kcp_listener_handoff_key_info",
            "1 per hand-off key this replica holds: key_id, role current (signs and verifies) or "
            "previous (verifies, and is signed with too, until the next rotation drops it).",
            ["key_id", "role"],
            registry=registry,
        )
        self.updates = Counter(
            "kcp_listener_handoff_key_updates",
            "Hand-off key Secret contents seen by this replica, by result: applied (a new key set), "
            "unchanged, invalid (refused with an error log; the keys in use stay), deleted (the keys "
            "in use stay).",
            ["result"],
            registry=registry,
        )


class HandoffKeyRing:
    """The key set in use: read on every signature and verification, replaced by the key watch."""

    def __init__(self, keys: HandoffKeySet, metrics: HandoffKeyMetrics | None = None) -> None:
        self._keys = keys
        self._metrics = metrics
        self._export()

    @property
    def keys(self) -> HandoffKeySet:
        return self._keys

    def replace(self, keys: HandoffKeySet) -> bool:
        """Use ``keys`` from now on; false if they are the ones in use."""
        changed = keys != self._keys
        self._keys = keys
        self._count("applied" if changed else "unchanged")
        if changed:
            self._export()
        return changed

    def refused(self, result: str) -> None:
        """An update that was not applied (``invalid`` content, Secret ``deleted``): count it."""
        self._count(result)

    def _count(self, result: str) -> None:
        if self._metrics is not None:
            self._metrics.updates.labels(result).inc()

    def _export(self) -> None:
        if self._metrics is None:
            return
        self._metrics.info.clear()
        for key in self._keys.keys:
            self._metrics.info.labels(key.id, self._keys.role_of(key)).set(1)
