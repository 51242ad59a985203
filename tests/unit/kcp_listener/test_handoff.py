"""Events for a shard held by another replica are handed to the holder (DESIGN.md §10).

Two or three listener replicas in one process (``sharded.py``): real intakes, real hand-off apps and
the real forwarding client, connected by in-process HTTP; the ShardView is a hand-written table.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
from collections.abc import AsyncIterator, Mapping

import httpx
import pytest
from prometheus_client import CollectorRegistry

from kcp_listener.config import AuthMode, ListenerConfig
from kcp_listener.handoff import HANDOFF_PATH, Forwarder, HandoffMetrics, HandoffRequest
from kcp_listener.handoff_auth import HandoffSigner
from kyma_operator.listener.shards import RuntimeShardView
from kyma_operator.runtime.shardmap import Replica
from kyma_wire.events import EventBatch, Heartbeat, batch_path, heartbeat_path
from kyma_wire.http_client import HeaderSource, HttpResponse, HttpTransportError
from tests.unit.kcp_listener.harness import MANAGER, NS, Harness, istio_xfcc
from tests.unit.kcp_listener.sharded import KEY, Cluster, StaticShards, cluster, runtime_in_shard
from tests.unit.kcp_listener.test_app import DEPLOY_GVK, event

RT_A = runtime_in_shard(0)
"""A runtime whose shard (0) replica ``a`` holds."""
RT_B = runtime_in_shard(1)
"""A runtime whose shard (1) replica ``b`` holds."""
RT_NOBODY = runtime_in_shard(2)
"""A runtime whose shard (2) nobody holds at first."""


@pytest.fixture(params=[True, False], ids=["fast-path", "fastapi"])
async def replicas(request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    c = cluster(["a", "b", "c"], ListenerConfig(fast_path=request.param))
    c.assign(0, "a")
    c.assign(1, "b")
    c.assign(3, "c")
    c.add_runtime(RT_A, "kyma-a", ["kyma-a-istio"])
    c.add_runtime(RT_B, "kyma-b", ["kyma-b-istio", "kyma-b-serverless"])
    c.add_runtime(RT_NOBODY, "kyma-n")
    yield c
    await c.aclose()


def forwarded(c: Cluster, node: str, result: str) -> float:
    return c[node].sample("kcp_listener_handoff_forwarded_events_total", {"result": result})


def received(c: Cluster, node: str, result: str) -> float:
    return c[node].sample("kcp_listener_handoff_received_requests_total", {"result": result})


async def test_an_event_of_a_held_shard_stays_local(replicas: Cluster) -> None:
    a = replicas["a"].harness
    response = await a.post(event(), runtime_id=RT_A)
    assert response.status_code == 200, response.text
    assert a.enqueued == [f"kyma:{NS}/kyma-a"]
    assert replicas["b"].harness.enqueued == []
    assert forwarded(replicas, "a", "delivered") == 0


async def test_an_event_sent_to_a_non_holder_reaches_the_holder_exactly_once(replicas: Cluster) -> None:
    a, b = replicas["a"].harness, replicas["b"].harness
    response = await a.post(event(owner="kyma-b-istio", gvk=DEPLOY_GVK), runtime_id=RT_B)
    assert response.status_code == 200, response.text
    assert response.json() == {"status": "accepted"}
    assert a.enqueued == []
    assert b.enqueued == [f"manifest:{NS}/kyma-b-istio"]
    assert forwarded(replicas, "a", "delivered") == 1
    assert received(replicas, "b", "accepted") == 1
    assert b.sample("kcp_listener_enqueued_requests_total", {"controller": "manifest"}) == 1
    assert replicas["a"].sample("kcp_listener_handoff_seconds_count") == 1


async def test_the_holder_routes_by_the_authenticated_runtime_only(replicas: Cluster) -> None:
    """A forwarded event can do no more than the original: another runtime's Manifest is a 404."""
    a, b = replicas["a"].harness, replicas["b"].harness
    response = await a.post(event(owner="kyma-a-istio", gvk=DEPLOY_GVK), runtime_id=RT_B)
    assert response.status_code == 404, response.text
    assert response.json() == {"error": "owner not found for this runtime"}
    assert a.enqueued == [] and b.enqueued == []
    assert b.sample("kcp_listener_rejected_events_total", {"reason": "foreign-owner"}) == 1


async def test_a_batch_is_forwarded_in_one_request_and_answered_per_event(replicas: Cluster) -> None:
    a, b = replicas["a"].harness, replicas["b"].harness
    invalid = b'{"watched":{"name":""},"watchedGvk":{"version":"v1","kind":"K"}}'
    body = EventBatch.wire_of(
        [event(), invalid, event(owner="kyma-b-serverless", gvk=DEPLOY_GVK), event(owner="kyma-a-istio")]
    )
    response = await a.post(body, runtime_id=RT_B, path=batch_path(MANAGER))
    assert response.status_code == 200, response.text
    assert [r["status"] for r in response.json()["results"]] == [200, 400, 200, 404]
    assert "retry-after" not in response.headers
    assert b.enqueued == [f"kyma:{NS}/kyma-b", f"manifest:{NS}/kyma-b-serverless"]
    assert a.enqueued == []
    assert received(replicas, "b", "accepted") == 1  # the batch is one hand-off
    assert replicas["a"].sample("kcp_listener_handoff_seconds_count") == 1  # in one internal request
    assert forwarded(replicas, "a", "delivered") == 3  # its three valid events


async def test_a_heartbeat_reaches_the_holder(replicas: Cluster) -> None:
    a, b = replicas["a"].harness, replicas["b"].harness
    beat = Heartbeat(sent_at=datetime.datetime(2027, 1, 15, 8, tzinfo=datetime.UTC)).to_wire()
    response = await a.post(beat, runtime_id=RT_B, path=heartbeat_path(MANAGER))
    assert response.status_code == 200, response.text
    assert b.heartbeats.last_seen(RT_B) is not None
    assert a.heartbeats.last_seen(RT_B) is None
    assert b.sample("kcp_listener_heartbeats_total") == 1


async def test_nobody_holding_the_shard_is_503_and_the_same_request_passes_later(replicas: Cluster) -> None:
    c = replicas["c"].harness
    request = c.request(event(), runtime_id=RT_NOBODY)
    response = await c.send(request)
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "1"
    assert forwarded(replicas, "c", "no-holder") == 1
    replicas.assign(2, "b")
    retried = await c.send(request)  # the agent retries the same signed request: its nonce is unspent
    assert retried.status_code == 200, retried.text
    assert replicas["b"].harness.enqueued == [f"kyma:{NS}/kyma-n"]


async def test_holder_down_is_503_and_nothing_is_lost_after_the_retry(replicas: Cluster) -> None:
    a, b = replicas["a"].harness, replicas["b"].harness
    replicas.network.down.add("b")
    request = a.request(event(), runtime_id=RT_B)
    response = await a.send(request)
    assert response.status_code == 503, response.text
    assert "retry-after" in response.headers
    assert forwarded(replicas, "a", "failed") == 1
    batch = await a.post(EventBatch.wire_of([event(), event()]), runtime_id=RT_B, path=batch_path(MANAGER))
    assert batch.status_code == 200
    assert [r["status"] for r in batch.json()["results"]] == [503, 503]
    assert batch.headers["retry-after"] == "1"
    assert b.enqueued == [] and a.enqueued == []
    replicas.network.down.clear()
    assert (await a.send(request)).status_code == 200
    assert b.enqueued == [f"kyma:{NS}/kyma-b"]


async def test_a_holder_that_lost_the_shard_answers_503_and_enqueues_nothing(replicas: Cluster) -> None:
    """The holder re-checks: ``a`` still thinks ``b`` holds shard 1, ``b`` knows it does not."""
    a, b = replicas["a"].harness, replicas["b"].harness
    replicas["b"].handoff.shards = RuntimeShardView(StaticShards("b", {}))
    response = await a.post(event(), runtime_id=RT_B)
    assert response.status_code == 503, response.text
    assert received(replicas, "b", "not-holder") == 1
    assert forwarded(replicas, "a", "not-holder") == 1
    assert b.enqueued == [] and a.enqueued == []


async def test_a_not_serving_holder_answers_503(replicas: Cluster) -> None:
    a, b = replicas["a"].harness, replicas["b"].harness
    b.serving = False
    assert (await a.post(event(), runtime_id=RT_B)).status_code == 503
    assert b.enqueued == []


async def test_a_replayed_agent_request_is_refused_by_the_holder_whichever_replica_gets_it(
    replicas: Cluster,
) -> None:
    a, b, c = (replicas[n].harness for n in "abc")
    request = a.request(event(), runtime_id=RT_B)
    assert (await a.send(request)).status_code == 200
    to_b = await b.send(_copy(request))
    assert to_b.status_code == 401 and to_b.json()["reason"] == "replay"
    to_c = await c.send(_copy(request))
    assert to_c.status_code == 401 and to_c.json()["reason"] == "replay"
    assert (await a.send(_copy(request))).status_code == 401
    assert b.enqueued == [f"kyma:{NS}/kyma-b"]
    # both hand-offs (a's and c's) passed the internal endpoint; c's was answered "replay" per event
    assert received(replicas, "b", "accepted") == 2


async def test_an_unknown_runtime_is_answered_by_the_holder(replicas: Cluster) -> None:
    """Authenticated but without a Kyma: the holder's 404 reaches the agent (it stops retrying)."""
    a = replicas["a"].harness
    lonely = runtime_in_shard(1, prefix="lonely")
    replicas.add_runtime(lonely, None)  # signing keys, no Kyma
    response = await a.post(event(), runtime_id=lonely)
    assert response.status_code == 404
    assert response.json() == {"error": "no Kyma for this runtime"}


def _copy(request: httpx.Request) -> httpx.Request:
    return httpx.Request(request.method, request.url, headers=request.headers, content=request.content)


# --- the internal endpoint itself ---------------------------------------------------------------


@pytest.fixture
async def holder() -> AsyncIterator[Cluster]:
    c = cluster(["a", "b"])
    c.assign(1, "b")
    c.add_runtime(RT_B, "kyma-b")
    yield c
    await c.aclose()


def handoff_item(runtime_id: str = RT_B, **extra: object) -> dict[str, object]:
    payload: dict[str, object] = {"manager": MANAGER, "route": "event", "runtime_id": runtime_id}
    payload["events"] = [json.loads(event())]
    payload.update(extra)
    return payload


def handoff_body(runtime_id: str = RT_B, **extra: object) -> bytes:
    """An envelope with one hand-off."""
    return json.dumps({"requests": [handoff_item(runtime_id, **extra)]}).encode()


async def post_internal(
    c: Cluster, body: bytes, *, key: bytes = KEY, at: float | None = None, nonce: str = ""
) -> httpx.Response:
    signer = HandoffSigner(key, clock=lambda: c.clock.now if at is None else at)
    if nonce:
        signer = HandoffSigner(key, clock=lambda: c.clock.now, nonces=lambda: nonce)
    headers = signer.headers("POST", HANDOFF_PATH, body)
    async with httpx.AsyncClient(transport=c.network.apps["b"], base_url="http://b.internal:8083") as client:
        return await client.post(HANDOFF_PATH, content=body, headers=headers)


def enqueued_nothing(c: Cluster) -> bool:
    return c["b"].harness.enqueued == [] and c["a"].harness.enqueued == []


async def test_a_signed_internal_request_is_accepted(holder: Cluster) -> None:
    response = await post_internal(holder, handoff_body())
    assert response.status_code == 200, response.text
    assert response.json() == {"answers": [{"results": [{"status": 200}]}]}
    assert holder["b"].harness.enqueued == [f"kyma:{NS}/kyma-b"]


async def test_wrong_key_is_rejected(holder: Cluster) -> None:
    response = await post_internal(holder, handoff_body(), key=b"another key of 32 bytes........!")
    assert response.status_code == 401
    assert response.json()["reason"] == "bad-signature"
    assert enqueued_nothing(holder)
    assert received(holder, "b", "unauthenticated") == 1


async def test_expired_and_future_timestamps_are_rejected(holder: Cluster) -> None:
    for at in (holder.clock.now - 31, holder.clock.now + 31):
        response = await post_internal(holder, handoff_body(), at=at)
        assert response.status_code == 401
        assert response.json()["reason"] == "expired"
    assert enqueued_nothing(holder)


async def test_a_replayed_internal_request_is_rejected(holder: Cluster) -> None:
    assert (await post_internal(holder, handoff_body(), nonce="n-1")).status_code == 200
    replay = await post_internal(holder, handoff_body(), nonce="n-1")
    assert replay.status_code == 401
    assert replay.json()["reason"] == "replay"
    assert holder["b"].harness.enqueued == [f"kyma:{NS}/kyma-b"]


async def test_a_tampered_body_is_rejected(holder: Cluster) -> None:
    body = handoff_body()
    signer = HandoffSigner(KEY, clock=lambda: holder.clock.now)
    headers = signer.headers("POST", HANDOFF_PATH, body)
    tampered = body.replace(b"kyma-system", b"kyma-systen")
    async with httpx.AsyncClient(transport=holder.network.apps["b"], base_url="http://b") as client:
        response = await client.post(HANDOFF_PATH, content=tampered, headers=headers)
    assert response.status_code == 401
    assert enqueued_nothing(holder)


async def test_unsigned_and_malformed_headers_are_rejected(holder: Cluster) -> None:
    async with httpx.AsyncClient(transport=holder.network.apps["b"], base_url="http://b") as client:
        response = await client.post(HANDOFF_PATH, content=handoff_body())
    assert response.status_code == 401
    assert response.json()["reason"] == "malformed"
    assert enqueued_nothing(holder)


async def test_an_oversized_body_is_413_before_authentication(holder: Cluster) -> None:
    body = handoff_body(padding="x" * ListenerConfig().handoff_max_body_bytes)
    response = await post_internal(holder, body)
    assert response.status_code == 413
    assert received(holder, "b", "too-large") == 1
    assert enqueued_nothing(holder)


async def test_an_invalid_body_is_400(holder: Cluster) -> None:
    for body in (
        b"not json",
        handoff_body(route="heartbeat"),
        handoff_body(events=[]),
        handoff_body(extra=1),
    ):
        response = await post_internal(holder, body)
        assert response.status_code == 400, body
    assert enqueued_nothing(holder)


async def test_other_paths_and_methods(holder: Cluster) -> None:
    async with httpx.AsyncClient(transport=holder.network.apps["b"], base_url="http://b") as client:
        assert (await client.post("/v2/lifecycle-manager/event", content=b"{}")).status_code == 404
        assert (await client.get(HANDOFF_PATH)).status_code == 405
    unknown = await post_internal(holder, handoff_body(manager="someone-else"))
    assert unknown.status_code == 404


async def test_a_runtime_of_a_shard_not_held_is_answered_null(holder: Cluster) -> None:
    """Per agent request: ``null`` for a runtime whose shard is not held here, the others go through."""
    body = json.dumps({"requests": [handoff_item(RT_A), handoff_item(RT_B)]}).encode()
    response = await post_internal(holder, body)
    assert response.status_code == 200
    assert response.json() == {"answers": [None, {"results": [{"status": 200}]}]}
    assert holder["b"].harness.enqueued == [f"kyma:{NS}/kyma-b"]
    assert received(holder, "b", "not-holder") == 1
    assert received(holder, "b", "accepted") == 1


async def test_a_holder_not_serving_is_503(holder: Cluster) -> None:
    holder["b"].harness.serving = False
    response = await post_internal(holder, handoff_body())
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert enqueued_nothing(holder)


def test_the_request_model_is_bounded() -> None:
    with pytest.raises(ValueError):
        HandoffRequest.model_validate({"manager": MANAGER, "route": "event", "runtime_id": "r", "events": []})
    with pytest.raises(ValueError):
        HandoffRequest.model_validate({"manager": MANAGER, "route": "event", "runtime_id": "", "events": []})


def test_an_unsharded_listener_has_no_handoff() -> None:
    assert Harness(ListenerConfig()).intake._handoff is None


async def test_concurrent_hand_offs_to_one_holder_share_internal_requests() -> None:
    c = cluster(["a", "b"], parallel=1)
    try:
        c.assign(0, "a")
        c.assign(1, "b")
        runtimes = [runtime_in_shard(1, prefix=f"many{i}") for i in range(10)]
        for i, runtime_id in enumerate(runtimes):
            c.add_runtime(runtime_id, f"kyma-{i}")
        a, b = c["a"].harness, c["b"].harness
        responses = await asyncio.gather(*(a.post(event(), runtime_id=r) for r in runtimes))
        assert [r.status_code for r in responses] == [200] * 10
        assert sorted(b.enqueued) == sorted(f"kyma:{NS}/kyma-{i}" for i in range(10))
        assert received(c, "b", "accepted") == 10
        internal = c["a"].sample("kcp_listener_handoff_seconds_count")
        assert 1 <= internal < 10
        assert forwarded(c, "a", "delivered") == 10
    finally:
        await c.aclose()


async def test_an_xfcc_only_event_is_handed_off_with_upstream_semantics() -> None:
    """Mode ``xfcc`` (upstream agents): the hand-off carries no nonce, and the holder answers an
    event naming no Kyma with upstream's 200 "unrouted" (upstream agents alert on anything else)."""
    c = cluster(["a", "b"], ListenerConfig(auth_mode=AuthMode.XFCC))
    try:
        c.assign(0, "a")
        c.assign(1, "b")
        c.add_runtime(RT_B, "kyma-b")
        a, b = c["a"].harness, c["b"].harness
        response = await a.post(event(), runtime_id=RT_B, sign=False, xfcc=istio_xfcc(RT_B))
        assert response.status_code == 200, response.text
        assert b.enqueued == [f"kyma:{NS}/kyma-b"]
        unknown = runtime_in_shard(1, prefix="upstream")
        response = await a.post(event(), runtime_id=unknown, sign=False, xfcc=istio_xfcc(unknown))
        assert response.status_code == 200
        assert response.json() == {"status": "unrouted"}
        assert b.sample("kcp_listener_unrouted_events_total", {"reason": "unknown-runtime"}) == 1
        assert a.enqueued == []
    finally:
        await c.aclose()


class _StuckClient:
    """A hand-off client whose requests never come back (a hung holder)."""

    def __init__(self) -> None:
        self.posted = asyncio.Event()

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], *, refresh: HeaderSource | None = None
    ) -> HttpResponse:
        self.posted.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        pass


async def test_closing_the_forwarder_answers_waiting_hand_offs() -> None:
    """Shutdown while hand-offs wait on a hung holder: each waiting agent request gets 503, none hangs."""
    client = _StuckClient()
    forwarder = Forwarder(HandoffSigner(KEY), HandoffMetrics(CollectorRegistry()), client=client, parallel=1)
    request = HandoffRequest.model_validate(handoff_item())
    holder = Replica("b", "http://b.internal:8083")
    first = asyncio.create_task(forwarder.forward(holder, request))
    await asyncio.wait_for(client.posted.wait(), 10)
    second = asyncio.create_task(forwarder.forward(holder, request))  # waits for the lane
    await asyncio.sleep(0)
    await forwarder.aclose()
    assert await asyncio.wait_for(first, 10) is None
    assert await asyncio.wait_for(second, 10) is None


class _DownClient:
    """A hand-off client whose holder refuses connections until ``up`` is set."""

    def __init__(self) -> None:
        self.up = False

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], *, refresh: HeaderSource | None = None
    ) -> HttpResponse:
        if not self.up:
            raise HttpTransportError("ConnectionRefusedError: refused")
        return HttpResponse(503, {}, b"")

    async def aclose(self) -> None:
        pass


async def test_a_holder_outage_is_logged_once_not_per_event(caplog: pytest.LogCaptureFixture) -> None:
    """While a killed holder's shards move every agent retry fails the same way: one warning."""
    client = _DownClient()
    forwarder = Forwarder(HandoffSigner(KEY), HandoffMetrics(CollectorRegistry()), client=client)
    request = HandoffRequest.model_validate(handoff_item())
    holder = Replica("b", "http://b.internal:8083")
    with caplog.at_level(logging.DEBUG, logger="kcp_listener.handoff"):
        for _ in range(5):
            assert await forwarder.forward(holder, request) is None
        client.up = True
        assert await forwarder.forward(holder, request) is None  # 503: answers, not a transport failure
        client.up = False
        assert await forwarder.forward(holder, request) is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and all("hand-off to b (http://b.internal:8083) failed" in w for w in warnings)
    assert sum(r.getMessage().endswith("answers again") for r in caplog.records) == 1
    await forwarder.aclose()
