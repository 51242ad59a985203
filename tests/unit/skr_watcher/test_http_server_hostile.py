"""The agent's two real servers (webhook and metrics/health apps, 127.0.0.1) against hostile clients.

The attack clients come from ``tests.hostile.attacks`` (shared with the other servers' suites and
``benchmarks/agent_hostile.py``); the limits and timeouts are configured short so every attack ends
within a bounded time, and every wait is a read or a poll with a deadline. What must hold: each
attack is refused with a 4xx or cut, within its limit or timeout, and meanwhile (and afterwards)
admissions and probes are answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest

from kyma_wire.http_server import HttpServer, Limits
from kyma_wire.names import OPERATOR_NAME
from skr_watcher.metrics import AgentMetrics
from skr_watcher.webhook import AdmissionHandler, health_app, webhook_app
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
    max_connections=40,
    shed_after=0.2,
)
_DEADLINE = 10.0


@dataclass
class Agent:
    webhook: HttpServer
    health: HttpServer
    metrics: AgentMetrics

    def cut(self, port: str, reason: str) -> float:
        """``watcher_http_connections_cut_total{port,reason}`` as the agent exposes it."""
        prefix = f'watcher_http_connections_cut_total{{port="{port}",reason="{reason}"}} '.encode()
        for line in self.metrics.exposition().splitlines():
            if line.startswith(prefix):
                return float(line[len(prefix) :])
        return 0.0

    @property
    def admissions(self) -> Target:
        return Target("127.0.0.1", self.webhook.port or 0, path=f"/validate/{OPERATOR_NAME}")

    @property
    def probes(self) -> Target:
        return Target("127.0.0.1", self.health.port or 0, path="/healthz")


@asynccontextmanager
async def agent_servers(limits: Limits = _LIMITS) -> AsyncIterator[Agent]:
    metrics = AgentMetrics()
    webhook = HttpServer(
        webhook_app(AdmissionHandler(RecordingSink(), metrics, FakeClock())),
        host="127.0.0.1",
        port=0,
        name="webhook",
        limits=limits,
        observe=lambda reason: metrics.http_cut.labels("webhook", reason).inc(),
    )
    health = HttpServer(
        health_app(metrics, lambda: True),
        host="127.0.0.1",
        port=0,
        name="health",
        limits=limits,
        observe=lambda reason: metrics.http_cut.labels("metrics", reason).inc(),
    )
    await webhook.start()
    await health.start()
    try:
        yield Agent(webhook, health, metrics)
    finally:
        await webhook.stop()
        await health.stop()


_REVIEW = body(review("CREATE", new=obj(), uid="u-1"))


def admission(target: Target) -> bytes:
    return (
        b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
        b"Connection: close\r\n\r\n%s" % (target.path.encode(), len(_REVIEW), _REVIEW)
    )


async def admitted(agent: Agent) -> bool:
    outcome = await attacks.exchange(agent.admissions, admission(agent.admissions))
    return statuses(outcome.answer) == [200] and b'"allowed":true' in outcome.answer


async def healthy(agent: Agent) -> bool:
    outcome = await attacks.exchange(agent.probes, b"GET /healthz HTTP/1.0\r\n\r\n")
    return statuses(outcome.answer) == [200]


async def eventually(check: object, what: str) -> None:
    """Poll an async ``check`` until it holds (deadline ``_DEADLINE``)."""
    assert callable(check)
    deadline = asyncio.get_running_loop().time() + _DEADLINE
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"never: {what}"
        await asyncio.sleep(0.02)


@pytest.fixture(params=["webhook", "health"])
def port_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def target_of(agent: Agent, kind: str) -> Target:
    return agent.admissions if kind == "webhook" else agent.probes


async def test_malformed_request_lines_and_heads_get_4xx_and_a_close(port_kind: str) -> None:
    async with agent_servers() as agent:
        target = target_of(agent, port_kind)
        for raw in attacks.MALFORMED:
            outcome = await attacks.exchange(target, raw)
            codes = statuses(outcome.answer)
            assert outcome.closed, raw
            assert all(400 <= code < 500 for code in codes), (raw, outcome.answer[:200])
        assert await admitted(agent) and await healthy(agent)


async def test_chunked_abuse_gets_4xx_and_a_close(port_kind: str) -> None:
    async with agent_servers() as agent:
        target = target_of(agent, port_kind)
        for raw in attacks.CHUNKED_ABUSE:
            outcome = await attacks.exchange(target, raw)
            assert outcome.closed, raw
            assert all(400 <= code < 500 for code in statuses(outcome.answer)), (raw, outcome.answer[:200])
        assert await admitted(agent) and await healthy(agent)


@pytest.mark.parametrize("name", [False, True], ids=["value", "name"])
async def test_an_endless_header_is_cut_at_the_limit_as_it_arrives(port_kind: str, name: bool) -> None:
    async with agent_servers() as agent:
        outcome = await attacks.endless_header(
            target_of(agent, port_kind), give_up_after=64 * _HEADER_LIMIT, chunk=1024, name=name
        )
        assert outcome.closed and statuses(outcome.answer) == [431]
        # read no further than the limit plus what was in flight (socket buffers), not to the end
        assert outcome.sent < 64 * _HEADER_LIMIT
        assert agent.cut(port_kind if port_kind == "webhook" else "metrics", "headers_too_large") == 1
        assert await admitted(agent) and await healthy(agent)


@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
async def test_a_huge_body_is_refused_without_reading_it(chunked: bool) -> None:
    async with agent_servers() as agent:
        outcome = await attacks.huge_body(agent.admissions, size=256 * 1024 * 1024, chunked=chunked)
        assert outcome.closed and statuses(outcome.answer) == [413]
        assert outcome.sent < 256 * 1024 * 1024


async def test_a_pipelining_flood_is_answered_in_order_and_bounded(port_kind: str) -> None:
    async with agent_servers() as agent:
        target = target_of(agent, port_kind)
        outcome = await attacks.pipelining_flood(target, 2000)
        assert outcome.closed
        expected = 200 if port_kind == "health" else 405  # GET on the admission path
        assert statuses(outcome.answer) == [expected] * 2000


def test_slowloris_heads_and_bodies_are_cut_after_their_timeout(port_kind: str) -> None:
    async def scenario() -> None:
        async with agent_servers() as agent:
            target = target_of(agent, port_kind)
            server = agent.webhook if port_kind == "webhook" else agent.health

            def receiving() -> bool:
                return any(connection.receiving for connection in server.connections)

            head = b"GET %s HTTP/1.1\r\nHost: x\r\nX-Slow: " % target.path.encode()
            assert statuses(await cut_after_the_timeout(receiving, target, head, trickle=True)) == [408]
            body = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc" % target.path.encode()
            assert statuses(await cut_after_the_timeout(receiving, target, body, trickle=False)) == [408]
            assert server.timeouts >= 2

    with asyncio.Runner(loop_factory=SteppedLoop) as runner:  # the test moves its clock
        runner.run(scenario())


async def test_a_client_that_never_reads_is_cut_after_the_write_timeout() -> None:
    async with agent_servers() as agent:
        before = agent.health.timeouts
        outcome = await attacks.never_reading(
            agent.probes, request=b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", give_up_after=_DEADLINE
        )
        assert outcome.closed, f"still connected after {outcome.seconds:.1f} s, {outcome.sent} bytes sent"
        assert agent.health.timeouts > before or agent.health.connections == set()
        assert await healthy(agent)


async def test_idle_connections_at_the_cap_are_shed_for_admissions_and_probes() -> None:
    async with agent_servers() as agent:
        cap = _LIMITS.max_connections
        async with (
            attacks.held_connections(agent.admissions, cap) as idle_webhook,
            attacks.held_connections(agent.probes, cap) as idle_health,
        ):
            await eventually(
                lambda: _true(len(agent.webhook.connections) == cap == len(agent.health.connections)),
                "every idle connection accepted",
            )
            for _ in range(10):
                assert await admitted(agent)
                assert await healthy(agent)
            # the first answer made room by closing the longest idle; each answer frees its own slot
            assert agent.webhook.shed >= 1 and agent.health.shed >= 1
            assert agent.webhook.refused == 0 and agent.health.refused == 0
            assert agent.cut("webhook", "shed") == agent.webhook.shed and agent.cut("metrics", "shed") >= 1
            await eventually(
                lambda: _true(idle_webhook.closed() >= 1 and idle_health.closed() >= 1),
                "shed seen by clients",
            )


async def test_slow_heads_holding_the_cap_are_shed_once_they_are_older_than_shed_after() -> None:
    limits = Limits(
        max_connections=20,
        header_timeout=30.0,
        keep_alive_timeout=30.0,
        shed_after=0.2,
        max_header_bytes=8192,
    )
    async with agent_servers(limits) as agent:
        half = b"POST %s HTTP/1.1\r\nHost: x\r\n" % agent.admissions.path.encode()
        async with attacks.held_connections(agent.admissions, 20, send=half):
            await eventually(
                lambda: _true(sum(c.receiving for c in agent.webhook.connections) == 20), "all slow heads"
            )
            await eventually(lambda: admitted(agent), "an admission despite 20 slow heads")
            assert agent.webhook.shed >= 1


async def test_the_metrics_port_flood_does_not_touch_the_webhook_cap() -> None:
    async with agent_servers() as agent, attacks.held_connections(agent.probes, _LIMITS.max_connections):
        await eventually(
            lambda: _true(len(agent.health.connections) == _LIMITS.max_connections), "health port full"
        )
        assert await admitted(agent)
        assert agent.webhook.shed == 0  # the webhook port had room of its own


async def _true(value: bool) -> bool:
    return value
