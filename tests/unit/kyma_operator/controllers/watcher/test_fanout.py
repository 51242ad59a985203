"""The Watcher fan-out on a fake clock: debounced, spread at a rate, deduplicated by the work queue."""

from __future__ import annotations

from typing import Any

import pytest

from kyma_operator.controllers.watcher.fanout import FANOUT_REASON, WatcherFanout, watcher_change_matters
from kyma_operator.runtime.clock import FakeClock
from kyma_operator.runtime.controller import Controller
from kyma_operator.runtime.queue import WorkQueue
from kyma_operator.runtime.request import Request, Result
from kyma_wire.names import KCP_NAMESPACE


class _Kymas:
    def __init__(self, names: list[str]) -> None:
        self.items = [{"metadata": {"namespace": KCP_NAMESPACE, "name": n}} for n in names]

    def list(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return [i for i in self.items if namespace is None or i["metadata"]["namespace"] == namespace]


class _Idle:
    async def reconcile(self, request: Request) -> Result:
        return Result()


def _bound(kymas: _Kymas, clock: FakeClock, **kwargs: Any) -> tuple[WatcherFanout, WorkQueue[Request]]:
    """A fan-out bound to a real Kyma controller's queue (as ``build_kyma_controller`` does)."""
    controller = Controller("kyma", _Idle(), clock=clock)
    fanout = WatcherFanout(kymas, reason=FANOUT_REASON, clock=clock, **kwargs)
    controller.add_source(fanout)
    return fanout, controller.queue


def test_fanout_is_debounced_and_spread() -> None:
    clock = FakeClock(start=0.0)
    fanout, queue = _bound(_Kymas([f"k{i:02d}" for i in range(10)]), clock, rate=5.0, debounce=1.0)
    fanout.trigger("Watcher a created")
    fanout.trigger("Watcher b created")
    assert fanout.pending and len(queue) == 0
    clock.advance(1.0)
    assert fanout.fanouts == 1 and fanout.enqueued == 10
    # k00 at once, then one every 1/rate seconds
    assert queue.is_queued(Request(KCP_NAMESPACE, "k00"))
    assert queue.ready_at(Request(KCP_NAMESPACE, "k09")) == pytest.approx(1.0 + 9 / 5.0)
    clock.advance(0.5)
    assert len(queue) == 3  # k00, k01 (0.2 s), k02 (0.4 s)
    clock.advance(2.0)
    assert len(queue) == 10


def test_second_fanout_does_not_duplicate_queued_kymas() -> None:
    clock = FakeClock(start=0.0)
    fanout, queue = _bound(_Kymas(["a", "b"]), clock, rate=100.0, debounce=0.0)
    fanout.trigger("one")
    clock.advance(0.0)
    clock.advance(1.0)
    fanout.trigger("two")
    clock.advance(1.0)
    assert fanout.fanouts == 2
    assert len(queue) == 2


def test_filter_and_namespace() -> None:
    clock = FakeClock(start=0.0)
    kymas = _Kymas(["keep", "skip"])
    kymas.items.append({"metadata": {"namespace": "other", "name": "elsewhere"}})
    fanout, queue = _bound(
        kymas,
        clock,
        debounce=0.0,
        namespace=KCP_NAMESPACE,
        kyma_filter=lambda o: o["metadata"]["name"] != "skip",
    )
    fanout.trigger("x")
    clock.advance(1.0)
    assert len(queue) == 1 and queue.is_queued(Request(KCP_NAMESPACE, "keep"))


def test_fanout_adds_carry_the_fanout_reason() -> None:
    clock = FakeClock(start=0.0)
    controller = Controller("kyma", _Idle(), clock=clock)
    fanout = WatcherFanout(_Kymas(["a"]), reason=FANOUT_REASON, clock=clock, debounce=0.0)
    controller.add_source(fanout)
    fanout.trigger("x")
    clock.advance(0.0)
    assert controller.triggers.take(Request(KCP_NAMESPACE, "a")) == (FANOUT_REASON,)


def test_invalid_settings() -> None:
    with pytest.raises(ValueError, match="rate"):
        WatcherFanout(_Kymas([]), reason=FANOUT_REASON, clock=FakeClock(), rate=0)


def test_an_unbound_fanout_enqueues_nothing() -> None:
    clock = FakeClock(start=0.0)
    fanout = WatcherFanout(_Kymas(["a"]), reason=FANOUT_REASON, clock=clock, debounce=0.0)
    fanout.trigger("x")
    clock.advance(1.0)
    assert (fanout.fanouts, fanout.enqueued) == (0, 0)


@pytest.mark.parametrize(
    ("old", "new", "matters"),
    [
        ({"generation": 1}, {"generation": 1}, False),
        ({"generation": 1}, {"generation": 2}, True),
        ({"generation": 1, "labels": {"a": "1"}}, {"generation": 1, "labels": {"a": "2"}}, True),
        ({"generation": 1}, {"generation": 1, "deletionTimestamp": "2026-01-01T00:00:00Z"}, True),
    ],
)
def test_relevant_watcher_changes(old: dict[str, Any], new: dict[str, Any], matters: bool) -> None:
    assert watcher_change_matters({"metadata": old}, {"metadata": new}) is matters
