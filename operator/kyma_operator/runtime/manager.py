"""The process shell around informers, controllers and other long-running parts.

A manager starts informers, waits until their caches are filled, takes part in leader election
(if configured) and runs the controllers and leader-only runnables (such as the listener's HTTP
server) only while it leads. It serves ``/healthz``, ``/readyz`` (ready = caches synced and leading,
or no leader election; with sharding: synced and the shard readiness) and Prometheus ``/metrics``
on 127.0.0.1, and shuts everything down in
order: leader work first (in-flight reconciles finish), then the Lease is released, then informers
and servers. Signal handlers are installed only by ``run_until_signal``.

Sharding (``runtime/sharding``): controllers built with a request gate
(``Controller(request_gate=)``, or named in ``request_gates``) run on every replica, not only the
leader, once the caches are synced; each of their requests passes its gate (the shard
coordinator admits only shards this replica holds). Everything else (the Watcher controller, CA
rotation, leader-only runnables) still runs on the leader only.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from embedded_server import EmbeddedServer
from kyma_operator.runtime.clock import Clock, RealClock
from kyma_operator.runtime.controller import Controller, RequestGate
from kyma_operator.runtime.exposition import exposition_chunks
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.leader import LeaderElectionConfig, LeaderElector
from kyma_operator.runtime.loopthread import LoopThread
from kyma_operator.runtime.metrics import RuntimeMetrics

log = logging.getLogger(__name__)


class Runnable(Protocol):
    """Anything with ``async run()`` that runs until cancelled."""

    async def run(self) -> None: ...


RunnableLike = Runnable | Callable[[], Awaitable[None]]


class LeaderElectionLost(RuntimeError):
    """The manager could not renew its Lease; the process should exit (and be restarted)."""


class ManagerFailed(RuntimeError):
    """A component of the manager crashed; the original error is the ``__cause__``."""


class Manager:
    """Runs informers, controllers and runnables; see the module docstring."""

    def __init__(
        self,
        client: KubeClient,
        *,
        name: str,
        namespace: str,
        leader_election: LeaderElectionConfig | None = None,
        health_port: int | None = 0,
        metrics_port: int | None = None,
        host: str = "127.0.0.1",
        registry: CollectorRegistry | None = None,
        clock: Clock | None = None,
        graceful_shutdown_timeout: float = 30.0,
        request_gates: Mapping[str, RequestGate] | None = None,
        readiness: Callable[[], bool] | None = None,
        readiness_reason: Callable[[], str] | None = None,
        lease_thread: LoopThread | None = None,
        lease_client: KubeClient | None = None,
    ) -> None:
        """``lease_thread``: run the leader election on that thread's event loop with
        ``lease_client`` (``runtime/leaseclient``), so its renewals do not wait behind the main
        loop's work; the manager starts the thread, and closes the client and stops the thread
        last (the shard coordinator may share both)."""
        self.client = client
        self._lease_thread = lease_thread
        self._lease_client = lease_client
        self._main_loop: asyncio.AbstractEventLoop | None = None
        self.name = name
        self.namespace = namespace
        self.clock = clock or RealClock()
        self.metrics = RuntimeMetrics(registry)
        self.registry = self.metrics.registry
        self.leader_election = leader_election
        self.graceful_shutdown_timeout = graceful_shutdown_timeout
        self._host = host
        self._health_port_request = health_port
        self._metrics_port_request = metrics_port
        self.health_port: int | None = None
        self.metrics_port: int | None = None
        self._informers: list[Informer] = []
        self._controllers: list[Controller] = []
        self._runnables: list[tuple[RunnableLike, bool]] = []
        self.request_gates: dict[str, RequestGate] = dict(request_gates or {})
        """Controllers (by name) that run on every replica, each request through its gate."""
        self._readiness = readiness
        """Replaces "leading" in readiness (sharding: holds a shard or is the only replica)."""
        self._readiness_reason = readiness_reason
        """Why ``readiness`` says no, beyond the obvious (sharding: a shard-count mismatch); printed
        by ``/readyz`` when not empty."""
        self._ready_checks: list[tuple[str, Callable[[], bool]]] = []
        """Further conditions of readiness (``add_ready_check``), by name for ``/readyz``."""
        self._sharded_tasks: list[asyncio.Task[Any]] = []
        self.elector: LeaderElector | None = None
        if leader_election is not None:
            started: Callable[[], None] = self._start_leader_work
            stopped: Callable[[], None] = self._stop_leader_work_now
            if lease_thread is not None:  # the elector calls back from the thread
                started, stopped = self._on_main(started), self._on_main(stopped)
            self.elector = LeaderElector(
                (lease_client or client) if lease_thread is not None else client,
                leader_election,
                clock=self.clock,
                on_started_leading=started,
                on_stopped_leading=stopped,
                metrics=self.metrics,
            )
        self.started = asyncio.Event()
        self._stop: asyncio.Event | None = None
        self._done: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self._leader_tasks: list[asyncio.Task[Any]] = []
        self._background: list[asyncio.Task[Any]] = []
        self._elector_task: asyncio.Task[None] | None = None
        self._servers: list[EmbeddedServer] = []
        self._running = False
        self._stopping = False

    # -- registration --------------------------------------------------------------------------

    def add_informer(self, informer: Informer) -> Informer:
        """Run ``informer``; readiness and controller start wait for its first list."""
        if informer not in self._informers:
            informer.set_metrics(self.metrics)
            self._informers.append(informer)
        return informer

    def add_controller(self, controller: Controller) -> Controller:
        """Run ``controller`` while leading (its informers are added too)."""
        if not controller.has_metrics:
            controller.set_metrics(self.metrics)
        self._controllers.append(controller)
        for informer in controller.informers:
            self.add_informer(informer)
        return controller

    def add_ready_check(self, name: str, check: Callable[[], bool]) -> None:
        """``/readyz`` answers 200 only while ``check()`` is true too (on top of synced and leading).

        For a runnable that serves traffic (the listener): leadership is acquired before its server
        is bound, and a pod marked ready in that gap gets events its port refuses.
        """
        self._ready_checks.append((name, check))

    def add_runnable(self, runnable: RunnableLike, leader_only: bool = True) -> None:
        """Run ``runnable`` (``obj.run()`` or an async callable): while leading, or always."""
        if not callable(getattr(runnable, "run", None)) and not callable(runnable):
            raise TypeError(f"{runnable!r} is neither an async callable nor has an async run()")
        self._runnables.append((runnable, leader_only))

    # -- state ---------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """True while leading; always True (once started) without leader election."""
        if self.elector is None:
            return self._running and not self._stopping
        return self.elector.is_leader

    @property
    def synced(self) -> bool:
        return all(informer.synced.is_set() for informer in self._informers)

    @property
    def ready(self) -> bool:
        if not (self._running and not self._stopping and self.synced):
            return False
        if not all(check() for _, check in self._ready_checks):
            return False
        return self._readiness() if self._readiness is not None else self.is_leader

    @property
    def healthy(self) -> bool:
        return self._running and self._failure is None

    # -- running -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until ``shutdown()`` (returns) or a failure (raises, after shutting down)."""
        if self._running:
            raise RuntimeError("manager is already running")
        self._running = True
        self._stopping = False
        self._failure = None
        self._stop = asyncio.Event()
        self._done = asyncio.Event()
        self._main_loop = asyncio.get_running_loop()
        if self._lease_thread is not None:
            self._lease_thread.start()
        try:
            await self._start_servers()
            for informer in self._informers:
                self._spawn(self._background, informer.run(), f"informer {informer.name}")
            for runnable, leader_only in self._runnables:
                if not leader_only:
                    self._spawn(self._background, _as_coroutine(runnable), f"runnable {runnable!r}")
            self.started.set()
            if await self._until_stopped(self._wait_synced()):
                self._start_sharded_work()
                if self.elector is not None:
                    self._elector_task = asyncio.create_task(self._run_elector(), name=f"{self.name}-elector")
                    self._elector_task.add_done_callback(self._on_elector_done)
                else:
                    self._start_leader_work()
                await self._stop.wait()
        finally:
            self._stopping = True
            await self._teardown()
            self._running = False
            self.started.clear()
            self._done.set()
        if self._failure is not None:
            if isinstance(self._failure, LeaderElectionLost):
                raise self._failure
            raise ManagerFailed(f"manager {self.name}: {self._failure}") from self._failure

    async def shutdown(self) -> None:
        """Stop gracefully and wait until ``run()`` has finished."""
        if self._stop is None or self._done is None:
            return
        self._stop.set()
        await self._done.wait()

    async def run_until_signal(self) -> None:
        """``run()`` with SIGTERM/SIGINT handlers that trigger a graceful shutdown."""
        loop = asyncio.get_running_loop()
        signals = (signal.SIGTERM, signal.SIGINT)
        for sig in signals:
            loop.add_signal_handler(sig, self._request_stop, sig)
        try:
            await self.run()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)

    def _request_stop(self, sig: int | None = None) -> None:
        if sig is not None:
            log.info("manager %s: received %s, shutting down", self.name, signal.Signals(sig).name)
        if self._stop is not None:
            self._stop.set()

    async def _until_stopped(self, awaitable: Coroutine[Any, Any, None]) -> bool:
        """Await ``awaitable`` unless a stop comes first; True if it completed."""
        assert self._stop is not None
        task = asyncio.ensure_future(awaitable)
        stop = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pending in (task, stop):
                if not pending.done():
                    pending.cancel()
            await asyncio.gather(task, stop, return_exceptions=True)
        return task.done() and not task.cancelled() and task.exception() is None

    async def _wait_synced(self) -> None:
        await asyncio.gather(*(informer.synced.wait() for informer in self._informers))

    def _spawn(self, bucket: list[asyncio.Task[Any]], coro: Coroutine[Any, Any, Any], what: str) -> None:
        task = asyncio.create_task(coro, name=what)
        bucket.append(task)

        def finished(done: asyncio.Task[Any]) -> None:
            if done.cancelled():
                return
            exc = done.exception()
            if exc is not None and not self._stopping:
                log.error("manager %s: %s failed: %r", self.name, what, exc)
                self._fail(exc)

        task.add_done_callback(finished)

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
        if self._stop is not None:
            self._stop.set()

    def _on_elector_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self._stopping:
            return
        exc = task.exception()
        self._fail(exc if exc is not None else LeaderElectionLost(f"manager {self.name} lost its lease"))

    async def _run_elector(self) -> None:
        assert self.elector is not None
        if self._lease_thread is None:
            await self.elector.run()
        else:  # cancelling this cancels the elector there and waits for its release of the Lease
            await self._lease_thread.run(self.elector.run())

    def _on_main(self, callback: Callable[[], None]) -> Callable[[], None]:
        """``callback`` run on the manager's event loop, from the Lease thread."""

        def on_main() -> None:
            if self._main_loop is not None and not self._main_loop.is_closed():
                self._main_loop.call_soon_threadsafe(callback)

        return on_main

    def _sharded(self, controller: Controller) -> bool:
        return controller.name in self.request_gates or controller.request_gate is not None

    def _start_sharded_work(self) -> None:
        for controller in self._controllers:
            gate = self.request_gates.get(controller.name) or controller.request_gate
            if gate is not None:
                log.info("manager %s: starting sharded controller %s", self.name, controller.name)
                coro = controller.run(request_gate=gate)
                self._spawn(self._sharded_tasks, coro, f"controller {controller.name}")

    def _start_leader_work(self) -> None:
        if self._stopping or self._leader_tasks:
            return
        log.info("manager %s: starting controllers", self.name)
        for controller in self._controllers:
            if self._sharded(controller):
                continue
            gate = (lambda: self.is_leader) if self.elector is not None else None
            self._spawn(self._leader_tasks, controller.run(gate), f"controller {controller.name}")
        for runnable, leader_only in self._runnables:
            if leader_only:
                self._spawn(self._leader_tasks, _as_coroutine(runnable), f"runnable {runnable!r}")

    def _stop_leader_work_now(self) -> None:
        for task in self._leader_tasks:
            task.cancel()

    async def _teardown(self) -> None:
        await _cancel_and_wait(self._sharded_tasks + self._leader_tasks, self.graceful_shutdown_timeout)
        self._sharded_tasks = []
        self._leader_tasks = []
        if self._elector_task is not None:
            await _cancel_and_wait([self._elector_task], self.graceful_shutdown_timeout)
            self._elector_task = None
        await _cancel_and_wait(self._background, self.graceful_shutdown_timeout)
        self._background = []
        for server in self._servers:
            await server.stop()
        self._servers = []
        if self._lease_client is not None:
            await self._lease_client.close()
        if self._lease_thread is not None:
            await self._lease_thread.stop()

    # -- HTTP ----------------------------------------------------------------------------------

    async def _start_servers(self) -> None:
        if self._health_port_request is None:
            return
        separate = self._metrics_port_request is not None
        self.health_port = await self._serve(
            self._app(health=True, metrics=not separate), self._health_port_request
        )
        self.metrics_port = self.health_port
        if separate:
            assert self._metrics_port_request is not None
            self.metrics_port = await self._serve(
                self._app(health=False, metrics=True), self._metrics_port_request
            )

    async def _serve(self, app: Any, port: int) -> int:
        server = EmbeddedServer(app, host=self._host, port=port, name=f"{self.name}-http", http="auto")
        await server.start()
        self._servers.append(server)
        assert server.port is not None
        return server.port

    def _app(self, *, health: bool, metrics: bool) -> Any:
        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return
            path = scope["path"]
            if scope["method"] not in ("GET", "HEAD"):
                await _respond(send, 405, b"method not allowed\n")
            elif health and path == "/healthz":
                ok = self.healthy
                await _respond(send, 200 if ok else 503, b"ok\n" if ok else b"failed\n")
            elif health and path == "/readyz":
                await _respond(send, 200 if self.ready else 503, self._readiness_text().encode())
            elif metrics and path == "/metrics":
                await _stream(send, self.registry, head=scope["method"] == "HEAD")
            else:
                await _respond(send, 404, b"not found\n")

        return app

    def _readiness_text(self) -> str:
        synced = self.synced
        leader = self.is_leader
        state = "ok" if self.ready else "not ready"
        shards = "" if self._readiness is None else f" shards={self._readiness()}"
        reason = self._readiness_reason() if self._readiness_reason is not None else ""
        because = f" reason: {reason}" if reason else ""
        checks = "".join(f" {name}={check()}" for name, check in self._ready_checks)
        return f"{state}: informers_synced={synced} leader={leader}{shards}{checks}{because}\n"


async def _respond(
    send: Any, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8"
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type.encode()),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _stream(send: Any, registry: CollectorRegistry, *, head: bool) -> None:
    """``/metrics`` chunk by chunk (``runtime.exposition``; chunked transfer encoding), the other
    tasks running between two chunks: a scrape of 100k+ lines neither stalls the loop for seconds
    nor holds the whole body."""
    start = {"type": "http.response.start", "status": 200}
    await send({**start, "headers": [(b"content-type", CONTENT_TYPE_LATEST.encode())]})
    if not head:
        for chunk in exposition_chunks(registry):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await asyncio.sleep(0)
    await send({"type": "http.response.body", "body": b""})


def _as_coroutine(runnable: RunnableLike) -> Coroutine[Any, Any, Any]:
    run = getattr(runnable, "run", None)
    target = run if callable(run) else runnable
    if not callable(target):
        raise TypeError(f"{runnable!r} is neither callable nor has run()")
    result = target()
    if not inspect.iscoroutine(result):
        raise TypeError(f"{runnable!r} did not return a coroutine")
    return result


async def _cancel_and_wait(tasks: list[asyncio.Task[Any]], grace: float) -> None:
    for task in tasks:
        task.cancel()
    pending = [task for task in tasks if not task.done()]
    if pending:
        _, still = await asyncio.wait(pending, timeout=grace)
        if still:  # a slow shutdown names what held it (a task that ignores its cancel)
            log.warning(
                "shutdown: %d task(s) still running after the %.0f s grace, left behind: %s",
                len(still),
                grace,
                ", ".join(sorted(task.get_name() for task in still)),
            )
    for task in tasks:
        if task.done() and not task.cancelled():
            exc = task.exception()
            if exc is not None:
                log.debug("task %s ended with %r during shutdown", task.get_name(), exc)
