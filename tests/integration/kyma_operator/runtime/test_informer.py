"""Informer against real API servers: events, indexes, forced disconnects, relist on 410 Gone.

Disconnects are forced with the API server's own ``timeoutSeconds`` (the server closes the watch)
and a gate that keeps the informer from reconnecting while the test changes objects; the 410 test
uses a dedicated API server without watch cache and compacts etcd, so resuming from the old
resourceVersion really fails with Gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import Any

import pytest

from kyma_operator.runtime import (
    Controller,
    FuncHandler,
    Gone,
    Informer,
    KubeClient,
    ObjectList,
    Request,
    Resource,
    Result,
    WatchEvent,
    index_by_label,
)
from kyma_operator.runtime.resources import CONFIGMAPS, NAMESPACES
from tests.controlplane.cluster import ControlPlane
from tests.polling import eventually


class Recorder(FuncHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        super().__init__(
            on_add=lambda o: self.events.append(("add", o["metadata"]["name"])),
            on_update=lambda old, new: self.events.append(("update", new["metadata"]["name"])),
            on_delete=lambda o: self.events.append(("delete", o["metadata"]["name"])),
        )


class GatedClient:
    """Delegates to a real KubeClient, but new watches wait while the gate is closed.

    Watches are requested with a 1 s server timeout, so the API server itself ends each stream
    and the informer must reconnect from its last resourceVersion.
    """

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.gate = asyncio.Event()
        self.gate.set()
        self.waiting = asyncio.Event()
        self.watch_rvs: list[str] = []

    async def list_all(self, res: Resource, namespace: str | None = None, **kwargs: Any) -> ObjectList:
        return await self.client.list_all(res, namespace, **kwargs)

    async def watch(
        self, res: Resource, namespace: str | None = None, *, resource_version: str, **kwargs: Any
    ) -> AsyncGenerator[WatchEvent]:
        if not self.gate.is_set():
            self.waiting.set()
            await self.gate.wait()
            self.waiting.clear()
        self.watch_rvs.append(resource_version)
        kwargs["timeout_seconds"] = 1
        async for event in self.client.watch(res, namespace, resource_version=resource_version, **kwargs):
            yield event


@pytest.fixture
async def running() -> AsyncIterator[list[asyncio.Task[None]]]:
    tasks: list[asyncio.Task[None]] = []
    yield tasks
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def cm(name: str, namespace: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}, "data": {"v": "0"}}


async def test_informer_sees_create_update_delete_and_indexes(
    client: KubeClient, namespace: str, running: list[asyncio.Task[None]]
) -> None:
    await client.create(CONFIGMAPS, cm("pre", namespace, team="a"))
    informer = Informer(client, CONFIGMAPS, namespace=namespace, indexers={"team": index_by_label("team")})
    recorder = Recorder()
    informer.add_handler(recorder)
    running.append(asyncio.create_task(informer.run()))
    assert await informer.wait_synced(10)
    assert recorder.events == [("add", "pre")]

    await client.create(CONFIGMAPS, cm("x", namespace, team="a"))
    await client.patch(CONFIGMAPS, "x", {"metadata": {"labels": {"team": "b"}}}, namespace)
    await client.delete(CONFIGMAPS, "pre", namespace)
    await eventually(lambda: len(recorder.events) == 4, what="three more events")
    assert recorder.events[1:] == [("add", "x"), ("update", "x"), ("delete", "pre")]
    assert informer.get(namespace, "pre") is None
    cached = informer.get(namespace, "x")
    assert cached is not None and cached["metadata"]["labels"] == {"team": "b"}
    assert "managedFields" not in cached["metadata"]
    assert [o["metadata"]["name"] for o in informer.by_index("team", "b")] == ["x"]
    assert informer.by_index("team", "a") == []
    assert [o["metadata"]["name"] for o in informer.list(namespace)] == ["x"]


async def test_label_selected_cluster_wide_informer(
    client: KubeClient, namespace: str, unique_name: str, running: list[asyncio.Task[None]]
) -> None:
    informer = Informer(client, CONFIGMAPS, label_selector=f"sel={unique_name}")
    running.append(asyncio.create_task(informer.run()))
    assert await informer.wait_synced(10)
    await client.create(CONFIGMAPS, cm("in", namespace, sel=unique_name))
    await client.create(CONFIGMAPS, cm("out", namespace))
    await eventually(lambda: informer.get(namespace, "in") is not None, what="selected object")
    assert informer.get(namespace, "out") is None
    assert len(informer) == 1


async def test_informer_resumes_after_disconnect_without_missing_changes(
    client: KubeClient, namespace: str, running: list[asyncio.Task[None]]
) -> None:
    await client.create(CONFIGMAPS, cm("a", namespace))
    gated = GatedClient(client)
    informer = Informer(gated, CONFIGMAPS, namespace=namespace)
    recorder = Recorder()
    informer.add_handler(recorder)
    running.append(asyncio.create_task(informer.run()))
    assert await informer.wait_synced(10)

    gated.gate.clear()  # the server ends the current watch within 1 s; the next one waits
    await eventually(gated.waiting.is_set, what="the informer to be disconnected")
    await client.patch(CONFIGMAPS, "a", {"data": {"v": "1"}}, namespace)
    await client.create(CONFIGMAPS, cm("b", namespace))
    gated.gate.set()

    await eventually(lambda: ("add", "b") in recorder.events, what="changes made while disconnected")
    assert recorder.events == [("add", "a"), ("update", "a"), ("add", "b")]
    assert informer.relists == 1, "a resumable disconnect must not relist"
    assert len(gated.watch_rvs) >= 2
    assert informer.get(namespace, "a")["data"] == {"v": "1"}  # type: ignore[index]


@pytest.fixture(scope="module")
def no_watch_cache() -> Iterator[ControlPlane]:
    with ControlPlane(["gone"], extra_apiserver_args={"gone": ["--watch-cache=false"]}) as plane:
        yield plane


def compact_etcd(plane: ControlPlane, revision: int) -> None:
    request = urllib.request.Request(
        f"{plane.etcd_url}/v3/kv/compaction",
        data=json.dumps({"revision": revision, "physical": True}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


async def first_watch_outcome(client: KubeClient, namespace: str, resource_version: str) -> int:
    """The status code a watch from ``resource_version`` fails with (HTTP or ERROR event), else 0."""
    stream = client.watch(CONFIGMAPS, namespace, resource_version=resource_version, timeout_seconds=1)
    try:
        async with contextlib.aclosing(stream):
            async for event in stream:
                return int(event.object.get("code") or 0) if event.type == "ERROR" else 0
    except Gone as exc:
        return exc.status
    return 0


async def test_relist_on_gone_emits_the_differences(
    no_watch_cache: ControlPlane, unique_name: str, running: list[asyncio.Task[None]]
) -> None:
    async with KubeClient.from_kubeconfig_file(no_watch_cache["gone"].kubeconfig_path) as client:
        ns = unique_name
        await client.create(NAMESPACES, {"metadata": {"name": ns}})
        for name in ("keep", "change", "remove"):
            await client.create(CONFIGMAPS, cm(name, ns))
        gated = GatedClient(client)
        informer = Informer(gated, CONFIGMAPS, namespace=ns)
        recorder = Recorder()
        informer.add_handler(recorder)
        running.append(asyncio.create_task(informer.run()))
        assert await informer.wait_synced(10)
        stale_rv = informer.resource_version

        gated.gate.clear()
        await eventually(gated.waiting.is_set, what="the informer to be disconnected")
        await client.patch(CONFIGMAPS, "change", {"data": {"v": "1"}}, ns)
        await client.delete(CONFIGMAPS, "remove", ns)
        added = await client.create(CONFIGMAPS, cm("new", ns))
        compact_etcd(no_watch_cache, int(added["metadata"]["resourceVersion"]))
        # Prove the precondition: the old resourceVersion is really gone on this server.
        assert await first_watch_outcome(client, ns, stale_rv) == 410
        gated.gate.set()

        await eventually(lambda: informer.relists == 2, what="a relist after 410")
        await eventually(lambda: len(recorder.events) == 6, what="synthetic events")
        assert sorted(recorder.events[:3]) == [("add", "change"), ("add", "keep"), ("add", "remove")]
        assert sorted(recorder.events[3:]) == [("add", "new"), ("delete", "remove"), ("update", "change")]
        assert sorted(o["metadata"]["name"] for o in informer.list()) == ["change", "keep", "new"]
        # And it keeps watching from the new list's resourceVersion.
        await client.create(CONFIGMAPS, cm("after", ns))
        await eventually(lambda: informer.get(ns, "after") is not None, what="events after the relist")


async def test_a_lists_requests_wait_as_bulk_work_behind_watched_changes(
    client: KubeClient, namespace: str, running: list[asyncio.Task[None]]
) -> None:
    """What a controller's queue holds after an informer's list, and where changes seen by its
    watch go: ahead of the listed objects (``runtime/bulk.py``, the queue's two lanes)."""
    listed = [f"listed-{i}" for i in range(6)]
    for name in listed:
        await client.create(CONFIGMAPS, cm(name, namespace))

    class NoWorker:
        async def reconcile(self, request: Request) -> Result:
            raise AssertionError("no worker runs in this test")

    controller = Controller("lanes", NoWorker())
    informer = Informer(client, CONFIGMAPS, namespace=namespace)
    controller.watch(informer, reason="configmap changed")
    running.append(asyncio.create_task(informer.run()))
    assert await informer.wait_synced(10)
    queue = controller.queue
    assert (len(queue), queue.bulk) == (6, 6), "every listed object is bulk work"

    await client.patch(CONFIGMAPS, "listed-4", {"data": {"v": "1"}}, namespace)
    await client.create(CONFIGMAPS, cm("created", namespace))
    await eventually(lambda: len(queue) == 7 and queue.bulk == 5, what="the update and the create queued")

    handed_out = []
    while (request := queue.get_nowait()) is not None:
        handed_out.append(request.name)
        queue.done(request)
    assert handed_out == ["listed-4", "created", "listed-0", "listed-1", "listed-2", "listed-3", "listed-5"]

    controller.watch(informer, reason="second source")  # registered on the filled cache: its adds
    assert (len(queue), queue.bulk) == (7, 7), "are bulk work too"
