"""``kyma_wire.deadlines``: items expire once, never before their deadline, in deadline order;
a cleared deadline never fires, a moved one fires at its new time. Waits poll with a deadline; what
is asserted is the state (who fired, at what loop time), never how fast."""

from __future__ import annotations

import asyncio
import collections

from kyma_wire.deadlines import Deadlines

_DEADLINE = 10.0


class Item:
    def __init__(self, name: str, fired: list[Item]) -> None:
        self.name = name
        self.deadline: float | None = None
        self.bucket: int | None = None
        self.fired_at: float | None = None
        self.expected: float | None = None
        self._fired = fired

    def expired(self) -> None:
        assert self.fired_at is None, f"{self.name} expired twice"
        self.fired_at = asyncio.get_running_loop().time()
        self._fired.append(self)


def arm(deadlines: Deadlines, item: Item, seconds: float) -> None:
    deadlines.set(item, seconds)
    item.expected = item.deadline


async def until(check: object, what: str) -> None:
    assert callable(check)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _DEADLINE
    while not check():
        assert loop.time() < deadline, f"never: {what}"
        await asyncio.sleep(0.01)


async def test_items_expire_once_in_deadline_order_never_early() -> None:
    deadlines, fired = Deadlines(resolution=0.01), list[Item]()
    items = [Item(name, fired) for name in "abc"]
    for item, seconds in zip(items, (0.12, 0.02, 0.07), strict=True):
        arm(deadlines, item, seconds)
    await until(lambda: len(fired) == 3, "all expired")
    assert [item.name for item in fired] == ["b", "c", "a"]
    for item in items:
        assert item.fired_at is not None and item.expected is not None
        assert item.fired_at >= item.expected
        assert item.deadline is None and item.bucket is None
    assert len(deadlines) == 0
    deadlines.close()


async def test_a_cleared_deadline_never_fires() -> None:
    deadlines, fired = Deadlines(resolution=0.01), list[Item]()
    cleared, later = Item("cleared", fired), Item("later", fired)
    arm(deadlines, cleared, 0.02)
    deadlines.clear(cleared)
    arm(deadlines, later, 0.05)
    await until(lambda: later.fired_at is not None, "the later item expired")
    assert fired == [later]
    deadlines.close()


async def test_a_deadline_moved_later_is_refiled_not_fired() -> None:
    deadlines, fired = Deadlines(resolution=0.01), list[Item]()
    moved, marker = Item("moved", fired), Item("marker", fired)
    arm(deadlines, moved, 0.02)
    arm(deadlines, moved, 3600)  # stays filed in the early bucket, re-filed when that comes due
    arm(deadlines, marker, 0.05)
    await until(lambda: marker.fired_at is not None, "the marker expired")
    assert fired == [marker]  # the moved item's first bucket came and went
    assert moved.deadline is not None and moved.bucket is not None
    assert moved.bucket * 0.01 >= moved.deadline  # re-filed at its new time
    assert len(deadlines) == 1
    deadlines.close()


async def test_a_deadline_moved_earlier_fires_at_its_new_time() -> None:
    deadlines, fired = Deadlines(resolution=0.01), list[Item]()
    moved = Item("moved", fired)
    arm(deadlines, moved, 3600)
    arm(deadlines, moved, 0.02)  # filed again, earlier; the hour's entry is stale
    await until(lambda: moved.fired_at is not None, "the moved item expired")
    assert fired == [moved]
    assert moved.fired_at is not None and moved.expected is not None
    assert moved.fired_at >= moved.expected
    assert len(deadlines) == 0  # it left the hour's bucket when it moved
    deadlines.close()


async def test_a_cleared_item_is_not_referenced_any_more() -> None:
    deadlines, fired = Deadlines(resolution=0.01), list[Item]()
    items = [Item(str(n), fired) for n in range(3)]
    for item in items:
        arm(deadlines, item, 3600)
    for item in items[:2]:
        deadlines.clear(item)
    assert len(deadlines) == 1 and items[0].bucket is None  # a closed connection is not kept alive
    deadlines.close()


async def test_many_due_at_once_all_expire_a_bounded_number_per_turn() -> None:
    deadlines, fired = Deadlines(resolution=0.01), list[Item]()
    turn = [0]
    per_turn: collections.Counter[int] = collections.Counter()

    class Counted(Item):
        def expired(self) -> None:
            super().expired()
            per_turn[turn[0]] += 1

    items = [Counted(str(n), fired) for n in range(200)]
    for item in items:
        arm(deadlines, item, 0.02)

    async def count_turns() -> None:
        while len(fired) < len(items):
            turn[0] += 1
            await asyncio.sleep(0)

    counter = asyncio.create_task(count_turns())
    await until(lambda: len(fired) == len(items), "all expired")
    await counter
    assert sorted(fired, key=lambda item: int(item.name)) == items  # each once
    assert max(per_turn.values()) <= 32 and len(per_turn) >= len(items) // 32  # other work in between
    assert len(deadlines) == 0
    deadlines.close()
