"""Assembly and lifecycle of one agent process: servers, sender tasks, heartbeat, credential reload.

Everything the agent consists of is created here from an ``AgentConfig``; the clock and the HTTP
transport to KCP can be injected (tests, benchmarks). ``run`` serves until ``stop`` is set, then shuts
down in the order that loses nothing avoidable: stop taking admissions, flush the send queue within
``SHUTDOWN_TIMEOUT``, close the KCP client, stop the health server.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random

from kyma_wire.heap_trim import HeapTrimmer, libc_trim
from kyma_wire.http_client import HttpTransport
from kyma_wire.http_server import HttpServer, Limits
from skr_watcher import __version__, credentials
from skr_watcher.clock import AgentClock, SystemClock
from skr_watcher.config import MAX_REVIEW_BYTES, AgentConfig
from skr_watcher.delivery import Delivery
from skr_watcher.kcp_client import KcpClient
from skr_watcher.metrics import AgentMetrics
from skr_watcher.queue import SendQueue
from skr_watcher.retry import RetryBackoff
from skr_watcher.webhook import AdmissionHandler, health_app, webhook_app

log = logging.getLogger(__name__)


_HEALTH_MAX_BODY_BYTES = 64 * 1024
_HEAP_TRIM_INTERVAL = 30.0
"""Seconds between checks whether connection churn left free heap to return (``heap_trim``)."""
_HEAP_TRIM_CLOSED = 256
"""Connections closed since the last trim that make the next check trim."""


def server_limits(config: AgentConfig, *, webhook: bool) -> Limits:
    """The webhook's or the metrics/health port's limits (each port its own connection cap).

    The idle keep-alive timeout is short (issue 26: 120 s let held-open connections pile up); the
    API server's webhook client reconnects after it, and a request racing the close is a sub-ms
    window once per idle period. The header and body timeouts bound slow clients well below the
    API server's webhook timeout.
    """
    return Limits(
        max_body_bytes=MAX_REVIEW_BYTES if webhook else _HEALTH_MAX_BODY_BYTES,
        header_timeout=config.http_header_timeout,
        body_timeout=config.http_body_timeout,
        keep_alive_timeout=config.http_idle_timeout,
        write_timeout=config.http_write_timeout,
        max_connections=config.webhook_max_connections if webhook else config.metrics_max_connections,
        handshake_thread=webhook and config.webhook_handshake_thread,
        max_buffered_body_bytes=config.webhook_max_buffered_bytes if webhook else None,
    )


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        *,
        clock: AgentClock | None = None,
        transport: HttpTransport | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.metrics = AgentMetrics()
        self._wall = lambda: self.clock.utc_now().timestamp()
        loaded = credentials.load(config, self._wall)
        self._fingerprint = loaded.fingerprint
        self._server_ssl = credentials.server_context(config)
        self.queue = SendQueue(config.queue_size)
        self.client = KcpClient(
            config.kcp_base_url,
            ssl_context=loaded.client_context,
            signer=loaded.signer,
            max_connections=config.max_connections,
            timeout=config.request_timeout,
            transport=transport,
        )
        self.delivery = Delivery(
            client=self.client,
            queue=self.queue,
            metrics=self.metrics,
            clock=self.clock,
            backoff=RetryBackoff(config.retry_base_delay, config.retry_max_delay, rng),
            sender_tasks=config.sender_tasks,
            heartbeat_manager=config.manager,
            heartbeat_interval=config.heartbeat_interval,
            agent_version=__version__,
            batch_max_events=config.batch_max_events,
            batch_interval=config.batch_interval,
        )
        self.handler = AdmissionHandler(self.delivery, self.metrics, self.clock)
        self.webhook_port = 0
        self.metrics_port = 0
        self._ready = False
        self.started = asyncio.Event()

    @property
    def ready(self) -> bool:
        return self._ready

    async def reload_credentials(self) -> bool:
        """Reload certificates and signing key if their files changed; True when something switched."""
        stamp = credentials.fingerprint(credentials.watched_paths(self.config))
        if stamp == self._fingerprint:
            return False
        try:
            loaded = credentials.load(self.config, self._wall)
            credentials.reload_server_context(self._server_ssl, self.config)
        except credentials.CredentialError as error:
            self.metrics.tls_reloads.labels("error").inc()
            log.error("credential files changed but cannot be used yet, keeping the old ones: %s", error)
            return False
        await self.client.replace(loaded.client_context, loaded.signer)
        self._fingerprint = loaded.fingerprint
        self.metrics.tls_reloads.labels("ok").inc()
        log.info("reloaded rotated credentials (signing key id %s)", self.client.key_id)
        return True

    async def _reloader(self) -> None:
        while True:
            await self.clock.sleep(self.config.tls_check_interval)
            try:
                await self.reload_credentials()
            except Exception:  # never let a reload bug stop the agent
                log.exception("credential reload failed")

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set (or a server fails), then shut down gracefully."""
        config = self.config
        webhook = HttpServer(
            webhook_app(self.handler),
            host=config.bind_address,
            port=config.webhook_port,
            name="skr-watcher-webhook",
            ssl_context=self._server_ssl,
            limits=server_limits(config, webhook=True),
            observe=lambda reason: self.metrics.http_cut.labels("webhook", reason).inc(),
        )
        health = HttpServer(
            health_app(self.metrics, lambda: self._ready),
            host=config.bind_address,
            port=config.metrics_port,
            name="skr-watcher-health",
            limits=server_limits(config, webhook=False),
            observe=lambda reason: self.metrics.http_cut.labels("metrics", reason).inc(),
        )
        await webhook.start()
        try:
            await health.start()
        except BaseException:
            await webhook.stop()
            raise
        self.webhook_port = webhook.port or 0
        self.metrics_port = health.port or 0
        self.delivery.start()
        if config.resync_on_start:
            self.delivery.request_resync(config.manager)
        webhook_task, health_task = webhook.task, health.task
        reloader = asyncio.create_task(self._reloader(), name="skr-watcher-reloader")
        trimmer = asyncio.create_task(
            HeapTrimmer(
                lambda: webhook.closed + health.closed, libc_trim(), min_work=_HEAP_TRIM_CLOSED
            ).every(_HEAP_TRIM_INTERVAL, self.clock.sleep),
            name="skr-watcher-heap-trim",
        )
        stop_task = asyncio.create_task(stop.wait(), name="skr-watcher-stop")
        failure: BaseException | None = None
        try:
            self._ready = True
            self.started.set()
            log.info(
                "skr-watcher %s (pid %d): admissions on https://%s:%d/validate/<manager>, metrics on :%d,"
                " KCP %s",
                __version__,
                os.getpid(),
                config.bind_address,
                self.webhook_port,
                self.metrics_port,
                self.client.base_url,
            )
            await asyncio.wait({stop_task, webhook_task, health_task}, return_when=asyncio.FIRST_COMPLETED)
            for task in (webhook_task, health_task):
                if task.done() and not stop.is_set():
                    failure = task.exception() or RuntimeError(f"{task.get_name()} stopped unexpectedly")
        finally:
            self._ready = False
            log.info(
                "stopping: admissions closed, delivering queued events (up to %g s)", config.shutdown_timeout
            )
            await webhook.stop()
            await self.delivery.stop(config.shutdown_timeout)
            reloader.cancel()
            trimmer.cancel()
            stop_task.cancel()
            await asyncio.gather(reloader, trimmer, stop_task, return_exceptions=True)
            await self.client.aclose()
            await health.stop()
            log.info("stopped")
        if failure is not None:
            raise failure
