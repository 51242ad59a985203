"""The listener on ``ListenerConfig.server = "direct"`` (``kcp_listener.direct_server``), real sockets.

What must hold on that server: every answer the listener gives (accepted, 401, 404, 405, 413, 400,
metrics, readiness, OpenAPI, unknown paths) has the same status, body and content type as on the
uvicorn server, for the same request bytes; hostile clients (``tests.hostile.attacks``) get a 4xx
and a close, an endless header is cut at the limit and counted; pipelined requests whose answers
are awaited (the FastAPI routes) and answered in place (events) come back in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kcp_listener.config import AuthMode, ListenerConfig, ServerKind
from kcp_listener.server import ListenerServer
from kyma_wire.events import AgentEvent, GroupVersionKind, ObjectKey, Operation, event_path
from kyma_wire.names import SKR_NAMESPACE
from tests.hostile import attacks
from tests.hostile.attacks import Target, statuses
from tests.hostile.stepped import SteppedLoop, cut_after_the_timeout
from tests.unit.kcp_listener.harness import MANAGER, Harness, istio_xfcc

BODY = AgentEvent(
    watched=ObjectKey(namespace=SKR_NAMESPACE, name="default"),
    watched_gvk=GroupVersionKind(group="operator.kyma-project.io", version="v1beta2", kind="Kyma"),
    operation=Operation.UPDATE,
).to_wire()
_HEADER_LIMIT = 8192
_DEADLINE = 10.0


@asynccontextmanager
async def serving(
    kind: ServerKind, mode: AuthMode = AuthMode.SIGNATURE
) -> AsyncIterator[tuple[Harness, int]]:
    """A harness listener (in-memory directory and sinks) served on a real socket by ``kind``."""
    async with listening(kind, mode) as (harness, server):
        yield harness, server.port


@asynccontextmanager
async def listening(
    kind: ServerKind, mode: AuthMode = AuthMode.SIGNATURE
) -> AsyncIterator[tuple[Harness, ListenerServer]]:
    """``serving``, yielding the running server itself."""
    config = ListenerConfig(
        host="127.0.0.1",
        port=0,
        auth_mode=mode,
        server=kind,
        public_origin="http://kcp.test",  # what the harness signs
        max_header_bytes=_HEADER_LIMIT,
        header_timeout_seconds=2.0,
        body_timeout_seconds=2.0,
    )
    harness = Harness(config)
    harness.add_runtime("rt-1", "kyma-1", ["manifest-1"])
    server = ListenerServer(config, harness.app, on_rejected=harness.metrics.connection_refused)
    task = asyncio.create_task(server.run())
    await server.wait_started()
    try:
        yield harness, server
    finally:
        await server.shutdown()
        await asyncio.wait_for(task, _DEADLINE)
        await harness.aclose()


def raw(request: httpx.Request, *, close: bool = True) -> bytes:
    """The wire form of ``request`` (its Host header kept: the harness signed for it)."""
    target = request.url.raw_path
    lines = [b"%s %s HTTP/1.1" % (request.method.encode(), target)]
    lines += [
        b"%s: %s" % (name, value) for name, value in request.headers.raw if name.lower() != b"connection"
    ]
    if close:
        lines.append(b"connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + request.content


def split(answer: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
    """Status, headers (lower-case names; ``date`` and framing dropped) and body of ONE answer."""
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.split(b"\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    if headers.get(b"transfer-encoding") == b"chunked":
        chunks, rest = [], body
        while True:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line, 16)
            if size == 0:
                break
            chunks.append(rest[:size])
            rest = rest[size + 2 :]
        body = b"".join(chunks)
    for framing in (b"date", b"content-length", b"transfer-encoding", b"connection"):
        headers.pop(framing, None)
    return int(status_line.split()[1]), headers, body


def cases(h: Harness) -> dict[str, bytes]:
    """One request per kind of answer the listener gives (each on a fresh connection)."""
    signed = h.request(BODY)
    return {
        "accepted": raw(signed),
        "replayed": raw(signed),
        "bad-signature": raw(h.request(BODY, key=Ed25519PrivateKey.generate())),
        "unsigned": raw(h.request(BODY, sign=False)),
        "unknown-manager": raw(h.request(BODY, path=event_path("other-manager"))),
        "wrong-method": raw(h.request(b"", method="GET", sign=False)),
        "too-large": raw(h.request(b"x" * (h.config.max_body_bytes + 1), sign=False)),
        "malformed-json": raw(h.request(b"{not json")),
        "readyz": b"GET /readyz HTTP/1.1\r\nhost: kcp.test\r\nconnection: close\r\n\r\n",
        "openapi": b"GET /openapi.json HTTP/1.1\r\nhost: kcp.test\r\nconnection: close\r\n\r\n",
        "unknown-path": b"GET /nowhere?x=1 HTTP/1.1\r\nhost: kcp.test\r\nconnection: close\r\n\r\n",
        "head": b"HEAD /readyz HTTP/1.1\r\nhost: kcp.test\r\nconnection: close\r\n\r\n",
    }


async def answers(kind: ServerKind) -> tuple[dict[str, tuple[int, dict[bytes, bytes], bytes]], list[str]]:
    async with serving(kind) as (h, port):
        target = Target("127.0.0.1", port)
        got = {}
        for name, request in cases(h).items():
            outcome = await attacks.exchange(target, request)
            assert outcome.closed, name
            got[name] = split(outcome.answer)
        return got, h.enqueued


async def test_every_answer_is_the_same_as_on_the_uvicorn_server() -> None:
    direct, direct_enqueued = await answers(ServerKind.DIRECT)
    uvicorn, uvicorn_enqueued = await answers(ServerKind.UVICORN)
    assert direct.keys() == uvicorn.keys()
    for name in direct:
        assert direct[name] == uvicorn[name], name
    statuses_seen = {name: status for name, (status, _, _) in direct.items()}
    assert statuses_seen == {
        "accepted": 200,
        "replayed": 401,
        "bad-signature": 401,
        "unsigned": 401,
        "unknown-manager": 404,
        "wrong-method": 405,
        "too-large": 413,
        "malformed-json": 400,
        "readyz": 200,
        "openapi": 200,
        "unknown-path": 404,
        "head": 405,  # FastAPI's GET route
    }
    assert direct_enqueued == uvicorn_enqueued == ["kyma:kcp-system/kyma-1"]


async def test_metrics_are_served_and_count_the_events() -> None:
    async with serving(ServerKind.DIRECT) as (h, port):
        target = Target("127.0.0.1", port)
        assert statuses((await attacks.exchange(target, raw(h.request(BODY)))).answer) == [200]
        outcome = await attacks.exchange(target, b"GET /metrics HTTP/1.0\r\n\r\n")
        status, headers, body = split(outcome.answer)
        assert status == 200 and headers[b"content-type"].startswith(b"text/plain")
        assert b'kcp_listener_requests_total{code="200",route="event"} 1.0' in body


async def test_xfcc_events_are_accepted_in_place() -> None:
    async with serving(ServerKind.DIRECT, AuthMode.XFCC) as (h, port):
        request = h.request(BODY, sign=False, xfcc=istio_xfcc("rt-1"))
        outcome = await attacks.exchange(Target("127.0.0.1", port), raw(request))
        assert statuses(outcome.answer) == [200]
        assert h.enqueued == ["kyma:kcp-system/kyma-1"]


async def test_awaited_and_in_place_answers_come_back_in_pipelined_order() -> None:
    async with serving(ServerKind.DIRECT, AuthMode.XFCC) as (h, port):
        xfcc = istio_xfcc("rt-1")
        event = raw(h.request(BODY, sign=False, xfcc=xfcc), close=False)
        get = b"GET /readyz HTTP/1.1\r\nhost: kcp.test\r\n\r\n"  # FastAPI: an awaited answer
        missing = b"GET /nowhere HTTP/1.1\r\nhost: kcp.test\r\n\r\n"
        last = raw(h.request(BODY, sign=False, xfcc=xfcc))  # closes
        pipeline = get + event + missing + event + get + get + event + last
        outcome = await attacks.exchange(Target("127.0.0.1", port), pipeline)
        assert outcome.closed
        assert statuses(outcome.answer) == [200, 200, 404, 200, 200, 200, 200, 200]


async def test_malformed_and_chunked_abuse_get_4xx_and_a_close_and_are_counted() -> None:
    async with serving(ServerKind.DIRECT) as (h, port):
        target = Target("127.0.0.1", port, path=event_path(MANAGER))
        for request in (*attacks.MALFORMED, *attacks.CHUNKED_ABUSE):
            outcome = await attacks.exchange(target, request)
            assert outcome.closed, request
            assert all(400 <= code < 500 for code in statuses(outcome.answer)), (
                request,
                outcome.answer[:200],
            )
        assert h.sample("kcp_listener_connections_refused_total", {"reason": "malformed"}) >= len(
            attacks.MALFORMED
        )
        assert statuses((await attacks.exchange(target, raw(h.request(BODY)))).answer) == [200]


@pytest.mark.parametrize("name", [False, True], ids=["value", "name"])
async def test_an_endless_header_is_cut_at_the_limit_as_it_arrives(name: bool) -> None:
    async with serving(ServerKind.DIRECT) as (h, port):
        target = Target("127.0.0.1", port, path=event_path(MANAGER))
        outcome = await attacks.endless_header(
            target, give_up_after=64 * _HEADER_LIMIT, chunk=1024, name=name
        )
        assert outcome.closed and statuses(outcome.answer) == [431]
        assert b'{"error":"request header fields too large"}' in outcome.answer
        assert outcome.sent < 64 * _HEADER_LIMIT
        assert h.sample("kcp_listener_connections_refused_total", {"reason": "header-too-large"}) == 1


async def test_a_huge_body_is_refused_without_reading_it() -> None:
    async with serving(ServerKind.DIRECT) as (_h, port):
        target = Target("127.0.0.1", port, path=event_path(MANAGER))
        outcome = await attacks.huge_body(target, size=256 * 1024 * 1024, chunked=False)
        assert outcome.closed and statuses(outcome.answer) == [413]
        assert outcome.sent < 256 * 1024 * 1024


def test_slowloris_is_cut_at_the_header_timeout_without_an_answer() -> None:
    async def scenario() -> None:
        async with listening(ServerKind.DIRECT) as (h, server):
            target = Target("127.0.0.1", server.port, path=event_path(MANAGER))
            head = b"GET %s HTTP/1.1\r\nHost: x\r\nX-Slow: " % target.path.encode()
            answer = await cut_after_the_timeout(
                lambda: bool(server.receiving_connections), target, head, trickle=True, steps=10
            )  # 10 x 0.25 s: past the 2 s header timeout
            assert answer == b""  # as upstream's Go listener: just closed
            assert h.sample("kcp_listener_connections_refused_total", {"reason": "header-timeout"}) == 1

    with asyncio.Runner(loop_factory=SteppedLoop) as runner:  # the test moves its clock
        runner.run(scenario())
