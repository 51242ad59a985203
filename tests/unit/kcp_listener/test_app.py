"""The listener pipeline end to end in process: what gets enqueued, and every rejection enqueues nothing.

Every test runs twice: through the pure-ASGI fast path and through the FastAPI routes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kcp_listener.config import AuthMode, ListenerConfig
from kcp_listener.routing import InMemoryDirectory, ObjectRef
from kyma_wire.events import AgentEvent, GroupVersionKind, Heartbeat, ObjectKey, Operation
from kyma_wire.names import OPERATOR_NAME, SKR_NAMESPACE
from kyma_wire.profile import make_key_id
from tests.rfc9421_reference import EventSigner
from tests.unit.kcp_listener.harness import (
    MANAGER,
    NOW,
    NS,
    Harness,
    chunks,
    event_path,
    heartbeat_path,
    istio_xfcc,
)

KYMA_GVK = GroupVersionKind(group="operator.kyma-project.io", version="v1beta2", kind="Kyma")
DEPLOY_GVK = GroupVersionKind(group="apps", version="v1", kind="Deployment")
HarnessFactory = Callable[..., Harness]


def event(
    *,
    owner: str | None = None,
    operation: Operation | None = Operation.UPDATE,
    gvk: GroupVersionKind | None = None,
) -> bytes:
    """An event about the runtime's Kyma, or (with an owner) about a module resource."""
    return AgentEvent(
        watched=ObjectKey(namespace=SKR_NAMESPACE, name="default"),
        watched_gvk=gvk or (DEPLOY_GVK if owner else KYMA_GVK),
        operation=operation,
        owner=ObjectKey(namespace=NS, name=owner) if owner else None,
    ).to_wire()


HEARTBEAT = Heartbeat.model_validate({"sentAt": "2027-01-15T08:00:00Z", "queueDepth": 0}).to_wire()


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


def assert_rejected(h: Harness, response_status: int, expected: int) -> None:
    assert response_status == expected
    assert h.enqueued == []


# --- accepted ---------------------------------------------------------------------------------------


async def test_kyma_event_enqueues_exactly_that_kyma(h: Harness) -> None:
    response = await h.post(event())
    assert response.status_code == 200, response.text
    assert response.json() == {"status": "accepted"}
    assert h.enqueued == [f"kyma:{NS}/kyma-1"]
    assert h.sample("kcp_listener_enqueued_requests_total", {"controller": "kyma"}) == 1
    assert h.sample("kcp_listener_requests_total", {"route": "event", "code": "200"}) == 1
    assert h.sample("watcher_listener_requests_total", {"server_name": "listener"}) == 1
    assert h.sample("kcp_listener_request_duration_seconds_count", {"route": "event"}) == 1
    assert h.sample("watcher_listener_request_duration", {"server_name": "listener"}) > 0
    assert h.sample("kcp_listener_intake_depth", {"controller": "kyma"}) == 1
    assert h.sample("kcp_listener_intake_depth", {"controller": "manifest"}) == 0
    assert h.sample("watcher_listener_inflight_requests", {"server_name": "listener"}) == 0


async def test_owned_resource_event_enqueues_only_that_manifest(h: Harness) -> None:
    response = await h.post(event(owner="kyma-1-serverless", gvk=DEPLOY_GVK))
    assert response.status_code == 200
    assert h.enqueued == [f"manifest:{NS}/kyma-1-serverless"]
    assert h.sample("kcp_listener_enqueued_requests_total", {"controller": "manifest"}) == 1


async def test_owner_without_namespace_defaults_to_the_kyma_namespace(h: Harness) -> None:
    body = json.loads(event(owner="kyma-1-istio"))
    body["owner"] = {"name": "kyma-1-istio"}
    response = await h.post(json.dumps(body).encode())
    assert response.status_code == 200
    assert h.enqueued == [f"manifest:{NS}/kyma-1-istio"]


async def test_resync_enqueues_the_kyma_and_all_its_manifests(h: Harness) -> None:
    response = await h.post(event(operation=Operation.RESYNC))
    assert response.status_code == 200
    assert sorted(h.enqueued) == [
        f"kyma:{NS}/kyma-1",
        f"manifest:{NS}/kyma-1-istio",
        f"manifest:{NS}/kyma-1-serverless",
    ]


async def test_event_without_operation_enqueues_the_kyma(h: Harness) -> None:
    response = await h.post(event(operation=None, gvk=DEPLOY_GVK))
    assert response.status_code == 200
    assert h.enqueued == [f"kyma:{NS}/kyma-1"]


async def test_chunked_body_within_limit_is_accepted(h: Harness) -> None:
    request = h.request(event())
    signed_headers = dict(request.headers)
    signed_headers.pop("content-length")
    response = await h.client.post(event_path(MANAGER), content=chunks(event(), 7), headers=signed_headers)
    assert response.status_code == 200
    assert h.enqueued == [f"kyma:{NS}/kyma-1"]


async def test_rotated_key_is_trusted_next_to_the_old_one(h: Harness) -> None:
    new_key = Ed25519PrivateKey.generate()
    h.keys.set_keys(
        "test/rt-1", "rt-1", {"v1": h.private_keys["rt-1"].public_key(), "v2": new_key.public_key()}
    )
    assert (await h.post(event(), key=new_key, version="v2")).status_code == 200
    assert (await h.post(event())).status_code == 200
    h.keys.set_keys("test/rt-1", "rt-1", {"v2": new_key.public_key()})
    retired = await h.post(event())
    assert retired.status_code == 401
    assert retired.json()["reason"] == "unknown-key"


async def test_heartbeat_records_last_seen(h: Harness) -> None:
    h.clock.now = NOW + 30
    response = await h.post(HEARTBEAT, path=heartbeat_path(MANAGER))
    assert response.status_code == 200
    assert h.heartbeats.last_seen("rt-1") == NOW + 30
    assert h.heartbeats.is_healthy("rt-1", 60)
    assert h.enqueued == []
    assert h.sample("kcp_listener_heartbeats_total") == 1
    assert (
        h.sample("kcp_listener_runtime_last_heartbeat_timestamp_seconds", {"runtime_id": "rt-1"}) == NOW + 30
    )
    assert h.sample("kcp_listener_requests_total", {"route": "heartbeat", "code": "200"}) == 1


async def test_heartbeat_of_unknown_runtime_is_rejected(h: Harness) -> None:
    h.keys.set_keys("test/ghost", "ghost", {"v1": h.private_keys["rt-1"].public_key()})
    response = await h.post(
        HEARTBEAT, path=heartbeat_path(MANAGER), runtime_id="ghost", key=h.private_keys["rt-1"]
    )
    assert response.status_code == 404
    assert h.heartbeats.last_seen("ghost") is None


async def test_invalid_heartbeat_body(h: Harness) -> None:
    response = await h.post(b'{"queueDepth": -1}', path=heartbeat_path(MANAGER))
    assert response.status_code == 400
    assert h.heartbeats.last_seen("rt-1") is None


# --- upstream compatibility ---------------------------------------------------------------------------


UPSTREAM_BODY = (
    b'{"watched":{"Namespace":"kyma-system","Name":"default"},'
    b'"watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"}}'
)


async def test_upstream_go_agent_event_with_istio_xfcc_is_accepted(make: HarnessFactory) -> None:
    h = make(auth_mode=AuthMode.XFCC)
    response = await h.post(UPSTREAM_BODY, sign=False, xfcc=istio_xfcc("rt-2"))
    assert response.status_code == 200, response.text
    assert h.enqueued == [f"kyma:{NS}/kyma-2"]


async def test_xfcc_mode_rejects_missing_and_bad_certificates(make: HarnessFactory) -> None:
    h = make(auth_mode=AuthMode.XFCC)
    cases = {
        "xfcc-missing": None,
        "xfcc-no-cert": 'By=spiffe://x;Hash=abc;Subject="CN=rt-1"',
        "xfcc-bad-cert": 'By=x;Cert="-----BEGIN%20CERTIFICATE-----%0Agarbage%0A-----END%20CERTIFICATE-----"',
        "xfcc-empty-cn": istio_xfcc(""),
        "xfcc-too-large": "Cert=" + "a" * (32 * 1024),
    }
    for reason, header in cases.items():
        response = await h.post(UPSTREAM_BODY, sign=False, xfcc=header)
        assert response.status_code == 401, reason
        assert response.json()["reason"] == reason
        assert h.sample("kcp_listener_auth_failures_total", {"reason": reason}) == 1
    assert h.enqueued == []
    assert h.sample(
        "watcher_listener_failed_verification_requests_total", {"server_name": "listener"}
    ) == len(cases)


async def test_both_mode_needs_agreeing_identities(make: HarnessFactory) -> None:
    h = make(auth_mode=AuthMode.BOTH)
    assert (await h.post(event(), xfcc=istio_xfcc("rt-1"))).status_code == 200
    assert h.enqueued == [f"kyma:{NS}/kyma-1"]
    h.kyma_sink.items.clear()
    mismatch = await h.post(event(), xfcc=istio_xfcc("rt-2"))
    assert mismatch.status_code == 401
    assert mismatch.json()["reason"] == "identity-mismatch"
    assert (await h.post(event(), xfcc=None)).status_code == 401
    assert (await h.post(event(), sign=False, xfcc=istio_xfcc("rt-1"))).status_code == 401
    assert h.enqueued == []


# --- rejections: nothing enqueued -----------------------------------------------------------------------


async def test_no_authentication(h: Harness) -> None:
    response = await h.post(event(), sign=False)
    assert_rejected(h, response.status_code, 401)
    assert response.json() == {"error": "unauthenticated", "reason": "missing"}


async def test_bad_signature(h: Harness) -> None:
    request = h.request(event())
    sig = request.headers["signature"]
    request.headers["signature"] = sig[:10] + ("A" if sig[10] != "A" else "B") + sig[11:]
    response = await h.send(request)
    assert_rejected(h, response.status_code, 401)
    assert response.json()["reason"] == "bad-signature"


async def test_wrong_key(h: Harness) -> None:
    response = await h.post(event(), key=Ed25519PrivateKey.generate())
    assert_rejected(h, response.status_code, 401)
    assert h.sample("kcp_listener_auth_failures_total", {"reason": "bad-signature"}) == 1


async def test_other_runtimes_key_cannot_claim_this_runtime(h: Harness) -> None:
    response = await h.post(event(), runtime_id="rt-1", key=h.private_keys["rt-2"])
    assert_rejected(h, response.status_code, 401)


async def test_unknown_key(h: Harness) -> None:
    response = await h.post(event(), version="v9")
    assert_rejected(h, response.status_code, 401)
    assert response.json()["reason"] == "unknown-key"


def with_signature_of(h: Harness, signed: httpx.Request, body: bytes) -> httpx.Request:
    """An unsigned request for ``body`` carrying ``signed``'s signature headers."""
    target = h.request(body, sign=False)
    for name in ("signature", "signature-input", "content-digest"):
        target.headers[name] = signed.headers[name]
    return target


async def test_digest_mismatch(h: Harness) -> None:
    tampered = with_signature_of(h, h.request(event()), event(operation=Operation.RESYNC))
    response = await h.send(tampered)
    assert_rejected(h, response.status_code, 401)
    assert response.json()["reason"] == "bad-digest"


async def test_stale_and_future_signatures(h: Harness) -> None:
    stale = await h.post(event(), at=NOW - 120)
    future = await h.post(event(), at=NOW + 60)
    assert_rejected(h, stale.status_code, 401)
    assert_rejected(h, future.status_code, 401)
    assert (stale.json()["reason"], future.json()["reason"]) == ("stale", "future")


async def test_replayed_nonce(h: Harness) -> None:
    request = h.request(event())
    first = await h.send(request)
    assert first.status_code == 200
    h.kyma_sink.items.clear()
    replay = await h.send(request)
    assert_rejected(h, replay.status_code, 401)
    assert replay.json()["reason"] == "replay"
    assert h.sample("kcp_listener_replayed_requests_total") == 1


async def test_replay_of_a_rejected_body_is_still_a_replay(h: Harness) -> None:
    request = h.request(b"{not json")
    assert (await h.send(request)).status_code == 400
    assert (await h.send(request)).json()["reason"] == "replay"


async def test_replay_cache_full_answers_429(make: HarnessFactory) -> None:
    h = make(replay_cache_entries=1)
    assert (await h.post(event())).status_code == 200
    h.kyma_sink.items.clear()
    response = await h.post(event())
    assert_rejected(h, response.status_code, 429)
    assert response.headers["retry-after"] == "1"
    assert h.sample("kcp_listener_rejected_events_total", {"reason": "replay-cache-full"}) == 1
    h.clock.now = NOW + 66  # the first nonce expires
    assert (await h.post(event(), at=NOW + 66)).status_code == 200


async def test_oversized_body(h: Harness) -> None:
    response = await h.post(b"{" + b" " * (16 * 1024) + b"}")
    assert_rejected(h, response.status_code, 413)
    assert response.json() == {"error": "body larger than 16384 bytes is not allowed"}
    assert h.sample("kcp_listener_oversize_requests_total") == 1
    assert h.sample("watcher_listener_exceeding_size_limit_requests_total", {"server_name": "listener"}) == 1


async def test_chunked_oversized_body_stops_reading_at_the_limit(h: Harness) -> None:
    sent: list[int] = []

    async def endless() -> AsyncIterator[bytes]:
        for _ in range(100):
            sent.append(1)
            yield b"x" * 4096

    response = await h.client.post(
        event_path(MANAGER), content=endless(), headers={"content-type": "application/json"}
    )
    assert_rejected(h, response.status_code, 413)
    assert len(sent) <= 6  # 16 KiB / 4 KiB + the chunk that crossed the limit (+ transport read-ahead)
    assert h.sample("kcp_listener_oversize_requests_total") == 1


async def test_malformed_json(h: Harness) -> None:
    response = await h.post(b'{"watched": {"name": "default"}, "watchedGvk": ')
    assert_rejected(h, response.status_code, 400)
    assert response.json()["error"] == "invalid body"
    assert h.sample("kcp_listener_rejected_events_total", {"reason": "invalid-body"}) == 1


async def test_error_bodies_never_echo_the_request_body(h: Harness) -> None:
    secret = "s3cr3t-marker"
    for body in (
        b'{"watched": {"name": "' + secret.encode() + b'"}}',
        b"not json " + secret.encode(),
        b'{"watched": {"name": "x"}, "watchedGvk": {"version": 7, "kind": "' + secret.encode() + b'"}}',
    ):
        response = await h.post(body)
        assert response.status_code == 400
        assert secret not in response.text
    assert h.enqueued == []


async def test_unknown_manager(h: Harness) -> None:
    response = await h.post(event(), path=event_path("other-manager"))
    assert_rejected(h, response.status_code, 404)
    assert response.json() == {"error": "unknown manager"}


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
async def test_wrong_method(h: Harness, method: str) -> None:
    response = await h.send(h.request(event(), method=method))
    assert_rejected(h, response.status_code, 405)
    if h.config.fast_path:
        assert response.headers["allow"] == "POST"
        assert response.json() == {"error": f"{method} method is not allowed on this path"}


async def test_foreign_owner(h: Harness) -> None:
    response = await h.post(event(owner="kyma-2-istio"), runtime_id="rt-1")
    assert_rejected(h, response.status_code, 404)
    assert h.sample("kcp_listener_rejected_events_total", {"reason": "foreign-owner"}) == 1


async def test_owner_in_another_namespace_is_foreign(h: Harness) -> None:
    h.directory.add_manifest("other-ns", "kyma-1-istio", "kyma-1")
    body = json.loads(event(owner="kyma-1-istio"))
    body["owner"]["namespace"] = "other-ns"
    response = await h.post(json.dumps(body).encode())
    assert_rejected(h, response.status_code, 404)
    assert h.sample("kcp_listener_rejected_events_total", {"reason": "unknown-owner"}) == 1


async def test_unknown_owner(h: Harness) -> None:
    response = await h.post(event(owner="no-such-manifest"))
    assert_rejected(h, response.status_code, 404)
    assert h.sample("kcp_listener_rejected_events_total", {"reason": "unknown-owner"}) == 1


async def test_unknown_runtime(h: Harness) -> None:
    key = Ed25519PrivateKey.generate()
    h.keys.set_keys("test/rt-9", "rt-9", {"v1": key.public_key()})
    response = await h.post(event(), runtime_id="rt-9", key=key)
    assert_rejected(h, response.status_code, 404)
    assert response.json() == {"error": "no Kyma for this runtime"}
    assert h.sample("kcp_listener_rejected_events_total", {"reason": "unknown-runtime"}) == 1


async def test_ambiguous_runtime(h: Harness) -> None:
    h.directory.add_kyma(NS, "kyma-1-copy", "rt-1")
    response = await h.post(event())
    assert_rejected(h, response.status_code, 404)
    assert h.sample("kcp_listener_rejected_events_total", {"reason": "ambiguous-runtime"}) == 1


async def test_queue_full_answers_429_with_retry_after(make: HarnessFactory) -> None:
    h = make(retry_after_seconds=3)
    h.kyma_sink.capacity = 0
    request = h.request(event())
    response = await h.send(request)
    assert_rejected(h, response.status_code, 429)
    assert response.headers["retry-after"] == "3"
    assert h.sample("kcp_listener_rejected_events_total", {"reason": "intake-full"}) == 1
    h.kyma_sink.capacity = 10
    retried = await h.send(request)  # the nonce was not consumed: the same signed request may retry
    assert retried.status_code == 200
    assert h.enqueued == [f"kyma:{NS}/kyma-1"]


async def test_not_leader_answers_503(h: Harness) -> None:
    h.serving = False
    response = await h.post(event())
    assert_rejected(h, response.status_code, 503)
    assert "retry-after" in response.headers
    assert h.sample("kcp_listener_rejected_events_total", {"reason": "not-serving"}) == 1
    assert (await h.client.get("/readyz")).status_code == 503
    h.serving = True
    assert (await h.client.get("/readyz")).status_code == 200


async def test_checks_run_cheapest_first(h: Harness) -> None:
    """Wrong method beats size beats manager beats leadership beats authentication."""
    big = b"x" * (17 * 1024)
    assert (await h.send(h.request(big, method="PUT", sign=False))).status_code == 405
    assert (await h.post(big, sign=False, path=event_path("nope"))).status_code == 413
    h.serving = False
    assert (await h.post(b"{}", sign=False, path=event_path("nope"))).status_code == 404
    assert (await h.post(b"{}", sign=False)).status_code == 503
    h.serving = True
    assert (await h.post(b"{}", sign=False)).status_code == 401
    assert (await h.post(b"{}")).status_code == 400
    assert h.enqueued == []


async def test_error_metrics(h: Harness) -> None:
    await h.post(event(), sign=False)
    await h.post(event())
    assert h.sample("watcher_listener_request_errors_total", {"server_name": "listener"}) == 1
    assert h.sample("kcp_listener_requests_total", {"route": "event", "code": "401"}) == 1


async def test_metrics_endpoint_exposes_the_registry(h: Harness) -> None:
    await h.post(event())
    text = (await h.client.get("/metrics")).text
    assert 'kcp_listener_enqueued_requests_total{controller="kyma"} 1.0' in text
    assert "kcp_listener_trusted_signing_keys 2.0" in text


async def test_other_paths_are_not_found(h: Harness) -> None:
    assert (await h.client.post(f"/v2/{OPERATOR_NAME}/other", content=b"{}")).status_code == 404
    assert (await h.client.post(f"/v1/{OPERATOR_NAME}/event", content=b"{}")).status_code == 404


async def test_forwarded_proto_and_public_origin(make: HarnessFactory) -> None:
    """Agents sign the https gateway URL; behind the gateway the listener sees plain http."""
    h = make()
    https = h.request(event(), sign=False)
    https.url = https.url.copy_with(scheme="https")
    EventSigner(h.private_keys["rt-1"], make_key_id("rt-1", "v1"), clock=h.clock).sign(https)
    plain = with_signature_of(h, https, event())
    assert (await h.send(plain)).status_code == 401
    plain.headers["x-forwarded-proto"] = "https"
    assert (await h.send(plain)).status_code == 200

    pinned = make(public_origin="https://events.kcp.example.com")
    public = pinned.request(event(), sign=False)
    public.url = public.url.copy_with(scheme="https", host="events.kcp.example.com")
    EventSigner(pinned.private_keys["rt-1"], make_key_id("rt-1", "v1"), clock=pinned.clock).sign(public)
    assert (await pinned.send(with_signature_of(pinned, public, event()))).status_code == 200


class ExplodingDirectory(InMemoryDirectory):
    def kymas_for_runtime(self, runtime_id: str) -> Sequence[ObjectRef]:
        raise RuntimeError("directory exploded")


async def test_unexpected_error_is_a_500_without_details(caplog: pytest.LogCaptureFixture) -> None:
    """The fast path answers like Starlette's ServerErrorMiddleware would: 500, details only in the log."""
    h = Harness(ListenerConfig(), directory=ExplodingDirectory())
    h.add_runtime("rt-1", "kyma-1")
    response = await h.post(event())
    assert response.status_code == 500
    assert response.json() == {"error": "internal error"}
    assert "directory exploded" in caplog.text
    assert h.enqueued == []
    await h.aclose()
