"""WorkQueue's two lanes: events are handed out before bulk work (lists, due delayed adds).

A seeded model test holds the queue to a plain reference (two ordered lists, moved by hand) over
thousands of random operations, so the shortcuts of the real queue (bulk entries left behind and
skipped, counters instead of scans) are checked against the plain path.
"""

from __future__ import annotations

import asyncio
import random

from prometheus_client import CollectorRegistry

from kyma_operator.runtime import Controller, FakeClock, Request, Result, RuntimeMetrics, WorkQueue, settle
from kyma_operator.runtime.bulk import adding_in_bulk, bulk_adds
from kyma_operator.runtime.queue import EVENTS_PER_BULK


def make_queue(clock: FakeClock | None = None) -> WorkQueue[str]:
    return WorkQueue("lanes", clock=clock or FakeClock())


def drain(queue: WorkQueue[str]) -> list[str]:
    taken = []
    while (key := queue.get_nowait()) is not None:
        taken.append(key)
        queue.done(key)
    return taken


async def test_events_are_handed_out_before_bulk_work_each_lane_in_order() -> None:
    queue = make_queue()
    for key in ("b1", "b2", "b3"):
        queue.add(key, low=True)
    queue.add("e1")
    queue.add("b4", low=True)
    queue.add("e2")
    assert len(queue) == 6
    assert queue.bulk == 4
    assert drain(queue) == ["e1", "e2", "b1", "b2", "b3", "b4"]
    assert len(queue) == 0 and queue.bulk == 0


async def test_an_event_storm_delays_bulk_work_but_cannot_starve_it() -> None:
    queue = make_queue()
    queue.add("bulk-0", low=True)
    queue.add("bulk-1", low=True)
    events = [f"event-{i}" for i in range(EVENTS_PER_BULK + 8)]
    for key in events:
        queue.add(key)
    assert drain(queue) == [
        *events[:EVENTS_PER_BULK],
        "bulk-0",
        *events[EVENTS_PER_BULK:],
        "bulk-1",
    ]
    queue.add("event")  # no bulk work waiting: nothing was counted meanwhile
    queue.add("bulk", low=True)
    assert drain(queue) == ["event", "bulk"]


async def test_an_event_moves_a_queued_bulk_key_ahead_and_it_is_handed_out_once() -> None:
    queue = make_queue()
    for key in ("b1", "b2", "b3"):
        queue.add(key, low=True)
    queue.add("b3")
    assert len(queue) == 3, "moved, not added twice"
    assert queue.bulk == 2
    assert drain(queue) == ["b3", "b1", "b2"]
    queue.add("b3", low=True)  # its old bulk entry was skipped and dropped: one live entry now
    assert drain(queue) == ["b3"]


async def test_a_bulk_add_of_a_key_queued_for_an_event_leaves_it_in_the_event_lane() -> None:
    queue = make_queue()
    queue.add("b1", low=True)
    queue.add("e1")
    queue.add("e1", low=True)
    assert queue.bulk == 1
    assert drain(queue) == ["e1", "b1"]


async def test_a_key_being_processed_keeps_the_lane_of_its_readd() -> None:
    queue = make_queue()
    queue.add("k", low=True)
    queue.add("b", low=True)
    key = await queue.get()
    assert key == "k"
    queue.add("k", low=True)
    queue.add("k")  # an event while it is processed: after done it goes ahead of "b"
    assert queue.get_nowait() == "b", "k is still being processed"
    queue.done("b")
    queue.done("k")
    assert drain(queue) == ["k"]


async def test_a_bulk_readd_during_processing_waits_behind_events() -> None:
    queue = make_queue()
    queue.add("k")
    assert await queue.get() == "k"
    queue.add("k", low=True)
    queue.add("e")
    queue.done("k")
    assert drain(queue) == ["e", "k"]


async def test_delayed_adds_fall_due_into_the_bulk_lane() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add_after("resync", 5.0)
    queue.add_rate_limited("retry")
    clock.advance(10.0)
    await settle()
    queue.add("event")
    assert queue.bulk == 2
    assert drain(queue)[0] == "event"
    queue.add_after("now", 0)
    assert queue.bulk == 1, "a delayed add of no delay is bulk work too"


async def test_bulk_depth_and_moves_are_reported() -> None:
    registry = CollectorRegistry()
    queue = make_queue()
    queue.set_metrics(RuntimeMetrics(registry).queue("lanes"))
    for key in ("a", "b", "c"):
        queue.add(key, low=True)
    queue.add("c")

    def sample(name: str) -> float | None:
        return registry.get_sample_value(name, {"controller": "lanes", "name": "lanes"})

    assert sample("workqueue_depth") == 3
    assert sample("kyma_operator_workqueue_bulk_depth") == 2
    assert sample("kyma_operator_workqueue_promotions_total") == 1
    drain(queue)
    assert sample("workqueue_depth") == 0
    assert sample("kyma_operator_workqueue_bulk_depth") == 0


class Model:
    """The plain path: two ordered lists; a move takes the key out of the bulk list; one bulk key
    after ``EVENTS_PER_BULK`` events in a row while bulk work waits."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.bulk: list[str] = []
        self.processing: set[str] = set()
        self.readd: dict[str, bool] = {}  # key being processed -> its re-add is bulk
        self.in_a_row = 0

    def add(self, key: str, low: bool) -> None:
        if key in self.processing:
            if key in self.readd:
                self.readd[key] = self.readd[key] and low
            else:
                self.readd[key] = low
            return
        if key in self.events:
            return
        if key in self.bulk:
            if not low:
                self.bulk.remove(key)
                self.events.append(key)
            return
        (self.bulk if low else self.events).append(key)

    def take(self) -> str | None:
        if self.events and not (self.bulk and self.in_a_row >= EVENTS_PER_BULK):
            key = self.events.pop(0)
            self.in_a_row = self.in_a_row + 1 if self.bulk else 0
        elif self.bulk:
            key = self.bulk.pop(0)
            self.in_a_row = 0
        else:
            return None
        self.processing.add(key)
        return key

    def done(self, key: str) -> None:
        self.processing.discard(key)
        if key in self.readd:
            low = self.readd.pop(key)
            (self.bulk if low else self.events).append(key)


async def test_the_queue_follows_the_plain_two_list_model_over_random_operations() -> None:
    rng = random.Random(20261129)
    keys = [f"k{i}" for i in range(3 * EVENTS_PER_BULK)]  # enough for long runs of events
    for _ in range(40):
        queue = make_queue()
        model = Model()
        for _ in range(400):
            roll = rng.random()
            if roll < 0.55:
                key, low = rng.choice(keys), rng.random() < 0.6
                queue.add(key, low=low)
                model.add(key, low)
            elif roll < 0.8:
                assert queue.get_nowait() == model.take()
            elif model.processing:
                key = rng.choice(sorted(model.processing))
                queue.done(key)
                model.done(key)
            assert len(queue) == len(model.events) + len(model.bulk)
            assert queue.bulk == len(model.bulk)
            assert queue.processing == frozenset(model.processing)
        for key in sorted(model.processing):
            queue.done(key)
            model.done(key)
        while (expected := model.take()) is not None:
            assert queue.get_nowait() == expected
            queue.done(expected)
            model.done(expected)
        assert queue.get_nowait() is None


async def test_the_controllers_enqueuer_adds_bulk_work_inside_a_lists_dispatch_and_for_delays() -> None:
    class NoWorker:
        async def reconcile(self, request: Request) -> Result:
            raise AssertionError("no worker runs in this test")

    controller = Controller("lanes", NoWorker(), clock=FakeClock())
    enqueuer, queue = controller.enqueuer, controller.queue
    with bulk_adds():
        enqueuer.add(Request("ns", "listed"), "listed")
    enqueuer.add_after(Request("ns", "requeued"), 0, "no delay")
    enqueuer.add(Request("ns", "changed"), "event")
    assert not adding_in_bulk(), "the mark ends with its block"
    assert (len(queue), queue.bulk) == (3, 2)
    taken = []
    while (request := queue.get_nowait()) is not None:
        taken.append(request.name)
        queue.done(request)
    assert taken == ["changed", "listed", "requeued"]


async def test_a_delayed_event_add_falls_due_into_the_event_lane() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("listed", low=True)
    queue.add_after("put back", 1.0, low=False)
    queue.add_after("put back", 5.0)  # a later bulk add of the same key does not demote it
    clock.advance(1.0)
    await settle()
    assert drain(queue) == ["put back", "listed"]


async def test_a_taken_key_knows_its_lane_until_done() -> None:
    queue = make_queue()
    queue.add("bulk", low=True)
    queue.add("event")
    first, second = queue.get_nowait(), queue.get_nowait()
    assert (first, second) == ("event", "bulk")
    assert queue.taken_as_event("event") and not queue.taken_as_event("bulk")
    queue.done("event")
    assert not queue.taken_as_event("event")


class Deferring:
    """A shard gate that holds every request back once (a late renewal), then admits it."""

    def __init__(self) -> None:
        self.held: set[Request] = set()

    def admit(self, request: Request) -> int | None:
        return 0 if request in self.held else None

    def deferred(self, request: Request) -> bool:
        if request in self.held:
            return False
        self.held.add(request)
        return True

    def release(self, ticket: int) -> None:
        pass


async def test_a_request_put_back_for_a_moment_keeps_its_lane() -> None:
    clock = FakeClock()
    order: list[str] = []

    class Recording:
        async def reconcile(self, request: Request) -> Result:
            order.append(request.name)
            return Result()

    controller = Controller("lanes", Recording(), clock=clock)  # gate_retry: 1 s
    with bulk_adds():
        for name in ("listed-0", "listed-1", "listed-2"):
            controller.enqueue(Request("ns", name), "listed")
    task = asyncio.create_task(controller.run(request_gate=Deferring()))
    await settle(50)
    controller.enqueue(Request("ns", "changed"), "event")  # put back last, due at the same moment
    await settle(50)
    assert order == [] and controller.gated == 4, "each held back once"
    clock.advance(1.0)
    await settle(50)
    assert order == ["changed", "listed-0", "listed-1", "listed-2"]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
