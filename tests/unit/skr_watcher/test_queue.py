"""The coalescing send queue: one entry per object, latest wins, DELETE sticks, overflow drops oldest."""

from __future__ import annotations

import asyncio

import pytest

from kyma_wire.events import AgentEvent, GroupVersionKind, ObjectKey, Operation
from skr_watcher.queue import SendQueue
from skr_watcher.resync import resync_event
from tests.unit.skr_watcher.fakes import WALL_START

GVK = GroupVersionKind(group="operator.kyma-project.io", version="v1beta2", kind="Kyma")


def event(
    name: str, operation: Operation = Operation.UPDATE, namespace: str = "ns", marker: int = 0
) -> AgentEvent:
    return AgentEvent(
        watched=ObjectKey(namespace=namespace, name=name),
        watched_gvk=GVK,
        operation=operation,
        owner=ObjectKey(namespace="m", name=f"v{marker}") if marker else None,
        observed_at=WALL_START,
    )


def drain(queue: SendQueue) -> list[AgentEvent]:
    out = []
    while (entry := queue.get_nowait()) is not None:
        out.append(entry.event)
    return out


def test_burst_for_one_object_becomes_one_entry_with_latest_content() -> None:
    queue = SendQueue(100)
    results = [queue.put("lm", event("a", marker=i), now=float(i)) for i in range(1, 10_001)]
    assert [r.coalesced for r in results].count(False) == 1
    assert len(queue) == 1
    entry = queue.get_nowait()
    assert entry is not None
    assert entry.coalesced == 9_999
    assert entry.enqueued_at == 1.0
    assert entry.event.owner == ObjectKey(namespace="m", name="v10000")


def test_coalesced_entry_keeps_its_place_in_line() -> None:
    queue = SendQueue(10)
    queue.put("lm", event("a"), 0)
    queue.put("lm", event("b"), 0)
    queue.put("lm", event("a", marker=2), 0)
    assert [(e.watched.name, e.owner) for e in drain(queue)] == [
        ("a", ObjectKey(namespace="m", name="v2")),
        ("b", None),
    ]


def test_keys_separate_managers_kinds_and_namespaces() -> None:
    queue = SendQueue(10)
    queue.put("lm", event("a"), 0)
    queue.put("other", event("a"), 0)
    queue.put("lm", event("a", namespace="ns2"), 0)
    queue.put(
        "lm",
        event("a").model_copy(update={"watched_gvk": GroupVersionKind(version="v1", kind="ConfigMap")}),
        0,
    )
    assert len(queue) == 4


def test_create_then_update_keeps_latest() -> None:
    queue = SendQueue(10)
    queue.put("lm", event("a", Operation.CREATE), 0)
    assert queue.put("lm", event("a", Operation.UPDATE), 0).coalesced
    assert [e.operation for e in drain(queue)] == [Operation.UPDATE]


def test_update_then_delete_becomes_delete() -> None:
    queue = SendQueue(10)
    queue.put("lm", event("a", Operation.UPDATE), 0)
    queue.put("lm", event("a", Operation.DELETE), 0)
    assert [e.operation for e in drain(queue)] == [Operation.DELETE]


def test_delete_is_never_overwritten_by_a_recreate() -> None:
    queue = SendQueue(10)
    queue.put("lm", event("a", Operation.DELETE), 0)
    assert not queue.put("lm", event("a", Operation.CREATE), 0).coalesced
    assert queue.put("lm", event("a", Operation.UPDATE), 0).coalesced
    assert queue.put("lm", event("a", Operation.UPDATE), 0).coalesced
    assert [e.operation for e in drain(queue)] == [Operation.DELETE, Operation.UPDATE]


def test_resync_is_not_downgraded_but_delete_is_kept() -> None:
    queue = SendQueue(10)
    resync = resync_event(WALL_START)
    kyma = resync.model_copy(update={"operation": Operation.UPDATE})
    queue.put("lm", resync, 0)
    assert queue.put("lm", kyma, 0).coalesced
    assert [e.operation for e in drain(queue)] == [Operation.RESYNC]
    queue.put("lm", kyma, 0)
    assert queue.put("lm", resync, 0).coalesced
    assert [e.operation for e in drain(queue)] == [Operation.RESYNC]


def test_overflow_drops_the_oldest_entry() -> None:
    queue = SendQueue(3)
    for name in "abc":
        assert queue.put("lm", event(name), 0).dropped is None
    result = queue.put("lm", event("d"), 0)
    assert result.dropped is not None and result.dropped.event.watched.name == "a"
    assert len(queue) == 3
    # the dropped key is gone: a new event for it is a new entry, not a coalesce into a ghost
    assert not queue.put("lm", event("a"), 0).coalesced
    assert [e.watched.name for e in drain(queue)] == ["c", "d", "a"]


def test_coalescing_into_a_full_queue_drops_nothing() -> None:
    queue = SendQueue(2)
    queue.put("lm", event("a"), 0)
    queue.put("lm", event("b"), 0)
    assert queue.put("lm", event("a", marker=1), 0).dropped is None
    assert len(queue) == 2


def test_superseded_only_by_a_pending_entry_that_covers_it() -> None:
    queue = SendQueue(10)
    queue.put("lm", event("a", Operation.UPDATE), 0)
    in_flight = queue.get_nowait()
    assert in_flight is not None
    assert not queue.is_superseded(in_flight)
    queue.put("lm", event("a", Operation.UPDATE), 0)
    assert queue.is_superseded(in_flight)
    queue.put("lm", event("d", Operation.DELETE), 0)
    deleting = queue.get_nowait()
    deleting = queue.get_nowait()
    assert deleting is not None and deleting.event.operation is Operation.DELETE
    queue.put("lm", event("d", Operation.CREATE), 0)
    assert not queue.is_superseded(deleting)


async def test_get_waits_for_put_and_returns_none_after_close() -> None:
    queue = SendQueue(10)
    getter = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    assert not getter.done()
    queue.put("lm", event("a"), 0)
    entry = await getter
    assert entry is not None and entry.event.watched.name == "a"
    queue.put("lm", event("b"), 0)
    queue.close()
    assert (await queue.get()) is not None
    assert (await queue.get()) is None


async def test_close_wakes_all_waiters() -> None:
    queue = SendQueue(10)
    waiters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await asyncio.sleep(0)
    queue.close()
    assert await asyncio.gather(*waiters) == [None, None, None]


def test_invalid_size() -> None:
    with pytest.raises(ValueError, match="maxsize"):
        SendQueue(0)


def test_an_entry_taken_later_supersedes_an_older_one_in_flight() -> None:
    queue = SendQueue(10)
    queue.put("lm", event("a", marker=1), 0)
    first = queue.get_nowait()
    queue.put("lm", event("a", marker=2), 0)
    second = queue.get_nowait()
    assert first is not None and second is not None
    assert queue.is_superseded(first)
    assert not queue.is_superseded(second)
    queue.done(second)
    assert not queue.is_superseded(first)  # the newer one is finished; the older is a harmless hint
    queue.done(first)


def test_a_dropped_entry_is_not_counted_as_taken() -> None:
    queue = SendQueue(1)
    queue.put("lm", event("a", marker=1), 0)
    assert queue.put("lm", event("b"), 0).dropped is not None
    queue.put("lm", event("a", marker=2), 0)  # "b" dropped, "a" queued again
    queue.put("lm", event("c"), 0)
    taken = queue.get_nowait()
    assert taken is not None and taken.event.watched.name == "c"
    assert not queue.is_superseded(taken)


@pytest.mark.parametrize(
    "original",
    [
        event("a"),
        event("b", Operation.DELETE, namespace="", marker=3),
        AgentEvent(watched=ObjectKey(name="plain"), watched_gvk=GVK),  # no operation, owner or time
        resync_event(WALL_START),
    ],
)
def test_an_entry_keeps_fields_not_the_model_and_rebuilds_the_same_wire_body(original: AgentEvent) -> None:
    queue = SendQueue(10)
    queue.put("lm", original, 0)
    entry = queue.get_nowait()
    assert entry is not None
    assert not any(isinstance(getattr(entry, slot), AgentEvent | ObjectKey) for slot in entry.__slots__)
    assert entry.event == original
    assert entry.to_wire() == original.to_wire()


def test_a_coalesced_entry_carries_the_latest_fields_but_a_resync_is_not_downgraded() -> None:
    queue = SendQueue(10)
    queue.put("lm", event("a", marker=1), 0)
    queue.put("lm", event("a", marker=2), 1)
    queue.put("lm", resync_event(WALL_START), 2)
    queue.put("lm", event("default", namespace="kyma-system", marker=4), 3)
    first, second = queue.get_nowait(), queue.get_nowait()
    assert first is not None and first.event == event("a", marker=2)
    assert second is not None and second.event == resync_event(WALL_START)
