"""No signed event is accepted twice across a leader failover or a restart, on real processes.

Each operator process keeps its replay record (the nonces it accepted) in memory. A new holder of
the leader Lease therefore does not know what the previous one accepted; the rule that closes the
gap (docs/sharding-handoff.md, "Replays across failovers"): a holder accepts only signatures created
after it took the Lease, plus the allowed clock skew, and answers older ones 401 with Retry-After,
which makes the agent sign anew and retry. Here: ``python -m kyma_operator --leader-elect``
processes on the session's KCP API server (4 s lease, 3 s renew deadline), a Kyma with a runtime id
and that runtime's public signing key in KCP, and a signed event that the first leader accepts and
that is then sent byte for byte to the next holder.
"""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kyma_operator.api.resources import KYMAS
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import SECRETS
from kyma_wire.events import event_path
from kyma_wire.profile import make_key_id
from tests.controlplane.cluster import APIServer
from tests.integration.kcp_listener.helpers import MANAGER, event, key_secret, kyma
from tests.integration.kyma_operator.operator_process import OperatorProcess
from tests.polling import eventually
from tests.rfc9421_reference import EventSigner

RUNTIME = "rt-replay"


@pytest.fixture
async def signer(kcp_client: KubeClient, kcp_namespace: str) -> AsyncIterator[EventSigner]:
    """The runtime's agent signer; its Kyma and public key are in KCP."""
    key = Ed25519PrivateKey.generate()
    await kcp_client.create(KYMAS, kyma(kcp_namespace, "replay-kyma", RUNTIME))
    await kcp_client.create(SECRETS, key_secret(kcp_namespace, RUNTIME, {"v1": key}))
    yield EventSigner(key, make_key_id(RUNTIME, "v1"))


def to(request: httpx.Request, port: int) -> httpx.Request:
    """The same request, byte for byte, to the listener on ``port`` (all check signatures against
    ``--listener-public-origin``, so a request signed for one is valid at every one)."""
    url = request.url.copy_with(scheme="http", host="127.0.0.1", port=port)
    return httpx.Request("POST", url, content=request.content, headers=request.headers)


ORIGIN = "http://kcp.example:8082"
"""Every process's ``--listener-public-origin``: the agents sign this, whichever replica answers."""


def signed_for_origin(signer: EventSigner, port: int) -> httpx.Request:
    request = httpx.Request(
        "POST",
        f"{ORIGIN}{event_path(MANAGER)}",
        content=event(),
        headers={"content-type": "application/json"},
    )
    signer.sign(request)
    return to(request, port)


async def agent_delivers(http: httpx.AsyncClient, signer: EventSigner, port: int) -> list[int]:
    """What our agent does: sign each attempt anew, retry 503/429 and a 401 with Retry-After."""
    statuses: list[int] = []

    async def attempt() -> bool:
        answer = await http.send(signed_for_origin(signer, port))
        statuses.append(answer.status_code)
        retry = answer.status_code in (429, 503) or (
            answer.status_code == 401 and "retry-after" in answer.headers
        )
        assert answer.status_code == 200 or retry, (answer.status_code, answer.text)
        return answer.status_code == 200

    await eventually(attempt, "the agent's event accepted", within=30, interval=0.25)
    return statuses


async def start(kcp_crds: APIServer, namespace: str) -> OperatorProcess:
    return await OperatorProcess.start(
        Path(kcp_crds.kubeconfig_path), namespace, f"--listener-public-origin={ORIGIN}"
    )


async def test_a_request_the_old_leader_accepted_is_refused_by_the_new_one_after_kill_9(
    kcp_crds: APIServer, kcp_namespace: str, signer: EventSigner
) -> None:
    first = await start(kcp_crds, kcp_namespace)
    second: OperatorProcess | None = None
    try:
        await eventually(lambda: first.readyz() == 200, what="first operator leads", within=60)
        second = await start(kcp_crds, kcp_namespace)
        await eventually(lambda: second is not None and second.readyz() == 503, what="standby", within=60)
        async with httpx.AsyncClient(timeout=5) as http:
            await agent_delivers(http, signer, first.listener)  # the listener serves this runtime
            captured = signed_for_origin(signer, first.listener)
            assert (await http.send(captured)).status_code == 200
            assert (await http.send(to(captured, first.listener))).json()["reason"] == "replay"

            first.signal(signal.SIGKILL)
            killed = time.monotonic()
            await eventually(lambda: second is not None and second.readyz() == 200, "takeover", within=30)
            assert time.monotonic() - killed < 50  # the captured signature is still inside its 60 s
            replay = await http.send(to(captured, second.listener))
            assert replay.status_code == 401, replay.text
            assert replay.json()["reason"] == "predates-holder"
            assert replay.headers["retry-after"] == "1"

            statuses = await agent_delivers(http, signer, second.listener)
            assert statuses[-1] == 200 and set(statuses) <= {200, 401, 503}
            again = await http.send(to(captured, second.listener))
            assert again.status_code == 401  # still refused once new events flow
    finally:
        for process in (first, second):
            if process is not None:
                await process.stop()


async def test_a_restarted_single_replica_refuses_what_it_accepted_before(
    kcp_crds: APIServer, kcp_namespace: str, signer: EventSigner
) -> None:
    """The fast path: a clean stop releases the Lease and the next process takes it at once."""
    first = await start(kcp_crds, kcp_namespace)
    restarted: OperatorProcess | None = None
    try:
        await eventually(lambda: first.readyz() == 200, what="operator leads", within=60)
        async with httpx.AsyncClient(timeout=5) as http:
            await agent_delivers(http, signer, first.listener)
            captured = signed_for_origin(signer, first.listener)
            assert (await http.send(captured)).status_code == 200
            first.signal(signal.SIGTERM)
            assert await first.wait(30) == 0, first.text()
            restarted = await start(kcp_crds, kcp_namespace)
            await eventually(lambda: restarted is not None and restarted.readyz() == 200, "leads", within=60)
            replay = await http.send(to(captured, restarted.listener))
            assert replay.status_code == 401 and replay.json()["reason"] == "predates-holder", replay.text
            statuses = await agent_delivers(http, signer, restarted.listener)
            assert statuses[-1] == 200
    finally:
        for process in (first, restarted):
            if process is not None:
                await process.stop()
