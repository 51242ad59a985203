"""Controllers under a Manager against a real API server: reconciles, retries, requeue_after,
intake source, health/readiness/metrics endpoints, Lease leader election and takeover."""

from __future__ import annotations

import asyncio
import itertools
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from kyma_operator.runtime import (
    Controller,
    Informer,
    KubeClient,
    LeaderElectionConfig,
    LeaderElectionLost,
    LeaderElector,
    Manager,
    NotFound,
    Request,
    Result,
)
from kyma_operator.runtime.intake import Intake
from kyma_operator.runtime.resources import CONFIGMAPS, LEASES, Resource
from tests.controlplane.cluster import APIServer
from tests.polling import eventually


class Recording:
    """Records reconcile start times; scripted failures / requeue_after per object name."""

    def __init__(self, informer: Informer, fail_times: dict[str, int] | None = None) -> None:
        self.informer = informer
        self.fail_times = dict(fail_times or {})
        self.requeue_once: dict[str, float] = {}
        self.calls: dict[str, list[float]] = {}

    async def reconcile(self, request: Request) -> Result:
        self.calls.setdefault(request.name, []).append(time.monotonic())
        if self.fail_times.get(request.name, 0) > 0:
            self.fail_times[request.name] -= 1
            raise RuntimeError(f"scripted failure for {request}")
        if request.name in self.requeue_once:
            return Result(requeue_after=self.requeue_once.pop(request.name))
        return Result()


def configmap(name: str, namespace: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "data": {}}


@asynccontextmanager
async def started(manager: Manager) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(manager.run())
    try:
        await eventually(lambda: manager.started.is_set() or task.done(), what="manager start")
        if task.done():
            task.result()
        yield task
    finally:
        await manager.shutdown()
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def new_manager(
    client: KubeClient, namespace: str, name: str, leader: LeaderElectionConfig | None = None
) -> tuple[Manager, Recording, Controller]:
    manager = Manager(client, name=name, namespace=namespace, leader_election=leader, health_port=0)
    informer = manager.add_informer(Informer(client, CONFIGMAPS, namespace=namespace))
    reconciler = Recording(informer)
    controller = Controller(name, reconciler, workers=2)
    controller.watch(informer)
    manager.add_controller(controller)
    return manager, reconciler, controller


async def http_get(port: int | None, path: str) -> httpx.Response:
    assert port is not None
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
        return await http.get(path)


async def test_controller_reconciles_retries_with_backoff_and_honours_requeue_after(
    client: KubeClient, namespace: str
) -> None:
    manager, reconciler, controller = new_manager(client, namespace, "cm-controller")
    reconciler.fail_times["flaky"] = 3
    reconciler.requeue_once["periodic"] = 0.3
    intake = Intake("listener event", capacity=4)
    controller.add_source(intake)
    async with started(manager):
        await eventually(lambda: manager.ready, what="readiness")
        await client.create(CONFIGMAPS, configmap("flaky", namespace))
        await client.create(CONFIGMAPS, configmap("periodic", namespace))
        await eventually(lambda: len(reconciler.calls.get("flaky", [])) == 4, what="3 retries then success")
        await eventually(lambda: len(reconciler.calls.get("periodic", [])) == 2, what="requeue_after")
        assert intake.offer(Request(namespace, "from-listener"))
        await eventually(lambda: "from-listener" in reconciler.calls, what="intake request reconciled")

        flaky = reconciler.calls["flaky"]
        gaps = [b - a for a, b in itertools.pairwise(flaky)]
        # per-item exponential backoff: 5 ms, 10 ms, 20 ms (lower bounds; scheduling adds delay)
        for gap, minimum in zip(gaps, (0.005, 0.01, 0.02), strict=True):
            assert gap >= minimum * 0.9
        assert controller.queue.num_requeues(Request(namespace, "flaky")) == 0
        periodic = reconciler.calls["periodic"]
        assert periodic[1] - periodic[0] >= 0.3 * 0.95

        assert (await http_get(manager.health_port, "/healthz")).status_code == 200
        ready = await http_get(manager.health_port, "/readyz")
        assert ready.status_code == 200, ready.text
        metrics = (await http_get(manager.health_port, "/metrics")).text
        labels = 'controller="cm-controller",name="cm-controller"'
        for family in ("workqueue_depth", "workqueue_adds_total", "workqueue_retries_total"):
            assert f"{family}{{{labels}}}" in metrics
        assert f"workqueue_queue_duration_seconds_count{{{labels}}}" in metrics
        assert f"workqueue_work_duration_seconds_count{{{labels}}}" in metrics
        assert f"workqueue_unfinished_work_seconds{{{labels}}}" in metrics
        assert f"workqueue_longest_running_processor_seconds{{{labels}}}" in metrics
        assert 'controller_runtime_reconcile_total{controller="cm-controller",result="error"} 3.0' in metrics
        assert (
            'controller_runtime_reconcile_total{controller="cm-controller",result="requeue_after"} 1.0'
            in metrics
        )
        assert 'controller_runtime_reconcile_errors_total{controller="cm-controller"} 3.0' in metrics
        assert 'controller_runtime_max_concurrent_reconciles{controller="cm-controller"} 2.0' in metrics
        assert "controller_runtime_reconcile_time_seconds_bucket" in metrics
        assert (await http_get(manager.health_port, "/nope")).status_code == 404
    assert not manager.ready


def lease_config(namespace: str, identity: str, *, release: bool = True) -> LeaderElectionConfig:
    return LeaderElectionConfig(
        lease_name="runtime-test",
        lease_namespace=namespace,
        identity=identity,
        lease_duration=2.0,
        renew_deadline=1.5,
        retry_period=0.3,
        release_on_cancel=release,
    )


async def wait_one_leader(managers: list[Manager]) -> Manager:
    await eventually(lambda: any(m.is_leader for m in managers), what="a leader")
    leaders = [m for m in managers if m.is_leader]
    assert len(leaders) == 1
    return leaders[0]


@pytest.mark.parametrize("release", [True, False], ids=["released", "expired"])
async def test_exactly_one_leader_and_takeover_after_it_stops(
    client: KubeClient, namespace: str, release: bool
) -> None:
    first, first_rec, _ = new_manager(
        client, namespace, "first", lease_config(namespace, "first", release=release)
    )
    second, second_rec, _ = new_manager(
        client, namespace, "second", lease_config(namespace, "second", release=release)
    )
    async with started(second) as second_task, started(first) as first_task:
        leader = await wait_one_leader([first, second])
        follower = second if leader is first else first
        leader_rec, follower_rec = (first_rec, second_rec) if leader is first else (second_rec, first_rec)
        await eventually(lambda: leader.ready, what="leader readiness")
        assert (await http_get(leader.health_port, "/readyz")).status_code == 200
        follower_ready = await http_get(follower.health_port, "/readyz")
        assert follower_ready.status_code == 503 and "leader=False" in follower_ready.text
        assert (await http_get(follower.health_port, "/healthz")).status_code == 200
        metrics = (await http_get(leader.health_port, "/metrics")).text
        assert 'leader_election_master_status{name="runtime-test"} 1.0' in metrics
        follower_metrics = (await http_get(follower.health_port, "/metrics")).text
        assert 'leader_election_master_status{name="runtime-test"} 0.0' in follower_metrics

        await client.create(CONFIGMAPS, configmap("one", namespace))
        await eventually(lambda: "one" in leader_rec.calls, what="the leader reconciles")
        assert "one" not in follower_rec.calls, "only the leader runs controllers"
        lease = await client.get(LEASES, "runtime-test", namespace)
        assert lease["spec"]["holderIdentity"] == leader.name
        assert lease["spec"]["leaseDurationSeconds"] == 2

        await leader.shutdown()
        assert not leader.is_leader
        right_after = (await client.get(LEASES, "runtime-test", namespace))["spec"]
        if release:  # released (empty holder, 1 s) or already taken over
            assert right_after["holderIdentity"] in ("", follower.name)
        else:  # left as is: the follower must wait for it to expire
            assert right_after["holderIdentity"] == leader.name
        await eventually(lambda: follower.is_leader, within=10, what="takeover")
        lease_after = await client.get(LEASES, "runtime-test", namespace)
        assert lease_after["spec"]["holderIdentity"] == follower.name
        await eventually(lambda: follower.ready, what="new leader readiness")
        assert (await http_get(follower.health_port, "/readyz")).status_code == 200
        await client.create(CONFIGMAPS, configmap("two", namespace))
        await eventually(lambda: "two" in follower_rec.calls, what="the new leader reconciles")
        assert not first_task.done() or first_task.exception() is None
        assert not second_task.done() or second_task.exception() is None
    lease = await client.get(LEASES, "runtime-test", namespace)
    assert lease["spec"]["leaseTransitions"] >= 1
    if release:
        assert lease["spec"]["holderIdentity"] == ""


async def test_losing_the_lease_stops_controllers_and_fails_run(client: KubeClient, namespace: str) -> None:
    manager, reconciler, _ = new_manager(client, namespace, "victim", lease_config(namespace, "victim"))
    task = asyncio.create_task(manager.run())
    try:
        await eventually(lambda: manager.is_leader, what="leadership")
        lease = await client.get(LEASES, "runtime-test", namespace)
        lease["spec"].update({"holderIdentity": "intruder", "leaseDurationSeconds": 3600})
        await client.update(LEASES, lease)
        with pytest.raises(LeaderElectionLost):
            await asyncio.wait_for(task, 10)
        assert not manager.is_leader and not manager.ready
    finally:
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    lease = await client.get(LEASES, "runtime-test", namespace)
    assert lease["spec"]["holderIdentity"] == "intruder", "a lost lease must not be released"
    del reconciler


async def test_leader_only_runnable_and_always_runnable(client: KubeClient, namespace: str) -> None:
    manager = Manager(
        client,
        name="runnables",
        namespace=namespace,
        leader_election=lease_config(namespace, "runnables"),
        health_port=None,
    )
    events: list[str] = []

    def runnable(tag: str) -> Callable[[], Any]:
        async def run() -> None:
            events.append(f"{tag}-start")
            try:
                await asyncio.Event().wait()
            finally:
                events.append(f"{tag}-stop")

        return run

    manager.add_runnable(runnable("leader"))
    manager.add_runnable(runnable("always"), leader_only=False)
    async with started(manager):
        await eventually(lambda: "leader-start" in events, what="leader runnable")
        assert events.index("always-start") < events.index("leader-start")
        assert manager.health_port is None
    assert events[-2:] == ["leader-stop", "always-stop"], "leader work stops before the rest"


async def test_a_ready_check_holds_readyz_until_the_serving_runnable_is_up(
    client: KubeClient, namespace: str
) -> None:
    """Leadership comes before a leader-only server is bound: readiness waits for the server too."""
    manager = Manager(
        client, name="ready-check", namespace=namespace, leader_election=lease_config(namespace, "rc")
    )
    bound = asyncio.Event()
    release = asyncio.Event()

    async def server() -> None:
        await release.wait()  # binding its port takes as long as it takes
        bound.set()
        await asyncio.Event().wait()

    manager.add_runnable(server)
    manager.add_ready_check("listener_serving", bound.is_set)
    async with started(manager):
        await eventually(lambda: manager.is_leader and manager.synced, what="leading and synced")
        assert not manager.ready
        waiting = await http_get(manager.health_port, "/readyz")
        assert waiting.status_code == 503 and "listener_serving=False" in waiting.text, waiting.text
        release.set()
        await eventually(lambda: manager.ready, what="ready once the server is bound")
        ready = await http_get(manager.health_port, "/readyz")
        assert ready.status_code == 200 and "listener_serving=True" in ready.text, ready.text


SIGNAL_CHILD = """
import asyncio, sys
from kyma_operator.runtime import KubeClient, LeaderElectionConfig, Manager

async def main(kubeconfig, namespace):
    client = KubeClient.from_kubeconfig_file(kubeconfig)
    config = LeaderElectionConfig("sigterm", namespace, identity="child", lease_duration=15.0,
                                  renew_deadline=10.0, retry_period=0.3)
    manager = Manager(client, name="child", namespace=namespace, leader_election=config, health_port=None)
    await manager.run_until_signal()
    await client.close()
    print("clean exit", flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_sigterm_shuts_down_gracefully_and_releases_the_lease(
    client: KubeClient, namespace: str, kcp: Any
) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        SIGNAL_CHILD,
        str(kcp.kubeconfig_path),
        namespace,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:

        async def holder() -> str | None:
            try:
                lease = await client.get(LEASES, "sigterm", namespace)
            except NotFound:
                return None
            return str(lease["spec"].get("holderIdentity"))

        async def child_leads() -> bool:
            return await holder() == "child"

        await eventually(child_leads, within=30, what="the child to lead")
        child.send_signal(signal.SIGTERM)
        # a bound, not a wait: under load the API server may answer the release slowly
        stdout, stderr = await asyncio.wait_for(child.communicate(), 60)
        assert child.returncode == 0, stderr.decode()
        assert b"clean exit" in stdout
        # released: empty holder, so a successor need not wait the 15 s lease out
        lease = await client.get(LEASES, "sigterm", namespace)
        assert lease["spec"]["holderIdentity"] == "" and lease["spec"]["leaseDurationSeconds"] == 1
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()


class LeaseAnswerUnseen(KubeClient):
    """The real client, except that the answer to creating a Lease never reaches its caller: the
    API server has written the Lease, the candidate is stopped before it learns so (what a SIGTERM
    right after a slow acquire looks like under load)."""

    written: asyncio.Event

    async def create(self, res: Resource, body: dict[str, Any], *, field_manager: str | None = None) -> Any:
        created = await super().create(res, body, field_manager=field_manager)
        if res == LEASES:
            self.written.set()
            await asyncio.Event().wait()
        return created


async def test_a_candidate_stopped_before_it_saw_its_acquire_releases_the_lease(
    client: KubeClient, namespace: str, kcp: APIServer
) -> None:
    unseen = LeaseAnswerUnseen.from_kubeconfig_file(kcp.kubeconfig_path)
    assert isinstance(unseen, LeaseAnswerUnseen)
    unseen.written = asyncio.Event()
    config = LeaderElectionConfig(
        "unseen", namespace, identity="candidate", lease_duration=15.0, renew_deadline=10.0, retry_period=0.3
    )
    elector = LeaderElector(unseen, config)
    task = asyncio.create_task(elector.run())
    try:
        await eventually(unseen.written.is_set, what="the Lease written")
        assert (await client.get(LEASES, "unseen", namespace))["spec"]["holderIdentity"] == "candidate"
        assert not elector.is_leader, "the candidate has not seen the answer"
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        # released: a successor need not wait the 15 s out
        lease = await client.get(LEASES, "unseen", namespace)
        assert lease["spec"]["holderIdentity"] == "" and lease["spec"]["leaseDurationSeconds"] == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await unseen.close()


class StoppedAsARenewalLands(KubeClient):
    """The real client; once ``stop`` is set, the next Lease update's answer arrives in the same
    event-loop turn as a cancel of ``stop`` (a SIGTERM while a renewal's answer is on its way)."""

    stop: asyncio.Task[None] | None = None

    async def update(self, res: Resource, body: dict[str, Any], *, field_manager: str | None = None) -> Any:
        updated = await super().update(res, body, field_manager=field_manager)
        if res == LEASES and self.stop is not None:
            asyncio.get_running_loop().call_soon(self.stop.cancel)
            self.stop = None
        return updated


async def test_a_leader_stopped_as_its_renewal_lands_stops_and_releases_the_lease(
    client: KubeClient, namespace: str, kcp: APIServer
) -> None:
    """fresh5 (test_replay_failover): a SIGTERM'd operator took 30 s to exit because its elector,
    cancelled in the turn its renewal's answer came, went on renewing. Python 3.11's
    ``asyncio.wait_for`` returns the inner result when a cancel arrives after the inner call has
    finished, swallowing the cancel; the Manager then waited its 30 s grace for the elector."""
    racing = StoppedAsARenewalLands.from_kubeconfig_file(kcp.kubeconfig_path)
    assert isinstance(racing, StoppedAsARenewalLands)
    config = LeaderElectionConfig(
        "racing", namespace, identity="leader", lease_duration=15.0, renew_deadline=10.0, retry_period=0.2
    )
    elector = LeaderElector(racing, config)
    task = asyncio.create_task(elector.run())
    try:

        async def leads() -> bool:
            try:
                lease = await client.get(LEASES, "racing", namespace)
            except NotFound:
                return False
            return bool(lease["spec"].get("holderIdentity") == "leader")

        await eventually(leads, what="the elector leads", within=30)
        racing.stop = task  # the next renewal's answer comes with the cancel
        await eventually(lambda: racing.stop is None, what="a renewal answered", within=30)
        await eventually(task.done, what="the cancelled elector ended", within=10)
        assert task.cancelled()
        lease = await client.get(LEASES, "racing", namespace)
        assert lease["spec"]["holderIdentity"] == "" and lease["spec"]["leaseDurationSeconds"] == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await racing.close()
