"""Mixed fleets during a migration from upstream: ``either`` auth mode, identity-kind metric, and
upstream's 200 for unrouted events of XFCC-only (upstream) agents.

The upstream request is what runtime-watcher's Go agent sends (reference/upstream-watcher-listener.md:
XFCC identity only, no signature, body keys ``"Namespace"``/``"Name"``, only ``watched`` and
``watchedGvk``); ours is signed and uses our body. Every test runs through the fast path and FastAPI.
"""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kcp_listener.config import AuthMode
from tests.unit.kcp_listener.harness import MANAGER, NS, Harness, heartbeat_path, istio_xfcc
from tests.unit.kcp_listener.test_app import HEARTBEAT, HarnessFactory, event, make

__all__ = ["make"]  # the fixture, re-used

UPSTREAM_BODY = (
    b'{"watched":{"Namespace":"kyma-system","Name":"default"},'
    b'"watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"}}'
)


def identities(h: Harness) -> dict[str, float]:
    return {
        kind: h.sample("kcp_listener_authenticated_requests_total", {"identity": kind})
        for kind in ("signature", "xfcc", "signature+xfcc")
    }


@pytest.fixture
def either(make: HarnessFactory) -> Harness:
    return make(auth_mode=AuthMode.EITHER)


async def test_either_accepts_the_upstream_agent_on_xfcc_alone(either: Harness) -> None:
    response = await either.post(UPSTREAM_BODY, sign=False, xfcc=istio_xfcc("rt-2"))
    assert response.status_code == 200, response.text
    assert either.enqueued == [f"kyma:{NS}/kyma-2"]
    assert identities(either) == {"signature": 0, "xfcc": 1, "signature+xfcc": 0}


async def test_either_accepts_our_agent_with_and_without_xfcc(either: Harness) -> None:
    assert (await either.post(event(), xfcc=istio_xfcc("rt-1"))).status_code == 200
    assert (await either.post(event(), runtime_id="rt-2")).status_code == 200
    assert either.enqueued == [f"kyma:{NS}/kyma-1", f"kyma:{NS}/kyma-2"]
    assert identities(either) == {"signature": 1, "xfcc": 0, "signature+xfcc": 1}


async def test_either_rejects_disagreeing_identities(either: Harness) -> None:
    response = await either.post(event(), xfcc=istio_xfcc("rt-2"))
    assert response.status_code == 401
    assert response.json()["reason"] == "identity-mismatch"
    assert either.enqueued == []
    assert identities(either) == {"signature": 0, "xfcc": 0, "signature+xfcc": 0}


async def test_either_never_falls_back_to_xfcc_when_a_signature_is_bad(either: Harness) -> None:
    request = either.request(event(), xfcc=istio_xfcc("rt-1"))
    request.headers["signature"] = request.headers["signature"][:-8] + "AAAAAAA="
    response = await either.send(request)
    assert response.status_code == 401
    assert either.enqueued == []
    # A signature from another runtime's key cannot ride on this runtime's XFCC either.
    forged = await either.post(
        event(), runtime_id="rt-1", key=either.private_keys["rt-2"], xfcc=istio_xfcc("rt-1")
    )
    assert forged.status_code == 401
    assert either.enqueued == []


async def test_either_needs_some_identity(either: Harness) -> None:
    response = await either.post(UPSTREAM_BODY, sign=False)
    assert response.status_code == 401
    assert response.json()["reason"] == "xfcc-missing"
    bad = await either.post(UPSTREAM_BODY, sign=False, xfcc=istio_xfcc(""))
    assert bad.status_code == 401 and bad.json()["reason"] == "xfcc-empty-cn"
    assert either.enqueued == []


async def test_replayed_signed_request_is_still_a_replay_in_either_mode(either: Harness) -> None:
    request = either.request(event(), xfcc=istio_xfcc("rt-1"))
    assert (await either.send(request)).status_code == 200
    again = await either.send(request)
    assert again.status_code == 401 and again.json()["reason"] == "replay"


@pytest.mark.parametrize("mode", [AuthMode.XFCC, AuthMode.EITHER])
async def test_unrouted_upstream_event_gets_upstreams_200_and_is_counted(
    make: HarnessFactory, mode: AuthMode
) -> None:
    h = make(auth_mode=mode)
    response = await h.post(UPSTREAM_BODY, sign=False, xfcc=istio_xfcc("rt-without-kyma"))
    assert response.status_code == 200
    assert response.json() == {"status": "unrouted"}
    assert h.enqueued == []
    assert h.sample("kcp_listener_unrouted_events_total", {"reason": "unknown-runtime"}) == 1
    assert h.sample("kcp_listener_rejected_events_total", {"reason": "unknown-runtime"}) == 0
    assert h.sample("watcher_listener_request_errors_total", {"server_name": "listener"}) == 0


async def test_unrouted_signed_event_is_still_404(either: Harness) -> None:
    # A signed event (our agent) for a runtime without a Kyma: 404, which our agent does not retry.
    key = Ed25519PrivateKey.generate()
    either.keys.set_keys("test/rt-8", "rt-8", {"v1": key.public_key()})
    signed = await either.post(event(), runtime_id="rt-8", key=key, xfcc=istio_xfcc("rt-8"))
    assert signed.status_code == 404
    assert either.sample("kcp_listener_unrouted_events_total", {"reason": "unknown-runtime"}) == 0
    assert either.sample("kcp_listener_rejected_events_total", {"reason": "unknown-runtime"}) == 1


async def test_heartbeat_of_an_unsigned_runtime_without_kyma_is_still_404(either: Harness) -> None:
    # Upstream agents never send heartbeats; ours sign them.
    response = await either.post(
        HEARTBEAT, sign=False, xfcc=istio_xfcc("rt-none"), path=heartbeat_path(MANAGER)
    )
    assert response.status_code == 404
