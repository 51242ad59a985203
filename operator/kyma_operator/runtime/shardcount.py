"""Whether this replica's ``--shards`` agrees with its group's, decided through one Lease.

Why: the shard of a Kyma is ``shard_of(runtime id, shards)``; two replicas with different shard
counts compute different shards for the same Kyma, so each could hold "its" shard of it and both
would reconcile it. Comparing counts pairwise is racy (two replicas starting at once each see the
other and must not both win), so the group's count lives in one Lease, ``<prefix>-shards``
(annotation ``SHARDS_ANNOTATION``; no holder, never renewed), written with resourceVersion
optimistic concurrency so exactly one writer wins a race:

* a shard Lease is held by a live replica announcing another count than ours (a race, or the Lease
  below was deleted): **refuse** (below), whatever the Lease says -- so two counts never act at
  once; when both sides see this, both release and the Lease decides on the next round;
* missing: the first replica creates it with its count (a replica that loses the create race acts
  on nothing this round and reads the winner's count next round);
* same count as ours: agree;
* another count, still used: some live member announces it on its membership Lease, or a shard
  Lease is held (not expired, on our monotonic clock) by another replica -> **refuse**: this replica
  holds no shard, reports the mismatch (error log, ``kyma_operator_shard_config_mismatch``,
  ``/readyz``) and looks again every round;
* another count, no longer used (every replica of it stopped, and all shard Leases are free or
  expired): rewrite it with ours and go on. So the replicas that already work keep working, a
  newcomer with another count refuses, and a deliberate change of ``--shards`` rolls out as soon
  as the last replica with the old count is gone (no manual step).

Refusing replicas are left out of everybody's share (``assign``), so no shard is assigned to a
replica that will not take it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from kyma_operator.runtime.errors import AlreadyExists, Conflict, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.leases import JSON, Observed
from kyma_operator.runtime.resources import LEASES
from kyma_operator.runtime.shardmap import SHARD_LEASE_LABEL, SHARDS_ANNOTATION

log = logging.getLogger(__name__)


def announced_shards(lease: JSON) -> int | None:
    """The shard count a Lease's ``SHARDS_ANNOTATION`` names; None when absent or not a number."""
    value = ((lease.get("metadata") or {}).get("annotations") or {}).get(SHARDS_ANNOTATION)
    if not isinstance(value, str) or not value.isdigit() or int(value) < 1:
        return None
    return int(value)


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether this replica may hold shards this round, and if not, why."""

    agree: bool
    reason: str = ""
    """Why not (``/readyz``, the error log); empty when agreeing."""
    mismatch: bool = False
    """True when the refusal is a real shard-count mismatch (metric, error log); False for a lost
    write race, which the next round resolves."""


AGREE = Verdict(agree=True)


class ShardCountLease:
    """Reads and writes the group's shard-count Lease for one replica."""

    def __init__(
        self,
        client: KubeClient,
        *,
        name: str,
        namespace: str,
        lease_prefix: str,
        replica_id: str,
        shards: int,
        lease_duration: float,
        request_timeout: float,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.prefix = lease_prefix
        self.name = name
        self.identity = replica_id
        self.shards = shards
        self.lease_duration = lease_duration
        self.request_timeout = request_timeout

    async def check(
        self,
        leases: Mapping[str, JSON],
        observed: Mapping[str, Observed],
        peers: Mapping[str, int],
        now: float,
    ) -> Verdict:
        """The verdict of this round from the Leases just listed (``leases``/``observed``) and the live
        peers' announced counts (``peers``: replica id -> count, peers without an announcement left
        out); writes the shard-count Lease when it is missing or stale."""
        lease = leases.get(self.name)
        recorded = None if lease is None else announced_shards(lease)
        users = sorted(peer for peer, count in peers.items() if count == recorded != self.shards)
        if users:
            return Verdict(
                agree=False,
                mismatch=True,
                reason=(
                    f"--shards={self.shards} differs from --shards={recorded} of the running "
                    f"replica(s) {', '.join(users)} (lease {self.name}): this replica holds no shards "
                    f"until they agree; restart it with --shards={recorded}, or stop every replica "
                    f"using {recorded}"
                ),
            )
        foreign = self._held_by_others(observed, now, other_count=peers)
        if foreign:
            holders = sorted({f"{holder} (--shards={peers[holder]})" for _, holder in foreign})
            return Verdict(
                agree=False,
                mismatch=True,
                reason=(
                    f"--shards={self.shards} differs from the shard count of replica(s) "
                    f"{', '.join(holders)}, which hold {len(foreign)} shard lease(s): this replica "
                    f"holds no shards until they release them"
                ),
            )
        if lease is None:
            return await self._write(
                None, f"created the shard-count lease {self.name} with {self.shards}", logging.INFO
            )
        if recorded == self.shards:
            return AGREE
        busy = sorted(name for name, _ in self._held_by_others(observed, now))
        if busy:
            return Verdict(
                agree=False,
                mismatch=True,
                reason=(
                    f"--shards={self.shards} differs from --shards={recorded} recorded in lease "
                    f"{self.name}, and {len(busy)} shard lease(s) ({busy[0]}, ...) are still held by "
                    f"other replicas: this replica holds no shards until they are released or expire"
                ),
            )
        return await self._write(
            lease,
            f"changed the group's shard count from {recorded} to {self.shards} (no live replica used it)",
            logging.WARNING,
        )

    def _held_by_others(
        self, observed: Mapping[str, Observed], now: float, other_count: Mapping[str, int] | None = None
    ) -> list[tuple[str, str]]:
        """(shard Lease, holder) of the shard Leases another replica holds (not expired on our clock);
        with ``other_count``: only those whose holder announces a count other than ours there."""
        prefix = f"{self.prefix}-shard-"
        return sorted(
            (name, seen.holder)
            for name, seen in observed.items()
            if name.startswith(prefix)
            and seen.holder
            and seen.holder != self.identity
            and not seen.expired(now, self.lease_duration)
            and (other_count is None or other_count.get(seen.holder, self.shards) != self.shards)
        )

    async def _write(self, current: JSON | None, done: str, level: int) -> Verdict:
        body: JSON = {
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {SHARD_LEASE_LABEL: self.prefix},
                "annotations": {SHARDS_ANNOTATION: str(self.shards)},
            },
            "spec": {},
        }
        try:
            if current is None:
                async with asyncio.timeout(self.request_timeout):
                    await self.client.create(LEASES, body)
            else:
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                async with asyncio.timeout(self.request_timeout):
                    await self.client.update(LEASES, body)
        except (AlreadyExists, Conflict, NotFound):
            return Verdict(
                agree=False, reason=f"the shard-count lease {self.name} changed concurrently; re-reading"
            )
        log.log(level, "%s: %s", self.identity, done)
        return AGREE
