"""The agent's webhook server over TLS (``kyma_wire.tls_layer``) against hostile clients.

The TLS layer replaces asyncio's ``SSLProtocol`` (issue 26: 256 KiB per connection), so the attacks
of ``tests.hostile.attacks`` run here again over TLS, plus what only TLS has: a connection counts
against the cap while it handshakes, a handshake that never finishes is cut after the header
timeout, a failed handshake is closed. And the shedding order: at the cap, connections that never
completed a request go before a client that has been answered (the API server's pooled connection).
Every wait is a read or a poll with a deadline.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from kyma_wire.http_server import HttpServer, Limits
from kyma_wire.names import OPERATOR_NAME
from kyma_wire.tls_layer import harden_server_context
from skr_watcher.metrics import AgentMetrics
from skr_watcher.webhook import AdmissionHandler, health_app, webhook_app
from tests.controlplane.pki import CertificateAuthority
from tests.hostile import attacks
from tests.hostile.attacks import Target, statuses
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


@asynccontextmanager
async def tls_webhook(
    tmp_path: Path, limits: Limits = _LIMITS, *, health: bool = False
) -> AsyncIterator[Tls]:
    """The webhook app over TLS (``health``: the metrics/health app, whose answers are large)."""
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


async def read_answer(reader: asyncio.StreamReader) -> bytes:
    """One keep-alive answer: the head, then ``content-length`` bytes."""
    async with asyncio.timeout(_DEADLINE):
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        return head + await reader.readexactly(length)


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


async def test_a_slowloris_head_over_tls_is_cut_after_the_header_timeout(tmp_path: Path) -> None:
    async with tls_webhook(tmp_path) as tls:
        slow = await attacks.slowloris(tls.target, interval=0.05, give_up_after=_DEADLINE)
        assert slow.closed and statuses(slow.answer) == [408]
        assert tls.cut("timeout") == 1
        assert await admitted(tls)


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
            assert statuses(await read_answer(reader)) == [200]  # the pooled client: answered once
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
                    assert statuses(await read_answer(reader)) == [200]  # never shed
        finally:
            writer.transport.abort()
