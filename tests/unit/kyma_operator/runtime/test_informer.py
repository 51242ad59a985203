"""Informer logic with a scripted list/watch source: resume points, relist diff, indexes, handlers.

The same behaviour is exercised against a real API server in tests/integration/kyma_operator/runtime; here the
source is scripted so that exact resourceVersions and event orders can be asserted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from kyma_operator.runtime import (
    FakeClock,
    FuncHandler,
    Gone,
    Informer,
    KubeTransportError,
    ObjectList,
    ReconnectBackoff,
    WatchEvent,
    index_by_label,
)
from kyma_operator.runtime.errors import error_from_status

from .conftest import WIDGETS


def widget(name: str, rv: str, ns: str = "ns", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "example.io/v1",
        "kind": "Widget",
        "metadata": {
            "name": name,
            "namespace": ns,
            "resourceVersion": rv,
            "labels": labels,
            "managedFields": [{}],
        },
    }


class Scripted:
    """Lists and watch sessions played back in order. A session is events plus how it ends."""

    def __init__(
        self, lists: list[ObjectList], sessions: list[tuple[list[WatchEvent], BaseException | None]]
    ):
        self.lists = lists
        self.sessions = sessions
        self.watch_rvs: list[str] = []
        self.exhausted = asyncio.Event()

    async def list_all(self, res: Any, namespace: str | None = None, **kwargs: Any) -> ObjectList:
        listed = self.lists.pop(0)
        transform = kwargs.get("transform")
        if transform is None:
            return listed
        return ObjectList([transform(item) for item in listed.items], listed.resource_version)

    async def watch(
        self, res: Any, namespace: str | None = None, *, resource_version: str, **kwargs: Any
    ) -> AsyncGenerator[WatchEvent]:
        self.watch_rvs.append(resource_version)
        if not self.sessions:
            self.exhausted.set()
            await asyncio.Event().wait()  # a quiet, open watch
        events, end = self.sessions.pop(0)
        for event in events:
            yield event
        if end is not None:
            raise end


class Recorder(FuncHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        super().__init__(
            on_add=lambda o: self.events.append(
                ("add", o["metadata"]["name"], o["metadata"]["resourceVersion"])
            ),
            on_update=lambda old, new: self.events.append(
                (
                    "update",
                    new["metadata"]["name"],
                    f"{old['metadata']['resourceVersion']}->{new['metadata']['resourceVersion']}",
                )
            ),
            on_delete=lambda o: self.events.append(
                ("delete", o["metadata"]["name"], o["metadata"]["resourceVersion"])
            ),
        )


async def run_until_exhausted(informer: Informer, source: Scripted, clock: FakeClock) -> None:
    task = asyncio.create_task(informer.run())
    try:
        for _ in range(1000):
            if source.exhausted.is_set():
                break
            if clock.pending:
                clock.advance(clock.next_deadline() - clock.now())  # type: ignore[operator]
            await asyncio.sleep(0)
        assert source.exhausted.is_set(), "script not consumed"
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_list_watch_resume_and_relist_on_gone() -> None:
    source = Scripted(
        lists=[
            ObjectList([widget("a", "10"), widget("b", "11")], "12"),
            # after 410: "a" changed, "b" deleted, "c" new, "d" unchanged since the watch saw it
            ObjectList([widget("a", "30"), widget("c", "31"), widget("d", "14")], "40"),
        ],
        sessions=[
            (
                [
                    WatchEvent("ADDED", widget("d", "14")),
                    WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "20"}}),
                ],
                KubeTransportError("connection reset"),
            ),
            ([WatchEvent("MODIFIED", widget("a", "21"))], None),  # normal end: re-watch at once
            (
                [
                    WatchEvent(
                        "ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
                    )
                ],
                None,
            ),
            ([], Gone(410, "Expired", "too old")),  # HTTP 410 also leads to a relist
        ],
    )
    source.lists.append(ObjectList([widget("a", "30"), widget("c", "31"), widget("d", "14")], "50"))
    clock = FakeClock()
    informer = Informer(source, WIDGETS, clock=clock, backoff=ReconnectBackoff(0.1, 30.0, jitter=0))
    recorder = Recorder()
    informer.add_handler(recorder)
    await run_until_exhausted(informer, source, clock)

    assert source.watch_rvs == ["12", "20", "21", "40", "50"]
    assert recorder.events == [
        ("add", "a", "10"),
        ("add", "b", "11"),
        ("add", "d", "14"),
        ("update", "a", "10->21"),
        # relist after the ERROR 410 event: differences only, "d" unchanged
        ("update", "a", "21->30"),
        ("add", "c", "31"),
        ("delete", "b", "11"),
        # relist after HTTP 410: nothing changed
    ]
    assert sorted(o["metadata"]["name"] for o in informer.list()) == ["a", "c", "d"]
    assert informer.relists == 3
    assert informer.synced.is_set()
    assert "managedFields" not in informer.get("ns", "a")["metadata"]  # type: ignore[index]


async def test_indexes_follow_updates_and_deletes() -> None:
    source = Scripted(
        lists=[ObjectList([widget("a", "1", team="x"), widget("b", "2", team="x"), widget("c", "3")], "3")],
        sessions=[
            (
                [
                    WatchEvent("MODIFIED", widget("a", "4", team="y")),
                    WatchEvent("DELETED", widget("b", "5", team="x")),
                ],
                None,
            ),
        ],
    )
    clock = FakeClock()
    informer = Informer(source, WIDGETS, clock=clock, indexers={"team": index_by_label("team")})
    await run_until_exhausted(informer, source, clock)
    assert [o["metadata"]["name"] for o in informer.by_index("team", "y")] == ["a"]
    assert informer.by_index("team", "x") == []
    assert informer.index_values("team") == ["y"]
    informer.add_indexer("ns", lambda o: [o["metadata"]["namespace"]])
    assert sorted(o["metadata"]["name"] for o in informer.by_index("ns", "ns")) == ["a", "c"]
    with pytest.raises(KeyError):
        informer.by_index("nope", "x")


async def test_reset_drops_cache_and_indexes_without_events_and_the_next_run_lists_afresh() -> None:
    source = Scripted(
        lists=[
            ObjectList([widget("a", "1", team="x"), widget("b", "2", team="x")], "2"),
            ObjectList([widget("a", "1", team="x")], "7"),
        ],
        sessions=[],
    )
    clock = FakeClock()
    informer = Informer(source, WIDGETS, clock=clock, indexers={"team": index_by_label("team")})
    recorder = Recorder()
    informer.add_handler(recorder)
    await run_until_exhausted(informer, source, clock)
    informer.reset()
    assert (len(informer), informer.keys(), informer.index_values("team")) == (0, [], [])
    assert (informer.resource_version, informer.synced.is_set()) == ("", False)
    assert recorder.events == [("add", "a", "1"), ("add", "b", "2")], "a reset sends no delete"
    source.exhausted.clear()
    await run_until_exhausted(informer, source, clock)
    # listed afresh: "a" is an add again (not an unchanged object), "b" is simply gone
    assert recorder.events[2:] == [("add", "a", "1")]
    assert [o["metadata"]["name"] for o in informer.by_index("team", "x")] == ["a"]
    assert (informer.resource_version, source.watch_rvs) == ("7", ["2", "7"])


async def test_late_handler_gets_existing_objects_and_broken_handler_is_isolated() -> None:
    source = Scripted(lists=[ObjectList([widget("a", "1")], "1")], sessions=[])
    clock = FakeClock()
    informer = Informer(source, WIDGETS, clock=clock)

    def broken(obj: dict[str, Any]) -> None:
        raise RuntimeError("handler bug")

    informer.add_handler(FuncHandler(on_add=broken))
    await run_until_exhausted(informer, source, clock)
    late = Recorder()
    informer.add_handler(late)
    assert late.events == [("add", "a", "1")]


async def test_reconnect_backoff_grows_on_repeated_failures() -> None:
    failures: list[tuple[list[WatchEvent], BaseException | None]] = [
        ([], KubeTransportError("refused")) for _ in range(4)
    ]
    source = Scripted(lists=[ObjectList([], "1")], sessions=failures)
    clock = FakeClock(start=0.0)
    informer = Informer(source, WIDGETS, clock=clock, backoff=ReconnectBackoff(0.1, 0.5, jitter=0))
    await run_until_exhausted(informer, source, clock)
    assert clock.now() == pytest.approx(0.1 + 0.2 + 0.4 + 0.5)


async def test_watch_refused_by_the_api_relists_but_transport_errors_resume() -> None:
    too_large = {"kind": "Status", "code": 504, "reason": "Timeout", "message": "Too large resource version"}
    source = Scripted(
        lists=[ObjectList([widget("a", "1")], "5"), ObjectList([widget("a", "1")], "9")],
        sessions=[
            ([], KubeTransportError("reset")),
            ([WatchEvent("ERROR", too_large)], None),
        ],
    )
    clock = FakeClock()
    informer = Informer(source, WIDGETS, clock=clock, backoff=ReconnectBackoff(0.1, 1.0, jitter=0))
    recorder = Recorder()
    informer.add_handler(recorder)
    await run_until_exhausted(informer, source, clock)
    assert source.watch_rvs == ["5", "5", "9"]
    assert informer.relists == 2
    assert recorder.events == [("add", "a", "1")], "an unchanged relist emits nothing"


async def test_a_429_is_retried_quietly_and_a_transport_failure_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    status = {"kind": "Status", "code": 429, "reason": "TooManyRequests"}
    initialising = error_from_status(429, {**status, "message": "storage is (re)initializing"})
    source = Scripted(
        lists=[ObjectList([], "1")],
        sessions=[([], initialising), ([], KubeTransportError("reset"))],
    )
    clock = FakeClock()
    informer = Informer(source, WIDGETS, clock=clock, backoff=ReconnectBackoff(0.1, 1.0, jitter=0))
    with caplog.at_level("INFO", logger="kyma_operator.runtime.informer"):
        await run_until_exhausted(informer, source, clock)
    retries = [(r.levelname, r.getMessage()) for r in caplog.records if "retrying in" in r.getMessage()]
    assert [level for level, _ in retries] == ["INFO", "WARNING"], retries
    assert "storage is (re)initializing" in retries[0][1] and "reset" in retries[1][1]
    assert source.watch_rvs == ["1", "1", "1"], "a 429 resumes the watch, it does not relist"
