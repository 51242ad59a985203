"""Shard coordination across operator replicas with ``coordination.k8s.io/v1`` Leases only.

Why: one operator process cannot keep up with thousands of Kymas (docs/sharding.md). Kymas are split
into S shards (``shardmap.shard_of``); each shard has one Lease, and only the replica holding it
reconciles the shard's Kymas and Manifests. Replicas coordinate through the API server and nothing
else:

* **membership**: every replica renews its own Lease ``<prefix>-member-<replica id>`` (rounds come
  every retry period; a Lease it holds is renewed every ``ShardingConfig.renew_rounds`` of them),
  annotated with its internal address (``shardmap.INTERNAL_ADDRESS_ANNOTATION``). A member is live
  while its Lease keeps changing within its duration, on this process's monotonic clock
  (``leases.LeaseObservations``, the technique of ``leader.py``); a replica counts itself a member
  until a lease duration after its own last successful renewal, when the others stop counting it;
* **assignment**: every replica computes the same desired owner of every shard from the sorted live
  member ids (:func:`assign`: rendezvous hashing with balanced quotas, so shares differ by at most
  one and few shards move when a member joins or leaves);
* **shard Leases** ``<prefix>-shard-<i>``: a replica acquires the desired shards that are free or
  expired, renews the ones it holds, and hands over the ones no longer desired gracefully: it stops
  admitting work for the shard at once, waits until the shard's in-flight reconciles are done
  (``enter``/``leave``, fed by the controllers' request gates), then releases the Lease (empty
  holder, 1 s duration) so the new owner takes it on its next round;
* **fencing**: :meth:`ShardCoordinator.holds` is true only while the shard Lease's last successful
  renewal (counted from when the request was sent, monotonic) is younger than ``renew_deadline``,
  which is shorter than the ``lease_duration`` others wait before taking an unrenewed Lease over.
  A replica that was paused (SIGSTOP, a stalled VM) therefore admits nothing after resuming until
  it has renewed again, and its renewal fails if the Lease was taken over meanwhile;
* **shard count**: every replica announces its ``--shards`` on its membership Lease
  (``shardmap.SHARDS_ANNOTATION``); the group's count is kept in one more Lease
  (``runtime/shardcount``). A replica whose count differs from the one the running replicas use
  holds no shard at all (so a Kyma is never in two replicas' shards), is left out of everybody's
  share, logs an error once, sets ``kyma_operator_shard_config_mismatch`` and is not ready; it
  takes part as soon as the others agree or are gone;
* **acquisition**: a replica joins (and so takes shards) only after its caches are synced; every
  time it starts to hold a shard (acquired, or renewed again after a fenced gap) the
  ``on_acquired`` callbacks run, which enqueue every Kyma and Manifest of the shard once as a full
  reconcile, so nothing dropped while the shard moved is lost. With per-shard caches
  (``ShardCaches``, ``--shard-scoped-caches``) the shard's informers are started first and the
  shard is acted on only once they are synced; they are stopped when it is released or lost.

A clean stop drains and releases every shard and deletes the membership Lease, so the others
rebalance at once; kill -9 costs one Lease duration.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import os
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from kyma_operator.runtime.clock import Clock, RealClock
from kyma_operator.runtime.errors import AlreadyExists, Conflict, KubeError, NotFound
from kyma_operator.runtime.kube import KubeClient, ObjectList
from kyma_operator.runtime.leases import JSON, LeaseObservations, Observed, lease_spec, micro_time
from kyma_operator.runtime.resources import LEASES
from kyma_operator.runtime.shardcount import AGREE, ShardCountLease, Verdict, announced_shards
from kyma_operator.runtime.shardmap import (
    DEFAULT_SHARDS,
    INTERNAL_ADDRESS_ANNOTATION,
    SHARD_LEASE_LABEL,
    SHARDS_ANNOTATION,
    Replica,
)

log = logging.getLogger(__name__)

Callback = Callable[[int], None]


class ShardCaches(Protocol):
    """Per-shard caches (``runtime/shardinformer``, ``--shard-scoped-caches``): started when a shard
    is acquired (the coordinator acts on it only once they are synced), stopped when released."""

    def start(self, shard: int) -> None: ...

    async def wait_synced(self, shard: int, timeout: float | None) -> bool: ...  # noqa: ASYNC109

    def stop(self, shard: int) -> None: ...


_ID = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def default_replica_id() -> str:
    """``POD_NAME``, else the host name (lower-cased): stable across restarts of the same pod."""
    return (os.environ.get("POD_NAME") or socket.gethostname()).lower()


LEASE_REQUEST_TIMEOUT = 5.0
"""Longest a shard or membership Lease request may take with the usual timings (``request_timeout_for``)."""


def request_timeout_for(retry_period: float) -> float:
    """How long one Lease request of a round may take: 5 s, or one retry period when that is longer.
    Why: with long Lease timings (a slow API server, or a process slowed 50-140x under valgrind by
    ``benchmarks/instruction_count.py``) the 5 s cut failed renewals that the timings allowed and
    fenced shards; a round still starts every retry period, so no request needs longer than one."""
    return max(LEASE_REQUEST_TIMEOUT, retry_period)


@dataclass(frozen=True)
class ShardingConfig:
    """Where the Leases live and how long they last (the leader election's ratios)."""

    namespace: str
    replica_id: str
    address: str = ""
    shards: int = DEFAULT_SHARDS
    lease_prefix: str = "klm"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    request_timeout: float = LEASE_REQUEST_TIMEOUT
    drain_timeout: float = 60.0
    """Longest wait for a shard's in-flight reconciles before it is released anyway (logged)."""

    def __post_init__(self) -> None:
        if not _ID.match(self.replica_id) or len(self.replica_id) > 200:
            raise ValueError(f"replica id {self.replica_id!r} must be a lower-case DNS name")
        if self.shards < 1:
            raise ValueError("shards must be at least 1")
        if not self.lease_duration > self.renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if not self.renew_deadline > self.retry_period > 0:
            raise ValueError("renew_deadline must be greater than retry_period (> 0)")

    @property
    def renew_rounds(self) -> int:
        """Rounds between two renewals of a Lease this replica holds (its shards', its membership):
        as many whole retry periods as fit in half the renew deadline, at least one.

        Why not every round, as client-go's leader election renews: every renewal is a write that
        each replica's next list decodes, and with 16 shards that Lease traffic was most of a
        sharded replica's idle CPU and 2.0-2.4 s of each 5,000-Kyma resync window (issue 28,
        ``benchmarks/results/scale.md``). Spaced so, a renewal still comes at least every half
        renew deadline (the others wait a whole lease duration), and the other half is left for
        retries every round before the replica fences itself. 4/3/0.5 s: every 3rd round (1.5 s);
        10/7/1.5 s: every 2nd (3 s); 60/40/5 s: every 4th (20 s); retry periods longer than a
        quarter of the deadline: every round, as before."""
        return max(1, math.floor(self.renew_deadline / 2 / self.retry_period + 1e-9))

    def renewal_due(self, age: float, latency: float = 0.0) -> bool:
        """Whether a Lease last renewed ``age`` seconds ago is renewed in this round. Rounds start
        every retry period, so ``age`` is a whole number of them minus the write's own delay: the
        threshold sits half a round early. ``latency``: how long Lease writes take lately; a slow
        API server (4-5 s per renewal while replicas list their shards at start-up) brings the
        renewals forward, down to every round, so that one still lands before the renew deadline."""
        spaced = (self.renew_rounds - 0.5) * self.retry_period
        return age >= min(spaced, self.renew_deadline / 2 - latency)

    def member_lease(self, replica_id: str) -> str:
        return f"{self.lease_prefix}-member-{replica_id}"

    def shard_lease(self, shard: int) -> str:
        return f"{self.lease_prefix}-shard-{shard}"

    def count_lease(self) -> str:
        """The Lease recording the group's shard count (``runtime/shardcount``)."""
        return f"{self.lease_prefix}-shards"


def assign(shards: int, members: Sequence[str]) -> list[str | None]:
    """Desired owner of each shard: deterministic from the member set, shares within one of each other.

    Every (shard, member) pair gets a SHA-256 weight; pairs are taken heaviest first and a shard
    goes to the first member with room left (quota ``shards // n``, plus one for the first
    ``shards % n`` members to reach it). Like plain rendezvous hashing, a member joining or leaving
    moves few shards; unlike it, the shares are balanced.
    """
    ids = sorted(set(members))
    if not ids:
        return [None] * shards
    base, extra = divmod(shards, len(ids))
    pairs = sorted(
        (
            (hashlib.sha256(f"{shard}/{member}".encode()).digest(), shard, member)
            for shard in range(shards)
            for member in ids
        ),
        reverse=True,
    )
    owner: list[str | None] = [None] * shards
    count = dict.fromkeys(ids, 0)
    extras_used = 0
    for _, shard, member in pairs:
        if owner[shard] is not None:
            continue
        have = count[member]
        if have < base:
            pass
        elif have == base and extras_used < extra:
            extras_used += 1
        else:
            continue
        owner[shard] = member
        count[member] = have + 1
    return owner


class ShardMetrics:
    """Shards held, hand-offs by direction, live members (on the manager's registry)."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        reg = registry if registry is not None else CollectorRegistry()
        self.held = Gauge(
            "kyma_operator_shards_held", "Shards this replica holds and may act on.", registry=reg
        )
        self.members = Gauge(
            "kyma_operator_shard_members", "Live operator replicas as this replica sees them.", registry=reg
        )
        self.handoffs = Counter(
            "kyma_operator_shard_handoffs",
            "Shard Lease hand-offs of this replica: acquired, released (graceful) or lost (not renewed "
            "in time, or taken over).",
            ["direction"],
            registry=reg,
        )
        self.draining = Gauge(
            "kyma_operator_shards_draining",
            "Shards this replica no longer admits work for and releases once their reconciles end.",
            registry=reg,
        )
        self.mismatch = Gauge(
            "kyma_operator_shard_config_mismatch",
            "1 while this replica holds no shards because its --shards differs from the count the "
            "running replicas use (docs/sharding.md), else 0.",
            registry=reg,
        )
        self.dropped = Counter(
            "kyma_operator_shard_requests_dropped",
            "Requests dropped before reconcile because this replica does not hold their shard.",
            ["controller"],
            registry=reg,
        )


@dataclass(slots=True)
class _Held:
    renewed_at: float
    """Monotonic time the last successful acquire/renew request was sent."""
    resource_version: str
    spec: JSON
    acquired_at: float = math.inf
    """Wall-clock seconds when this replica took the shard (after the write; ``held_since``)."""
    draining_since: float | None = None
    active: bool = False
    """Its caches synced and ``on_acquired`` ran since this replica took it (a fenced gap keeps it:
    requests wait meanwhile, see ``fenced``)."""


class ShardCoordinator:
    """Holds this replica's fair share of shard Leases; implements ``shardmap.ShardView``."""

    def __init__(
        self,
        client: KubeClient,
        config: ShardingConfig,
        *,
        clock: Clock | None = None,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        caches_synced: Callable[[], bool] = lambda: True,
        registry: CollectorRegistry | None = None,
        shard_caches: ShardCaches | None = None,
        join_grace: float = 0.0,
    ) -> None:
        self.client = client
        self.shard_caches = shard_caches
        """Started on acquiring a shard and awaited before acting on it; stopped on release."""
        self.join_grace = join_grace
        """Seconds after joining before this replica takes free shards, so replicas started
        together see each other first (with per-shard caches, taking every shard and handing most
        of them over again lists the whole fleet once: memory and CPU a replica does not keep).
        Not waited for when another live member already holds a shard (joining a running group)."""
        self._joined_at = math.inf
        self.config = config
        self.clock = clock or RealClock()
        self._wall = wall_clock
        self._caches_synced = caches_synced
        self.metrics = ShardMetrics(registry)
        self.metrics.held.set_function(lambda: float(len(self.held())))  # fenced: drops at once
        self._self = Replica(config.replica_id, config.address)
        self._held: dict[int, _Held] = {}
        self._in_flight = [0] * config.shards
        self._observed = LeaseObservations()
        self._member_renewed_at = -math.inf
        self._member_rv = ""
        self._write_latency = 0.0
        self._round_slowest = 0.0
        self._members: list[Replica] = []
        self._holders: dict[int, Replica] = {}
        self._desired: list[str | None] = [None] * config.shards
        self._count_lease = ShardCountLease(
            client,
            name=config.count_lease(),
            namespace=config.namespace,
            lease_prefix=config.lease_prefix,
            replica_id=config.replica_id,
            shards=config.shards,
            lease_duration=config.lease_duration,
            request_timeout=config.request_timeout,
        )
        self.verdict: Verdict = AGREE
        """This round's shard-count verdict (``runtime/shardcount``): refusing holds no shard."""
        self._peer_shards: dict[str, int] = {}
        self._disagreeing: dict[str, int] = {}
        self._on_acquired: list[Callback] = []
        self._on_released: list[Callback] = []
        self._activations: dict[int, asyncio.Task[None]] = {}
        """Per shard whose caches are still listing: the task that acts on it once they are in."""
        self._drained = asyncio.Event()
        self.rounds = 0
        self._wake_at = math.inf
        self.joined = False

    # -- ShardView -----------------------------------------------------------------------------

    @property
    def shards(self) -> int:
        return self.config.shards

    @property
    def identity(self) -> str:
        return self.config.replica_id

    def holds(self, shard: int) -> bool:
        """Held, not draining, and renewed within ``renew_deadline`` (fencing) with caches synced;
        never while the shard count disagrees (from the round that found out)."""
        held = self._held.get(shard)
        if held is None or held.draining_since is not None or not held.active or not self.verdict.agree:
            return False
        return self.clock.now() - held.renewed_at < self.config.renew_deadline

    def holder(self, shard: int) -> Replica | None:
        if not self.verdict.agree:
            return None  # the others' shard numbers are not ours: nobody to hand events to
        if self.holds(shard):
            return self._self
        if shard in self._held:
            return None  # ours but fenced or draining: nobody may act on it right now
        return self._holders.get(shard)

    # -- for controllers, readiness and wiring ---------------------------------------------------

    def held_since(self, shard: int) -> float | None:
        """Wall-clock seconds since this replica holds ``shard`` without a break (None: not held now).

        Anything a previous holder accepted happened before: it was fenced or had released first."""
        held = self._held.get(shard)
        if held is None or not self.holds(shard):
            return None
        return held.acquired_at

    def held(self) -> frozenset[int]:
        """Shards this replica may act on now."""
        return frozenset(shard for shard in self._held if self.holds(shard))

    def members(self) -> list[Replica]:
        """Live replicas (sorted by id) as of the last round."""
        return list(self._members)

    def desired(self) -> list[str | None]:
        return list(self._desired)

    @property
    def ready(self) -> bool:
        """Holds at least one shard, or is the only live replica (readiness probe); never while
        refusing because of a different shard count."""
        if not self.verdict.agree:
            return False
        if self.held():
            return True
        return [m.identity for m in self._members] == [self.identity]

    @property
    def not_ready_reason(self) -> str:
        """Why this replica is not ready beyond holding no shard (``/readyz``); empty if nothing."""
        return "" if self.verdict.agree else self.verdict.reason

    def fenced(self, shard: int) -> bool:
        """Held and acted on, but fenced right now (its renewal is late): requests of the shard
        wait (``RequestGate.deferred``) instead of being dropped; they run once it is renewed, or
        are dropped once it is lost or released."""
        held = self._held.get(shard)
        return (
            held is not None
            and held.active
            and held.draining_since is None
            and self.verdict.agree
            and not self.holds(shard)
        )

    def enter(self, shard: int) -> bool:
        """Admit one reconcile of ``shard`` (counted in flight) if this replica holds it."""
        if not self.holds(shard):
            return False
        self._in_flight[shard] += 1
        return True

    def leave(self, shard: int) -> None:
        """A reconcile admitted by ``enter`` has ended."""
        self._in_flight[shard] = max(0, self._in_flight[shard] - 1)
        if self._in_flight[shard] == 0:
            self._drained.set()

    def in_flight(self, shard: int) -> int:
        return self._in_flight[shard]

    def on_acquired(self, callback: Callback) -> None:
        """Run ``callback(shard)`` whenever this replica starts to act on a shard."""
        self._on_acquired.append(callback)

    def on_released(self, callback: Callback) -> None:
        """Run ``callback(shard)`` when a shard is released or lost."""
        self._on_released.append(callback)

    # -- running -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Rounds every retry period until cancelled; then drain, release and leave."""
        try:
            while True:
                if self._caches_synced():
                    started = self.clock.now()
                    try:
                        await self.tick()
                    except (KubeError, TimeoutError) as exc:  # API server away: fenced until back
                        log.warning("%s: shard coordination round failed: %s", self.identity, exc)
                    except Exception:  # one bad round must not end coordination
                        log.exception("%s: shard coordination round failed", self.identity)
                    took = self.clock.now() - started
                    if took > self.config.renew_deadline / 2:  # renewals late: see runtime/loopwatch
                        log.info("%s: shard coordination round took %.2f s", self.identity, took)
                    # rounds start every retry period, not a retry period after the last one ended:
                    # a slow round (a loaded API server) must not stretch the renewals past the deadline
                    await self.clock.sleep(
                        max(0.05, min(self.next_round_in(), self.config.retry_period - took))
                    )
                    continue
                await self.clock.sleep(self.next_round_in())
        except asyncio.CancelledError:
            await self.leave_all()
            raise

    async def tick(self) -> None:
        """One round: renew membership, read every Lease, compute the share, acquire/renew/release."""
        self.rounds += 1
        started = self.clock.now()
        # First thing in the round, side by side with the membership renewal and the list: the
        # renewals of the shards this replica holds and keeps, over its own last write (a renewal
        # needs no list; one that conflicts is written again after the list, below). Why: at
        # start-up every step of the round waits for a turn of a busy main loop (seconds each), and
        # renewals that waited for the list first came later than the renew deadline. The share is
        # computed as soon as the membership and the list are in, without waiting for them.
        renewals: dict[int, asyncio.Future[bool]] = {
            shard: asyncio.ensure_future(self._renew_kept(shard)) for shard in self._kept()
        }
        try:
            await self._round(started, renewals)
        finally:
            await asyncio.gather(*renewals.values(), return_exceptions=True)
            self._write_latency = max(self._round_slowest, 0.8 * self._write_latency)
            self._round_slowest = 0.0

    async def _round(self, started: float, renewals: dict[int, asyncio.Future[bool]]) -> None:
        cfg = self.config
        if not self._member_rv or cfg.renewal_due(started - self._member_renewed_at, self._write_latency):
            _, listed = await asyncio.gather(self._renew_membership(), self._list_leases())
        else:
            listed = await self._list_leases()
        leases = {str(item["metadata"]["name"]): item for item in listed.items}
        self._observed.forget_missing(set(leases))
        observed = {name: self._observed.observe(lease, started) for name, lease in leases.items()}
        self._members = self._live_members(leases, observed, started)
        self._judge(await self._count_lease.check(leases, observed, self._peer_shards, started))
        self.metrics.members.set(len(self._members))
        by_id = {m.identity: m for m in self._members}
        self._desired = assign(cfg.shards, list(by_id)) if self.verdict.agree else [None] * cfg.shards
        self._holders = {}
        for shard in range(cfg.shards if self.verdict.agree else 0):
            seen = observed.get(cfg.shard_lease(shard))
            if seen is not None and not seen.expired(started, cfg.lease_duration):
                holder = by_id.get(seen.holder) or Replica(seen.holder, "")
                self._holders[shard] = holder
        await asyncio.gather(
            *(
                self._shard_round(shard, observed.get(cfg.shard_lease(shard)), renewal=renewals.get(shard))
                for shard in range(cfg.shards)
            )
        )
        self._wake_at = self._next_expiry(observed)
        self.metrics.draining.set(sum(1 for h in self._held.values() if h.draining_since is not None))

    def _kept(self) -> list[int]:
        """Shards held, not draining, still this replica's as of the last round, and due."""
        if not self.verdict.agree:
            return []
        return [
            shard
            for shard, held in sorted(self._held.items())
            if held.draining_since is None and self._desired[shard] == self.identity and self._due(held)
        ]

    def _due(self, held: _Held) -> bool:
        return self.config.renewal_due(self.clock.now() - held.renewed_at, self._write_latency)

    def _took(self, started: float) -> None:
        """Record a Lease write's duration (queueing in the client's pool included)."""
        self._round_slowest = max(self._round_slowest, self.clock.now() - started)

    @property
    def write_latency(self) -> float:
        """How long Lease writes take lately: the slowest of the last round, or a fifth less per
        round than the one before, whichever is more. Renewals come earlier while it is high
        (``ShardingConfig.renewal_due``)."""
        return self._write_latency

    async def _renew_kept(self, shard: int) -> bool:
        """Renew ``shard`` over this replica's own last write; whether that worked."""
        held = self._held.get(shard)
        if held is None:
            return False
        before = held.renewed_at
        await self._write(shard, Observed(held.spec, held.resource_version, before), renew=True)
        return self._held.get(shard) is held and held.renewed_at != before

    async def _list_leases(self) -> ObjectList:
        async with asyncio.timeout(self.config.request_timeout):
            return await self.client.list(
                LEASES,
                self.config.namespace,
                label_selector=f"{SHARD_LEASE_LABEL}={self.config.lease_prefix}",
            )

    def next_round_in(self) -> float:
        """Seconds until the next round: the retry period, or sooner when a Lease that matters (a
        member's, or a shard we want that another holds) expires before that (faster takeover)."""
        retry = self.config.retry_period
        return min(retry, max(0.05, self._wake_at + 0.05 - self.clock.now()))

    def _next_expiry(self, observed: dict[str, Observed]) -> float:
        cfg = self.config
        now = self.clock.now()
        wake = math.inf
        for name, seen in observed.items():
            if not seen.holder or seen.holder == self.identity:
                continue
            if name.startswith(f"{cfg.lease_prefix}-shard-"):
                shard = int(name.rsplit("-", 1)[1])
                if shard >= cfg.shards or self._desired[shard] != self.identity:
                    continue
            expiry = seen.changed_at + seen.duration(cfg.lease_duration)
            if expiry > now:  # (an already expired one, e.g. a dead member's, needs no early round)
                wake = min(wake, expiry)
        return wake

    def _judge(self, verdict: Verdict) -> None:
        """Adopt this round's shard-count verdict; log changes once (error on a mismatch)."""
        before, self.verdict = self.verdict, verdict
        self.metrics.mismatch.set(1.0 if verdict.mismatch else 0.0)
        if verdict.reason != before.reason:
            if verdict.mismatch and not before.mismatch:  # once per mismatch, not on every rewording
                log.error("%s: shard count mismatch: %s", self.identity, verdict.reason)
            elif verdict.mismatch:
                log.info("%s: shard count mismatch: %s", self.identity, verdict.reason)
            elif not verdict.agree:
                log.info("%s: holding no shards this round: %s", self.identity, verdict.reason)
            elif before.mismatch:
                log.warning("%s: shard count agrees again (--shards=%d)", self.identity, self.config.shards)
        if not verdict.agree:
            return
        for peer, count in sorted(self._peer_shards.items()):
            if count != self.config.shards and self._disagreeing.get(peer) != count:
                log.warning(
                    "%s: replica %s announces --shards=%d, this group uses %d: it holds no shards "
                    "until it is restarted with --shards=%d",
                    self.identity,
                    peer,
                    count,
                    self.config.shards,
                    self.config.shards,
                )
        self._disagreeing = {p: c for p, c in self._peer_shards.items() if c != self.config.shards}

    async def leave_all(self) -> None:
        """Stop admitting everything, wait for in-flight reconciles, release every shard, leave."""
        now = self.clock.now()
        for held in self._held.values():
            if held.draining_since is None:
                held.draining_since = now
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.config.drain_timeout):
                await self._wait_drained()
        await asyncio.gather(*(self._release(shard) for shard in list(self._held)), return_exceptions=True)
        for activation in list(self._activations.values()):
            activation.cancel()
        try:
            async with asyncio.timeout(self.config.request_timeout):
                await self.client.delete(
                    LEASES, self.config.member_lease(self.identity), self.config.namespace
                )
        except (KubeError, TimeoutError) as exc:
            log.info("%s: could not delete membership lease: %s", self.identity, exc)
        log.info("%s: left the shard group", self.identity)

    async def _wait_drained(self) -> None:
        while any(self._in_flight[shard] for shard in self._held):
            self._drained.clear()
            await self._drained.wait()

    # -- membership ----------------------------------------------------------------------------

    async def _renew_membership(self) -> None:
        cfg = self.config
        name = cfg.member_lease(self.identity)
        now_wall = micro_time(self._wall())
        started = self.clock.now()
        body: JSON = {
            "metadata": {
                "name": name,
                "namespace": cfg.namespace,
                "labels": {SHARD_LEASE_LABEL: cfg.lease_prefix},
                "annotations": {INTERNAL_ADDRESS_ANNOTATION: cfg.address, SHARDS_ANNOTATION: str(cfg.shards)},
            },
            "spec": lease_spec(self.identity, cfg.lease_duration, now_wall, now_wall, 0),
        }
        try:
            if self._member_rv:
                body["metadata"]["resourceVersion"] = self._member_rv
                try:
                    async with asyncio.timeout(cfg.request_timeout):
                        written = await self.client.update(LEASES, body)
                except (Conflict, NotFound):
                    async with asyncio.timeout(cfg.request_timeout):
                        current = await self.client.get(LEASES, name, cfg.namespace)
                    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                    async with asyncio.timeout(cfg.request_timeout):
                        written = await self.client.update(LEASES, body)
            else:
                try:
                    async with asyncio.timeout(cfg.request_timeout):
                        written = await self.client.create(LEASES, body)
                except AlreadyExists:  # our own Lease from an earlier run
                    async with asyncio.timeout(cfg.request_timeout):
                        current = await self.client.get(LEASES, name, cfg.namespace)
                    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                    async with asyncio.timeout(cfg.request_timeout):
                        written = await self.client.update(LEASES, body)
        except (KubeError, TimeoutError) as exc:
            self._took(started)
            self._member_rv = ""
            log.info("%s: membership renewal failed: %s", self.identity, exc)
            return
        self._took(started)
        self._member_rv = str(written["metadata"]["resourceVersion"])
        self._member_renewed_at = started
        if not self.joined:
            self.joined = True
            self._joined_at = started
            log.info("%s: joined the shard group (%d shards)", self.identity, cfg.shards)

    def _live_members(
        self, leases: dict[str, JSON], observed: dict[str, Observed], now: float
    ) -> list[Replica]:
        cfg = self.config
        prefix = f"{cfg.lease_prefix}-member-"
        wall_now = self._wall()
        live: dict[str, Replica] = {}
        self._peer_shards = {}
        for name, lease in leases.items():
            if not name.startswith(prefix):
                continue
            seen = observed[name]
            identity = seen.holder
            if not identity or identity == self.identity:
                continue
            if seen.expired(now, cfg.lease_duration) or _stale_on_first_sight(
                seen, wall_now, cfg.lease_duration
            ):
                continue
            shards = announced_shards(lease)
            if shards is not None:
                self._peer_shards[identity] = shards
                if shards != cfg.shards:
                    continue  # it holds nothing of ours (one of us refuses): no share for it
            address = str(
                ((lease.get("metadata") or {}).get("annotations") or {}).get(INTERNAL_ADDRESS_ANNOTATION)
                or ""
            )
            live[identity] = Replica(identity, address)
        # Itself: a member until the others see its Lease expired (a lease duration after its last
        # successful renewal was sent, no earlier than they do). Leaving its own share at the renew
        # deadline instead made a replica whose membership renewal was merely late hand over shards
        # nobody else was meant to take, and take them back once the renewal landed. What it may act
        # on is fenced per shard Lease (``holds``), not by this.
        if self.clock.now() - self._member_renewed_at < cfg.lease_duration:
            live[self.identity] = self._self
        return [live[k] for k in sorted(live)]

    # -- shards --------------------------------------------------------------------------------

    async def _shard_round(
        self, shard: int, seen: Observed | None, *, renewal: asyncio.Future[bool] | None = None
    ) -> None:
        """``renewal``: this round's renewal of the shard over the last write (``_renew_kept``)."""
        cfg = self.config
        renewed = renewal is not None and await renewal
        mine = self._desired[shard] == self.identity
        held = self._held.get(shard)
        if held is not None:
            if seen is None or seen.holder != self.identity:
                self._lose(shard, "taken over" if seen is not None else "lease deleted")
                return
            if not mine and held.draining_since is None:
                held.draining_since = self.clock.now()
                log.info(
                    "%s: handing shard %d over to %s (draining)", self.identity, shard, self._desired[shard]
                )
            if held.draining_since is not None:
                overdue = self.clock.now() - held.draining_since >= cfg.drain_timeout
                if self._in_flight[shard] == 0 or overdue:
                    if overdue and self._in_flight[shard]:
                        log.warning(
                            "%s: shard %d still has %d reconciles after %.0fs: releasing anyway",
                            self.identity,
                            shard,
                            self._in_flight[shard],
                            cfg.drain_timeout,
                        )
                    await self._release(shard)
                    return
                if mine:  # desired again before the release: take it back (in full: requests
                    held.draining_since = None  # dropped while draining are enqueued again)
                    held.active = False
            if renewed:
                return
            if self._due(held):
                await self._write(shard, seen, renew=True)
            elif not held.active and held.draining_since is None:
                self._activate_when_synced(shard, held)  # taken back while fresh: no write needed
            return
        if not mine or (self.clock.now() - self._joined_at < self.join_grace and not self._group_running()):
            return
        if seen is None:
            await self._write(shard, None, renew=False)
        elif seen.expired(self.clock.now(), cfg.lease_duration):
            await self._write(shard, seen, renew=False)

    def _group_running(self) -> bool:
        """Another live member holds a shard: this replica joins a running group, whose members
        already see it (the free shards it wants were handed over for it), so the join grace, meant
        for replicas started together, would only delay its first reconciles."""
        others = {m.identity for m in self._members} - {self.identity}
        return any(holder.identity in others for holder in self._holders.values())

    async def _write(self, shard: int, seen: Observed | None, *, renew: bool) -> None:
        cfg = self.config
        name = cfg.shard_lease(shard)
        now_wall = micro_time(self._wall())
        started = self.clock.now()
        held = self._held.get(shard)
        try:
            if seen is None:
                body: JSON = {
                    "metadata": {
                        "name": name,
                        "namespace": cfg.namespace,
                        "labels": {SHARD_LEASE_LABEL: cfg.lease_prefix},
                    },
                    "spec": lease_spec(self.identity, cfg.lease_duration, now_wall, now_wall, 0),
                }
                async with asyncio.timeout(cfg.request_timeout):
                    written = await self.client.create(LEASES, body)
            else:
                transitions = int(seen.spec.get("leaseTransitions") or 0)
                acquire = str(seen.spec.get("acquireTime") or now_wall) if renew else now_wall
                body = {
                    "metadata": {
                        "name": name,
                        "namespace": cfg.namespace,
                        "labels": {SHARD_LEASE_LABEL: cfg.lease_prefix},
                        "resourceVersion": seen.resource_version,
                    },
                    "spec": lease_spec(
                        self.identity,
                        cfg.lease_duration,
                        acquire,
                        now_wall,
                        transitions if renew else transitions + 1,
                    ),
                }
                async with asyncio.timeout(cfg.request_timeout):
                    written = await self.client.update(LEASES, body)
        except (AlreadyExists, Conflict):
            if renew:
                log.info("%s: shard %d lease changed under us; re-reading next round", self.identity, shard)
            return
        except (KubeError, TimeoutError) as exc:
            self._took(started)
            log.info("%s: shard %d lease write failed: %s", self.identity, shard, exc)
            if held is not None and self.clock.now() - held.renewed_at >= cfg.lease_duration:
                self._lose(shard, "not renewed within the lease duration")
            return
        self._took(started)
        rv = str(written["metadata"]["resourceVersion"])
        spec = written.get("spec") or {}
        self._observed.observe(written, started)
        if held is None:
            taken = self._wall().timestamp()
            held = _Held(renewed_at=started, resource_version=rv, spec=spec, acquired_at=taken)
            self._held[shard] = held
            self.metrics.handoffs.labels("acquired").inc()
            log.info("%s: acquired shard %d", self.identity, shard)
        else:
            # Fenced at some moment since the last renewal (also while this write was in flight):
            # the shard's requests were deferred meanwhile (``fenced``), not dropped, so they run
            # now; no full re-enqueue of the shard (under load that doubled the reconciles).
            if held.draining_since is None and self.clock.now() - held.renewed_at >= cfg.renew_deadline:
                log.info("%s: shard %d renewed again after a fenced gap", self.identity, shard)
            held.renewed_at = started
            held.resource_version = rv
            held.spec = spec
        if not held.active and held.draining_since is None:
            self._activate_when_synced(shard, held)

    def _activate_when_synced(self, shard: int, held: _Held) -> None:
        """Act on ``shard`` once its caches (if per-shard) have their first list: at once without
        per-shard caches, else from a task started with them, so ``on_acquired`` sees every object
        of the shard and no request is admitted before.

        Why a task and not a wait here: this runs inside the round that renews every Lease of this
        replica, and at start-up a shard's lists take seconds; rounds that waited for them (up to a
        retry period each) stretched the renewals of the shards already held past the renew
        deadline (``benchmarks/results/scale.md``, issue 28)."""
        if self.shard_caches is None:
            self._activate(shard, held)
            return
        if shard in self._activations:
            return
        self.shard_caches.start(shard)
        self._activations[shard] = asyncio.create_task(
            self._activate_once_synced(shard, self.shard_caches), name=f"shard {shard} caches"
        )

    async def _activate_once_synced(self, shard: int, caches: ShardCaches) -> None:
        try:
            await caches.wait_synced(shard, None)
        finally:
            self._activations.pop(shard, None)
        held = self._held.get(shard)  # as of now: released, lost or draining meanwhile is no
        if held is not None and not held.active and held.draining_since is None:
            self._activate(shard, held)

    def _activate(self, shard: int, held: _Held) -> None:
        held.active = True
        self._holders[shard] = self._self
        self._notify(self._on_acquired, shard)

    def _stop_shard_caches(self, shard: int) -> None:
        if self.shard_caches is not None and shard not in self._held:
            activation = self._activations.pop(shard, None)
            if activation is not None:  # its caches go: they will never be synced
                activation.cancel()
            self.shard_caches.stop(shard)

    async def _release(self, shard: int) -> None:
        cfg = self.config
        held = self._held.pop(shard, None)
        if held is None:
            return
        now_wall = micro_time(self._wall())
        spec = dict(held.spec)
        spec.update(
            {"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": now_wall, "renewTime": now_wall}
        )
        body: JSON = {
            "metadata": {
                "name": cfg.shard_lease(shard),
                "namespace": cfg.namespace,
                "labels": {SHARD_LEASE_LABEL: cfg.lease_prefix},
                "resourceVersion": held.resource_version,
            },
            "spec": spec,
        }
        try:
            async with asyncio.timeout(cfg.request_timeout):
                await self.client.update(LEASES, body)
            log.info("%s: released shard %d", self.identity, shard)
        except (KubeError, TimeoutError) as exc:
            # Not released: it expires after its duration (we stopped acting on it already).
            log.info("%s: could not release shard %d: %s", self.identity, shard, exc)
        self._holders.pop(shard, None)
        self.metrics.handoffs.labels("released").inc()
        self._notify(self._on_released, shard)
        self._stop_shard_caches(shard)

    def _lose(self, shard: int, why: str) -> None:
        self._held.pop(shard, None)
        self._holders.pop(shard, None)
        self.metrics.handoffs.labels("lost").inc()
        log.warning("%s: lost shard %d (%s)", self.identity, shard, why)
        self._notify(self._on_released, shard)
        self._stop_shard_caches(shard)

    def _notify(self, callbacks: list[Callback], shard: int) -> None:
        for callback in callbacks:
            try:
                callback(shard)
            except Exception:  # a callback bug must not break coordination
                log.exception("%s: shard callback failed for shard %d", self.identity, shard)


def _stale_on_first_sight(seen: Observed, wall_now: datetime, duration: float) -> bool:
    """A membership Lease whose wall-clock renewTime is older than two durations: a dead replica's
    leftover (seen for the first time by a process that just started). Only used for membership
    (the share), never for shard Leases (safety), so clock skew cannot cause double work."""
    raw = str(seen.spec.get("renewTime") or "")
    try:
        renewed = datetime.strptime(raw, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        return False
    return wall_now - renewed > timedelta(seconds=2 * seen.duration(duration))
