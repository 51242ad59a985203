"""The agent's real sender (Delivery, KcpClient, FastEventSigner) against the real listener app.

In process (httpx's ASGI transport, no sockets): batches are verified once and every event is
routed to exactly its Kyma or Manifest; against a listener without the batch route (as upstream's,
which answers 404 for unknown paths) the same events arrive one by one.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

import httpx
import pytest
from nacl.signing import SigningKey

from kcp_listener.config import ListenerConfig
from kyma_wire.events import AgentEvent, GroupVersionKind, ObjectKey, Operation, batch_path, heartbeat_path
from kyma_wire.httpx_transport import HttpxTransport
from kyma_wire.names import OPERATOR_NAME, SKR_NAMESPACE
from kyma_wire.profile import make_key_id
from skr_watcher.delivery import Delivery
from skr_watcher.kcp_client import KcpClient
from skr_watcher.metrics import AgentMetrics
from skr_watcher.queue import SendQueue
from skr_watcher.retry import RetryBackoff
from skr_watcher.signer import FastEventSigner
from tests.unit.kcp_listener.harness import BASE_URL, NS, Harness
from tests.unit.skr_watcher.fakes import FakeClock, until

KYMA = GroupVersionKind(group="operator.kyma-project.io", version="v1beta2", kind="Kyma")
DEPLOYMENT = GroupVersionKind(group="apps", version="v1", kind="Deployment")
Scope = MutableMapping[str, Any]
ASGI = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


def without_batch_route(app: ASGI, *, heartbeat: bool = True) -> ASGI:
    """The listener as upstream's would answer: 404 for ``/v2/<manager>/events`` (and, with
    ``heartbeat=False``, for ``/v2/<manager>/heartbeat``: upstream has only the event route)."""
    missing = {batch_path(OPERATOR_NAME)} | (set() if heartbeat else {heartbeat_path(OPERATOR_NAME)})

    async def wrapped(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] in missing:
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b"404 page not found"})
            return
        await app(scope, receive, send)

    return wrapped


class Rig:
    def __init__(
        self,
        fast_path: bool,
        batch_route: bool,
        heartbeat_route: bool = True,
        heartbeat_interval: float = 30.0,
    ) -> None:
        self.listener = Harness(ListenerConfig(fast_path=fast_path))
        self.listener.add_runtime("rt-1", "kyma-1", ["kyma-1-istio", "kyma-1-serverless"])
        app = (
            self.listener.app
            if batch_route and heartbeat_route
            else without_batch_route(self.listener.app, heartbeat=heartbeat_route)
        )
        self.clock = FakeClock()
        self.client = KcpClient(
            BASE_URL,
            ssl_context=None,
            signer=FastEventSigner(
                SigningKey(self.listener.private_keys["rt-1"].private_bytes_raw()),
                make_key_id("rt-1", "v1"),
                clock=self.listener.clock,
            ),
            transport=HttpxTransport(httpx.ASGITransport(app=app)),
        )
        self.metrics = AgentMetrics()
        self.delivery = Delivery(
            client=self.client,
            queue=SendQueue(1000),
            metrics=self.metrics,
            clock=self.clock,
            backoff=RetryBackoff(0.1, 1.0, random.Random(1)),
            sender_tasks=2,
            batch_max_events=16,
            batch_interval=0.01,
            heartbeat_interval=heartbeat_interval,
        )

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        return self.metrics.registry.get_sample_value(name, labels or {}) or 0.0


@pytest.fixture(
    params=[(True, True), (False, True), (True, False)], ids=["fast-path", "fastapi", "no-batch-route"]
)
async def rig(request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    fast_path, batch_route = request.param
    rig = Rig(fast_path, batch_route)
    yield rig
    await rig.delivery.stop(flush_within=1)
    await rig.client.aclose()
    await rig.listener.aclose()


def kyma_event(version: int) -> AgentEvent:
    return AgentEvent(
        watched=ObjectKey(namespace=SKR_NAMESPACE, name="default"),
        watched_gvk=KYMA,
        operation=Operation.UPDATE,
        owner=ObjectKey(namespace=NS, name=f"v{version}"),
    )


def module_event(name: str, owner: str) -> AgentEvent:
    return AgentEvent(
        watched=ObjectKey(namespace="istio-system", name=name),
        watched_gvk=DEPLOYMENT,
        operation=Operation.UPDATE,
        owner=ObjectKey(namespace=NS, name=owner),
    )


async def test_every_event_reaches_exactly_its_target(rig: Rig) -> None:
    events = [module_event(f"d{i}", "kyma-1-istio" if i % 2 else "kyma-1-serverless") for i in range(30)]
    events.append(module_event("stray", "kyma-2-istio"))  # no such Manifest here: 404, dropped
    for e in events:
        rig.delivery.submit(OPERATOR_NAME, e)
    rig.delivery.start()
    await until(
        lambda: (
            rig.value("watcher_events_sent_total") == 30
            and rig.value("watcher_events_dropped_total", {"reason": "rejected"}) == 1
            and rig.value("watcher_queue_depth") == 0
        )
    )
    assert rig.listener.sample("kcp_listener_rejected_events_total", {"reason": "unknown-owner"}) == 1
    # a 404 means KCP has nothing the event concerns: nothing was missed, so no RESYNC follows
    assert rig.value("watcher_resync_events_total") == 0 and rig.delivery.tracker.pending() == {}
    modules = rig.listener.enqueued
    assert sorted(set(modules)) == [f"manifest:{NS}/kyma-1-istio", f"manifest:{NS}/kyma-1-serverless"]
    assert len(modules) == 30  # one request per event (no listener coalescing)
    batches = rig.listener.sample("kcp_listener_batches_total")
    if rig.value("watcher_kcp_batch_fallbacks_total"):
        assert batches == 0
        assert rig.listener.sample("kcp_listener_requests_total", {"route": "event", "code": "200"}) >= 30
    else:
        assert batches >= 2 and rig.listener.sample("kcp_listener_batched_events_total") >= 30
        assert rig.listener.sample("kcp_listener_auth_failures_total", {"reason": "replay"}) == 0


async def test_a_burst_for_one_object_arrives_with_its_latest_content(rig: Rig) -> None:
    rig.delivery.start()
    for version in range(1, 200):
        rig.delivery.submit(OPERATOR_NAME, kyma_event(version))
    await until(lambda: rig.value("watcher_queue_depth") == 0 and rig.listener.enqueued != [])
    await until(lambda: rig.value("watcher_events_sent_total") >= 1)
    assert set(rig.listener.enqueued) == {f"kyma:{NS}/kyma-1"}
    assert rig.value("watcher_events_sent_total") <= 3


async def test_agent_keeps_working_against_a_listener_without_the_heartbeat_route() -> None:
    """Upstream's listener has only ``/v2/<manager>/event``: heartbeats get 404 there. The agent
    must keep delivering events; the 404s neither stop it nor trigger resyncs."""
    rig = Rig(fast_path=True, batch_route=False, heartbeat_route=False, heartbeat_interval=5.0)
    try:
        rig.delivery.start()
        await until(lambda: rig.value("watcher_heartbeats_total", {"result": "drop"}) >= 3)
        for i in range(5):
            rig.delivery.submit(OPERATOR_NAME, module_event(f"d{i}", "kyma-1-istio"))
        await until(lambda: rig.value("watcher_events_sent_total") == 5)
        assert set(rig.listener.enqueued) == {f"manifest:{NS}/kyma-1-istio"}
        beats = rig.value("watcher_heartbeats_total", {"result": "drop"})
        await until(lambda: rig.value("watcher_heartbeats_total", {"result": "drop"}) >= beats + 3)
        assert rig.value("watcher_heartbeats_total", {"result": "delivered"}) == 0
        assert rig.value("watcher_resync_events_total") == 0
        assert rig.listener.sample("kcp_listener_heartbeats_total") == 0
        assert rig.listener.sample("kcp_listener_requests_total", {"route": "event", "code": "200"}) == 5
    finally:
        await rig.delivery.stop(flush_within=1)
        await rig.client.aclose()
        await rig.listener.aclose()
