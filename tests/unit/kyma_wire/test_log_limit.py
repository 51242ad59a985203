"""``kyma_wire.log_limit``: one line per reason and interval, the held-back count on the next line."""

from __future__ import annotations

import logging

import pytest

from kyma_wire.log_limit import MAX_REASONS, RateLimitedLog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records]


def test_a_flood_of_one_reason_writes_one_line_per_interval_and_then_says_how_many_were_held(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    limited = RateLimitedLog(logging.getLogger("test.limit"), interval=10.0, clock=clock)
    caplog.set_level(logging.WARNING, "test.limit")
    written = [limited.log("bad", "refused %s", index) for index in range(1000)]
    assert written == [True] + [False] * 999
    assert lines(caplog) == ["refused 0"]
    assert limited.held_back("bad") == 999
    clock.now += 9.9
    assert not limited.log("bad", "refused %s", "late")
    clock.now += 0.1
    assert limited.log("bad", "refused %s", "next")
    assert lines(caplog) == ["refused 0", "refused next (1000 more since the last line)"]
    assert limited.held_back("bad") == 0


def test_reasons_are_limited_each_on_their_own(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    limited = RateLimitedLog(logging.getLogger("test.limit"), clock=clock)
    caplog.set_level(logging.WARNING, "test.limit")
    assert limited.log("a", "a") and limited.log("b", "b")
    assert not limited.log("a", "a") and not limited.log("b", "b")
    assert lines(caplog) == ["a", "b"]


def test_the_remembered_reasons_are_bounded(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    limited = RateLimitedLog(logging.getLogger("test.limit"), clock=clock)
    caplog.set_level(logging.WARNING, "test.limit")
    for index in range(MAX_REASONS * 3):
        assert limited.log(f"reason-{index}", "line")
    assert len(caplog.records) == MAX_REASONS * 3


def test_level_and_interval_zero(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    limited = RateLimitedLog(logging.getLogger("test.limit"), interval=0.0, level=logging.INFO, clock=clock)
    caplog.set_level(logging.INFO, "test.limit")
    assert limited.log("x", "one") and limited.log("x", "two")
    assert [record.levelno for record in caplog.records] == [logging.INFO, logging.INFO]
    with pytest.raises(ValueError, match="negative"):
        RateLimitedLog(logging.getLogger("test.limit"), interval=-1.0)
