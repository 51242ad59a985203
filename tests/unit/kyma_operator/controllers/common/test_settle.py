"""The settle re-reads after a runtime event, on a plain clock value (no API involved)."""

from __future__ import annotations

from kyma_operator.controllers.common.settle import Settle

DELAYS = (0.1, 1.0)


def test_re_reads_step_through_the_delays_while_nothing_is_found() -> None:
    settle = Settle()
    look = settle.look(True, now=0.0)
    assert look == 0
    assert settle.after(look, True, DELAYS, now=0.0) == 0.1
    # a reconcile in between (another trigger) is not the re-read: it stays scheduled
    assert settle.look(False, now=0.05) is None
    assert settle.after(None, False, DELAYS, now=0.05) is not None
    assert settle.pending == 1
    look = settle.look(False, now=0.1)
    assert look == 1
    assert settle.after(look, True, DELAYS, now=0.1) == 1.0
    look = settle.look(False, now=1.1)
    assert look == 2
    assert settle.after(look, True, DELAYS, now=1.1) is None  # delays exhausted
    assert settle.pending is None
    assert settle.look(False, now=5.0) is None


def test_a_look_that_finds_something_ends_the_re_reads() -> None:
    settle = Settle()
    settle.after(settle.look(True, now=0.0), True, DELAYS, now=0.0)
    look = settle.look(False, now=0.2)
    assert settle.after(look, False, DELAYS, now=0.2) is None
    assert settle.pending is None


def test_a_new_event_during_the_re_reads_starts_them_again() -> None:
    settle = Settle()
    settle.after(settle.look(True, now=0.0), True, DELAYS, now=0.0)
    settle.after(settle.look(False, now=0.1), True, DELAYS, now=0.1)
    assert settle.pending == 2
    look = settle.look(True, now=0.3)
    assert look == 0
    assert settle.after(look, True, DELAYS, now=0.3) == 0.1
    assert settle.pending == 1
