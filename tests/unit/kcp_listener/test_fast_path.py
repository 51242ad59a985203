"""The pure-ASGI fast path driven with raw ASGI messages, the way uvicorn calls it.

httpx's ASGI transport always sends a body as several ``http.request`` messages; a real server
sends a small body as ONE message, which the fast path handles without its chunk loop. These tests
cover that path, raw header lists (case, repeats), disconnects and the size limit before and while
reading, and check the answers equal what the FastAPI routes give for the same request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any

import httpx
import pytest

from kcp_listener.app import FastPath
from kcp_listener.config import ListenerConfig
from kcp_listener.intake import EventIntake
from kyma_wire.events import AgentEvent, GroupVersionKind, ObjectKey, Operation
from kyma_wire.names import OPERATOR_NAME, SKR_NAMESPACE
from tests.unit.kcp_listener.harness import MANAGER, NS, Harness, event_path

Message = dict[str, Any]

BODY = AgentEvent(
    watched=ObjectKey(namespace=SKR_NAMESPACE, name="default"),
    watched_gvk=GroupVersionKind(group="operator.kyma-project.io", version="v1beta2", kind="Kyma"),
    operation=Operation.UPDATE,
).to_wire()


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = Harness(ListenerConfig())
    harness.add_runtime("rt-1", "kyma-1")
    yield harness
    await harness.aclose()


def raw_headers(request: httpx.Request) -> list[tuple[bytes, bytes]]:
    return [(name.lower(), value) for name, value in request.headers.raw]


def scope_of(request: httpx.Request, headers: Sequence[tuple[bytes, bytes]] | None = None) -> Message:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "scheme": request.url.scheme,
        "method": request.method,
        "path": request.url.path,
        "raw_path": request.url.raw_path.split(b"?")[0],
        "query_string": request.url.query,
        "root_path": "",
        "headers": list(headers if headers is not None else raw_headers(request)),
        "server": ("kcp.test", 80),
        "client": ("127.0.0.1", 50000),
    }


class Exchange:
    """Feeds ``messages`` to the app and records what it sends back."""

    def __init__(self, messages: Iterable[Message]) -> None:
        self._messages = list(messages)
        self.received = 0
        self.sent: list[Message] = []

    async def receive(self) -> Message:
        self.received += 1
        if not self._messages:
            raise AssertionError("the app read past the end of the request")
        return self._messages.pop(0)

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    @property
    def headers(self) -> dict[bytes, bytes]:
        return dict(self.sent[0]["headers"])

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent[1:])


async def call(
    app: Callable[[Message, Any, Any], Awaitable[None]], scope: Message, *messages: Message
) -> Exchange:
    exchange = Exchange(messages)
    await app(scope, exchange.receive, exchange.send)
    return exchange


def one_message(body: bytes) -> Message:
    return {"type": "http.request", "body": body, "more_body": False}


def test_build_asgi_puts_the_fast_path_in_front(h: Harness) -> None:
    assert isinstance(h.app, FastPath)


async def test_single_message_body_is_accepted(h: Harness) -> None:
    request = h.request(BODY)
    exchange = await call(h.app, scope_of(request), one_message(BODY))
    assert exchange.status == 200
    assert exchange.body == b'{"status":"accepted"}'
    assert exchange.headers[b"content-length"] == str(len(exchange.body)).encode()
    assert exchange.headers[b"content-type"] == b"application/json"
    assert exchange.received == 1
    assert h.enqueued == [f"kyma:{NS}/kyma-1"]
    assert h.sample("kcp_listener_requests_total", {"route": "event", "code": "200"}) == 1
    assert h.sample("watcher_listener_inflight_requests", {"server_name": "listener"}) == 0


async def test_header_names_in_any_case(h: Harness) -> None:
    request = h.request(BODY)
    headers = [(name.title(), value) for name, value in raw_headers(request)]
    exchange = await call(h.app, scope_of(request, headers), one_message(BODY))
    assert exchange.status == 200, exchange.body


async def test_repeated_signature_headers_are_joined_like_the_fastapi_route(
    make_both: Callable[[], list[Harness]],
) -> None:
    """Two Signature fields form one structured-field dictionary with two labels: 401 malformed."""
    results = []
    for harness in make_both():
        request = harness.request(BODY)
        headers = [*raw_headers(request), (b"signature", b"other=:AAAA:")]
        if isinstance(harness.app, FastPath):
            exchange = await call(harness.app, scope_of(request, headers), one_message(BODY))
            results.append((exchange.status, exchange.body))
        else:
            response = await harness.client.send(
                httpx.Request(request.method, request.url, headers=headers, content=BODY)
            )
            results.append((response.status_code, response.content))
    assert results[0] == results[1]
    assert results[0][0] == 401
    assert b'"reason":"malformed"' in results[0][1]


@pytest.fixture
async def make_both() -> AsyncIterator[Callable[[], list[Harness]]]:
    made: list[Harness] = []

    def factory() -> list[Harness]:
        for fast_path in (True, False):
            harness = Harness(ListenerConfig(fast_path=fast_path))
            harness.add_runtime("rt-1", "kyma-1")
            made.append(harness)
        return made[-2:]

    yield factory
    for harness in made:
        await harness.aclose()


async def test_disconnect_before_the_body_sends_nothing(h: Harness) -> None:
    request = h.request(BODY)
    exchange = await call(h.app, scope_of(request), {"type": "http.disconnect"})
    assert exchange.sent == []
    assert h.enqueued == []
    assert h.sample("watcher_listener_inflight_requests", {"server_name": "listener"}) == 0


async def test_disconnect_in_the_middle_of_the_body_sends_nothing(h: Harness) -> None:
    request = h.request(BODY)
    exchange = await call(
        h.app,
        scope_of(request),
        {"type": "http.request", "body": BODY[:10], "more_body": True},
        {"type": "http.disconnect"},
    )
    assert exchange.sent == []
    assert h.enqueued == []


async def test_body_in_several_messages(h: Harness) -> None:
    request = h.request(BODY)
    parts = [BODY[:5], b"", BODY[5:50], BODY[50:]]
    messages = [{"type": "http.request", "body": part, "more_body": True} for part in parts]
    messages.append({"type": "http.request", "body": b"", "more_body": False})
    exchange = await call(h.app, scope_of(request), *messages)
    assert exchange.status == 200
    assert exchange.received == len(messages)


async def test_declared_length_over_the_limit_is_rejected_before_reading(h: Harness) -> None:
    big = b" " * (16 * 1024 + 1)
    request = h.request(big, sign=False)
    exchange = await call(h.app, scope_of(request))  # receive() would fail the test
    assert exchange.status == 413
    assert exchange.headers[b"connection"] == b"close"
    assert exchange.received == 0
    assert h.sample("kcp_listener_oversize_requests_total") == 1


async def test_single_message_over_the_limit_without_length(h: Harness) -> None:
    big = b" " * (16 * 1024 + 1)
    request = h.request(big, sign=False)
    headers = [(n, v) for n, v in raw_headers(request) if n != b"content-length"]
    exchange = await call(h.app, scope_of(request, headers), one_message(big))
    assert exchange.status == 413


async def test_chunks_over_the_limit_stop_reading(h: Harness) -> None:
    request = h.request(b"{}", sign=False)
    headers = [(n, v) for n, v in raw_headers(request) if n != b"content-length"]
    chunk = {"type": "http.request", "body": b"x" * 8192, "more_body": True}
    exchange = await call(h.app, scope_of(request, headers), chunk, chunk, chunk, chunk)
    assert exchange.status == 413
    assert exchange.received == 3  # 24 KiB read, the fourth chunk never


async def test_wrong_method_does_not_read_the_body(h: Harness) -> None:
    request = h.request(BODY, method="PUT")
    exchange = await call(h.app, scope_of(request))
    assert exchange.status == 405
    assert exchange.headers[b"allow"] == b"POST"
    assert exchange.received == 0


async def test_query_string_is_part_of_the_signed_target(h: Harness) -> None:
    signed = h.request(BODY, path=event_path(MANAGER) + "?a=1")
    assert (await call(h.app, scope_of(signed), one_message(BODY))).status == 200
    tampered = scope_of(signed)
    tampered["query_string"] = b"a=2"
    second = h.request(BODY, path=event_path(MANAGER) + "?a=1")
    tampered["headers"] = raw_headers(second)
    exchange = await call(h.app, tampered, one_message(BODY))
    assert exchange.status == 401
    assert b'"reason":"bad-signature"' in exchange.body


async def test_other_paths_go_to_fastapi(h: Harness) -> None:
    request = httpx.Request("GET", "http://kcp.test/readyz")
    exchange = await call(h.app, scope_of(request), one_message(b""))
    assert exchange.status == 200


async def test_route_of_knows_configured_and_other_managers() -> None:
    assert EventIntake.match(f"/v2/{OPERATOR_NAME}/event") == (OPERATOR_NAME, "event")
    harness = Harness(ListenerConfig(managers=("a", "b")))
    assert harness.intake.route_of("/v2/b/heartbeat") == ("b", "heartbeat")
    assert harness.intake.route_of("/v2/unknown/event") == ("unknown", "event")  # answered 404 later
    assert harness.intake.route_of("/v2/b/other") is None
    await harness.aclose()
