"""Hand-off of authenticated agent events to the replica holding their shard (DESIGN.md §10).

Why: every operator replica serves the public listener (the gateway spreads agents over them), but
only the holder of a Kyma's shard reconciles it, and only its intakes and heartbeat tracker matter.
A replica that authenticates an event whose runtime's shard it does not hold hands the already
verified event to the holder over an internal, separately authenticated endpoint
(``handoff_server``, HMAC per ``handoff_auth``); the holder checks again that it holds the shard and
runs the same routing as for a local event, so a forwarded event can never do more than the
original request could (routing is by the authenticated runtime id, which the holder re-derives the
shard from, and the holder applies the original nonce to its own replay cache).

What this module holds:

* the wire models of the internal request and answer (pydantic, bounded);
* :class:`Forwarder`: one pooled ``httpx.AsyncClient`` per process (bounded connections, short
  timeouts, no retries: the agent retries on the 503 the listener answers when the holder does not);
* :class:`Handoff`: the shard decision for an event (local, forward to whom, or nobody holds it),
  the forwarder, and the hand-off metrics.

A batch comes from one runtime, so its events share one shard and go to the holder in one request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Annotated, Literal

import httpx
from prometheus_client import CollectorRegistry, Counter, Histogram
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kcp_listener.handoff_auth import HandoffSigner
from kyma_operator.runtime.shardmap import Replica, ShardView, shard_of
from kyma_wire.events import MAX_BATCH_EVENTS, AgentEvent, Heartbeat

__all__ = [
    "HANDOFF_PATH",
    "Forwarder",
    "Handoff",
    "HandoffMetrics",
    "HandoffRequest",
    "HandoffResponse",
    "HandoffResult",
]

log = logging.getLogger(__name__)

HANDOFF_PATH = "/internal/v1/handoff"
"""The one route of the internal hand-off server."""

DEFAULT_HANDOFF_PORT = 8083

_Text = Annotated[str, Field(max_length=256)]


class HandoffRequest(BaseModel):
    """An authenticated agent request, re-stated by the replica that verified it.

    ``key_id``/``nonce``/``created`` are the agent signature's (empty for an XFCC-only request):
    the holder spends the nonce in its own replay cache, so a request replayed to any replica is
    refused by the holder even though each replica keeps its own cache.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    manager: Annotated[str, Field(min_length=1, max_length=63)]
    route: Literal["event", "events", "heartbeat"]
    runtime_id: Annotated[str, Field(min_length=1, max_length=253)]
    signed: bool = True
    key_id: _Text = ""
    nonce: _Text = ""
    created: int = 0
    events: Annotated[list[AgentEvent], Field(max_length=MAX_BATCH_EVENTS)] = []
    heartbeat: Heartbeat | None = None

    @model_validator(mode="after")
    def _one_payload(self) -> HandoffRequest:
        if self.route == "heartbeat":
            if self.heartbeat is None or self.events:
                raise ValueError("a heartbeat hand-off carries exactly the heartbeat")
        elif (
            not self.events or self.heartbeat is not None or (self.route == "event" and len(self.events) != 1)
        ):
            raise ValueError("an event hand-off carries its events (one for route 'event')")
        return self

    def to_wire(self) -> bytes:
        return self.model_dump_json(by_alias=True, exclude_none=True).encode()


class HandoffResult(BaseModel):
    """The holder's answer for one event (or the heartbeat): what the agent would have got locally."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Annotated[int, Field(ge=100, le=599)]
    error: _Text | None = None
    unrouted: bool = False
    """200 for an XFCC-only event that names no Kyma (upstream's answer)."""


class HandoffResponse(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    results: Annotated[list[HandoffResult], Field(max_length=MAX_BATCH_EVENTS)]

    def to_wire(self) -> bytes:
        return self.model_dump_json(exclude_none=True, exclude_defaults=True).encode()


class HandoffMetrics:
    """Forwarded events by result, received hand-offs by result, forward round-trip latency."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.forwarded = Counter(
            "kcp_listener_handoff_forwarded_events",
            "Authenticated events (and heartbeats) for a shard held by another replica, by result: "
            "delivered (the holder answered), no-holder, holder-unavailable (it answered 503), "
            "failed (network error, timeout or a malformed answer).",
            ["result"],
            registry=registry,
        )
        self.received = Counter(
            "kcp_listener_handoff_received_requests",
            "Hand-off requests received from other replicas, by result: accepted, not-holder, "
            "unauthenticated, invalid, too-large, not-found.",
            ["result"],
            registry=registry,
        )
        self.latency = Histogram(
            "kcp_listener_handoff_seconds",
            "Round trip of one hand-off request to the holder (forwarding side).",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=registry,
        )


class Forwarder:
    """Posts hand-off requests to holders: one pooled client per process, no retries of its own.

    ``forward`` returns the holder's results, or ``None`` when the holder cannot take them now
    (503, refused, timeout, malformed answer); the listener then answers the agent 503 with
    ``Retry-After`` and the agent retries.
    """

    def __init__(
        self,
        signer: HandoffSigner,
        metrics: HandoffMetrics,
        *,
        timeout: float = 2.0,
        max_connections: int = 64,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._signer = signer
        self._metrics = metrics
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 1.0)),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            transport=transport,
            follow_redirects=False,
        )

    async def forward(self, holder: Replica, request: HandoffRequest) -> HandoffResponse | None:
        body = request.to_wire()
        headers = self._signer.headers("POST", HANDOFF_PATH, body)
        headers["content-type"] = "application/json"
        count = max(1, len(request.events))
        started = time.perf_counter()
        result = "failed"
        try:
            response = await self._client.post(
                holder.address.rstrip("/") + HANDOFF_PATH, content=body, headers=headers
            )
        except httpx.HTTPError as error:
            log.info("hand-off to %s (%s) failed: %s", holder.identity, holder.address, type(error).__name__)
            answer = None
        else:
            answer = self._answer(holder, response, count)
            if answer is not None:
                result = "delivered"
            elif response.status_code == 503:
                result = "holder-unavailable"
        self._metrics.latency.observe(time.perf_counter() - started)
        self._metrics.forwarded.labels(result).inc(count)
        return answer

    @staticmethod
    def _answer(holder: Replica, response: httpx.Response, count: int) -> HandoffResponse | None:
        if response.status_code != 200:
            if response.status_code != 503:
                log.warning("hand-off to %s answered %d", holder.identity, response.status_code)
            return None
        try:
            answer = HandoffResponse.model_validate_json(response.content)
        except ValidationError:
            answer = None
        if answer is None or len(answer.results) != count:
            log.warning("hand-off to %s: malformed answer", holder.identity)
            return None
        return answer

    async def aclose(self) -> None:
        await self._client.aclose()


class Handoff:
    """Which replica takes an event of a runtime, and the means to hand it there."""

    def __init__(
        self,
        shards: ShardView,
        metrics: HandoffMetrics,
        forwarder: Callable[[], Forwarder | None],
    ) -> None:
        self.shards = shards
        self.metrics = metrics
        self._forwarder = forwarder

    def holds(self, runtime_id: str) -> bool:
        shards = self.shards
        return shards.holds(shard_of(runtime_id, shards.shards))

    def holder(self, runtime_id: str) -> Replica | None:
        """The other replica holding the runtime's shard; ``None`` if nobody (else) does now."""
        shards = self.shards
        replica = shards.holder(shard_of(runtime_id, shards.shards))
        if replica is None or not replica.address:
            return None
        return replica

    async def forward(self, request: HandoffRequest) -> HandoffResponse | None:
        """Hand ``request`` to its holder; ``None`` if nobody can take it now (answer 503)."""
        holder = self.holder(request.runtime_id)
        forwarder = self._forwarder()
        if holder is None or forwarder is None:
            self.metrics.forwarded.labels("no-holder").inc(max(1, len(request.events)))
            return None
        return await forwarder.forward(holder, request)
