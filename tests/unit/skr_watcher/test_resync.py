"""One RESYNC per incident: scheduled on the first success after it, cleared on delivery."""

from __future__ import annotations

from kyma_wire.events import Operation
from kyma_wire.names import SKR_NAMESPACE
from skr_watcher.resync import KYMA_GVK, RUNTIME_KYMA, ResyncTracker, resync_event
from tests.unit.skr_watcher.fakes import WALL_START


def test_resync_event_names_the_runtime_kyma() -> None:
    event = resync_event(WALL_START)
    assert event.operation is Operation.RESYNC
    assert event.watched == RUNTIME_KYMA and (RUNTIME_KYMA.namespace, RUNTIME_KYMA.name) == (
        SKR_NAMESPACE,
        "default",
    )
    assert (KYMA_GVK.group, KYMA_GVK.version, KYMA_GVK.kind) == (
        "operator.kyma-project.io",
        "v1beta2",
        "Kyma",
    )


def test_nothing_happened_means_no_resync() -> None:
    assert not ResyncTracker().should_schedule("lm")


def test_many_failures_then_successes_schedule_exactly_one() -> None:
    tracker = ResyncTracker()
    for _ in range(5):
        tracker.mark("lm")
    assert tracker.should_schedule("lm")
    assert not tracker.should_schedule("lm")
    tracker.mark("lm")  # a failure while the RESYNC waits: the RESYNC still covers it
    assert not tracker.should_schedule("lm")
    tracker.delivered("lm")
    assert not tracker.should_schedule("lm")
    assert tracker.pending() == {}


def test_managers_are_independent() -> None:
    tracker = ResyncTracker()
    tracker.mark("a")
    assert not tracker.should_schedule("b")
    assert tracker.should_schedule("a")


def test_lost_resync_is_needed_again_and_rejected_resync_gives_up() -> None:
    tracker = ResyncTracker()
    tracker.schedule("lm")
    tracker.lost("lm")
    assert tracker.should_schedule("lm")
    tracker.rejected("lm")
    assert not tracker.should_schedule("lm")
