"""Which shard a key belongs to and which replica holds a shard: the contract between the shard
coordinator (Leases, ``runtime/sharding``), the controllers' per-request gate and the listener's
hand-off of events to the holder (docs/sharding.md).

Why one small module: three parts of the operator must agree on the same answer without calling
each other's internals. The shard of a key is a stable hash of it modulo the shard count. Which key
an object is sharded by is the controllers' business (``controllers.sharding.kyma_shard_key``: a
Kyma's runtime id, which an authenticated agent event carries, so any replica can tell the shard of
an event without a Kyma cache); the runtime knows only keys, shards and replicas.

Without ``--sharding`` there is no ``ShardView`` at all (``None`` where one is taken): one operator
process behaves exactly as before sharding existed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Protocol

from kyma_wire.names import OPERATOR_GROUP

SHARD_LABEL = f"{OPERATOR_GROUP}/shard"
"""Label the operator sets on Kymas and Manifests: the shard number, decimal (informer selectors)."""

DEFAULT_SHARDS = 16

INTERNAL_ADDRESS_ANNOTATION = f"{OPERATOR_GROUP}/internal-address"
"""Annotation on a replica's membership Lease: its internal hand-off address (``Replica.address``)."""

SHARDS_ANNOTATION = f"{OPERATOR_GROUP}/shards"
"""Annotation with a shard count (``--shards``, decimal): on every membership Lease (what that replica
uses) and on the group's shard-count Lease (what the group uses; ``runtime/shardcount``)."""

SHARD_LEASE_LABEL = f"{OPERATOR_GROUP}/shard-lease"
"""Label on membership and shard Leases (value: the Lease name prefix), so one list reads them all."""


def shard_label_value(shard: int) -> str:
    """The ``SHARD_LABEL`` value of ``shard``."""
    return str(shard)


def parse_shard_label(value: object, shards: int) -> int | None:
    """``SHARD_LABEL``'s shard number, or None when missing or not a shard of ``shards``."""
    if not isinstance(value, str) or not value.isdigit():
        return None
    shard = int(value)
    return shard if shard < shards else None


def shard_of(key: str, shards: int) -> int:
    """The shard of ``key`` (a runtime id): first 8 bytes of SHA-256, big-endian, modulo ``shards``.

    Stable across processes, Python versions and restarts (unlike ``hash()``)."""
    if shards < 1:
        raise ValueError("shards must be at least 1")
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


@dataclass(frozen=True, slots=True)
class Replica:
    """An operator replica as others see it: its identity (Lease holder) and its internal address
    (``https://host:port`` of the authenticated hand-off endpoint), published in its membership Lease."""

    identity: str
    address: str


class ShardView(Protocol):
    """What controllers and the listener ask about shards (answers from memory, no API call)."""

    @property
    def shards(self) -> int: ...

    def holds(self, shard: int) -> bool:
        """True only while this replica holds ``shard`` and may act on it (fenced by renew deadline)."""
        ...

    def holder(self, shard: int) -> Replica | None:
        """The replica currently holding ``shard`` (self included), ``None`` if nobody does."""
        ...

    def held_since(self, shard: int) -> float | None:
        """Wall-clock seconds since this replica holds ``shard`` without a break; None if not now.
        A previous holder accepted nothing after it (the listener's replay rule)."""
        ...
