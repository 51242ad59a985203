"""Sender tasks against a fake KCP (httpx.MockTransport) on a virtual clock: no sockets, no sleeps."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from kcp_listener.verifier import SignatureVerifier
from kyma_wire.events import AgentEvent, EventBatch, GroupVersionKind, Heartbeat, ObjectKey, Operation
from kyma_wire.httpx_transport import HttpxTransport
from kyma_wire.names import KCP_NAMESPACE, OPERATOR_NAME, SKR_NAMESPACE
from skr_watcher.delivery import Delivery
from skr_watcher.kcp_client import KcpClient
from skr_watcher.metrics import AgentMetrics
from skr_watcher.queue import SendQueue
from skr_watcher.retry import RetryBackoff
from tests.rfc9421_reference import EventSigner
from tests.unit.skr_watcher.fakes import WALL_START, FakeClock, until

KEY_ID = "runtime-1:v1"
GVK = GroupVersionKind(group="operator.kyma-project.io", version="v1beta2", kind="Kyma")


class Keys:
    def __init__(self, keys: dict[str, Ed25519PublicKey]) -> None:
        self._keys = keys

    def public_keys(self, key_id: str) -> Sequence[Ed25519PublicKey]:
        key = self._keys.get(key_id)
        return [key] if key else []


@dataclass
class FakeKcp:
    """Verifies every request's signature, records events/heartbeats, answers as scripted."""

    verifier: SignatureVerifier
    down: bool = False
    script: list[httpx.Response] = field(default_factory=list)
    """Responses to use (in order) before answering 200."""
    calls: int = 0
    events: list[tuple[str, AgentEvent]] = field(default_factory=list)
    heartbeats: list[Heartbeat] = field(default_factory=list)
    batch_route: bool = True
    """False: answer the batch route like upstream's listener (404)."""
    batch_answers: list[list[int]] = field(default_factory=list)
    """Per-event statuses to answer batches with (in order) before accepting every event."""
    batches: list[int] = field(default_factory=list)
    """The size of every batch received (including those answered 404)."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        signature = self.verifier.verify(request.method, str(request.url), request.headers, request.content)
        assert signature.key_id == KEY_ID
        if self.script:
            return self.script.pop(0)
        parts = request.url.path.split("/")
        assert parts[:2] == ["", "v2"] and len(parts) == 4
        if parts[3] == "event":
            self.events.append((parts[2], AgentEvent.model_validate_json(request.content)))
        elif parts[3] == "events":
            batch = EventBatch.model_validate_json(request.content).events
            self.batches.append(len(batch))
            if not self.batch_route:
                return httpx.Response(404, text="404 page not found")
            statuses = self.batch_answers.pop(0) if self.batch_answers else [200] * len(batch)
            assert len(statuses) == len(batch)
            self.events += [(parts[2], e) for e, status in zip(batch, statuses, strict=True) if status == 200]
            results = [{"status": s} if s == 200 else {"status": s, "error": "no"} for s in statuses]
            headers = {"retry-after": "2"} if 429 in statuses else {}
            return httpx.Response(200, json={"results": results}, headers=headers)
        else:
            assert parts[3] == "heartbeat"
            self.heartbeats.append(Heartbeat.model_validate_json(request.content))
        return httpx.Response(200, json={"accepted": True})

    def of(self, operation: Operation) -> list[AgentEvent]:
        return [e for _, e in self.events if e.operation is operation]


@dataclass
class Rig:
    clock: FakeClock
    kcp: FakeKcp
    metrics: AgentMetrics
    queue: SendQueue
    delivery: Delivery

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        return self.metrics.registry.get_sample_value(name, labels or {}) or 0.0


def make_rig(
    *,
    queue_size: int = 100,
    senders: int = 2,
    heartbeat: float = 0.0,
    batch_max_events: int = 1,
    batch_interval: float = 0.0,
    serve: Callable[[FakeKcp], Callable[[httpx.Request], Any]] | None = None,
) -> tuple[Rig, KcpClient]:
    """``serve``: how requests reach the fake KCP (e.g. an async handler that holds some back)."""
    clock = FakeClock()
    key = Ed25519PrivateKey.generate()
    kcp = FakeKcp(SignatureVerifier(Keys({KEY_ID: key.public_key()}), clock=clock.wall))
    client = KcpClient(
        "https://kcp.example:443",
        ssl_context=None,
        signer=EventSigner(key, KEY_ID, clock=clock.wall),
        transport=HttpxTransport(httpx.MockTransport(serve(kcp) if serve else kcp)),
    )
    metrics = AgentMetrics()
    queue = SendQueue(queue_size)
    delivery = Delivery(
        client=client,
        queue=queue,
        metrics=metrics,
        clock=clock,
        backoff=RetryBackoff(0.1, 2.0, random.Random(3)),
        sender_tasks=senders,
        heartbeat_manager=OPERATOR_NAME,
        heartbeat_interval=heartbeat,
        agent_version="test",
        batch_max_events=batch_max_events,
        batch_interval=batch_interval,
    )
    return Rig(clock, kcp, metrics, queue, delivery), client


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    rig, client = make_rig()
    yield rig
    await rig.delivery.stop(flush_within=0.5)
    await client.aclose()


def event(name: str, operation: Operation = Operation.UPDATE, version: int = 0) -> AgentEvent:
    return AgentEvent(
        watched=ObjectKey(namespace="ns", name=name),
        watched_gvk=GVK,
        operation=operation,
        owner=ObjectKey(namespace=KCP_NAMESPACE, name=f"v{version}") if version else None,
        observed_at=WALL_START,
    )


async def test_events_are_signed_and_delivered(rig: Rig) -> None:
    for name in "abc":
        rig.delivery.submit(OPERATOR_NAME, event(name))
    rig.delivery.start()
    await until(lambda: len(rig.kcp.events) == 3)
    assert sorted(e.watched.name for _, e in rig.kcp.events) == ["a", "b", "c"]
    assert {m for m, _ in rig.kcp.events} == {OPERATOR_NAME}
    assert rig.value("watcher_events_sent_total") == 3
    assert rig.value("watcher_kcp_requests_total") == 3
    assert rig.value("watcher_events_queued_total") == 3
    assert rig.value("watcher_event_delivery_latency_seconds_count") == 3
    assert rig.value("watcher_last_successful_send_timestamp_seconds") == WALL_START.timestamp()
    assert rig.kcp.of(Operation.RESYNC) == []


async def test_retryable_answers_are_retried_honouring_retry_after(rig: Rig) -> None:
    rig.kcp.script = [
        httpx.Response(503, headers={"retry-after": "7"}),
        httpx.Response(429, headers={"retry-after": "3"}),
        httpx.Response(502),
    ]
    rig.delivery.submit(OPERATOR_NAME, event("a"))
    rig.delivery.start()
    await until(lambda: len(rig.kcp.events) == 2)
    assert [e.operation for _, e in rig.kcp.events] == [Operation.UPDATE, Operation.RESYNC]
    assert rig.kcp.calls == 3 + 2  # three failures, the event, then the RESYNC they caused
    assert rig.clock.sleeps[0] == 7.0
    assert rig.clock.sleeps[1] == 3.0
    assert 0.2 <= rig.clock.sleeps[2] <= 0.4  # third retry: ceiling 0.4, equal jitter
    assert rig.value("watcher_failed_kcp_total", {"error_reason": "http-503"}) == 1
    assert rig.value("watcher_failed_kcp_total", {"error_reason": "http-429"}) == 1
    assert rig.value("watcher_failed_kcp_total", {"error_reason": "http-5xx"}) == 1


async def test_definitive_rejection_drops_the_event_without_retry(rig: Rig) -> None:
    rig.kcp.script = [httpx.Response(400, json={"error": "malformed"})]
    rig.delivery.submit(OPERATOR_NAME, event("bad"))
    rig.delivery.start()
    await until(lambda: rig.value("watcher_events_dropped_total", {"reason": "rejected"}) == 1)
    assert rig.kcp.calls == 1
    assert rig.clock.sleeps == []
    # the loss is repaired by one RESYNC as soon as something else gets through
    rig.delivery.submit(OPERATOR_NAME, event("good"))
    await until(lambda: len(rig.kcp.of(Operation.RESYNC)) == 1)
    assert [e.watched.name for e in rig.kcp.of(Operation.UPDATE)] == ["good"]


async def test_a_404_drops_the_event_and_queues_no_resync(rig: Rig) -> None:
    """404: KCP has no Kyma or Manifest the event could concern; nothing was missed."""
    rig.kcp.script = [httpx.Response(404, json={"error": "no Kyma for runtime"})]
    rig.delivery.submit(OPERATOR_NAME, event("unknown"))
    rig.delivery.start()
    await until(lambda: rig.value("watcher_events_dropped_total", {"reason": "rejected"}) == 1)
    rig.delivery.submit(OPERATOR_NAME, event("good"))
    rig.delivery.submit(OPERATOR_NAME, event("later"))
    await until(lambda: len(rig.kcp.events) == 2)
    assert sorted(e.watched.name for _, e in rig.kcp.events) == ["good", "later"]  # no RESYNC among them
    assert rig.value("watcher_resync_events_total") == 0
    assert rig.delivery.tracker.pending() == {}


async def test_a_401_with_retry_after_is_signed_anew_and_retried(rig: Rig) -> None:
    """The listener's answer to a signature older than its hold on the runtime (a failover): the
    agent must not drop the event; the retry carries a new signature (FakeKcp verifies each)."""
    rig.kcp.script = [
        httpx.Response(
            401, json={"error": "unauthenticated", "reason": "predates-holder"}, headers={"retry-after": "1"}
        )
    ]
    rig.delivery.submit(OPERATOR_NAME, event("a"))
    rig.delivery.start()
    await until(lambda: len(rig.kcp.events) >= 1)
    assert rig.kcp.events[0][1].watched.name == "a"
    assert rig.clock.sleeps[0] == 1.0
    assert rig.value("watcher_events_dropped_total", {"reason": "rejected"}) == 0
    assert rig.value("watcher_failed_kcp_total", {"error_reason": "http-401"}) == 1


async def test_outage_retries_with_growing_backoff_then_delivers_and_resyncs_once(rig: Rig) -> None:
    rig.kcp.down = True
    rig.delivery.submit(OPERATOR_NAME, event("a"))
    rig.delivery.submit(OPERATOR_NAME, event("b"))
    rig.delivery.start()
    await until(lambda: rig.kcp.calls >= 12)
    ceilings = [min(2.0, 0.1 * 2**i) for i in range(5)]
    per_sender = sorted(rig.clock.sleeps)[:2]  # the first retry of each of the two senders
    assert all(ceilings[0] / 2 <= s <= ceilings[0] for s in per_sender)
    assert max(rig.clock.sleeps) <= 2.0
    assert rig.value("watcher_failed_kcp_total", {"error_reason": "network"}) >= 12
    rig.kcp.down = False
    await until(lambda: len(rig.kcp.of(Operation.RESYNC)) == 1 and len(rig.kcp.events) == 3)
    assert sorted(e.watched.name for e in rig.kcp.of(Operation.UPDATE)) == ["a", "b"]
    resync = rig.kcp.of(Operation.RESYNC)[0]
    assert resync.watched == ObjectKey(namespace=SKR_NAMESPACE, name="default")
    # later traffic does not cause more resyncs
    rig.delivery.submit(OPERATOR_NAME, event("c"))
    await until(lambda: len(rig.kcp.events) == 4)
    assert len(rig.kcp.of(Operation.RESYNC)) == 1
    assert rig.value("watcher_resync_events_total") == 1


async def test_overflow_drops_oldest_and_triggers_a_resync() -> None:
    rig, client = make_rig(queue_size=3)
    try:
        for name in "abcde":
            rig.delivery.submit(OPERATOR_NAME, event(name))
        assert rig.value("watcher_events_dropped_total", {"reason": "overflow"}) == 2
        assert rig.value("watcher_queue_depth") == 3
        rig.delivery.start()
        await until(lambda: len(rig.kcp.of(Operation.RESYNC)) == 1)
        await until(lambda: len(rig.kcp.events) == 4)
        assert sorted(e.watched.name for e in rig.kcp.of(Operation.UPDATE)) == ["c", "d", "e"]
    finally:
        await rig.delivery.stop(flush_within=0.5)
        await client.aclose()


async def test_a_burst_for_one_object_is_sent_once_with_the_latest_content(rig: Rig) -> None:
    for version in range(1, 10_001):
        rig.delivery.submit(OPERATOR_NAME, event("hot", version=version))
    assert rig.value("watcher_events_coalesced_total") == 9_999
    rig.delivery.start()
    await until(lambda: len(rig.kcp.events) == 1)
    assert rig.kcp.events[0][1].owner == ObjectKey(namespace=KCP_NAMESPACE, name="v10000")


async def test_undelivered_event_is_abandoned_when_a_newer_one_is_queued() -> None:
    rig, client = make_rig(senders=1)
    try:
        rig.kcp.down = True
        rig.delivery.submit(OPERATOR_NAME, event("a", version=1))
        rig.delivery.start()
        await until(lambda: rig.kcp.calls >= 2)
        rig.delivery.submit(OPERATOR_NAME, event("a", version=2))
        await until(lambda: rig.value("watcher_events_superseded_total") == 1)
        rig.kcp.down = False
        await until(lambda: len(rig.kcp.of(Operation.UPDATE)) == 1 and len(rig.kcp.of(Operation.RESYNC)) == 1)
        assert rig.kcp.of(Operation.UPDATE)[0].owner == ObjectKey(namespace=KCP_NAMESPACE, name="v2")
    finally:
        await rig.delivery.stop(flush_within=0.5)
        await client.aclose()


async def test_a_burst_while_kcp_is_down_is_delivered_once_with_several_senders() -> None:
    rig, client = make_rig(senders=4)
    try:
        rig.kcp.down = True
        rig.delivery.start()
        for version in range(1, 101):
            rig.delivery.submit(OPERATOR_NAME, event("hot", version=version))
            await asyncio.sleep(0)  # let idle senders take entries: several end up in flight
        await until(lambda: rig.kcp.calls >= 20)
        rig.kcp.down = False
        await until(lambda: len(rig.kcp.of(Operation.RESYNC)) == 1 and rig.value("watcher_queue_depth") == 0)
        await until(lambda: rig.value("watcher_events_sent_total") == 2)
        hot = rig.kcp.of(Operation.UPDATE)
        assert len(hot) == 1
        assert hot[0].owner == ObjectKey(namespace=KCP_NAMESPACE, name="v100")
        assert rig.value("watcher_events_superseded_total") >= 3
    finally:
        await rig.delivery.stop(flush_within=0.5)
        await client.aclose()


async def test_an_undelivered_delete_is_not_abandoned_for_a_recreate() -> None:
    rig, client = make_rig(senders=1)
    try:
        rig.kcp.down = True
        rig.delivery.submit(OPERATOR_NAME, event("a", Operation.DELETE))
        rig.delivery.start()
        await until(lambda: rig.kcp.calls >= 2)
        rig.delivery.submit(OPERATOR_NAME, event("a", Operation.CREATE))
        calls = rig.kcp.calls
        await until(lambda: rig.kcp.calls >= calls + 3)
        rig.kcp.down = False
        await until(lambda: len(rig.kcp.events) == 3)
        assert [e.operation for _, e in rig.kcp.events] == [
            Operation.DELETE,
            Operation.CREATE,
            Operation.RESYNC,
        ]
        assert rig.value("watcher_events_superseded_total") == 0
    finally:
        await rig.delivery.stop(flush_within=0.5)
        await client.aclose()


async def test_heartbeats_on_the_interval_and_resync_after_silent_outage() -> None:
    rig, client = make_rig(heartbeat=5.0)
    try:
        rig.delivery.start()
        await until(lambda: len(rig.kcp.heartbeats) >= 3)
        assert rig.kcp.heartbeats[0].agent_version == "test"
        assert rig.kcp.heartbeats[0].sent_at == WALL_START
        assert 5.0 in rig.clock.sleeps
        rig.kcp.down = True
        await until(lambda: rig.value("watcher_heartbeats_total", {"result": "retry"}) >= 2)
        rig.kcp.down = False
        await until(lambda: len(rig.kcp.of(Operation.RESYNC)) == 1)
        beats = len(rig.kcp.heartbeats)
        await until(lambda: len(rig.kcp.heartbeats) >= beats + 3)
        assert len(rig.kcp.of(Operation.RESYNC)) == 1
    finally:
        await rig.delivery.stop(flush_within=0.5)
        await client.aclose()


async def test_start_up_resync_is_sent_once(rig: Rig) -> None:
    rig.delivery.request_resync(OPERATOR_NAME)
    rig.delivery.start()
    await until(lambda: len(rig.kcp.events) == 1)
    rig.delivery.submit(OPERATOR_NAME, event("a"))
    await until(lambda: len(rig.kcp.events) == 2)
    assert [e.operation for _, e in rig.kcp.events] == [Operation.RESYNC, Operation.UPDATE]
    assert rig.delivery.tracker.pending() == {}


async def test_rejected_resync_is_not_retried_forever(rig: Rig) -> None:
    rig.kcp.script = [httpx.Response(400)]
    rig.delivery.request_resync(OPERATOR_NAME)
    rig.delivery.start()
    await until(lambda: rig.value("watcher_events_dropped_total", {"reason": "rejected"}) == 1)
    rig.delivery.submit(OPERATOR_NAME, event("a"))
    await until(lambda: len(rig.kcp.events) == 1)
    assert rig.kcp.of(Operation.RESYNC) == []


async def test_stop_flushes_the_queue() -> None:
    rig, client = make_rig()
    for i in range(20):
        rig.delivery.submit(OPERATOR_NAME, event(f"o{i}"))
    rig.delivery.start()
    left = await rig.delivery.stop(flush_within=5.0)
    await client.aclose()
    assert left == 0
    assert len(rig.kcp.events) == 20
    rig.delivery.submit(OPERATOR_NAME, event("late"))
    assert rig.value("watcher_events_dropped_total", {"reason": "shutdown"}) == 1


async def test_stop_gives_up_at_the_deadline_when_kcp_is_down() -> None:
    rig, client = make_rig(senders=1)
    rig.kcp.down = True
    for i in range(3):
        rig.delivery.submit(OPERATOR_NAME, event(f"o{i}"))
    rig.delivery.start()
    left = await rig.delivery.stop(flush_within=0.05)
    await client.aclose()
    assert left == 3
    assert rig.value("watcher_events_dropped_total", {"reason": "shutdown"}) == 3


async def test_wire_body_is_what_the_listener_parses(rig: Rig) -> None:
    rig.delivery.submit(OPERATOR_NAME, event("a", Operation.CREATE, version=3))
    rig.delivery.start()
    await until(lambda: len(rig.kcp.events) == 1)
    _, received = rig.kcp.events[0]
    assert json.loads(received.to_wire()) == {
        "watched": {"namespace": "ns", "name": "a"},
        "watchedGvk": {"group": "operator.kyma-project.io", "version": "v1beta2", "kind": "Kyma"},
        "operation": "CREATE",
        "owner": {"namespace": KCP_NAMESPACE, "name": "v3"},
        "observedAt": "2026-11-21T10:00:00Z",
    }
