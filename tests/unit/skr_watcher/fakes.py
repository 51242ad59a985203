"""Test doubles for the agent: a virtual clock, a recording event sink and AdmissionReview builders."""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Callable
from typing import Any

from kyma_wire.events import AgentEvent

WALL_START = datetime.datetime(2026, 11, 21, 10, 0, 0, tzinfo=datetime.UTC)


class FakeClock:
    """Virtual time: ``sleep`` advances it at once (and yields to the loop) and records the delay."""

    def __init__(self, start: float = 1000.0) -> None:
        self._start = start
        self.t = start
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.t

    def now(self) -> datetime.datetime:
        return WALL_START + datetime.timedelta(seconds=self.t - self._start)

    def wall(self) -> float:
        return self.now().timestamp()

    def advance(self, seconds: float) -> None:
        self.t += seconds

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += max(0.0, seconds)
        await asyncio.sleep(0)


class RecordingSink:
    def __init__(self) -> None:
        self.events: list[tuple[str, AgentEvent]] = []

    def submit(self, manager: str, event: AgentEvent) -> None:
        self.events.append((manager, event))


async def until(condition: Callable[[], bool], *, turns: int = 10_000) -> None:
    """Let the event loop run until ``condition`` holds (bounded by loop turns, not wall time)."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


def obj(
    name: str = "sample",
    namespace: str = "default",
    *,
    api_version: str = "operator.kyma-project.io/v1beta2",
    kind: str = "Kyma",
    spec: Any = None,
    status: Any = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
    resource_version: str = "1",
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": resource_version}
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    document: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": metadata}
    if spec is not None:
        document["spec"] = spec
    if status is not None:
        document["status"] = status
    document.update(extra or {})
    return document


def review(
    operation: str,
    *,
    new: dict[str, Any] | None = None,
    old: dict[str, Any] | None = None,
    sub_resource: str | None = None,
    dry_run: bool = False,
    uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002",
    api_version: str = "admission.k8s.io/v1",
) -> dict[str, Any]:
    source = new or old or {}
    group, _, version = str(source.get("apiVersion", "v1")).rpartition("/")
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": source.get("kind", "ConfigMap")},
        "resource": {"group": group, "version": version, "resource": "things"},
        "name": source.get("metadata", {}).get("name", ""),
        "namespace": source.get("metadata", {}).get("namespace", ""),
        "operation": operation,
        "userInfo": {"username": "admin", "groups": ["system:masters"]},
        "object": new,
        "oldObject": old,
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"},
    }
    if sub_resource is not None:
        request["subResource"] = sub_resource
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}


def body(document: dict[str, Any]) -> bytes:
    return json.dumps(document).encode()
