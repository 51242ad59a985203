"""What the sharding tests read from a fleet: a settled split, who held a shard when, and
overlapping reconciles.

Why: they judge real processes (a stranger's reconcile, a split still moving), so a reader that
says "held" or "settled" too readily would hide the very races those tests exist to catch.
"""

from __future__ import annotations

from collections import Counter

from kyma_operator.runtime.sharding import assign
from tests.integration.sharding.fleet import SHARDS, Holdings, Line, overlaps, settled


def shard(event: str, n: int, replica: str, at: int) -> Line:
    return Line(event, "shard", str(n), replica, at)


def test_holdings_span_from_acquired_to_released_and_to_the_end_when_never_released() -> None:
    held = Holdings.of(
        [
            shard("acquired", 3, "r0", 10),
            Line("start", "kyma", "ns/kyma-1", "r0", 12),
            shard("acquired", 3, "r0", 15),  # renewed again after a fenced gap: one span
            shard("released", 3, "r0", 20),
            shard("acquired", 3, "r1", 21),
            shard("acquired", 4, "r2", 5),  # killed holding it: no released line
        ]
    )
    end = float("inf")
    assert held.spans == {("r0", 3): [(10, 20)], ("r1", 3): [(21, end)], ("r2", 4): [(5, end)]}
    assert [held.held("r0", 3, at) for at in (9, 10, 19, 20)] == [False, True, True, False]
    assert not held.held("r1", 3, 20) and held.held("r1", 3, 10**12)
    assert not held.held("r0", 4, 10) and not held.held("r2", 3, 30)


def test_holdings_count_each_span_of_a_shard_that_comes_back() -> None:
    held = Holdings.of(
        [shard("acquired", 1, "r0", 1), shard("released", 1, "r0", 2), shard("acquired", 1, "r0", 5)]
    )
    assert held.spans == {("r0", 1): [(1, 2), (5, float("inf"))]}
    assert [held.held("r0", 1, at) for at in (1, 3, 5)] == [True, False, True]


def test_settled_only_when_every_shard_is_with_its_assigned_owner() -> None:
    replicas = ("r0", "r1", "r2")
    final = {shard: str(owner) for shard, owner in enumerate(assign(SHARDS, replicas))}
    assert settled(final, replicas)
    # counts still even (6/5/5) but two shards swapped: a rebalance under way, not settled
    a, b = next((s, t) for s in final for t in final if final[s] != final[t])
    swapped = {**final, a: final[b], b: final[a]}
    assert Counter(swapped.values()) == Counter(final.values())
    assert not settled(swapped, replicas)
    assert not settled({s: h for s, h in final.items() if s != 0}, replicas)  # one shard free
    assert settled(dict.fromkeys(range(SHARDS), "r0"), ("r0",))


def test_overlaps_finds_two_replicas_reconciling_one_kyma_at_once_and_nothing_else() -> None:
    def kyma(event: str, subject: str, replica: str, at: int) -> Line:
        return Line(event, "kyma", subject, replica, at)

    apart = [kyma("start", "ns/a", "r0", 1), kyma("end", "ns/a", "r0", 5), kyma("start", "ns/a", "r1", 6)]
    assert overlaps(apart) == []
    assert overlaps([kyma("start", "ns/b", "r0", 1), kyma("start", "ns/b", "r1", 3)]) == [
        "ns/b: r0 [1, inf] and r1 [3, inf]"
    ]  # open intervals run to the end
    crossing = [kyma("start", "ns/c", "r0", 1), kyma("start", "ns/c", "r1", 3), kyma("end", "ns/c", "r0", 4)]
    assert overlaps(crossing) == ["ns/c: r0 [1, 4] and r1 [3, inf]"]
