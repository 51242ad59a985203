"""The agent's request bodies and where they go: paths, limits, the event and heartbeat models.

One definition, imported by both sides (``skr_watcher`` sends what ``kcp_listener`` parses). The body
is a superset of the upstream runtime-watcher v2 body, so the upstream Go agent's events parse here
(``"Namespace"``/``"Name"`` keys) and our agent's events would parse in the upstream listener.
"""

from __future__ import annotations

import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

CONTRACT_VERSION = "v2"
MAX_BODY_BYTES = 16 * 1024
"""Upstream's ``http.MaxBytesHandler(16384)``; larger bodies get 413 and are never parsed."""
MAX_BATCH_EVENTS = 256
"""Most events in one batch request."""
MAX_BATCH_BYTES = 512 * 1024
"""Largest batch body; larger ones get 413 and are never parsed (the agent stays far below)."""


def event_path(manager: str) -> str:
    """``/v2/<manager>/event``: where agents post events (and upstream's only route)."""
    return f"/{CONTRACT_VERSION}/{manager}/event"


def batch_path(manager: str) -> str:
    """``/v2/<manager>/events``: ours, many events in one signed request (see :class:`EventBatch`).

    An upstream listener does not offer it (404/405): the agent then falls back to ``event_path``.
    """
    return f"/{CONTRACT_VERSION}/{manager}/events"


DEFAULT_HEARTBEAT_INTERVAL_SECONDS = 30.0
"""How often an agent sends a heartbeat unless configured otherwise."""
DEFAULT_HEARTBEAT_MAX_SILENCE_SECONDS = 180.0
"""How long KCP waits without a heartbeat before it counts a runtime's agent as unhealthy (six
missed heartbeats): one value for the listener's tracker and the Kyma controller's condition."""


def heartbeat_path(manager: str) -> str:
    """``/v2/<manager>/heartbeat``: our extension; proves the agent is alive while nothing changes."""
    return f"/{CONTRACT_VERSION}/{manager}/heartbeat"


_Name = Annotated[str, Field(max_length=253)]


class _Wire(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="ignore")


class ObjectKey(_Wire):
    """A namespaced name; accepts upstream's Go ``types.NamespacedName`` keys ``Namespace``/``Name``."""

    namespace: _Name = Field(default="", validation_alias=AliasChoices("namespace", "Namespace"))
    name: Annotated[_Name, Field(min_length=1)] = Field(validation_alias=AliasChoices("name", "Name"))


class GroupVersionKind(_Wire):
    group: Annotated[str, Field(max_length=253)] = ""
    version: Annotated[str, Field(min_length=1, max_length=63)]
    kind: Annotated[str, Field(min_length=1, max_length=63)]


class Operation(StrEnum):
    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    RESYNC = "RESYNC"
    """Ours: the agent lost or dropped events (KCP unreachable, queue overflow); reconcile everything
    of this runtime (its Kyma and all its Manifests)."""


class AgentEvent(_Wire):
    """What the agent posts to ``event_path``. ``operation``, ``owner`` and ``observedAt`` are ours.

    Upstream (runtime-watcher) calls this body ``WatchEvent``; here it is ``AgentEvent`` so that it
    is never mistaken for a Kubernetes watch event (``kyma_operator.runtime.kube.WatchEvent``,
    metav1's ``WatchEvent``). The name is not on the wire: the JSON body is unchanged.
    """

    watched: ObjectKey
    watched_gvk: GroupVersionKind = Field(
        serialization_alias="watchedGvk", validation_alias=AliasChoices("watchedGvk", "watched_gvk")
    )
    operation: Operation | None = None
    owner: ObjectKey | None = None
    """The Manifest owning the watched object (from the ``owned-by`` annotation), if any."""
    observed_at: datetime.datetime | None = Field(
        default=None,
        serialization_alias="observedAt",
        validation_alias=AliasChoices("observedAt", "observed_at"),
    )

    def to_wire(self) -> bytes:
        """The JSON body the agent sends (aliases, no nulls, lower-case keys)."""
        return self.model_dump_json(by_alias=True, exclude_none=True).encode()


class Heartbeat(_Wire):
    """What the agent posts to ``heartbeat_path``: proof of life plus its own delivery view."""

    sent_at: datetime.datetime = Field(
        serialization_alias="sentAt", validation_alias=AliasChoices("sentAt", "sent_at")
    )
    queue_depth: Annotated[int, Field(ge=0)] = Field(
        default=0,
        serialization_alias="queueDepth",
        validation_alias=AliasChoices("queueDepth", "queue_depth"),
    )
    agent_version: Annotated[str, Field(max_length=64)] = Field(
        default="",
        serialization_alias="agentVersion",
        validation_alias=AliasChoices("agentVersion", "agent_version"),
    )

    def to_wire(self) -> bytes:
        return self.model_dump_json(by_alias=True, exclude_none=True).encode()


class EventBatch(_Wire):
    """What the agent posts to ``batch_path``: events that would otherwise be separate requests.

    One signature covers the whole body; the listener verifies once and routes each event exactly as
    if it had come alone, answering per event (:class:`BatchResult`, same order).
    """

    events: Annotated[list[AgentEvent], Field(min_length=1, max_length=MAX_BATCH_EVENTS)]

    @staticmethod
    def wire_of(bodies: list[bytes]) -> bytes:
        """The batch body around events already in wire form (``AgentEvent.to_wire``)."""
        return b'{"events":[' + b",".join(bodies) + b"]}"


class EventResult(_Wire):
    """The answer for one event of a batch: the status code it would have got on its own."""

    status: Annotated[int, Field(ge=100, le=599)]
    error: Annotated[str, Field(max_length=256)] | None = None


class BatchResult(_Wire):
    """The listener's 200 answer to a batch: one result per event, in the order sent.

    A ``Retry-After`` header applies to the events answered 429/503.
    """

    results: list[EventResult]

    def to_wire(self) -> bytes:
        return self.model_dump_json(exclude_none=True).encode()
