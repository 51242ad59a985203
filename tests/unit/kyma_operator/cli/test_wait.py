"""The shared wait loop: which status entries answer a command and which are left from before it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kyma_operator.cli.errors import WaitFailed
from kyma_operator.cli.wait import Entry, Goal, wait_for_modules


def kyma_with(*entries: Entry) -> dict[str, Any]:
    return {"status": {"modules": list(entries)}}


def entry(state: str, message: str | None = None, **extra: Any) -> Entry:
    out: Entry = {"name": "m", "state": state, **extra}
    if message:
        out["message"] = message
    return out


class Script:
    """Kyma objects returned one per poll (the last one repeats), a clock that advances per read."""

    def __init__(self, *kymas: dict[str, Any]) -> None:
        self.kymas: Iterator[dict[str, Any]] = iter(kymas)
        self.last: dict[str, Any] = {}
        self.now = 0.0
        self.reads = 0

    async def read(self) -> dict[str, Any]:
        self.reads += 1
        self.now += 1.0
        self.last = next(self.kymas, self.last)
        return self.last

    def clock(self) -> float:
        return self.now


async def run(script: Script, goal: Goal, baseline: Entry | None, **kwargs: Any) -> dict[str, Any]:
    return await wait_for_modules(
        script.read,
        ["m"],
        goal,
        {"m": baseline},
        limit=kwargs.pop("limit", 100.0),
        quiet=True,
        interval=0,
        clock=script.clock,
        **kwargs,
    )


async def test_ready_on_the_asked_channel_is_done() -> None:
    script = Script(
        kyma_with(entry("Ready", channel="regular")),
        kyma_with(entry("Processing", channel="fast")),
        kyma_with(entry("Ready", channel="fast")),
    )
    await run(script, Goal(channel="fast"), entry("Ready", channel="regular"))
    assert script.reads == 3


async def test_an_error_from_before_is_waited_past() -> None:
    stale = entry("Error", "old cause")
    script = Script(kyma_with(stale), kyma_with(stale), kyma_with(entry("Ready")))
    await run(script, Goal(), stale)
    assert script.reads == 3


async def test_an_error_written_after_the_change_fails_with_its_message() -> None:
    script = Script(kyma_with(entry("Error", "old cause")), kyma_with(entry("Error", "new cause")))
    with pytest.raises(WaitFailed, match=r"^module m is in Error: new cause$"):
        await run(script, Goal(), entry("Error", "old cause"))


async def test_removed_is_done_whatever_the_entry_said_before() -> None:
    stale = entry("Error", "old cause")
    script = Script(kyma_with(stale), kyma_with(entry("Deleting")), kyma_with())
    await run(script, Goal(removed=True), stale)
    assert script.reads == 3


async def test_a_timeout_names_the_stale_error() -> None:
    stale = entry("Error", "old cause")
    with pytest.raises(
        WaitFailed, match=r"module m not Ready after 3s .*still the Error from before this command: old cause"
    ):
        await run(Script(kyma_with(stale)), Goal(), stale, limit=3.0)


async def test_confirm_decides_every_error() -> None:
    answers: list[str | None] = [None, "confirmed: registry down"]
    asked: list[Entry] = []

    async def confirm(module: str, current: Entry) -> str | None:
        asked.append(current)
        return answers.pop(0)

    stale = entry("Error", "old cause")
    with pytest.raises(WaitFailed, match=r"^module m is in Error: confirmed: registry down$"):
        await run(Script(kyma_with(stale)), Goal(), stale, confirm=confirm)
    assert asked == [stale, stale]
