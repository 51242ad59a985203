"""The leader's own fleet view for rollouts (``rollouts/fleet_view.FleetView``, shard-scoped caches)
runs only while a run is unfinished or the starter asked lately, against a real API server: it
lists nothing while no run is going, lists the whole fleet when a run appears or a start is asked,
and stops and drops its caches ``idle_grace`` (an injected clock) after the last need, or at once
when the leader stops it. The starter asks only when a policy makes it count installed versions."""

from __future__ import annotations

import asyncio
import contextlib

from kyma_operator.api.resources import KYMAS, MODULE_RELEASE_METAS, MODULE_ROLLOUTS
from kyma_operator.rollouts.feature import policy_informer, rollout_informer
from kyma_operator.rollouts.fleet_view import FleetView, fleet_informers
from kyma_operator.rollouts.starter import FLEET_VIEW_LISTING, RolloutStarter, run_body
from kyma_operator.runtime.clock import FakeClock
from kyma_operator.runtime.informer import FuncHandler, Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.request import Request
from tests.integration.kyma_operator.modules_env import MODULE
from tests.integration.rollouts.fleet import NEW, OLD, create_policy, kyma_body, policy_body, publish
from tests.polling import eventually

GRACE = 60.0
KYMAS_IN_FLEET = 3


async def test_the_fleet_view_runs_while_a_run_is_unfinished_or_a_start_is_asked(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    ns = kcp_namespace
    for i in range(KYMAS_IN_FLEET):
        await kcp_client.create(KYMAS, kyma_body(ns, f"k{i}"))
    clock = FakeClock()
    runs = rollout_informer(kcp_client, ns)
    kymas, manifests = fleet_informers(kcp_client, ns)
    changes: list[bool] = []
    view = FleetView(kymas, manifests, runs, clock=clock, idle_grace=GRACE, on_running=changes.append)
    decided_on_completion: list[int] = []

    def completed(_old: JSON, new: JSON) -> None:
        if (new.get("status") or {}).get("phase") == "Completed":
            decided_on_completion.append(view.decisions)  # the view decides after this handler

    runs.add_handler(FuncHandler(on_update=completed))
    runs_task = asyncio.create_task(runs.run())
    view_task = asyncio.create_task(view.run())

    def listed() -> bool:
        return view.running and kymas.synced.is_set() and manifests.synced.is_set()

    def stopped() -> bool:
        return not view.running and not kymas.synced.is_set() and len(kymas) == 0

    try:
        assert await runs.wait_synced(30)
        await eventually(lambda: view.decisions >= 1, "the view's first decision")
        assert (view.running, kymas.relists, manifests.relists) == (False, 0, 0), "no run: nothing listed"

        # a run appears (no status yet: unfinished): the whole fleet is listed
        body = run_body(ns, MODULE, "regular", OLD, NEW, policy_body(ns))
        run = await kcp_client.create(MODULE_ROLLOUTS, body)
        await eventually(listed, "the view listed after a run appeared", within=30)
        assert len(kymas) == KYMAS_IN_FLEET and changes == [True]

        # the run finishes: the view runs on for GRACE, then stops and drops its caches
        run["status"] = {"phase": "Completed"}
        await kcp_client.update_status(MODULE_ROLLOUTS, run)
        await eventually(lambda: decided_on_completion, "the run informer saw the run Completed", within=30)
        await eventually(lambda: view.decisions > decided_on_completion[0], "the view's decision on it")
        clock.advance(GRACE - 1)
        assert listed(), "stopped before its grace ended"
        clock.advance(1)
        await eventually(stopped, "the view stopped GRACE after the run finished")
        assert changes == [True, False]

        # the starter asks (a channel moved under a policy): listed again, stopped GRACE later
        view.demand()
        await eventually(listed, "the view listed on demand", within=30)
        assert len(kymas) == KYMAS_IN_FLEET and kymas.relists == 2
        clock.advance(GRACE)
        await eventually(stopped, "the view stopped GRACE after the demand")

        # losing the lead cancels the runnable: stopped and emptied at once
        view.demand()
        await eventually(listed, "the view listed on demand again", within=30)
        view_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await view_task
        assert stopped() and changes == [True, False, True, False, True, False]
        assert view.starts == 3
    finally:
        for task in (view_task, runs_task):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_the_starter_asks_for_the_fleet_view_only_when_a_policy_makes_it_count(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    ns = kcp_namespace
    await publish(kcp_client, ns, {"regular": NEW})
    runs, policies = rollout_informer(kcp_client, ns), policy_informer(kcp_client, ns)
    release_metas = Informer(kcp_client, MODULE_RELEASE_METAS, namespace=ns)
    kymas, manifests = fleet_informers(kcp_client, ns)
    view = FleetView(kymas, manifests, runs, clock=FakeClock(), idle_grace=GRACE)
    asked: list[str] = []

    def fleet_needed() -> None:
        asked.append("asked")
        view.demand()

    starter = RolloutStarter(
        kcp_client,
        release_metas=release_metas,
        policies=policies,
        rollouts=runs,
        manifests=manifests,
        on_fleet_needed=fleet_needed,
    )
    tasks = [asyncio.create_task(i.run()) for i in (runs, policies, release_metas)]
    tasks.append(asyncio.create_task(view.run()))
    request = Request(ns, MODULE)
    try:
        for informer in (runs, policies, release_metas):
            assert await informer.wait_synced(30)
        # the channel's version, no policy for it: decided without the fleet
        result = await starter.reconcile(request)
        assert (result.requeue_after, asked, view.starts) == (None, [], 0)

        # a policy for the channel: the start must count what is installed below its version
        await create_policy(kcp_client, ns)
        await eventually(lambda: policies.list(ns), "the policy in the informer", within=30)
        result = await starter.reconcile(request)
        assert (result.requeue_after, result.reason, asked) == (1.0, FLEET_VIEW_LISTING, ["asked"])
        await eventually(manifests.synced.is_set, "the fleet view listed on the starter's demand", within=30)
        result = await starter.reconcile(request)
        # nothing installed below (no Manifest at all): nobody to protect, no run
        assert (result.requeue_after, asked, starter.created, view.starts) == (None, ["asked"], [], 1)
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
