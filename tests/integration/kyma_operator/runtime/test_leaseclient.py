"""The Lease client and the threaded leader election against a real API server: Lease requests are
sent and answered on the Lease thread, also while the main event loop is blocked."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from typing import Any

from kyma_operator.runtime import KubeClient
from kyma_operator.runtime.errors import KubeError
from kyma_operator.runtime.leader import LeaderElectionConfig
from kyma_operator.runtime.leaseclient import LeaseClient
from kyma_operator.runtime.lighthttp import LightHttp
from kyma_operator.runtime.loopthread import LoopThread
from kyma_operator.runtime.manager import Manager
from kyma_operator.runtime.resources import LEASES
from tests.polling import eventually


def lease(name: str, namespace: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"holderIdentity": "probe"}}


async def test_requests_run_on_the_lease_thread_also_while_the_main_loop_is_blocked(
    client: KubeClient, namespace: str, lease_thread: LoopThread
) -> None:
    threads: list[str] = []
    leases = LeaseClient(
        client.access,
        thread=lease_thread,
        on_request=lambda verb, res: threads.append(threading.current_thread().name),
    )
    try:
        created = await leases.create(LEASES, lease("renewed", namespace))
        assert threads == ["test-leases"], "sent from the Lease thread"
        listed = await leases.list(LEASES, namespace)
        assert threads == ["test-leases"] * 2, "lists too (their body is streamed, not a _request)"
        assert [item["metadata"]["name"] for item in listed.items] == ["renewed"]

        created["spec"]["holderIdentity"] = "renewed-while-blocked"
        renewal = asyncio.run_coroutine_threadsafe(leases.update(LEASES, created), lease_thread.loop)
        # this loop is blocked (a large json.loads): the renewal is answered anyway
        answered = renewal.result(timeout=30)
        assert answered["spec"]["holderIdentity"] == "renewed-while-blocked"
        assert (await client.get(LEASES, "renewed", namespace))["spec"][
            "holderIdentity"
        ] == "renewed-while-blocked"
    finally:
        await leases.close()
    assert leases.closed


async def test_a_manager_leads_from_the_lease_thread_and_releases_on_stop(
    client: KubeClient, namespace: str, lease_thread: LoopThread
) -> None:
    await lease_thread.stop()  # the manager starts and stops the thread itself
    leases = LeaseClient(client.access, thread=lease_thread)
    config = LeaderElectionConfig(
        "threaded",
        namespace,
        identity="threaded-leader",
        lease_duration=4,
        renew_deadline=3,
        retry_period=0.5,
    )
    manager = Manager(
        client,
        name="threaded",
        namespace=namespace,
        leader_election=config,
        health_port=None,
        lease_thread=lease_thread,
        lease_client=leases,
    )
    started: list[str] = []

    async def leader_work() -> None:
        started.append(threading.current_thread().name)
        await asyncio.Event().wait()

    manager.add_runnable(leader_work)
    task = asyncio.create_task(manager.run())
    try:
        await eventually(lambda: manager.is_leader and bool(started), what="leading, leader work started")
        assert started == [threading.main_thread().name], "leader work runs on the manager's loop"
        spec = (await client.get(LEASES, "threaded", namespace))["spec"]
        assert spec["holderIdentity"] == "threaded-leader"
        renewed = spec["renewTime"]
        await eventually(lambda: _renewed_since(client, namespace, renewed), what="renewed from the thread")
        await manager.shutdown()
        await task
    finally:
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    spec = (await client.get(LEASES, "threaded", namespace))["spec"]
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1, "released on stop"
    assert not lease_thread.running and leases.closed


async def _renewed_since(client: KubeClient, namespace: str, renew_time: str) -> bool:
    return bool((await client.get(LEASES, "threaded", namespace))["spec"]["renewTime"] != renew_time)


async def test_the_lease_clients_light_transport_answers_as_the_kube_client_does(
    client: KubeClient, namespace: str, lease_thread: LoopThread
) -> None:
    """Over TLS with the API server's client certificate: objects, typed refusals and lists come
    back from ``lighthttp.LightHttp`` exactly as from httpx."""
    leases = LeaseClient(client.access, thread=lease_thread)
    assert isinstance(leases._http, LightHttp)

    async def outcome(request: Awaitable[Any]) -> Any:
        try:
            answer = await request
        except KubeError as exc:
            return type(exc).__name__, exc.status, exc.reason
        return answer["spec"]["holderIdentity"]

    async def steps(via: KubeClient, name: str) -> list[Any]:
        results = [
            await outcome(via.get(LEASES, name, namespace)),
            await outcome(via.create(LEASES, lease(name, namespace))),
            await outcome(via.create(LEASES, lease(name, namespace))),
        ]
        current = await via.get(LEASES, name, namespace)
        stale = {**current, "metadata": {**current["metadata"], "resourceVersion": "1"}}
        results.append(await outcome(via.update(LEASES, stale)))
        current["spec"]["holderIdentity"] = "renewed"
        results.append(await outcome(via.update(LEASES, current)))
        listed = await via.list(LEASES, namespace)
        results.append(sum(item["metadata"]["name"] == name for item in listed.items))
        await via.delete(LEASES, name, namespace)
        results.append(await outcome(via.get(LEASES, name, namespace)))
        return results

    try:
        light = await steps(leases, "light")
        kept = [connection.writer.get_extra_info("socket") for connection in leases._http._idle]
        assert light == await steps(client, "httpx")
        assert light == [
            ("NotFound", 404, "NotFound"),
            "probe",
            ("AlreadyExists", 409, "AlreadyExists"),
            ("Conflict", 409, "Conflict"),
            "renewed",
            1,
            ("NotFound", 404, "NotFound"),
        ]
    finally:
        await leases.close()
    assert kept and all(sock.fileno() == -1 for sock in kept), "closed, not left to the collector"
