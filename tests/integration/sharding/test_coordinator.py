"""ShardCoordinator on the real KCP API server, rounds driven by hand on a fake clock.

Three coordinators in one process share the API server (their Leases are real) and one
``FakeClock``, so Lease expiry and the fence (renew deadline < lease duration) are exercised
without waiting: a "dead" replica is one whose rounds stop; a "paused" one is one whose rounds
stop and then resume.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable
from typing import Any

import pytest

from kyma_operator.runtime.clock import FakeClock
from kyma_operator.runtime.errors import KubeError, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import LEASES, Resource
from kyma_operator.runtime.sharding import ShardCoordinator, ShardingConfig
from tests.polling import eventually

SHARDS = 16
DURATION, DEADLINE, RETRY = 4.0, 3.0, 1.0


def coordinator(client: KubeClient, namespace: str, replica: str, clock: FakeClock) -> ShardCoordinator:
    config = ShardingConfig(
        namespace=namespace,
        replica_id=replica,
        address=f"https://{replica}.internal:8083",
        shards=SHARDS,
        lease_duration=DURATION,
        renew_deadline=DEADLINE,
        retry_period=RETRY,
    )
    return ShardCoordinator(client, config, clock=clock)


async def rounds(coordinators: Iterable[ShardCoordinator], count: int, clock: FakeClock) -> None:
    group = list(coordinators)
    for _ in range(count):
        for c in group:
            await c.tick()
        clock.advance(RETRY)


def acquired_log(c: ShardCoordinator) -> list[int]:
    seen: list[int] = []
    c.on_acquired(seen.append)
    return seen


async def lease_holder(client: KubeClient, namespace: str, shard: int) -> str:
    lease = await client.get(LEASES, f"klm-shard-{shard}", namespace)
    return str(lease["spec"].get("holderIdentity") or "")


def assert_disjoint_cover(group: list[ShardCoordinator]) -> None:
    held = [c.held() for c in group]
    for i, a in enumerate(held):
        for b in held[i + 1 :]:
            assert not a & b
    assert frozenset().union(*held) == frozenset(range(SHARDS))


async def test_three_replicas_split_the_shards_evenly_and_agree_on_holders(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    clock = FakeClock()
    group = [coordinator(kcp_client, kcp_namespace, f"r{i}", clock) for i in range(3)]
    logs = [acquired_log(c) for c in group]
    await rounds(group, 4, clock)
    assert_disjoint_cover(group)
    assert sorted(len(c.held()) for c in group) == [5, 5, 6]
    for c, log in zip(group, logs, strict=True):
        assert [m.identity for m in c.members()] == ["r0", "r1", "r2"]
        assert c.ready
        for shard in c.held():
            assert await lease_holder(kcp_client, kcp_namespace, shard) == c.identity
            # every replica names the holder, with the address from its membership Lease
            for other in group:
                holder = other.holder(shard)
                assert holder is not None and holder.identity == c.identity
                assert holder.address == f"https://{c.identity}.internal:8083"
        # the first replica held everything before the others joined, and gave most of it back
        assert set(c.held()) <= set(log)


async def test_fence_a_replica_that_missed_its_renewals_acts_on_nothing_until_it_renews(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    clock = FakeClock()
    a = coordinator(kcp_client, kcp_namespace, "a", clock)
    log = acquired_log(a)
    await rounds([a], 2, clock)
    assert a.held() == frozenset(range(SHARDS)) and sorted(log) == list(range(SHARDS))
    clock.advance(DEADLINE)  # no round for the renew deadline: paused
    assert a.held() == frozenset() and not a.holds(0) and not a.enter(0)
    assert a.holder(0) is None
    assert a.fenced(0)  # its requests wait (RequestGate.deferred) instead of being dropped
    log.clear()
    await a.tick()  # nobody took over: the renewal succeeds and work resumes ...
    assert a.held() == frozenset(range(SHARDS)) and not a.fenced(0)
    assert log == []  # ... with the waiting requests, no full re-enqueue of every shard


async def test_dead_replica_shards_are_taken_over_after_the_lease_duration_and_it_loses_them_on_resume(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    clock = FakeClock()
    group = [coordinator(kcp_client, kcp_namespace, f"r{i}", clock) for i in range(3)]
    await rounds(group, 4, clock)
    dead = group[2]
    dead_shards = dead.held()
    survivors = group[:2]
    logs = [acquired_log(c) for c in survivors]
    # survivors keep going; within the renew deadline the silent one still counts as holder
    await rounds(survivors, 2, clock)
    assert not (survivors[0].held() | survivors[1].held()) & dead_shards
    await rounds(survivors, 4, clock)  # past the lease duration: taken over
    assert dead.held() == frozenset()  # fenced on its own clock long before
    assert_disjoint_cover(survivors)
    assert sorted(len(c.held()) for c in survivors) == [8, 8]
    assert dead_shards <= set(logs[0]) | set(logs[1])
    for shard in dead_shards:
        assert await lease_holder(kcp_client, kcp_namespace, shard) in ("r0", "r1")
    # the paused one resumes: its stale view loses every shard, it never acts on one
    await dead.tick()
    assert dead.held() == frozenset()
    assert dead.metrics.handoffs.labels("lost")._value.get() == len(dead_shards)
    # and it rejoins: the next rounds rebalance to 5/5/6 again
    await rounds(group, 4, clock)
    assert_disjoint_cover(group)
    assert sorted(len(c.held()) for c in group) == [5, 5, 6]


async def test_hand_over_waits_for_in_flight_reconciles_then_the_taker_acquires(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    clock = FakeClock()
    a = coordinator(kcp_client, kcp_namespace, "a", clock)
    await rounds([a], 2, clock)
    busy = {shard: a.enter(shard) for shard in range(SHARDS)}
    assert all(busy.values())
    b = coordinator(kcp_client, kcp_namespace, "b", clock)
    b_log = acquired_log(b)
    await rounds([b, a, b], 1, clock)  # b joins; a sees b and starts draining b's share
    moving = frozenset(s for s, owner in enumerate(a.desired()) if owner == "b")
    assert len(moving) == SHARDS // 2
    assert not a.held() & moving  # stopped admitting at once
    assert not b.held()  # still held (draining) by a: b waits
    for shard in moving:
        assert not a.enter(shard)
        assert await lease_holder(kcp_client, kcp_namespace, shard) == "a"
    for shard in moving:
        a.leave(shard)
    await rounds([a, b], 1, clock)  # a releases, b acquires at once (empty holder)
    assert b.held() == moving and sorted(b_log) == sorted(moving)
    assert a.held() == frozenset(range(SHARDS)) - moving
    assert a.metrics.handoffs.labels("released")._value.get() == len(moving)


async def test_clean_stop_releases_everything_and_leaves(kcp_client: KubeClient, kcp_namespace: str) -> None:
    clock = FakeClock()
    a = coordinator(kcp_client, kcp_namespace, "a", clock)
    b = coordinator(kcp_client, kcp_namespace, "b", clock)
    await rounds([a, b], 3, clock)
    b_log = acquired_log(b)
    await a.leave_all()
    try:
        await kcp_client.get(LEASES, "klm-member-a", kcp_namespace)
        raise AssertionError("membership Lease still there")
    except NotFound:
        pass
    await rounds([b], 1, clock)  # no lease-duration wait: released Leases are free
    assert b.held() == frozenset(range(SHARDS))
    assert len(b_log) == SHARDS // 2
    assert [m.identity for m in b.members()] == ["b"] and b.ready


async def test_a_draining_shard_desired_again_is_taken_back_and_re_enqueued(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    clock = FakeClock()
    a = coordinator(kcp_client, kcp_namespace, "a", clock)
    await rounds([a], 2, clock)
    for shard in range(SHARDS):
        assert a.enter(shard)
    b = coordinator(kcp_client, kcp_namespace, "b", clock)
    await rounds([b, a], 1, clock)
    moving = frozenset(s for s, owner in enumerate(a.desired()) if owner == "b")
    assert moving and not a.held() & moving
    log = acquired_log(a)
    await rounds([a], 6, clock)  # b is gone before anything was released: its membership expires
    assert [m.identity for m in a.members()] == ["a"]
    assert a.held() == frozenset(range(SHARDS))
    assert sorted(log) == sorted(moving)  # requests dropped while draining come back in full


async def test_the_next_round_comes_early_when_a_lease_that_matters_expires(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    clock = FakeClock()
    group = [coordinator(kcp_client, kcp_namespace, f"r{i}", clock) for i in range(2)]
    await rounds(group, 3, clock)
    a = group[0]
    await a.tick()  # sees r1's last renewal
    assert a.next_round_in() == RETRY  # every other Lease was renewed just now: nothing sooner
    clock.advance(DURATION - 0.5)  # r1 stopped renewing: its Leases expire in about 0.5 s
    await a.tick()
    assert 0.05 <= a.next_round_in() < RETRY
    clock.advance(DURATION)  # long expired (a dead member's Lease stays): back to the retry period
    await a.tick()
    assert a.next_round_in() == RETRY


async def test_join_grace_replicas_started_together_split_the_shards_without_one_taking_all_first(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    clock = FakeClock()
    group = [coordinator(kcp_client, kcp_namespace, f"g{i}", clock) for i in range(3)]
    for c in group:
        c.join_grace = 2 * RETRY
    logs = [acquired_log(c) for c in group]
    await group[0].tick()  # the first to join sees only itself: takes nothing within the grace
    assert group[0].joined and not group[0].held()
    await rounds(group, 5, clock)
    assert_disjoint_cover(group)
    # nobody acquired a shard it then had to hand over
    assert sorted(len(log) for log in logs) == [5, 5, 6]


async def test_a_replica_joining_a_running_group_takes_its_shards_without_the_join_grace(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    clock = FakeClock()
    running = [coordinator(kcp_client, kcp_namespace, f"j{i}", clock) for i in range(2)]
    await rounds(running, 4, clock)
    assert_disjoint_cover(running)
    joiner = coordinator(kcp_client, kcp_namespace, "j2", clock)
    joiner.join_grace = 1_000 * RETRY  # far longer than this test's rounds: only the running group lifts it
    group = [*running, joiner]
    await rounds(group, 5, clock)
    assert_disjoint_cover(group)
    assert sorted(len(c.held()) for c in group) == [5, 5, 6]
    assert joiner.held()


class _SlowLeaseWrites:
    """The real client, but the next shard Lease update after ``slow()`` takes ``delay`` seconds on
    the fake clock (a renewal still in flight when the renew deadline passes); ``seen_fenced``
    records whether the coordinator called that shard fenced while the write was on its way."""

    def __init__(self, client: KubeClient, clock: FakeClock, delay: float) -> None:
        self._client = client
        self._clock = clock
        self._delay = delay
        self._armed = False
        self.coordinator: ShardCoordinator | None = None
        self.seen_fenced: dict[int, bool] = {}

    def __getattr__(self, name: str) -> object:
        return getattr(self._client, name)

    async def update(self, res: Resource, body: dict[str, Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        name = str(body["metadata"]["name"])
        if self._armed and name.startswith("klm-shard-") and self.coordinator is not None:
            self._armed = False
            self._clock.advance(self._delay)
            shard = int(name.rsplit("-", 1)[1])
            self.seen_fenced[shard] = self.coordinator.fenced(shard)
        return await self._client.update(res, body, *args, **kwargs)

    def slow(self) -> None:
        self._armed = True


async def test_requests_wait_while_a_renewal_in_flight_passes_the_deadline(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    """A renewal still on its way when the renew deadline passes: the shard is fenced meanwhile and
    its requests wait (``fenced``: the gate defers them) rather than being dropped, and once the
    renewal lands the shard is acted on again without a full re-enqueue (before: requests the gate
    dropped in that window were lost, 14 Kymas of a 5,000-Kyma restart were never reconciled)."""
    clock = FakeClock()
    client = _SlowLeaseWrites(kcp_client, clock, delay=DEADLINE)
    a = coordinator(client, kcp_namespace, "a", clock)  # type: ignore[arg-type]
    client.coordinator = a
    log = acquired_log(a)
    await rounds([a], 2, clock)
    assert a.held() == frozenset(range(SHARDS)) and sorted(log) == list(range(SHARDS))
    log.clear()
    client.slow()  # the first shard renewal of the next round takes a whole renew deadline
    await a.tick()
    assert list(client.seen_fenced.values()) == [True]  # fenced while its write was in flight
    clock.advance(RETRY)
    await a.tick()
    assert a.held() == frozenset(range(SHARDS)) and not any(a.fenced(s) for s in range(SHARDS))
    assert log == []


class _SlowLeaseLists:
    """The real client, but every list of the Leases takes ``delay`` seconds on the fake clock."""

    def __init__(self, client: KubeClient, clock: FakeClock, delay: float) -> None:
        self._client = client
        self._clock = clock
        self._delay = delay

    def __getattr__(self, name: str) -> object:
        return getattr(self._client, name)

    async def list(self, res: Resource, *args: Any, **kwargs: Any) -> Any:
        listed = await self._client.list(res, *args, **kwargs)
        if res == LEASES:
            self._clock.advance(self._delay)
        return listed


async def test_a_slow_round_is_followed_by_the_next_one_a_retry_period_after_it_started(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    """Rounds start every retry period: one that took 0.8 of it (a loaded API server, a busy main
    loop) is followed by the next 0.2 later, not a whole retry period after it ended, so two
    renewals of a shard stay a retry period apart (before: round time + retry period, which at
    start-up with shard-scoped caches went past the renew deadline)."""
    clock = FakeClock()
    a = coordinator(_SlowLeaseLists(kcp_client, clock, 0.8 * RETRY), kcp_namespace, "a", clock)  # type: ignore[arg-type]
    task = asyncio.create_task(a.run())
    try:
        await eventually(lambda: a.rounds == 1 and clock.pending == 1, what="the first round, then its sleep")
        clock.advance(0.25 * RETRY)
        await eventually(lambda: a.rounds == 2, what="the next round 0.2 retry periods after the first ended")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class _CountedLeaseWrites:
    """The real client; counts the Lease writes per Lease name, and fails the next ``fail(n)``
    writes of one Lease with a server error (the API server away for that long)."""

    def __init__(self, client: KubeClient, clock: FakeClock) -> None:
        self._client = client
        self._clock = clock
        self.writes: Counter[str] = Counter()
        self._failing: dict[str, int] = {}
        self._slow: dict[str, float] = {}

    def __getattr__(self, name: str) -> object:
        return getattr(self._client, name)

    def fail(self, lease: str, times: int) -> None:
        self._failing[lease] = times

    def slow(self, lease: str, seconds: float) -> None:
        """The next write of ``lease`` takes ``seconds`` on the fake clock."""
        self._slow[lease] = seconds

    async def _counted(self, body: dict[str, Any]) -> None:
        name = str(body["metadata"]["name"])
        self.writes[name] += 1
        self._clock.advance(self._slow.pop(name, 0.0))
        if self._failing.get(name, 0) > 0:
            self._failing[name] -= 1
            raise KubeError(503, "ServiceUnavailable", "injected: the API server is away")

    async def update(self, res: Resource, body: dict[str, Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        await self._counted(body)
        return await self._client.update(res, body, *args, **kwargs)

    async def create(self, res: Resource, body: dict[str, Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        await self._counted(body)
        return await self._client.create(res, body, *args, **kwargs)


async def test_held_leases_are_renewed_every_third_round_a_failed_renewal_every_round_until_done(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    """With the tests' 4/3/0.5 s timings a held Lease is renewed every 3rd round (1.5 s), not every
    round: each renewal is a write every replica's next list decodes (issue 28: most of a sharded
    replica's idle CPU). Half the renew deadline is left for retries: a renewal that fails is tried
    again every round, and the shard is held without a gap throughout."""
    retry = 0.5
    clock = FakeClock()
    client = _CountedLeaseWrites(kcp_client, clock)
    config = ShardingConfig(
        namespace=kcp_namespace,
        replica_id="a",
        address="https://a.internal:8083",
        shards=SHARDS,
        lease_duration=4.0,
        renew_deadline=3.0,
        retry_period=retry,
    )
    assert config.renew_rounds == 3
    a = ShardCoordinator(client, config, clock=clock)  # type: ignore[arg-type]
    everything = frozenset(range(SHARDS))

    async def round_() -> None:
        await a.tick()
        assert a.held() == everything  # never fenced, not even for a moment
        clock.advance(retry)

    await a.tick()  # acquires every shard (and joins) at t = 0
    clock.advance(retry)
    client.writes.clear()
    for _ in range(9):  # t = 0.5 .. 4.5: renewed at 1.5, 3.0 and 4.5
        await round_()
    assert client.writes == Counter({**{config.shard_lease(s): 3 for s in range(SHARDS)}, "klm-member-a": 3})

    client.writes.clear()
    client.fail(config.shard_lease(0), 3)  # due at 6.0: the renewal and the write over the list fail
    for _ in range(3):  # t = 5.0, 5.5, 6.0 (two failed writes), 6.5 (the third fails, then done)
        await round_()
    await round_()
    assert client.writes[config.shard_lease(0)] == 4
    assert client.writes[config.shard_lease(1)] == 1  # renewed at 6.0 only
    assert await lease_holder(kcp_client, kcp_namespace, 0) == "a"

    # a slow API server: the round's slowest Lease write is remembered (renewals come earlier
    # while it is high, ``ShardingConfig.renewal_due``), a fifth less per round after it
    assert a.write_latency == 0.0  # the fake clock stood still during every write so far
    client.slow(config.shard_lease(1), 0.6)  # t = 7.0: nothing due, no write
    await round_()
    assert a.write_latency == 0.0
    await round_()  # t = 7.5: shard 1 is due, its write takes 0.6 s
    assert a.write_latency == pytest.approx(0.6)
    await round_()
    assert a.write_latency == pytest.approx(0.48)


class _FailingMembership:
    """The real client, but while ``failing`` every write of ``member``'s membership Lease fails
    (an API server that answers the shard Lease renewals but times out on this one write)."""

    def __init__(self, client: KubeClient, member: str) -> None:
        self._client = client
        self._member = member
        self.failing = False

    def __getattr__(self, name: str) -> object:
        return getattr(self._client, name)

    def _refuse(self, body: dict[str, Any]) -> None:
        if self.failing and body["metadata"]["name"] == self._member:
            raise KubeError(504, "Timeout", "the membership write timed out")

    async def update(self, res: Resource, body: dict[str, Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        self._refuse(body)
        return await self._client.update(res, body, *args, **kwargs)

    async def create(self, res: Resource, body: dict[str, Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        self._refuse(body)
        return await self._client.create(res, body, *args, **kwargs)


async def test_a_late_membership_renewal_hands_nothing_over_until_the_others_see_it_expired(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    """A replica whose own membership renewal is late, but not yet a lease duration late, is still
    a member in everybody else's eyes: it keeps its shards (before: it left its own share after the
    renew deadline, released shards nobody else was meant to take, and took them back once its
    membership renewal landed, a needless hand-off with a re-list of the shard's caches). Once the
    others see its membership expired, its view agrees with theirs: it hands its shards over."""
    clock = FakeClock()
    client = _FailingMembership(kcp_client, "klm-member-r0")
    r0 = coordinator(client, kcp_namespace, "r0", clock)  # type: ignore[arg-type]
    group = [r0, *(coordinator(kcp_client, kcp_namespace, f"r{i}", clock) for i in (1, 2))]
    await rounds(group, 4, clock)
    assert_disjoint_cover(group)
    mine = r0.held()
    assert len(mine) in (5, 6)
    released = r0.metrics.handoffs.labels("released")
    handed_before = released._value.get()  # its first round took every shard, then handed some on
    client.failing = True
    await rounds(group, int(DURATION) - 1, clock)  # late by more than the renew deadline
    assert r0.held() == mine and r0.desired() == group[1].desired()
    assert released._value.get() == handed_before
    client.failing = False
    await rounds(group, 2, clock)
    assert r0.held() == mine and released._value.get() == handed_before
    client.failing = True
    await rounds(group, int(DURATION) + 4, clock)  # expired for everybody: handed over, taken
    assert [m.identity for m in group[1].members()] == ["r1", "r2"]
    assert r0.desired() == group[1].desired()
    assert r0.held() == frozenset()
    assert released._value.get() == handed_before + len(mine)
    assert_disjoint_cover(group[1:])
