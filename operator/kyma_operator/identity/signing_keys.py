"""Per-runtime Ed25519 signing keys and their overlap rotation, as a pure state machine.

Each runtime's agent signs its events (RFC 9421, ``kyma_wire.profile``) with a private key only it
holds; the listener trusts the public keys the operator publishes in KCP. Rotating a key must never
reject an event in flight, so a rotation has three phases, each driven by ``advance`` on a clock:

1. *publish*: a new key is generated and its public half published next to the current one;
2. *switch*: once the listener has had ``activation_delay`` to pick it up, it becomes the active key
   and is shipped to the agent; the previous key is marked to retire ``overlap`` later (agent pods
   still running with it, events queued and re-signed, keep working);
3. *retire*: after the overlap the old public key is no longer published.

Versions are ``v1``, ``v2``, ... so key ids (``<runtime-id>:v<n>``) are readable and ordered.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, replace

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

_VERSION = re.compile(r"v([1-9][0-9]{0,8})")


def version_number(version: str) -> int:
    match = _VERSION.fullmatch(version)
    if match is None:
        raise ValueError(f"invalid signing key version {version!r} (expected v<n>)")
    return int(match.group(1))


@dataclass(frozen=True)
class SigningPolicy:
    rotate_after: datetime.timedelta = datetime.timedelta(days=30)
    activation_delay: datetime.timedelta = datetime.timedelta(seconds=60)
    """Time between publishing a public key and giving the agent its private key."""
    overlap: datetime.timedelta = datetime.timedelta(hours=24)
    """How long a superseded public key stays trusted."""

    def __post_init__(self) -> None:
        if self.rotate_after <= self.activation_delay:
            raise ValueError("rotate_after must be longer than activation_delay")
        if self.activation_delay < datetime.timedelta(0) or self.overlap < datetime.timedelta(0):
            raise ValueError("activation_delay and overlap must not be negative")


@dataclass(frozen=True)
class SigningKey:
    version: str
    private_pem: bytes
    created_at: datetime.datetime
    retire_at: datetime.datetime | None = None

    @classmethod
    def generate(cls, version: str, now: datetime.datetime) -> SigningKey:
        version_number(version)
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return cls(version=version, private_pem=pem, created_at=now.replace(microsecond=0))

    def private_key(self) -> Ed25519PrivateKey:
        key = serialization.load_pem_private_key(self.private_pem, password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"signing key {self.version} is not an Ed25519 key")
        return key

    def public_pem(self) -> bytes:
        return (
            self.private_key()
            .public_key()
            .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )


@dataclass(frozen=True)
class KeyRing:
    """All keys of one runtime that are still trusted, oldest first, and which one the agent uses."""

    keys: tuple[SigningKey, ...]
    active: str

    def __post_init__(self) -> None:
        versions = [key.version for key in self.keys]
        if self.active not in versions:
            raise ValueError(f"active signing key {self.active} is not in the ring")
        if versions != sorted(versions, key=version_number) or len(set(versions)) != len(versions):
            raise ValueError("signing keys must be unique and ordered by version")

    @property
    def active_key(self) -> SigningKey:
        return next(key for key in self.keys if key.version == self.active)

    @property
    def pending(self) -> SigningKey | None:
        """A published key newer than the active one, waiting for its activation delay."""
        newest = self.keys[-1]
        return newest if newest.version != self.active else None

    def published(self) -> tuple[SigningKey, ...]:
        """Keys whose public half the listener must trust (pending, active and retiring)."""
        return self.keys


def _next_version(ring: KeyRing) -> str:
    return f"v{version_number(ring.keys[-1].version) + 1}"


def advance(ring: KeyRing | None, *, now: datetime.datetime, policy: SigningPolicy) -> KeyRing:
    """One step of the rotation; idempotent for unchanged ``now`` and inputs."""
    if ring is None:
        first = SigningKey.generate("v1", now)
        return KeyRing(keys=(first,), active=first.version)
    kept = tuple(key for key in ring.keys if key.retire_at is None or key.retire_at > now)
    if kept != ring.keys:
        ring = KeyRing(keys=kept, active=ring.active)
    pending = ring.pending
    if pending is not None:
        if now >= pending.created_at + policy.activation_delay:
            retire = now.replace(microsecond=0) + policy.overlap
            keys = tuple(
                replace(key, retire_at=retire) if key.version == ring.active else key for key in ring.keys
            )
            return KeyRing(keys=keys, active=pending.version)
        return ring
    if now >= ring.active_key.created_at + policy.rotate_after:
        return rotate(ring, now=now)
    return ring


def rotate(ring: KeyRing, *, now: datetime.datetime) -> KeyRing:
    """Publish a new key now (scheduled rotation, or on demand e.g. after a suspected leak)."""
    if ring.pending is not None:
        return ring
    new = SigningKey.generate(_next_version(ring), now)
    return KeyRing(keys=(*ring.keys, new), active=ring.active)


def next_action_at(ring: KeyRing, policy: SigningPolicy) -> datetime.datetime:
    pending = ring.pending
    candidates = [
        pending.created_at + policy.activation_delay
        if pending is not None
        else ring.active_key.created_at + policy.rotate_after
    ]
    candidates.extend(key.retire_at for key in ring.keys if key.retire_at is not None)
    return min(candidates)
