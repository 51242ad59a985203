"""Runtime (SKR) clients against a real API server: no threads, a bounded pool, idle clients closed.

The cost of a runtime client is what the operator pays 5,000 times: these tests count the threads
and the TCP connections of this very process (/proc) while runtime clients work. They compare
identities (threads, connections' local ports) before and after, not global counts: a thread or a
connection of an earlier test in this process may end meanwhile.
"""

from __future__ import annotations

import asyncio
import base64
import threading
from typing import Any

from prometheus_client import CollectorRegistry

from kyma_operator.remote import AccessSecret, SkrClientCache, select_access_secret
from kyma_operator.remote.cache import default_client_factory
from kyma_operator.runtime import FakeClock, KubeClient, KubeTransportError, settle
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import CONFIGMAPS, NAMESPACES
from kyma_wire.names import KCP_NAMESPACE
from tests.controlplane.cluster import APIServer
from tests.controlplane.sockets import established

KYMA = Request(KCP_NAMESPACE, "kyma-idle")


def threads_started_since(before: set[int | None]) -> list[str]:
    """Names of this process's threads that did not exist when ``before`` (their idents) was taken."""
    return [thread.name for thread in threading.enumerate() if thread.ident not in before]


def thread_idents() -> set[int | None]:
    return {thread.ident for thread in threading.enumerate()}


class OneSecret:
    """The access Secret of ``KYMA``: the runtime API server's admin kubeconfig."""

    def __init__(self, kubeconfig: bytes) -> None:
        self.secret: dict[str, Any] = {
            "metadata": {"name": "kyma-idle-kubeconfig", "namespace": KCP_NAMESPACE, "uid": "u1"},
            "data": {"config": base64.b64encode(kubeconfig).decode()},
        }

    def select(self, kyma: Request) -> AccessSecret:
        return select_access_secret(kyma, [self.secret])


async def test_a_runtime_client_uses_no_thread_and_at_most_its_pool_of_connections(skr: APIServer) -> None:
    threads_before = thread_idents()
    connections_before = set(established(remote_port=skr.port))
    client = default_client_factory(skr.kubeconfig)  # max_concurrency=4
    try:
        results = await asyncio.gather(*(client.list(NAMESPACES) for _ in range(40)))
        assert all(r.items for r in results)
        opened = set(established(remote_port=skr.port)) - connections_before
        assert 1 <= len(opened) <= 4
        assert threads_started_since(threads_before) == []
    finally:
        await client.close()
    assert opened.isdisjoint(established(remote_port=skr.port)), "the client's connections closed"


async def test_a_watch_of_a_runtime_client_is_a_coroutine_and_ends_with_the_client(
    skr: APIServer, unique_name: str
) -> None:
    client = KubeClient.from_kubeconfig_bytes(skr.kubeconfig)
    threads_before = thread_idents()
    await client.create(NAMESPACES, {"metadata": {"name": unique_name}})
    start = await client.list(CONFIGMAPS, unique_name)
    seen: list[str] = []

    async def watch() -> None:
        async for event in client.watch(CONFIGMAPS, unique_name, resource_version=start.resource_version):
            if event.type == "ADDED":
                seen.append(event.object["metadata"]["name"])

    task = asyncio.create_task(watch())
    try:
        await client.create(CONFIGMAPS, {"metadata": {"name": "c1", "namespace": unique_name}})
        for _ in range(500):
            if seen:
                break
            await asyncio.sleep(0.01)
        assert seen == ["c1"]
        assert client.busy and threads_started_since(threads_before) == []
        await client.delete(NAMESPACES, unique_name)
        await client.close()
        await asyncio.wait_for(task, 10)  # closing the client ends its watch quietly
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()


async def test_an_idle_runtime_client_is_closed_after_the_ttl_and_rebuilt_on_next_use(skr: APIServer) -> None:
    clock = FakeClock()
    registry = CollectorRegistry()
    cache = SkrClientCache(OneSecret(skr.kubeconfig), clock=clock, idle_ttl=60.0, registry=registry)
    before = set(established(remote_port=skr.port))
    try:
        first = await cache.get(KYMA)
        await first.get(NAMESPACES, "default")
        opened = set(established(remote_port=skr.port)) - before
        assert len(opened) == 1
        assert registry.get_sample_value("kyma_operator_skr_clients") == 1

        clock.advance(45)
        await first.get(NAMESPACES, "default")  # used again (no get(): a long reconcile)
        assert await cache.close_idle() == 0
        clock.advance(45)  # 90 s after get(), but 45 s after its last request
        assert await cache.close_idle() == 0
        clock.advance(61)
        assert await cache.close_idle() == 1

        assert first.closed and KYMA not in cache
        assert opened.isdisjoint(established(remote_port=skr.port)), "its connection closed"
        assert registry.get_sample_value("kyma_operator_skr_clients") == 0
        assert registry.get_sample_value("kyma_operator_skr_client_evictions_total", {"reason": "idle"}) == 1
        second = await cache.get(KYMA)
        assert second is not first
        assert (await second.get(NAMESPACES, "default"))["metadata"]["name"] == "default"
    finally:
        await cache.close()


async def test_a_client_with_a_request_under_way_is_not_closed_as_idle(
    skr: APIServer, unique_name: str
) -> None:
    clock = FakeClock()
    cache = SkrClientCache(OneSecret(skr.kubeconfig), clock=clock, idle_ttl=60.0)
    try:
        client = await cache.get(KYMA)
        await client.create(NAMESPACES, {"metadata": {"name": unique_name}})
        start = await client.list(CONFIGMAPS, unique_name)
        await client.create(CONFIGMAPS, {"metadata": {"name": "c1", "namespace": unique_name}})
        stream = client.watch(CONFIGMAPS, unique_name, resource_version=start.resource_version)
        assert (await anext(stream)).object["metadata"]["name"] == "c1"  # the watch is established
        waiting = asyncio.create_task(anext(stream))
        await settle()
        assert await cache.close_idle() == 0  # the list counted as use: look again later
        clock.advance(600)
        assert client.busy
        assert await cache.close_idle() == 0
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        await stream.aclose()
        await client.delete(NAMESPACES, unique_name)
        clock.advance(30)
        assert await cache.close_idle() == 0  # last seen in use 30 s ago
        clock.advance(61)
        assert await cache.close_idle() == 1
    finally:
        await cache.close()


async def test_the_sweeper_closes_idle_clients_on_its_own(skr: APIServer) -> None:
    clock = FakeClock()
    cache = SkrClientCache(OneSecret(skr.kubeconfig), clock=clock, idle_ttl=40.0)
    sweeper = asyncio.create_task(cache.run())
    try:
        client = await cache.get(KYMA)
        for _ in range(6):  # every 10 s (ttl / 4)
            await settle()
            clock.advance(10)
        await settle()
        assert client.closed and len(cache) == 0
        try:
            await client.get(NAMESPACES, "default")
        except KubeTransportError as exc:
            assert "closed" in str(exc)
        else:  # pragma: no cover
            raise AssertionError("a closed client answered")
    finally:
        sweeper.cancel()
        await asyncio.gather(sweeper, return_exceptions=True)
        await cache.close()
