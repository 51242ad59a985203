"""The agent's webhook server over TLS (``kyma_wire.tls_layer``) against hostile clients.

The TLS layer replaces asyncio's ``SSLProtocol`` (issue 26: 256 KiB per connection), so the attacks
of ``tests.hostile.attacks`` run here again over TLS, plus what only TLS has: a connection counts
against the cap while it handshakes, a handshake that never finishes is cut after the header
timeout, a failed handshake is closed. And the shedding order: at the cap, connections that never
completed a request go before a client that has been answered (the API server's pooled connection).
Every test runs twice: with each handshake's first step on the event loop, and on the server's
handshake thread (``Limits.handshake_thread``, the agent's default). Every wait is a read or a poll
with a deadline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kyma_wire.http_server import HttpServer, Limits
from kyma_wire.names import OPERATOR_NAME
from kyma_wire.tls_layer import harden_server_context
from skr_watcher.metrics import AgentMetrics
from skr_watcher.webhook import AdmissionHandler, health_app, webhook_app
from tests.controlplane.pki import CertificateAuthority
from tests.hostile import attacks
from tests.hostile.attacks import Target, statuses
from tests.hostile.stepped import SteppedLoop, cut_after_the_timeout
from tests.unit.skr_watcher.fakes import FakeClock, RecordingSink, body, obj, review

_HEADER_LIMIT = 8192
_LIMITS = Limits(
    max_header_bytes=_HEADER_LIMIT,
    max_body_bytes=64 * 1024,
    header_timeout=0.5,
    body_timeout=0.5,
    keep_alive_timeout=30.0,  # longer than any test: idle connections go only when shed
    write_timeout=0.5,
    max_connections=10,
    shed_after=0.2,
)
_DEADLINE = 10.0
_REVIEW = body(review("CREATE", new=obj(), uid="u-1"))


@dataclass
class Tls:
    server: HttpServer
    metrics: AgentMetrics
    target: Target

    def cut(self, reason: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "watcher_http_connections_cut_total", {"port": "webhook", "reason": reason}
        )
        return value or 0.0

    @property
    def plain(self) -> Target:
        """The same port without TLS (a client that never handshakes)."""
        return Target(self.target.host, self.target.port, path=self.target.path)


_VARIANT = {"handshake_thread": False}
"""Where this test's handshakes run (set per test by ``handshake_variant``)."""


@pytest.fixture(autouse=True, params=[False, True], ids=["handshake-on-loop", "handshake-thread"])
def handshake_variant(request: pytest.FixtureRequest) -> Iterator[bool]:
    _VARIANT["handshake_thread"] = request.param
    yield request.param
    _VARIANT["handshake_thread"] = False


@asynccontextmanager
async def tls_webhook(
    tmp_path: Path,
    limits: Limits = _LIMITS,
    *,
    health: bool = False,
    handshake_executor: Executor | None = None,
) -> AsyncIterator[Tls]:
    """The webhook app over TLS (``health``: the metrics/health app, whose answers are large)."""
    limits = dataclasses.replace(limits, handshake_thread=_VARIANT["handshake_thread"])
    ca = CertificateAuthority("test-ca")
    ca.issue("agent", ip_addresses=("127.0.0.1",), server=True).write(
        tmp_path / "tls.crt", tmp_path / "tls.key"
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    harden_server_context(context)
    metrics = AgentMetrics()
    app = (
        health_app(metrics, lambda: True)
        if health
        else webhook_app(AdmissionHandler(RecordingSink(), metrics, FakeClock()))
    )
    server = HttpServer(
        app,
        host="127.0.0.1",
        port=0,
        name="webhook",
        ssl_context=context,
        limits=limits,
        observe=lambda reason: metrics.http_cut.labels("webhook", reason).inc(),
        handshake_executor=handshake_executor,
    )
    await server.start()
    client = ssl.create_default_context(cadata=ca.cert_pem.decode())
    try:
        yield Tls(
            server, metrics, Target("127.0.0.1", server.port or 0, client, f"/validate/{OPERATOR_NAME}")
        )
    finally:
        await server.stop()


def admission(path: str, *, close: bool = True) -> bytes:
    return (
        b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s"
        % (path.encode(), len(_REVIEW), b"Connection: close\r\n" if close else b"", _REVIEW)
    )


async def admitted(tls: Tls) -> bool:
    outcome = await attacks.exchange(tls.target, admission(tls.target.path))
    return statuses(outcome.answer) == [200] and b'"allowed":true' in outcome.answer


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + _DEADLINE
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"never: {what}"
        await asyncio.sleep(0.02)


async def _true(value: bool) -> bool:
    return value


async def test_malformed_heads_and_chunked_abuse_over_tls_get_4xx_and_a_close(tmp_path: Path) -> None:
    async with tls_webhook(tmp_path) as tls:
        for raw in (*attacks.MALFORMED, *attacks.CHUNKED_ABUSE):
            outcome = await attacks.exchange(tls.target, raw)
            assert outcome.closed, raw
            assert all(400 <= code < 500 for code in statuses(outcome.answer)), (raw, outcome.answer[:200])
        assert await admitted(tls)


async def test_an_endless_header_over_tls_is_cut_at_the_limit(tmp_path: Path) -> None:
    async with tls_webhook(tmp_path) as tls:
        outcome = await attacks.endless_header(tls.target, give_up_after=64 * _HEADER_LIMIT, chunk=1024)
        assert outcome.closed and statuses(outcome.answer) == [431]
        assert outcome.sent < 64 * _HEADER_LIMIT
        assert tls.cut("headers_too_large") == 1
        assert await admitted(tls)


async def test_a_pipelining_flood_over_tls_is_answered_in_order(tmp_path: Path) -> None:
    async with tls_webhook(tmp_path) as tls:
        outcome = await attacks.pipelining_flood(tls.target, 2000)
        assert outcome.closed
        assert statuses(outcome.answer) == [405] * 2000  # GET on the admission path


def test_a_slowloris_head_over_tls_is_cut_after_the_header_timeout(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with tls_webhook(tmp_path) as tls:

            def receiving() -> bool:
                return any(connection.receiving for connection in tls.server.connections)

            head = b"GET %s HTTP/1.1\r\nHost: x\r\nX-Slow: " % tls.target.path.encode()
            answer = await cut_after_the_timeout(receiving, tls.target, head, trickle=True)
            assert statuses(answer) == [408]
            assert tls.cut("timeout") == 1
            assert await admitted(tls)

    with asyncio.Runner(loop_factory=SteppedLoop) as runner:  # the test moves its clock
        runner.run(scenario())


async def test_a_client_over_tls_that_never_reads_is_cut_after_the_write_timeout(tmp_path: Path) -> None:
    async with tls_webhook(tmp_path, health=True) as tls:  # /metrics: answers large enough to pile up
        deaf = await attacks.never_reading(
            tls.target, request=b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", give_up_after=_DEADLINE
        )
        assert deaf.closed, f"still connected after {deaf.seconds:.1f} s, {deaf.sent} bytes sent"
        assert tls.cut("not_reading") >= 1


async def test_handshakes_count_against_the_cap_and_are_cut_after_the_header_timeout(tmp_path: Path) -> None:
    async with tls_webhook(tmp_path) as tls:
        cap = _LIMITS.max_connections
        async with attacks.held_connections(tls.plain, cap) as silent:  # TCP only: no ClientHello
            await eventually(lambda: _true(len(tls.server.connections) == cap), "silent handshakes counted")
            await eventually(lambda: _true(silent.closed() == cap), "silent handshakes cut")
        assert tls.server.timeouts >= cap and tls.cut("timeout") >= cap
        assert await admitted(tls)


async def test_a_failed_handshake_is_closed(tmp_path: Path) -> None:
    async with tls_webhook(tmp_path) as tls:
        outcome = await attacks.exchange(tls.plain, admission(tls.target.path))
        assert outcome.closed and statuses(outcome.answer) == []
        await eventually(lambda: _true(not tls.server.connections), "the failed connection forgotten")
        assert await admitted(tls)


@pytest.mark.parametrize("fresh", ["idle", "slow"])
async def test_at_the_cap_a_client_with_a_history_is_shed_last(tmp_path: Path, fresh: str) -> None:
    limits = Limits(
        max_header_bytes=_HEADER_LIMIT,
        header_timeout=30.0,
        keep_alive_timeout=30.0,
        max_connections=10,
        shed_after=0.0,  # a slow head may be shed at once (else, while younger, the idle client goes)
    )
    async with tls_webhook(tmp_path, limits) as tls:
        reader, writer = await attacks.connect(tls.target)
        try:
            writer.write(admission(tls.target.path, close=False))
            assert statuses(await attacks.read_answer(reader, _DEADLINE)) == [
                200
            ]  # the pooled client: answered once
            send = b"POST %s HTTP/1.1\r\nHost: x\r\n" % tls.target.path.encode() if fresh == "slow" else b""
            cap = limits.max_connections
            async with attacks.held_connections(tls.target, cap - 1, send=send):
                await eventually(lambda: _true(len(tls.server.connections) == cap), "the cap reached")
                # as many new held-open connections again: each displaces one that never completed
                # a request, though the answered client has been idle longest
                async with attacks.held_connections(tls.target, cap - 1):
                    await eventually(lambda: _true(tls.server.shed >= cap - 1), "room made for each")
                    assert await admitted(tls)
                    writer.write(admission(tls.target.path, close=False))
                    assert statuses(await attacks.read_answer(reader, _DEADLINE)) == [200]  # never shed
        finally:
            writer.transport.abort()


class GatedExecutor(Executor):
    """A one-thread executor whose steps wait for ``gate``; counts what it was given."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.submitted = 0
        self._inner = ThreadPoolExecutor(1, thread_name_prefix="gated-handshake")

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted += 1

        def gated() -> Any:
            self.gate.wait(_DEADLINE)
            return fn(*args, **kwargs)

        return self._inner.submit(gated)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.gate.set()
        self._inner.shutdown(wait)


async def test_bytes_arriving_while_a_step_is_on_the_handshake_thread_wait_for_it(
    tmp_path: Path, handshake_variant: bool
) -> None:
    """A hello split in two: its second half arrives while the first half's step runs on the thread
    (held there by the gate); it is handed over when the step is back, and the handshake goes on.
    Only first steps (the server's reply to the hello) go to the thread, the ``Finished`` does not."""
    if not handshake_variant:
        pytest.skip("the handshake thread only")
    executor = GatedExecutor()
    try:
        async with tls_webhook(tmp_path, handshake_executor=executor) as tls:
            assert tls.target.ssl is not None
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            client = tls.target.ssl.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
            with pytest.raises(ssl.SSLWantReadError):
                client.do_handshake()
            hello = outgoing.read()
            reader, writer = await asyncio.open_connection(tls.target.host, tls.target.port)
            try:
                writer.write(hello[:40])
                await eventually(
                    lambda: _true(executor.submitted == 1), "the first half's step on the thread"
                )
                writer.write(hello[40:])
                await writer.drain()
                (connection,) = tls.server.connections
                tcp: Any = connection._transport  # the TlsConnection under the HTTP connection
                await eventually(lambda: _true(bool(tcp._pending)), "the second half kept aside")
                executor.gate.set()
                async with asyncio.timeout(_DEADLINE):
                    while True:
                        incoming.write(await reader.read(65536))
                        try:
                            client.do_handshake()
                            break
                        except ssl.SSLWantReadError:
                            continue
                client.write(admission(tls.target.path))
                writer.write(outgoing.read())
                answer = b""
                async with asyncio.timeout(_DEADLINE):
                    while data := await reader.read(65536):
                        incoming.write(data)
                        try:
                            while chunk := client.read(65536):
                                answer += chunk
                        except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                            pass
                assert statuses(answer) == [200] and b'"allowed":true' in answer
                assert executor.submitted == 2  # the half hello, the whole one; not the Finished
            finally:
                writer.transport.abort()
    finally:
        executor.shutdown()
