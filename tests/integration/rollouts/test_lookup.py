"""The run in force as every Kyma reconcile reads it (``rollouts.lookup.RunIndex``), on real informers.

The gap between a channel move and its run: from the release-meta update on, a channel a policy
selects is held (the run as it will be created, nothing released) until the real run is in the
informer, or at most ``hold_for`` seconds. A channel no policy selects, or one moved back, is never
held. The clock of the hold is a controllable one; the informers watch the session's KCP.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from kyma_operator.api.modulerollout import ModuleRollout, Phase
from kyma_operator.api.resources import MODULE_RELEASE_METAS, MODULE_ROLLOUTS
from kyma_operator.rollouts.feature import policy_informer, rollout_informer
from kyma_operator.rollouts.lookup import RunIndex
from kyma_operator.rollouts.starter import run_body
from kyma_operator.rollouts.target import Reason, target
from kyma_operator.runtime.clock import FakeClock
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from tests.integration.kyma_operator.modules_env import MODULE
from tests.integration.rollouts.fleet import NEW, OLD, create_policy, policy_body, publish, set_channel
from tests.polling import eventually


def created(run: ModuleRollout | None) -> ModuleRollout | None:
    """``run`` if it is one the API server stored (a hold has no uid)."""
    return run if run is not None and run.metadata.uid is not None else None


def towards(run: ModuleRollout | None, version: str) -> ModuleRollout | None:
    return run if run is not None and run.spec.to_version == version else None


@contextlib.asynccontextmanager
async def running(*informers: Informer) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(i.run()) for i in informers]
    try:
        for informer in informers:
            assert await informer.wait_synced(15.0)
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_policy_selected_channel_move_holds_until_its_run_exists(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    ns = kcp_namespace
    await publish(kcp_client, ns, {"regular": OLD, "fast": OLD})
    await create_policy(kcp_client, ns)  # selects regular only
    clock = FakeClock()
    runs, policies = rollout_informer(kcp_client, ns), policy_informer(kcp_client, ns)
    metas = Informer(kcp_client, MODULE_RELEASE_METAS, namespace=ns, name="test-metas")
    index = RunIndex(runs, policies=policies, release_metas=metas, clock=clock, hold_for=30.0)
    lookup = index.lookup(ns)
    async with running(runs, policies, metas):
        assert lookup(MODULE, "regular") is None

        await set_channel(kcp_client, ns, {"regular": NEW, "fast": NEW})
        held = await eventually(lambda: lookup(MODULE, "regular"), "regular held from the move on")
        assert (held.spec.from_version, held.spec.to_version) == (OLD, NEW)
        assert held.status.phase is Phase.PROGRESSING and held.status.frontier.threshold == 0.0
        decision = target(held, NEW, {}, "k0", OLD)
        assert (decision.version, decision.reason) == (OLD, Reason.HELD)
        assert lookup(MODULE, "fast") is None  # no policy selects fast: today's behaviour

        # the hold ends when the real run appears (the informer's run decides from then on) ...
        policy = policy_body(ns)
        await kcp_client.create(MODULE_ROLLOUTS, run_body(ns, MODULE, "regular", OLD, NEW, policy))
        real = await eventually(lambda: created(lookup(MODULE, "regular")), "the created run in force")
        assert real.name == f"{MODULE}-regular-{NEW}"

        # ... or after hold_for, when no run was created (e.g. the API server refused it)
        await set_channel(kcp_client, ns, {"regular": "1.2.0", "fast": NEW})
        held = await eventually(lambda: towards(lookup(MODULE, "regular"), "1.2.0"), "regular held for 1.2.0")
        assert held.spec.from_version == NEW and held.metadata.uid is None
        clock.advance(30.0)
        after = lookup(MODULE, "regular")
        assert after is not None and (after.name, after.spec.to_version) == (real.name, NEW)

        # a channel moved back is no rollout: nothing held
        await set_channel(kcp_client, ns, {"regular": OLD, "fast": NEW})

        def moved_back() -> bool:
            meta = metas.get(ns, MODULE)
            return meta is not None and meta["spec"]["channels"][0]["version"] == OLD

        await eventually(moved_back, "the move back seen")
        found = lookup(MODULE, "regular")
        assert found is not None and found.spec.to_version == NEW  # the real run, not a hold for 1.0.0
