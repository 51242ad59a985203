"""Shard assignment (pure) and the controller's per-request gate, on a fake clock."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from kyma_operator.runtime import Controller, FakeClock, Request, Result, settle
from kyma_operator.runtime.shardcount import announced_shards
from kyma_operator.runtime.sharding import ShardingConfig, assign
from kyma_operator.runtime.shardmap import SHARDS_ANNOTATION, parse_shard_label, shard_label_value


@pytest.mark.parametrize("members", [1, 2, 3, 4, 5, 7, 16, 20])
@pytest.mark.parametrize("shards", [1, 16, 17, 64])
def test_every_shard_has_one_owner_and_shares_differ_by_at_most_one(shards: int, members: int) -> None:
    ids = [f"r{i}" for i in range(members)]
    owners = assign(shards, ids)
    assert all(owner in ids for owner in owners)
    counts = Counter(owners)
    share = [counts.get(m, 0) for m in ids]
    assert sum(share) == shards
    assert max(share) - min(share) <= 1


def test_assignment_depends_only_on_the_member_set() -> None:
    assert assign(16, ["b", "a", "c"]) == assign(16, ["c", "b", "a", "a"])


def test_a_member_leaving_moves_little_besides_its_own_shards() -> None:
    """Rendezvous order: of the shards the survivors held, most stay where they were."""
    before = assign(64, ["r0", "r1", "r2", "r3"])
    after = assign(64, ["r0", "r1", "r2"])
    kept = sum(1 for b, a in zip(before, after, strict=True) if b != "r3" and a == b)
    survivors_had = sum(1 for b in before if b != "r3")
    assert kept >= survivors_had * 0.75
    assert all(owner != "r3" for owner in after)


def test_no_members_no_owners() -> None:
    assert assign(4, []) == [None, None, None, None]


def test_config_rejects_unsafe_timings_and_bad_ids() -> None:
    with pytest.raises(ValueError, match="renew_deadline"):
        ShardingConfig(namespace="ns", replica_id="r1", lease_duration=3, renew_deadline=3)
    with pytest.raises(ValueError, match="DNS"):
        ShardingConfig(namespace="ns", replica_id="R_1")
    cfg = ShardingConfig(namespace="ns", replica_id="r1", lease_prefix="klm")
    assert (cfg.member_lease("r1"), cfg.shard_lease(3)) == ("klm-member-r1", "klm-shard-3")
    assert cfg.count_lease() == "klm-shards"  # not a "klm-shard-<n>" name


@pytest.mark.parametrize(
    ("timings", "every"),
    [
        ((4, 3, 0.5), 3),
        ((10, 7, 1.5), 2),
        ((60, 40, 5), 4),
        ((15, 10, 2), 2),
        ((4, 3, 1), 1),
        ((3, 2, 1.5), 1),
    ],
)
def test_a_held_lease_is_renewed_every_few_rounds_within_half_the_renew_deadline(
    timings: tuple[float, float, float], every: int
) -> None:
    duration, deadline, retry = timings
    cfg = ShardingConfig(
        namespace="ns", replica_id="r1", lease_duration=duration, renew_deadline=deadline, retry_period=retry
    )
    assert cfg.renew_rounds == every
    assert every == 1 or every * retry <= deadline / 2  # the other half of the deadline is for retries
    # rounds start every retry period; a renewal's write starts a little after its round did, so the
    # round ``every`` periods later sees an age just under ``every`` periods, and is due
    assert cfg.renewal_due(every * retry - 0.01)
    assert not cfg.renewal_due((every - 1) * retry - 0.01)
    assert cfg.renewal_due(deadline)  # late (a failed renewal): every round until one succeeds


def test_slow_lease_writes_bring_the_renewals_forward_down_to_every_round() -> None:
    cfg = ShardingConfig(
        namespace="ns", replica_id="r1", lease_duration=10, renew_deadline=7, retry_period=1.5
    )
    assert not cfg.renewal_due(1.49)  # fast writes: every 2nd round
    assert not cfg.renewal_due(1.49, latency=1.0)  # 3.5 s of the deadline left still covers 1 s
    assert cfg.renewal_due(1.49, latency=2.5)
    assert cfg.renewal_due(0.0, latency=5.0)  # renewals answered in 5 s: every round, as before


def test_announced_shard_counts_are_positive_decimals_else_unknown() -> None:
    def lease(annotations: dict[str, object] | None) -> dict[str, object]:
        return {"metadata": {"name": "klm-member-r1", "annotations": annotations}}

    assert announced_shards(lease({SHARDS_ANNOTATION: "16"})) == 16
    for bad in ("0", "-3", "16x", "", 16, None):
        assert announced_shards(lease({SHARDS_ANNOTATION: bad})) is None, bad
    assert announced_shards(lease(None)) is None
    assert announced_shards({}) is None


def test_shard_label_round_trip() -> None:
    assert parse_shard_label(shard_label_value(5), 16) == 5
    assert parse_shard_label("16", 16) is None
    assert parse_shard_label("x", 16) is None
    assert parse_shard_label(None, 16) is None


class EvenGate:
    """Admits requests named with an even number; counts what is in flight."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.admitted: list[Request] = []

    def admit(self, request: Request) -> int | None:
        shard = int(request.name) % 2
        if shard:
            return None
        self.in_flight += 1
        self.admitted.append(request)
        return shard

    def release(self, ticket: int) -> None:
        self.in_flight -= 1

    def deferred(self, request: Request) -> bool:
        return False


class Recorder:
    def __init__(self) -> None:
        self.calls: list[Request] = []
        self.release = asyncio.Event()
        self.gate: EvenGate | None = None
        self.in_flight_seen: list[int] = []

    async def reconcile(self, request: Request) -> Result:
        self.calls.append(request)
        assert self.gate is not None
        self.in_flight_seen.append(self.gate.in_flight)
        await self.release.wait()
        return Result(requeue_after=60)


async def test_gate_drops_requests_of_shards_not_held_and_counts_admitted_ones_in_flight() -> None:
    clock = FakeClock()
    reconciler = Recorder()
    gate = EvenGate()
    reconciler.gate = gate
    controller = Controller("kyma", reconciler, workers=4, clock=clock)
    for i in range(6):
        controller.enqueue(Request("ns", str(i)), "test")
    task = asyncio.create_task(controller.run(request_gate=gate))
    await settle(50)
    assert sorted(r.name for r in reconciler.calls) == ["0", "2", "4"]
    assert gate.in_flight == 3 and reconciler.in_flight_seen == [1, 2, 3]
    assert controller.dropped == 3
    assert len(controller.triggers) == 0  # reasons of dropped requests are not kept
    reconciler.release.set()
    await settle(50)
    assert gate.in_flight == 0
    # dropped requests are forgotten: nothing of theirs comes back, admitted ones wait for their requeue
    clock.advance(61)
    await settle(50)
    assert sorted(r.name for r in reconciler.calls) == ["0", "0", "2", "2", "4", "4"]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
