"""Hand-off key rotations in the middle of event traffic between real sharded operator processes.

What is real: the session's KCP API server, two ``python -m kyma_operator --sharding`` processes
(each watching the hand-off key Secret with an informer), their public listeners and internal
hand-off endpoints, signed agent requests (RFC 9421) retried as the agent retries, and the shared
reconcile trace. Agents keep sending every runtime's events to the replica that does **not** hold
its shard (so every event is handed off, in both directions) while the key Secret is

1. rotated by hand, with the merge patch the kubectl commands of docs/sharding-handoff.md send;
2. given invalid content: both replicas refuse it (error log, ``invalid`` counted), keep their keys;
   the rotator writes nothing over it; then the content is repaired;
3. rotated by the operator's own rotator (``HandoffKeyRotator``, clock injected: due now).

Every event ends accepted and reaches a reconcile of its Kyma by the holder; neither replica
refused a single internal request (``kcp_listener_handoff_refused_requests_total`` absent, no
``unauthenticated``), and both sign with the new key after each rotation.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from kcp_listener.handoff_keys import LEGACY_KEY_ID
from kyma_operator.listener.handoff_key import (
    HANDOFF_KEY_SECRET,
    ROTATED_AT_ANNOTATION,
    key_set_of,
)
from kyma_operator.listener.handoff_key_rotation import HandoffKeyRotator
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import SECRETS
from kyma_wire.events import event_path
from tests.controlplane.cluster import APIServer
from tests.integration.kcp_listener.helpers import MANAGER, event
from tests.integration.kyma_operator.operator_process import OperatorProcess, _get
from tests.integration.sharding.agents import AGENT_SENDER_TASKS, Agents, Delivery, Runtime, create_runtimes
from tests.integration.sharding.fleet import SHARDS, Fleet, holders, read_trace, settled
from tests.polling import eventually

REPLICAS = ("r0", "r1")
QUIET = ("--failure-base-delay=300", "--failure-max-delay=300")


def samples(process: OperatorProcess, name: str) -> dict[str, float]:
    """``{labels: value}`` of one metric family's samples (``{}``: none, or unreachable)."""
    status, text = _get(f"http://127.0.0.1:{process.metrics}/metrics")
    found = {}
    for line in text.splitlines() if status == 200 else ():
        if line.startswith(name + "{"):
            labels, value = line[len(name) :].rsplit(" ", 1)
            found[labels] = float(value)
    return found


def signs_with(process: OperatorProcess, key_id: str) -> bool:
    return samples(process, "kcp_listener_handoff_key_info").get(f'{{key_id="{key_id}",role="current"}}') == 1


def kubectl_rotation(secret: dict[str, Any]) -> dict[str, Any]:
    """The merge patch the doc's kubectl commands send (docs/sharding-handoff.md, "Rotating")."""
    data = secret["data"]
    now = datetime.now(UTC)
    return {
        "metadata": {
            "resourceVersion": secret["metadata"]["resourceVersion"],
            "annotations": {ROTATED_AT_ANNOTATION: now.strftime("%Y-%m-%dT%H:%M:%SZ")},
        },
        "data": {
            "previous-key": data["key"],
            "previous-key-id": data.get("key-id") or base64.b64encode(LEGACY_KEY_ID.encode()).decode(),
            "key": base64.b64encode(secrets.token_bytes(32)).decode(),
            "key-id": base64.b64encode(now.strftime("%Y%m%dT%H%M%SZ").encode()).decode(),
        },
    }


@pytest.fixture
async def fleet(kcp_crds: APIServer, kcp_namespace: str, tmp_path: Path) -> AsyncIterator[Fleet]:
    fleet = Fleet(Path(kcp_crds.kubeconfig_path), kcp_namespace, tmp_path / "trace.log", *QUIET)
    try:
        yield fleet
    finally:
        await fleet.stop()


async def test_keys_rotate_under_event_traffic_without_one_refused_hand_off(
    kcp_client: KubeClient, kcp_namespace: str, fleet: Fleet
) -> None:
    runtimes, keys = await create_runtimes(kcp_client, kcp_namespace, 12, SHARDS)
    for replica in REPLICAS:
        await fleet.start(replica)
    await fleet.wait_joined(*REPLICAS)

    async def split_evenly() -> dict[int, str] | None:
        found = await holders(kcp_client, kcp_namespace)
        return found if settled(found, REPLICAS) else None

    owners = await eventually(split_evenly, "16 shards spread over r0, r1", within=60, interval=0.2)
    processes = fleet.processes
    await eventually(lambda: all(p.readyz() == 200 for p in processes.values()), "both ready", within=15)
    secret = await kcp_client.get(SECRETS, HANDOFF_KEY_SECRET, kcp_namespace)
    first = key_set_of(secret).current.id
    await eventually(lambda: all(signs_with(p, first) for p in processes.values()), "both hold the first key")

    # every runtime's events go to the replica that does not hold its shard
    other = {r: next(o for o in REPLICAS if o != r) for r in REPLICAS}
    target = {rt: processes[other[owners[rt.shard]]].listener for rt in runtimes}
    assert {owners[rt.shard] for rt in runtimes} == set(REPLICAS), owners
    deliveries: list[Delivery] = []
    stop = asyncio.Event()

    async def agent(agents: Agents, runtime: Runtime) -> None:
        senders = asyncio.Semaphore(AGENT_SENDER_TASKS)
        under_way: set[asyncio.Task[Delivery]] = set()

        async def send() -> Delivery:
            try:
                return await agents.deliver(
                    target[runtime], event_path(MANAGER), event(), runtime, within=30, into=deliveries
                )
            finally:
                senders.release()

        while not stop.is_set():
            await senders.acquire()
            task = asyncio.create_task(send())
            under_way.add(task)
            task.add_done_callback(under_way.discard)
            await asyncio.sleep(0.2)  # the agent's event rate, not a wait for a condition
        await asyncio.gather(*under_way)

    def accepted_since(at_ns: int) -> int:
        return sum(d.accepted_ns > at_ns for d in deliveries)

    async with httpx.AsyncClient(timeout=5) as http:
        agents = Agents(http, keys)
        tasks = [asyncio.create_task(agent(agents, rt)) for rt in runtimes]
        try:
            # a shard's new holder refuses agent signatures created before it took the shard (+5 s
            # skew, 401 predates-holder, docs): the rotations start once every runtime had an event
            # accepted at its first attempt
            await eventually(
                lambda: {d.runtime for d in deliveries if d.statuses == [200]} == set(runtimes),
                "events flowing, each runtime's accepted at the first attempt",
                within=30,
            )
            clean_ns = time.monotonic_ns()

            # 1. by hand: the doc's kubectl merge patch (optimistic: with the read resourceVersion)
            secret = await kcp_client.get(SECRETS, HANDOFF_KEY_SECRET, kcp_namespace)
            patched = await kcp_client.patch(
                SECRETS, HANDOFF_KEY_SECRET, kubectl_rotation(secret), kcp_namespace
            )
            second = key_set_of(patched)
            assert second.previous is not None and second.previous.id == first
            rotated_ns = time.monotonic_ns()
            await eventually(
                lambda: all(signs_with(p, second.current.id) for p in processes.values()),
                "both replicas sign with the key rotated in by hand",
            )
            await eventually(
                lambda: accepted_since(rotated_ns) >= 2 * len(runtimes), "events after rotation 1"
            )

            # 2. invalid content: refused by both replicas, the keys in use stay; the rotator writes nothing
            bad = {"data": {"key-id": base64.b64encode(b"not a key id!").decode()}}
            broken = await kcp_client.patch(SECRETS, HANDOFF_KEY_SECRET, bad, kcp_namespace)
            await eventually(
                lambda: all(
                    samples(p, "kcp_listener_handoff_key_updates_total").get('{result="invalid"}', 0) >= 1
                    for p in processes.values()
                ),
                "both replicas refused the invalid content",
            )
            assert all(signs_with(p, second.current.id) for p in processes.values())
            rotator = HandoffKeyRotator(
                kcp_client, kcp_namespace, interval=600, clock=lambda: time.time() + 3600
            )
            await rotator.rotate_if_due()
            unchanged = await kcp_client.get(SECRETS, HANDOFF_KEY_SECRET, kcp_namespace)
            assert unchanged["metadata"]["resourceVersion"] == broken["metadata"]["resourceVersion"]
            repair = {"data": {"key-id": patched["data"]["key-id"]}}
            await kcp_client.patch(SECRETS, HANDOFF_KEY_SECRET, repair, kcp_namespace)
            repaired_ns = time.monotonic_ns()
            await eventually(
                lambda: accepted_since(repaired_ns) >= 2 * len(runtimes), "events after the repair"
            )

            # 3. by the operator's rotator (due: its clock is an hour ahead of the last rotation)
            await rotator.rotate_if_due()
            third = key_set_of(await kcp_client.get(SECRETS, HANDOFF_KEY_SECRET, kcp_namespace))
            assert third.previous == second.current and third.current != second.current
            rotated_ns = time.monotonic_ns()
            await eventually(
                lambda: all(signs_with(p, third.current.id) for p in processes.values()),
                "both replicas sign with the key the rotator wrote",
            )
            await eventually(
                lambda: accepted_since(rotated_ns) >= 2 * len(runtimes), "events after rotation 3"
            )
            assert await rotator.rotate_if_due() > 0  # not due again: its own annotation counts
            assert key_set_of(await kcp_client.get(SECRETS, HANDOFF_KEY_SECRET, kcp_namespace)) == third
        finally:
            stop.set()
            await asyncio.gather(*tasks)

    # nothing refused: every event accepted, no internal request refused on either replica
    assert deliveries and [d for d in deliveries if not d.accepted] == []
    during = [d for d in deliveries if d.started_ns > clean_ns]
    assert during and all(401 not in d.statuses for d in during), Counter(
        s for d in during for s in d.statuses
    )
    for replica, process in processes.items():
        assert samples(process, "kcp_listener_handoff_refused_requests_total") == {}, replica
        received = samples(process, "kcp_listener_handoff_received_requests_total")
        assert received.get('{result="unauthenticated"}', 0) == 0, (replica, received)
        assert received.get('{result="accepted"}', 0) > 0, (replica, received)

    # nothing lost: each accepted event was followed by a reconcile of its Kyma (by its holder)
    def unreconciled() -> list[Delivery]:
        starts: dict[str, int] = {}
        for ln in read_trace(fleet.trace):
            if ln.kind == "kyma" and ln.event == "start":
                starts[ln.subject] = max(starts.get(ln.subject, 0), ln.at)
        return [d for d in deliveries if starts.get(d.runtime.kyma, 0) <= d.accepted_ns]

    await eventually(
        lambda: unreconciled() == [] or None, "every accepted event reached a reconcile", within=15
    )
    print(
        f"{len(during)} events handed off during 2 rotations and 1 refused Secret update:"
        f" answers {dict(Counter(s for d in during for s in d.statuses))}"
    )
