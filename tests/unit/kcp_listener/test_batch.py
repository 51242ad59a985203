"""The batch route ``/v2/<manager>/events``: one signature, each event routed as if alone.

Every test runs twice: through the pure-ASGI fast path and through the FastAPI routes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from kcp_listener.config import ListenerConfig
from kyma_wire.events import MAX_BATCH_EVENTS, BatchResult, EventBatch, batch_path
from tests.unit.kcp_listener.harness import MANAGER, NS, Harness
from tests.unit.kcp_listener.test_app import DEPLOY_GVK, event

HarnessFactory = Callable[..., Harness]
PATH = batch_path(MANAGER)


@pytest.fixture(params=[True, False], ids=["fast-path", "fastapi"])
async def make(request: pytest.FixtureRequest) -> AsyncIterator[HarnessFactory]:
    made: list[Harness] = []

    def factory(**config: object) -> Harness:
        harness = Harness(ListenerConfig.model_validate({"fast_path": request.param, **config}))
        harness.add_runtime("rt-1", "kyma-1", ["kyma-1-istio", "kyma-1-serverless"])
        harness.add_runtime("rt-2", "kyma-2", ["kyma-2-istio"])
        made.append(harness)
        return harness

    yield factory
    for harness in made:
        await harness.aclose()


@pytest.fixture
def h(make: HarnessFactory) -> Harness:
    return make()


def batch(*bodies: bytes) -> bytes:
    return EventBatch.wire_of(list(bodies))


async def test_every_event_of_a_batch_is_routed_like_a_single_event(h: Harness) -> None:
    response = await h.post(
        batch(event(), event(owner="kyma-1-istio", gvk=DEPLOY_GVK), event(owner="kyma-1-serverless")),
        path=PATH,
    )
    assert response.status_code == 200, response.text
    results = BatchResult.model_validate_json(response.content).results
    assert [(r.status, r.error) for r in results] == [(200, None)] * 3
    assert h.enqueued == [
        f"kyma:{NS}/kyma-1",
        f"manifest:{NS}/kyma-1-istio",
        f"manifest:{NS}/kyma-1-serverless",
    ]
    assert h.sample("kcp_listener_requests_total", {"route": "events", "code": "200"}) == 1
    assert h.sample("kcp_listener_batches_total") == 1
    assert h.sample("kcp_listener_batched_events_total") == 3
    assert h.sample("kcp_listener_enqueued_requests_total", {"controller": "manifest"}) == 2


async def test_partial_acceptance_is_reported_per_event(h: Harness) -> None:
    invalid = b'{"watched":{"name":""},"watchedGvk":{"version":"v1","kind":"K"}}'
    response = await h.post(
        batch(event(), event(owner="someone-elses", gvk=DEPLOY_GVK), invalid, event(owner="kyma-1-istio")),
        path=PATH,
    )
    assert response.status_code == 200, response.text
    results = json.loads(response.content)["results"]
    assert [r["status"] for r in results] == [200, 404, 400, 200]
    assert "error" in results[1] and "error" in results[2]
    assert "retry-after" not in response.headers
    assert h.enqueued == [f"kyma:{NS}/kyma-1", f"manifest:{NS}/kyma-1-istio"]
    assert h.sample("kcp_listener_rejected_events_total", {"reason": "invalid-body"}) == 1


async def test_a_full_intake_answers_429_for_those_events_with_retry_after(make: HarnessFactory) -> None:
    h = make(retry_after_seconds=4)
    h.kyma_sink.capacity = 0
    response = await h.post(batch(event(), event(owner="kyma-1-istio", gvk=DEPLOY_GVK)), path=PATH)
    assert response.status_code == 200
    assert [r["status"] for r in response.json()["results"]] == [429, 200]
    assert response.headers["retry-after"] == "4"
    assert h.enqueued == [f"manifest:{NS}/kyma-1-istio"]


async def test_the_signature_covers_the_whole_batch(h: Harness) -> None:
    signed = h.request(batch(event(), event()), path=PATH)
    tampered = httpx.Request(
        "POST", signed.url, headers=signed.headers, content=batch(event(), event(owner="kyma-1-istio"))
    )
    response = await h.send(tampered)
    assert response.status_code == 401
    assert h.enqueued == []


async def test_one_signed_batch_cannot_be_replayed(h: Harness) -> None:
    request = h.request(batch(event()), path=PATH)
    assert (await h.send(request)).status_code == 200
    assert (await h.send(request)).status_code == 401
    assert h.enqueued == [f"kyma:{NS}/kyma-1"]


async def test_another_runtimes_events_in_a_batch_route_to_the_signer_only(h: Harness) -> None:
    response = await h.post(batch(event()), path=PATH, runtime_id="rt-2")
    assert response.status_code == 200
    assert h.enqueued == [f"kyma:{NS}/kyma-2"]


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[]", b'{"events":[]}', b'{"events":"x"}', b'{"other":1}'],
    ids=["not-json", "list", "empty", "not-a-list", "no-events"],
)
async def test_a_malformed_envelope_fails_the_whole_batch(h: Harness, body: bytes) -> None:
    response = await h.post(body, path=PATH)
    assert response.status_code == 400
    assert h.enqueued == []


async def test_too_many_events_fail_the_whole_batch(h: Harness) -> None:
    response = await h.post(batch(*[event()] * (MAX_BATCH_EVENTS + 1)), path=PATH)
    assert response.status_code == 400
    assert h.enqueued == []


async def test_batch_size_limit_is_its_own(make: HarnessFactory) -> None:
    h = make(max_body_bytes=400, max_batch_bytes=2048)
    small = batch(*[event()] * 3)
    assert len(small) > 400  # over the single-event limit...
    assert (await h.post(small, path=PATH)).status_code == 200  # ...and still accepted
    big = batch(*[event()] * 20)
    assert len(big) > 2048
    response = await h.post(big, path=PATH)
    assert response.status_code == 413
    assert h.sample("kcp_listener_oversize_requests_total") == 1


async def test_batch_route_needs_post_and_a_known_manager(h: Harness) -> None:
    assert (await h.post(batch(event()), path=PATH, method="PUT")).status_code == 405
    assert (await h.post(batch(event()), path=batch_path("other-manager"))).status_code == 404
    assert h.enqueued == []


async def test_not_serving_answers_503_for_the_whole_batch(h: Harness) -> None:
    h.serving = False
    response = await h.post(batch(event()), path=PATH)
    assert response.status_code == 503
    assert "retry-after" in response.headers
    assert h.enqueued == []
