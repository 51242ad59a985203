"""Reliable delivery of watch events to KCP: sender tasks, retries, resyncs and heartbeats.

The admission handler hands events to ``submit`` (never blocks, never does I/O). A few sender tasks
drain the coalescing queue and post each event until KCP accepts it, a newer event for the same
object supersedes it, or KCP rejects it definitively. Losses (queue overflow, rejections) and outages
schedule one RESYNC event for the manager, sent when KCP answers again. A heartbeat proves liveness
while nothing changes. ``stop`` flushes what is queued within a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from kyma_wire.events import AgentEvent, Heartbeat, Operation, event_path, heartbeat_path
from kyma_wire.names import OPERATOR_NAME
from skr_watcher.clock import Clock
from skr_watcher.kcp_client import KcpClient
from skr_watcher.metrics import AgentMetrics
from skr_watcher.queue import QueuedEvent, SendQueue
from skr_watcher.resync import ResyncTracker, resync_event
from skr_watcher.retry import Backoff, SendResult, Verdict, classify_error, classify_response

log = logging.getLogger(__name__)


class Delivery:
    def __init__(
        self,
        *,
        client: KcpClient,
        queue: SendQueue,
        metrics: AgentMetrics,
        clock: Clock,
        backoff: Backoff,
        sender_tasks: int = 4,
        heartbeat_manager: str = OPERATOR_NAME,
        heartbeat_interval: float = 30.0,
        agent_version: str = "",
        tracker: ResyncTracker | None = None,
    ) -> None:
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
            if dropped.event.operation is Operation.RESYNC:
                self.tracker.lost(dropped.manager)
            else:
                self.tracker.mark(dropped.manager)
            if self._overflow_drops % 1000 == 1:
                log.warning(
                    "send queue full (%d entries): dropped the oldest event (%s %s/%s), "
                    "%d dropped so far; a resync will follow",
                    self.queue.maxsize,
                    dropped.event.watched_gvk.kind,
                    dropped.event.watched.namespace,
                    dropped.event.watched.name,
                    self._overflow_drops,
                )

    def request_resync(self, manager: str) -> None:
        """Queue a RESYNC now (agent start: changes before it may have been missed)."""
        self.tracker.schedule(manager)
        self.metrics.resync_events.inc()
        self.submit(manager, resync_event(self.clock.now()))

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
            try:
                await self._deliver(entry)
            finally:
                self.queue.done(entry)

    async def _deliver(self, entry: QueuedEvent) -> None:
        manager = entry.manager
        is_resync = entry.event.operation is Operation.RESYNC
        attempt = 0
        while True:
            if attempt and self.queue.is_superseded(entry):
                self.metrics.events_superseded.inc()
                return
            result = await self._post(event_path(manager), entry.event.to_wire())
            if result.verdict is Verdict.DELIVERED:
                self.metrics.events_sent.inc()
                self.metrics.delivery_latency.observe(max(0.0, self.clock.monotonic() - entry.enqueued_at))
                if is_resync:
                    self.tracker.delivered(manager)
                self._answered(manager)
                return
            if result.verdict is Verdict.DROP:
                self.metrics.events_dropped.labels("rejected").inc()
                log.warning(
                    "KCP rejected the %s event for %s %s/%s (%s); dropped",
                    entry.event.operation or "UPDATE",
                    entry.event.watched_gvk.kind,
                    entry.event.watched.namespace,
                    entry.event.watched.name,
                    result.reason,
                )
                if is_resync:
                    self.tracker.rejected(manager)
                else:
                    self.tracker.mark(manager)
                return
            self.tracker.mark(manager)
            attempt += 1
            await self.clock.sleep(self.backoff.delay(attempt, result.retry_after))

    async def _post(self, path: str, body: bytes) -> SendResult:
        self.metrics.kcp_requests.inc()
        started = time.perf_counter()
        try:
            response = await self.client.post(path, body)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            result = classify_error(error)
            log.debug("POST %s failed: %s: %s", path, type(error).__name__, error)
        else:
            result = classify_response(response.status_code, response.headers, self.clock.now())
            if result.verdict is not Verdict.DELIVERED:
                log.debug("POST %s answered %d: %s", path, response.status_code, response.text[:200])
        self.metrics.send_duration.observe(time.perf_counter() - started)
        if result.verdict is Verdict.DELIVERED:
            self.metrics.last_success.set(self.clock.now().timestamp())
        else:
            self.metrics.kcp_failures.labels(result.reason).inc()
        return result

    def _answered(self, manager: str) -> None:
        """KCP accepted a request for ``manager``: the moment to send a pending resync."""
        if self.tracker.should_schedule(manager):
            log.info("KCP answers again for %s: queueing a resync event", manager)
            self.metrics.resync_events.inc()
            self.submit(manager, resync_event(self.clock.now()))

    # -- heartbeat --------------------------------------------------------------------------------

    async def _heartbeats(self) -> None:
        manager = self._heartbeat_manager
        while True:
            beat = Heartbeat(
                sent_at=self.clock.now(), queue_depth=len(self.queue), agent_version=self._agent_version
            )
            result = await self._post(heartbeat_path(manager), beat.to_wire())
            self.metrics.heartbeats.labels(result.verdict.value).inc()
            if result.verdict is Verdict.DELIVERED:
                self._answered(manager)
            elif result.verdict is Verdict.RETRY:
                self.tracker.mark(manager)
            await self.clock.sleep(self._heartbeat_interval)
