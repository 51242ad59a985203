"""Reliable delivery of the agent's events to KCP: sender tasks, batches, retries, resyncs, heartbeats.

The admission handler hands events to ``submit`` (never blocks, never does I/O). A few sender tasks
drain the coalescing queue and post each event until KCP accepts it, a newer event for the same
object supersedes it, or KCP rejects it definitively. Losses (queue overflow, rejections) and outages
schedule one RESYNC event for the manager, sent when KCP answers again. A heartbeat proves liveness
while nothing changes. ``stop`` flushes what is queued within a deadline.

Batching (ours, beyond upstream): a request costs the agent ~1 ms of CPU (TLS, HTTP client,
signature) whatever it carries, and the admissions are answered on the same event loop. So when
events come faster than one per ``batch_interval``, a sender waits for the rest of the interval and
posts everything queued for the manager (up to ``batch_max_events``) in one signed request to
``/v2/<manager>/events``; the listener answers per event and only the events not accepted are
retried. An idle agent still sends its first event at once (no added latency), a backlog is sent
without waiting. A listener without the route (upstream's: 404/405) gets single events, and the
route is tried again after ``BATCH_RETRY_SECONDS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from pydantic import ValidationError

from kyma_wire.events import (
    MAX_BATCH_EVENTS,
    AgentEvent,
    BatchResult,
    EventBatch,
    Heartbeat,
    Operation,
    batch_path,
    event_path,
    heartbeat_path,
)
from kyma_wire.http_client import HttpResponse
from kyma_wire.names import OPERATOR_NAME
from skr_watcher.clock import AgentClock
from skr_watcher.kcp_client import KcpClient
from skr_watcher.metrics import AgentMetrics
from skr_watcher.queue import QueuedEvent, SendQueue
from skr_watcher.resync import ResyncTracker, resync_event
from skr_watcher.retry import (
    RetryBackoff,
    SendResult,
    Verdict,
    classify_error,
    classify_response,
    parse_retry_after,
)

log = logging.getLogger(__name__)

BATCH_RETRY_SECONDS = 300.0
"""After a listener answered the batch route with 404/405: how long to send single events only."""
_NO_BATCH_ROUTE = frozenset({404, 405})


class Delivery:
    def __init__(
        self,
        *,
        client: KcpClient,
        queue: SendQueue,
        metrics: AgentMetrics,
        clock: AgentClock,
        backoff: RetryBackoff,
        sender_tasks: int = 4,
        heartbeat_manager: str = OPERATOR_NAME,
        heartbeat_interval: float = 30.0,
        agent_version: str = "",
        tracker: ResyncTracker | None = None,
        batch_max_events: int = 1,
        batch_interval: float = 0.0,
    ) -> None:
        if not 1 <= batch_max_events <= MAX_BATCH_EVENTS:
            raise ValueError(f"batch_max_events must be 1..{MAX_BATCH_EVENTS}")
        self.client = client
        self.queue = queue
        self.metrics = metrics
        self.clock = clock
        self.backoff = backoff
        self.tracker = tracker or ResyncTracker()
        self._sender_count = sender_tasks
        self._heartbeat_manager = heartbeat_manager
        self._heartbeat_interval = heartbeat_interval
        self._agent_version = agent_version[:64]
        self._senders: list[asyncio.Task[None]] = []
        self._heartbeat: asyncio.Task[None] | None = None
        self._overflow_drops = 0
        self._batch_max = batch_max_events
        self._batch_interval = batch_interval
        self._next_batch_at = 0.0
        self._no_batch_until: dict[str, float] = {}
        metrics.queue_depth.set_function(lambda: float(len(queue)))

    # -- admission side ---------------------------------------------------------------------------

    def submit(self, manager: str, event: AgentEvent) -> None:
        """Queue ``event`` for ``manager`` (coalescing); the oldest entry goes if the queue is full."""
        if self.queue.closed:
            self.metrics.events_dropped.labels("shutdown").inc()
            self.tracker.mark(manager)
            return
        result = self.queue.put(manager, event, self.clock.monotonic())
        if result.coalesced:
            self.metrics.events_coalesced.inc()
        else:
            self.metrics.events_queued.inc()
        dropped = result.dropped
        if dropped is not None:
            self.metrics.events_dropped.labels("overflow").inc()
            self._overflow_drops += 1
            if dropped.operation is Operation.RESYNC:
                self.tracker.lost(dropped.manager)
            else:
                self.tracker.mark(dropped.manager)
            if self._overflow_drops % 1000 == 1:
                log.warning(
                    "send queue full (%d entries): dropped the oldest event (%s %s/%s), "
                    "%d dropped so far; a resync will follow",
                    self.queue.maxsize,
                    dropped.key.kind,
                    dropped.key.namespace,
                    dropped.key.name,
                    self._overflow_drops,
                )

    def request_resync(self, manager: str) -> None:
        """Queue a RESYNC now (agent start: changes before it may have been missed)."""
        self.tracker.schedule(manager)
        self.metrics.resync_events.inc()
        self.submit(manager, resync_event(self.clock.utc_now()))

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        self._senders = [
            asyncio.create_task(self._sender(), name=f"skr-watcher-sender-{i}")
            for i in range(self._sender_count)
        ]
        if self._heartbeat_interval > 0:
            self._heartbeat = asyncio.create_task(self._heartbeats(), name="skr-watcher-heartbeat")

    async def stop(self, flush_within: float) -> int:
        """Stop heartbeats, deliver what is queued within ``flush_within`` s; returns events left over."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
        self.queue.close()
        senders = list(self._senders)
        if senders:
            _done, pending = await asyncio.wait(senders, timeout=flush_within)
            for task in pending:
                task.cancel()
            for task in pending:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            unfinished = len(pending)
        else:
            unfinished = 0
        left = len(self.queue) + unfinished
        if left:
            self.metrics.events_dropped.labels("shutdown").inc(left)
            log.warning("shutdown deadline reached with %d events undelivered", left)
        else:
            log.info("send queue flushed")
        return left

    # -- sending ----------------------------------------------------------------------------------

    async def _sender(self) -> None:
        while True:
            entry = await self.queue.get()
            if entry is None:
                return
            batch = [entry]
            try:
                # again after pacing: another sender may have found the route missing meanwhile
                if self._batching(entry.manager):
                    await self._pace()
                    if self._batching(entry.manager):
                        batch += self.queue.take_more(entry.manager, self._batch_max - 1)
                if len(batch) == 1:
                    await self._deliver(entry)
                else:
                    await self._deliver_batch(batch)
            finally:
                for taken in batch:
                    self.queue.done(taken)

    def _batching(self, manager: str) -> bool:
        if self._batch_max <= 1:
            return False
        until = self._no_batch_until.get(manager)
        if until is None:
            return True
        if self.clock.monotonic() < until:
            return False
        del self._no_batch_until[manager]
        return True

    async def _pace(self) -> None:
        """Wait until ``batch_interval`` after the previous batch started, unless a full batch waits.

        The first event after a quiet spell goes at once; while events keep coming, at most one
        request per interval leaves, carrying everything that came meanwhile.
        """
        now = self.clock.monotonic()
        if len(self.queue) + 1 >= self._batch_max:
            self._next_batch_at = now + self._batch_interval
            return
        start = max(now, self._next_batch_at)
        self._next_batch_at = start + self._batch_interval
        if start > now:
            await self.clock.sleep(start - now)

    async def _deliver_batch(self, batch: list[QueuedEvent]) -> None:
        """Post ``batch`` (one manager) until every event is delivered, superseded or rejected."""
        manager = batch[0].manager
        pending = batch
        attempt = 0
        while True:
            # also before the first try: a newer event for an object may have joined this batch
            pending = self._not_superseded(pending)
            if not pending:
                return
            if len(pending) == 1:
                await self._deliver(pending[0], attempt)
                return
            body = EventBatch.wire_of([entry.to_wire() for entry in pending])
            self.metrics.batches.inc()
            self.metrics.batched_events.inc(len(pending))
            result, response = await self._request(batch_path(manager), body)
            if result.status in _NO_BATCH_ROUTE:
                self._batch_route_missing(manager, result.status)
                for entry in pending:
                    await self._deliver(entry)
                return
            if result.verdict is Verdict.DELIVERED and response is not None:
                answers = self._batch_answers(response, len(pending))
                if answers is None:  # not our listener's answer: play safe, one by one
                    self._batch_route_missing(manager, result.status or 200)
                    for entry in pending:
                        await self._deliver(entry)
                    return
                self._answered(manager)
                retry: list[QueuedEvent] = []
                for entry, answer in zip(pending, answers, strict=True):
                    if not self._settle(entry, answer):
                        retry.append(entry)
                pending = retry
                if not pending:
                    return
                retry_after = parse_retry_after(response.headers.get("retry-after"), self.clock.utc_now())
            elif result.verdict is Verdict.DROP:
                if result.status == 413:  # a listener with a smaller batch limit: one by one
                    for entry in pending:
                        await self._deliver(entry)
                    return
                for entry in pending:
                    self._settle(entry, result)
                return
            else:
                retry_after = result.retry_after
            self.tracker.mark(manager)
            attempt += 1
            await self.clock.sleep(self.backoff.delay(attempt, retry_after))

    def _not_superseded(self, entries: list[QueuedEvent]) -> list[QueuedEvent]:
        kept = []
        for entry in entries:
            if self.queue.is_superseded(entry):
                self.metrics.events_superseded.inc()
            else:
                kept.append(entry)
        return kept

    def _batch_route_missing(self, manager: str, status: int) -> None:
        """Single events for ``manager`` for a while; counted and logged once per switch (batches
        that were under way at the same time get the same answer)."""
        switching = not self._no_batch_until.get(manager, 0.0) > self.clock.monotonic()
        self._no_batch_until[manager] = self.clock.monotonic() + BATCH_RETRY_SECONDS
        if not switching:
            return
        self.metrics.batch_fallbacks.inc()
        log.info(
            "KCP answered %d without per-event results on the batch route for %s (an upstream"
            " listener?): sending events one by one, trying batches again in %.0f s",
            status,
            manager,
            BATCH_RETRY_SECONDS,
        )

    def _batch_answers(self, response: HttpResponse, count: int) -> list[SendResult] | None:
        try:
            results = BatchResult.model_validate_json(response.content).results
        except ValidationError:
            results = []
        if len(results) != count:
            log.warning("KCP's answer to a batch of %d events is not one result per event", count)
            return None
        headers = response.headers
        now = self.clock.utc_now()
        return [classify_response(r.status, headers, now) for r in results]

    def _settle(self, entry: QueuedEvent, result: SendResult) -> bool:
        """Book a final answer for ``entry`` (True), or note it must be retried (False)."""
        manager = entry.manager
        is_resync = entry.operation is Operation.RESYNC
        if result.verdict is Verdict.DELIVERED:
            self.metrics.events_sent.inc()
            self.metrics.delivery_latency.observe(max(0.0, self.clock.monotonic() - entry.enqueued_at))
            if is_resync:
                self.tracker.delivered(manager)
            return True
        if result.verdict is Verdict.DROP:
            self.metrics.events_dropped.labels("rejected").inc()
            log.warning(
                "KCP rejected the %s event for %s %s/%s (%s); dropped",
                entry.operation or "UPDATE",
                entry.key.kind,
                entry.key.namespace,
                entry.key.name,
                result.reason,
            )
            if is_resync:
                self.tracker.rejected(manager)
            elif result.status != 404:
                # KCP missed this change: a resync covers it. A 404 means KCP has nothing the event
                # could concern (no Kyma or Manifest for it): nothing was missed, no resync.
                self.tracker.mark(manager)
            return True
        return False

    async def _deliver(self, entry: QueuedEvent, attempt: int = 0) -> None:
        """Post one event until it is delivered, superseded or rejected (``attempt``: tries so far)."""
        manager = entry.manager
        while True:
            if attempt and self.queue.is_superseded(entry):
                self.metrics.events_superseded.inc()
                return
            result, _response = await self._request(event_path(manager), entry.to_wire())
            if self._settle(entry, result):
                if result.verdict is Verdict.DELIVERED:
                    self._answered(manager)
                return
            self.tracker.mark(manager)
            attempt += 1
            await self.clock.sleep(self.backoff.delay(attempt, result.retry_after))

    async def _post(self, path: str, body: bytes) -> SendResult:
        return (await self._request(path, body))[0]

    async def _request(self, path: str, body: bytes) -> tuple[SendResult, HttpResponse | None]:
        self.metrics.kcp_requests.inc()
        started = time.perf_counter()
        response: HttpResponse | None = None
        try:
            response = await self.client.post(path, body)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            result = classify_error(error)
            log.debug("POST %s failed: %s: %s", path, type(error).__name__, error)
        else:
            result = classify_response(response.status_code, response.headers, self.clock.utc_now())
            if result.verdict is not Verdict.DELIVERED:
                log.debug("POST %s answered %d: %s", path, response.status_code, response.text[:200])
        self.metrics.send_duration.observe(time.perf_counter() - started)
        if result.verdict is Verdict.DELIVERED:
            self.metrics.last_success.set(self.clock.utc_now().timestamp())
        else:
            self.metrics.kcp_failures.labels(result.reason).inc()
        return result, response

    def _answered(self, manager: str) -> None:
        """KCP accepted a request for ``manager``: the moment to send a pending resync."""
        if self.tracker.should_schedule(manager):
            log.info("KCP answers again for %s: queueing a resync event", manager)
            self.metrics.resync_events.inc()
            self.submit(manager, resync_event(self.clock.utc_now()))

    # -- heartbeat --------------------------------------------------------------------------------

    async def _heartbeats(self) -> None:
        manager = self._heartbeat_manager
        while True:
            beat = Heartbeat(
                sent_at=self.clock.utc_now(), queue_depth=len(self.queue), agent_version=self._agent_version
            )
            result = await self._post(heartbeat_path(manager), beat.to_wire())
            self.metrics.heartbeats.labels(result.verdict.value).inc()
            if result.verdict is Verdict.DELIVERED:
                self._answered(manager)
            elif result.verdict is Verdict.RETRY:
                self.tracker.mark(manager)
            await self.clock.sleep(self._heartbeat_interval)
