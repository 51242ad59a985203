"""The listener's entry into a controller: bounded, throttled per target, reasons noted only when accepted."""

from __future__ import annotations

from kcp_listener.config import ListenerConfig
from kyma_operator.listener.sinks import ControllerSink
from kyma_operator.runtime.bulk import bulk_adds
from kyma_operator.runtime.clock import FakeClock
from kyma_operator.runtime.controller import Controller
from kyma_operator.runtime.intake import Intake
from kyma_operator.runtime.request import Request, Result
from kyma_operator.runtime.triggers import current_triggers
from tests.unit.kcp_listener.harness import Harness
from tests.unit.kcp_listener.test_app import event

KYMA = Request("kcp-system", "kyma-1")
OTHER = Request("kcp-system", "kyma-2")


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[Request, tuple[str, ...]]] = []

    async def reconcile(self, request: Request) -> Result:
        self.seen.append((request, current_triggers()))
        return Result()


def make(window: float = 0.5, capacity: int = 100_000) -> tuple[Intake, Controller, FakeClock]:
    clock = FakeClock()
    controller = Controller("test", Recorder(), clock=clock)
    intake = Intake("runtime event", capacity=capacity, throttle_window=window, clock=clock)
    controller.add_source(intake)
    return intake, controller, clock


def drain(controller: Controller) -> list[Request]:
    """Take every waiting request (as a worker would) and mark it done."""
    taken = []
    while (request := controller.queue.get_nowait()) is not None:
        taken.append(request)
        controller.queue.done(request)
    return taken


def test_ten_thousand_events_in_one_second_give_three_adds() -> None:
    intake, controller, clock = make()
    adds = []
    for _ in range(10_000):
        assert intake.offer(KYMA)
        adds += drain(controller)  # a worker keeps up, so deduplication alone would not help
        clock.advance(0.0001)  # 10,000 events over exactly one second
    clock.advance(1.0)
    adds += drain(controller)
    assert adds == [KYMA, KYMA, KYMA]  # t = 0, 0.5, 1.0
    assert (intake.forwarded, intake.coalesced) == (3, 9_999)


def test_isolated_events_are_added_immediately() -> None:
    intake, controller, clock = make()
    for _ in range(3):
        intake.offer(KYMA)
        assert drain(controller) == [KYMA]  # no timer needed
        clock.advance(0.5)
    assert intake.pending == 0


def test_targets_are_independent() -> None:
    intake, controller, clock = make()
    intake.offer(KYMA)
    intake.offer(OTHER)
    intake.offer(KYMA)
    assert drain(controller) == [KYMA, OTHER]
    clock.advance(0.5)
    assert drain(controller) == [KYMA]


def test_trailing_add_fires_at_the_window_end() -> None:
    intake, controller, clock = make()
    intake.offer(KYMA)
    drain(controller)
    clock.advance(0.2)
    intake.offer(KYMA)
    clock.advance(0.29)
    assert drain(controller) == []
    clock.advance(0.01)
    assert drain(controller) == [KYMA]


def test_full_queue_refuses_the_leading_edge_and_retries_the_trailing_one() -> None:
    intake, controller, clock = make(capacity=1)
    assert intake.offer(KYMA)
    assert not intake.offer(OTHER)  # leading edge: the caller gets the back-pressure (429)
    assert intake.refused == 1
    assert intake.offer(KYMA)  # absorbed into a trailing add
    drain(controller)
    assert intake.offer(OTHER)  # room again
    clock.advance(0.5)
    assert intake.pending == 1  # queue full with OTHER: retried one window later, not dropped
    assert drain(controller) == [OTHER]
    clock.advance(0.5)
    assert drain(controller) == [KYMA]
    assert intake.pending == 0


def test_a_request_already_waiting_is_absorbed_even_when_full() -> None:
    intake, controller, _ = make(window=0, capacity=1)
    assert intake.offer(KYMA)
    assert intake.offer(KYMA)  # deduplicated by the queue: costs nothing, never refused
    assert not intake.offer(OTHER)
    assert drain(controller) == [KYMA]


def test_bulk_work_does_not_fill_the_intake_and_an_event_moves_a_listed_request_ahead() -> None:
    intake, controller, _ = make(window=0, capacity=1)
    listed = [Request("kcp-system", f"listed-{i}") for i in range(3)]
    with bulk_adds():  # a start-up's list: three Kymas waiting as bulk work
        for request in listed:
            controller.enqueue(request, "listed")
    assert intake.offer(KYMA), "bulk work does not count against the capacity"
    assert not intake.offer(OTHER), "one event waiting: full"
    assert intake.offer(listed[2]), "waiting as bulk work: absorbed, and moved ahead"
    assert drain(controller) == [KYMA, listed[2], listed[0], listed[1]]


def test_state_is_pruned_after_the_window() -> None:
    intake, controller, clock = make()
    for i in range(1000):
        intake.offer(Request("ns", f"k{i}"))
    drain(controller)
    clock.advance(0.6)
    intake.offer(KYMA)
    assert len(intake._last) == 1


async def test_reasons_reach_the_reconcile_and_refused_offers_leave_none() -> None:
    intake, controller, _ = make(window=0, capacity=1)
    assert intake.offer(KYMA)
    assert not intake.offer(OTHER)  # refused: no reason may linger for OTHER
    assert len(controller.triggers) == 1
    controller.enqueue(KYMA, "KCP Kyma changed")
    assert await controller.process_next()
    recorder = controller.reconciler
    assert isinstance(recorder, Recorder)
    assert recorder.seen == [(KYMA, ("runtime event", "KCP Kyma changed"))]
    assert len(controller.triggers) == 0
    assert current_triggers() == ()  # only inside the reconcile


def test_observers_see_every_routed_request() -> None:
    intake, _, _ = make(window=0.5, capacity=1)
    seen: list[Request] = []
    intake.observers.append(seen.append)
    intake.offer(KYMA)
    intake.offer(KYMA)  # absorbed by the throttle
    intake.offer(OTHER)  # refused (full)
    assert seen == [KYMA, KYMA, OTHER]


async def test_listener_reports_the_intakes_coalesced_offers() -> None:
    harness = Harness(ListenerConfig())
    harness.kyma_sink.coalesced = 4
    assert harness.sample("kcp_listener_coalesced_events_total", {"controller": "kyma"}) == 4
    await harness.aclose()


async def test_listener_over_a_full_intake_answers_429_and_enqueues_nothing() -> None:
    """The whole hop: signed event -> listener -> a real controller's Intake. A refused event leaves
    nothing behind (no queued request, no noted reason) and may be retried once there is room."""
    intake, controller, _ = make(window=0.5, capacity=1)
    harness = Harness(ListenerConfig(retry_after_seconds=2), kyma_intake=ControllerSink(intake))
    harness.add_runtime("rt-1", KYMA.name)
    harness.add_runtime("rt-2", OTHER.name)
    assert (await harness.post(event(), runtime_id="rt-1")).status_code == 200
    refused = harness.request(event(), runtime_id="rt-2")
    response = await harness.send(refused)
    assert (response.status_code, response.headers["retry-after"]) == (429, "2")
    assert harness.sample("kcp_listener_rejected_events_total", {"reason": "intake-full"}) == 1
    assert not controller.queue.is_queued(OTHER)
    assert controller.triggers.take(OTHER) == ()
    assert drain(controller) == [KYMA]
    assert (await harness.send(refused)).status_code == 200  # room again: the same request is accepted
    assert drain(controller) == [OTHER]
    await harness.aclose()
