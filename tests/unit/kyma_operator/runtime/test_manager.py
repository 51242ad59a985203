"""Manager without an API server round-trip: runnables, HTTP endpoints, shutdown order, failures."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
import yaml

from kyma_operator.runtime import KubeClient, Manager, ManagerFailed, settle

# A syntactically valid kubeconfig for a server nobody listens on: the manager never calls it here.
KUBECONFIG = yaml.safe_dump(
    {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
)


@pytest.fixture
async def client() -> AsyncIterator[KubeClient]:
    kube = KubeClient.from_kubeconfig_bytes(KUBECONFIG)
    yield kube
    await kube.close()


def recorder(events: list[str], tag: str, fail: bool = False) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        events.append(f"{tag}-start")
        try:
            if fail:
                raise RuntimeError(f"{tag} broke")
            await asyncio.Event().wait()
        finally:
            events.append(f"{tag}-stop")

    return run


async def test_serves_health_ready_and_metrics_and_stops_in_order(client: KubeClient) -> None:
    manager = Manager(client, name="m", namespace="ns", health_port=0, metrics_port=0)
    events: list[str] = []
    manager.add_runnable(recorder(events, "leader"))
    manager.add_runnable(recorder(events, "always"), leader_only=False)
    task = asyncio.create_task(manager.run())
    await manager.started.wait()
    await settle()
    assert events == ["always-start", "leader-start"]
    assert manager.is_leader and manager.ready
    assert manager.health_port != manager.metrics_port
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{manager.health_port}") as http:
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.get("/readyz")).text.startswith("ok")
        assert (await http.get("/metrics")).status_code == 404  # served on the metrics port
        assert (await http.post("/healthz")).status_code == 405
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{manager.metrics_port}") as http:
        assert "workqueue_unfinished_work_seconds" in (await http.get("/metrics")).text
        assert (await http.get("/healthz")).status_code == 404
    await manager.shutdown()
    await task
    assert events[2:] == ["leader-stop", "always-stop"]
    assert not manager.ready


async def test_a_crashing_runnable_stops_the_manager_with_its_error(client: KubeClient) -> None:
    manager = Manager(client, name="m", namespace="ns", health_port=None)
    events: list[str] = []
    manager.add_runnable(recorder(events, "ok"), leader_only=False)
    manager.add_runnable(recorder(events, "broken", fail=True))
    with pytest.raises(ManagerFailed) as failed:
        await asyncio.wait_for(manager.run(), 10)
    assert isinstance(failed.value.__cause__, RuntimeError)
    assert "ok-stop" in events, "the other parts were shut down"


async def test_a_task_that_outlives_the_grace_is_named_and_left_behind(
    client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    manager = Manager(client, name="m", namespace="ns", health_port=None, graceful_shutdown_timeout=0.2)
    release = asyncio.Event()

    async def stubborn() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await release.wait()  # ignores its cancel until released

    manager.add_runnable(stubborn, leader_only=False)
    task = asyncio.create_task(manager.run())
    await manager.started.wait()
    with caplog.at_level("WARNING", logger="kyma_operator.runtime.manager"):
        await asyncio.wait_for(manager.shutdown(), 10)
    await task
    warned = [r.getMessage() for r in caplog.records if "left behind" in r.getMessage()]
    assert len(warned) == 1 and "1 task(s)" in warned[0] and "stubborn" in warned[0], warned
    release.set()
    await settle()


def test_bad_runnable_is_rejected_when_added(client: KubeClient) -> None:
    manager = Manager(client, name="bad", namespace="ns", health_port=None)
    with pytest.raises(TypeError):
        manager.add_runnable(42)  # type: ignore[arg-type]


@pytest.mark.parametrize("gate_given_to", ["controller", "manager"])
async def test_sharded_controllers_run_without_leading_and_readiness_follows_the_shards(
    client: KubeClient, gate_given_to: str
) -> None:
    """The Lease is unreachable (never leading): the gated controller runs anyway, the other waits.
    The gate is the controller's own (given when it is built) or named to the manager."""
    from kyma_operator.runtime import Controller, LeaderElectionConfig, Request, Result

    done: list[str] = []

    class Record:
        def __init__(self, name: str) -> None:
            self.name = name

        async def reconcile(self, request: Request) -> Result:
            done.append(f"{self.name}:{request.name}")
            return Result()

    class Gate:
        def __init__(self) -> None:
            self.released: list[int] = []

        def admit(self, request: Request) -> int | None:
            return 0 if request.name == "mine" else None

        def release(self, ticket: int) -> None:
            self.released.append(ticket)

        def deferred(self, request: Request) -> bool:
            return False

    holding = False
    gate = Gate()
    manager = Manager(
        client,
        name="m",
        namespace="ns",
        health_port=None,
        leader_election=LeaderElectionConfig(
            lease_name="l", lease_namespace="ns", lease_duration=4, renew_deadline=3, retry_period=1
        ),
        request_gates={"sharded": gate} if gate_given_to == "manager" else None,
        readiness=lambda: holding,
    )
    own_gate = gate if gate_given_to == "controller" else None
    sharded = manager.add_controller(Controller("sharded", Record("sharded"), request_gate=own_gate))
    leader_only = manager.add_controller(Controller("leader-only", Record("leader-only")))
    for name in ("mine", "theirs"):
        sharded.enqueue(Request("ns", name), "test")
    leader_only.enqueue(Request("ns", "x"), "test")
    task = asyncio.create_task(manager.run())
    await manager.started.wait()
    for _ in range(200):
        if done:
            break
        await asyncio.sleep(0.01)
    await settle()
    assert done == ["sharded:mine"] and gate.released == [0] and sharded.dropped == 1
    assert not manager.is_leader and not manager.ready
    holding = True
    assert manager.ready
    await manager.shutdown()
    await task
