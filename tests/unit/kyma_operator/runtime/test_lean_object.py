"""The informers' default cache transform: drop what the operator never reads, share repeated strings."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncGenerator
from typing import Any

from kyma_operator.runtime import FakeClock, Informer, ObjectList, WatchEvent, lean_object
from kyma_operator.runtime.informer import LAST_APPLIED_ANNOTATION
from tests.unit.kyma_operator.runtime.conftest import WIDGETS

LONG = "x" * 65


def widget(name: str, rv: str = "1") -> dict[str, Any]:
    """A Widget as the API server sends it (fresh dicts and strings, like ``json.loads``)."""
    sent: dict[str, Any] = json.loads(
        json.dumps(
            {
                "apiVersion": "example.io/v1",
                "kind": "Widget",
                "metadata": {
                    "name": name,
                    "namespace": "kcp-system",
                    "resourceVersion": rv,
                    "labels": {"operator.kyma-project.io/kyma-name": "kyma-a"},
                    "annotations": {LAST_APPLIED_ANNOTATION: '{"big": "copy"}', "keep": "me"},
                    "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
                },
                "spec": {"size": 3, "tags": ["a", LONG], "on": True, "ratio": 0.5, "none": None},
                "status": {"state": "Ready"},
            }
        )
    )
    return sent


def test_drops_managed_fields_and_the_last_applied_annotation_and_keeps_the_rest() -> None:
    original = widget("w1")
    expected = copy.deepcopy(original)
    del expected["metadata"]["managedFields"]
    del expected["metadata"]["annotations"][LAST_APPLIED_ANNOTATION]

    assert lean_object(original) == expected


def test_repeated_keys_and_short_values_are_one_object_across_cached_objects() -> None:
    first, second = lean_object(widget("w1")), lean_object(widget("w2"))

    first_keys = {k: k for k in first["metadata"]["labels"]}
    (label_key,) = second["metadata"]["labels"]
    assert first_keys[label_key] is label_key
    assert first["metadata"]["namespace"] is second["metadata"]["namespace"]
    assert first["status"]["state"] is second["status"]["state"]
    # long values are kept as they are (mostly unique: sharing them would only grow the intern table)
    assert first["spec"]["tags"][1] == second["spec"]["tags"][1] == LONG


def test_is_idempotent() -> None:
    once = lean_object(widget("w1"))
    assert lean_object(copy.deepcopy(once)) == once


def test_an_object_without_metadata_is_left_alone() -> None:
    assert lean_object({"kind": "Status", "code": 410}) == {"kind": "Status", "code": 410}


class _OneList:
    """A ListWatcher that lists once (honouring ``transform`` as ``KubeClient.list_all`` does)."""

    def __init__(self, items: list[dict[str, Any]], events: list[WatchEvent]) -> None:
        self.items = items
        self.events = events

    async def list_all(self, res: Any, namespace: str | None = None, **kwargs: Any) -> ObjectList:
        transform = kwargs.get("transform")
        items = [transform(i) for i in self.items] if transform else self.items
        return ObjectList(items, "10")

    async def watch(
        self, res: Any, namespace: str | None = None, **kwargs: Any
    ) -> AsyncGenerator[WatchEvent]:
        for event in self.events:
            yield event
        await asyncio.Event().wait()


async def _run_until(informer: Informer, count: int) -> None:
    task = asyncio.create_task(informer.run())
    try:
        for _ in range(1000):
            if informer.synced.is_set() and len(informer) >= count:
                return
            await asyncio.sleep(0)
        raise AssertionError(f"informer did not reach {count} objects")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_informer_caches_lean_objects_from_lists_and_watches_by_default() -> None:
    source = _OneList([widget("listed")], [WatchEvent("ADDED", widget("watched", "11"))])
    informer = Informer(source, WIDGETS, clock=FakeClock())
    await _run_until(informer, 2)

    for name in ("listed", "watched"):
        cached = informer.get("kcp-system", name)
        assert cached is not None
        assert "managedFields" not in cached["metadata"]
        assert cached["metadata"]["annotations"] == {"keep": "me"}


async def test_without_a_transform_the_informer_caches_objects_as_sent() -> None:
    informer = Informer(_OneList([widget("listed")], []), WIDGETS, clock=FakeClock(), transform=None)
    await _run_until(informer, 1)

    cached = informer.get("kcp-system", "listed")
    assert cached is not None and cached["metadata"]["managedFields"]
