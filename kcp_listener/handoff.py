"""Hand-off of authenticated agent events to the replica holding their shard (docs/sharding-handoff.md).

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
* :class:`Forwarder`: one per process, over one pooled client (``kyma_wire.http_client``, shared
  with the agent; not httpx: one httpx request cost ~650-900 us of CPU here against ~100 us, and
  with three replicas two thirds of all agent events are handed off). Bounded connections per
  holder, one deadline per request, no retries of its own (the agent retries on the 503 the
  listener answers when the holder does not); a request that failed on a reused connection before
  any answer byte is sent once more byte for byte (the holder accepts each HMAC nonce once);
* :class:`Handoff`: the shard decision for an event (local, forward to whom, or nobody holds it),
  the forwarder, and the hand-off metrics.

A batch comes from one runtime, so its events share one shard and go to the holder together; hand-offs
of several agent requests to one holder share an internal request under load (``Forwarder``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Annotated, Literal, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kcp_listener.handoff_auth import HandoffSigner
from kyma_wire.events import MAX_BATCH_EVENTS, AgentEvent, Heartbeat
from kyma_wire.http_client import HttpClient, HttpTransport, HttpTransportError

__all__ = [
    "HANDOFF_PATH",
    "Forwarder",
    "Handoff",
    "HandoffAnswers",
    "HandoffEnvelope",
    "HandoffMetrics",
    "HandoffRequest",
    "HandoffResponse",
    "HandoffResult",
    "Holder",
    "RuntimeShards",
]

log = logging.getLogger(__name__)

HANDOFF_PATH = "/internal/v1/handoff"
"""The one route of the internal hand-off server."""

DEFAULT_HANDOFF_PORT = 8083

MAX_FAILING_LOGGED = 256
"""Holder addresses remembered as failing (log once per outage); beyond that the memory resets."""

MAX_ENVELOPE_REQUESTS = 256
"""Agent requests per internal request (the forwarder also stops at ``max_body_bytes``)."""
MAX_ENVELOPE_EVENTS = MAX_BATCH_EVENTS

_Text = Annotated[str, Field(max_length=256)]


class Holder(Protocol):
    """The replica holding a runtime's shard, as the forwarder needs it (the operator's
    ``kyma_operator.runtime.shardmap.Replica`` is one)."""

    @property
    def identity(self) -> str:
        """Its name in logs (the Lease holder identity)."""
        ...

    @property
    def address(self) -> str:
        """``scheme://host:port`` of its internal hand-off endpoint; empty when it publishes none."""
        ...


class RuntimeShards(Protocol):
    """Which replica takes a runtime's events, answered from memory. The listener asks by runtime
    id and knows nothing of shard numbers or Leases; the operator answers from its shard map
    (``kyma_operator.listener.shards.RuntimeShardView``)."""

    def holds(self, runtime_id: str) -> bool:
        """True only while this replica holds the runtime's shard."""
        ...

    def holder(self, runtime_id: str) -> Holder | None:
        """The replica holding the runtime's shard (this one included), ``None`` if nobody does."""
        ...

    def held_since(self, runtime_id: str) -> float | None:
        """Wall-clock seconds since this replica holds the runtime's shard without a break; None if
        it does not. A previous holder accepted nothing after it (the replay rule, ``intake``)."""
        ...


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


class HandoffEnvelope(BaseModel):
    """One internal request: hand-offs of several agent requests for the same holder (see Forwarder)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests: Annotated[list[HandoffRequest], Field(min_length=1, max_length=MAX_ENVELOPE_REQUESTS)]


class HandoffAnswers(BaseModel):
    """The holder's answer, one per request in order; ``None``: that runtime's shard is not held here."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    answers: Annotated[list[HandoffResponse | None], Field(max_length=MAX_ENVELOPE_REQUESTS)]

    @staticmethod
    def wire_of(answers: list[HandoffResponse | None]) -> bytes:
        return b'{"answers":[' + b",".join(b"null" if a is None else a.to_wire() for a in answers) + b"]}"


class HandoffMetrics:
    """Forwarded events by result, received hand-offs by result, forward round-trip latency."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.forwarded = Counter(
            "kcp_listener_handoff_forwarded_events",
            "Authenticated events (and heartbeats) for a shard held by another replica, by result: "
            "delivered (the holder answered), no-holder, not-holder (the replica named as holder "
            "does not hold the shard), holder-unavailable (it answered 503), failed (network error, "
            "timeout or a malformed answer).",
            ["result"],
            registry=registry,
        )
        self.received = Counter(
            "kcp_listener_handoff_received_requests",
            "Hand-offs received from other replicas, by result: accepted, not-holder (per agent "
            "request); unauthenticated, invalid, too-large, not-found, not-serving (per internal request).",
            ["result"],
            registry=registry,
        )
        self.refused = Counter(
            "kcp_listener_handoff_refused_requests",
            "Internal hand-off requests this replica refused as unauthenticated (401), by reason: "
            "malformed, unknown-key (signed only with keys this replica does not hold), "
            "bad-signature, expired, replay, replay-cache-full.",
            ["reason"],
            registry=registry,
        )
        self.verified = Counter(
            "kcp_listener_handoff_verified_requests",
            "Internal hand-off requests this replica authenticated, by the role of the key that "
            "verified them here: current, or previous (the sender has not seen this replica's "
            "current key yet: a rotation is under way).",
            ["key"],
            registry=registry,
        )
        self.latency = Histogram(
            "kcp_listener_handoff_seconds",
            "Round trip of one internal hand-off request to a holder (forwarding side; its count is "
            "the number of internal requests).",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=registry,
        )


class _Lane:
    """Hand-offs waiting for one holder, and how many internal requests to it are under way."""

    __slots__ = ("inflight", "pending")

    def __init__(self) -> None:
        self.pending: deque[tuple[HandoffRequest, bytes, asyncio.Future[HandoffResponse | None]]] = deque()
        self.inflight = 0


class Forwarder:
    """Posts hand-offs to holders: one pooled client per process, no retries of its own.

    ``forward`` returns the holder's results, or ``None`` when the holder cannot take them now
    (503, not holding the shard, refused, timeout, malformed answer); the listener then answers the
    agent 503 with ``Retry-After`` and the agent retries.

    Why envelopes: every internal HTTP request costs CPU on both replicas (here ~100 us per side,
    next to ~260 us for a whole local event; ``benchmarks/results/listener.md``). Hand-offs to
    one holder therefore share internal requests: at most ``parallel`` requests per holder are
    under way; a hand-off that arrives while all are busy waits for the next one, which carries
    every hand-off waiting by then (up to ``MAX_ENVELOPE_REQUESTS``/``MAX_ENVELOPE_EVENTS`` and
    ``max_body_bytes``). An isolated event goes at once (no added latency); under load the cost
    per event falls with the envelope size.
    """

    def __init__(
        self,
        signer: HandoffSigner,
        metrics: HandoffMetrics,
        *,
        timeout: float = 2.0,
        parallel: int = 4,
        max_body_bytes: int = 1024 * 1024,
        client: HttpTransport | None = None,
    ) -> None:
        self._signer = signer
        self._metrics = metrics
        self._parallel = parallel
        self._max_body = max_body_bytes
        self._lanes: dict[str, _Lane] = {}
        self._failing: set[str] = set()
        """Holder addresses whose last internal request failed: logged once per outage."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._client: HttpTransport = (
            client if client is not None else HttpClient(max_connections=parallel, timeout=timeout)
        )

    async def forward(self, holder: Holder, request: HandoffRequest) -> HandoffResponse | None:
        lane = self._lanes.get(holder.address)
        if lane is None:
            lane = self._lanes[holder.address] = _Lane()
        answer: asyncio.Future[HandoffResponse | None] = asyncio.get_running_loop().create_future()
        lane.pending.append((request, request.to_wire(), answer))
        if lane.inflight < self._parallel:
            lane.inflight += 1
            task = asyncio.create_task(self._drain(holder, lane), name="kcp-listener-handoff")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await answer

    async def _drain(self, holder: Holder, lane: _Lane) -> None:
        try:
            while lane.pending:
                items = self._take(lane)
                try:
                    await self._post(holder, items)
                finally:  # cancelled (shutdown): the waiting agent requests get 503, never hang
                    for _, _, future in items:
                        if not future.done():
                            future.set_result(None)
        finally:
            lane.inflight -= 1
            if not lane.inflight and not lane.pending and self._lanes.get(holder.address) is lane:
                del self._lanes[holder.address]  # holders come and go: keep no lane for a gone one

    def _take(
        self, lane: _Lane
    ) -> list[tuple[HandoffRequest, bytes, asyncio.Future[HandoffResponse | None]]]:
        """The next envelope's hand-offs: at least one, then while the bounds allow."""
        taken = [lane.pending.popleft()]
        size = len(taken[0][1]) + 16
        events = len(taken[0][0].events)
        pending = lane.pending
        while pending and len(taken) < MAX_ENVELOPE_REQUESTS:
            request, body, _ = pending[0]
            if size + len(body) + 1 > self._max_body or events + len(request.events) > MAX_ENVELOPE_EVENTS:
                break
            taken.append(pending.popleft())
            size += len(body) + 1
            events += len(request.events)
        return taken

    async def _post(
        self,
        holder: Holder,
        items: list[tuple[HandoffRequest, bytes, asyncio.Future[HandoffResponse | None]]],
    ) -> None:
        body = b'{"requests":[' + b",".join(item[1] for item in items) + b"]}"
        headers = self._signer.headers("POST", HANDOFF_PATH, body)
        headers["content-type"] = "application/json"
        started = time.perf_counter()
        answers: list[HandoffResponse | None] = [None] * len(items)
        result = "failed"
        try:
            response = await self._client.post(holder.address.rstrip("/") + HANDOFF_PATH, body, headers)
        except HttpTransportError as error:
            self._failed(holder, error)
        except Exception:  # never leave a waiting agent request without an answer
            log.exception("hand-off to %s failed", holder.identity)
        else:
            if holder.address in self._failing:
                self._failing.discard(holder.address)
                log.info("hand-off to %s (%s) answers again", holder.identity, holder.address)
            parsed = self._answers(holder, response.status_code, response.content, len(items))
            if parsed is not None:
                answers = parsed
                result = "delivered"
            elif response.status_code == 503:
                result = "holder-unavailable"
        self._metrics.latency.observe(time.perf_counter() - started)
        forwarded = self._metrics.forwarded
        for (request, _, future), answer in zip(items, answers, strict=True):
            count = max(1, len(request.events))
            forwarded.labels("not-holder" if answer is None and result == "delivered" else result).inc(count)
            if not future.done():
                future.set_result(answer)

    def _failed(self, holder: Holder, error: HttpTransportError) -> None:
        """Log a holder's outage once, not per event: while a killed holder's shards move, every
        agent retry would fail the same way (the count is in the ``failed`` metric)."""
        if holder.address in self._failing:
            log.debug("hand-off to %s (%s) failed: %s", holder.identity, holder.address, error)
            return
        if len(self._failing) >= MAX_FAILING_LOGGED:
            self._failing.clear()  # bounded: addresses of holders gone for good do not pile up
        self._failing.add(holder.address)
        log.warning(
            "hand-off to %s (%s) failed: %s (further failures to it counted in"
            ' kcp_listener_handoff_forwarded_events_total{result="failed"} until it answers again)',
            holder.identity,
            holder.address,
            error,
        )

    @staticmethod
    def _answers(
        holder: Holder, status: int, content: bytes, count: int
    ) -> list[HandoffResponse | None] | None:
        if status != 200:
            if status != 503:
                log.warning("hand-off to %s answered %d", holder.identity, status)
            return None
        try:
            answers = HandoffAnswers.model_validate_json(content).answers
        except ValidationError:
            answers = []
        if len(answers) != count:
            log.warning("hand-off to %s: malformed answer", holder.identity)
            return None
        return answers

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for lane in self._lanes.values():
            while lane.pending:
                future = lane.pending.popleft()[2]
                if not future.done():
                    future.set_result(None)
        await self._client.aclose()


class Handoff:
    """Which replica takes an event of a runtime, and the means to hand it there."""

    def __init__(
        self,
        shards: RuntimeShards,
        metrics: HandoffMetrics,
        forwarder: Callable[[], Forwarder | None],
    ) -> None:
        self.shards = shards
        self.metrics = metrics
        self._forwarder = forwarder

    def holds(self, runtime_id: str) -> bool:
        return self.shards.holds(runtime_id)

    def held_since(self, runtime_id: str) -> float | None:
        """Wall-clock seconds since this replica holds the runtime's shard; None if it does not."""
        return self.shards.held_since(runtime_id)

    def holder(self, runtime_id: str) -> Holder | None:
        """The other replica holding the runtime's shard; ``None`` if nobody (else) does now."""
        replica = self.shards.holder(runtime_id)
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
