"""The shared wait loop: which status entries answer a command and which are left from before it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kyma_operator.api import names
from kyma_operator.api.names import SYNC_LABEL
from kyma_operator.cli.errors import WaitFailed
from kyma_operator.cli.wait import Entry, Goal, awaited_generation, wait_for_modules


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


def observed_at(
    generation: int | None, *entries: Entry, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A Kyma whose ``Modules`` condition observed ``generation`` (None: no condition)."""
    kyma = kyma_with(*entries)
    kyma["metadata"] = {"generation": 3, "labels": labels if labels is not None else {SYNC_LABEL: "false"}}
    if generation is not None:
        kyma["status"]["conditions"] = [
            {"type": "Modules", "status": "False", "reason": "Ready", "observedGeneration": generation}
        ]
    return kyma


def test_awaited_generation_only_for_a_single_cluster_kyma_that_has_not_observed_it() -> None:
    assert awaited_generation(observed_at(2)) == 3
    assert awaited_generation(observed_at(None)) == 3
    assert awaited_generation(observed_at(3)) is None  # no spec change: the status already observed it
    assert awaited_generation(observed_at(2, labels={})) is None  # a runtime's copy: KCP's generations


def test_awaited_generation_for_a_runtime_copy_the_operator_marked() -> None:
    """The operator stamps the runtime copy's own generation and says so with an annotation."""
    marked = observed_at(2, labels={})
    marked["metadata"]["annotations"] = {names.STATUS_GENERATION_ANNOTATION: names.STATUS_GENERATION_RUNTIME}
    assert awaited_generation(marked) == 3
    marked["status"]["conditions"][0]["observedGeneration"] = 3
    assert awaited_generation(marked) is None  # no spec change
    marked["metadata"]["annotations"] = {names.STATUS_GENERATION_ANNOTATION: "kcp"}
    marked["status"]["conditions"][0]["observedGeneration"] = 2
    assert awaited_generation(marked) is None  # not our mark: generations tell nothing


async def test_a_status_from_before_the_generation_is_neither_done_nor_failed() -> None:
    """Ready and a new-looking Error written for generation 2 do not answer a change to generation 3."""
    script = Script(
        observed_at(2, entry("Ready")),
        observed_at(2, entry("Error", "for the old spec")),
        observed_at(3, entry("Processing")),
        observed_at(3, entry("Ready")),
    )
    await run(script, Goal(), None, generation=3)
    assert script.reads == 4


async def test_removed_counts_only_once_the_generation_is_observed() -> None:
    script = Script(observed_at(2), observed_at(3, entry("Deleting")), observed_at(3))
    await run(script, Goal(removed=True), entry("Error", "old"), generation=3)
    assert script.reads == 3


async def test_a_timeout_before_the_operator_observed_the_change_says_so() -> None:
    with pytest.raises(
        WaitFailed, match=r"generation is 3, its status observed 2\): is the operator running"
    ):
        await run(Script(observed_at(2, entry("Ready"))), Goal(), None, generation=3, limit=3.0)
