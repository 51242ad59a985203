"""Batched delivery (``/v2/<manager>/events``) against a fake KCP on a virtual clock.

The guarantees of single-event delivery hold per event inside a batch: retry with backoff until
delivered, superseded or rejected; a RESYNC after losses and outages; fallback to single events
against a listener without the batch route (upstream's answers 404).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from kyma_wire.events import MAX_BATCH_EVENTS, ObjectKey, Operation
from kyma_wire.names import KCP_NAMESPACE, OPERATOR_NAME
from skr_watcher.delivery import BATCH_RETRY_SECONDS, Delivery
from skr_watcher.kcp_client import KcpClient
from skr_watcher.metrics import AgentMetrics
from skr_watcher.queue import SendQueue
from skr_watcher.retry import RetryBackoff
from tests.unit.skr_watcher.fakes import until
from tests.unit.skr_watcher.test_delivery import FakeKcp, Rig, event, make_rig


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    rig, client = make_rig(senders=2, batch_max_events=8, batch_interval=0.01)
    yield rig
    await rig.delivery.stop(flush_within=0.5)
    await client.aclose()


def names(rig: Rig) -> list[str]:
    return sorted(e.watched.name for e in rig.kcp.of(Operation.UPDATE))


async def test_a_backlog_goes_in_full_batches_with_one_signature_each(rig: Rig) -> None:
    for i in range(20):
        rig.delivery.submit(OPERATOR_NAME, event(f"o{i:02}"))
    rig.delivery.start()
    await until(lambda: len(rig.kcp.events) == 20)
    assert names(rig) == [f"o{i:02}" for i in range(20)]
    assert max(rig.kcp.batches) == 8  # FakeKcp verified the one signature of each request
    assert rig.value("watcher_kcp_requests_total") <= 4  # 20 events: 8 + 8 + the rest
    assert rig.value("watcher_events_sent_total") == 20
    assert rig.value("watcher_kcp_batches_total") == len(rig.kcp.batches)
    assert rig.value("watcher_kcp_batched_events_total") == sum(rig.kcp.batches)
    assert rig.value("watcher_event_delivery_latency_seconds_count") == 20


async def test_an_idle_agent_sends_its_first_event_at_once_and_paces_the_rest(rig: Rig) -> None:
    rig.delivery.start()
    rig.delivery.submit(OPERATOR_NAME, event("first"))
    await until(lambda: len(rig.kcp.events) == 1)
    assert rig.clock.sleeps == []  # no added latency when nothing else is going on
    assert rig.kcp.batches == []  # a single event goes to the upstream route
    for name in ("a", "b", "c"):
        rig.delivery.submit(OPERATOR_NAME, event(name))
    await until(lambda: len(rig.kcp.events) == 4)
    assert rig.clock.sleeps and max(rig.clock.sleeps) <= 0.01  # waited for the rest of the interval
    assert sum(rig.kcp.batches) + rig.value("watcher_kcp_requests_total") - len(rig.kcp.batches) == 1 + 3


async def test_partial_acceptance_retries_only_what_was_not_accepted(rig: Rig) -> None:
    rig.kcp.batch_answers = [[200, 429, 404, 200]]
    for name in "abcd":
        rig.delivery.submit(OPERATOR_NAME, event(name))
    rig.delivery.start()
    await until(lambda: rig.value("watcher_queue_depth") == 0 and len(rig.kcp.of(Operation.RESYNC)) == 1)
    await until(lambda: names(rig) == ["a", "b", "d"])
    assert rig.kcp.batches[0] == 4
    assert rig.value("watcher_events_dropped_total", {"reason": "rejected"}) == 1  # "c": 404 for good
    assert rig.value("watcher_events_sent_total") >= 3
    assert 2.0 in rig.clock.sleeps  # the batch answer's Retry-After for the 429
    # the rejection is repaired by one RESYNC, as for a single event
    assert len(rig.kcp.of(Operation.RESYNC)) == 1


async def test_outage_retries_the_batch_with_backoff_then_resyncs_once(rig: Rig) -> None:
    rig.kcp.down = True
    for name in "abc":
        rig.delivery.submit(OPERATOR_NAME, event(name))
    rig.delivery.start()
    await until(lambda: rig.kcp.calls >= 6)
    assert max(rig.clock.sleeps) <= 2.0
    assert rig.value("watcher_failed_kcp_total", {"error_reason": "network"}) >= 6
    rig.kcp.down = False
    await until(lambda: names(rig) == ["a", "b", "c"] and len(rig.kcp.of(Operation.RESYNC)) == 1)
    assert rig.value("watcher_resync_events_total") == 1


async def test_a_newer_event_supersedes_its_undelivered_copy_in_a_batch(rig: Rig) -> None:
    rig.kcp.down = True
    rig.delivery.submit(OPERATOR_NAME, event("hot", version=1))
    rig.delivery.submit(OPERATOR_NAME, event("cold"))
    rig.delivery.start()
    await until(lambda: rig.kcp.calls >= 2)
    rig.delivery.submit(OPERATOR_NAME, event("hot", version=2))
    await until(lambda: rig.value("watcher_events_superseded_total") >= 1)
    rig.kcp.down = False
    await until(lambda: rig.value("watcher_queue_depth") == 0 and len(rig.kcp.of(Operation.RESYNC)) == 1)
    await until(lambda: len(rig.kcp.of(Operation.UPDATE)) == 2)
    hot = [e for e in rig.kcp.of(Operation.UPDATE) if e.watched.name == "hot"]
    assert [e.owner for e in hot] == [ObjectKey(namespace=KCP_NAMESPACE, name="v2")]


async def test_fallback_to_single_events_against_an_upstream_listener(rig: Rig) -> None:
    rig.kcp.batch_route = False
    for name in "abcde":
        rig.delivery.submit(OPERATOR_NAME, event(name))
    rig.delivery.start()
    await until(lambda: names(rig) == ["a", "b", "c", "d", "e"])
    assert rig.value("watcher_kcp_batch_fallbacks_total") == 1
    assert len(rig.kcp.batches) == 1  # tried once...
    for name in "fgh":
        rig.delivery.submit(OPERATOR_NAME, event(name))
    await until(lambda: len(rig.kcp.of(Operation.UPDATE)) == 8)
    assert len(rig.kcp.batches) == 1  # ...then single events only
    assert rig.value("watcher_events_dropped_total", {"reason": "rejected"}) == 0
    assert rig.kcp.of(Operation.RESYNC) == []  # a missing route loses nothing
    # after a while the batch route is tried again (the listener may have been upgraded)
    rig.kcp.batch_route = True
    rig.clock.advance(BATCH_RETRY_SECONDS + 1)
    for name in "ijk":
        rig.delivery.submit(OPERATOR_NAME, event(name))
    await until(lambda: len(rig.kcp.of(Operation.UPDATE)) == 11)
    assert len(rig.kcp.batches) == 2


async def test_the_whole_batch_rejected_drops_every_event_and_resyncs(rig: Rig) -> None:
    rig.kcp.script = [httpx.Response(401, json={"error": "unauthenticated"})]
    for name in "ab":
        rig.delivery.submit(OPERATOR_NAME, event(name))
    rig.delivery.start()
    await until(lambda: rig.value("watcher_events_dropped_total", {"reason": "rejected"}) == 2)
    rig.delivery.submit(OPERATOR_NAME, event("later"))
    await until(lambda: len(rig.kcp.of(Operation.RESYNC)) == 1)


async def test_batches_respect_the_bounded_queue_and_stop_flushes_them() -> None:
    rig, client = make_rig(queue_size=10, senders=1, batch_max_events=4, batch_interval=0.01)
    try:
        for i in range(12):
            rig.delivery.submit(OPERATOR_NAME, event(f"o{i:02}"))
        assert rig.value("watcher_events_dropped_total", {"reason": "overflow"}) == 2
        rig.delivery.start()
        left = await rig.delivery.stop(flush_within=5)
        assert left == 0
        assert len(rig.kcp.of(Operation.UPDATE)) == 10
        assert max(rig.kcp.batches) == 4
    finally:
        await client.aclose()


def test_batch_size_is_bounded_by_the_contract() -> None:
    with pytest.raises(ValueError, match="batch_max_events"):
        Delivery(
            client=KcpClient("https://kcp", ssl_context=None, signer=None),
            queue=SendQueue(1),
            metrics=AgentMetrics(),
            clock=make_rig()[0].clock,
            backoff=RetryBackoff(0.1, 1.0),
            batch_max_events=MAX_BATCH_EVENTS + 1,
        )


async def test_a_200_without_per_event_results_means_no_batch_route(rig: Rig) -> None:
    rig.kcp.script = [httpx.Response(200, json={"accepted": True})]  # e.g. a catch-all route
    for name in "abc":
        rig.delivery.submit(OPERATOR_NAME, event(name))
    rig.delivery.start()
    await until(lambda: names(rig) == ["a", "b", "c"])
    assert rig.value("watcher_kcp_batch_fallbacks_total") == 1
    assert rig.kcp.batches == []  # the scripted answer came before FakeKcp looked at the batch
    assert rig.value("watcher_events_sent_total") == 3


def two_batches_at_once(kcp: FakeKcp) -> Callable[[httpx.Request], Awaitable[httpx.Response]]:
    """KCP answers the first batch request only once a second one is under way too."""
    both = asyncio.Event()
    arrived = 0

    async def serve(request: httpx.Request) -> httpx.Response:
        nonlocal arrived
        if request.url.path.endswith("/events"):
            arrived += 1
            if arrived == 2:
                both.set()
            await both.wait()
        return kcp(request)

    return serve


async def test_batches_under_way_together_switch_to_single_events_once() -> None:
    rig, client = make_rig(senders=4, batch_max_events=2, batch_interval=0.01, serve=two_batches_at_once)
    try:
        rig.kcp.batch_route = False
        for i in range(16):
            rig.delivery.submit(OPERATOR_NAME, event(f"o{i:02}"))
        rig.delivery.start()
        await until(lambda: len(names(rig)) == 16)
        assert names(rig) == [f"o{i:02}" for i in range(16)]
        assert len(rig.kcp.batches) == 2  # both answered 404, then single events only
        assert rig.value("watcher_kcp_batch_fallbacks_total") == 1
    finally:
        await rig.delivery.stop(flush_within=0.5)
        await client.aclose()
