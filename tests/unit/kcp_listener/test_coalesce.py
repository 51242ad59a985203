"""Per-target throttling on a fake clock: bursts collapse, isolated events pass at once, nothing is lost."""

from __future__ import annotations

from kcp_listener.coalesce import CoalescingSink
from kcp_listener.config import ListenerConfig
from kcp_listener.routing import ListSink, ObjectRef
from kyma_operator.runtime.clock import FakeClock
from kyma_wire.events import AgentEvent, GroupVersionKind, ObjectKey
from kyma_wire.names import KCP_NAMESPACE, SKR_NAMESPACE
from tests.unit.kcp_listener.harness import Harness

KYMA = ObjectRef(KCP_NAMESPACE, "kyma-1")
OTHER = ObjectRef(KCP_NAMESPACE, "kyma-2")


def make(window: float = 0.5, capacity: int = 100_000) -> tuple[CoalescingSink, ListSink, FakeClock]:
    clock = FakeClock()
    inner = ListSink(capacity=capacity)
    return CoalescingSink(inner, window=window, timer=clock), inner, clock


def test_ten_thousand_events_in_one_second_forward_three_requests() -> None:
    sink, inner, clock = make()
    for _ in range(10_000):
        assert sink.offer(KYMA)
        clock.advance(0.0001)  # 10,000 events over exactly one second
    clock.advance(1.0)
    assert inner.items == [KYMA, KYMA, KYMA]
    assert (sink.forwarded, sink.coalesced) == (3, 9_999)  # every event after the first was absorbed


def test_isolated_events_are_forwarded_immediately() -> None:
    sink, inner, clock = make()
    for count in range(1, 4):
        sink.offer(KYMA)
        assert len(inner.items) == count  # no timer needed
        clock.advance(0.5)
    assert sink.pending == 0


def test_targets_are_independent() -> None:
    sink, inner, clock = make()
    sink.offer(KYMA)
    sink.offer(OTHER)
    sink.offer(KYMA)
    assert inner.items == [KYMA, OTHER]
    clock.advance(0.5)
    assert inner.items == [KYMA, OTHER, KYMA]


def test_trailing_request_fires_at_the_window_end() -> None:
    sink, inner, clock = make()
    sink.offer(KYMA)
    clock.advance(0.2)
    sink.offer(KYMA)
    clock.advance(0.29)
    assert inner.items == [KYMA]
    clock.advance(0.01)
    assert inner.items == [KYMA, KYMA]


def test_full_inner_sink_rejects_leading_and_retries_trailing() -> None:
    sink, inner, clock = make(capacity=1)
    assert sink.offer(KYMA)
    assert not sink.offer(OTHER)  # leading edge: the caller gets the back-pressure (429)
    assert sink.offer(KYMA)  # absorbed into a trailing request
    clock.advance(0.5)
    assert sink.pending == 1  # inner still full: retried one window later, not dropped
    inner.items.clear()
    clock.advance(0.5)
    assert inner.items == [KYMA]
    assert sink.pending == 0


def test_state_is_pruned_after_the_window() -> None:
    sink, _, clock = make()
    for i in range(1000):
        sink.offer(ObjectRef("ns", f"k{i}"))
    clock.advance(0.6)
    sink.offer(KYMA)
    assert len(sink._last) == 1


async def test_listener_counts_coalesced_events() -> None:
    clock = FakeClock()
    harness = Harness(ListenerConfig(coalesce_window_seconds=0.5), timer=clock)
    harness.add_runtime("rt-1", "kyma-1")
    body = AgentEvent(
        watched=ObjectKey(namespace=SKR_NAMESPACE, name="default"),
        watched_gvk=GroupVersionKind(version="v1", kind="ConfigMap"),
    ).to_wire()
    for _ in range(5):
        assert (await harness.post(body)).status_code == 200
    assert len(harness.kyma_sink.items) == 1
    assert harness.sample("kcp_listener_coalesced_events_total", {"controller": "kyma"}) == 4
    clock.advance(0.5)
    assert len(harness.kyma_sink.items) == 2
    await harness.aclose()
